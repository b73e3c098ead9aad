"""Reading a small file that someone else may have planted (stdlib only).

Policy files, trust stores, skills, prompt templates and context files all come
from directories a repository or another user may control: a FIFO there must not
block the supervisor, a device must not be read, and a huge file must not be read
whole. `read_regular_file` is the one way they are read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal

__all__ = ["FileRefusedError", "read_regular_file", "special_file_kind"]


class FileRefusedError(ValueError):
    """The path is not a regular file, or is larger than the caller's limit; the
    message says which (``not a regular file`` / ``N bytes, larger than …``)."""


def read_regular_file(
    path: Path | str,
    max_bytes: int,
    *,
    follow_symlinks: bool = True,
    check: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them.

    Opened non-blocking (a FIFO without a writer fails the type check instead of
    hanging), checked on the open descriptor (no race with a swap), read once.

    ``check`` is called with the open file's status after those checks (the trust
    store's owner and mode) and may raise to refuse it.

    Raises:
        OSError: it cannot be opened (missing, permission, a symlink with
            ``follow_symlinks=False``).
        FileRefusedError: not a regular file, or larger than ``max_bytes``.
        Whatever ``check`` raises.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks and os.path.islink(path):
            # O_NOFOLLOW's own words ("Too many levels of symbolic links") hide why.
            raise OSError(
                errno.ELOOP, "a symbolic link, refused: it must be the file itself", str(path)
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefusedError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise FileRefusedError(
                f"{path}: {info.st_size} bytes, larger than the limit of {max_bytes} bytes"
            )
        if check is not None:
            check(info)
        # One byte past the size seen, to notice a file that grew since the fstat
        # (reading max_bytes + 1 would map a megabyte for every small file).
        data = os.read(fd, min(info.st_size, max_bytes) + 1)
        if len(data) > info.st_size and len(data) <= max_bytes:
            data += os.read(fd, max_bytes + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew since the fstat
        raise FileRefusedError(f"{path}: larger than the limit of {max_bytes} bytes")
    return data


def special_file_kind(mode: int) -> Literal["socket", "fifo", "device"] | None:
    """What a file of this ``st_mode`` is when it is a channel or a device rather than
    data: ``"socket"`` (Unix socket), ``"fifo"``, ``"device"`` (character or block);
    None for a regular file, a directory, a symlink or any other type.

    The one classification the sandbox's bind checks
    (`pi_sandbox.sandbox.special_files`) and the trust fingerprint's digests
    (`pi_sandbox.resources.trust_fingerprint`) both use."""
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return None
