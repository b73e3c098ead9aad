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
  ``commondir`` …), and at its top every entry that is not git's own
  (`GIT_STATE_FILES`, `GIT_STATE_DIRS`: a bare repository hidden as ``.git/x``);
  ordinary git writes (objects, refs, the index, logs) are fine;
- the ``config`` of a repository made during the run (a bare layout anywhere)
  when it sets a key that makes git run code (`config_code_keys`);
- a path the profile names (``deny_write`` entries, paths a repository's git
  config points at, ``HEAD`` at a root without ``.git``) that did not exist.

The supervisor also runs a check as soon as inotify reports a new entry in a
recorded directory (`pi_sandbox.sandbox.inotify_watch`), so a finding usually
exists on the host for milliseconds only (docs/sandbox.md, "Nothing in your tree").

Each finding is renamed into ``quarantine_dir`` (same file system: atomic; else
copied and removed) and reported by the caller (audit record, notice, JSON
event). A linked worktree that ``git worktree add`` made is recognised and kept:
its ``.git`` file must point at ``<common dir>/worktrees/<name>`` of a repository
that existed when the guard was built, and that directory's ``commondir`` must
lead back; both are checked again on every later `check`.

Fail closed (red-team F2): a directory the guard cannot list or search during
the run is given ``u+rwx`` back when this uid owns it (a sandboxed tool runs as
this uid and can ``chmod 311`` its own directories), else moved out whole; a new
directory deeper than `_LONG_PATH` characters is moved out whole through
directory descriptors; an entry that can be neither moved nor removed is a
`Finding` with ``left=True``, which ends the run with exit 1.

Per-call cost: one ``lstat`` per directory of the writable roots (git object and
ref directories are not walked). See bench/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CI_CONFIGURATION",
    "GIT_CODE_PATHS",
    "GIT_STATE_DIRS",
    "GIT_STATE_FILES",
    "PROTECTED_ANYWHERE",
    "PROTECTED_AT_ROOT",
    "PROTECTED_SUFFIXES",
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
        ".mise.toml",  # mise runs hooks and tasks on cd (and the variants below)
        "mise.toml",
        ".mise",  # .mise/config.toml
        ".hg",  # hgrc [hooks] run by any hg command there
        ".jj",  # Jujutsu's repo config (fsmonitor, editor, pager)
        "lefthook.yml",  # the commands lefthook's installed git hooks run
        ".lefthook.yml",
        "lefthook-local.yml",
        ".lefthook-local.yml",
        ".devcontainer.json",  # the single-file form of .devcontainer/
        ".nvim.lua",  # Neovim/Vim 'exrc' files, run when the editor opens there
        ".nvimrc",
        ".exrc",
    }
)
"""Names that are persistence wherever they appear in a writable root (issue 14 §1):
a tool opened in that directory (git, direnv, an editor, an agent, pi) reads them."""

CI_CONFIGURATION = (
    ".github",  # workflows run with the repository's CI secrets
    ".gitlab-ci.yml",
    ".gitlab",  # CI templates and agent configuration included by .gitlab-ci.yml
    ".circleci",
    "Jenkinsfile",
    ".travis.yml",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    ".buildkite",
    ".drone.yml",
    ".woodpecker.yml",
    ".woodpecker",
    ".gitea",  # Gitea/Forgejo Actions workflows
    ".forgejo",
    "appveyor.yml",
    ".appveyor.yml",
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
start-up files); deeper they are ordinary files (vendored packages ship them).

The rule for both lists (docs/sandbox.md, "Nothing in your tree"): a name belongs
here when a tool acts on it on the host *without being asked* to run anything from
it: git, hg, direnv, mise, lefthook, an editor or agent opening the directory, a
CI service on push. Files the user runs on purpose and the model must be able to
edit (``Makefile``, ``package.json``, ``.npmrc``, ``.yarnrc.yml``, ``tox.ini``)
are not: running ``make`` or ``npm install`` already runs the project's own code."""

