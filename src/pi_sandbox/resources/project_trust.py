"""Which project files need a trust decision, and the trust store (issue 6 groundwork).

DESIGN §8, seed 000 §2: a project is trusted without asking only when it has nothing
that could run code or steer the agent. `trust_requiring_resources` lists what it
has; `TrustStore` keeps the user's decisions in ``~/.pi/agent/trust.json``, looked
up for the working directory or its nearest ancestor with a decision (a ``no`` for
``/a/b`` wins over a ``yes`` for ``/a`` in ``/a/b/c``).

Nothing here reads a resource's content: only whether it exists (``lexists``, so a
symlink counts as present even when it dangles). Not wired into runs yet.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from pi_sandbox.regular_files import FileRefusedError, read_regular_file

__all__ = [
    "PROJECT_RESOURCES",
    "TRUST_DECISIONS",
    "TrustStore",
    "TrustStoreError",
    "has_trust_requiring_resources",
    "trust_requiring_resources",
]

PROJECT_RESOURCES = (
    ".pi/settings.json",
    ".pi/extensions",
    ".pi/skills",
    ".pi/prompts",
    ".pi/SYSTEM.md",
    ".pi/APPEND_SYSTEM.md",
    ".pi/policy.yaml",
    ".pi/mcp.json",
    # Other agents' project configuration an extension could consume.
    ".mcp.json",
    ".claude",
)
"""Paths relative to the working directory that need a trust decision (issue 6)."""

TRUST_DECISIONS = ("yes", "no", "sandboxed")

MAX_STORE_BYTES = 1024 * 1024
"""Largest trust store read or written; a larger file is an error, not a slow start."""

STORE_VERSION = 1

_MAX_NESTING = 100
"""Deepest nesting accepted in a store (unknown keys are kept and written back)."""

_TEMPORARY_PREFIX = ".trust-"
# What `tempfile.mkstemp(prefix=_TEMPORARY_PREFIX)` names: the prefix and 8 characters.
_TEMPORARY_NAME = re.compile(re.escape(_TEMPORARY_PREFIX) + r"[a-z0-9_]{8}")
_STALE_TEMPORARY_SECONDS = 60.0

LOCK_TIMEOUT_SECONDS = 10.0
"""How long `TrustStore.update` waits for another writer's lock by default."""

_T = TypeVar("_T")


class TrustStoreError(ValueError):
    """The trust store is malformed, too large, nested too deeply, of another
    version, not a regular file, or not private to this user (names the file)."""


def _read_store(path: Path) -> bytes:
    """The bytes of the store at ``path``, checked on the open descriptor.

    As `read_regular_file` (non-blocking, no symlink, one read), and also refused
    when another user owns it or group or others may write it: anyone who can
    write the store can trust any directory on the user's behalf.

    Raises:
        OSError: it cannot be opened (missing, permission, a symlink).
        FileRefusedError: not a regular file, or larger than `MAX_STORE_BYTES`.
        TrustStoreError: owned by another user, or writable by group or others.
    """

    def owned_by_us(info: os.stat_result) -> None:
        euid = os.geteuid()
        if info.st_uid != euid:
            raise TrustStoreError(
                f"{path}: the trust store is owned by uid {info.st_uid}, not by this user "
                f"(uid {euid}); refusing to use it"
            )
        if info.st_mode & 0o022:
            raise TrustStoreError(
                f"{path}: the trust store is writable by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); refusing to use it (chmod 600 it)"
            )

    return read_regular_file(path, MAX_STORE_BYTES, follow_symlinks=False, check=owned_by_us)


def _too_deep(value: object, limit: int) -> bool:
    """Whether JSON ``value`` nests lists/objects more than ``limit`` deep (iterative)."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


def _lock(fd: int, lock_path: Path, timeout: float) -> None:
    """Take an exclusive ``flock`` on ``fd`` within ``timeout`` seconds.

    Raises:
        TrustStoreError: another process held it for the whole time.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TrustStoreError(
                    f"{lock_path}: the trust store is locked by another process "
                    f"(waited {timeout:g} s); try again"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: errors are ignored)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove_stale_temporaries(directory: Path) -> None:
    """Remove `save`'s temporary files left by a killed writer: regular files
    named like one, untouched for `_STALE_TEMPORARY_SECONDS` (so a writer of a
    store that does not share our lock is not disturbed). Best effort."""
    cutoff = time.time() - _STALE_TEMPORARY_SECONDS
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not _TEMPORARY_NAME.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                    os.unlink(entry.path)


