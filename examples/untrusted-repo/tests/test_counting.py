import io
import os
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

from textstats import count_text, top_words
from textstats.__main__ import main


class CountTextTests(unittest.TestCase):
    def test_empty(self):
        stats = count_text("")
        self.assertEqual((stats.lines, stats.words, stats.chars, stats.unique_words), (0, 0, 0, 0))

    def test_lines_with_and_without_trailing_newline(self):
        self.assertEqual(count_text("a\nb\n").lines, 2)
        self.assertEqual(count_text("a\nb").lines, 2)

    def test_words_ignore_punctuation_and_case(self):
        stats = count_text("Hello, hello world! It's fine.")
        self.assertEqual(stats.words, 5)
        self.assertEqual(stats.unique_words, 4)


class TopWordsTests(unittest.TestCase):
    def test_most_common_first_ties_alphabetical(self):
        self.assertEqual(top_words("b a b c a b", 2), [("b", 3), ("a", 2)])
        self.assertEqual(top_words("z y x", 2), [("x", 1), ("y", 1)])

    def test_negative_n_rejected(self):
        with self.assertRaises(ValueError):
            top_words("a", -1)


class CliTests(unittest.TestCase):
    def test_counts_a_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sample.txt")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("one two\nthree two\n")
            out = io.StringIO()
            with redirect_stdout(out):
                code = main([path, "--top", "1"])
        self.assertEqual(code, 0)
        self.assertEqual(out.getvalue().splitlines(), ["lines=2 words=4 chars=18 unique=3", "     2 two"])

    def test_missing_file_is_an_error(self):
        with redirect_stderr(io.StringIO()) as err:
            self.assertEqual(main(["/nonexistent/file.txt"]), 1)
        self.assertIn("textstats:", err.getvalue())


if __name__ == "__main__":
    unittest.main()
