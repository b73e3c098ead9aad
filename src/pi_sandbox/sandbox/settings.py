"""The policy's say over the sandbox: `SandboxSettings` and `SandboxLimits`.

The policy decides (``sandbox:`` section of a policy file, DESIGN §7), the sandbox
enforces (STYLE rule 7): `pi_sandbox.policies` merges the files into one
`SandboxSettings`, and `pi_sandbox.sandbox.profile.worker_profile` turns it and a
worker's role into a `SandboxProfile`. This module imports only the stdlib, so the
sandbox package never depends on the policy package.

Paths here are as the policy wrote them (absolute, ``~/…`` or relative to the
workspace); they are canonicalised when a profile is built, because only then are
the workspace and HOME known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["MIB", "GitMode", "NetworkMode", "SandboxLimits", "SandboxSettings"]

MIB = 1024 * 1024

NetworkMode = Literal["none", "allowlist"]
GitMode = Literal["read", "commit"]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed worker (issue 3 "Limits", DESIGN §6).

    Defaults are chosen so that an ordinary test suite (pytest, npm test, cargo
    test) runs; every field can be lowered in a policy's ``sandbox.limits``.

    Attributes:
        address_space_mb: ``RLIMIT_AS`` of the worker and every process it starts,
            MiB. Virtual, not resident: runtimes that reserve large address ranges
            (V8, the JVM) need headroom, hence the generous default.
        memory_mb: resident memory of the whole sandbox, MiB, enforced by a
            memory cgroup when the host lets us create one (see
            `pi_sandbox.sandbox.cgroup_limits`); otherwise only ``RLIMIT_AS`` holds.
        processes: processes and threads of the sandbox: ``RLIMIT_NPROC`` counted in
            the sandbox's own user namespace, and a pids cgroup when one can be
            created (``RLIMIT_NPROC`` does not bind host root).
        open_files: ``RLIMIT_NOFILE``.
        file_size_mb: ``RLIMIT_FSIZE``, the largest file a process may write, MiB.
        cpu_seconds: ``RLIMIT_CPU`` of each command the ``bash`` tool runs (CPU
            seconds; the process gets SIGXCPU, then SIGKILL one second later).
        tmp_size_mb: size of the private ``/tmp`` tmpfs, MiB.
        tool_timeout_s: wall-clock deadline of one tool call, seconds; a ``bash``
            call's own ``timeout`` argument is capped by it.
    """

    address_space_mb: int = 16384
    memory_mb: int = 4096
    processes: int = 512
    open_files: int = 4096
    file_size_mb: int = 4096
    cpu_seconds: int = 600
    tmp_size_mb: int = 512
    tool_timeout_s: int = 600

    def rlimits(self) -> dict[str, int]:
        """The limits the worker applies to itself at start, in the units of
        ``setrlimit`` (bytes, counts): ``{"RLIMIT_AS": n, ...}``, including
        ``RLIMIT_CORE`` = 0. ``RLIMIT_CPU`` is
        not among them: it is applied per command, not to the long-lived worker."""
        return {
            "RLIMIT_AS": self.address_space_mb * MIB,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_FSIZE": self.file_size_mb * MIB,
            # No core dumps: on hosts that pipe cores to a root helper (apport,
            # systemd-coredump) a crafted crash would feed that helper input.
            "RLIMIT_CORE": 0,
        }


@dataclass(frozen=True)
class SandboxSettings:
    """The effective ``sandbox`` section of the policy (all files merged).

    Attributes:
        workspace_writable: whether the tool worker may write the workspace
            (``filesystem.workspace: write``); extension workers never may.
        git: ``"commit"`` (default): in a writable root the tool worker may write a
            repository's objects, refs, index, logs, stash and branches, while
            everything that makes git run code or change where it points stays
            read-only (`pi_sandbox.sandbox.profile.GIT_READ_ONLY`); ``"read"``: every
            git directory is read-only (issue 14 §2).
        writable_roots: further writable directories for the tool worker, as the
            policy wrote them. Refused when a root is a symlink, resolves outside
            the workspace, or is ``/``, HOME or a system directory.
        read_only: further host paths every worker sees read-only.
        deny_read: paths masked in every worker, added to the built-in list.
        deny_write: paths kept read-only inside writable roots, added to the
            built-in persistence paths.
        network: ``"none"`` or ``"allowlist"``.
        network_allow: host patterns (``example.com``, ``*.example.com``, with an
            optional ``:port``); empty means no network even in allowlist mode.
        network_deny: host patterns checked before the allowlist.
        environment_allow: names of host environment variables passed through.
        limits: see `SandboxLimits`.
        sockets: host Unix sockets bound into trusted workers (``sandbox.sockets``,
            managed and user tiers only; issue 13 §5), absolute or ``~/…``.
    """

    workspace_writable: bool = True
    git: GitMode = "commit"
    writable_roots: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    network: NetworkMode = "none"
    network_allow: tuple[str, ...] = ()
    network_deny: tuple[str, ...] = ()
    environment_allow: tuple[str, ...] = ()
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    sockets: tuple[str, ...] = ()

    @property
    def network_enabled(self) -> bool:
        """True when the proxy must run: allowlist mode with at least one entry."""
        return self.network == "allowlist" and bool(self.network_allow)