def _git_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def trust_requiring_resources(cwd: Path, *, home: Path | None = None) -> list[Path]:
    """The project resources present under ``cwd`` that need a trust decision.

    ``PROJECT_RESOURCES`` in ``cwd``, plus ``.agents/skills`` in ``cwd`` and each
    ancestor up to the git root (only ``cwd`` outside a repository). The user's own
    ``~/.agents/skills`` (``home``) is never a project resource.

    Returns:
        Absolute paths, in the order checked.
    """
    cwd = Path(os.path.abspath(cwd))
    own = Path(os.path.abspath(home / ".agents" / "skills")) if home is not None else None
    found = [cwd / rel for rel in PROJECT_RESOURCES if os.path.lexists(cwd / rel)]
    root = _git_root(cwd)
    directories = [cwd]
    if root is not None:
        directories = [cwd, *[p for p in cwd.parents if p == root or root in p.parents]]
    for directory in directories:
        skills = directory / ".agents" / "skills"
        if skills != own and os.path.lexists(skills):
            found.append(skills)
    return found


def has_trust_requiring_resources(cwd: Path, *, home: Path | None = None) -> bool:
    """Whether ``cwd`` has anything that needs a trust decision (see
    `trust_requiring_resources`); ``False`` means trusted without asking."""
    return bool(trust_requiring_resources(cwd, home=home))


