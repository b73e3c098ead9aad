"""Path globs of ``path`` matchers, and the canonical paths they are matched against.

Glob syntax (gitignore-like, fixed here because policy files are a public format):

- ``*`` and ``?`` match within one path component, ``[abc]``/``[!abc]`` one
  character of a component; dotfiles are not special;
- ``**`` as a whole component matches any number of components, including none
  (``**/.env`` matches ``.env`` and ``a/b/.env``);
- a pattern without ``/`` matches the last component at any depth (``*.pem``);
- a pattern with ``/`` is anchored: at the workspace root for relative patterns,
  at the filesystem root for patterns starting with ``/`` (which therefore only
  match paths outside the workspace); ``~/`` expands to the home directory;
- a path also matches when one of its parent directories matches, so ``secrets``
  covers ``secrets/a.txt`` and ``/etc/**`` covers ``/etc`` itself.

A tool's path argument is expanded (``~``), joined to the workspace and
normalised; inside the workspace it is matched relative to it (``src/a.py``),
outside as an absolute path (``/etc/passwd``). Both the lexical form and the
canonical form are matched, and either one matching is a match: a rule about
``.env`` covers ``link -> .env`` and ``.env -> elsewhere`` alike. The canonical
form sees through ``/proc/self/cwd``, ``/dev/fd`` and the other aliases
(`pi_sandbox.policies._path_resolution`, issue 13 §5); a path that cannot be
resolved safely is reported, and its rules yield the ``unparseable`` decision.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from pi_sandbox.policies._path_resolution import UnresolvablePath, canonical_targets

__all__ = [
    "ResolvedPath",
    "ToolCwds",
    "candidate_paths",
    "compile_path_glob",
    "resolve_candidates",
    "tool_cwds",
]

_ANY_DEPTH = "(?:.*/)?"
_OR_BELOW = "(?:/.*)?"


def compile_path_glob(pattern: str) -> re.Pattern[str]:
    """Compile a path glob (module docstring) into a regex for ``fullmatch``.

    Raises:
        ValueError: the pattern is empty.
    """
    if not pattern:
        raise ValueError("empty path pattern")
    if pattern == "~" or pattern.startswith("~/"):
        pattern = os.path.expanduser(pattern)
    pattern = re.sub("/{2,}", "/", pattern)
    while pattern.startswith("./"):
        pattern = pattern[2:]
    absolute = pattern.startswith("/")
    body = pattern.strip("/")
    if not body:  # "/": everything outside the workspace
        return re.compile("/.*", re.DOTALL)
    segments = body.split("/")
    if len(segments) > 1 and segments[-1] == "**":
        segments.pop()  # "dir/**" is "dir": parents' matches cover what is below
    parts = ["/" if absolute else "" if "/" in body else _ANY_DEPTH]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else _ANY_DEPTH)
        else:
            parts.append(_translate_segment(segment) + ("" if last else "/"))
    return re.compile("".join(parts) + _OR_BELOW, re.DOTALL)


def _translate_segment(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        i += 1
        if char == "*":
            while i < len(segment) and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 1 if segment[i : i + 1] in ("!", "]") else i)
            if end == -1:
                out.append(re.escape(char))
                continue
            content = segment[i:end]
            i = end + 1
            negate = content.startswith("!")
            if negate:
                content = content[1:]
            # Escape what Python's regex classes treat specially (or warn about).
            content = re.sub(r"([\\^\[&~|])", r"\\\1", content)
            out.append(f"[^/{content}]" if negate else f"[{content}]")
        else:
            out.append(re.escape(char))
    return "".join(out)


def candidate_paths(raw: str, workspace: str, *, resolve_symlinks: bool) -> tuple[str, ...]:
    """Return the forms of a tool's path argument that path globs are matched against.

    Args:
        raw: the tool's ``path`` argument (absolute, relative or ``~``-prefixed).
        workspace: the workspace directory (absolute).
        resolve_symlinks: also resolve symlinks on the real filesystem
            (``os.path.realpath``); off when checking a rule's examples.

    Returns:
        The lexical form, then the resolved form when it differs; each relative to
        the workspace (``"."`` for the workspace itself) when inside it, absolute
        otherwise.
    """
    joined = os.path.join(workspace, os.path.expanduser(raw))
    forms = [_relative_to(_normalise(joined), _normalise(workspace))]
    if resolve_symlinks and "\0" not in joined:
        try:
            resolved = _relative_to(
                _normalise(os.path.realpath(joined)), _normalise(os.path.realpath(workspace))
            )
        except (OSError, ValueError):
            resolved = forms[0]
        if resolved != forms[0]:
            forms.append(resolved)
    return tuple(forms)


@dataclass(frozen=True)
class ResolvedPath:
    """What the gate matches for one path argument (issue 13 §5).

    Attributes:
        forms: the lexical form, then every canonical form that differs; each
            relative to the workspace when inside it, absolute otherwise.
        targets: the absolute canonical paths (for `file_identities`); empty when
            unresolvable.
        unresolved: why the path cannot be resolved safely, or None.
    """

    forms: tuple[str, ...]
    targets: tuple[str, ...] = ()
    unresolved: str | None = None


class ToolCwds(Sequence[str]):
    """`tool_cwds` of a workspace, for one decision, each part looked up when it is
    first needed (issue 20): the canonical workspace (every resolution needs it)
    at construction, the supervisor's directory (``getcwd`` and its ``realpath``)
    only when a path goes through ``/proc/self/cwd``. As a sequence it holds what
    `tool_cwds` returns at the time it is first asked for more than ``[0]``.

    Attributes:
        real: ``os.path.realpath(workspace)`` as it returns it (not `_normalise`-d).
    """

    def __init__(self, workspace: str) -> None:
        self.real = os.path.realpath(workspace)
        self._first = _normalise(self.real)
        self._all: tuple[str, ...] | None = None

    def _cwds(self) -> tuple[str, ...]:
        if self._all is None:
            self._all = _with_supervisor_cwd(self._first)
        return self._all

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if index == 0:
            return self._first
        return self._cwds()[index]

    def __len__(self) -> int:
        return len(self._cwds())


def _with_supervisor_cwd(real_workspace: str) -> tuple[str, ...]:
    try:
        here = _normalise(os.path.realpath(os.getcwd()))
    except OSError:  # the supervisor's directory was removed: nothing to add
        return (real_workspace,)
    return (real_workspace,) if here == real_workspace else (real_workspace, here)


def tool_cwds(workspace: str) -> tuple[str, ...]:
    """What ``/proc/self/cwd`` may be for a tool: the canonical workspace (where
    tools run), then the supervisor's own directory when it differs (which an
    unsandboxed worker inherits)."""
    return _with_supervisor_cwd(_normalise(os.path.realpath(workspace)))


def resolve_candidates(
    raw: str, workspace: str, *, cwds: Sequence[str] | None = None
) -> ResolvedPath:
    """Resolve a tool's path argument on the real filesystem, through aliases.

    Args:
        raw: the tool's ``path`` argument or a word of a shell command.
        workspace: the workspace directory (absolute); relative paths and
            ``/proc/self/cwd`` resolve against it (and ``/proc/self/cwd`` also
            against the supervisor's working directory, which an unsandboxed
            worker inherits).
        cwds: `tool_cwds` of ``workspace`` (or a `ToolCwds`), when the caller has it.

    Never raises: an unresolvable path is reported in ``unresolved``.
    """
    joined = os.path.join(workspace, os.path.expanduser(raw))
    cwds = tool_cwds(workspace) if cwds is None else cwds
    real_workspace = cwds[0]
    normalised = _normalise(joined)
    lexical = _relative_to(normalised, _normalise(workspace))
    if "\0" in joined:
        return ResolvedPath((lexical,), (), f"{raw!r} contains a NUL byte")
    try:
        targets = canonical_targets(joined, cwds=cwds)
        if normalised != joined:
            # Both readings of "..": the kernel's (after symlinks, as bash opens it)
            # and the lexical one (the worker's file tools normalise before opening).
            targets += canonical_targets(normalised, cwds=cwds)
    except UnresolvablePath as exc:
        return ResolvedPath((lexical,), (), f"path cannot be resolved safely: {exc}")
    targets = tuple(dict.fromkeys(targets))
    forms = [lexical]
    for target in targets:
        form = _relative_to(_normalise(target), real_workspace)
        if form not in forms:
            forms.append(form)
    return ResolvedPath(tuple(forms), targets)


def _normalise(path: str) -> str:
    # normpath keeps a leading "//" (POSIX leaves its meaning open); Linux does not.
    return re.sub("^/+", "/", os.path.normpath(path))


def _relative_to(path: str, workspace: str) -> str:
    if path == workspace:
        return "."
    prefix = workspace if workspace.endswith("/") else workspace + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path