_MISE_CONFIG = re.compile(r"^\.?mise(\.[A-Za-z0-9_-]+)?(\.local)?\.toml$")
"""mise's per-directory config files (``mise.local.toml``, ``.mise.dev.toml`` …):
their ``[hooks]`` and ``[env]`` _.source run on ``cd`` with mise activated."""

PROTECTED_SUFFIXES = (
    (".config", "mise"),
    (".config", "mise.toml"),
    (".config", "mise.local.toml"),
    ("mise", "config.toml"),
)
"""Two-part paths that are persistence wherever they appear (mise also reads
``.config/mise/``, ``.config/mise.toml`` and ``mise/config.toml``)."""

GIT_STATE_FILES = frozenset(
    {
        "HEAD",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "REBASE_HEAD",
        "AUTO_MERGE",
        "COMMIT_EDITMSG",
        "TAG_EDITMSG",
        "SQUASH_MSG",
        "NOTES_EDITMSG",
        "EDIT_DESCRIPTION",
        "PULLREQ_EDITMSG",
        "ADD_EDIT.patch",
        "addp-hunk-edit.diff",
        "index",
        "packed-refs",
        "description",
        "shallow",
        "gc.log",
        "gc.pid",
        "locked",  # worktrees/<name>/locked
        "git-daemon-export-ok",
        "gitk.cache",
        "fsmonitor--daemon.ipc",
    }
)
"""Files git itself writes at the top of a git directory (gitrepository-layout(5)
and the commands' documentation); with `GIT_STATE_DIRS`, `GIT_CODE_PATHS` and the
prefixes in `_git_state_name`, everything else new there is quarantined (issue 14
§2, red-team F1: a bare repository hidden as ``.git/x``)."""

