"""Which project files need a trust decision, and the trust store (issues 6, 14 §4, 17 §4).

DESIGN §8, seed 000 §2: a project is trusted without asking only when it has nothing
that could run code or steer the agent. `trust_requiring_resources` lists what it
has; `TrustStore` keeps the user's decisions, looked up for the working directory
or its nearest ancestor with a decision (a ``no`` for ``/a/b`` wins over a ``yes``
for ``/a`` in ``/a/b/c``).

The store is two files in the agent directory, so that pi 1.6.0 and pi-sandbox
share decisions (issue 17 §4):

- ``trust.json`` — pi 1.6.0's own format, ``{"/abs/path": true | false | null}``:
  ``yes`` is ``true``, ``no`` is ``false``, and ``sandboxed`` is ``false`` too (pi
  cannot sandbox a project, so it must not load one the user only trusted
  sandboxed). Decisions pi saved apply here too.
- ``pi-sandbox-trust.json`` — what pi does not know: the ``sandboxed`` decision,
  the `Fingerprint` of the resources each decision approved (issue 14 §4), the
  ``follow_changes`` opt-in, the time it was saved. A record applies only while
  ``trust.json`` still holds the value written with it; when pi changed it, pi's
  decision wins and the record is dropped at the next write.

Both are changed under pi's lock: a ``trust.json.lock`` *directory* (proper-lockfile:
``mkdir`` to take it, stale when its mtime is more than 10 s old, ``rmdir`` to
release it). Our previous format, ``{"version": 1, "decisions": {...}}`` (which
crashes pi 1.6.0), is read as such and migrated at the first write, without losing
an entry; the regular file ``trust.json.lock`` it was locked with is removed then.

`trust_requiring_resources` reads no resource's content, only whether it exists
(``lexists``, so a symlink counts as present even when it dangles); what the
content is, is `trust_fingerprint`'s business.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pi_sandbox.regular_files import FileRefusedError, read_regular_file
from pi_sandbox.resources.trust_fingerprint import Fingerprint

__all__ = [
    "EXTRA_STORE_NAME",
    "PROJECT_RESOURCES",
    "TRUST_DECISIONS",
    "SavedDecision",
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
"""Largest ``trust.json`` read or written; a larger file is an error, not a slow start."""

MAX_EXTRA_STORE_BYTES = 8 * 1024 * 1024
"""Largest ``pi-sandbox-trust.json`` read or written (it holds per-file digests)."""

EXTRA_STORE_NAME = "pi-sandbox-trust.json"
"""Our own file beside ``trust.json``: what pi 1.6.0's format cannot hold."""

EXTRA_STORE_FORMAT = "pi-sandbox-trust"
STORE_VERSION = 1
"""Version of our previous ``trust.json`` format and of ``pi-sandbox-trust.json``."""

_PI_VALUES = {"yes": True, "no": False, "sandboxed": False}
"""What pi 1.6.0 sees for each decision (it has no ``sandboxed``: ``false``)."""

_MAX_NESTING = 100
"""Deepest nesting accepted in a store (fingerprints nest 5 deep)."""

_TEMPORARY_PREFIX = ".trust-"
# What `tempfile.mkstemp(prefix=_TEMPORARY_PREFIX)` names: the prefix and 8 characters.
_TEMPORARY_NAME = re.compile(re.escape(_TEMPORARY_PREFIX) + r"[a-z0-9_]{8}")
_STALE_TEMPORARY_SECONDS = 60.0

LOCK_TIMEOUT_SECONDS = 10.0
"""How long `TrustStore.update` waits for another writer's lock by default."""

STALE_LOCK_SECONDS = 10.0
"""A lock directory untouched this long belongs to a dead writer (proper-lockfile's
default ``stale``, which pi 1.6.0 uses; pi refreshes its mtime every 5 s)."""

_T = TypeVar("_T")


class TrustStoreError(ValueError):
    """The trust store is malformed, too large, nested too deeply, of another
    version, not a regular file, or not private to this user (names the file)."""


