"""Command line: ``python3 -m textstats FILE [--top N]``."""

from __future__ import annotations

import argparse
import sys

from .counting import count_text, top_words


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="textstats", description="Count lines, words and characters.")
    parser.add_argument("file", help="a text file, or - for standard input")
    parser.add_argument("--top", type=int, default=0, metavar="N", help="also list the N most common words")
    args = parser.parse_args(argv)
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        print(f"textstats: {exc}", file=sys.stderr)
        return 1
    stats = count_text(text)
    print(f"lines={stats.lines} words={stats.words} chars={stats.chars} unique={stats.unique_words}")
    for word, count in top_words(text, args.top):
        print(f"{count:6d} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
