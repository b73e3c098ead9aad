"""YAML frontmatter of Markdown resources (skills, prompt templates).

A frontmatter block is a first line ``---`` and a later line ``---``; what lies
between is parsed with a real YAML parser (``yaml.safe_load``), so block scalars
(``description: |``), quoting and comments behave as YAML says (issue 6, seed 000
§3.5). A UTF-8 byte order mark is dropped and CRLF/CR line ends become LF before
parsing; the returned body uses LF.

Unquoted colons (issue 6 case 4) — **lenient**. Authors routinely write
``description: Fiction helper. Trigger words: character, scene, plot.``; YAML rejects
the second ``: `` ("mapping values are not allowed here"). When the line YAML points
at is a top-level ``key: value`` line whose value is a plain (unquoted, non-block,
non-flow) scalar, that one line is retried with the rest of the line as a
double-quoted string; this repeats for each such line, up to `MAX_LENIENT_RETRIES`
lines when the block needs the parser (the parser-free path has no such limit).
Anything else (indented continuations, broken quotes, tabs, …) stays an error,
reported with its 1-based line number in the file, and callers decide what an error
costs (a ``SKILL.md`` is skipped with a diagnostic; other skills are unaffected).

Speed (issue 6 bench (j)): most frontmatter is a few ``key: value`` lines. A block is
read without a parser when every line is blank or such a pair whose value is a plain
scalar PyYAML's own resolver reads as a string, boolean or null, a quoted string
without escapes, a ``|`` block of equally indented lines, or one level of nested
such pairs (`_simple_mapping`; anything else — deeper nesting, flow collections, comments after values, numbers, dates,
tabs, escapes — goes to the parser), which gives exactly what ``yaml.safe_load``
gives (checked against it in ``tests/unit/test_frontmatter.py``). The
parser is libyaml's (``CSafeLoader``, ten times faster) when PyYAML has it, else
PyYAML's own; their error wording differs slightly ("mapping values are not allowed
in this context" / "… here"); the line they point at does not in practice.

Bounds (issue 13 §4): frontmatter is untrusted project content, so the parser only
composes the block; `pi_sandbox.bounded_yaml.index_yaml` then walks the node graph
and the block is refused — before anything is constructed — when it has more than
`MAX_NODES` node visits (an alias counts each time it is used: no "billion laughs"),
nesting deeper than `MAX_DEPTH`, or an alias inside itself; a block longer than
`MAX_BLOCK_CHARS` is refused before parsing. The parser-free path reads at most one
level of nesting and at most `_FAST_MAX_LINES` lines, so it cannot exceed those
bounds either. A value that does not fit its tag, implicit or explicit
(``2024-13-45``, an integer of more than 4,300 digits, ``!!bool maybe``), is an
error with its line too, never an exception out of `parse_frontmatter`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from os import PathLike
from typing import Any

import yaml

from pi_sandbox.bounded_yaml import MAX_DEPTH, index_yaml

__all__ = [
    "MAX_BLOCK_CHARS",
    "MAX_LENIENT_RETRIES",
    "MAX_NODES",
    "FrontmatterError",
    "find_key_line",
    "parse_frontmatter",
    "strip_frontmatter",
]

MAX_NODES = 10_000
"""Most YAML node visits in one frontmatter block (aliases count each use; issue 13 §4).