def _read_store(path: Path, max_bytes: int = MAX_STORE_BYTES) -> bytes:
    """The bytes of the store at ``path``, checked on the open descriptor.

    As `read_regular_file` (non-blocking, no symlink, one read), and also refused
    when another user owns it or group or others may write it: anyone who can
    write the store can trust any directory on the user's behalf.

    Raises:
        OSError: it cannot be opened (missing, permission, a symlink).
        FileRefusedError: not a regular file, or larger than ``max_bytes``.
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

    return read_regular_file(path, max_bytes, follow_symlinks=False, check=owned_by_us)


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


def _parse_json(path: Path, max_bytes: int) -> object | None:
    """The JSON document at ``path``; None when the file does not exist.

    Raises:
        TrustStoreError: unreadable, refused (see `_read_store`), not JSON, or
            nested too deeply.
    """
    try:
        data = _read_store(path, max_bytes)
    except FileNotFoundError:
        return None
    except FileRefusedError as exc:
        raise TrustStoreError(f"the trust store {exc}") from exc
    except OSError as exc:
        raise TrustStoreError(f"{path}: cannot open the trust store: {exc.strerror}") from exc
    try:
        document = json.loads(data.decode("utf-8-sig")) if data.strip() else {}
    except RecursionError as exc:
        raise TrustStoreError(f"{path}: the trust store is nested too deeply") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise TrustStoreError(f"{path}: the trust store is not valid JSON: {exc}") from exc
    if _too_deep(document, _MAX_NESTING):
        raise TrustStoreError(f"{path}: the trust store is nested too deeply")
    return document


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """Hold pi 1.6.0's lock on the store ``path``: the directory ``<path>.lock``.

    proper-lockfile's protocol, as pi uses it: ``mkdir`` takes the lock; a lock
    directory whose mtime is more than `STALE_LOCK_SECONDS` old belongs to a dead
    writer and is removed; ``rmdir`` releases it. Our previous lock, a regular file
    of that name locked with ``flock``, is removed once no process holds it (pi
    cannot take its lock while it exists). We hold the lock for milliseconds (no
    fingerprint is computed under it), well inside the stale time, so we never
    refresh its mtime.

    Raises:
        TrustStoreError: the lock was held for the whole ``timeout`` (seconds), or
            ``<path>.lock`` is something else than a directory or our old file
            (a symlink, a FIFO), or a stale lock directory is not empty.
        OSError: the directory of the store cannot be created.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = path.with_name(path.name + ".lock")
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            os.mkdir(lock, 0o700)
            break
        except FileExistsError:
            pass
        if _clear_stale_lock(lock):
            continue
        if time.monotonic() >= deadline:
            raise TrustStoreError(
                f"{lock}: the trust store is locked by another process (waited {timeout:g} s); "
                f"try again (a lock left by a killed process expires after "
                f"{STALE_LOCK_SECONDS:g} s)"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(lock)


def _clear_stale_lock(lock: Path) -> bool:
    """Remove ``lock`` if it is stale or our old lock file that nobody holds;
    whether the caller should try ``mkdir`` again at once.

    Raises:
        TrustStoreError: see `_locked`.
    """
    try:
        info = os.lstat(lock)
    except FileNotFoundError:
        return True
    if stat.S_ISDIR(info.st_mode):
        if info.st_mtime >= time.time() - STALE_LOCK_SECONDS:
            return False
        try:
            os.rmdir(lock)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise TrustStoreError(
                    f"{lock}: a stale trust store lock that is not empty; remove it"
                ) from exc
            raise TrustStoreError(f"{lock}: cannot remove a stale lock: {exc.strerror}") from exc
        return True
    if stat.S_ISREG(info.st_mode):
        # The lock file of pi-sandbox before issue 17: wait while an old writer holds
        # its flock, then remove it (it would make pi 1.6.0 fail to start).
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise TrustStoreError(f"{lock}: cannot open the old trust store lock: {exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            opened = os.fstat(fd)
            with contextlib.suppress(FileNotFoundError):
                now = os.lstat(lock)
                if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
                    os.unlink(lock)
        finally:
            os.close(fd)
        return True
    raise TrustStoreError(
        f"{lock}: the trust store lock is not a directory (pi 1.6.0 locks with a "
        "directory of this name); remove it"
    )


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: errors are ignored)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a 0600 temporary file in the same directory
    (created 0700), written, fsynced, renamed over it; the directory fsynced.

    Raises:
        OSError: the directory or the file cannot be created or written (the old
            file is then left as it was, and no temporary remains).
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(path.parent)


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


@dataclass(frozen=True)
class SavedDecision:
    """A decision in the store, as it applies to a directory and below.

    Attributes:
        decision: ``"yes"``, ``"no"`` or ``"sandboxed"``.
        path: the directory it was saved for.
        origin: ``"pi-sandbox"`` (saved by us, with our record), ``"pi"`` (a
            ``true``/``false`` in ``trust.json`` with no record of ours: saved by pi
            1.6.0, or by us and since changed by pi) or ``"pi-sandbox (old
            format)"`` (our previous ``trust.json`` format).
        fingerprint: the resources it approved (issue 14 §4); None when the decision
            was saved without one (by pi, by our previous format, or ``no``).
        follow_changes: a ``sandboxed`` decision that keeps applying, still
            sandboxed, when the resources change (``pi trust sandboxed
            --follow-changes``).
        saved_at: ISO-8601 UTC time it was saved (ours only), or None.
    """

    decision: str
    path: Path
    origin: str
    fingerprint: Fingerprint | None = None
    follow_changes: bool = False
    saved_at: str | None = None


def _decision_from_pi(value: bool) -> str:
    return "yes" if value else "no"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TrustStore:
    """The user's trust decisions, shared with pi 1.6.0 (module docstring).

    ``path`` is ``trust.json`` (``{"/abs": true|false|null}``, pi's format); our
    records are in `EXTRA_STORE_NAME` beside it::

        {"format": "pi-sandbox-trust", "version": 1,
         "decisions": {"/abs": {"decision": "yes"|"no"|"sandboxed",
                                "pi": true|false,          # what trust.json got
                                "saved_at": "2026-12-01T14:00:00Z",
                                "follow_changes": false,   # sandboxed only
                                "fingerprint": {...} | null,
                                "origin": "..."}}}         # optional

    Paths are absolute and normalised (not resolved: the decision is for the path
    the user named). Writes are atomic (a temporary file in the same directory,
    then ``os.replace``), mode 0600, the directory 0700; ours is written before
    ``trust.json`` when a decision is set (a crash between them leaves a record
    that does not apply, never a ``true`` without its fingerprint), after it when
    one is forgotten. Change the store on disk with `update`, which takes pi's
    lock; ``load`` → ``set`` → ``save`` loses another process's concurrent change.

    Keys of ``trust.json`` that are not absolute paths, and ``null`` values, are
    kept and written back unchanged (pi accepts them).

    Raises (`load`):
        TrustStoreError: a file is not a regular file, larger than
            `MAX_STORE_BYTES` (`MAX_EXTRA_STORE_BYTES` for ours), owned by another
            user or writable by group or others, not JSON, nested too deeply,
            ``trust.json`` in neither pi's format nor our previous one (version 1),
            or ours of another format or version or with entries of the wrong shape.
    """

    def __init__(
        self,
        path: Path,
        decisions: Mapping[str, str] | None = None,
        *,
        pi_values: Mapping[str, bool | None] | None = None,
        records: Mapping[str, dict[str, Any]] | None = None,
        legacy_extra: Mapping[str, object] | None = None,
        migrated: bool = False,
    ) -> None:
        self.path = path
        self.extra_path = path.with_name(EXTRA_STORE_NAME)
        self.pi_values: dict[str, bool | None] = dict(pi_values or {})
        self.records: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (records or {}).items()}
        self.legacy_extra: dict[str, object] = dict(legacy_extra or {})
        self.migrated = migrated  # trust.json was in our previous format
        self._forgot = False
        for key, decision in (decisions or {}).items():
            self.set(Path(key), decision)

    # -- reading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> TrustStore:
        """Read the store at ``path`` (``trust.json``) and our records beside it;
        missing files are empty.

        pi 1.6.0 writes ``trust.json`` in place, not atomically: a read that finds
        it cut short is retried once under pi's lock.

        Raises:
            TrustStoreError: see the class docstring.
        """
        try:
            return cls._load(path)
        except TrustStoreError as exc:
            if "not valid JSON" not in str(exc) or str(path) not in str(exc):
                raise
        with _locked(path, LOCK_TIMEOUT_SECONDS):
            return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> TrustStore:
        document = _parse_json(path, MAX_STORE_BYTES)
        if document is None:
            document = {}
        if not isinstance(document, dict):
            raise TrustStoreError(f"{path}: the trust store must be a JSON object")
        pi_values: dict[str, bool | None] = {}
        records: dict[str, dict[str, Any]] = {}
        legacy_extra: dict[str, object] = {}
        migrated = "decisions" in document
        if migrated:
            pi_values, records, legacy_extra = cls._read_previous_format(path, document)
        else:
            for key, value in document.items():
                if value is not True and value is not False and value is not None:
                    raise TrustStoreError(
                        f"{path}: value for {key!r} must be true, false or null "
                        "(pi 1.6.0's trust.json format)"
                    )
                pi_values[key] = value
        extra_path = path.with_name(EXTRA_STORE_NAME)
        extra = _parse_json(extra_path, MAX_EXTRA_STORE_BYTES)
        if extra is not None:
            for key, record in cls._read_records(extra_path, extra).items():
                records.setdefault(key, record)
            if isinstance(extra, dict) and isinstance(extra.get("legacy_extra"), dict):
                legacy_extra = {**extra["legacy_extra"], **legacy_extra}
        return cls(
            path,
            pi_values=pi_values,
            records=records,
            legacy_extra=legacy_extra,
            migrated=migrated,
        )

    @staticmethod
    def _read_previous_format(
        path: Path, document: dict[str, Any]
    ) -> tuple[dict[str, bool | None], dict[str, dict[str, Any]], dict[str, object]]:
        """Our previous ``{"version": 1, "decisions": {PATH: DECISION}}`` as pi's values
        and our records (each without a fingerprint); other top-level keys that look
        like pi's entries (an older pi-sandbox rewrote a pi store so) join pi's values,
        the rest is kept in our file."""
        version = document.get("version", STORE_VERSION)
        if type(version) is not int or version != STORE_VERSION:
            raise TrustStoreError(
                f"{path}: trust store version {version!r} is not supported "
                f"(this pi reads pi 1.6.0's format and our version {STORE_VERSION}); "
                "leaving it untouched"
            )
        decisions = document["decisions"]
        if not isinstance(decisions, dict):
            raise TrustStoreError(f"{path}: 'decisions' must be an object of path → decision")
        pi_values: dict[str, bool | None] = {}
        records: dict[str, dict[str, Any]] = {}
        extra: dict[str, object] = {}
        for key, value in document.items():
            if key in ("version", "decisions"):
                continue
            if os.path.isabs(key) and (value is True or value is False or value is None):
                pi_values[key] = value
            else:
                extra[key] = value
        for key, value in decisions.items():
            if not os.path.isabs(key) or value not in TRUST_DECISIONS:
                raise TrustStoreError(
                    f"{path}: decisions[{key!r}]: expected an absolute path and one of "
                    f"{', '.join(TRUST_DECISIONS)}"
                )
            key = os.path.normpath(key)
            pi_values[key] = _PI_VALUES[value]
            records[key] = {
                "decision": value,
                "pi": _PI_VALUES[value],
                "origin": "pi-sandbox (old format)",
                "fingerprint": None,
            }
        return pi_values, records, extra

    @staticmethod
    def _read_records(path: Path, document: object) -> dict[str, dict[str, Any]]:
        if not isinstance(document, dict):
            raise TrustStoreError(f"{path}: the trust store must be a JSON object")
        if document.get("format") != EXTRA_STORE_FORMAT or document.get("version") != 1:
            raise TrustStoreError(
                f"{path}: not a pi-sandbox trust store of version 1 (format "
                f"{document.get('format')!r}, version {document.get('version')!r}); "
                "leaving it untouched"
            )
        decisions = document.get("decisions", {})
        if not isinstance(decisions, dict):
            raise TrustStoreError(f"{path}: 'decisions' must be an object of path → record")
        records: dict[str, dict[str, Any]] = {}
        for key, record in decisions.items():
            where = f"{path}: decisions[{key!r}]"
            if not os.path.isabs(key) or not isinstance(record, dict):
                raise TrustStoreError(f"{where}: expected an absolute path and an object")
            if record.get("decision") not in TRUST_DECISIONS:
                raise TrustStoreError(
                    f"{where}: 'decision' must be one of {', '.join(TRUST_DECISIONS)}"
                )
            if not isinstance(record.get("pi"), bool):
                raise TrustStoreError(f"{where}: 'pi' must be true or false")
            if not isinstance(record.get("follow_changes", False), bool):
                raise TrustStoreError(f"{where}: 'follow_changes' must be true or false")
            for name in ("saved_at", "origin"):
                if not isinstance(record.get(name, ""), str):
                    raise TrustStoreError(f"{where}: '{name}' must be a string")
            fingerprint = record.get("fingerprint")
            if fingerprint is not None:
                try:
                    Fingerprint.from_json(fingerprint)
                except ValueError as exc:
                    raise TrustStoreError(f"{where}: fingerprint: {exc}") from exc
            records[os.path.normpath(key)] = dict(record)
        return records

    # -- lookups ---------------------------------------------------------------------------

    def saved(self, path: Path | str) -> SavedDecision | None:
        """The decision saved for exactly ``path``, or None.

        pi's value decides whether there is one; our record refines it (a
        ``sandboxed``, a fingerprint) only while pi's value is still the one written
        with it.
        """
        key = os.path.normpath(os.path.abspath(path))
        value = self.pi_values.get(key)
        if value is None:
            return None
        record = self.records.get(key)
        if record is None or record.get("pi") is not value:
            return SavedDecision(_decision_from_pi(value), Path(key), "pi")
        fingerprint = record.get("fingerprint")
        return SavedDecision(
            record["decision"],
            Path(key),
            record.get("origin", "pi-sandbox"),
            Fingerprint.from_json(fingerprint) if fingerprint is not None else None,
            bool(record.get("follow_changes", False)),
            record.get("saved_at"),
        )

    def saved_for(self, cwd: Path) -> SavedDecision | None:
        """The decision for ``cwd`` or its nearest ancestor with one."""
        directory = Path(os.path.normpath(os.path.abspath(cwd)))
        for candidate in (directory, *directory.parents):
            found = self.saved(candidate)
            if found is not None:
                return found
        return None

    def decision_for(self, cwd: Path) -> tuple[str, Path] | None:
        """The decision for ``cwd`` or its nearest ancestor with one, and that path."""
        found = self.saved_for(cwd)
        return (found.decision, found.path) if found is not None else None

    @property
    def decisions(self) -> dict[str, str]:
        """Every saved decision: absolute path → ``yes``/``no``/``sandboxed``."""
        result = {}
        for key in self.pi_values:
            if os.path.isabs(key):
                found = self.saved(key)
                if found is not None:
                    result[key] = found.decision
        return dict(sorted(result.items()))

    # -- changes ---------------------------------------------------------------------------

    def set(
        self,
        path: Path,
        decision: str,
        *,
        fingerprint: Fingerprint | None = None,
        follow_changes: bool = False,
        origin: str = "pi-sandbox",
    ) -> None:
        """Record ``decision`` for ``path`` (call `save` to write it): pi sees
        ``true`` for ``yes``, ``false`` for ``no`` and ``sandboxed``.

        Args:
            fingerprint: what it approves (`trust_fingerprint.decision_fingerprint`);
                None leaves it unbound until a run binds it.
            follow_changes: only with ``sandboxed``: keep loading sandboxed when the
                resources change.

        Raises:
            ValueError: ``decision`` is not ``yes``, ``no`` or ``sandboxed``;
                ``follow_changes`` with another decision than ``sandboxed``.
        """
        if decision not in TRUST_DECISIONS:
            raise ValueError(f"trust decision must be one of {', '.join(TRUST_DECISIONS)}")
        if follow_changes and decision != "sandboxed":
            raise ValueError("only a sandboxed decision may follow changes of the resources")
        key = os.path.normpath(os.path.abspath(path))
        self.pi_values[key] = _PI_VALUES[decision]
        record: dict[str, Any] = {
            "decision": decision,
            "pi": _PI_VALUES[decision],
            "saved_at": _now(),
            "fingerprint": fingerprint.to_json() if fingerprint is not None else None,
        }
        if follow_changes:
            record["follow_changes"] = True
        if origin != "pi-sandbox":
            record["origin"] = origin
        self.records[key] = record

    def bind(self, expected: SavedDecision, fingerprint: Fingerprint) -> bool:
        """Record ``fingerprint`` for the unbound decision ``expected`` (saved by pi or
        in our previous format), if it is still the decision saved for its path;
        whether it was. The first run that finds such a decision binds it to what
        it approves now (trust on first use)."""
        current = self.saved(expected.path)
        if current is None or current.fingerprint is not None:
            return False
        if (current.decision, current.origin) != (expected.decision, expected.origin):
            return False
        self.set(
            expected.path,
            expected.decision,
            fingerprint=fingerprint,
            origin=f"bound at first use (saved by {expected.origin})",
        )
        return True

    def forget(self, path: Path) -> bool:
        """Drop the decision recorded for exactly ``path``; whether there was one."""
        key = os.path.normpath(os.path.abspath(path))
        had = self.saved(key) is not None
        self._forgot = self._forgot or key in self.pi_values
        self.pi_values.pop(key, None)
        self.records.pop(key, None)
        return had

    # -- writing ---------------------------------------------------------------------------

    def _documents(self) -> tuple[bytes, bytes]:
        pi_document = {k: v for k, v in sorted(self.pi_values.items())}
        live = {
            k: r
            for k, r in sorted(self.records.items())
            if self.pi_values.get(k) is not None and r.get("pi") is self.pi_values.get(k)
        }
        ours: dict[str, Any] = {
            "format": EXTRA_STORE_FORMAT,
            "version": STORE_VERSION,
            "decisions": live,
        }
        if self.legacy_extra:
            ours["legacy_extra"] = self.legacy_extra
        try:
            pi_data = (json.dumps(pi_document, indent=2) + "\n").encode("utf-8")
            extra_data = (json.dumps(ours, indent=1) + "\n").encode("utf-8")
        except RecursionError as exc:
            raise TrustStoreError(f"{self.path}: the trust store is nested too deeply") from exc
        if _too_deep(ours, _MAX_NESTING):
            raise TrustStoreError(f"{self.extra_path}: the trust store is nested too deeply")
        for path, data, limit in (
            (self.path, pi_data, MAX_STORE_BYTES),
            (self.extra_path, extra_data, MAX_EXTRA_STORE_BYTES),
        ):
            if len(data) > limit:
                raise TrustStoreError(
                    f"{path}: not saved: the trust store would be {len(data)} bytes, larger "
                    f"than the limit of {limit} bytes (forget some decisions)"
                )
        return pi_data, extra_data

    def save(self) -> None:
        """Write both files atomically (0600; the directory is created 0700): ours
        first, then ``trust.json`` in pi 1.6.0's format (module docstring). Records
        pi has since overridden are dropped; our previous format is gone after it.

        Overwrites whatever is on disk: to change the user's store, use `update`,
        which reloads it under pi's lock first.

        Raises:
            TrustStoreError: a file would be larger than its limit (which `load`
                would refuse) or nested too deeply; nothing is written.
            OSError: the directory or a file cannot be created or written.
        """
        pi_data, extra_data = self._documents()
        # A forgotten decision leaves trust.json first, a new one enters it last:
        # a crash in between never leaves a `true` without its record.
        order = [(self.extra_path, extra_data), (self.path, pi_data)]
        if self._forgot:
            order.reverse()
        for path, data in order:
            _write_atomically(path, data)
        self.migrated = False
        self._forgot = False

    @classmethod
    def update(
        cls,
        path: Path,
        change: Callable[[TrustStore], _T],
        *,
        lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    ) -> _T:
        """Change the store at ``path`` safely against concurrent writers, pi 1.6.0
        included.

        Takes pi's lock (the directory ``<path>.lock``, `_locked`; the store's
        directory is created 0700), removes `save` temporaries left by a killed
        writer, loads the store fresh, calls ``change(store)``, `save`s and
        releases the lock. Waits up to ``lock_timeout`` seconds while another
        process holds the lock. If ``change`` raises, nothing is written. Keep
        ``change`` quick (compute fingerprints before): pi gives up after 200 ms.

        Returns:
            What ``change`` returned.

        Raises:
            TrustStoreError: the store cannot be loaded (see `load`), would be
                larger than its limit or nested too deeply, the lock is not a
                directory, or the lock was not free within ``lock_timeout`` seconds.
            OSError: the directory or a file cannot be created or written.
            Exception: whatever ``change`` raises (e.g. ValueError from `set`).
        """
        with _locked(path, lock_timeout):
            _remove_stale_temporaries(path.parent)
            store = cls._load(path)
            result = change(store)
            store.save()
            return result
