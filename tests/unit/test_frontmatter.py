"""The parser-free reading of simple frontmatter gives exactly what YAML gives.

`frontmatter._simple_mapping` skips the YAML parser for blocks of simple
``key: value`` lines (issue 6 bench (j)); for every block it accepts, the result
must equal ``yaml.safe_load``'s, and blocks it cannot read exactly must be left to
the parser. Samples: hand-written edge cases, every combination of a set of value
shapes, and the frontmatter of the shared corpus's skills.
"""

from __future__ import annotations

import itertools
import time
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


# --- bounds (issue 13 §4): frontmatter is untrusted project content ------------------

# Nine levels of ten: 10**9 leaves once expanded, from a few hundred bytes.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
RECURSIVE_ALIAS = "name: loop\nself: &self [*self]\n"
# Fast enough on a busy 2-core machine by orders of magnitude; only a safety net:
# the assertions that matter are the errors.
SAFETY_NET_S = 20.0

LOADERS = [frontmatter._SAFE_LOADER, yaml.SafeLoader]


def fenced(block: str) -> str:
    return f"---\n{block}---\nbody\n"


def refused(text: str) -> frontmatter.FrontmatterError:
    start = time.monotonic()
    data, body, error = parse_frontmatter(text)
    assert time.monotonic() - start < SAFETY_NET_S
    assert data is None and body == "body\n"
    assert error is not None
    return error


def expanded_leaves(value, memo=None) -> int:
    """Leaves of ``value`` as a consumer walking it would see them (shared parts counted
    each time), computed without walking them."""
    memo = {} if memo is None else memo
    if id(value) not in memo:
        children = value.values() if isinstance(value, dict) else value
        if isinstance(value, (dict, list)):
            memo[id(value)] = sum(expanded_leaves(child, memo) for child in children)
        else:
            memo[id(value)] = 1
    return memo[id(value)]


def test_control_an_unbounded_load_of_the_alias_bomb_gives_a_billion_leaves():
    data = yaml.safe_load(ALIAS_BOMB)  # what frontmatter used to hand its callers
    assert expanded_leaves(data["i"]) == 10**9


def test_control_an_unbounded_load_of_a_recursive_alias_contains_itself():
    data = yaml.safe_load(RECURSIVE_ALIAS)
    assert data["self"][0] is data["self"]


def test_an_alias_bomb_is_refused_before_it_is_constructed():
    error = refused(fenced("name: bomb\n" + ALIAS_BOMB))
    assert f"more than {frontmatter.MAX_NODES} YAML nodes (alias expansion?)" in error.message
    assert error.message.startswith("invalid YAML: ")
    assert 3 <= error.line <= 11  # inside the block, on a line of the bomb


@pytest.mark.parametrize("loader", LOADERS, ids=["default", "pure-python"])
def test_both_parsers_refuse_the_alias_bomb_and_the_recursive_alias(loader):
    data, error = frontmatter._parse(ALIAS_BOMB.split("\n"), lenient=True, loader=loader)
    assert data is None and error is not None and "alias expansion" in error.message
    data, error = frontmatter._parse(RECURSIVE_ALIAS.split("\n"), lenient=True, loader=loader)
    assert data is None and error is not None
    assert error.message == "invalid YAML: recursive YAML alias (under 'self')"
    assert error.line == 3


def test_a_recursive_alias_is_refused_with_its_line():
    error = refused(fenced(RECURSIVE_ALIAS))
    assert error.message == "invalid YAML: recursive YAML alias (under 'self')"
    assert error.line == 3


def test_a_mapping_that_merges_itself_is_refused():
    error = refused(fenced("name: x\nm: &m\n  a: 1\n  <<: *m\n"))
    assert "recursive YAML alias" in error.message


@pytest.mark.parametrize(
    "block",
    [
        "name: deep\nvalue: " + "[" * 100 + "]" * 100 + "\n",
        "name: deep\nvalue: " + "{a: " * 100 + "x" + "}" * 100 + "\n",
        "name: deep\n" + "".join(" " * i + f"k{i}:\n" for i in range(100)) + " " * 100 + "x: y\n",
    ],
    ids=["flow-lists", "flow-mappings", "indented-mappings"],
)
def test_nesting_deeper_than_the_bound_is_refused(block):
    error = refused(fenced(block))
    assert f"nested deeper than {frontmatter.MAX_DEPTH} levels" in error.message
    assert error.line >= 3


def test_deep_indentation_is_not_read_recursively_by_the_parser_free_path():
    # It used to recurse one Python frame per level: a RecursionError out of load_skills.
    lines = [" " * i + f"k{i}:" for i in range(1_200)]
    assert frontmatter._simple_mapping(lines, lenient=False) is None


@pytest.mark.parametrize("loader", LOADERS, ids=["default", "pure-python"])
def test_nesting_past_the_parsers_own_limit_is_an_error_not_a_crash(loader):
    lines = ["name: deep", "value: " + "[" * 5_000 + "]" * 5_000]
    start = time.monotonic()
    data, error = frontmatter._parse(lines, lenient=True, loader=loader)
    assert time.monotonic() - start < SAFETY_NET_S
    assert data is None and error is not None and error.message.startswith("invalid YAML: ")
    # libyaml: "exceeded maximum nesting depth"; PyYAML: "nested too deeply".
    assert "nest" in error.message


