"""Finding git repositories a run created below the workspace.

The sandbox keeps each writable root's own ``.git`` read-only (and, where there
is none, its ``HEAD``, so the root cannot be turned into a bare repository), but
any subdirectory can still become a new repository: ``sub/.git`` with a
``core.fsmonitor`` command, or a bare layout (``HEAD``, ``objects/``, ``refs/``
plus ``config``) that git finds when you later run it in ``sub/``. Those are
ordinary files inside the writable workspace, so the sandbox cannot forbid them
without forbidding the tool its work; the run instead compares the repositories
present before and after (`find_repositories`), has the persistence guard
quarantine a new one's config when it makes git run code
(`PersistenceGuard.check_repository`), and warns about the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["RepositoryScan", "find_repositories"]

MAX_DIRECTORIES = 1_000_000
"""Directories visited at most per scan; a bigger tree is scanned partly, and the
scan says so (`RepositoryScan.complete`)."""


@dataclass
class RepositoryScan:
    """The outcome of `find_repositories`.

    Attributes:
        found: absolute paths of directories git could treat as a repository.
        complete: False when the directory limit stopped the scan early, or a
            directory could not be listed (either may hide a repository).
        visited: directories visited.
        unreadable: directories that could not be listed.
    """

    found: set[str] = field(default_factory=set)
    complete: bool = True
    visited: int = 0
    unreadable: list[str] = field(default_factory=list)


def find_repositories(root: str, *, max_directories: int = MAX_DIRECTORIES) -> RepositoryScan:
    """Directories under ``root`` (itself included) that git could treat as a repository.

    Deliberately wider than git's own test, so that no layout git accepts is
    missed: a directory counts when it holds a ``.git`` entry of any type, or a
    ``HEAD`` entry that is not a directory (a file, or a symlink such as git's
    ``HEAD -> refs/heads/main``) next to any of ``objects``, ``refs`` or
    ``commondir`` (of any type: git follows symlinks and ``commondir``).
    Symlinks are not followed while walking; a directory that cannot be listed
    makes the scan incomplete.

    Args:
        root: an absolute directory.
        max_directories: stop after visiting this many directories.

    Returns:
        The scan (see `RepositoryScan`).
    """
    scan = RepositoryScan()
    found = scan.found
    pending = [root]
    visited = 0
    while pending:
        if visited >= max_directories:
            scan.complete = False
            break
        directory = pending.pop()
        visited += 1
        try:
            entries = list(os.scandir(directory))
        except OSError:
            # A directory the scan cannot list (a tool can `chmod 311` its own
            # directories) may hide a repository: the comparison is not complete.
            scan.complete = False
            scan.unreadable.append(directory)
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
    scan.visited = visited
    return scan


def _bare_layout(names: dict[str, os.DirEntry[str]]) -> bool:
    head = names.get("HEAD")
    if head is None:
        return False
    try:
        if head.is_dir(follow_symlinks=False):
            return False
    except OSError:
        return False
    return any(name in names for name in ("objects", "refs", "commondir"))
