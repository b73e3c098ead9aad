"""What a trust decision approved: fingerprints of trust-requiring resources (issue 14 §4).

A saved ``yes`` used to be bound to a directory name only: a sandboxed run could
write ``pkg/app/.pi/extensions/helper.py`` under a trusted ancestor, and the next
run from ``pkg/app`` loaded it without a sandbox. A decision now records a
`Fingerprint` of the resources it approved, and applies to a later run only while
the resources that run would load are exactly those (`compare`).

Three measurements, one vocabulary:

- `decision_fingerprint` — taken when the user saves a decision for a directory:
  the resources a run there would load *and* every trust-requiring resource found
  below it (a bounded walk), each hashed by content (`digest_resource`).
- `run_fingerprint` — taken at a run's start: only the resources that run would
  load (`candidate_resources`), hashed by content; compared with the decision's.
- `workspace_snapshot` — cheap (metadata only, no content read), taken at a
  sandboxed run's start and end to report resources the run created or changed
  anywhere below its writable roots (`snapshot_changes`).

Bounds (fail-closed: what could not be measured counts as changed): at most
`MAX_ENTRIES_PER_RESOURCE` entries per resource (the skill loader's per-source scan
budget), `MAX_FINGERPRINT_BYTES` of content per fingerprint and
`MAX_FILE_BYTES` per file (read by `read_regular_file`: non-blocking, no symlink
followed, regular files only — a FIFO is recorded as a FIFO, never opened for
reading), `MAX_WALK_DIRECTORIES` directories per walk. Symlinks are recorded by
their target; one that resolves inside the project is followed (the loaders
follow those), one that leads out is not — and the loaders refuse what it leads
to (extension discovery, skills, templates, system-prompt files, settings and
policy files), so content outside the project is never loaded under a decision
that could not hash it (F4). An empty directory loads nothing and
counts as absent (an empty placeholder directory changes no decision).

Stdlib only; never imports the supervisor.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.path_containment import within
from pi_sandbox.regular_files import FileRefusedError, read_regular_file, special_file_kind
from pi_sandbox.resources.settings_lists import MAX_SETTINGS_BYTES

__all__ = [
    "MAX_ENTRIES_PER_RESOURCE",
    "MAX_FILE_BYTES",
    "MAX_FINGERPRINT_BYTES",
    "MAX_WALK_DIRECTORIES",
    "Fingerprint",
    "ResourceChanges",
    "ResourceDigest",
    "WorkspaceSnapshot",
    "candidate_resources",
    "compare",
    "decision_fingerprint",
    "digest_resource",
    "resources_below",
    "run_fingerprint",
    "snapshot_changes",
    "workspace_snapshot",
]

MAX_ENTRIES_PER_RESOURCE = 10_000
"""Entries hashed per resource (files, directories, links): the skill loader's
per-source scan budget (``skills.DEFAULT_MAX_ENTRIES``); the loaders read no more."""

MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest single file hashed (bytes); a larger one makes its resource unverifiable."""

MAX_FINGERPRINT_BYTES = 64 * 1024 * 1024
"""Content hashed per fingerprint (bytes); past it, resources are unverifiable."""

MAX_WALK_DIRECTORIES = 20_000
"""Directories visited looking for resources below a decision or a writable root."""

MAX_FILE_DETAILS = 2_000
"""Per-file digests kept per resource for "what changed" reports (the resource's
digest always covers every entry)."""

MAX_SETTINGS_PATHS = 256

FINGERPRINT_FORMAT = 1

# Names in a directory that make it (or a path below it) a trust-requiring resource
# (project_trust.PROJECT_RESOURCES, plus .agents/skills). Kept here, not imported,
# so that project_trust can import this module.
_PI_RESOURCES = (
    "settings.json",
    "extensions",
    "skills",
    "prompts",
    "SYSTEM.md",
    "APPEND_SYSTEM.md",
    "policy.yaml",
    "mcp.json",
)
_TOP_RESOURCES = (".mcp.json", ".claude")
_SETTINGS_KEYS = ("extensions", "skills", "prompts")
_NOT_SEARCHED = frozenset({".git", ".pi", ".agents", ".claude"})
_MARKERS = frozenset({".pi", ".agents", *_TOP_RESOURCES})


