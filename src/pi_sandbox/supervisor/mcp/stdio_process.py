"""One MCP stdio server process and the transport the ``mcp`` SDK's client runs on.

The SDK's own ``stdio_client`` cannot start a program under bwrap (the seccomp
program and bwrap's status pipe are passed as descriptors) and reads lines without a
bound. So the process is spawned here like a worker (`worker_process`: ``posix_spawn``,
new session, only the descriptors it needs, stderr drained into a capped log, the
sandbox's cgroup entered from the first instruction), and this module bridges its
stdin/stdout to the two anyio memory streams `mcp.ClientSession` takes — the protocol
itself is the SDK's (issue 19: "do not hand-write the client").

What the bridge refuses, so that a hostile server cannot hurt the session:
a line over `MAX_LINE_BYTES` (the server is killed), more than `MAX_BAD_LINES`
lines that are not JSON-RPC (killed; fewer are logged and dropped), output while
nobody reads (the reader applies back-pressure: a server that floods blocks on its
own pipe).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import trio

from pi_sandbox.sandbox import SandboxProfile
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter, WorkerCgroup
from pi_sandbox.sandbox.identity import UserNamespace
from pi_sandbox.sandbox.profile import PROXY_SOCKET_IN_SANDBOX
from pi_sandbox.supervisor.workers.sandboxed_spawn import (
    drain_into_capped_log,
    log_tail,
    spawn_in_sandbox,
    terminate_process_group,
)

__all__ = ["MAX_BAD_LINES", "MAX_LINE_BYTES", "StdioLaunch", "StdioServerProcess"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 8 * 1024 * 1024
"""Longest message line accepted from a server (bytes), like the worker channel's frame limit."""

MAX_BAD_LINES = 20
"""Lines that are not JSON-RPC tolerated from one server process before it is killed."""

_LAUNCHER = str(Path(__file__).resolve().parent.parent.parent / "sandbox" / "exec_launcher.py")


@dataclass(frozen=True)
class StdioLaunch:
    """How to start one stdio server.

    Attributes:
        name: the server's name (for messages).
        argv: the program (absolute path) and its arguments.
        env: the complete environment when unsandboxed (the profile's otherwise).
        cwd: the working directory when unsandboxed.
        log_path: where stderr goes (capped at ``max_log_bytes``).
        sandbox: the profile, or None to run without bwrap (``--no-sandbox`` only).
        bwrap: the bwrap binary (required with ``sandbox``).
        cgroups / userns: as `WorkerSpec`.
    """

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    log_path: Path
    sandbox: SandboxProfile | None = None
    bwrap: str | None = None
    cgroups: CgroupLimiter | None = None
    userns: UserNamespace | None = None
    max_log_bytes: int = 1024 * 1024
    extra: dict[str, Any] = field(default_factory=dict)


