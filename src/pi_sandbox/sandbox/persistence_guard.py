"""Finding and quarantining persistence paths a sandboxed run created (issue 14 §1).

A protected path that *exists* is bound read-only into the sandbox (a mount on an
existing directory entry leaves nothing new on the host). A protected path that
does *not* exist cannot be covered without a mount point, and a mount point in a
writable directory is a directory bwrap creates on the host: the empty ``.envrc/``
and ``.mcp.json/`` directories of earlier versions. So missing protected paths are
not mounted at all: the sandbox sees the workspace exactly as it is, and this
guard finds what a sandboxed process created instead and moves it out of the
workspace before the supervisor does anything else.

`PersistenceGuard` records, when it is built, every directory under the tool
worker's writable roots (name set, ``st_mtime_ns``, inode). `PersistenceGuard.check`
(after every batch of tool calls, after a worker crash, and once more when every
sandbox of the run is gone) stats those directories, lists again only the ones
whose mtime or inode changed (or that were modified within `_HOT_SECONDS` of being
listed: file-system timestamps are taken from a coarse clock), walks new
directories completely, and classifies each new entry (`classify`):

- a name in `PROTECTED_ANYWHERE` at any depth outside a git directory (``.git``,
  ``.pi``, ``.vscode``, ``.envrc``, ``.mcp.json`` …: each is read by a tool opened
  in that directory, git, direnv, an editor, an agent);
- a name in `PROTECTED_AT_ROOT` directly in a writable root (``.github``, CI
  files, shell rc files);
- inside a git directory, the entries that make git run code or change where it
  points (`GIT_CODE_PATHS`: ``config``, ``hooks``, ``info/attributes``,
  ``commondir`` …); ordinary git writes (objects, refs, the index, logs) are fine;
- a path the profile names (``deny_write`` entries, paths a repository's git
  config points at, ``HEAD`` at a root without ``.git``) that did not exist.

The supervisor also runs a check as soon as inotify reports a new entry in a
recorded directory (`pi_sandbox.sandbox.inotify_watch`), so a finding usually
exists on the host for milliseconds only (docs/sandbox.md, "Nothing in your tree").

Each finding is renamed into ``quarantine_dir`` (same file system: atomic; else
copied and removed) and reported by the caller (audit record, notice, JSON
event). A linked worktree that ``git worktree add`` made is recognised and kept:
its ``.git`` file must point at ``<common dir>/worktrees/<name>`` of a repository
in a writable root and that directory's ``commondir`` must lead back; both are
checked again on every later `check`.

Per-call cost: one ``lstat`` per directory of the writable roots (git object and
ref directories are not walked). See bench/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CI_CONFIGURATION",
    "GIT_CODE_PATHS",
    "PROTECTED_ANYWHERE",
    "PROTECTED_AT_ROOT",
    "SHELL_STARTUP_FILES",
    "Finding",
    "PersistenceGuard",
    "classify",
    "remove_legacy_placeholders",
]

PROTECTED_ANYWHERE = frozenset(
    {
        ".git",  # a new repository: git run there uses its config and hooks
        ".pi",  # extensions, settings, policy the next pi run in that directory loads
        ".agents",
        ".claude",
        ".cursor",
        ".gemini",
        ".continue",
        ".windsurf",
        ".roo",
        ".mcp.json",  # MCP server entries are commands
        ".envrc",  # direnv
        ".vscode",  # tasks.json, settings (terminal profiles, formatters)
        ".idea",
        ".zed",
        ".devcontainer",  # postCreateCommand …
        ".husky",  # git hooks once core.hooksPath points there
        ".pre-commit-config.yaml",  # hooks pre-commit installs and runs
        ".mise.toml",  # mise runs hooks and tasks on cd
        "mise.toml",
    }
)
"""Names that are persistence wherever they appear in a writable root (issue 14 §1):
a tool opened in that directory (git, direnv, an editor, an agent, pi) reads them."""

CI_CONFIGURATION = (
    ".github",  # workflows run with the repository's CI secrets
    ".gitlab-ci.yml",
    ".circleci",
)
"""CI configuration: jobs run with the repository's secrets (protected at the top of
a writable root)."""

SHELL_STARTUP_FILES = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
)
"""Shell start-up files (protected at the top of a writable root, and under HOME)."""

PROTECTED_AT_ROOT = frozenset({*CI_CONFIGURATION, *SHELL_STARTUP_FILES})
"""Names that matter only at the top of a writable root (CI configuration, shell
start-up files); deeper they are ordinary files (vendored packages ship them)."""

GIT_CODE_PATHS = (
    ("config",),
    ("config.worktree",),
    ("hooks",),
    ("info", "attributes"),
    ("commondir",),
    ("gitdir",),
    ("objects", "info", "alternates"),
)
"""Entries of a git directory that make git run code or change where it points
(issue 14 §2): ``config`` (core.fsmonitor, hooksPath, pager, sshCommand, filters,
aliases, includes), ``hooks/``, ``info/attributes`` (filter and diff drivers),
``commondir``/``gitdir`` and alternates (another repository's config and hooks),
and the same names in each linked worktree's git directory (``worktrees/*/``) and in
the submodules' git directories under ``modules/`` (see `_git_rule`). ``*`` matches one name. A worktree's own
``commondir`` and ``gitdir`` are accepted when they are git's own (see module doc)."""

# Git directories hold tens of thousands of object and ref directories; none of
# them can hold a GIT_CODE_PATHS entry (objects/info/alternates is a file).
_GIT_DIRS_NOT_WALKED = frozenset({"refs", "logs", "lfs", "rr-cache", "packed-refs"})

_HOT_SECONDS = 2.0
"""A directory whose mtime is this close to the moment it was listed is listed
again on the next check: timestamps come from a coarse clock, so an entry made just
after the listing may leave the mtime unchanged."""

MAX_DIRECTORIES = 1_000_000
"""Directories recorded at most; past it, `PersistenceGuard.complete` is False."""


@dataclass(frozen=True)
class Finding:
    """One protected entry a sandboxed process created.

    Attributes:
        path: absolute host path where it appeared.
        rule: why it is protected (``"name .envrc"``, ``"git config"``,
            ``"deny_write"`` …), for the report.
        moved_to: where it now is, or None when it could not be moved.
        error: why it could not be moved (then it was removed if possible; see
            `PersistenceGuard.check`), else None.
    """

    path: str
    rule: str
    moved_to: str | None = None
    error: str | None = None


@dataclass
class _Dir:
    mtime_ns: int
    inode: int
    listed_at: float
    names: frozenset[str]


def classify(
    path: str, root: str, *, git_dirs: Iterable[str] = (), watched: Iterable[str] = ()
) -> str | None:
    """Why a new entry at ``path`` (absolute, inside writable root ``root``) is
    protected, or None when it is an ordinary file.

    ``git_dirs`` are git directories the caller knows of (a worktree's git
    directory named by a ``.git`` file); any directory named ``.git`` is one too.
    ``watched`` are exact paths the profile keeps read-only but that did not exist.
    """
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    watched_rule = "a path the sandbox keeps read-only" if path in watched else None
    for git_dir in git_dirs:
        if path != git_dir and path.startswith(git_dir.rstrip("/") + "/"):
            inner = os.path.relpath(path, git_dir).split(os.sep)
            return _git_rule(inner) or watched_rule
    if ".git" in parts[:-1]:
        index = parts.index(".git")
        return _git_rule(parts[index + 1 :]) or watched_rule
    name = parts[-1]
    if name in PROTECTED_ANYWHERE:
        return f"protected name {name}"
    if len(parts) == 1 and name in PROTECTED_AT_ROOT:
        return f"protected name {name} at the top of a writable root"
    return watched_rule


def _git_rule(inner: Sequence[str]) -> str | None:
    if not inner:
        return None
    if inner[0] == "worktrees" and len(inner) > 2:
        # A linked worktree's git directory: git never writes config, hooks or
        # attributes there (they come from the common directory), so any is planted.
        rule = _git_rule(inner[2:])
        return None if rule is None else "git worktrees/*/" + rule[4:]
    if inner[0] == "modules" and len(inner) > 1:
        # Submodules' git directories: modules/<name, may hold slashes>/<entry>.
        # Their objects, refs and index are ordinary; their code paths are not.
        if "hooks" in inner[2:] or inner[-1] in _GIT_MODULE_CODE_NAMES:
            return "git modules/*/" + inner[-1]
        if tuple(inner[-2:]) == ("info", "attributes"):
            return "git modules/*/info/attributes"
        return None
    for pattern in GIT_CODE_PATHS:
        if len(inner) < len(pattern):
            continue
        if all(p in ("*", part) for p, part in zip(pattern, inner, strict=False)):
            return "git " + "/".join(pattern)
    return None


_GIT_MODULE_CODE_NAMES = frozenset(
    {"config", "config.worktree", "commondir", "gitdir", "alternates"}
)


class PersistenceGuard:
    """Watches a run's writable roots for protected entries (see module doc).

    Blocking file-system work: build it and call `check` from a worker thread when
    on an event loop.

    Args:
        roots: the tool worker's writable roots (canonical absolute paths).
        quarantine_dir: where findings are moved (created 0700 on first use); must
            be outside every root.
        watched: exact paths kept read-only that did not exist (``deny_write``
            entries, paths git config names, a root's ``HEAD``).
        git_dirs: git directories in the roots other than ``.git`` directories
            (a linked worktree's, named by its ``.git`` file).
        max_directories: bound on recorded directories (see `complete`).
    """

    def __init__(
        self,
        roots: Sequence[str],
        *,
        quarantine_dir: str,
        watched: Iterable[str] = (),
        git_dirs: Iterable[str] = (),
        max_directories: int = MAX_DIRECTORIES,
    ) -> None:
        self.roots = tuple(dict.fromkeys(roots))
        self.quarantine_dir = quarantine_dir
        self.watched = frozenset(watched)
        self.git_dirs = tuple(git_dirs)
        self.max_directories = max_directories
        self.complete = True
        self._dirs: dict[str, _Dir] = {}
        # Linked worktrees git made during the run: .git file -> its content, and
        # the worktree git dir's commondir -> its content; re-checked on every check.
        self._accepted: dict[str, bytes] = {}
        # Git pointer files seen empty (git is writing them): decided once they have
        # content; an empty one points nowhere, so nothing can use it meanwhile.
        self._pending: dict[str, str] = {}
        # Directories recorded since `take_new_directories` (for inotify watches).
        self._new_dirs: list[str] = []
        self._moved = 0
        for root in self.roots:
            self._record_tree(root, root, report=None)

    @property
    def accepted(self) -> frozenset[str]:
        """Git pointer files of linked worktrees ``git worktree add`` made during the
        run and the guard accepted (their content is checked on every `check`)."""
        return frozenset(self._accepted)

    def take_new_directories(self) -> list[str]:
        """Directories recorded since the last call (all of them the first time),
        for the caller's inotify watches (`pi_sandbox.sandbox.inotify_watch`)."""
        new, self._new_dirs = self._new_dirs, []
        return [d for d in new if d in self._dirs]

    @property
    def directories(self) -> int:
        """How many directories the guard stats on each check."""
        return len(self._dirs)

    def check(self) -> list[Finding]:
        """Find protected entries created since the last check and quarantine them.

        An entry that cannot be moved is removed (``shutil.rmtree`` / ``unlink``);
        either way the `Finding` says what happened. Never raises for file-system
        errors on individual entries.

        Returns:
            The findings, in the order found (parents before their contents).
        """
        found: list[Finding] = []
        for path, root in list(self._pending.items()):
            if not os.path.lexists(path):
                del self._pending[path]
                continue
            verdict = self._is_git_worktree_entry(path, root)
            if verdict is None:
                continue
            del self._pending[path]
            if not verdict:
                rule = classify(path, root, git_dirs=self.git_dirs, watched=self.watched)
                found.append(self._quarantine(path, rule or "a git pointer"))
        for path, expected in list(self._accepted.items()):
            if _read_small(path) != expected:
                del self._accepted[path]
                if os.path.lexists(path):
                    found.append(self._quarantine(path, "a linked worktree's git pointer changed"))
        for directory, before in list(self._dirs.items()):
            if directory not in self._dirs:
                continue  # dropped with a quarantined or removed parent
            try:
                info = os.lstat(directory)
            except OSError:
                self._forget(directory)
                continue
            if not stat.S_ISDIR(info.st_mode):
                self._forget(directory)
                continue
            changed = info.st_mtime_ns != before.mtime_ns or info.st_ino != before.inode
            hot = before.listed_at - info.st_mtime_ns / 1e9 < _HOT_SECONDS
            if not (changed or hot):
                continue
            root = self._root_of(directory)
            if info.st_ino != before.inode:
                # Replaced (rmdir + mkdir): everything in it is new.
                self._forget(directory)
                self._record_tree(directory, root, report=found)
                continue
            listed_at = time.time()
            names = _list(directory)
            if names is None:
                continue
            self._dirs[directory] = _Dir(info.st_mtime_ns, info.st_ino, listed_at, names)
            for name in sorted(names - before.names):
                self._new_entry(os.path.join(directory, name), root, found)
            for name in before.names - names:
                self._forget(os.path.join(directory, name))
        return found

    # --- internals -------------------------------------------------------------------

    def _root_of(self, path: str) -> str:
        return max((r for r in self.roots if _within(path, r)), key=len)

    def _forget(self, directory: str) -> None:
        prefix = directory.rstrip("/") + "/"
        for key in [k for k in self._dirs if k == directory or k.startswith(prefix)]:
            del self._dirs[key]

    def _new_entry(self, path: str, root: str, found: list[Finding]) -> None:
        if _within(path, self.quarantine_dir):
            return  # the agent directory inside a writable root: our own moves
        if self._judge(path, root, found):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            self._record_tree(path, root, report=found)

    def _judge(self, path: str, root: str, found: list[Finding]) -> bool:
        """Quarantine ``path`` if it is protected (or leave it pending); True when
        it was taken care of, False for an ordinary entry."""
        rule = classify(path, root, git_dirs=self.git_dirs, watched=self.watched)
        if rule is None:
            return False
        verdict = self._is_git_worktree_entry(path, root)
        if verdict is None:
            self._pending[path] = root
            return True
        if verdict:
            return False
        found.append(self._quarantine(path, rule))
        return True

    def _record_tree(self, top: str, root: str, *, report: list[Finding] | None) -> None:
        """Record ``top`` and every directory below it; with ``report``, every
        entry is new and is classified on the way."""
        pending = [top]
        while pending:
            directory = pending.pop()
            if len(self._dirs) >= self.max_directories:
                self.complete = False
                return
            try:
                info = os.lstat(directory)
            except OSError:
                continue
            listed_at = time.time()
            try:
                # scandir's d_type spares an lstat per file on a large tree.
                with os.scandir(directory) as it:
                    entries = {e.name: _is_real_dir(e) for e in it}
            except OSError:
                self.complete = False
                continue
            names = frozenset(entries)
            self._dirs[directory] = _Dir(info.st_mtime_ns, info.st_ino, listed_at, names)
            self._new_dirs.append(directory)
            in_git = self._in_git_dir(directory, root)
            for name in sorted(names):
                child = os.path.join(directory, name)
                if _within(child, self.quarantine_dir):
                    continue
                if report is not None and self._judge(child, root, report):
                    continue
                if in_git and (name in _GIT_DIRS_NOT_WALKED or _is_object_dir(directory, name)):
                    continue
                if entries[name]:
                    pending.append(child)

    def _in_git_dir(self, directory: str, root: str) -> bool:
        if any(_within(directory, g) for g in self.git_dirs):
            return True
        return ".git" in os.path.relpath(directory, root).split(os.sep)

    def _is_git_worktree_entry(self, path: str, root: str) -> bool | None:
        """Whether ``path`` is part of a linked worktree ``git worktree add`` made:
        the new worktree's ``.git`` file, or ``worktrees/<name>/commondir`` /
        ``gitdir`` of its git directory, all pointing at each other (then
        remembered, and checked again on every `check`). None while the file is
        still empty (git is writing it)."""
        name = os.path.basename(path)
        parent = os.path.dirname(path)
        in_worktrees = os.path.basename(os.path.dirname(parent)) == "worktrees"
        is_pointer = (name == ".git" and os.path.isfile(path) and not os.path.islink(path)) or (
            name in ("commondir", "gitdir") and in_worktrees and not os.path.islink(path)
        )
        if not is_pointer:
            return False
        content = _read_small(path)
        if not content:
            return None
        if name == ".git":
            return self._accept_worktree(path)
        target = content.decode(errors="replace").strip()
        if name == "gitdir":
            # The back-pointer git uses to prune a worktree; it runs nothing.
            # Accepted when it names a .git inside a writable root.
            if (
                os.path.isabs(target)
                and os.path.basename(target) == ".git"
                and any(_within(target, r) for r in self.roots)
            ):
                self._accepted[path] = content
                return True
            return False
        # commondir: it must lead to the git directory holding this worktrees/.
        common = os.path.dirname(os.path.dirname(parent))
        if os.path.realpath(os.path.join(parent, target)) == os.path.realpath(common):
            self._accepted[path] = content
            return True
        return False

    def _accept_worktree(self, git_file: str) -> bool | None:
        """A new ``.git`` file is git's own linked worktree (True), not (False), or
        not decided yet (None: git writes the worktree's ``commondir`` after its
        ``.git`` file). Undecided, git would take the worktree directory for a git
        directory of its own, whose code paths the guard watches like any other."""
        content = _read_small(git_file)
        text = content.decode(errors="replace").strip()
        if not text.startswith("gitdir:"):
            return False
        git_dir = os.path.normpath(os.path.join(os.path.dirname(git_file), text[7:].strip()))
        worktrees = os.path.dirname(git_dir)
        if os.path.basename(worktrees) != "worktrees" or os.path.islink(git_dir):
            return False
        common = os.path.dirname(worktrees)
        if not any(_within(os.path.realpath(common), r) for r in self.roots) and not any(
            _within(os.path.realpath(common), g) for g in self.git_dirs
        ):
            return False
        commondir = _read_small(os.path.join(git_dir, "commondir")).decode(errors="replace")
        if not commondir.strip():
            return None
        if os.path.realpath(os.path.join(git_dir, commondir.strip())) != os.path.realpath(common):
            return False
        self._accepted[git_file] = content
        self._accepted[os.path.join(git_dir, "commondir")] = commondir.encode()
        return True

    def _quarantine(self, path: str, rule: str) -> Finding:
        self._forget(path)
        self._accepted.pop(path, None)
        self._pending.pop(path, None)
        # Gone from its directory's recorded names, so that the same name made
        # again is new again.
        parent = self._dirs.get(os.path.dirname(path))
        if parent is not None:
            parent.names = parent.names - {os.path.basename(path)}
        root = self._root_of(path)
        self._moved += 1
        target = os.path.join(
            self.quarantine_dir,
            f"{self._moved:03d}",
            os.path.basename(root) or "root",
            os.path.relpath(path, root),
        )
        try:
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            shutil.move(path, target)
            return Finding(path, rule, moved_to=target)
        except OSError as exc:
            if not os.path.lexists(path):
                # Gone already: another run's guard over the same tree moved it.
                return Finding(path, rule, error="it disappeared before pi could move it")
            error = f"could not move it to {target}: {exc.strerror or exc}"
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        if os.path.lexists(path):
            error += "; and could not remove it"
        else:
            error += "; removed it instead"
        return Finding(path, rule, moved_to=None, error=error)


def _is_object_dir(directory: str, name: str) -> bool:
    # objects/: its two-hex-digit fan-out and pack/ hold no code paths; info/ does
    # (alternates), so it is walked.
    return os.path.basename(directory) == "objects" and name != "info"


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _list(directory: str) -> frozenset[str] | None:
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return None


def _read_small(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(4096)
    except OSError:
        return b""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def remove_legacy_placeholders(base: str | None = None) -> list[str]:
    """Remove the empty mount-point directories pi-sandbox 0.5 and earlier left in
    workspaces (``.envrc/``, ``.mcp.json/``, ``.vscode/`` …) after a run that was
    killed, once, when no such older run is still active.

    Safe only under the old versions' own rule, which this keeps: the paths come
    from their list (``/tmp/pi-sandbox-<uid>/placeholders.json``, written before
    bwrap created them), each is removed only if it is still an empty directory
    (``rmdir``), and only while holding their lock exclusively (an old run still
    active holds it shared, and removing its mount point would detach its
    protection). The list is then deleted, so this runs once. Never raises.

    Args:
        base: the old versions' bookkeeping directory (tests); default
            ``/tmp/pi-sandbox-<uid>``.

    Returns:
        The directories removed.
    """
    import fcntl
    import json

    base = base or f"/tmp/pi-sandbox-{os.getuid()}"
    listing = os.path.join(base, "placeholders.json")
    try:
        info = os.lstat(base)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return []
        if not os.path.isfile(listing):
            return []
        fd = os.open(os.path.join(base, "runs.lock"), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return []
    removed: list[str] = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with open(listing, encoding="utf-8") as handle:
            data = json.load(handle)
        paths = [p for p in data if isinstance(p, str) and os.path.isabs(p)]
        for path in sorted(paths, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only an empty directory
                removed.append(path)
        os.unlink(listing)
    except (OSError, ValueError, TypeError):
        return removed
    finally:
        os.close(fd)
    return removed
