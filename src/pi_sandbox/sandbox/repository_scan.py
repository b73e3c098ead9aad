"""Finding git repositories a run created below the workspace.

The sandbox keeps each writable root's own ``.git`` read-only (and, where there
is none, its ``HEAD``, so the root cannot be turned into a bare repository), but
any subdirectory can still become a new repository: ``sub/.git`` with a
``core.fsmonitor`` command, or a bare layout (``HEAD``, ``objects/``, ``refs/``
plus ``config``) that git finds when you later run it in ``sub/``. Those are
ordinary files inside the writable workspace, so the sandbox cannot forbid them
without forbidding the tool its work; the run instead compares the repositories
present before and after and warns about new ones (`find_repositories`).
"""

from __future__ import annotations

import os

__all__ = ["find_repositories"]

MAX_DIRECTORIES = 200_000
"""Directories visited at most per scan; a bigger tree is scanned partly."""


def find_repositories(root: str, *, max_directories: int = MAX_DIRECTORIES) -> set[str]:
    """Directories under ``root`` (itself included) that git would treat as a repository.

    A directory counts when it holds a ``.git`` entry (directory or gitfile), or
    the bare layout: a ``HEAD`` file and ``objects`` and ``refs`` directories.
    Symlinks are not followed; unreadable directories are skipped.

    Args:
        root: an absolute directory.
        max_directories: stop after visiting this many directories.

    Returns:
        Absolute paths of the repository directories found.
    """
    found: set[str] = set()
    pending = [root]
    visited = 0
    while pending and visited < max_directories:
        directory = pending.pop()
        visited += 1
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        names: dict[str, os.DirEntry[str]] = {entry.name: entry for entry in entries}
        if ".git" in names or _bare_layout(names):
            found.add(directory)
        for entry in entries:
            if entry.name == ".git":
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
            except OSError:
                continue
    return found


def _bare_layout(names: dict[str, os.DirEntry[str]]) -> bool:
    try:
        return (
            "HEAD" in names
            and names["HEAD"].is_file(follow_symlinks=False)
            and "objects" in names
            and names["objects"].is_dir(follow_symlinks=False)
            and "refs" in names
            and names["refs"].is_dir(follow_symlinks=False)
        )
    except OSError:
        return False
