"""Which host files may be bound into a sandbox by ``read_only``/``writable_roots``.

Issue 13 §5: binding a Unix socket (``/run/docker.sock``, an ssh-agent or D-Bus
socket) is a sandbox escape, read-only or not: ``connect`` needs no writable
mount. A FIFO is a channel to whatever host process reads or writes it. Device
nodes are unusable under bwrap's ``nodev`` binds, but are no files to share
either. So those two keys accept only regular files and directories, also when
reached through a symlink; a directory is scanned (bounded) for sockets and FIFOs
inside it. A socket a user really needs is an explicit ``sandbox.sockets`` entry.
"""

from __future__ import annotations

import os
import stat

from pi_sandbox.regular_files import special_file_kind

__all__ = ["MAX_SCANNED_ENTRIES", "check_bindable", "special_kind"]

MAX_SCANNED_ENTRIES = 50_000
"""Directory entries examined under one ``read_only`` directory before it is refused
as too large to check (name narrower directories instead)."""


_KIND_WORDS = {"socket": "a Unix socket", "fifo": "a FIFO", "device": "a device node"}


def special_kind(mode: int) -> str | None:
    """``"a Unix socket"``, ``"a FIFO"``, ``"a device node"`` for such a mode, None for
    a regular file, a directory or a symlink (`pi_sandbox.regular_files.special_file_kind`
    in words)."""
    kind = special_file_kind(mode)
    return None if kind is None else _KIND_WORDS[kind]


def check_bindable(path: str, *, scan: bool = True) -> str | None:
    """Why ``path`` may not be bound into a sandbox, or None when it may.

    Args:
        path: an absolute host path; symlinks are followed. A path that does not
            exist is bindable (nothing is bound for it).
        scan: also look inside a directory (at most `MAX_SCANNED_ENTRIES` entries,
            symlinks not followed: inside the sandbox they resolve among its own
            mounts) for sockets and FIFOs.

    Returns:
        A sentence fragment naming the offending file and its kind, e.g.
        ``"/run/docker.sock is a Unix socket"``.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    kind = special_kind(info.st_mode)
    if kind is not None:
        real = os.path.realpath(path)
        return f"{path} is {kind}" + (f" ({real})" if real != path else "")
    if not (scan and stat.S_ISDIR(info.st_mode)):
        return None
    # Every worker start checks again; a directory already found clean in this
    # process is not walked twice unless its own entries changed.
    key = (os.path.realpath(path), info.st_dev, info.st_ino, info.st_mtime_ns)
    if key in _CLEAN:
        return None
    refusal = _scan(path)
    if refusal is None:
        _CLEAN.add(key)
    return refusal


_CLEAN: set[tuple[str, int, int, int]] = set()


def _scan(path: str) -> str | None:
    budget = MAX_SCANNED_ENTRIES
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            continue  # unreadable here: unreadable for the sandbox (same user) too
        with entries:
            for entry in entries:
                budget -= 1
                if budget < 0:
                    return (
                        f"{path} has more than {MAX_SCANNED_ENTRIES} entries, too many to "
                        "check for sockets and FIFOs; name narrower directories"
                    )
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                kind = special_kind(mode)
                if kind in ("a Unix socket", "a FIFO"):  # devices: bwrap binds are nodev
                    return f"{path} contains {kind}, {entry.path}"
                if stat.S_ISDIR(mode):
                    pending.append(entry.path)
    return None
