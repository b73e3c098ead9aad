"""Starting a process in its sandbox: the one spawn path shared by workers
(`worker_process`) and MCP stdio servers (`supervisor.mcp.stdio_process`).

``posix_spawn`` in a new session, with exactly the descriptors the caller names; under
a sandbox profile the program is wrapped in bwrap, which gets the seccomp program, its
``--json-status-fd`` pipe and the user namespace to join as descriptors, and the
process is in its cgroup from its first instruction (docs/architecture.md "Spawning",
sandbox.md). Also the capped log a process's output is drained into.

Every descriptor of the supervisor is close-on-exec (PEP 446), so the child inherits
only what the file actions put in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.sandbox import SandboxProfile, build_bwrap_argv
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter, WorkerCgroup
from pi_sandbox.sandbox.identity import UserNamespace

__all__ = [
    "SECCOMP_FD",
    "STATUS_FD",
    "USERNS_FD",
    "Spawned",
    "close_inherited_on_exec",
    "drain_into_capped_log",
    "log_tail",
    "sandbox_descriptors",
    "spawn_in_sandbox",
    "terminate_process_group",
]

# Descriptor numbers in the bwrap process (a worker's channel is methods.WORKER_FD = 3).
STATUS_FD = 4
SECCOMP_FD = 5
USERNS_FD = 6


def sandbox_descriptors(
    profile: Any, userns: Any, passed: dict[int, int], ours: list[int]
) -> tuple[int | None, int, tuple[int, int, int] | None]:
    """The descriptors a bwrap launch hands its child: the seccomp program
    (``SECCOMP_FD``, when the profile asks for one), the ``--json-status-fd`` pipe
    (``STATUS_FD``) and the user namespace to join (``USERNS_FD``, the pool's
    descriptor: never closed here).

    Fills ``passed`` (child fd → our fd) and ``ours`` (descriptors to close once the
    child has them). Returns ``(seccomp fd or None, the status pipe's read end,
    (USERNS_FD, uid, gid) or None)`` for `build_bwrap_argv`.
    """
    seccomp_fd = None
    if profile.seccomp:
        from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd

        passed[SECCOMP_FD] = seccomp_memfd()
        ours.append(passed[SECCOMP_FD])
        seccomp_fd = SECCOMP_FD
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    passed[STATUS_FD] = status_write
    ours.append(status_write)
    joined = None
    if userns is not None:
        passed[USERNS_FD] = userns.fd
        identity = userns.identity
        joined = (USERNS_FD, identity.uid, identity.gid)
    return seccomp_fd, status_read, joined


@dataclass
class Spawned:
    """A started process: its pid, the read end of bwrap's status pipe (None
    unsandboxed) and its cgroup (None without cgroup limits). The caller owns both:
    it reads the pipe and removes the cgroup once the process is reaped."""

    pid: int
    status_read: int | None
    cgroup: WorkerCgroup | None


def spawn_in_sandbox(
    argv: list[str],
    env: dict[str, str],
    *,
    stdio: list[tuple[Any, ...]],
    passed: dict[int, int],
    ours: list[int],
    sandbox: SandboxProfile | None,
    bwrap: str | None,
    userns: UserNamespace | None,
    cgroups: CgroupLimiter | None,
    cwd: str | None = None,
) -> Spawned:
    """Start ``argv`` with ``posix_spawn`` in a new session (``setsid``).

    Args:
        argv: the program (absolute path) and its arguments; wrapped in bwrap under
            ``sandbox``, whose environment then comes from the profile (``env`` is
            ignored and the working directory is bwrap's own).
        env: the complete environment when unsandboxed.
        stdio: the file actions for descriptors 0–2 (``POSIX_SPAWN_OPEN`` or
            ``POSIX_SPAWN_DUP2`` tuples), applied first.
        passed: child descriptor → our descriptor, for the descriptors above 2 (a
            worker's channel); the sandbox's are added to it.
        ours: descriptors to close once the child has them (or the spawn failed);
            always closed here.
        sandbox / bwrap / userns / cgroups: the profile and how to apply it (as
            `WorkerSpec`); ``bwrap`` is required with ``sandbox``.
        cwd: the working directory when unsandboxed (None: ours).

    Returns:
        The `Spawned` process.

    Raises:
        OSError: bwrap is missing for a profile, or the program cannot be started; every
            descriptor and cgroup made here is released first.
    """
    status_read: int | None = None
    cgroup: WorkerCgroup | None = None
    try:
        if sandbox is not None:
            if not bwrap:
                raise OSError("a sandbox profile needs a bwrap binary")
            seccomp_fd, status_read, joined = sandbox_descriptors(sandbox, userns, passed, ours)
            argv = build_bwrap_argv(
                sandbox,
                argv,
                bwrap=bwrap,
                seccomp_fd=seccomp_fd,
                status_fd=STATUS_FD,
                userns=joined,
            )
            env = {}  # bwrap --clearenv sets the sandbox's environment from the profile
            cwd = "/"
            if cgroups is not None:
                cgroup = cgroups.create(
                    pids_max=sandbox.limits.processes,
                    memory_max_bytes=sandbox.limits.memory_mb * 1024 * 1024,
                )
        # dup2(n, n) would leave close-on-exec set, and a source that is another
        # action's target would be overwritten first (0–2 too, when the supervisor was
        # started with one of them closed): move such sources out of the way.
        targets = set(passed) | {0, 1, 2}

        def movable(source: int) -> int:
            if source not in targets:
                return source
            moved = fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, 10)
            ours.append(moved)
            return moved

        actions = [
            (kind, movable(action[0]), *action[1:])
            if kind == os.POSIX_SPAWN_DUP2
            else (kind, *action)
            for kind, *action in stdio
        ] + [
            (os.POSIX_SPAWN_DUP2, movable(source), target)
            for target, source in sorted(passed.items())
        ]
        # Only what the actions put in place reaches the child (DESIGN §6): a descriptor
        # the supervisor inherited from its own parent (a shell's `exec 9<file`, a CI
        # runner's) is inheritable, and an MCP server would get it under bwrap.
        close_inherited_on_exec()
        # In the cgroup from the first instruction (see cgroup_limits).
        with cgroup.entered() if cgroup is not None else contextlib.nullcontext():
            if cwd is None:
                pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
            else:
                # posix_spawn has no cwd: the child inherits ours for the moment.
                previous = os.getcwd()
                os.chdir(cwd)
                try:
                    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
                finally:
                    os.chdir(previous)
    except BaseException:
        if status_read is not None:
            os.close(status_read)
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        for fd in ours:
            os.close(fd)
    return Spawned(pid=pid, status_read=status_read, cgroup=cgroup)


def close_inherited_on_exec() -> None:
    """Mark every descriptor of this process above 2 that a spawned child would inherit
    close-on-exec (descriptors opened by Python already are, PEP 446; these are the
    ones the process inherited from its parent). A descriptor meant for a child is
    passed with a ``POSIX_SPAWN_DUP2`` action, whose copy is inheritable whatever the
    source's flag.

    Raises:
        OSError: neither ``/proc/self/fd`` nor ``/dev/fd`` can be listed; the spawn then
            fails rather than let unknown descriptors through.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = os.listdir("/dev/fd")
    for name in names:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if os.get_inheritable(fd):
                os.set_inheritable(fd, False)
        except OSError:
            continue  # closed since the listing (the listing's own descriptor)


async def terminate_process_group(
    pid: int,
    exited: trio.Event,
    kill: Callable[[], None],
    grace_s: float,
    *,
    kill_wait_s: float | None = None,
) -> None:
    """The end of a stop, for workers and MCP servers alike: unless ``exited`` is set,
    SIGTERM the process group ``pid`` and wait ``grace_s`` seconds; then, if it still
    runs, ``kill()`` (SIGKILL of the group) and wait for ``exited`` — without a bound,
    or at most ``kill_wait_s`` seconds. The caller runs it shielded; the process's
    reaper sets ``exited``."""
    if not exited.is_set():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await exited.wait()
    if not exited.is_set():
        kill()
        with trio.move_on_after(math.inf if kill_wait_s is None else kill_wait_s):
            await exited.wait()


async def drain_into_capped_log(
    fd: int,
    path: Path,
    limit: int,
    *,
    on_truncated: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Read the pipe ``fd`` until its end and append what comes to ``path`` (mode 0600,
    never through a symlink), up to ``limit`` bytes per file, then a line
    ``[pi: log truncated at <limit> bytes; further output discarded]``.

    Past the cap the pipe is still read, so the writer never blocks on a full pipe, and
    ``on_truncated`` is awaited once (its errors are ignored). A respawned process
    appends to its predecessor's log: the cap counts what the file already holds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.stat().st_size if path.exists() else 0
    told = written >= limit
    async with trio.lowlevel.FdStream(fd) as pipe:
        # 0600: a worker's output may hold what a tool_result hook redacts before the
        # model sees it (a kept log survives the run for days).
        log_fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        with open(log_fd, "ab") as log:
            while True:
                try:
                    data = await pipe.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not data:
                    return
                if written >= limit:
                    continue  # keep draining so the writer never blocks on a full pipe
                chunk = data[: limit - written]
                log.write(chunk)
                written += len(chunk)
                if written >= limit:
                    log.write(
                        b"\n[pi: log truncated at %d bytes; further output discarded]\n" % limit
                    )
                log.flush()
                if written >= limit and not told:
                    told = True
                    if on_truncated is not None:
                        with contextlib.suppress(Exception):
                            await on_truncated()


def log_tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of the log at ``path``, decoded leniently ("" if it
    cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
