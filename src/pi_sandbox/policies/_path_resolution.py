"""The canonical target of a tool's path, seen through aliases (issue 13 §5).

A path rule about ``server/.env`` must hold whatever spelling reaches the file:
``/proc/self/cwd/server/.env``, ``/proc/thread-self/root/<ws>/server/.env``,
``link/../server/.env``, ``a//b``, a symlinked parent directory, a bind mount or a
hard link. The gate (`pi_sandbox.policies._tool_gate`) runs in the supervisor, not
in the process that will open the path, so ``os.path.realpath`` is wrong for the
``/proc`` links: ``/proc/self`` would be the *supervisor*. This module walks the
path component by component, like the kernel, with these rules:

- ``/proc/self``, ``/proc/thread-self`` and ``/proc/<pid>/task/<tid>`` name the
  tool process. Its ``cwd`` is the workspace (where tools run; an unsandboxed
  worker's own working directory is the supervisor's, so that is tried too) and
  its ``root`` is ``/`` (sandbox mounts keep host paths). Its ``fd/N``,
  ``map_files/…`` and ``exe`` are open files of a process the gate cannot see:
  **unresolvable**. So is any ``/proc/<pid>/{cwd,root,fd,…}`` of a numeric pid.
- ``/dev/fd``, ``/dev/stdin``, ``/dev/stdout``, ``/dev/stderr`` are
  ``/proc/self/fd[/0|1|2]`` whether or not the host has those links.
- every other symlink is read with ``os.readlink`` and followed (at most
  `MAX_SYMLINKS`, like Linux's 40); ``..`` applies to the resolved directory.
- a component that does not exist ends the walk: the rest is joined lexically
  (the worker's file tools normalise lexically too, and a file that does not
  exist yet cannot be an alias). A link created later (``ln -s server/.env x &&
  cat x`` in one command) is not visible here: the sandbox's ``deny_read`` is the
  boundary for that.
- any other error (permission denied, a name too long, a loop) is unresolvable.

Bind mounts and hard links have no path to follow: `file_identities` gives the
``(st_dev, st_ino)`` of a path and its parents, which the gate compares with the
identity of each literal path a rule names.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence

__all__ = ["MAX_SYMLINKS", "UnresolvablePath", "canonical_targets", "file_identities"]

MAX_SYMLINKS = 40
"""Symlinks followed for one path before it is unresolvable (Linux's ``MAXSYMLINKS``)."""

_MAX_TARGETS = 8  # fan-out bound: each /proc/self/cwd doubles the candidates

_DEV_ALIASES = {
    "fd": ["proc", "self", "fd"],
    "stdin": ["proc", "self", "fd", "0"],
    "stdout": ["proc", "self", "fd", "1"],
    "stderr": ["proc", "self", "fd", "2"],
}

_PROCESS = re.compile(r"self|thread-self|[0-9]+")
_OPEN_FILES = frozenset({"fd", "map_files", "exe"})


class UnresolvablePath(ValueError):
    """The gate cannot tell what file a path names (issue 13 §5); the message says
    why. Rules with a ``path`` matcher then yield the policy's ``unparseable``
    decision."""


def canonical_targets(path: str, *, cwds: Sequence[str]) -> tuple[str, ...]:
    """The absolute canonical path(s) the tool process would open for ``path``.

    Args:
        path: an absolute path (the caller joins relative ones to the workspace).
        cwds: what ``/proc/self/cwd`` may be for the tool process, canonical,
            absolute (the workspace first).

    Returns:
        One path, or several when a ``/proc/self/cwd`` could be any of ``cwds``.

    Raises:
        UnresolvablePath: the path goes through another process's view, an open
            file descriptor, too many symlinks, or a component that cannot be read.
    """
    if not path.startswith("/") or "\0" in path:
        raise UnresolvablePath(f"{path!r} is not an absolute path")
    budget = [MAX_SYMLINKS]
    targets = _walk(path.split("/"), cwds, budget, path)
    return tuple(dict.fromkeys(targets))


def _walk(parts: list[str], cwds: Sequence[str], budget: list[int], original: str) -> list[str]:
    done = "/"
    i = 0
    while i < len(parts):
        part = parts[i]
        i += 1
        if part in ("", "."):
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        if done == "/dev" and part in _DEV_ALIASES:
            # Linux's /dev/fd links, also where the host lacks them (bwrap adds them).
            parts = ["", *_DEV_ALIASES[part], *parts[i:]]
            done, i = "/", 0
            continue
        if done == "/proc" and _PROCESS.fullmatch(part):
            return _process_entry(part, parts[i:], cwds, budget, original)
        candidate = done.rstrip("/") + "/" + part
        try:
            mode = os.lstat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):
            # Nothing there now: the rest cannot be a link; lexical from here on.
            return [os.path.normpath("/".join([candidate, *parts[i:]]))]
        except OSError as exc:
            raise UnresolvablePath(
                f"{original!r}: {candidate} cannot be examined ({exc.strerror})"
            ) from exc
        if stat.S_ISLNK(mode):
            budget[0] -= 1
            if budget[0] < 0:
                raise UnresolvablePath(f"{original!r}: more than {MAX_SYMLINKS} symbolic links")
            try:
                target = os.readlink(candidate)
            except OSError as exc:
                raise UnresolvablePath(
                    f"{original!r}: symlink {candidate} cannot be read ({exc.strerror})"
                ) from exc
            if target.startswith("/"):
                done = "/"
            parts = [*target.split("/"), *parts[i:]]
            i = 0
            continue
        done = candidate
    return [done]