GIT_STATE_DIRS = frozenset(
    {
        "objects",
        "refs",
        "logs",
        "info",
        "worktrees",
        "modules",
        "rebase-merge",
        "rebase-apply",
        "sequencer",
        "rr-cache",
        "reftable",
        "branches",
        "remotes",
        "lfs",
        "annex",
        "git-crypt",
        "svn",
        "filter-repo",
        "NOTES_MERGE_WORKTREE",
    }
)
"""Directories git (and git-lfs, git-annex, git-crypt, git-svn, git-filter-repo)
makes at the top of a git directory."""

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
        left: True when it is still in place (neither moved nor removed): the run
            must end with an error (docs/sandbox.md, red-team F2c).
    """

    path: str
    rule: str
    moved_to: str | None = None
    error: str | None = None
    left: bool = False


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
            return _git_rule(inner, path) or watched_rule
    if ".git" in parts[:-1]:
        index = parts.index(".git")
        return _git_rule(parts[index + 1 :], path) or watched_rule
    name = parts[-1]
    if name in PROTECTED_ANYWHERE or _MISE_CONFIG.match(name):
        return f"protected name {name}"
    if tuple(parts[-2:]) in PROTECTED_SUFFIXES:
        return f"protected path {parts[-2]}/{name}"
    if len(parts) == 1 and name in PROTECTED_AT_ROOT:
        return f"protected name {name} at the top of a writable root"
    return watched_rule


def _git_rule(inner: Sequence[str], path: str = "") -> str | None:
    if not inner:
        return None
    if inner[0] == "worktrees" and len(inner) > 2:
        # A linked worktree's git directory: git never writes config, hooks or
        # attributes there (they come from the common directory), so any is planted.
        rule = _git_rule(inner[2:], path)
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
    if len(inner) == 1 and not _git_state_name(inner[0], path):
        # Anything else git would not have made: a bare repository hidden as
        # .git/x, whose config a linked worktree or `cd` would make git use.
        return (
            f"git entry {inner[0]}, which is not git's own "
            "(a repository or file planted in a git directory)"
        )
    return None


_GIT_STATE_PREFIXES = (
    "MERGE_",
    "BISECT_",
    "NOTES_MERGE_",
    "sharedindex.",
    "index.stash.",
    "next-index-",
)


def _git_state_name(name: str, path: str) -> bool:
    """Whether ``name`` at the top of a git directory is one git itself makes, of
    the type git makes it (a directory named like a state file is not)."""
    is_dir = bool(path) and os.path.isdir(path) and not os.path.islink(path)
    if name in GIT_STATE_DIRS:
        return is_dir or not path
    if name in GIT_STATE_FILES or name.endswith(".lock") or name.startswith(_GIT_STATE_PREFIXES):
        return not is_dir or name == "NOTES_MERGE_WORKTREE"
    return False


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
        # Git directories present at start (real paths): a linked worktree made
        # during the run is accepted only when its common directory is one of them
        # (red-team F1: a worktree of a repository the run planted is not).
        self._start_git_dirs: set[str] = {os.path.realpath(g) for g in self.git_dirs}
        # Directories that gained a HEAD/config/objects/refs entry during the run:
        # if they are (or become) a bare repository, its config is checked on every
        # check for keys that make git run code (red-team F1c).
        self._new_repositories: set[str] = set()
        # config path -> (inode, size, mtime) when last judged harmless.
        self._harmless_configs: dict[str, tuple[int, int, int]] = {}
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
            except PermissionError:
                # An ancestor lost its search permission (chmod 600): give it back
                # where this uid owns it; else what is below cannot be checked (F2).
                info = self._reach(directory)
                if info is None:
                    found.append(
                        self._quarantine(
                            directory, "a directory pi cannot reach (it may hide protected names)"
                        )
                    )
                    continue
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
            if names is None and _open_up(directory):
                names = _list(directory)
            if names is None and directory in self.roots:
                found.append(
                    Finding(
                        directory,
                        "a writable root pi cannot list",
                        error="pi could not check it",
                        left=True,
                    )
                )
                continue
            if names is None:
                # Made unlistable by the sandbox (chmod 311) and not ours to open:
                # whatever it hides cannot be checked, so it goes (F2).
                found.append(
                    self._quarantine(
                        directory, "a directory pi cannot list (it may hide protected names)"
                    )
                )
                continue
            self._dirs[directory] = _Dir(info.st_mtime_ns, info.st_ino, listed_at, names)
            for name in sorted(names - before.names):
                self._new_entry(os.path.join(directory, name), root, found)
            for name in before.names - names:
                self._forget(os.path.join(directory, name))
        for directory in sorted(self._new_repositories):
            if not os.path.isdir(directory):
                self._new_repositories.discard(directory)
                continue
            finding = self._check_repository_config(directory)
            if finding is not None:
                found.append(finding)
        return found

    def check_repository(self, directory: str) -> list[Finding]:
        """Quarantine the config of a repository made during the run (``directory``
        holds a ``.git`` directory or is a bare repository) when it sets a key that
        makes git run code or changes where git points (`config_code_keys`); the
        end-of-run look at new repositories (run.py) calls it. Never raises."""
        git_dir = os.path.join(directory, ".git")
        if not (os.path.isdir(git_dir) and not os.path.islink(git_dir)):
            git_dir = directory
        finding = self._check_repository_config(git_dir, cached=False)
        return [] if finding is None else [finding]

    def _check_repository_config(self, git_dir: str, *, cached: bool = True) -> Finding | None:
        if not _bare_layout(git_dir):
            return None
        for name in ("config", "config.worktree"):
            config = os.path.join(git_dir, name)
            try:
                info = os.lstat(config)
            except OSError:
                continue
            signature = (info.st_ino, info.st_size, info.st_mtime_ns)
            if cached and self._harmless_configs.get(config) == signature:
                continue  # judged already, unchanged: no git process per check
            keys = ["a symlink"] if stat.S_ISLNK(info.st_mode) else config_code_keys(config)
            if not keys:
                # Remembered only once its mtime is past the coarse clock's tick:
                # a same-size rewrite in the same tick would look unchanged.
                if time.time() - info.st_mtime_ns / 1e9 > _HOT_SECONDS:
                    self._harmless_configs[config] = signature
            else:
                self._harmless_configs.pop(config, None)
                return self._quarantine(
                    config,
                    f"git config of a repository made during the run sets {', '.join(keys[:5])}",
                )
        return None

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
        self._note_repository(path, root)
        if self._judge(path, root, found):
            return
        if len(path) > _LONG_PATH and os.path.isdir(path):
            found.append(self._quarantine(path, _TOO_DEEP))
            return
        if os.path.isdir(path) and not os.path.islink(path):
            self._record_tree(path, root, report=found)

    def _reach(self, path: str) -> os.stat_result | None:
        """`_open_up` each directory from ``path``'s writable root down to its
        parent that this uid cannot search, then ``lstat`` it again (None when it
        still cannot be reached)."""
        root = self._root_of(path)
        prefix = root
        for part in os.path.relpath(os.path.dirname(path), root).split(os.sep):
            if part not in ("", "."):
                prefix = os.path.join(prefix, part)
            if not os.access(prefix, os.X_OK):
                _open_up(prefix)
        try:
            return os.lstat(path)
        except OSError:
            return None

    def _note_repository(self, path: str, root: str) -> None:
        if os.path.basename(path) in _REPOSITORY_NAMES:
            directory = os.path.dirname(path)
            if os.path.realpath(directory) in self._start_git_dirs:
                return  # an existing repository: its config is the profile's (read-only)
            if not self._in_git_dir(directory, root) or os.path.basename(directory) == ".git":
                self._new_repositories.add(directory)

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
            except PermissionError:
                if report is None or (info := self._reach(directory)) is None:
                    self.complete = False
                    continue
            except OSError:
                continue
            listed_at = time.time()
            if report is not None and not os.access(directory, os.R_OK | os.X_OK):
                # Listable but not searchable (chmod 644) hides its entries' types
                # and contents just as well: opened up like an unlistable one.
                _open_up(directory)
            entries = _scan(directory)
            if entries is None and report is not None and _open_up(directory):
                entries = _scan(directory)
            if entries is None:
                if report is None or (directory == top and directory in self.roots):
                    self.complete = False
                else:
                    # New and unlistable (the sandbox made it so): fail closed (F2).
                    report.append(
                        self._quarantine(
                            directory, "a directory pi cannot list (it may hide protected names)"
                        )
                    )
                continue
            names = frozenset(entries)
            if report is None and (
                os.path.basename(directory) == ".git" or _bare_layout(directory, names)
            ):
                self._start_git_dirs.add(os.path.realpath(directory))
            self._dirs[directory] = _Dir(info.st_mtime_ns, info.st_ino, listed_at, names)
            self._new_dirs.append(directory)
            in_git = self._in_git_dir(directory, root)
            for name in sorted(names):
                child = os.path.join(directory, name)
                if _within(child, self.quarantine_dir):
                    continue
                if report is not None:
                    self._note_repository(child, root)
                    if self._judge(child, root, report):
                        continue
                if in_git and (name in _GIT_DIRS_NOT_WALKED or _is_object_dir(directory, name)):
                    continue
                if entries[name]:
                    if len(child) > _LONG_PATH:
                        # Deeper than the path functions reach (PATH_MAX 4096):
                        # unverifiable, so a new one is moved out whole (F2).
                        if report is None:
                            self.complete = False
                        else:
                            report.append(self._quarantine(child, _TOO_DEEP))
                        continue
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
        if os.path.realpath(common) not in self._start_git_dirs:
            # Only a worktree of a repository that existed at start: one of a
            # repository the run made (.git/x, a bare b/) would run its config (F1).
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
        if len(path) > _LONG_PATH or len(target) > _LONG_PATH:
            return self._quarantine_deep(path, rule)
        error = ""
        for attempt in range(2):
            try:
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                shutil.move(path, target)
                return Finding(path, rule, moved_to=target)
            except OSError as exc:
                if not _lexists(path):
                    # Gone already: another run's guard over the same tree moved it.
                    return Finding(path, rule, error="it disappeared before pi could move it")
                error = f"could not move it to {target}: {exc.strerror or exc}"
                # The sandbox may have taken write or search permission from the
                # parent (or from the entry, for a copy across file systems): give
                # them back on what this uid owns and try once more (F2c).
                if attempt or not (_open_up(os.path.dirname(path)) | _open_tree(path)):
                    break
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        if _lexists(path):
            error += "; and could not remove it"
            return Finding(path, rule, moved_to=None, error=error, left=True)
        error += "; removed it instead"
        return Finding(path, rule, moved_to=None, error=error)

    def _quarantine_deep(self, path: str, rule: str) -> Finding:
        """Move ``path``, too long for path-based calls, by walking directory
        descriptors (``openat``) to its parent and ``renameat`` into a flat
        ``quarantine_dir/NNN/`` (same file system only)."""
        target_dir = os.path.join(self.quarantine_dir, f"{self._moved:03d}")
        name = os.path.basename(path)
        try:
            os.makedirs(target_dir, mode=0o700, exist_ok=True)
            parent = _open_path(os.path.dirname(path))
            try:
                os.rename(name, os.path.join(target_dir, name), src_dir_fd=parent)
            finally:
                os.close(parent)
            return Finding(path, rule, moved_to=os.path.join(target_dir, name))
        except OSError as exc:
            return Finding(
                path,
                rule,
                error=f"could not move it to {target_dir}: {exc.strerror or exc}",
                left=True,
            )


_LONG_PATH = 3800
"""Paths longer than this (characters) are not walked: PATH_MAX is 4096 and the
quarantine target adds its own prefix."""

_TOO_DEEP = f"a directory nested too deep for pi to check (a path over {_LONG_PATH} characters)"

_REPOSITORY_NAMES = frozenset({"HEAD", "config", "config.worktree", "objects", "refs", "commondir"})


def _bare_layout(directory: str, names: frozenset[str] | None = None) -> bool:
    """Whether git could take ``directory`` for a git directory: a ``HEAD`` that is
    not a directory next to ``objects``, ``refs`` or ``commondir`` (as
    `pi_sandbox.sandbox.repository_scan` tests it)."""
    if names is None:
        names = _list(directory) or frozenset()
    if "HEAD" not in names or os.path.isdir(os.path.join(directory, "HEAD")):
        return False
    return bool(names & {"objects", "refs", "commondir"})


_CODE_KEY = re.compile(
    r"^(core\.(fsmonitor|hookspath|sshcommand|pager|editor|askpass|gitproxy|worktree"
    r"|alternaterefscommand|attributesfile)"
    r"|sequence\.editor|credential\..*helper|gpg\.(.*\.)?program|diff\.external"
    r"|filter\..*\.(clean|smudge|process)|diff\..*\.(textconv|command)|merge\..*\.driver"
    r"|(merge|diff)tool\..*\.(cmd|path)|guitool\..*\.cmd|browser\..*\.(cmd|path)|web\.browser"
    r"|man\..*\.(cmd|path)|include\.path|includeif\..*|uploadpack\.packobjectshook"
    r"|pager\..*|interactive\.difffilter|hook\..*|remote\..*\.(uploadpack|receivepack|vcs)"
    r"|url\..*\.(insteadof|pushinsteadof)|protocol\.(.*\.)?allow|trace2\..*|sendemail\..*"
    r"|submodule\..*\.update|alias\..*|remote\..*\.url"
    r"|tar\..*\.command|trailer\..*\.(command|cmd)|imap\.tunnel|init\.templatedir)$"
)
_GIT_BOOLEAN = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})


def config_code_keys(config: str) -> list[str]:
    """The keys of git config file ``config`` that make git run a command or read
    code or config from elsewhere (lower-cased; red-team F1c): ``core.fsmonitor``
    (unless a boolean: git's own daemon), ``core.hooksPath``, ``core.sshCommand``,
    ``core.pager``, ``core.editor``, ``core.askPass``, ``sequence.editor``,
    ``credential.helper``, ``gpg.program``, ``filter.*.{clean,smudge,process}``,
    ``diff.*.{textconv,command}``, ``merge.*.driver``, ``alias.*`` starting with
    ``!``, ``include.path``, ``includeIf.*``, ``uploadpack.packObjectsHook``,
    ``hook.*``, ``url.*.insteadOf``, ``remote.*.url`` of the ``ext::`` transport,
    ``tar.*.command``, ``trailer.*.{command,cmd}``, ``imap.tunnel``,
    ``init.templateDir`` …
    A file git cannot parse counts as one (``"unparsable config"``): git would
    refuse it, and pi's lenient reading must not be the one that decides."""
    from pi_sandbox.sandbox.profile import _parse_git_config

    entries = _git_config_list(config)
    if entries is None:
        entries = _parse_git_config(config)
    keys: list[str] = []
    for key, value in entries:
        if key != "unparsable config" and not _CODE_KEY.match(key):
            continue
        text = value.strip()
        if key == "core.fsmonitor" and text.lower() in _GIT_BOOLEAN:
            continue
        if key.startswith("alias.") and not text.startswith("!"):
            continue
        if key.startswith("submodule.") and not text.startswith("!"):
            continue
        if key.startswith("remote.") and key.endswith(".url") and not text.startswith("ext::"):
            continue
        if key not in keys:
            keys.append(key)
    return keys


def _git_config_list(config: str) -> list[tuple[str, str]] | None:
    """``git config --file CONFIG --no-includes --list`` as (key, value); None
    without git; ``[("unparsable config", "")]`` when git rejects the file."""
    import subprocess

    git = shutil.which("git")
    if git is None:
        return None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    try:
        proc = subprocess.run(
            [git, "config", "--file", config, "--no-includes", "-z", "--list"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
            cwd="/",
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return [("unparsable config", "")]
    entries = []
    for record in proc.stdout.split(b"\0"):
        if record:
            key, _, value = record.partition(b"\n")
            entries.append((os.fsdecode(key).lower(), os.fsdecode(value)))
    return entries


def _lexists(path: str) -> bool:
    """``os.path.lexists`` that answers True when it cannot tell (a parent not
    searchable): an entry pi cannot see must not count as gone (fail closed)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _scan(directory: str) -> dict[str, bool] | None:
    try:
        # scandir's d_type spares an lstat per file on a large tree.
        with os.scandir(directory) as it:
            return {e.name: _is_real_dir(e) for e in it}
    except OSError:
        return None


def _open_path(path: str) -> int:
    """An ``O_PATH`` descriptor of directory ``path``, reached component by
    component (``openat``, no symlink followed), so any length works.

    Raises:
        OSError: a component is missing, a symlink, or not searchable.
    """
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in [p for p in path.split("/") if p]:
            child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_up(directory: str) -> bool:
    """Give this uid read, write and search permission on ``directory`` again when
    it owns it and lacks one (a sandboxed tool can ``chmod 311`` its own
    directories to hide what is in them; red-team F2). No symlink is followed: the
    mode is changed through an ``O_PATH`` descriptor. True when the mode changed."""
    try:
        fd = _open_path(directory)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
            return False
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o700 == 0o700:
            return False
        os.chmod(f"/proc/self/fd/{fd}", mode | 0o700)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _open_tree(path: str) -> bool:
    """`_open_up` on ``path`` and every directory below it that this uid owns
    (a copy to another file system must read them all). True when any changed."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    changed = _open_up(path)
    for directory, dirs, _files in os.walk(path):
        for name in dirs:
            changed = _open_up(os.path.join(directory, name)) or changed
    return changed


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