def test_nesting_at_the_bound_still_loads():
    depth = frontmatter.MAX_DEPTH - 1  # the root mapping is one level
    data, _body, error = parse_frontmatter(fenced("value: " + "[" * depth + "]" * depth + "\n"))
    assert error is None and data is not None


def test_too_many_nodes_are_refused():
    items = ", ".join(["x"] * (frontmatter.MAX_NODES + 10))
    error = refused(fenced(f"name: many\ntags: [{items}]\n"))
    assert f"more than {frontmatter.MAX_NODES} YAML nodes" in error.message
    assert "(under 'tags')" in error.message


def test_too_many_simple_lines_are_counted_by_the_parser_and_refused():
    # Short distinct keys with null values: over the node bound, under the size cap.
    keys = itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=3)
    lines = "".join(f"{''.join(key)}:\n" for key in itertools.islice(keys, frontmatter.MAX_NODES))
    assert frontmatter._simple_mapping(lines.split("\n"), lenient=False) is None
    error = refused(fenced(lines))
    assert f"more than {frontmatter.MAX_NODES} YAML nodes" in error.message


def test_the_parser_free_path_reads_one_level_of_nesting_and_leaves_deeper_to_the_parser():
    assert simple("metadata:\n  a: b") == {"metadata": {"a": "b"}}
    assert simple("metadata:\n  nested:\n    deep: x") is None
    data, _body, error = parse_frontmatter(fenced("metadata:\n  nested:\n    deep: x\n"))
    assert error is None and data == {"metadata": {"nested": {"deep": "x"}}}


def test_a_frontmatter_with_a_few_aliases_still_loads():
    # Control: anchors, aliases and merge keys as authors use them are untouched.
    block = (
        "name: shared\n"
        "description: Uses anchors.\n"
        "defaults: &defaults\n  shell: bash\n  timeout: 30\n"
        "tools: &tools [Read, Grep]\n"
        "metadata:\n  build:\n    <<: *defaults\n    timeout: 60\n  lint: *defaults\n"
        "allowed: *tools\n"
    )
    data, body, error = parse_frontmatter(fenced(block))
    assert error is None and body == "body\n"
    assert data == yaml.safe_load(block)
    assert data["metadata"]["build"] == {"shell": "bash", "timeout": 60}
    assert data["metadata"]["lint"] == {"shell": "bash", "timeout": 30}
    assert data["allowed"] == ["Read", "Grep"]


def test_a_block_longer_than_the_cap_is_refused_before_parsing():
    block = "description: " + "x" * frontmatter.MAX_BLOCK_CHARS + "\n"
    error = refused(fenced(block))
    assert f"more than {frontmatter.MAX_BLOCK_CHARS}" in error.message and error.line == 2


@pytest.mark.parametrize(
    "value,message",
    [
        ("2024-13-45", "month must be in 1..12"),
        ("2024-01-01 25:00:00", "hour must be in 0..23"),
        ("1" * 5_000, "integer string conversion"),
        ("!!bool maybe", "'maybe' is not a valid bool"),
        ("!!timestamp soon", "'soon' is not a valid timestamp"),
        ("!!int", "'' is not a valid int"),
        ("!!float x", "could not convert string to float"),
    ],
)
def test_a_value_that_does_not_fit_its_tag_is_an_error_with_its_line(value, message):
    # The constructors raise ValueError, KeyError, AttributeError, IndexError…, which
    # used to escape parse_frontmatter (and load_skills).
    error = refused(fenced(f"name: x\nmetadata:\n  a: 1\n  when: {value}\n"))
    assert error.message.startswith("invalid YAML value: ") and message in error.message
    assert error.line == 5


def test_lenient_retries_are_capped_and_the_error_says_to_quote():
    colons = "".join(f"k{i}: one: two\n" for i in range(frontmatter.MAX_LENIENT_RETRIES + 1))
    data, _body, error = parse_frontmatter(fenced("# a comment: not read fast\n" + colons))
    assert data is None and error is not None and error.line == 3
    assert "leniently after 32 lines: quote the values" in error.message
    # At the cap, every line is still read leniently.
    fewer = "".join(f"k{i}: one: two\n" for i in range(frontmatter.MAX_LENIENT_RETRIES))
    data, _body, error = parse_frontmatter(fenced("# a comment\n" + fewer))
    assert error is None and data is not None and data["k0"] == "one: two"


def test_a_large_block_of_lenient_lines_is_not_parsed_once_per_line():
    # Each retry parses the whole block again: one retry per line made this cost the
    # square of its size (37 s for 4,000 lines before the cap).
    head = "".join(f"k{i}: [x]\n" for i in range(3_000))
    colons = "".join(f"j{i}: one: two\n" for i in range(1_000))
    calls = []
    original = frontmatter._load_bounded

    def counting(text, loader):
        calls.append(len(text))
        return original(text, loader)

    frontmatter._load_bounded = counting
    try:
        error = refused(fenced("# c\n" + head + colons))
    finally:
        frontmatter._load_bounded = original
    assert "quote the values" in error.message
    assert sum(calls) <= frontmatter._LENIENT_BUDGET_CHARS + max(calls)
