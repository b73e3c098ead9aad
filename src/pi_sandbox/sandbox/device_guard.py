"""Undoing what a sandbox running as host root can do to the host's device nodes.

bwrap's ``--dev /dev`` binds the host's ``/dev/null``, ``/dev/zero``, ``/dev/full``,
``/dev/random``, ``/dev/urandom`` and ``/dev/tty`` into the sandbox. Their owner is
host uid 0; when ``pi`` runs as root the sandbox's uid is host uid 0 too, and
changing an owned file's mode or timestamps needs no capability, so a sandboxed
process can ``chmod 000 /dev/null`` on the host. bwrap cannot make those binds
read-only without also making them ``nodev`` (unusable), and seccomp cannot tell a
device node from a workspace file. So the supervisor records the nodes' modes when
the first sandbox starts and puts back any that changed after every tool call and
when the run ends (`DeviceGuard.restore`), with a warning. A change can therefore
last at most one tool call. Not needed (and not active) when ``pi`` is not root:
the sandbox then does not own the nodes.
"""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ["BOUND_DEVICES", "DeviceGuard"]

BOUND_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""The host device nodes bwrap's ``--dev`` binds into every sandbox."""


class DeviceGuard:
    """Snapshot of the bound device nodes' permission bits (root runs only)."""

    def __init__(self) -> None:
        self._modes: dict[str, int] = {}
        if os.geteuid() != 0:
            return
        for path in BOUND_DEVICES:
            with contextlib.suppress(OSError):
                self._modes[path] = stat.S_IMODE(os.stat(path).st_mode)

    def restore(self) -> list[str]:
        """Put back every recorded mode that changed; returns the paths repaired."""
        repaired: list[str] = []
        for path, mode in self._modes.items():
            try:
                if stat.S_IMODE(os.stat(path).st_mode) != mode:
                    os.chmod(path, mode)
                    repaired.append(path)
            except OSError:
                continue
        return repaired
