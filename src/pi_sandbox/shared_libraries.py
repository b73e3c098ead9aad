"""Shared libraries found by their soname instead of ``ldconfig -p`` (issue 20 §5).

``ctypes.util.find_library`` runs ``/sbin/ldconfig -p`` — a process, 5–20 ms — for
each name it is asked on Linux. Two imports on every run ask it: ``pyseccomp``
(``"c"``, ``"seccomp"``) and ``trio`` (``"pthread"``, only to name its threads).
`known_sonames` answers those names with the glibc sonames when they load, and
passes any other name, or a soname that does not load (musl, a missing
libseccomp), to the real function: the outcome is the one ``ldconfig`` would give
wherever the soname exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

SONAMES = {"c": "libc.so.6", "pthread": "libpthread.so.0", "seccomp": "libseccomp.so.2"}
"""Library name → the soname tried first (glibc's and libseccomp 2's)."""


@contextlib.contextmanager
def known_sonames() -> Iterator[None]:
    """While the block runs, ``ctypes.util.find_library(name)`` returns
    ``SONAMES[name]`` when that soname loads (``ctypes.CDLL``); otherwise, and for
    other names, what the real function returns. Restored on exit. Not for use while
    other threads may call ``find_library``."""
    import ctypes
    import ctypes.util

    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        soname = SONAMES.get(name)
        if soname is not None:
            try:
                ctypes.CDLL(soname)
                return soname
            except OSError:
                pass
        return real(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = real
