"""The parser-free reading of simple frontmatter gives exactly what YAML gives.

`frontmatter._simple_mapping` skips the YAML parser for blocks of simple
``key: value`` lines (issue 6 bench (j)); for every block it accepts, the result
must equal ``yaml.safe_load``'s, and blocks it cannot read exactly must be left to
the parser. Samples: hand-written edge cases, every combination of a set of value
shapes, and the frontmatter of the shared corpus's skills.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from pi_sandbox.resources import frontmatter
from pi_sandbox.resources.frontmatter import parse_frontmatter

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "agent-skills"

VALUES = [
    "plain words here",
    "Use when the task involves PDFs. Then stop.",
    "Read Bash(git:*) Grep",
    "http://example.com/x",
    "true",
    "False",
    "yes",
    "off",
    "null",
    "~",
    "12",
    "1.5",
    "0x1F",
    "2024-01-02",
    "1_000",
    ".inf",
    "<<",
    "=",
    '"quoted text"',
    '"with \\"escape\\""',
    '"tab\\there"',
    "'single quoted'",
    "'it''s'",
    "a # comment",
    "a#not-comment",
    "[1, 2]",
    "{a: 1}",
    "&anchor value",
    "*alias",
    "!tag value",
    "- item",
    "?question",
    "% percent",
    "@at",
    "`tick`",
    "ends with colon:",
    "unicode ünïcödé ✓",
    "trailing spaces   ",
    "multiple   inner   spaces",
    "a\tb",
    "",
    "|",
    "|-",
    ">",
]


def simple(block: str, lenient: bool = False):
    return frontmatter._simple_mapping(block.split("\n"), lenient=lenient)


def assert_reads_as_yaml(block: str) -> None:
    """The fast reading of ``block`` is YAML's (values and their types), or None; a
    block YAML rejects is never read fast (strict mode)."""
    fast = simple(block)
    try:
        expected = yaml.safe_load(block)
    except yaml.YAMLError:
        assert fast is None
        return
    if fast is not None:
        expected = expected if expected is not None else {}
        assert fast == expected
        assert [type(v) for v in fast.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("key", ["description", "name", "allowed-tools", "x_1.2"])
def test_a_one_line_value_is_read_as_yaml_reads_it_or_left_to_the_parser(key, value):
    assert_reads_as_yaml(f"{key}: {value}")


@pytest.mark.parametrize("first,second", list(itertools.product(VALUES[:20], VALUES[20:])))
def test_two_keys_are_read_as_yaml_reads_them(first, second):
    assert_reads_as_yaml(f"name: {first}\ndescription: {second}\n")


BLOCKS = [
    "description: |\n  line one\n  line two",
    "description: |\n  line one\n    more indented\n  line two",
    "description: |\n  one\n\n  two",
    "description: |\n  one\n  \n  two",
    "description: |\n    deep\n    deeper",
    "description: |\n  trailing spaces  \n  kept",
    "description: |\nname: x",
    "description: |\n  text\nname: after",
    "metadata:\n  version: 1",
    'metadata:\n  version: "1.2"\n  owner: me\nname: x',
    "metadata:\n  a: b\n   c: d",
    "metadata:\n  a: b\n c: d",
    "metadata:\n  a: b\n\n  c: d",
    "metadata:\n  nested:\n    deep: x",
    "metadata:\n  - a",
    "metadata:\n  a: b: c",
    "metadata:\nname: x",
    "tags:\n- a\n- b",
    "name: x\nname: y",
    "# a comment\nname: x",
    "name: x\n\n\ndescription: y",
    "true: x",
    "1: x",
    "name:x",
    "name : x",
    " name: x",
    "name:  two spaces",
    "...",
    "---",
    "",
]


@pytest.mark.parametrize("block", BLOCKS)
def test_blocks_are_read_as_yaml_reads_them(block):
    assert_reads_as_yaml(block)


def test_the_common_shapes_take_the_fast_path():
    assert simple("name: pdf\ndescription: Read PDFs.\nlicense: MIT") == {
        "name": "pdf",
        "description": "Read PDFs.",
        "license": "MIT",
    }
    assert simple("metadata:\n  version: '2'\n  owner: me") == {
        "metadata": {"version": "2", "owner": "me"}
    }
    assert simple('description: "Quoted"\ndisable-model-invocation: true') == {
        "description": "Quoted",
        "disable-model-invocation": True,
    }
    assert simple("description: |\n  one\n  two\nname: x") == {
        "description": "one\ntwo\n",
        "name": "x",
    }


def test_the_lenient_reading_matches_the_parser_retry():
    line = "description: Fiction helper. Trigger words: character, scene, plot."
    assert simple(line) is None  # strict: left to the parser, which rejects it
    assert simple(line, lenient=True) == {
        "description": "Fiction helper. Trigger words: character, scene, plot."
    }
    # The same answer as the parser's lenient retry (fast path bypassed).
    retried, error = frontmatter._parse([line], lenient=True, loader=yaml.SafeLoader)
    assert error is None and retried == simple(line, lenient=True)


def test_an_error_names_the_line_of_the_bad_value():
    data, _body, error = parse_frontmatter("---\nname: ok\ndescription: [unclosed\n---\nbody\n")
    assert data is None
    assert error is not None and error.line == 3  # the file's line of the bad value
    assert error.message.startswith("invalid YAML: ")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not beside this checkout")
def test_corpus_frontmatter_reads_as_yaml_reads_it():
    checked = 0
    for path in sorted(CORPUS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        if not text.startswith("---"):
            continue
        split = frontmatter._split(frontmatter._normalise(text))
        if split is None:
            continue
        lines, _ = split
        fast = frontmatter._simple_mapping(lines, lenient=False)
        if fast is not None:
            assert fast == (yaml.safe_load("\n".join(lines)) or {}), path
            checked += 1
    assert checked > 0


@pytest.mark.parametrize(
    "text",
    [
        "---\nname: a\n---\nbody\n",
        "---\n---\nbody",
        "---\nname: a\n---",
        "---\nname: a\n--- \nbody",
        "---\nname: a\n----\nstill frontmatter\n---\nbody",
        "---\nname: a\nno closing fence\n",
        "--- \nname: a\n---\n",
        "---",
        "no frontmatter\n---\n",
        "---\nx: |\n  ---\n---\nbody",
    ],
)
def test_split_matches_a_line_by_line_reading(text):
    lines = text.split("\n")

    def reference():
        if not frontmatter._FENCE.match(lines[0]) or len(lines) < 2:
            return None
        for index in range(1, len(lines)):
            if frontmatter._FENCE.match(lines[index]):
                return lines[1:index], "\n".join(lines[index + 1 :])
        return None

    assert frontmatter._split(text) == reference()