def _process_entry(
    process: str, rest: list[str], cwds: Sequence[str], budget: list[int], original: str
) -> list[str]:
    """Resolve ``/proc/<process>/<rest…>`` (``process`` is ``self``, ``thread-self``
    or a pid) without asking the supervisor's own /proc."""
    rest = [part for part in rest if part not in ("", ".")]
    if rest and rest[0] == "..":
        return _walk(["", "proc", *rest[1:]], cwds, budget, original)
    if process == "thread-self":
        process = "self"
    if len(rest) >= 2 and rest[0] == "task" and rest[1].isdigit():
        rest = rest[2:]
        if rest and rest[0] == "..":
            return _walk(["", "proc", process, "task", *rest[1:]], cwds, budget, original)
    if not rest:
        return [f"/proc/{process}"]
    entry, tail = rest[0], rest[1:]
    if entry in ("cwd", "root") or (entry in _OPEN_FILES and (tail or entry == "exe")):
        if process != "self":
            raise UnresolvablePath(
                f"{original!r} goes through /proc/{process}/{entry}: another process's "
                "view of the filesystem, which the gate cannot see"
            )
        if entry in _OPEN_FILES:
            raise UnresolvablePath(
                f"{original!r} names an open file of the tool process (/proc/self/"
                f"{'/'.join(rest[:2])}), which the gate cannot see"
            )
        bases = cwds if entry == "cwd" else ["/"]
        results: list[str] = []
        for base in bases:
            results.extend(_walk([*base.split("/"), *tail], cwds, budget, original))
            if len(results) > _MAX_TARGETS:
                raise UnresolvablePath(f"{original!r}: too many /proc/self/cwd aliases")
        return results
    # Other entries (status, environ, fd as a directory, …) are the process's own
    # files, not aliases of workspace files: matched as written.
    return [os.path.normpath("/".join(["", "proc", process, *rest]))]


def file_identities(paths: Iterable[str], *, stop_at: Sequence[str]) -> frozenset[tuple[int, int]]:
    """``(st_dev, st_ino)`` of each existing path and of its parent directories.

    Parents stop below ``/`` and at each directory of ``stop_at`` (the workspace:
    a rule about a directory *above* the workspace must not cover everything in
    it). Symlinks are followed (``os.stat``); a path that cannot be examined
    contributes nothing.

    Args:
        paths: absolute canonical paths (from `canonical_targets`).
        stop_at: absolute directories whose own parents are not examined.
    """
    found: set[tuple[int, int]] = set()
    for path in paths:
        current = path
        while current not in ("/", ""):
            try:
                info = os.stat(current)
            except OSError:
                pass
            else:
                found.add((info.st_dev, info.st_ino))
            if current in stop_at:
                break
            current = os.path.dirname(current)
    return frozenset(found)
