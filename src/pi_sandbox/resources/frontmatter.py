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
double-quoted string; this repeats for each such line. Anything else (indented
continuations, broken quotes, tabs, …) stays an error, reported with its 1-based line
number in the file, and callers decide what an error costs (a ``SKILL.md`` is
skipped with a diagnostic; other skills are unaffected).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from os import PathLike
from typing import Any

import yaml

__all__ = ["FrontmatterError", "find_key_line", "parse_frontmatter", "strip_frontmatter"]

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


def _normalise(text: str) -> str:
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _split(text: str) -> tuple[list[str], str] | None:
    """Return (frontmatter lines, body) or None when there is no closed block."""
    lines = text.split("\n")
    if not lines or not _FENCE.match(lines[0]):
        return None
    for index in range(1, len(lines)):
        if _FENCE.match(lines[index]):
            return lines[1:index], "\n".join(lines[index + 1 :])
    return None


def _yaml_error_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return None if mark is None else mark.line


def _load_mapping(lines: list[str], *, lenient: bool) -> tuple[Any, FrontmatterError | None]:
    original_error: FrontmatterError | None = None
    lines = list(lines)
    # Each retry quotes a different line, so len(lines) + 1 attempts bound the loop.
    for _ in range(len(lines) + 1):
        try:
            return yaml.safe_load("\n".join(lines)), None
        except yaml.YAMLError as exc:
            index = _yaml_error_line(exc)
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
    return None, original_error


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
        On invalid YAML or a block that is not a mapping: ``(None, body, error)``.
        ``body`` always uses LF line ends and has no BOM.
    """
    del path  # accepted so every caller names the file it parses; messages add it
    text = _normalise(text)
    split = _split(text)
    if split is None:
        return None, text, None
    lines, body = split
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