class TrustStore:
    """The user's trust decisions: ``{"version": 1, "decisions": {PATH: DECISION}}``.

    Paths are absolute and normalised (not resolved: the decision is for the path
    the user named). Writes are atomic (a temporary file in the same directory,
    then ``os.replace``), mode 0600, the directory 0700. Change the store on disk
    with `update`, which serialises writers; ``load`` → ``set`` → ``save`` loses
    another process's concurrent change.

    Top-level keys other than ``version`` and ``decisions`` are kept in `extra`
    and written back unchanged.

    Raises (`load`):
        TrustStoreError: not a regular file, larger than `MAX_STORE_BYTES`, owned
            by another user or writable by group or others, not JSON, nested too
            deeply, a ``version`` other than 1, or entries of the wrong shape.
    """

    def __init__(
        self,
        path: Path,
        decisions: dict[str, str] | None = None,
        *,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        self.path = path
        self.decisions: dict[str, str] = dict(decisions or {})
        self.extra: dict[str, object] = {
            k: v for k, v in (extra or {}).items() if k not in ("version", "decisions")
        }

    @classmethod
    def load(cls, path: Path) -> TrustStore:
        """Read the store at ``path``; a missing file is an empty store.

        Raises:
            TrustStoreError: see the class docstring.
        """
        try:
            data = _read_store(path)
        except FileNotFoundError:
            return cls(path)
        except FileRefusedError as exc:
            raise TrustStoreError(f"the trust store {exc}") from exc
        except OSError as exc:
            raise TrustStoreError(f"{path}: cannot open the trust store: {exc.strerror}") from exc
        try:
            document = json.loads(data.decode("utf-8")) if data.strip() else {}
        except RecursionError as exc:
            raise TrustStoreError(f"{path}: the trust store is nested too deeply") from exc
        except (UnicodeDecodeError, ValueError) as exc:
            raise TrustStoreError(f"{path}: the trust store is not valid JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise TrustStoreError(f"{path}: the trust store must be a JSON object")
        version = document.get("version", STORE_VERSION)
        if type(version) is not int or version != STORE_VERSION:
            raise TrustStoreError(
                f"{path}: trust store version {version!r} is not supported "
                f"(this pi reads version {STORE_VERSION}); leaving it untouched"
            )
        if _too_deep(document, _MAX_NESTING):
            raise TrustStoreError(f"{path}: the trust store is nested too deeply")
        decisions = document.get("decisions", {})
        if not isinstance(decisions, dict):
            raise TrustStoreError(f"{path}: 'decisions' must be an object of path → decision")
        for key, value in decisions.items():
            if not os.path.isabs(key) or value not in TRUST_DECISIONS:
                raise TrustStoreError(
                    f"{path}: decisions[{key!r}]: expected an absolute path and one of "
                    f"{', '.join(TRUST_DECISIONS)}"
                )
        return cls(
            path,
            {os.path.normpath(k): v for k, v in decisions.items()},
            extra={k: v for k, v in document.items() if k not in ("version", "decisions")},
        )

    @classmethod
    def update(
        cls,
        path: Path,
        change: Callable[[TrustStore], _T],
        *,
        lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    ) -> _T:
        """Change the store at ``path`` safely against concurrent writers.

        Takes an exclusive ``flock`` on ``<path>.lock`` (created 0600 beside the
        store; the directory is created 0700), removes `save` temporaries left by
        a killed writer, loads the store fresh, calls ``change(store)``, `save`s
        and releases the lock. Waits up to ``lock_timeout`` seconds while another
        process holds the lock (any process that can open the lock file, even
        read-only, can hold it: waiting forever would let it hang ``pi trust``).
        If ``change`` raises, nothing is written.

        Returns:
            What ``change`` returned.

        Raises:
            TrustStoreError: the store cannot be loaded (see `load`), would be
                larger than `MAX_STORE_BYTES` or nested too deeply, the lock file
                is not a regular file, or the lock was not free within
                ``lock_timeout`` seconds.
            OSError: the directory, the lock file or the store cannot be
                created, locked or written.
            Exception: whatever ``change`` raises (e.g. ValueError from `set`).
        """
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = path.with_name(path.name + ".lock")
        fd = os.open(
            lock_path,
            os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TrustStoreError(f"{lock_path}: the trust store lock is not a regular file")
            _lock(fd, lock_path, lock_timeout)
            _remove_stale_temporaries(path.parent)
            store = cls.load(path)
            result = change(store)
            store.save()
            return result
        finally:
            os.close(fd)  # releases the lock

    def decision_for(self, cwd: Path) -> tuple[str, Path] | None:
        """The decision for ``cwd`` or its nearest ancestor with one, and that path."""
        directory = Path(os.path.normpath(os.path.abspath(cwd)))
        for candidate in (directory, *directory.parents):
            decision = self.decisions.get(str(candidate))
            if decision is not None:
                return decision, candidate
        return None

    def set(self, path: Path, decision: str) -> None:
        """Record ``decision`` for ``path`` (call `save` to write it).

        Raises:
            ValueError: ``decision`` is not ``yes``, ``no`` or ``sandboxed``.
        """
        if decision not in TRUST_DECISIONS:
            raise ValueError(f"trust decision must be one of {', '.join(TRUST_DECISIONS)}")
        self.decisions[os.path.normpath(os.path.abspath(path))] = decision

    def forget(self, path: Path) -> bool:
        """Drop the decision recorded for exactly ``path``; whether there was one."""
        return self.decisions.pop(os.path.normpath(os.path.abspath(path)), None) is not None

    def save(self) -> None:
        """Write the store atomically (0600; the directory is created 0700).

        Overwrites whatever is on disk: to change the user's store, use `update`,
        which reloads it under a lock first.

        Raises:
            TrustStoreError: the store would be larger than `MAX_STORE_BYTES`
                (which `load` would refuse) or nested too deeply; nothing is
                written and the old file is left as it was.
            OSError: the directory or the file cannot be created or written.
        """
        document = {
            "version": STORE_VERSION,
            "decisions": dict(sorted(self.decisions.items())),
            **{k: v for k, v in self.extra.items() if k not in ("version", "decisions")},
        }
        try:
            data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
        except RecursionError as exc:
            raise TrustStoreError(f"{self.path}: the trust store is nested too deeply") from exc
        if len(data) > MAX_STORE_BYTES:
            raise TrustStoreError(
                f"{self.path}: not saved: the trust store would be {len(data)} bytes, larger "
                f"than the limit of {MAX_STORE_BYTES} bytes (forget some decisions)"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX, dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        _fsync_directory(self.path.parent)
