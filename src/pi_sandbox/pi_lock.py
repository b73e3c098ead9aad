"""pi 1.6.0's file lock, so that pi and pi-sandbox exclude each other (issue 17 §4).

pi locks the files of the agent directory it changes (``auth.json``,
``settings.json``, ``trust.json``, ``models-store.json``) with the npm package
``proper-lockfile``: the lock on ``FILE`` is the *directory* ``FILE.lock``.
``mkdir`` takes it (atomic: it fails when the directory exists), ``rmdir`` releases
it, and a holder refreshes its mtime every ``stale / 2`` so a lock whose mtime is
older than ``stale`` belongs to a dead process and may be removed. pi locks
``auth.json`` at its resolved path (``realpath``), with ``stale`` 10 s for its
synchronous reads and 30 s for its asynchronous writes.

`pi_lock` takes that lock. It holds it for milliseconds (the caller reads, changes
and writes a small file under it), far inside the stale time, so it never refreshes
the mtime. Only the lock is shared with pi; each program writes its own way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PiLockError", "PiLockTimeout", "lock_path_for", "pi_lock"]


class PiLockError(OSError):
    """The lock cannot be taken: ``FILE.lock`` is not a directory, or a stale lock
    cannot be removed. The message names the lock."""


class PiLockTimeout(PiLockError):
    """Another process held the lock for the whole timeout (the message names the
    lock and how long a lock left by a killed process lasts)."""


def lock_path_for(target: Path, *, resolve: bool = True) -> Path:
    """The lock directory pi uses for ``target``: ``<target>.lock``, at ``target``'s
    resolved path when ``resolve`` (proper-lockfile's ``realpath: true``, pi's choice
    for ``auth.json``: a symlinked ``auth.json`` is locked where it points)."""
    base = Path(os.path.realpath(target)) if resolve else target
    return base.with_name(base.name + ".lock")


@contextlib.contextmanager
def pi_lock(lock: Path, *, timeout: float, stale: float) -> Iterator[None]:
    """Hold the proper-lockfile lock directory ``lock`` (see `lock_path_for`).

    Waits, polling with a growing delay up to 50 ms, while another process holds
    it; a lock directory whose mtime is more than ``stale`` seconds old is removed
    (its holder died) and taken.

    Args:
        lock: the lock directory (``<file>.lock``); its parent must exist.
        timeout: seconds to wait for a live holder.
        stale: seconds after which an untouched lock is a dead holder's (use the
            largest ``stale`` pi uses for this file, so a live pi lock is never
            taken: a holder refreshes it every ``its stale / 2``).

    Raises:
        PiLockTimeout: the lock was held for the whole ``timeout``.
        PiLockError: ``lock`` exists and is not a directory (pi could never take
            it either), or a stale lock cannot be removed (not empty, no permission).
        OSError: the parent directory does not exist or is not writable.
    """
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            os.mkdir(lock, 0o700)
            break
        except FileExistsError:
            pass
        if _remove_if_stale(lock, stale):
            continue
        if time.monotonic() >= deadline:
            raise PiLockTimeout(
                errno.EAGAIN,
                f"{lock}: locked by another process (pi or pi-sandbox; waited {timeout:g} s). "
                f"Try again; a lock left by a killed process expires after {stale:g} s",
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(lock)


def _remove_if_stale(lock: Path, stale: float) -> bool:
    """Remove ``lock`` when it is a directory untouched for ``stale`` seconds;
    whether the caller should try ``mkdir`` again at once (also when it vanished)."""
    try:
        info = os.lstat(lock)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(info.st_mode):
        raise PiLockError(
            errno.EEXIST,
            f"{lock}: exists and is not a directory (pi locks with a directory of this "
            "name, so neither program can take the lock); remove it",
        )
    if info.st_mtime >= time.time() - stale:
        return False
    try:
        os.rmdir(lock)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PiLockError(
            exc.errno or errno.EIO, f"{lock}: cannot remove a stale lock: {exc.strerror}"
        ) from exc
    return True