# --- value types --------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceDigest:
    """The content of one resource (a file or a directory tree).

    Attributes:
        digest: SHA-256 (hex) over every entry's relative path, kind and content
            hash, in sorted order.
        files: relative path (``""`` for the resource itself) → a 16-hex-digit
            digest of that entry; for reports only (empty when there were more than
            `MAX_FILE_DETAILS` entries).
        complete: False when a bound was hit (`problem` says which): the digest then
            does not pin the content and the resource never matches.
        problem: why it is incomplete, or None.
    """

    digest: str
    files: Mapping[str, str] = field(default_factory=dict)
    complete: bool = True
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"digest": self.digest, "files": dict(sorted(self.files.items()))}
        if not self.complete:
            data["complete"] = False
            data["problem"] = self.problem
        return data

    @classmethod
    def from_json(cls, data: object) -> ResourceDigest:
        """Raises: ValueError: not the shape `to_json` writes."""
        if not isinstance(data, dict) or not isinstance(data.get("digest"), str):
            raise ValueError("a resource must be an object with a string 'digest'")
        files = data.get("files", {})
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise ValueError("'files' must be an object of path → digest strings")
        complete = data.get("complete", True)
        problem = data.get("problem")
        if not isinstance(complete, bool) or not (problem is None or isinstance(problem, str)):
            raise ValueError("'complete' must be a boolean and 'problem' a string")
        return cls(data["digest"], dict(files), complete, problem)


@dataclass(frozen=True)
class Fingerprint:
    """The trust-requiring resources a decision approved, by absolute path.

    Attributes:
        resources: absolute path (as found, symlinks of the path itself not
            resolved) → its `ResourceDigest`. Absent and empty resources have no
            entry.
        complete: False when the walk for resources stopped at a bound (`note`):
            resources beyond it are simply not covered (a run that would load one
            sees it as added).
        note: why the walk is incomplete, or None.
    """

    resources: Mapping[str, ResourceDigest]
    complete: bool = True
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FINGERPRINT_FORMAT,
            "resources": {k: v.to_json() for k, v in sorted(self.resources.items())},
        }
        if not self.complete:
            data["complete"] = False
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: object) -> Fingerprint:
        """Raises: ValueError: not the shape `to_json` writes (message names the part)."""
        if not isinstance(data, dict) or data.get("format") != FINGERPRINT_FORMAT:
            raise ValueError(f"a fingerprint must be an object with format {FINGERPRINT_FORMAT}")
        resources = data.get("resources")
        if not isinstance(resources, dict):
            raise ValueError("'resources' must be an object of path → resource")
        parsed = {}
        for key, value in resources.items():
            if not os.path.isabs(key):
                raise ValueError(f"resource {key!r} is not an absolute path")
            try:
                parsed[key] = ResourceDigest.from_json(value)
            except ValueError as exc:
                raise ValueError(f"resource {key!r}: {exc}") from None
        complete = data.get("complete", True)
        note = data.get("note")
        if not isinstance(complete, bool) or not (note is None or isinstance(note, str)):
            raise ValueError("'complete' must be a boolean and 'note' a string")
        return cls(parsed, complete, note)