Lower than a policy file's `pi_sandbox.bounded_yaml.MAX_NODES`: real frontmatter has
tens of nodes, and a project may plant thousands of ``SKILL.md`` files, each of which
costs up to this many visits before it is refused."""

MAX_LENIENT_RETRIES = 32
"""Most lines with an unquoted ``: `` that the parser's path retries as strings in one
block (module docstring, case 4); each retry parses the whole block again."""

# Characters the lenient retries may parse in all: a large block gets fewer retries.
_LENIENT_BUDGET_CHARS = 256 * 1024

MAX_BLOCK_CHARS = 64 * 1024
"""Longest frontmatter block read, in characters (fences excluded). Real frontmatter is
a few hundred (a skill's description is at most 1,024, seed 000 §3.6); a longer
block is refused before it is parsed, which bounds what parsing one file costs."""

# The parser-free path gives at most one value node per line plus the root (the
# walker counts values, not keys), so blocks this short stay within MAX_NODES without
# counting; longer ones go to the parser and are counted.
_FAST_MAX_LINES = MAX_NODES - 1

_FENCE = re.compile(r"^---[ \t]*$")
_PLAIN_KEY_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_][A-Za-z0-9_.-]*)[ \t]*:[ \t]+(?P<value>\S.*)$")
# Values that already have YAML structure of their own; quoting them would change
# their meaning, so they are never retried leniently.
_NOT_PLAIN_START = tuple("\"'|>[{&*!%@`#")


@dataclass(frozen=True)
class FrontmatterError:
    """Why a frontmatter block could not be read.

    Attributes:
        message: What is wrong, without the path or line.
        line: 1-based line number in the file (after BOM removal) where it was found.
    """

    message: str
    line: int


_FAST_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*):(| .*)")
_RESOLVER = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
# First characters of values an implicit resolver (bool, int, float, null, …) may claim.
_IMPLICIT_FIRST = frozenset(k for k in yaml.resolver.Resolver.yaml_implicit_resolvers if k)
_PLAIN_KEYS: dict[str, bool] = {}  # key → whether YAML reads it as that string
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
# A plain scalar starting with one of these is an indicator, or may be: left to YAML.
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _normalise(text: str) -> str:
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _split(text: str) -> tuple[list[str], str] | None:
    """Return (frontmatter lines, body) or None when there is no closed block."""
    first_end = text.find("\n")
    if not _FENCE.match(text if first_end < 0 else text[:first_end]):
        return None
    if first_end < 0:
        return None
    start = first_end + 1
    search = first_end  # the newline before a candidate closing fence
    while True:
        found = text.find("\n---", search)
        if found < 0:
            # A closing fence on the second line has no blank line before it.
            break
        line_end = text.find("\n", found + 1)
        fence = text[found + 1 : line_end if line_end >= 0 else len(text)]
        if _FENCE.match(fence):
            block = text[start:found]
            lines = block.split("\n") if found > start - 1 else []
            body = "" if line_end < 0 else text[line_end + 1 :]
            return lines, body
        search = found + 1
    return None


_MISSING = object()


def _scalar(value: str, *, lenient: bool) -> Any:
    """What YAML reads a one-line value as, for the shapes read without a parser;
    `_MISSING` for anything else (the caller then parses the block)."""
    first = value[0]
    if first == '"':
        inner = value[1:-1]
        if len(value) > 1 and value[-1] == '"' and '"' not in inner and "\\" not in inner:
            return inner if inner.isprintable() else _MISSING
        return _MISSING
    if first == "'":
        inner = value[1:-1]
        if len(value) > 1 and value[-1] == "'" and "'" not in inner:
            return inner if inner.isprintable() else _MISSING
        return _MISSING
    if first in _INDICATORS or not value.isprintable() or " #" in value:
        return _MISSING
    if ": " in value or value.endswith(":"):
        # YAML rejects it ("mapping values are not allowed here"); the lenient
        # reading is the rest of the line as a string (module docstring, case 4).
        return value if lenient else _MISSING
    if first not in _IMPLICIT_FIRST:
        return value  # no implicit type starts with this character: a string
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    if tag == _STR_TAG:
        return value
    if tag == _BOOL_TAG:
        return yaml.constructor.SafeConstructor.bool_values[value.lower()]
    if tag == _NULL_TAG:
        return None
    return _MISSING  # numbers, dates, merge keys: the parser's business


def _literal_block(lines: list[str], start: int) -> tuple[str, int] | None:
    """A ``|`` block scalar's text from ``lines[start:]`` when every line of it is
    indented by the same number of spaces, non-blank and printable; with the index
    after its last line."""
    end = start
    indent = 0
    while end < len(lines) and lines[end].startswith(" "):
        line = lines[end]
        width = len(line) - len(line.lstrip(" "))
        if end == start:
            indent = width
        if width != indent or not line.strip(" ") or not line.isprintable():
            return None
        end += 1
    if end == start:
        return None
    text = "\n".join(line[indent:] for line in lines[start:end])
    # Clip chomping keeps the last line break — which the block's last line has only
    # when a line follows it in the frontmatter.
    return (text + "\n" if end < len(lines) else text), end


def _simple_mapping(
    lines: list[str], *, lenient: bool, nested: bool = False
) -> dict[str, Any] | None:
    """The mapping when every line is blank, a ``key: value`` pair with a value of a
    shape `_scalar` knows, ``key:`` (null), ``key:`` over equally indented such pairs
    (a nested mapping, one level only: deeper is the parser's, which bounds it), or
    ``key: |`` with a simple literal block; else None (the caller parses the block as
    YAML). Keys must read as strings."""
    if len(lines) > _FAST_MAX_LINES:
        return None  # counted by the parser's path instead (module docstring, Bounds)
    result: dict[str, Any] = {}
    index = 0
    count = len(lines)
    while index < count:
        line = lines[index]
        index += 1
        match = _FAST_KEY.fullmatch(line) if line else None
        if match is None:
            if line.strip(" "):
                return None
            continue
        key, raw = match[1], match[2].strip(" ")
        plain_key = _PLAIN_KEYS.get(key)
        if plain_key is None:
            plain_key = _scalar(key, lenient=False) == key
            if len(_PLAIN_KEYS) < 1024:
                _PLAIN_KEYS[key] = plain_key
        if not plain_key:
            return None
        if not raw:
            end = index
            while end < count and lines[end].startswith(" "):
                end += 1
            if end == index:
                result[key] = None
                continue
            if nested:
                return None
            # A nested mapping of one-line values, all indented alike (``metadata:``).
            indent = len(lines[index]) - len(lines[index].lstrip(" "))
            nested_lines = [line[indent:] for line in lines[index:end]]
            if any(not line.startswith(" " * indent) for line in lines[index:end]):
                return None
            inner = _simple_mapping(nested_lines, lenient=False, nested=True)
            if not inner:
                return None
            result[key], index = inner, end
            continue
        if raw == "|":
            block = _literal_block(lines, index)
            if block is None:
                return None
            result[key], index = block
            continue
        value = _scalar(raw, lenient=lenient)
        if value is _MISSING:
            return None
        result[key] = value
    return result


def _yaml_error_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return None if mark is None else mark.line


def _load_mapping(lines: list[str], *, lenient: bool) -> tuple[Any, FrontmatterError | None]:
    simple = _simple_mapping(lines, lenient=lenient)
    if simple is not None:
        return simple, None
    return _parse(lines, lenient=lenient, loader=_SAFE_LOADER)


def _load_bounded(text: str, loader_class: Any) -> tuple[Any, FrontmatterError | None]:
    """Compose ``text``, refuse it when over the bounds (module docstring), else
    construct it. Raises ``yaml.YAMLError`` (the caller's lenient retry reads it) and
    ``RecursionError`` (PyYAML's own composer on deep nesting)."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        over = index_yaml(node, max_nodes=MAX_NODES, max_depth=MAX_DEPTH).over_bounds
        if over:
            line, key, problem = over[0]
            # The top-level key is what an author recognises; the full path of a
            # nesting or alias bomb is as long as the bomb.
            at = f" (under {key[0]!r})" if key else ""
            # +1: the opening fence line (the walker's lines are 1-based already).
            return None, FrontmatterError(f"invalid YAML: {problem}{at}", line + 1)
        try:
            return loader.construct_document(node), None
        except yaml.YAMLError:
            raise  # marked with its line; the caller reports it (or retries leniently)
        except Exception as exc:
            # PyYAML's constructors raise whatever Python raises on a value that does
            # not fit its tag: ValueError for "2024-13-45" (resolved as a date) or an
            # int of more digits than int() reads, KeyError for "!!bool maybe",
            # AttributeError for "!!timestamp soon". The file's fault: an error, never
            # an exception out of load_skills.
            line, detail = _bad_value(node, exc)
            return None, FrontmatterError(f"invalid YAML value: {detail}", line + 2)
    finally:
        loader.dispose()


def _bad_value(root: yaml.Node, exc: Exception) -> tuple[int, str]:
    """0-based line (in the block) and description of the first scalar under ``root``
    that its tag's constructor refuses; ``root``'s line and ``exc`` when no scalar
    alone is refused. Only called on a graph `index_yaml` accepted (bounded), and
    each node is tried once."""
    constructor = yaml.constructor.SafeConstructor()
    found: list[tuple[int, int, str]] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                constructor.construct_object(node)
            except yaml.YAMLError:
                pass  # not what failed: construction raised something else
            except Exception as error:
                found.append((node.start_mark.line, node.start_mark.column, _describe(node, error)))
        elif isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        else:
            stack.extend(node.value)
    if not found:
        return root.start_mark.line, _describe(root, exc)
    line, _column, detail = min(found)
    return line, detail


def _describe(node: yaml.Node, exc: Exception) -> str:
    if isinstance(exc, (ValueError, OverflowError)):
        return str(exc)  # Python's own words ("month must be in 1..12") are clear
    tag = node.tag.rsplit(":", 1)[-1] if node.tag.startswith("tag:yaml.org,2002:") else node.tag
    value = node.value if isinstance(node.value, str) else ""
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"{shown!r} is not a valid {tag}"


def _parse(lines: list[str], *, lenient: bool, loader: Any) -> tuple[Any, FrontmatterError | None]:
    original_error: FrontmatterError | None = None
    lines = list(lines)
    # Each retry quotes a different line and parses the whole block again, so the
    # retries are capped, in number and in characters parsed: one per line would
    # make a block of many such lines cost the square of its size (a hang).
    size = sum(map(len, lines)) + len(lines)
    retries = min(len(lines), MAX_LENIENT_RETRIES, _LENIENT_BUDGET_CHARS // max(size, 1))
    for _ in range(retries + 1):
        try:
            return _load_bounded("\n".join(lines), loader)
        except RecursionError:
            return None, FrontmatterError("invalid YAML: nested too deeply", 2)
        except yaml.YAMLError as exc:
            index = _yaml_error_line(exc)
            if index is not None and lines and index >= len(lines):
                # libyaml points past the end for an unterminated flow collection;
                # the last line is where the value is (as PyYAML says).
                index = len(lines) - 1
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            # +2: one for 1-based numbering, one for the opening fence line.
            error = FrontmatterError(f"invalid YAML: {problem}", 1 if index is None else index + 2)
            original_error = original_error or error
            if not lenient or index is None or not 0 <= index < len(lines):
                return None, original_error
            match = _PLAIN_KEY_LINE.match(lines[index])
            if match is None or match["value"].startswith(_NOT_PLAIN_START):
                return None, original_error
            lines[index] = f"{match['key']}: {json.dumps(match['value'].rstrip())}"
    assert original_error is not None  # the loop returns unless every attempt failed
    hint = f" (gave up reading unquoted ': ' leniently after {retries} lines: quote the values)"
    return None, FrontmatterError(original_error.message + hint, original_error.line)


def parse_frontmatter(
    text: str, *, path: str | PathLike[str] | None = None, lenient: bool = True
) -> tuple[dict[str, Any] | None, str, FrontmatterError | None]:
    """Split a Markdown document into its frontmatter mapping and body.

    Args:
        text: The whole file as text.
        path: The file, for callers' messages only (keyword-only; not read).
        lenient: Retry top-level lines with an unquoted ``: `` in the value as plain
            strings (see the module docstring). ``False`` is strict YAML.

    Returns:
        ``(mapping, body, error)``. Without a frontmatter block (no ``---`` first line,
        or no closing ``---``): ``(None, text, None)``. An empty block gives ``{}``.
        On invalid YAML, a block over the bounds (module docstring, Bounds) or not a
        mapping: ``(None, body, error)``; never raises for any ``text``.
        ``body`` always uses LF line ends and has no BOM.
    """
    del path  # accepted so every caller names the file it parses; messages add it
    text = _normalise(text)
    split = _split(text)
    if split is None:
        return None, text, None
    lines, body = split
    size = sum(map(len, lines)) + len(lines)
    if size > MAX_BLOCK_CHARS:
        message = f"frontmatter is {size} characters long, more than {MAX_BLOCK_CHARS}"
        return None, body, FrontmatterError(message, 2)
    data, error = _load_mapping(lines, lenient=lenient)
    if error is not None:
        return None, body, error
    if data is None:
        return {}, body, None
    if not isinstance(data, dict):
        return None, body, FrontmatterError("frontmatter is not a YAML mapping", 2)
    return data, body, None


def strip_frontmatter(text: str) -> str:
    """Return the body of ``text``: a closed ``---`` block removed, valid YAML or not."""
    text = _normalise(text)
    split = _split(text)
    return text if split is None else split[1]


def find_key_line(text: str, key: str) -> int | None:
    """1-based line of a top-level ``key:`` in the frontmatter block, if present."""
    text = _normalise(text)
    split = _split(text)
    if split is None:
        return None
    pattern = re.compile(rf"^{re.escape(key)}[ \t]*:")
    for index, line in enumerate(split[0]):
        if pattern.match(line):
            return index + 2
    return None
