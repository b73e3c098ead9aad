"""Cleaning up the empty directories that protect missing persistence paths.

A protected path that does not exist (``.git`` in a fresh directory, ``.pi``) is
kept read-only by a read-only tmpfs mounted at its first missing ancestor; bwrap
creates that mount point, and since its parent is a writable bind, the empty
directory appears on the host too (`SandboxProfile.protect_mounts`). It has to go
when the run ends, but not while any sandbox still relies on it: removing a
directory on the host detaches mounts on it in every other mount namespace, so a
concurrent run would lose its protection. Runs need not share a workspace to
share a placeholder (one run in ``proj``, another in ``proj/sub`` whose policy
protects ``sub/.git``), so the bookkeeping is per user, not per workspace.

Every sandboxed run holds a shared ``flock`` on this user's lock file for its
whole life (`PlaceholderLease`). A run records its placeholders in the shared list
before any sandbox can create them (`PlaceholderLease.record`); on exit it tries
the lock exclusively, without waiting: only when no other run is active does it
remove the listed directories that are still empty. A run killed with SIGKILL
drops its lock with its process; its placeholders are already listed, and the
next run to leave when no other run is active removes them.

Files live in ``/tmp/pi-sandbox-<uid>`` (mode 0700, refused if another user owns
it), whatever ``$TMPDIR`` says (see `state_dir`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterable

__all__ = ["PlaceholderLease", "state_dir"]


def state_dir() -> str:
    """This user's private directory for sandbox bookkeeping, ``/tmp/pi-sandbox-<uid>``
    (created 0700).

    A fixed place, deliberately not ``$TMPDIR`` or ``$XDG_RUNTIME_DIR``: every run
    of this user must find the same lock, whatever environment it was started
    from (a terminal, cron, ssh, sudo), or one run could remove placeholders
    another still relies on.

    Raises:
        OSError: it cannot be created, or exists and is not a private directory
            owned by this user.
    """
    path = f"/tmp/pi-sandbox-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory owned by this user")
    return path


class PlaceholderLease:
    """A run's shared claim on every placeholder directory of this user's runs.

    Use as: ``lease = PlaceholderLease.acquire()`` at start, ``lease.record(paths)``
    before each sandbox is built, then ``lease.release(paths)`` once every sandbox
    of the run is gone.
    """

    def __init__(self, lock_fd: int | None, list_path: str | None) -> None:
        self._fd = lock_fd
        self._list_path = list_path

    @classmethod
    def acquire(cls) -> PlaceholderLease:
        """Take this user's shared lock (never blocks for long: shared locks only
        wait for a run that is in the middle of cleaning up).

        Bookkeeping failures are not fatal: the lease then removes nothing.
        """
        try:
            base = state_dir()
            fd = os.open(
                os.path.join(base, "runs.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        except OSError:
            return cls(None, None)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return cls(fd, os.path.join(base, "placeholders.json"))

    def record(self, placeholders: Iterable[str]) -> None:
        """Add ``placeholders`` to the shared list now, so that they are removed
        eventually even if this run is killed before `release`."""
        paths = set(placeholders)
        if self._fd is None or self._list_path is None or not paths:
            return
        with self._list_locked():
            listed = set(self._read_list())
            if not paths <= listed:
                self._write_list(sorted(listed | paths))

    @contextlib.contextmanager
    def _list_locked(self):  # type: ignore[no-untyped-def]
        assert self._list_path is not None
        fd = os.open(f"{self._list_path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def release(self, placeholders: Iterable[str]) -> list[str]:
        """Record ``placeholders``; if no other run is active, remove
        every recorded one that is still an empty directory; drop the lock.

        Returns:
            The directories removed.
        """
        if self._fd is None or self._list_path is None:
            return []
        removed: list[str] = []
        try:
            with self._list_locked():
                listed = set(self._read_list()) | set(placeholders)
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    self._write_list(sorted(listed))  # another run is still inside
                    return []
                for path in sorted(listed, key=len, reverse=True):
                    try:
                        os.rmdir(path)  # only succeeds for an empty directory
                        removed.append(path)
                    except OSError:
                        continue
                self._write_list([])
        except OSError:
            return removed
        finally:
            os.close(self._fd)
            self._fd = None
        return removed

    def recorded(self) -> set[str]:
        """Every placeholder this user's runs have recorded and not yet removed
        (also usable after `release`): a run tells another run's placeholder from a
        directory one of its own tools created."""
        if self._list_path is None:
            return set()
        try:
            with self._list_locked():
                return set(self._read_list())
        except OSError:
            return set()

    def _read_list(self) -> list[str]:
        assert self._list_path is not None
        try:
            with open(self._list_path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return []
        return (
            [p for p in data if isinstance(p, str) and os.path.isabs(p)]
            if isinstance(data, list)
            else []
        )

    def _write_list(self, paths: list[str]) -> None:
        assert self._list_path is not None
        temporary = f"{self._list_path}.{os.getpid()}.tmp"
        with contextlib.suppress(OSError):
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(paths, handle)
            os.replace(temporary, self._list_path)
