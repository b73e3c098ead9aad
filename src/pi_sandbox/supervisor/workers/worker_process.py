"""Spawning, handshaking and stopping one worker process (DESIGN §1, §3).

A worker is spawned with ``os.posix_spawn`` so that its channel lands on exactly fd 3
(``POSIX_SPAWN_DUP2``), stdin is ``/dev/null`` and stdout/stderr go to a pipe that
the supervisor drains into a capped per-worker log file; every other descriptor of the supervisor is close-on-exec (PEP 446), so
nothing else is inherited. The worker runs in a new session; under ``--sandbox`` the
command is wrapped in bwrap (``sandbox.build_bwrap_argv``).

Lifetime follows jupyter_client's restarter: a worker gets a generation number at
``initialize``; ``aclose`` escalates shutdown request → wait → SIGTERM → wait →
SIGKILL and always reaps.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import trio

from pi_sandbox.errors import (
    HostCallError,
    ProtocolError,
    RemoteError,
    WorkerCrashedError,
    WorkerError,
    WorkerStartError,
    WorkerTimeoutError,
)
from pi_sandbox.protocol import methods
from pi_sandbox.protocol.messages import (
    CancelledParams,
    InitializeResult,
    LogParams,
    NotificationMessage,
    RequestMessage,
)
from pi_sandbox.sandbox import SandboxProfile
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter, WorkerCgroup
from pi_sandbox.sandbox.identity import UserNamespace
from pi_sandbox.sandbox.profile import PROXY_SOCKET_IN_SANDBOX
from pi_sandbox.supervisor.workers.rpc_channel import RpcChannel
from pi_sandbox.supervisor.workers.sandboxed_spawn import (
    drain_into_capped_log,
    log_tail,
    spawn_in_sandbox,
    terminate_process_group,
)

__all__ = [
    "WorkerProcess",
    "WorkerSpec",
    "compile_stale",
    "ensure_worker_bytecode",
    "worker_command",
    "worker_sys_path",
]

_LOG_TAIL_BYTES = 4000
_MAX_KEPT_LOGS = 100
_MAX_ERROR_REPORTS = 20
_MAX_HOST_CALLS = 256

# Run by ``python -c``: the paths after the code become sys.path's tail, then the
# worker's main loop (what ``-m pi_sandbox.worker`` runs, without runpy).
_BOOTSTRAP = (
    "import sys;sys.path+=sys.argv[1:];del sys.argv[1:];"
    "from pi_sandbox.worker.runtime import main;raise SystemExit(main())"
)


def worker_command() -> list[str]:
    """The argv that starts a worker with this interpreter.

    ``-I``: isolated mode (no user site, no script or current directory on
    ``sys.path``, ``PYTHON*`` variables ignored — so ``-B`` is needed to keep
    extensions from leaving ``__pycache__`` beside their files). ``-S``: no `site`
    (about 3 ms of every worker's start, issue 20 §5): the entries it would add
    are computed once here (`worker_sys_path`) and passed as arguments.
    """
    return [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, *worker_sys_path()]


@functools.cache
def worker_sys_path() -> tuple[str, ...]:
    """What `site` adds to ``sys.path`` in ``python -I`` with this interpreter:
    its site-packages directories, the directories their ``.pth`` files name, and
    the directory holding ``pi_sandbox`` (an editable install's ``src/``).

    The interpreter's own entries (the stdlib, ``lib-dynload``) are there without
    `site`. ``.pth`` lines that are code (``import …``) are not run in a worker:
    an extension relying on one (an import hook installed by a ``.pth``) must
    import what it needs itself. Computed once per process.
    """
    import site

    entries: list[str] = []

    def add(path: str) -> None:
        path = os.path.abspath(path)
        if path not in entries and os.path.exists(path):
            entries.append(path)

    for sitedir in site.getsitepackages():
        if not os.path.isdir(sitedir):
            continue
        add(sitedir)
        try:
            names = sorted(os.listdir(sitedir))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".pth") or name.startswith("."):
                continue
            try:
                with open(os.path.join(sitedir, name), encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                if not line.strip() or line.startswith(("#", "import ", "import\t")):
                    continue
                add(os.path.join(sitedir, line.rstrip()))
    import pi_sandbox

    add(os.path.dirname(os.path.dirname(os.path.abspath(pi_sandbox.__file__))))
    return tuple(entries)


@functools.cache
def ensure_worker_bytecode() -> int:
    """Write the bytecode of the worker's own modules (``pi_sandbox/__init__.py``,
    ``pi_sandbox/worker/``, ``pi_sandbox/protocol/``) where it is missing or stale;
    returns how many modules were compiled. Once per process; blocking (call it from
    a thread on an event loop).

    Why: every worker runs with ``-B`` (it must not leave ``__pycache__`` beside an
    extension's files), so without up-to-date bytecode each of them compiles these
    modules again at start — about 20 ms of CPU per worker (issue 20 §5; an editable
    install used with ``PYTHONDONTWRITEBYTECODE=1`` never gets any). The files are
    the ones the import system would write itself (``__pycache__/NAME.TAG.pyc``,
    timestamp-checked), written atomically by `py_compile`. A directory that cannot
    be written (a read-only install) is left alone: the workers then compile, as
    before. A sandbox sees the package read-only, so no worker can change them.
    """
    import pi_sandbox

    root = os.path.dirname(os.path.abspath(pi_sandbox.__file__))
    sources = [os.path.join(root, "__init__.py")]
    for sub in ("worker", "protocol"):
        directory = os.path.join(root, sub)
        with contextlib.suppress(OSError):
            sources += [
                os.path.join(directory, name)
                for name in sorted(os.listdir(directory))
                if name.endswith(".py")
            ]
    return compile_stale(sources)


def compile_stale(sources: list[str]) -> int:
    """Compile each ``.py`` file of ``sources`` whose ``__pycache__`` bytecode for a
    ``-I -B`` worker of this interpreter is missing or stale (timestamp pyc: source
    mtime and size; hash-based pyc files are left to the import system). Errors
    (unwritable directory, syntax error) are skipped. Returns how many were written.
    """
    import importlib.util
    import py_compile

    tag = sys.implementation.cache_tag
    compiled = 0
    for source in sources:
        directory, name = os.path.split(source)
        # The path a ``-I -B`` worker reads (not `cache_from_source`: that follows
        # this process's -O level and pycache prefix, which the worker does not have).
        cfile = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
        try:
            info = os.stat(source)
            with open(cfile, "rb") as handle:
                header = handle.read(16)
            flags = int.from_bytes(header[4:8], "little")
            if (
                header[:4] == importlib.util.MAGIC_NUMBER
                and (
                    flags != 0  # hash-based: the import system checks it itself
                    or (
                        int.from_bytes(header[8:12], "little") == int(info.st_mtime) & 0xFFFFFFFF
                        and int.from_bytes(header[12:16], "little") == info.st_size & 0xFFFFFFFF
                    )
                )
            ):
                continue
        except OSError:
            pass  # no bytecode yet (or no source: py_compile says so below)
        cache_dir = os.path.dirname(cfile)
        if not os.access(cache_dir if os.path.isdir(cache_dir) else directory, os.W_OK):
            continue  # a read-only install: not compiled in vain at every run
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(
                source,
                cfile=cfile,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
            )
            compiled += 1
    return compiled


@dataclass(frozen=True)
class WorkerSpec:
    """How to start one worker.

    Attributes:
        name: for messages, e.g. ``"tool worker"`` or ``"extension /x/guard.py"``.
        init_params: the ``initialize`` parameters (``kind``, ``path``, ``ctx``).
        log_path: where the worker's stdout and stderr go (at most ``max_log_bytes``).
        env: the worker's environment when unsandboxed (an allowlist, never ours).
        sandbox: the profile to run under, or ``None`` for no bwrap.
        bwrap: the bwrap binary (required with ``sandbox``).
        max_log_bytes: the cap on the log file (bytes); later output is discarded.
        cgroups: where to make the worker's pids/memory cgroup (sandboxed workers
            only; None when the host offers none).
        userns: the user namespace a sandboxed worker joins to run as the
            workspace's owner (root on a foreign-owned workspace, issue 14 §3);
            None: bwrap makes its own, mapping the caller.
    """

    name: str
    init_params: dict[str, Any]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    sandbox: SandboxProfile | None = None
    bwrap: str | None = None
    max_log_bytes: int = 4 * 1024 * 1024
    cgroups: CgroupLimiter | None = None
    userns: UserNamespace | None = None


class WorkerProcess:
    """A running worker: its process, channel and the registrations from its handshake."""

    def __init__(self, spec: WorkerSpec, *, generation: int) -> None:
        self.spec = spec
        self.generation = generation
        self.pid: int | None = None
        self.returncode: int | None = None
        self.registrations: InitializeResult | None = None
        self.failure: BaseException | None = None
        self.exited = trio.Event()
        self.logs: list[LogParams] = []
        self._error_reports = 0
        self._host_calls = 0
        # Called with (this worker, the tool/update notification).
        self.tool_updates: (
            Callable[[WorkerProcess, NotificationMessage], Awaitable[None]] | None
        ) = None
        # Called with (this worker, a provider/delta notification) while an extension
        # provider's request runs (issue 16; `providers.extension_provider`).
        self.provider_deltas: (
            Callable[[WorkerProcess, NotificationMessage], Awaitable[None]] | None
        ) = None
        # Called with (this worker, the host/call request); returns the result or
        # raises HostCallError. Set by the pool for extension workers.
        self.host_call: Callable[[WorkerProcess, RequestMessage], Awaitable[Any]] | None = None
        # Whether to keep a ``log`` notification (the host's rate limit, issue 13 §4).
        self.admit_log: Callable[[WorkerProcess], bool] | None = None
        # Called with (this worker, a registrations/update or bus/emit notification).
        self.extension_notifications: (
            Callable[[WorkerProcess, NotificationMessage], Awaitable[None]] | None
        ) = None
        # Awaited with (this worker, text) for each error-level log (a thread of the
        # extension died); set by the pool.
        self.error_logs: Callable[[WorkerProcess, str], Awaitable[None]] | None = None
        self._nursery: trio.Nursery | None = None
        self._channel: RpcChannel | None = None
        self._pidfd: int | None = None
        self._log_pipe: int | None = None
        self._status_pipe: int | None = None
        self._cgroup: WorkerCgroup | None = None
        self._killed = False
        self._final_events: dict[str, int] = {}
        # From bwrap --json-status-fd: the sandboxed child's host pid, its exit code.
        self.sandbox_pid: int | None = None
        self.sandbox_exit_code: int | None = None
        self.sandbox_status = trio.Event()

    @property
    def name(self) -> str:
        """The worker's name, as used in messages."""
        return self.spec.name

    @property
    def alive(self) -> bool:
        """True while the process runs and its channel is usable; False as soon as
        `kill` was called (the next request goes to a replacement, not to a worker
        that is still dying)."""
        return (
            not self._killed
            and not self.exited.is_set()
            and self._channel is not None
            and not self._channel.closed
        )

    def log_tail(self, limit: int = _LOG_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of the worker's stdout/stderr log, decoded leniently."""
        return log_tail(self.spec.log_path, limit)

    async def start(self, nursery: trio.Nursery, *, timeout_s: float = 15.0) -> InitializeResult:
        """Spawn the process and complete the ``initialize`` handshake.

        Background tasks (channel reader, exit watcher) run in ``nursery``; they never
        raise into it.

        Raises:
            WorkerStartError: spawn failed, the handshake timed out, the worker crashed
                during it or answered with something invalid.
            RemoteError: the worker reported a load error (``code`` is
                ``ERROR_EXTENSION_LOAD``, ``remote_traceback`` the original traceback).
        """
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.pid = self._spawn(child_sock)
        except OSError as exc:
            parent_sock.close()
            raise WorkerStartError(f"{self.name}: cannot spawn worker: {exc}") from exc
        finally:
            child_sock.close()
        self._pidfd = os.pidfd_open(self.pid)
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(parent_sock))
        self._nursery = nursery
        self._channel = RpcChannel(
            stream,
            name=self.name,
            on_notification=self._on_notification,
            on_request=self._on_request,
        )
        nursery.start_soon(self._watch_exit)
        nursery.start_soon(self._read_channel)
        nursery.start_soon(self._drain_log)
        if self._status_pipe is not None:
            nursery.start_soon(self._read_status)
        params = {**self.spec.init_params, "generation": self.generation}
        profile = self.spec.sandbox
        if profile is not None:
            params["sandbox"] = {
                "rlimits": profile.limits.rlimits(),
                "cpu_seconds": profile.limits.cpu_seconds,
                "tool_timeout_s": profile.limits.tool_timeout_s,
                "proxy_socket": PROXY_SOCKET_IN_SANDBOX if profile.network == "proxy" else None,
                "proxy_direct": list(profile.proxy_direct),
            }
        try:
            raw = await self._channel.request(methods.INITIALIZE, params, timeout_s=timeout_s)
        except RemoteError:
            await self.aclose()
            raise
        except (WorkerTimeoutError, WorkerCrashedError, ProtocolError) as exc:
            await self.aclose()
            tail = self.log_tail().strip()
            detail = f"\n--- worker log ---\n{tail}" if tail else ""
            raise WorkerStartError(f"{self.name}: handshake failed: {exc}{detail}") from exc
        try:
            self.registrations = InitializeResult.model_validate(raw)
        except pydantic.ValidationError as exc:
            await self.aclose()
            raise WorkerStartError(f"{self.name}: invalid initialize result: {exc}") from exc
        if self.registrations.protocol_version != methods.PROTOCOL_VERSION:
            await self.aclose()
            raise WorkerStartError(
                f"{self.name}: speaks protocol {self.registrations.protocol_version}, "
                f"the supervisor {methods.PROTOCOL_VERSION}"
            )
        if self.registrations.generation != self.generation:
            await self.aclose()
            raise WorkerStartError(
                f"{self.name}: answered for generation {self.registrations.generation}, expected {self.generation}"
            )
        return self.registrations

    def _spawn(self, child_sock: socket.socket) -> int:
        # stdout/stderr go through a pipe the supervisor drains into the log file, so
        # the log is capped: a worker that prints forever cannot fill the host's disk.
        read_fd, log_fd = os.pipe2(os.O_CLOEXEC)
        try:
            spawned = spawn_in_sandbox(
                worker_command(),
                dict(self.spec.env),
                stdio=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log_fd, 1),
                    (os.POSIX_SPAWN_DUP2, log_fd, 2),
                ],
                passed={methods.WORKER_FD: child_sock.fileno()},
                ours=[log_fd],
                sandbox=self.spec.sandbox,
                bwrap=self.spec.bwrap,
                userns=self.spec.userns,
                cgroups=self.spec.cgroups,
            )
        except BaseException:
            os.close(read_fd)
            raise
        self._cgroup = spawned.cgroup
        self._log_pipe = read_fd
        self._status_pipe = spawned.status_read
        return spawned.pid

    async def _read_status(self) -> None:
        """Read bwrap's ``--json-status-fd`` documents: ``{"child-pid": N}`` once the
        sandbox is built, ``{"exit-code": N}`` when its process ends."""
        assert self._status_pipe is not None
        buffer = b""
        async with trio.lowlevel.FdStream(self._status_pipe) as pipe:
            while len(buffer) < 65536:
                try:
                    data = await pipe.receive_some(4096)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    try:
                        document = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(document, dict):
                        continue
                    if isinstance(document.get("child-pid"), int):
                        self.sandbox_pid = document["child-pid"]
                        self.sandbox_status.set()
                    if isinstance(document.get("exit-code"), int):
                        self.sandbox_exit_code = document["exit-code"]
        self.sandbox_status.set()

    async def _watch_exit(self) -> None:
        assert self._pidfd is not None and self.pid is not None
        try:
            await trio.lowlevel.wait_readable(self._pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if self._cgroup is not None:
                # Remember why it may have died (an OOM kill) before the cgroup goes.
                self._final_events = self._cgroup.limit_events()
                self._cgroup.remove()  # anything a fork bomb left behind goes with it
                self._cgroup = None
            self.exited.set()
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            if self._channel is not None and not self._channel.closed:
                # The exit may be seen before the channel's end of file: pending
                # requests then fail naming the exit, not "closed by the supervisor".
                code = self.returncode
                how = (
                    "it was killed by the supervisor"
                    if self._killed
                    else "it stopped"
                    if code is None
                    else f"exit status {code}"
                    if code >= 0
                    else f"signal {-code}"
                )
                with trio.CancelScope(shield=True):
                    await self._channel.aclose(
                        WorkerCrashedError(f"{self.name}: worker exited ({how})")
                    )

    async def _drain_log(self) -> None:
        assert self._log_pipe is not None
        limit = self.spec.max_log_bytes

        async def report() -> None:
            if self.error_logs is not None:  # said once (issue 5 case 16)
                await self.error_logs(
                    self,
                    f"{self.name} wrote more than {limit} bytes to stdout/stderr; "
                    f"further output is discarded (log: {self.spec.log_path})",
                )

        await drain_into_capped_log(self._log_pipe, self.spec.log_path, limit, on_truncated=report)

    async def _read_channel(self) -> None:
        assert self._channel is not None
        try:
            await self._channel.run()
        except ProtocolError as exc:
            self.failure = exc
            self.kill()

    async def _on_notification(self, message: NotificationMessage) -> None:
        if message.method == methods.LOG:
            try:
                # Keep the newest few: a worker that logs without end must not grow the
                # supervisor's memory (the log file keeps everything up to its cap).
                log = LogParams.model_validate(message.params)
            except pydantic.ValidationError as exc:
                raise ProtocolError(f"{self.name}: invalid log notification: {exc}") from exc
            if self.admit_log is not None and not self.admit_log(self):
                return  # past its rate (issue 13 §4): dropped, counted by the host
            self.logs.append(log)
            del self.logs[:-_MAX_KEPT_LOGS]
            if log.level == "error" and self.error_logs is not None:
                # Shown as extension errors, but a worker cannot flood the output:
                # past the cap they stay in its log file and the kept tail only.
                self._error_reports += 1
                if self._error_reports <= _MAX_ERROR_REPORTS:
                    await self.error_logs(self, log.message[:4000])
                elif self._error_reports == _MAX_ERROR_REPORTS + 1:
                    await self.error_logs(
                        self,
                        f"{self.name} reported more than {_MAX_ERROR_REPORTS} errors; "
                        "further ones are not shown",
                    )
        elif message.method == methods.TOOL_UPDATE:
            if self.tool_updates is not None:
                await self.tool_updates(self, message)
        elif message.method == methods.PROVIDER_DELTA:
            if self.provider_deltas is not None:  # late deltas of an ended request: dropped
                await self.provider_deltas(self, message)
        elif message.method == methods.CANCELLED:
            try:
                params = CancelledParams.model_validate(message.params)
            except pydantic.ValidationError as exc:
                raise ProtocolError(f"{self.name}: invalid $/cancelled: {exc}") from exc
            if self._channel is not None:
                self._channel.cancel_finished(params.id)
        elif message.method in (methods.REGISTRATIONS_UPDATE, methods.BUS_EMIT):
            if self.extension_notifications is None:
                raise ProtocolError(f"{self.name}: sent {message.method} (not an extension)")
            await self.extension_notifications(self, message)
        else:
            raise ProtocolError(f"{self.name}: unknown notification {message.method!r}")

    def _on_request(self, message: RequestMessage) -> None:
        if self.host_call is None or self._nursery is None:
            raise ProtocolError(f"{self.name}: sent a request but may not make host calls")
        if self._host_calls >= _MAX_HOST_CALLS:
            # Each action is a task until answered: a flood would pile them up.
            raise ProtocolError(
                f"{self.name}: more than {_MAX_HOST_CALLS} actions in progress at once"
            )
        self._host_calls += 1
        self._nursery.start_soon(self._answer, message)

    async def _answer(self, message: RequestMessage) -> None:
        try:
            await self._answer_one(message)
        finally:
            self._host_calls -= 1

    async def _answer_one(self, message: RequestMessage) -> None:
        assert self._channel is not None and self.host_call is not None
        try:
            result = await self.host_call(self, message)
        except HostCallError as exc:
            await self._channel.respond(
                message.id, error={"code": exc.code, "message": str(exc)[:100_000]}
            )
            return
        except Exception as exc:  # a bug in an action must not take the session down
            await self._channel.respond(
                message.id,
                error={
                    "code": methods.ERROR_HOST,
                    "message": f"{type(exc).__name__}: {exc}"[:2000],
                },
            )
            return
        await self._channel.respond(message.id, result=result)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification to the worker (ignored once it is gone)."""
        if self._channel is not None and not self._channel.closed:
            await self._channel.notify(method, params)

    async def settle_cancels(self, grace_s: float) -> bool:
        """After a cancel: True when every cancelled handler returned within
        ``grace_s`` seconds; otherwise the worker is killed and False returned."""
        if self._channel is None or await self._channel.wait_cancels(grace_s):
            return True
        self.kill()
        return False

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> Any:
        """Send a request on this worker's channel (see ``RpcChannel.request``).

        Raises:
            WorkerCrashedError: the worker is gone (with its protocol failure, if any).
        """
        if self._channel is None:
            raise WorkerCrashedError(f"{self.name}: not started")
        if self.failure is not None:
            raise WorkerCrashedError(f"{self.name}: killed after {self.failure}")
        try:
            return await self._channel.request(method, params, timeout_s=timeout_s)
        except WorkerCrashedError as exc:
            if self.failure is not None:
                raise WorkerCrashedError(f"{self.name}: killed after {self.failure}") from exc
            raise

    def limit_events(self) -> dict[str, int]:
        """Counters of the worker's cgroup limits (see `WorkerCgroup.limit_events`):
        live while it runs, their last values once it exited; empty without a cgroup."""
        if self._cgroup is not None:
            return self._cgroup.limit_events()
        return dict(self._final_events)

    def kill(self) -> None:
        """SIGKILL the worker's process group at once (bwrap takes its sandbox down with it)."""
        if self.pid is None or self.exited.is_set():
            return
        self._killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    async def aclose(self, *, grace_s: float = 1.0) -> None:
        """Stop the worker: shutdown request, then SIGTERM, then SIGKILL; always reaps.

        Safe to call more than once and from a cancelled scope (runs shielded).
        """
        if self.pid is None:
            return
        with trio.CancelScope(shield=True):
            if self.alive and self._channel is not None:
                with contextlib.suppress(WorkerError, ProtocolError):
                    await self._channel.request(methods.SHUTDOWN, {}, timeout_s=grace_s)
                with trio.move_on_after(grace_s):
                    await self.exited.wait()
            await terminate_process_group(self.pid, self.exited, self.kill, grace_s)
            if self._channel is not None and not self._channel.closed:
                await self._channel.aclose()
