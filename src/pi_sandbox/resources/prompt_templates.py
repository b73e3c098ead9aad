"""Prompt templates: user text macros invoked as ``/name args`` (issue 6, seed 000 §1, §4).

A template is a Markdown file; its name is the file stem, its optional YAML
frontmatter gives ``description`` and ``argument-hint``, and its body is expanded
with the user's arguments to become the turn's user message. Discovery roots
(``~/.pi/agent/prompts``, ``.pi/prompts``, settings paths, ``--prompt-template``)
and their precedence belong to the caller; this module only loads what it is given,
in that order, and expands.

Frontmatter is parsed by ``resources.frontmatter`` (shared with skills: real YAML,
BOM/CRLF, lenient unquoted colons, 1-based error lines). Pure library: nothing here
runs code or a shell. Not wired into runs yet.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pi_sandbox.path_containment import within
from pi_sandbox.regular_files import read_regular_file
from pi_sandbox.resources.frontmatter import parse_frontmatter

__all__ = [
    "DESCRIPTION_FALLBACK_CHARS",
    "MAX_FILES_PER_SOURCE",
    "MAX_TEMPLATE_BYTES",
    "PromptTemplate",
    "PromptTemplateDiagnostic",
    "expand_prompt_command",
    "expand_template",
    "load_prompt_templates",
    "parse_arguments",
]

MAX_FILES_PER_SOURCE = 1000
"""Most ``*.md`` files read from one source directory; the rest get one diagnostic."""

MAX_TEMPLATE_BYTES = 1024 * 1024
"""Largest template file read (bytes); a larger file is skipped with a diagnostic."""

DESCRIPTION_FALLBACK_CHARS = 60
"""Without a frontmatter description, the first non-empty body line is cut to this."""


@dataclass(frozen=True)
class PromptTemplate:
    """One loaded template.

    Attributes:
        name: The file stem; invoked as ``/name``.
        description: Frontmatter ``description``, or the first non-empty body line
            cut to ``DESCRIPTION_FALLBACK_CHARS`` characters (``...`` appended when cut,
            as in ``pi``), or ``""`` for an empty body.
        argument_hint: Frontmatter ``argument-hint`` (e.g. ``<file> [focus]``), or None.
        body: The file's text without frontmatter, newlines normalised to ``\\n``.
        path: The file as found (not resolved through symlinks).
        source: The caller's label for where it came from (``user``, ``project``, …).
    """

    name: str
    description: str
    argument_hint: str | None
    body: str
    path: Path
    source: str


@dataclass(frozen=True)
class PromptTemplateDiagnostic:
    """A problem met while loading; loading always continues with the other files.

    Attributes:
        type: ``error`` (file skipped), ``warning`` (file loaded or limit reached) or
            ``collision`` (a later file with a taken name was skipped); the
            ``pi resources --json`` diagnostic kinds (issue 6).
        message: Human-readable, names the file (and the winner for a collision).
        path: The file or source the diagnostic is about (the loser for a collision).
        other_path: For a collision, the file that kept the name.
    """

    type: Literal["warning", "error", "collision"]
    message: str
    path: Path
    other_path: Path | None = None


def _fallback_description(body: str) -> str:
    for line in body.split("\n"):
        line = line.strip()
        if line:
            if len(line) > DESCRIPTION_FALLBACK_CHARS:
                return line[:DESCRIPTION_FALLBACK_CHARS] + "..."
            return line
    return ""


def _load_file(
    path: Path, source: str, max_bytes: int, diagnostics: list[PromptTemplateDiagnostic]
) -> PromptTemplate | None:
    try:
        text = read_regular_file(path, max_bytes).decode("utf-8")
    except (OSError, ValueError) as exc:  # FileRefusedError, UnicodeDecodeError
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        diagnostics.append(
            PromptTemplateDiagnostic("error", f"cannot read prompt template {path}: {reason}", path)
        )
        return None
    frontmatter, body, error = parse_frontmatter(text, path=path)
    if error is not None:
        diagnostics.append(
            PromptTemplateDiagnostic("error", f"{path}: line {error.line}: {error.message}", path)
        )
        return None
    frontmatter = frontmatter or {}

    description = frontmatter.get("description")
    if description is not None and not isinstance(description, str):
        diagnostics.append(
            PromptTemplateDiagnostic(
                "warning", f"{path}: description is not a string; using the first line", path
            )
        )
        description = None
    if not description or not description.strip():
        description = _fallback_description(body)

    hint = frontmatter.get("argument-hint")
    if hint is not None and not isinstance(hint, str):
        diagnostics.append(
            PromptTemplateDiagnostic("warning", f"{path}: argument-hint is not a string", path)
        )
        hint = None

    return PromptTemplate(
        name=path.stem,
        description=description.strip(),
        argument_hint=hint.strip() if hint else None,
        body=body,
        path=path,
        source=source,
    )


def _directory_candidates(
    directory: Path, max_files: int, diagnostics: list[PromptTemplateDiagnostic]
) -> list[tuple[Path, str]]:
    """The directory's ``*.md`` regular files (symlinks followed), sorted, not
    recursive, each with its canonical path (``realpath`` only through symlinks)."""
    try:
        with os.scandir(directory) as iterator:
            entries = sorted(
                (entry for entry in iterator if entry.name.endswith(".md")),
                key=lambda entry: entry.name,
            )
    except OSError as exc:
        diagnostics.append(
            PromptTemplateDiagnostic(
                "error", f"cannot list prompt templates in {directory}: {exc.strerror}", directory
            )
        )
        return []
    found: list[tuple[Path, str]] = []
    real = os.path.realpath(directory)
    for entry in entries:
        path = directory / entry.name
        try:
            # Follows symlinks; the type comes with the listing for other entries.
            is_file = entry.is_file()
            exists = is_file or entry.is_dir() or os.path.exists(entry.path)
        except OSError:
            is_file = exists = False
        if not exists:
            if entry.is_symlink():
                diagnostics.append(
                    PromptTemplateDiagnostic("warning", f"skipping dangling symlink {path}", path)
                )
            continue
        # Subdirectories (also behind symlinks) and special files are not templates.
        if not is_file:
            continue
        if len(found) == max_files:
            diagnostics.append(
                PromptTemplateDiagnostic(
                    "warning",
                    f"more than {max_files} prompt templates in {directory}; the rest are ignored",
                    directory,
                )
            )
            break
        found.append(
            (path, os.path.realpath(path) if entry.is_symlink() else f"{real}/{entry.name}")
        )
    return found


def load_prompt_templates(
    sources: Sequence[tuple[Path, str] | tuple[Path, str, Path | None]],
    *,
    max_files_per_source: int = MAX_FILES_PER_SOURCE,
    max_file_bytes: int = MAX_TEMPLATE_BYTES,
) -> tuple[list[PromptTemplate], list[PromptTemplateDiagnostic]]:
    """Load templates from ``sources`` in order; earlier sources win name collisions.

    Args:
        sources: ``(path, source_label)`` pairs, or ``(path, source_label, confine)``
            where every template must resolve inside directory ``confine`` (a
            project's own sources; a symlink out is refused with an ``error``), in
            precedence order. A directory
            contributes its ``*.md`` files, not recursively, in name order; any other
            path is one template file (settings paths, ``--prompt-template``). A
            missing source is skipped silently, as in ``pi`` (auto-discovery
            directories are usually absent); callers validate explicit CLI paths.
        max_files_per_source: Files read from one directory before a warning.
        max_file_bytes: Larger files are skipped with an error diagnostic.

    Returns:
        ``(templates, diagnostics)``. Symlinked files are followed; dangling links
        (warning) and links to directories (silent) are skipped. The same file
        reached twice (e.g. through a symlink) is deduplicated silently; two files
        with one name give a ``collision`` diagnostic naming both. Unreadable,
        oversized, non-UTF-8 or invalid-frontmatter files give an ``error``
        diagnostic and are skipped. Never raises for file problems.
    """
    templates: list[PromptTemplate] = []
    diagnostics: list[PromptTemplateDiagnostic] = []
    by_name: dict[str, PromptTemplate] = {}
    seen_files: set[str] = set()

    for entry in sources:
        source_path, source = Path(entry[0]), entry[1]
        confine_to = entry[2] if len(entry) > 2 else None  # type: ignore[misc]
        confine = os.path.realpath(confine_to) if confine_to is not None else None
        if source_path.is_dir():
            candidates = _directory_candidates(source_path, max_files_per_source, diagnostics)
        elif os.path.lexists(source_path):
            candidates = [(source_path, os.path.realpath(source_path))]
        else:
            continue
        for path, canonical in candidates:
            if confine is not None and not within(canonical, confine):
                diagnostics.append(
                    PromptTemplateDiagnostic(
                        "error",
                        f"prompt template {path} resolves to {canonical}, outside "
                        f"{confine_to}; skipped (a project's templates must be its own files)",
                        path,
                    )
                )
                continue
            if canonical in seen_files:
                continue
            template = _load_file(path, source, max_file_bytes, diagnostics)
            if template is None:
                continue
            seen_files.add(canonical)
            winner = by_name.get(template.name)
            if winner is not None:
                diagnostics.append(
                    PromptTemplateDiagnostic(
                        "collision",
                        f"prompt template /{template.name}: {path} is ignored, "
                        f"{winner.path} ({winner.source}) takes precedence",
                        path,
                        other_path=winner.path,
                    )
                )
                continue
            by_name[template.name] = template
            templates.append(template)
    return templates, diagnostics


def parse_arguments(text: str) -> list[str]:
    """Split ``text`` into arguments like a POSIX shell would, without running anything.

    Whitespace separates; single and double quotes group (``""`` is an empty
    argument); backslash escapes as in ``sh``; ``#`` is an ordinary character. An
    unbalanced quote takes the rest of the text as one argument; a trailing lone
    backslash stays literal. No variables, globs or substitutions are expanded.
    """
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    args: list[str] = []
    try:
        args.extend(lexer)
    except ValueError as exc:
        # shlex raises only at end of input, with the partial token kept.
        partial = lexer.token
        if "escaped" in str(exc):
            partial += "\\"
        if partial:
            args.append(partial)
    return args


# One alternation, scanned once: replacement text is never scanned again, so an
# argument containing "$2" stays literal. The order ($1…, ${@:N}, ${@:N:L},
# then $ARGUMENTS/$@) cannot change the result because the forms never overlap.
_PLACEHOLDER = re.compile(r"\$(\d+)|\$\{@:(\d+)(?::(\d+))?\}|\$ARGUMENTS|\$@")


MAX_EXPANSION_CHARS = 1_000_000
"""Largest expansion of a template (characters): ``$@`` repeated 200,000 times in a
400 KB template would otherwise make one gigabyte-sized message (issue 6 review)."""


def expand_template(
    template: PromptTemplate | str, args_text: str, *, max_chars: int = MAX_EXPANSION_CHARS
) -> str:
    """The template body with placeholders replaced by the arguments in ``args_text``.

    ``$N`` (1-based, any digits) is the Nth argument; ``${@:N}`` the arguments from
    the Nth on; ``${@:N:L}`` at most L of them; ``$ARGUMENTS`` and ``$@`` all of
    them. Lists are joined by single spaces; a missing argument is ``""`` (as is
    ``$0``); ``${@:0}`` counts as ``${@:1}``, as in ``pi``. Substituted values are
    not expanded again.

    Raises:
        ValueError: the expansion would be longer than ``max_chars`` (checked
            before it is built).
    """
    body = template.body if isinstance(template, PromptTemplate) else template
    args = parse_arguments(args_text)
    # An upper bound without building it: every placeholder at most all arguments.
    bound = len(body) + len(_PLACEHOLDER.findall(body)) * (len(args_text) + len(args))
    if bound > max_chars:
        raise ValueError(f"the expansion could reach {bound} characters, more than {max_chars}")

    def replace(match: re.Match[str]) -> str:
        position, start, length = match.groups()
        if position is not None:
            index = int(position) - 1
            return args[index] if 0 <= index < len(args) else ""
        if start is not None:
            first = max(int(start) - 1, 0)
            last = None if length is None else first + int(length)
            return " ".join(args[first:last])
        return " ".join(args)

    return _PLACEHOLDER.sub(replace, body)


_COMMAND = re.compile(r"/(\S+)(?:\s+(.*))?", re.DOTALL)


def expand_prompt_command(text: str, templates: list[PromptTemplate]) -> str | None:
    """Expand ``/name args`` with the template called ``name``.

    Returns:
        The expansion, or None when ``text`` is not a ``/name`` command or no
        template has that name (the caller then sends the text unchanged).
    """
    match = _COMMAND.fullmatch(text)
    if match is None:
        return None
    name, args_text = match.groups()
    for template in templates:
        if template.name == name:
            return expand_template(template, args_text or "")
    return None
