"""A minimal inotify binding: tell the persistence guard that an entry appeared.

The persistence guard (`pi_sandbox.sandbox.persistence_guard`) checks the writable
roots after every tool call. Between two checks a protected name a sandboxed
process created could be used by a host process (an editor's git integration
running ``git status``, direnv on ``cd``). `DirectoryWatch` shortens that window to
the time of one check: the supervisor waits on its descriptor and runs the guard's
check as soon as any watched directory gains an entry (``IN_CREATE``,
``IN_MOVED_TO``). It reports only *that* something happened, never what: the
guard's own check decides, so a lost or overflowed event costs latency, not
safety (the end-of-call check still runs).

Unprivileged inotify needs one watch per directory (fanotify's file-system-wide
marks need ``CAP_SYS_ADMIN`` in the initial user namespace); at most
`MAX_WATCHES` are added, and the guard's end-of-call check covers the rest.
Only the stdlib (``ctypes``); Linux only.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable

__all__ = ["MAX_WATCHES", "DirectoryWatch"]

MAX_WATCHES = 65536
"""Watches added at most per run (the kernel's per-user default is 8192 on older
kernels and up to 1,048,576 on newer ones, shared with the user's editors)."""

_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_IN_CREATE = 0x100
_IN_MOVED_TO = 0x80
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_EXCL_UNLINK = 0x04000000
_MASK = _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK


class DirectoryWatch:
    """An inotify descriptor watching directories for new entries.

    Attributes:
        fd: the non-blocking inotify descriptor (wait for it to become readable,
            then call `drain`).
        watched: directories added so far.
        full: True once `MAX_WATCHES` or the kernel's limit stopped adding watches.

    Raises:
        OSError: inotify is not available (no libc symbol, or ``inotify_init1``
            failed); the caller falls back to the end-of-call check alone.
    """

    def __init__(self) -> None:
        # The process's own symbols, libc's included: find_library would run
        # ``ldconfig -p`` (a process) at every run's start (issue 20 §5).
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            self._init = libc.inotify_init1
            self._add = libc.inotify_add_watch
        except AttributeError as exc:
            raise OSError(errno.ENOSYS, "inotify is not available") from exc
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._add.restype = ctypes.c_int
        fd = self._init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.fd = fd
        self.watched = 0
        self.full = False

    def add(self, directories: Iterable[str]) -> None:
        """Watch each of ``directories`` (gone or unreadable ones are skipped)."""
        for directory in directories:
            if self.full:
                return
            if self.watched >= MAX_WATCHES:
                self.full = True
                return
            if self._add(self.fd, os.fsencode(directory), _MASK) >= 0:
                self.watched += 1
            elif ctypes.get_errno() == errno.ENOSPC:
                self.full = True

    def drain(self) -> bool:
        """Read every pending event; True when there was at least one."""
        got = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return got
            if not data:
                return got
            got = True

    def close(self) -> None:
        """Close the descriptor (every watch goes with it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