class StdioServerProcess:
    """A running server process; `open_streams` gives the SDK's stream pair."""

    def __init__(self, launch: StdioLaunch) -> None:
        self.launch = launch
        self.pid: int | None = None
        self.returncode: int | None = None
        self.exited = trio.Event()
        self.failure: str | None = None
        self.bad_lines = 0
        self._stdin: int | None = None
        self._stdout: int | None = None
        self._log: int | None = None
        self._status: int | None = None
        self._pidfd: int | None = None
        self._cgroup: WorkerCgroup | None = None
        self._killed = False

    # --- spawning ------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process (synchronous: posix_spawn).

        Raises:
            OSError: the program or bwrap cannot be started.
        """
        launch = self.launch
        argv = list(launch.argv)
        profile = launch.sandbox
        if profile is not None:
            config = {
                "rlimits": profile.limits.rlimits(),
                "proxy_socket": PROXY_SOCKET_IN_SANDBOX if profile.network == "proxy" else None,
                "proxy_direct": list(profile.proxy_direct),
            }
            argv = [sys.executable, "-I", "-B", _LAUNCHER, json.dumps(config), "--", *argv]
        stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC)
        stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
        log_read, log_write = os.pipe2(os.O_CLOEXEC)
        try:
            spawned = spawn_in_sandbox(
                argv,
                dict(launch.env),
                stdio=[
                    (os.POSIX_SPAWN_DUP2, stdin_read, 0),
                    (os.POSIX_SPAWN_DUP2, stdout_write, 1),
                    (os.POSIX_SPAWN_DUP2, log_write, 2),
                ],
                passed={},
                ours=[stdin_read, stdout_write, log_write],
                sandbox=profile,
                bwrap=launch.bwrap,
                userns=launch.userns,
                cgroups=launch.cgroups,
                cwd=launch.cwd,
            )
        except BaseException:
            for fd in (stdin_write, stdout_read, log_read):
                os.close(fd)
            raise
        self.pid = spawned.pid
        self._cgroup = spawned.cgroup
        self._stdin, self._stdout, self._log, self._status = (
            stdin_write,
            stdout_read,
            log_read,
            spawned.status_read,
        )
        self._pidfd = os.pidfd_open(self.pid)

    # --- the transport -------------------------------------------------------------

    async def serve(
        self,
        read_writer: Any,
        write_reader: Any,
        *,
        on_bad_line: Any = None,
        before_read: Any = None,
    ) -> None:
        """Bridge the process to the SDK's streams until it exits or is cancelled.

        Args:
            read_writer: the send end of the stream the ClientSession reads
                (``SessionMessage | Exception``).
            write_reader: the receive end of the stream the ClientSession writes.
            on_bad_line: called with a short description of each dropped line.
            before_read: awaited before the first read (the SDK's import: its
                modules are imported only after it, in this thread).
        """
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_exit)
            nursery.start_soon(self._drain_log)
            if self._status is not None:
                nursery.start_soon(self._drain_status)
            nursery.start_soon(self._write_stdin, write_reader)
            if before_read is not None:
                await before_read()
            await self._read_stdout(read_writer, on_bad_line)
            # Its stdout is closed: it is ending (or a hostile one lingers). Reap it
            # before the watcher goes, so that its exit status is known.
            with trio.move_on_after(2):
                await self.exited.wait()
            if not self.exited.is_set():
                self.kill()
                with trio.move_on_after(5):
                    await self.exited.wait()
            nursery.cancel_scope.cancel()

    async def _read_stdout(self, read_writer: Any, on_bad_line: Any) -> None:
        # Imported here, once the SDK is (see connection.import_client_now): the
        # caller sends nothing to read before its client exists.
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter

        assert self._stdout is not None
        buffer = bytearray()
        try:
            async with trio.lowlevel.FdStream(self._stdout) as pipe:
                while True:
                    try:
                        data = await pipe.receive_some(65536)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        break
                    if not data:
                        break
                    buffer += data
                    while True:
                        end = buffer.find(b"\n")
                        if end < 0:
                            if len(buffer) > MAX_LINE_BYTES:
                                self.failure = f"sent a line over {MAX_LINE_BYTES} bytes"
                                self.kill()
                                return
                            break
                        line = bytes(buffer[:end]).strip()
                        del buffer[: end + 1]
                        if len(line) > MAX_LINE_BYTES:
                            self.failure = f"sent a line over {MAX_LINE_BYTES} bytes"
                            self.kill()
                            return
                        if not line:
                            continue
                        try:
                            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except ValueError:
                            self.bad_lines += 1
                            if on_bad_line is not None:
                                on_bad_line(line[:200].decode("utf-8", "replace"))
                            if self.bad_lines > MAX_BAD_LINES:
                                self.failure = (
                                    f"sent more than {MAX_BAD_LINES} lines that are not JSON-RPC"
                                )
                                self.kill()
                                return
                            continue
                        try:
                            await read_writer.send(SessionMessage(message))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
        finally:
            with contextlib.suppress(Exception):
                await read_writer.aclose()

    async def _write_stdin(self, write_reader: Any) -> None:
        assert self._stdin is not None
        async with trio.lowlevel.FdStream(self._stdin) as pipe:
            try:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    await pipe.send_all(text.encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, anyio.ClosedResourceError):
                pass

    async def _drain_log(self) -> None:
        assert self._log is not None
        await drain_into_capped_log(self._log, self.launch.log_path, self.launch.max_log_bytes)

    async def _drain_status(self) -> None:
        assert self._status is not None
        async with trio.lowlevel.FdStream(self._status) as pipe:
            while True:
                try:
                    data = await pipe.receive_some(4096)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not data:
                    return

    async def _watch_exit(self) -> None:
        assert self._pidfd is not None and self.pid is not None
        try:
            await trio.lowlevel.wait_readable(self._pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if self.returncode is None:
                # Cancelled before it exited (the session ends): never leave it
                # running or unreaped; a SIGKILLed process is reaped at once.
                self.kill()
                with contextlib.suppress(ChildProcessError):
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
            if self._cgroup is not None:
                self._cgroup.remove()
                self._cgroup = None
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self.exited.set()

    # --- stopping ------------------------------------------------------------------

    def log_tail(self, limit: int = 2000) -> str:
        """The last ``limit`` bytes of the server's stderr log."""
        return log_tail(self.launch.log_path, limit)

    def kill(self) -> None:
        """SIGKILL the server's process group (bwrap takes the sandbox with it)."""
        if self.pid is None or self.exited.is_set():
            return
        self._killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def aclose(self, grace_s: float = 1.0) -> None:
        """Close stdin, then SIGTERM, then SIGKILL the group; always reaps (pi mcp.md
        "Stopping a stdio server closes its stdin, sends SIGTERM, then SIGKILL")."""
        if self.pid is None:
            return
        with trio.CancelScope(shield=True):
            if not self.exited.is_set():
                with trio.move_on_after(grace_s):
                    await self.exited.wait()
            await terminate_process_group(self.pid, self.exited, self.kill, grace_s, kill_wait_s=5)