@dataclass(frozen=True)
class ResourceChanges:
    """What differs between two fingerprints or snapshots (absolute paths, sorted).

    ``unverifiable`` lists resources that could not be measured within the bounds:
    they count as changed (fail-closed). ``incomplete`` says why a walk did not
    cover everything (a snapshot comparison), or None.
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    unverifiable: tuple[str, ...] = ()
    incomplete: str | None = None

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified or self.unverifiable)

    def summary(self, limit: int = 8) -> str:
        """``added: A, B; modified: C (and 3 more)`` — one line for notices."""
        parts = []
        for label, paths in (
            ("added", self.added),
            ("removed", self.removed),
            ("modified", self.modified),
            ("too large to verify", self.unverifiable),
        ):
            if paths:
                shown = ", ".join(paths[:limit])
                more = f" (and {len(paths) - limit} more)" if len(paths) > limit else ""
                parts.append(f"{label}: {shown}{more}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """``{"added", "removed", "modified", "unverifiable": [path…], "incomplete"}``."""
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "modified": list(self.modified),
            "unverifiable": list(self.unverifiable),
            "incomplete": self.incomplete,
        }


# --- which paths are resources -------------------------------------------------------------


def _git_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def _settings_named_paths(settings: Path, project: Path) -> list[Path]:
    """The ``extensions``/``skills``/``prompts`` paths of a project's
    ``.pi/settings.json`` that resolve inside ``project`` (the loaders refuse the
    others). Unreadable or malformed settings name nothing: their own digest covers
    them."""
    try:
        data = json.loads(read_regular_file(settings, MAX_SETTINGS_BYTES))
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    base = settings.parent
    real_project = os.path.realpath(project)
    found: list[Path] = []
    for key in _SETTINGS_KEYS:
        declared = data.get(key)
        if not isinstance(declared, list):
            continue
        for raw in declared[:MAX_SETTINGS_PATHS]:
            if not isinstance(raw, str) or not raw.strip():
                continue
            path = Path(os.path.abspath(base / os.path.expanduser(raw)))
            if within(os.path.realpath(path), real_project) and path not in found:
                found.append(path)
    return found


def _own_resources(directory: Path, home_skills: Path | None) -> list[Path]:
    """Every path in ``directory`` that is a trust-requiring resource when present
    (`project_trust.PROJECT_RESOURCES` and ``.agents/skills``)."""
    paths = [directory / ".pi" / name for name in _PI_RESOURCES]
    paths += [directory / name for name in _TOP_RESOURCES]
    skills = directory / ".agents" / "skills"
    if skills != home_skills:
        paths.append(skills)
    return paths


def candidate_resources(cwd: Path, *, home: Path | None = None) -> list[Path]:
    """Every path a run in ``cwd`` treats as a trust-requiring resource when present.

    As `project_trust.trust_requiring_resources` and
    `resource_set.project_resources` (the cwd's own resources, ``.agents/skills`` in
    the cwd and its ancestors up to the git root, the git root's resources when the
    cwd is below it and the root is not ``home``), plus the paths the cwd's and the
    root's ``.pi/settings.json`` name (``extensions``, ``skills``, ``prompts``)
    inside the project, whose content a trusted run loads too. Whether each exists
    is not checked.

    Returns:
        Absolute paths, without duplicates, in that order.
    """
    cwd = Path(os.path.abspath(cwd))
    home_skills = Path(os.path.abspath(home)) / ".agents" / "skills" if home is not None else None
    paths = _own_resources(cwd, home_skills)
    root = _git_root(cwd)
    if root is not None:
        for directory in cwd.parents:
            if directory != root and root not in directory.parents:
                break
            skills = directory / ".agents" / "skills"
            if skills != home_skills:
                paths.append(skills)
        if root != cwd and (home is None or root != Path(os.path.abspath(home))):
            paths += _own_resources(root, home_skills)
    for project in dict.fromkeys([cwd, root or cwd]):
        paths += _settings_named_paths(project / ".pi" / "settings.json", project)
    return list(dict.fromkeys(paths))


def _resources_in(directory: Path, names: set[str], home_skills: Path | None) -> list[Path]:
    """The resources present in ``directory``, whose entry names are ``names``."""
    found = []
    if ".pi" in names:
        found += [p for p in (directory / ".pi" / n for n in _PI_RESOURCES) if os.path.lexists(p)]
    found += [directory / n for n in _TOP_RESOURCES if n in names]
    skills = directory / ".agents" / "skills"
    if ".agents" in names and skills != home_skills and os.path.lexists(skills):
        found.append(skills)
    return found


def resources_below(
    top: Path, *, home: Path | None = None, max_directories: int = MAX_WALK_DIRECTORIES
) -> tuple[list[Path], str | None]:
    """Every trust-requiring resource in ``top`` and the directories below it.

    Breadth first (shallow directories first, so a deep ``node_modules`` cannot
    hide a package's ``.pi``), symlinked directories not followed, ``.git`` and the
    resources themselves not entered, at most ``max_directories`` directories.

    Returns:
        ``(paths, note)``: absolute paths; ``note`` says why the walk stopped early
        (None when it covered everything).
    """
    top = Path(os.path.abspath(top))
    home_skills = Path(os.path.abspath(home)) / ".agents" / "skills" if home is not None else None
    found: list[Path] = []
    pending: deque[str] = deque([os.fspath(top)])  # strings: a Path per directory is slow
    visited = 0
    unreadable: list[str] = []
    while pending:
        directory = pending.popleft()
        if visited >= max_directories:
            return found, (
                f"stopped after {max_directories} directories below {top}; "
                "resources deeper are not covered"
            )
        visited += 1
        names: set[str] = set()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    names.add(entry.name)
                    # The resources' own trees are measured as a whole, not searched.
                    if entry.name not in _NOT_SEARCHED and entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError as exc:
            if visited == 1:
                return found, f"{top}: cannot be read ({exc.strerror or exc})"
            unreadable.append(directory)
            continue
        if names & _MARKERS:
            found += _resources_in(Path(directory), names, home_skills)
    note = None
    if unreadable:
        note = f"{len(unreadable)} directories could not be read (e.g. {unreadable[0]})"
    return found, note


# --- content digests -----------------------------------------------------------------------


class _Budget:
    def __init__(self, max_bytes: int) -> None:
        self.bytes_left = max_bytes


def _kind_of(mode: int) -> str:
    return special_file_kind(mode) or "other"


def digest_resource(
    path: Path,
    *,
    confine: Path,
    max_entries: int = MAX_ENTRIES_PER_RESOURCE,
    budget: _Budget | None = None,
) -> ResourceDigest | None:
    """The content digest of the resource at ``path`` (a file, a directory tree or a
    symlink), or None when it is absent or an empty directory (nothing loads).

    Entries are recorded by kind: ``f:<sha256>`` (a regular file's content), ``d``,
    ``l:<target>`` (a symlink; followed — ``→`` plus what it leads to — only when
    it resolves inside ``confine``, once per real directory), ``fifo``/``socket``/
    ``device`` (never opened for reading). Never blocks, never reads a file larger
    than `MAX_FILE_BYTES`.

    Args:
        path: the resource (absolute).
        confine: the project root: symlinks resolving outside it are not followed.
        max_entries: entries recorded before the digest is marked incomplete.
        budget: content bytes left for the whole fingerprint (shared; default
            `MAX_FINGERPRINT_BYTES` for this resource alone).
    """
    budget = budget or _Budget(MAX_FINGERPRINT_BYTES)
    real_confine = os.path.realpath(confine)
    entries: dict[str, str] = {}
    problem: str | None = None
    seen_dirs: set[tuple[int, int]] = set()
    # (host path, relative path, kind from the directory listing or None); the
    # relative path is where the loaders see it. The listing's kind spares an lstat
    # per entry; reading re-checks it on the open descriptor anyway.
    pending: list[tuple[str, str, str | None]] = [(os.fspath(path), "", None)]

    def content(host: str) -> str:
        nonlocal problem
        limit = min(budget.bytes_left, MAX_FILE_BYTES)
        try:
            data = read_regular_file(host, limit, follow_symlinks=False)
        except FileRefusedError as exc:
            if "not a regular file" in str(exc):
                # It changed kind since it was listed: not a stable file.
                problem = problem or f"{host}: changed while it was measured"
                return "f:unstable"
            problem = problem or (
                f"{exc}: past the bound of {MAX_FILE_BYTES} bytes per file and "
                f"{MAX_FINGERPRINT_BYTES} bytes per fingerprint"
            )
            return "f:unmeasured"
        except OSError as exc:
            return f"f:unreadable:{exc.errno}"
        budget.bytes_left -= len(data)
        return "f:" + hashlib.sha256(data).hexdigest()

    while pending:
        host, rel, kind = pending.pop()
        if len(entries) >= max_entries:
            problem = problem or (
                f"{path}: more than {max_entries} entries (the loaders' scan budget)"
            )
            break
        if kind is None:
            try:
                mode = os.lstat(host).st_mode
            except FileNotFoundError:
                if rel == "":
                    return None
                entries[rel] = "gone"
                continue
            except OSError as exc:
                entries[rel] = f"unreadable:{exc.errno}"
                continue
            kind = (
                "link"
                if stat.S_ISLNK(mode)
                else "dir"
                if stat.S_ISDIR(mode)
                else "file"
                if stat.S_ISREG(mode)
                else _kind_of(mode)
            )
        if kind == "link":
            try:
                target = os.readlink(host)
            except OSError as exc:
                entries[rel] = f"l:unreadable:{exc.errno}"
                continue
            real = os.path.realpath(host)
            if not within(real, real_confine):
                entries[rel] = f"l:{target}"  # the loaders refuse it; its content is not ours
                continue
            try:
                followed = os.stat(real)
            except OSError:
                entries[rel] = f"l:{target}→dangling"
                continue
            if stat.S_ISDIR(followed.st_mode):
                entries[rel] = f"l:{target}→d"
                # Only a followed link can lead back up: each real directory once.
                key = (followed.st_dev, followed.st_ino)
                if key in seen_dirs:
                    continue
                seen_dirs.add(key)
                _push_children(real, rel, pending, entries)
            elif stat.S_ISREG(followed.st_mode):
                entries[rel] = f"l:{target}→" + content(real)
            else:
                entries[rel] = f"l:{target}→{_kind_of(followed.st_mode)}"
        elif kind == "dir":
            entries[rel] = "d"
            _push_children(host, rel, pending, entries)
        elif kind == "file":
            entries[rel] = content(host)
        else:
            entries[rel] = kind
    if entries == {"": "d"}:
        return None  # an empty directory loads nothing
    if problem is not None:
        entries["\0incomplete"] = problem
    digest = hashlib.sha256()
    for rel in sorted(entries):
        digest.update(f"{rel}\0{entries[rel]}\n".encode("utf-8", "surrogateescape"))
    files = (
        {
            rel: "d" if kind == "d" else _short(kind)
            for rel, kind in entries.items()
            if not rel.startswith("\0")
        }
        if len(entries) <= MAX_FILE_DETAILS
        else {}
    )
    return ResourceDigest(digest.hexdigest(), files, problem is None, problem)


def _short(kind: str) -> str:
    return hashlib.sha256(kind.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _listed_kind(entry: os.DirEntry[str]) -> str | None:
    """``link``/``dir``/``file`` from the directory listing (no system call where
    the filesystem reports types), None when only an lstat can tell."""
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return None


def _push_children(
    host: str, rel: str, pending: list[tuple[str, str, str | None]], entries: dict[str, str]
) -> None:
    try:
        with os.scandir(host) as children:
            listed = sorted((child.name, _listed_kind(child)) for child in children)
    except OSError as exc:
        entries[rel] = f"d:unreadable:{exc.errno}"
        return
    for name, kind in reversed(listed):
        pending.append((os.path.join(host, name), f"{rel}/{name}" if rel else name, kind))


def _fingerprint(paths: Iterable[Path], confine: Path) -> Fingerprint:
    budget = _Budget(MAX_FINGERPRINT_BYTES)
    resources: dict[str, ResourceDigest] = {}
    for path in paths:
        key = os.path.abspath(path)
        if key in resources:
            continue
        found = digest_resource(Path(key), confine=confine, budget=budget)
        if found is not None:
            resources[key] = found
    return Fingerprint(resources)


def run_fingerprint(cwd: Path, *, home: Path | None = None) -> tuple[Fingerprint, list[Path]]:
    """The content of the resources a run in ``cwd`` would load.

    Returns:
        ``(fingerprint, candidates)``: the fingerprint of the present ones, and
        every candidate path (`candidate_resources`), for `compare`.
    """
    cwd = Path(os.path.abspath(cwd))
    candidates = candidate_resources(cwd, home=home)
    present = [p for p in candidates if os.path.lexists(p)]
    return _fingerprint(present, _git_root(cwd) or cwd), candidates


def decision_fingerprint(
    directory: Path,
    *,
    home: Path | None = None,
    max_directories: int = MAX_WALK_DIRECTORIES,
    also_for: Iterable[Path] = (),
) -> Fingerprint:
    """What a decision saved for ``directory`` approves: the resources a run there
    would load (`candidate_resources`, including ancestors' ``.agents/skills`` up to
    the git root) and every resource found below it (`resources_below`), with the
    paths their ``.pi/settings.json`` files name.

    A run in a subdirectory is covered only for resources recorded here: a new
    ``.pi/…`` or ``.agents/skills`` below ``directory`` is a new resource (issue 14 §4).

    ``also_for``: working directories whose run's resources are recorded too, even
    beyond the walk's bound (the run that binds a decision at first use).
    """
    directory = Path(os.path.abspath(directory))
    paths = [
        p
        for cwd in (directory, *also_for)
        for p in candidate_resources(cwd, home=home)
        if os.path.lexists(p)
    ]
    below, note = resources_below(directory, home=home, max_directories=max_directories)
    for resource in below:
        paths.append(resource)
        if resource.name == "settings.json" and resource.parent.name == ".pi":
            project = resource.parent.parent
            paths += _settings_named_paths(resource, project)
    confine = _git_root(directory) or directory
    fingerprint = _fingerprint(paths, confine)
    return Fingerprint(fingerprint.resources, note is None, note)


def compare(
    saved: Fingerprint, current: Fingerprint, candidates: Iterable[Path]
) -> ResourceChanges:
    """How the resources among ``candidates`` differ between a decision's
    fingerprint (``saved``) and a run's (``current``).

    A candidate present now and not in ``saved`` is added (whatever the reason it
    was not recorded: created since, or beyond the decision's walk); recorded and
    gone (or emptied) is removed; different content is modified — reported per file
    where both sides kept per-file digests. A resource measured incompletely on
    either side is unverifiable. Resources of ``saved`` that are not candidates are
    not this run's business.
    """
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    unverifiable: list[str] = []
    for candidate in dict.fromkeys(os.path.abspath(c) for c in candidates):
        before = saved.resources.get(candidate)
        now = current.resources.get(candidate)
        if before is None and now is None:
            continue
        if before is None:
            added.append(candidate)
        elif now is None:
            removed.append(candidate)
        elif not (before.complete and now.complete):
            unverifiable.append(candidate)
        elif before.digest != now.digest:
            a, r, m = _file_changes(candidate, before.files, now.files)
            if a or r or m:
                added += a
                removed += r
                modified += m
            else:
                modified.append(candidate)
    return ResourceChanges(
        tuple(sorted(added)), tuple(sorted(removed)), tuple(sorted(modified)), tuple(unverifiable)
    )


def _file_changes(
    root: str, before: Mapping[str, str], now: Mapping[str, str]
) -> tuple[list[str], list[str], list[str]]:
    def full(rel: str) -> str:
        return f"{root}/{rel}" if rel else root

    def without_parents(rels: list[str], side: Mapping[str, str]) -> list[str]:
        # A new directory is shown by what is in it: list it only when it is empty.
        return [
            full(r) for r in rels if side[r] != "d" or not any(o.startswith(f"{r}/") for o in rels)
        ]

    if not before or not now:
        return [], [], []
    added = without_parents([r for r in now if r not in before], now)
    removed = without_parents([r for r in before if r not in now], before)
    modified = [full(r) for r in now if r in before and before[r] != now[r] and r != ""]
    if not modified and before.get("") != now.get("") and not (added or removed):
        modified.append(root)
    return added, removed, modified


# --- the cheap snapshot: metadata only -------------------------------------------------------


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """Resources below some roots at one moment, by metadata (no content read).

    Attributes:
        resources: absolute resource path → relative entry → ``kind:size:mtime_ns:
            ctime_ns:inode`` (a symlink: ``l:target``); ctime cannot be set back by
            a process, so rewriting a file and restoring its mtime still shows.
        incomplete: why some part was not measured (a bound), or None.
    """

    resources: Mapping[str, Mapping[str, str]]
    incomplete: str | None = None


def _metadata(path: Path, max_entries: int) -> tuple[dict[str, str], bool]:
    entries: dict[str, str] = {}
    pending: list[tuple[str, str]] = [(os.fspath(path), "")]
    while pending:
        host, rel = pending.pop()
        if len(entries) >= max_entries:
            return entries, False
        try:
            info = os.lstat(host)
        except OSError:
            continue
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            try:
                entries[rel] = "l:" + os.readlink(host)
            except OSError:
                entries[rel] = "l:?"
            continue
        if stat.S_ISDIR(mode):
            # A directory's own times change with every entry: its entries show it.
            entries[rel] = "d"
            try:
                with os.scandir(host) as children:
                    names = [child.name for child in children]
            except OSError:
                continue
            for name in names:
                pending.append((os.path.join(host, name), f"{rel}/{name}" if rel else name))
            continue
        kind = "f" if stat.S_ISREG(mode) else _kind_of(mode)
        entries[rel] = f"{kind}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"
    return entries, True


def workspace_snapshot(
    roots: Iterable[Path],
    *,
    home: Path | None = None,
    max_directories: int = MAX_WALK_DIRECTORIES,
) -> WorkspaceSnapshot:
    """Every trust-requiring resource below ``roots`` (`resources_below`, and the
    paths each ``.pi/settings.json`` names) with the metadata of each entry in it;
    an empty directory counts as absent.

    Bounded: ``max_directories`` per root, `MAX_ENTRIES_PER_RESOURCE` per resource
    (the snapshot then says it is incomplete). Never opens a file.
    """
    resources: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for root in roots:
        found, note = resources_below(Path(root), home=home, max_directories=max_directories)
        if note:
            problems.append(note)
        for settings in [p for p in found if p.name == "settings.json" and p.parent.name == ".pi"]:
            # Code a trusted run loads from outside .pi/ (issue 14 §4).
            found += _settings_named_paths(settings, settings.parent.parent)
        for path in dict.fromkeys(found):
            entries, complete = _metadata(path, MAX_ENTRIES_PER_RESOURCE)
            if not complete:
                problems.append(f"{path}: more than {MAX_ENTRIES_PER_RESOURCE} entries")
            if entries and entries != {"": "d"}:
                resources[os.fspath(path)] = entries
    return WorkspaceSnapshot(resources, "; ".join(problems) or None)


def snapshot_changes(before: WorkspaceSnapshot, after: WorkspaceSnapshot) -> ResourceChanges:
    """Resources (and files in them) created, deleted or changed between two
    snapshots of the same roots; ``incomplete`` joins both snapshots' notes."""
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    for path in sorted(set(before.resources) | set(after.resources)):
        old = before.resources.get(path)
        new = after.resources.get(path)
        if old is None:
            added.append(path)
        elif new is None:
            removed.append(path)
        elif old != new:
            a, r, m = _file_changes(path, old, new)
            added += a
            removed += r
            modified += m or ([] if a or r else [path])
    notes = [n for n in (before.incomplete, after.incomplete) if n]
    return ResourceChanges(
        tuple(added),
        tuple(removed),
        tuple(modified),
        incomplete="; ".join(dict.fromkeys(notes)) or None,
    )
