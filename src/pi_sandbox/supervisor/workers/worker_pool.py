"""All workers of one session: the tool worker and one worker per extension.

The pool discovers extensions (DESIGN §8: project extensions only with a trust
decision), builds each worker's sandbox profile from its role, starts every worker
concurrently, collects registrations into one tool registry, and routes events to
the workers that subscribed to them, combining results with ``protocol.hook_kinds``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import trio

from pi_sandbox.errors import (
    PiSandboxError,
    RemoteError,
    SandboxError,
    SandboxUnavailableError,
    WorkerError,
    WorkerTimeoutError,
)
from pi_sandbox.policies._effective import ExtensionRules
from pi_sandbox.protocol import hook_kinds, methods
from pi_sandbox.protocol.messages import DispatchResult, ToolDefinitionWire
from pi_sandbox.sandbox import find_bwrap, probe_bwrap, worker_profile
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter, remove_stale_cgroups
from pi_sandbox.sandbox.device_guard import DeviceGuard
from pi_sandbox.sandbox.identity import (
    UserNamespace,
    refuse_unreachable,
    unreachable_sources,
    workspace_identity,
)
from pi_sandbox.sandbox.inotify_watch import DirectoryWatch
from pi_sandbox.sandbox.persistence_guard import (
    Finding,
    PersistenceGuard,
    remove_legacy_placeholders,
)
from pi_sandbox.sandbox.profile import SandboxProfile, shared_directories
from pi_sandbox.sandbox.settings import SandboxSettings
from pi_sandbox.supervisor.boundary.extension_values import check_handler_result
from pi_sandbox.supervisor.extensions.extension_discovery import (
    ExtensionSource,
    discover_extensions,
    extension_name,
)
from pi_sandbox.supervisor.workers.worker_process import (
    WorkerProcess,
    WorkerSpec,
    ensure_worker_bytecode,
)

__all__ = [
    "MAX_EXTENSION_RESTARTS",
    "DispatchOutcome",
    "ExtensionSource",
    "PoolConfig",
    "RegisteredTool",
    "WorkerPool",
    "discover_extensions",
    "extension_name",
    "unsandboxed_env",
]

MAX_EXTENSION_RESTARTS = 3
"""Restarts of one extension's worker per session; past it the extension is disabled."""

CANCEL_GRACE_S = 1.0
"""After ``$/cancel`` (abort, deadline), how long a handler has to return before its
worker is killed and restarted (issue 5)."""

RESTART_BACKOFF_S = (0.1, 0.5, 2.0)
"""Delay before the 1st, 2nd, 3rd … restart of a crashed extension worker."""

KEPT_LOGS_FILE = "pi-run.txt"
"""Written into a worker-log directory the run keeps (`WorkerPool.aclose`): what
failed, with tracebacks, and each worker's log and exit. Its presence tells later
runs not to remove the directory (issue 14 §3)."""

KEPT_LOGS_MAX_AGE_S = 7 * 24 * 3600
"""A kept worker-log directory of a run that ended is removed by a later run once
its `KEPT_LOGS_FILE` is older than this (seconds)."""


@dataclass(frozen=True)
class RegisteredTool:
    """A tool the model may call, and the worker that executes it.

    An MCP tool (issue 19) has no worker: ``executor(tool_call_id, arguments)`` runs
    it (a request to its server) and returns a tool result dict; ``annotations``
    keeps the server's hints (``readOnlyHint``…).
    """

    definition: ToolDefinitionWire
    worker: WorkerProcess | None
    source: str  # "builtin", the extension's path, or "mcp:<server>"
    executor: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RegisteredCommand:
    """A ``/command``: its invocation name (``review`` or, when two extensions
    registered ``review``, ``review:1``/``review:2`` in load order), the name the
    extension registered, and the extension's index in `WorkerPool.extensions`."""

    name: str
    registered_name: str
    description: str
    index: int
    source: str


@dataclass
class DispatchOutcome:
    """The combined result of one event across workers.

    Attributes:
        state: the final ``hook_kinds`` state.
        errors: one message per failed handler or worker (for ``extension_error``).
        failure: set when a handler of a fail-closed event failed (raised, returned
            a malformed result, timed out, its worker crashed or is disabled): the
            first failure's message, naming the extension. The caller must then act
            as ``hook_kinds.ON_FAILURE`` says (block, withhold, stop, cancel…) and
            not use ``state`` as a transformed value (issue 13 §1).
        fatal: set when a fail-closed event met a disabled extension: every later
            event would fail the same way, so the session should end.
    """

    state: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)
    failure: str | None = None
    fatal: str | None = None


class _Sent:
    """One ``event/dispatch`` request `WorkerPool._send_group` sent ahead: the worker,
    the state it was sent, and its answer once ``done`` (issue 20 target 2)."""

    __slots__ = ("done", "error", "gate", "observer", "raw", "scope", "state", "worker")

    def __init__(
        self,
        worker: WorkerProcess,
        state: dict[str, Any],
        *,
        observer: bool,
        gate: trio.Event | None,
    ) -> None:
        self.worker = worker
        self.state = state
        # Sent on its promise to only look: its result must leave the state as it was.
        self.observer = observer
        self.gate = gate
        self.done = trio.Event()
        self.scope = trio.CancelScope()  # cancelled when the dispatch ends
        self.raw: Any = None
        self.error: Exception | None = None

    async def result(self, state: dict[str, Any]) -> Any:
        """The worker's raw answer, once every extension before it was applied with
        ``state`` as the outcome; raises what its request raised.

        Raises:
            HandlerResultError: ``state`` is not the state it was sent (cannot happen
                while observers keep their promise, which is checked first: fail-closed).
        """
        if self.gate is not None:
            self.gate.set()  # the observers before it returned: its host calls may go
        if state != self.state:
            raise hook_kinds.HandlerResultError(
                "was sent the call ahead of an extension that changed it (blocked)"
            )
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.raw


WATCH_INTERVAL_S = 0.05
"""Least time between two inotify-driven persistence checks (seconds)."""

QUARANTINE_CAP = 100
"""Protected entries the persistence guard quarantines per run at most (red-team
F8): past it the run is a flood (a background loop re-creating ``.envrc``), so the
tool worker and its sandbox are killed and the run ends with exit 1
(docs/sandbox.md, "Nothing in your tree")."""


@dataclass(frozen=True)
class PoolConfig:
    """What the pool needs to start workers.

    Attributes:
        cwd: the workspace (absolute).
        agent_dir: ``~/.pi/agent`` or ``$PI_CODING_AGENT_DIR``.
        home: the user's home directory (masks are relative to it).
        sandbox: run every worker under bwrap.
        project_trust: ``"yes"``, ``"no"``, ``"sandboxed"`` or ``None`` (undecided).
        mode: ``"print"`` or ``"json"``; has_ui: whether prompts can be answered.
        handshake_timeout_s / hook_timeout_s: deadlines for ``initialize`` and each
            event handler call (the policy's ``extensions.handler_timeout_s``).
        settings: the policy's ``sandbox`` section (filesystem, network, limits).
        audit: called with one JSON-ready record per sandbox decision (the profile
            each worker got, every egress proxy decision); None to drop them.
        policy_files: the policy files in force; kept read-only in every sandbox.
        audit_log: the audit log file; kept read-only and masked in every sandbox.
        audit_logs: further audit log files (the policy's ``audit.file``), treated
            like ``audit_log``.
        extension_rules: the policy's ``extensions`` section (capabilities); None:
            the defaults of `ExtensionRules`. Its ``handler_timeout_for`` replaces
            ``hook_timeout_s`` per extension (issue 13 §3).
        extension_settings: the sandbox settings of managed, user and command-line
            extensions' workers (`Policy.higher_tier_sandbox`: without the project
            tier, issue 13 §3); None: ``settings``.
        session_dir: a session directory outside ``agent_dir`` (``--session-dir``,
            issue 15); kept read-only and masked in every sandbox like the default
            store ``<agent_dir>/sessions``.
    """

    cwd: Path
    agent_dir: Path
    home: Path
    sandbox: bool
    project_trust: str | None = None
    mode: str = "print"
    has_ui: bool = False
    handshake_timeout_s: float = 20.0
    hook_timeout_s: float = 30.0
    settings: SandboxSettings = field(default_factory=SandboxSettings)
    audit: Callable[[dict[str, Any]], None] | None = None
    policy_files: tuple[Path, ...] = ()
    audit_log: Path | None = None
    audit_logs: tuple[Path, ...] = ()
    extension_rules: ExtensionRules | None = None
    extension_settings: SandboxSettings | None = None
    session_dir: Path | None = None


class WorkerPool:
    """Starts, addresses and stops the workers of one session.

    Workers start at generation ``generation``; a respawned worker gets its
    predecessor's generation plus one, so a late message is never mistaken for the
    new instance's (each generation has its own channel).
    """

    def __init__(self, config: PoolConfig, *, generation: int = 1) -> None:
        self.config = config
        self.generation = generation
        self.tool_worker: WorkerProcess | None = None
        self.extensions: list[tuple[ExtensionSource, WorkerProcess]] = []
        self.tools: dict[str, RegisteredTool] = {}
        # Tools that do not come from a worker (MCP servers, issue 19): kept across
        # registry rebuilds; a worker's tool of the same name wins.
        self.external_tools: dict[str, RegisteredTool] = {}
        self.load_errors: list[dict[str, str]] = []
        self._bwrap: str | None = None
        _remove_stale_log_dirs_in_background()
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"pi-workers-{os.getpid()}-"))
        self._counter = 0
        self._nursery: trio.Nursery | None = None
        self._respawn_lock = trio.Lock()
        self._restarts: dict[Path, int] = {}
        self.disabled: dict[Path, str] = {}
        # Extensions of the current generation that failed to load: path → (source, error).
        self.failed_to_load: dict[Path, tuple[ExtensionSource, str]] = {}
        # What discovery refused by policy (set by the caller), for required-extension
        # messages.
        self.refused: list[tuple[ExtensionSource, str]] = []
        # The session host (actions, bus, reports); set before `start`.
        self.host: Any = None
        self.commands: dict[str, RegisteredCommand] = {}
        # Provider name → (extension path, configuration) registered by extensions.
        self.providers: dict[str, tuple[str, dict[str, Any]]] = {}
        # MCP server name → (extension path, entry) registered by extensions (issue 19).
        self.mcp_servers: dict[str, tuple[str, dict[str, Any]]] = {}
        self.ambiguous_commands: dict[str, list[str]] = {}
        self._reported_conflicts: set[tuple[str, str]] = set()
        self._closing = False
        # Workers of ended generations not stopped yet (stopped at the latest by aclose).
        self.retired: list[WorkerProcess] = []
        self._on_tool_update: Callable[..., Any] | None = None
        # tool call id → the worker executing it (set by the tool pipeline).
        self.running_calls: dict[str, WorkerProcess] = {}
        # The user's own bash commands (RPC ``bash``): call id → where its streamed
        # output goes (``bash_execution_update``) instead of ``tool_execution_update``.
        self.user_bash_output: dict[str, Callable[[str], Awaitable[None]]] = {}
        self.cgroups: CgroupLimiter | None = None
        # Protected entries sandboxed tools created and the guard moved out of the
        # workspace (issue 14 §1); reported as they are found.
        self.quarantined: list[Finding] = []
        self._guard: PersistenceGuard | None = None
        self._guard_lock = trio.Lock()
        self._dir_watch: DirectoryWatch | None = None
        self._watch_scope: trio.CancelScope | None = None
        # Reports a finding the inotify-driven check made between tool calls
        # (run.py: the warning event); findings of the end-of-call check are
        # returned to the tool pipeline instead.
        self.on_quarantine: Callable[[Finding], Awaitable[None]] | None = None
        # Set when the guard could not record the whole of the writable roots.
        self.guard_warning: str | None = None
        # Set when the guard's protection failed during the run (a quarantine
        # flood, an entry that could not be moved or removed): the run must end
        # with exit 1 (docs/sandbox.md).
        self.guard_failure: str | None = None
        # Findings reported once per (path, rule); repeats are audited and counted.
        self._reported_findings: set[tuple[str, str]] = set()
        self.repeated_findings = 0
        # Host device nodes whose mode a sandbox changed and the pool put back.
        self.repaired_devices: list[str] = []
        self._devices: DeviceGuard | None = None
        self._proxy_socket: str | None = None
        # Root on a workspace another uid owns: the namespace every sandbox joins to
        # run as that owner (issue 14 §3), and the directory of the proxy socket it
        # may reach (the log directory stays root's).
        self._userns: UserNamespace | None = None
        self._proxy_dir: str | None = None
        self._watched: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()
        # Every worker ever created, so that `aclose` and `kill_all` reach one whose
        # start was interrupted (a stop signal during its handshake) before it was
        # filed in `extensions`/`tool_worker` (issue 14 §3).
        self._spawned: list[WorkerProcess] = []
        # Host calls of a worker sent a tool_call ahead of the observe-only extensions
        # before it wait here until those finished (issue 20 target 2, `_send_group`).
        # Per worker, the gates of the tool_call dispatches in flight that sent it a
        # call ahead of observers (`_send_group`); its host calls wait for all of them.
        self._host_gates: dict[WorkerProcess, list[trio.Event]] = {}

    @property
    def guarded(self) -> bool:
        """Whether the persistence guard watches the tool worker's writable roots
        (a sandboxed tool worker with at least one writable root)."""
        return self._guard is not None

    def accepted_worktree(self, directory: str) -> bool:
        """Whether ``directory`` is a linked worktree a sandboxed ``git worktree
        add`` made and the persistence guard checked (not a planted repository)."""
        return self._guard is not None and os.path.join(directory, ".git") in self._guard.accepted

    async def check_persistence(self) -> list[Finding]:
        """Quarantine protected entries sandboxed tools created since the last check
        (`PersistenceGuard.check`, in a worker thread) and audit each one
        (``{"event": "quarantine", ...}``). The caller reports them to the user.

        Returns:
            The new findings (also appended to `quarantined`); empty when unguarded.
        """
        if self._guard is None:
            return []
        async with self._guard_lock:
            with trio.CancelScope(shield=True):
                findings = await trio.to_thread.run_sync(self._guard.check)
                if self._dir_watch is not None:
                    self._dir_watch.add(self._guard.take_new_directories())
        return self._record_findings(findings)

    async def check_repository(self, directory: str) -> list[Finding]:
        """Quarantine the code-running config of a repository the run made
        (`PersistenceGuard.check_repository`); audited and returned like
        `check_persistence`'s findings. Empty when unguarded."""
        if self._guard is None:
            return []
        async with self._guard_lock:
            with trio.CancelScope(shield=True):
                findings = await trio.to_thread.run_sync(self._guard.check_repository, directory)
        return self._record_findings(findings)

    def _record_findings(self, findings: list[Finding]) -> list[Finding]:
        """Audit every finding, enforce `QUARANTINE_CAP`, and return those to report:
        a (path, rule) already reported is counted in `repeated_findings` instead."""
        for finding in findings:
            self.audit(
                {
                    "event": "quarantine",
                    "path": finding.path,
                    "rule": finding.rule,
                    "moved_to": finding.moved_to,
                    "error": finding.error,
                }
            )
        self.quarantined += findings
        fresh: list[Finding] = []
        for finding in findings:
            key = (finding.path, finding.rule)
            if key in self._reported_findings and not finding.left:
                self.repeated_findings += 1
                continue
            self._reported_findings.add(key)
            fresh.append(finding)
            if finding.left and self.guard_failure is None:
                self.guard_failure = (
                    f"a sandboxed tool created {finding.path} ({finding.rule}) and pi could "
                    f"neither move nor remove it ({finding.error}); remove it by hand before "
                    "any git, editor or agent runs there (docs/sandbox.md, "
                    '"Nothing in your tree")'
                )
        if len(self.quarantined) >= QUARANTINE_CAP and self.guard_failure is None:
            self.guard_failure = (
                f"quarantine flood: sandboxed tools created {len(self.quarantined)} protected "
                f"entries (the cap is {QUARANTINE_CAP} per run); pi stopped the tools and ends "
                "the run (see the quarantine records in the audit log)"
            )
        if self.guard_failure is not None:
            # Fail closed: nothing of the sandbox keeps running (the tool call in
            # flight fails; the pipeline then ends the run with the failure).
            worker = self.tool_worker
            if worker is not None and worker.spec.sandbox is not None and worker.pid is not None:
                worker.kill()
        return fresh

    async def _start_guard(self, profile: SandboxProfile) -> None:
        """Record the tool worker's writable roots before its sandbox starts."""
        if self._guard is not None or not profile.rw_binds:
            return
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        quarantine = self.config.agent_dir / "quarantine" / f"{stamp}-{os.getpid()}"
        self._guard = await trio.to_thread.run_sync(
            functools.partial(
                PersistenceGuard,
                profile.rw_binds,
                quarantine_dir=str(quarantine),
                watched=profile.missing_protected,
                git_dirs=profile.git_dirs,
            )
        )
        if not self._guard.complete:
            self.guard_warning = (
                "the persistence guard could not record every directory of "
                f"{', '.join(profile.rw_binds)} (more than {self._guard.max_directories:,} "
                "directories, or one it cannot list): a protected name a tool creates "
                "below those may go unnoticed; review new .git, .pi, .envrc, .vscode … "
                "before you use them"
            )
        try:
            watch = DirectoryWatch()
        except OSError:
            return  # no inotify: the end-of-call check alone (docs/sandbox.md)
        watch.add(self._guard.take_new_directories())
        self._dir_watch = watch
        if self._nursery is not None:
            self._nursery.start_soon(self._serve_persistence_watch, watch)

    async def _serve_persistence_watch(self, watch: DirectoryWatch) -> None:
        """Run the guard's check as soon as a watched directory gains an entry, at
        most every `WATCH_INTERVAL_S`, until `aclose` (issue 14 §1: the window
        between a sandboxed process creating a protected name and its quarantine
        is one check, not the rest of the tool call)."""
        with trio.CancelScope() as scope:
            self._watch_scope = scope
            try:
                while True:
                    await trio.lowlevel.wait_readable(watch.fd)
                    watch.drain()
                    for finding in await self.check_persistence():
                        if self.on_quarantine is not None:
                            await self.on_quarantine(finding)
                    # A build creating thousands of files must not keep a core
                    # busy re-checking: events meanwhile are coalesced.
                    await trio.sleep(WATCH_INTERVAL_S)
            finally:
                self._dir_watch = None
                trio.lowlevel.notify_closing(watch.fd)
                watch.close()

    @property
    def log_dir(self) -> Path:
        """Where each worker's stdout/stderr log is written."""
        return self._log_dir

    def _ctx(self) -> dict[str, Any]:
        return {
            "cwd": str(self.config.cwd),
            "has_ui": self.config.has_ui,
            "mode": self.config.mode,
            "trust": self.config.project_trust,
        }

    def index_of(self, worker: WorkerProcess) -> int | None:
        """The index in `extensions` of a current-generation worker, else None
        (an old generation's or a replaced worker: its messages are stale)."""
        for index, (_, current) in enumerate(self.extensions):
            if current is worker:
                return index
        return None

    def _spec(
        self,
        name: str,
        init_params: dict[str, Any],
        *,
        role: str,
        sandboxed: bool,
        extra_ro: Sequence[Path] = (),
        network: bool = True,
        settings: SandboxSettings | None = None,
        workspace: Path | None = None,
    ) -> WorkerSpec:
        self._counter += 1
        slug = "".join(c if c.isalnum() else "-" for c in name)[-60:]
        log_path = self._log_dir / f"{self._counter:02d}-{slug}.log"
        profile = None
        if sandboxed:
            profile = worker_profile(
                role,
                workspace=self.config.cwd if workspace is None else workspace,
                home=self.config.home,
                agent_dir=self.config.agent_dir,
                extra_ro=extra_ro,
                settings=self.config.settings if settings is None else settings,
                proxy_socket=self._proxy_socket if network else None,
                protect=(*self.config.policy_files, *self._audit_paths()),
                hide=self._audit_paths(),
            )
            self._check_reachable(
                [
                    *profile.ro_binds,
                    *profile.rw_binds,
                    *(p for p, kind in profile.protect_mounts if kind == "bind"),
                    *([profile.proxy_socket] if profile.proxy_socket else []),
                ]
            )
            self.audit(
                {
                    "event": "sandbox_profile",
                    "worker": name,
                    "role": role,
                    "writable": list(profile.rw_binds),
                    "protected": [p for p, _ in profile.protect_mounts],
                    # Missing protected paths: not mounted, quarantined if created.
                    "watched": list(profile.missing_protected),
                    "network": profile.network,
                    # Host sockets bound in (sandbox.sockets, issue 13 §5).
                    "sockets": [inside for _, inside in profile.sockets],
                    "seccomp": profile.seccomp,
                    "cgroups": list(self.cgroups.controllers) if self.cgroups else [],
                    "limits": dataclasses.asdict(profile.limits),
                }
            )
        env = unsandboxed_env(self.config.home)
        return WorkerSpec(
            name=name,
            init_params=init_params,
            log_path=log_path,
            env=env,
            sandbox=profile,
            bwrap=self._bwrap,
            cgroups=self.cgroups,
            userns=self._userns if sandboxed else None,
        )

    @contextlib.asynccontextmanager
    async def open_codemode_worker(self, name: str) -> AsyncIterator[WorkerProcess]:
        """A fresh ``codemode`` worker for one script (issue 19), stopped and reaped on
        exit whatever happens.

        Its sandbox is the ``sandboxed-extension`` role's with an empty directory as
        its working directory instead of the workspace: no workspace at all (a
        script reads files only through tools, under the policy), no network, no
        environment pass-through, the policy's rlimits and cgroup limits.

        Raises:
            SandboxUnavailableError: the session runs without ``--sandbox`` (a script
                never runs unsandboxed; fail closed).
            WorkerStartError / SandboxError: the worker could not start.
        """
        if not self.config.sandbox or self._bwrap is None or self._nursery is None:
            raise SandboxUnavailableError(
                "codemode runs scripts only in the sandbox; start pi with --sandbox"
            )
        empty = self._log_dir / "codemode-cwd"
        empty.mkdir(mode=0o755, exist_ok=True)
        spec = self._spec(
            name,
            {"kind": "codemode", "ctx": {}},
            role="sandboxed-extension",
            sandboxed=True,
            network=False,
            workspace=empty,
        )
        worker = WorkerProcess(spec, generation=1)
        self._spawned.append(worker)
        try:
            await worker.start(self._nursery, timeout_s=self.config.handshake_timeout_s)
            yield worker
        finally:
            worker.kill()
            await worker.aclose(grace_s=0.2)
            with contextlib.suppress(ValueError):
                self._spawned.remove(worker)

    def _check_reachable(self, paths: Sequence[str]) -> None:
        """Refuse (one line, exit 2) when the workspace owner's uid, which the
        sandboxes run as, cannot reach a path bwrap must bind (issue 14 §3).

        Raises:
            SandboxError: such a path (`pi_sandbox.sandbox.identity`).
        """
        if self._userns is None:
            return
        blocked = unreachable_sources(paths, self._userns.identity)
        if blocked:
            raise refuse_unreachable(
                os.path.realpath(self.config.cwd), self._userns.identity, blocked
            )

    def _audit_paths(self) -> tuple[Path, ...]:
        single = (self.config.audit_log,) if self.config.audit_log is not None else ()
        # The session store (--session-dir) is masked the same way: sessions hold
        # every prompt and tool output of earlier runs.
        sessions = (self.config.session_dir,) if self.config.session_dir is not None else ()
        return (*single, *self.config.audit_logs, *sessions)

    def capabilities(self, source: ExtensionSource) -> dict[str, bool]:
        """The policy's capabilities for one extension (`ExtensionRules.capabilities_for`)."""
        rules = self.config.extension_rules or ExtensionRules()
        granted = rules.capabilities_for(
            extension_name(source.path), source.path, source.origin, discovered=source.discovered
        )
        if source.origin == "project" and self.config.project_trust == "sandboxed":
            # sandboxed trust: the minimum, whatever the policy grants (issue 5).
            return dict.fromkeys(granted, False)
        return granted

    def repair_host_devices(self) -> list[str]:
        """Undo mode changes a root-run sandbox made to the host's bound device nodes
        (see `pi_sandbox.sandbox.device_guard`); returns the paths repaired."""
        repaired = self._devices.restore() if self._devices is not None else []
        for path in repaired:
            self.audit({"event": "device_repaired", "path": path})
        return repaired

    def audit(self, record: dict[str, Any]) -> None:
        """Pass one JSON-ready audit record to ``PoolConfig.audit`` (if any)."""
        if self.config.audit is not None:
            self.config.audit(record)

    async def _prepare_sandbox(self, nursery: trio.Nursery) -> None:
        """Everything sandboxed workers share: bwrap, the seccomp program, cgroups,
        the device guard, and the egress proxy.

        Raises:
            SandboxError: the workspace contains HOME, the temporary or runtime
                directory, or /run (`shared_directories`).
            SandboxUnavailableError: bwrap cannot run here, or the seccomp filter
                cannot be built (fail closed, issue 3).
        """
        workspace = os.path.realpath(self.config.cwd)
        # A workspace that contains HOME puts every dotfile, start-up file and token
        # store under the sandbox's writable root, where masks cannot cover what
        # they do not name and a renamed parent defeats protection. One that
        # contains the temporary or runtime directory exposes other runs' worker
        # logs and egress proxy sockets.
        for what, path in shared_directories(self.config.home):
            if os.path.commonpath([path, workspace]) == workspace:
                raise SandboxError(
                    f"refusing to sandbox the workspace {workspace}: it contains your {what} "
                    f"({path}); run pi in a project directory (-C DIR)"
                )
        from pi_sandbox.sandbox.seccomp_filter import seccomp_program

        self._bwrap = find_bwrap()
        remove_stale_cgroups()
        # The bwrap probe (a process), the seccomp program (built once, cached) and the
        # cgroup detection wait on different things: done at once (issue 20 §5). Each
        # failure is kept and the first in this order raised, as when run in turn.
        steps = (functools.partial(probe_bwrap, self._bwrap), seccomp_program, CgroupLimiter.detect)
        results: list[Any] = [None] * len(steps)
        failures: list[BaseException | None] = [None] * len(steps)

        async def run_step(index: int) -> None:
            try:
                results[index] = await trio.to_thread.run_sync(steps[index])
            except Exception as exc:
                failures[index] = exc

        async with trio.open_nursery() as steps_nursery:
            for index in range(len(steps)):
                steps_nursery.start_soon(run_step, index)
        self.cgroups = results[2]  # set before raising: `aclose` removes its tree
        for failure in failures:
            if failure is not None:
                raise failure
        identity = workspace_identity(workspace)
        if identity is not None:
            self._userns = await trio.to_thread.run_sync(
                lambda: UserNamespace.open(identity, workspace=workspace)
            )
        # Empty directories earlier versions left as mount points (issue 14 §1).
        await trio.to_thread.run_sync(remove_legacy_placeholders)
        self._devices = DeviceGuard()
        settings = self.config.settings
        if settings.network_enabled:
            from pi_sandbox.sandbox.network_rules import NetworkRules
            from pi_sandbox.supervisor.egress_proxy import EgressProxy

            socket_path = self._log_dir / "egress.sock"
            if self._userns is not None:
                # The sandbox's uid must reach the socket: a directory of its own,
                # named like the log directory so a killed run's is removed too.
                self._proxy_dir = tempfile.mkdtemp(prefix=f"pi-workers-{os.getpid()}-net-")
                owner = self._userns.identity
                os.chown(self._proxy_dir, owner.uid, owner.gid)
                socket_path = Path(self._proxy_dir) / "egress.sock"
            proxy = EgressProxy(
                NetworkRules(allow=settings.network_allow, deny=settings.network_deny),
                socket_path,
                audit=self.audit,
            )
            await nursery.start(proxy.serve)
            if self._userns is not None:
                os.chown(socket_path, self._userns.identity.uid, self._userns.identity.gid)
            self._proxy_socket = str(socket_path)

    def _needs_bwrap(self, sources: Sequence[ExtensionSource]) -> bool:
        return self.config.sandbox or (
            self.config.project_trust == "sandboxed" and any(s.origin == "project" for s in sources)
        )

    async def start_bootstrap(
        self,
        nursery: trio.Nursery,
        sources: Sequence[ExtensionSource],
        *,
        on_tool_update: Callable[..., Any] | None = None,
    ) -> None:
        """Phase one of a two-phase start (seed 000 §2.3, issue 6): start the
        user-level and ``-e`` extensions only, before the project's trust is decided,
        so that their ``project_trust`` handlers can answer. `start` then reuses them.

        Raises:
            SandboxUnavailableError: ``--sandbox`` and bwrap cannot run here.
        """
        self._nursery = nursery
        self._on_tool_update = on_tool_update
        # Once per process: N workers must not each compile their modules (issue 20 §5).
        await trio.to_thread.run_sync(ensure_worker_bytecode)
        if self._needs_bwrap(sources) and self._bwrap is None:
            await self._prepare_sandbox(nursery)
        self._check_reachable([str(source.path) for source in sources])
        # No registry yet (it needs the tool worker): dispatch needs only each
        # worker's subscriptions.
        await self._start_extensions(sources)

    async def start(
        self,
        nursery: trio.Nursery,
        sources: Sequence[ExtensionSource],
        *,
        on_tool_update: Callable[..., Any] | None = None,
    ) -> None:
        """Start the tool worker and every extension worker concurrently.

        Workers already started by `start_bootstrap` are reused when their worker
        would be started the same way now (same sandboxing, role and capabilities);
        otherwise — e.g. ``sandboxed`` trust made every worker sandboxed, or the
        project's policy narrowed a capability — they are stopped and started again
        (a departure from seed 000 §2.5, which never re-runs them: a worker keeps the
        confinement it was started with, so it must be restarted to get a stricter one).

        A failing extension is recorded in ``load_errors`` (path + original error) and
        the others keep working. The tool worker failing is fatal.

        Raises:
            SandboxUnavailableError: a sandbox is required and bwrap cannot run here.
            WorkerStartError: the tool worker could not start.
        """
        self._nursery = nursery
        self._on_tool_update = on_tool_update
        # Once per process: N workers must not each compile their modules (issue 20 §5).
        await trio.to_thread.run_sync(ensure_worker_bytecode)
        if self._needs_bwrap(sources) and self._bwrap is None:
            await self._prepare_sandbox(nursery)
        # Before any worker starts (its bwrap may create mount points in the
        # workspace): every extension must be reachable by a foreign owner's uid.
        self._check_reachable([str(source.path) for source in sources])
        tool_spec = self._spec(
            "tool worker",
            {"kind": "tools", "ctx": self._ctx()},
            role="tool",
            # A sandboxed-trust project extension steers tool calls (its tool_call hook
            # may rewrite the input), so the tools it steers must run sandboxed too.
            sandboxed=self._needs_bwrap(sources),
        )
        if tool_spec.sandbox is not None:
            await self._start_guard(tool_spec.sandbox)
        self.tool_worker = WorkerProcess(tool_spec, generation=self.generation)
        self._spawned.append(self.tool_worker)
        self.tool_worker.tool_updates = on_tool_update
        tool_worker_failure: list[WorkerError] = []

        async def start_tool_worker() -> None:
            try:
                await self._start_tool_worker(nursery)
            except WorkerError as exc:
                tool_worker_failure.append(exc)

        async with trio.open_nursery() as starters:
            starters.start_soon(start_tool_worker)
            starters.start_soon(self._start_extensions, sources)
        if tool_worker_failure:
            raise tool_worker_failure[0]
        self._build_registry()

    async def _start_extensions(self, sources: Sequence[ExtensionSource]) -> None:
        """Start one worker per source concurrently into `extensions` (load order kept);
        failures go to `load_errors`."""
        nursery = self._nursery
        assert nursery is not None
        on_tool_update = self._on_tool_update
        slots: list[tuple[ExtensionSource, WorkerProcess] | None] = [None] * len(sources)
        # Bootstrap workers (`start_bootstrap`), by canonical path, for reuse; those
        # that failed to load there are not run a second time (their error stands).
        running = {source.path: (source, worker) for source, worker in self.extensions}
        failed = {Path(error["path"]) for error in self.load_errors if error.get("path")}
        self.extensions = []

        # A sandboxed-trust project extension's tool_call hook may rewrite the input of
        # any tool, an extension's included: every extension worker then runs
        # sandboxed too, like the tool worker (non-project ones with role "extension").
        all_sandboxed = self._needs_bwrap(sources) or (
            self.tool_worker is not None and self.tool_worker.spec.sandbox is not None
        )

        async def start_extension(index: int, source: ExtensionSource) -> None:
            # sandboxed trust runs project code under the strictest profile even without --sandbox.
            untrusted = source.origin == "project" and self.config.project_trust == "sandboxed"
            sandboxed = all_sandboxed or untrusted
            capabilities = self.capabilities(source)
            if source.path in failed:
                return
            previous = running.pop(source.path, None)
            if previous is not None:
                old_source, old_worker = previous
                init_ctx = old_worker.spec.init_params.get("ctx", {})
                if (
                    old_source.origin == source.origin
                    and (old_worker.spec.sandbox is not None) == sandboxed
                    and init_ctx.get("capabilities") == capabilities
                    and old_worker.registrations is not None
                ):
                    slots[index] = previous
                    return
                await old_worker.aclose()
            spec = self._spec(
                f"extension {source.path}",
                {
                    "kind": "extension",
                    "path": str(source.path),
                    "ctx": {
                        **self._ctx(),
                        "capabilities": capabilities,
                        "trust": self.config.project_trust,
                    },
                },
                role="sandboxed-extension" if untrusted else "extension",
                sandboxed=sandboxed,
                # Only the extension itself (the file, or its package directory) is
                # bound: binding a file's parent would expose its neighbours.
                extra_ro=[source.path],
                # The policy's network allowlist reaches an extension only with the
                # ``network`` capability (issue 4; off by default).
                network=capabilities["network"],
                # A project's policy governs only the project's own extensions
                # (issue 13 §3): the user's guard keeps the user's limits.
                settings=None if source.origin == "project" else self.config.extension_settings,
            )
            worker = WorkerProcess(spec, generation=self.generation)
            self._spawned.append(worker)
            worker.tool_updates = on_tool_update
            self._connect(worker)
            try:
                await worker.start(nursery, timeout_s=self.config.handshake_timeout_s)
            except RemoteError as exc:
                text = str(exc).removeprefix(f"{worker.name}: ")
                self.failed_to_load[source.path] = (source, text)
                self.load_errors.append(
                    {
                        "path": str(source.path),
                        "message": f"Failed to load extension {source.path}: {text}",
                        "traceback": exc.remote_traceback,
                    }
                )
                return
            except WorkerError as exc:
                self.failed_to_load[source.path] = (source, str(exc))
                self.load_errors.append(
                    {
                        "path": str(source.path),
                        "message": f"Failed to load extension {source.path}: {exc}",
                    }
                )
                return
            slots[index] = (source, worker)

        async with trio.open_nursery() as starters:
            for index, source in enumerate(sources):
                starters.start_soon(start_extension, index, source)
        async with trio.open_nursery() as stoppers:
            for _, worker in running.values():  # bootstrap workers no longer wanted
                stoppers.start_soon(worker.aclose)
        self.extensions = [slot for slot in slots if slot is not None]
        for _, worker in self.extensions:
            if worker not in self._watched:
                self._watched.add(worker)
                nursery.start_soon(self._watch, worker, self.generation)

    def _connect(self, worker: WorkerProcess) -> None:
        worker.host_call = self._host_call
        worker.extension_notifications = self._extension_notification
        worker.error_logs = self._error_log
        worker.admit_log = self._admit_log

    def _admit_log(self, worker: WorkerProcess) -> bool:
        return self.host is None or self.host.admit_log(worker)

    async def _host_call(self, worker: WorkerProcess, request: Any) -> Any:
        if self.host is None:
            from pi_sandbox.errors import HostCallError

            raise HostCallError("no session is running", code=methods.ERROR_HOST)
        for gate in list(self._host_gates.get(worker, ())):
            # Sent its tool_call while observe-only extensions before it still ran:
            # its actions wait for them, as they would have in load order. A host
            # call cannot name its dispatch, so it waits for every one in flight.
            await gate.wait()
        return await self.host.host_call(worker, request)

    async def _error_log(self, worker: WorkerProcess, message: str) -> None:
        index = self.index_of(worker)
        if self.host is None:
            return
        if index is not None:
            await self.host.report(
                [{"path": str(self.extensions[index][0].path), "message": message}], "extension"
            )
        elif worker in self.retired or worker.generation < self.generation:
            # An ended generation's worker: typically a thread of it that kept using
            # its stale ctx and died of StaleContextError (issue 5 case 3). Its other
            # messages are dropped; this one is the error to show. Its generation
            # tells, not the `retired` list alone: the worker leaves that list once
            # stopped, and its last messages may be read after that (issue 13 §7).
            path = str(worker.spec.init_params.get("path") or worker.name)
            await self.host.report(
                [{"path": path, "message": f"(ended generation {worker.generation}) {message}"}],
                "extension",
            )

    async def _extension_notification(self, worker: WorkerProcess, message: Any) -> None:
        from pi_sandbox.protocol.messages import BusEmitParams, Registrations

        index = self.index_of(worker)
        if index is None:
            if self.host is not None:
                await self.host.stale_message(worker, message.method)
            return
        try:
            if message.method == methods.REGISTRATIONS_UPDATE:
                update = Registrations.model_validate(message.params)
            else:
                emitted = BusEmitParams.model_validate(message.params)
        except pydantic.ValidationError as exc:
            from pi_sandbox.errors import ProtocolError

            raise ProtocolError(f"{worker.name}: invalid {message.method}: {exc}") from exc
        if message.method == methods.REGISTRATIONS_UPDATE:
            assert worker.registrations is not None
            worker.registrations = worker.registrations.model_copy(update=dict(update))
            self._build_registry()
            if self.host is not None:
                await self.host.registry_changed()
        elif self.host is not None:
            await self.host.bus_emit(self.extensions[index][0], emitted.channel, emitted.data)

    async def _watch(self, worker: WorkerProcess, generation: int) -> None:
        """Report an extension worker of the current generation that stopped (crash,
        kill after a deadline or an abort) and restart it after a backoff
        (`ensure_extension_worker`, unless an event already did)."""
        await worker.exited.wait()
        if self._closing or self.generation != generation:
            return  # stopped on purpose: the session ends, or its generation did
        path = str(worker.spec.init_params.get("path") or worker.name)
        if Path(path) in self.disabled:
            return  # disabled and stopped on purpose (its limits, issue 13 §4): said already
        how = f"exit status {worker.returncode}" if worker.returncode is not None else "it stopped"
        if worker.returncode is not None and worker.returncode < 0:
            import signal as _signal

            try:
                how = f"signal {_signal.Signals(-worker.returncode).name}"
            except ValueError:
                how = f"signal {-worker.returncode}"
        if self.host is not None:
            await self.host.report(
                [
                    {
                        "path": path,
                        "message": f"extension {path} worker stopped ({how})"
                        + (f": {worker.failure}" if worker.failure else ""),
                    }
                ],
                "crash",
            )
        used = self._restarts.get(Path(path), 0)
        await trio.sleep(RESTART_BACKOFF_S[min(used, len(RESTART_BACKOFF_S) - 1)])
        index = self.index_of(worker)
        if self._closing or index is None:
            return  # replaced meanwhile (an event found it dead), or the session ended
        await self.ensure_extension_worker(index)

    async def _start_tool_worker(self, nursery: trio.Nursery) -> None:
        assert self.tool_worker is not None
        self._nursery = nursery
        await self.tool_worker.start(nursery, timeout_s=self.config.handshake_timeout_s)

    async def ensure_tool_worker(self) -> WorkerProcess:
        """The tool worker, respawned (next generation) if it died.

        A ``bash`` call may kill its own worker (``kill -9 $PPID``); built-in tools
        must keep working for the rest of the session, so the tool worker has no
        restart budget.

        Raises:
            WorkerStartError: the replacement could not start.
        """
        assert self.tool_worker is not None
        async with self._respawn_lock:
            if not self.tool_worker.alive:
                self.tool_worker = await self._respawn(self.tool_worker)
            return self.tool_worker

    async def ensure_extension_worker(self, index: int) -> WorkerProcess | None:
        """Extension ``index``'s worker, respawned if it died; ``None`` once disabled.

        A crashed or hung extension is restarted (its factory runs again, in a new
        generation) at most ``MAX_EXTENSION_RESTARTS`` times per session; after that,
        or when the restart fails to load, it is disabled and ``None`` is returned.
        Whoever restarts it (the watcher, or an event that found it dead), the
        replacement gets ``session_start`` (reason ``restart``) before it is returned,
        and the restart or the disabling is reported once.
        """
        worker = self.extensions[index][1]
        if worker.alive and not self._respawn_lock.locked():
            return worker  # the common case, without a lock round on every hook call
        report: str | None = None
        replacement: WorkerProcess | None = None
        async with self._respawn_lock:
            if index >= len(self.extensions):
                return None
            source, worker = self.extensions[index]
            if worker.alive:
                return worker
            if source.path in self.disabled:
                return None
            used = self._restarts.get(source.path, 0)
            if used >= MAX_EXTENSION_RESTARTS:
                self.disabled[source.path] = f"it stopped {used + 1} times"
                report = f"extension {source.path} is disabled for this session: it stopped {used + 1} times"
            else:
                self._restarts[source.path] = used + 1
                try:
                    replacement = await self._respawn(worker)
                except (RemoteError, WorkerError) as exc:
                    self.disabled[source.path] = f"its restart failed: {exc}"
                    report = f"extension {source.path} is disabled for this session: {exc}"
                else:
                    self.extensions[index] = (source, replacement)
                    self._build_registry()
                    if self._nursery is not None:
                        self._nursery.start_soon(self._watch, replacement, self.generation)
                    report = (
                        f"extension {source.path} restarted ({used + 1} of "
                        f"{MAX_EXTENSION_RESTARTS} restarts this session)"
                    )
        if self.host is not None and report is not None:
            await self.host.report([{"path": str(source.path), "message": report}], "restart")
            if replacement is not None:
                await self.host.worker_restarted(index, replacement)
        return replacement

    async def _respawn(self, old: WorkerProcess) -> WorkerProcess:
        assert self._nursery is not None
        await old.aclose()
        replacement = WorkerProcess(old.spec, generation=old.generation + 1)
        self._spawned.append(replacement)
        replacement.tool_updates = old.tool_updates
        if old is not self.tool_worker:
            self._connect(replacement)
        await replacement.start(self._nursery, timeout_s=self.config.handshake_timeout_s)
        for name, tool in list(self.tools.items()):
            if tool.worker is old:
                self.tools[name] = RegisteredTool(tool.definition, replacement, tool.source)
        return replacement

    def _conflict(self, key: tuple[str, str], path: str, message: str) -> None:
        if key not in self._reported_conflicts:
            self._reported_conflicts.add(key)
            self.load_errors.append({"path": path, "message": message})
            if self.host is not None:
                self.host.pending_reports.append({"path": path, "message": message})

    def _build_registry(self) -> None:
        """(Re)build the tool and command registries from every worker's current
        registrations: at start, after a late registration, a restart or a reload.

        Tools: built-ins first; extension tools claimed in trust order (``-e``, user,
        project), then load order; a duplicate name keeps the first registration
        (diagnostic once). Commands: load order; a name two extensions registered is
        kept as ``name:1``, ``name:2`` and a bare ``name`` is ambiguous.
        """
        assert self.tool_worker is not None and self.tool_worker.registrations is not None
        tools: dict[str, RegisteredTool] = {}
        for definition in self.tool_worker.registrations.tools:
            tools[definition.name] = RegisteredTool(definition, self.tool_worker, "builtin")
        # Tool names are claimed in trust order, not load order: a project extension
        # (trusted or only sandboxed) must never take over a tool the user installed.
        rank = {"cli": 0, "user": 1, "project": 2}
        for source, worker in sorted(self.extensions, key=lambda item: rank[item[0].origin]):
            if worker.registrations is None:
                continue
            may_override = self.capabilities(source)["override_builtin_tools"]
            for definition in worker.registrations.tools:
                existing = tools.get(definition.name)
                if existing is not None and existing.source == "builtin" and may_override:
                    # The policy's ``override_builtin_tools`` capability (issue 4).
                    tools[definition.name] = RegisteredTool(definition, worker, str(source.path))
                    if (
                        "override",
                        f"{source.path}:{definition.name}",
                    ) not in self._reported_conflicts:
                        self._reported_conflicts.add(
                            ("override", f"{source.path}:{definition.name}")
                        )
                        self.audit(
                            {
                                "event": "extension",
                                "action": "override_builtin_tool",
                                "extension": str(source.path),
                                "tool": definition.name,
                            }
                        )
                    continue
                if existing is not None:
                    why = (
                        " (overriding a built-in tool needs the override_builtin_tools "
                        "capability in the policy's extensions section)"
                        if existing.source == "builtin"
                        else ""
                    )
                    self._conflict(
                        ("tool", f"{source.path}:{definition.name}"),
                        str(source.path),
                        f"Extension {source.path}: tool {definition.name!r} is already "
                        f"registered by {existing.source}; the first registration wins{why}.",
                    )
                    continue
                tools[definition.name] = RegisteredTool(definition, worker, str(source.path))
        for name, external in self.external_tools.items():
            tools.setdefault(name, external)
        self.tools = tools
        by_name: dict[str, list[tuple[int, Any]]] = {}
        for index, (_source, worker) in enumerate(self.extensions):
            if worker.registrations is None:
                continue
            for command in worker.registrations.commands:
                _, colon, tail = command.name.rpartition(":")
                if colon and tail.isdigit():
                    # Reserved for duplicates (name:1, name:2): a literal "deploy:2"
                    # would take over the user's second "deploy" (the worker refuses
                    # it too; this is for a worker that does not).
                    self._conflict(
                        ("command-reserved", f"{index}:{command.name}"),
                        str(self.extensions[index][0].path),
                        f"Command /{command.name} refused: names ending in ':<number>' "
                        "are reserved for commands registered twice",
                    )
                    continue
                by_name.setdefault(command.name, []).append((index, command))
        commands: dict[str, RegisteredCommand] = {}
        ambiguous: dict[str, list[str]] = {}
        for name, entries in by_name.items():
            if len(entries) == 1:
                index, command = entries[0]
                commands[name] = RegisteredCommand(
                    name, name, command.description, index, str(self.extensions[index][0].path)
                )
                continue
            ambiguous[name] = []
            for n, (index, command) in enumerate(entries, start=1):
                alias = f"{name}:{n}"
                ambiguous[name].append(alias)
                commands[alias] = RegisteredCommand(
                    alias, name, command.description, index, str(self.extensions[index][0].path)
                )
            self._conflict(
                ("command", name),
                str(self.extensions[entries[-1][0]][0].path),
                f"Command /{name} is registered by {len(entries)} extensions; use "
                + ", ".join(f"/{a}" for a in ambiguous[name])
                + " ("
                + ", ".join(str(self.extensions[i][0].path) for i, _ in entries)
                + ")",
            )
        self.commands = commands
        self.ambiguous_commands = ambiguous
        providers: dict[str, tuple[str, dict[str, Any]]] = {}
        for source, worker in self.extensions:
            if worker.registrations is None:
                continue
            for provider in worker.registrations.providers:
                if not self.capabilities(source)["register_providers"]:
                    key = ("provider-refused", f"{source.path}:{provider.name}")
                    if key not in self._reported_conflicts:
                        self.audit(
                            {
                                "event": "extension",
                                "action": "capability_refused",
                                "extension": str(source.path),
                                "capability": "register_providers",
                                "op": "register_provider",
                            }
                        )
                    self._conflict(
                        key,
                        str(source.path),
                        f"Extension {source.path}: register_provider({provider.name!r}) refused: "
                        "the policy does not grant the 'register_providers' capability",
                    )
                    continue
                providers.setdefault(provider.name, (str(source.path), dict(provider.config)))
        self.providers = providers
        mcp_servers: dict[str, tuple[str, dict[str, Any]]] = {}
        for source, worker in self.extensions:
            if worker.registrations is None:
                continue
            for server in worker.registrations.mcp_servers:
                if not self.capabilities(source)["exec"]:
                    # Starting a program is what `exec` withholds (issue 19).
                    self._conflict(
                        ("mcp-refused", f"{source.path}:{server.name}"),
                        str(source.path),
                        f"Extension {source.path}: register_mcp_server({server.name!r}) "
                        "refused: the policy does not grant the 'exec' capability",
                    )
                    continue
                mcp_servers.setdefault(server.name, (str(source.path), dict(server.config)))
        self.mcp_servers = mcp_servers

    def subscribed(self, event: str) -> bool:
        """Whether any current worker has a handler for ``event`` (cheap pre-check)."""
        return self._any_registration_lists(event, "events")

    def _has_observers(self, event: str) -> bool:
        """Whether any current worker observes ``event`` only (``Registrations.observers``)."""
        return self._any_registration_lists(event, "observers")

    def _any_registration_lists(self, event: str, field: str) -> bool:
        return any(
            worker.registrations is not None and event in getattr(worker.registrations, field)
            for _, worker in self.extensions
        )

    async def dispatch(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        only: int | None = None,
        timeout_s: float | None = None,
    ) -> DispatchOutcome:
        """Send ``event`` to each subscribed worker in load order and combine the results.

        ``tool_call`` goes at once to a run of extensions whose handlers all promised
        to only look (``Registrations.observers``) and to the one extension after
        them; their results are applied here in load order exactly as if they had run
        one after another (issue 20 target 2; docs/architecture.md, "Concurrent
        tool_call dispatch"). An observer whose result changed the call counts as a
        failed handler (fail-closed). See `_dispatch` for the rest.
        """
        if (
            event == "tool_call"
            and only is None
            and self._nursery is not None
            and self._has_observers(event)
        ):
            # The requests sent ahead run in the pool's nursery, each in a cancel scope
            # of its own, not in a nursery of the dispatch: that would wrap a caller's
            # Cancelled in an exception group. Every answer is awaited in order; the
            # scopes only end requests still running when the dispatch ends early.
            flights: list[_Sent] = []
            try:
                return await self._dispatch(event, payload, None, timeout_s, flights)
            finally:
                for sent in flights:
                    sent.scope.cancel()
                    if sent.gate is not None:
                        self._release_gate(sent.worker, sent.gate)
        return await self._dispatch(event, payload, only, timeout_s, None)

    def _release_gate(self, worker: WorkerProcess, gate: trio.Event) -> None:
        """Open and forget one dispatch's gate on ``worker``'s host calls; another
        tool_call dispatched at the same time (parallel calls, codemode) keeps its
        own (red team of issue 20)."""
        gate.set()
        gates = self._host_gates.get(worker, [])
        if gate in gates:
            gates.remove(gate)
        if not gates:
            self._host_gates.pop(worker, None)

    async def _send_group(
        self,
        event: str,
        first: tuple[int, WorkerProcess],
        queue: list[int],
        params: dict[str, Any],
        timeout_s: float | None,
        flights: list[_Sent],
    ) -> dict[int, _Sent]:
        """Send ``params`` at once to ``first`` and, while the last one sent to is an
        observer of ``event``, to the next subscribed extensions of ``queue`` (issue
        20 target 2). Each gets the state the load order would give it: observers
        cannot change it (checked on their results) and a failure does not change a
        ``tool_call`` state. Returns the requests in flight, by extension index.

        The group ends before a disabled or unsubscribed extension (the load-order
        loop handles it as before), so no handler is sent a call that load order
        would not have sent it. A non-observer that ends the group has its host calls
        held (``_host_gates``) until the observers before it returned.
        """
        members = [first]
        for index in queue:
            if event not in members[-1][1].registrations.observers:  # type: ignore[union-attr]
                break
            worker = await self.ensure_extension_worker(index)
            if worker is None or worker.registrations is None:
                break
            if event not in worker.registrations.events:
                break
            members.append((index, worker))
        sent: dict[int, _Sent] = {}
        for index, worker in members:
            observer = event in worker.registrations.observers  # type: ignore[union-attr]
            gate = None
            if not observer and len(members) > 1:  # the last one, after observers
                gate = trio.Event()
                self._host_gates.setdefault(worker, []).append(gate)
            item = _Sent(worker, params["state"], observer=observer, gate=gate)
            sent[index] = item
            flights.append(item)
            deadline = self._deadline(self.extensions[index][0], timeout_s)
            assert self._nursery is not None  # `dispatch` checked it
            self._nursery.start_soon(self._request_into, item, params, deadline)
        return sent

    async def _request_into(self, sent: _Sent, params: dict[str, Any], deadline: float) -> None:
        if sent.scope.cancel_called:  # the dispatch ended before this task started
            sent.done.set()
            return
        try:
            with sent.scope:
                sent.raw = await sent.worker.request(
                    methods.EVENT_DISPATCH, params, timeout_s=deadline
                )
        except trio.Cancelled:
            self._settle(sent.worker)
            raise
        except Exception as exc:  # raised again where the answer is applied, in order
            sent.error = exc
        finally:
            sent.done.set()
        if sent.scope.cancelled_caught:
            self._settle(sent.worker)  # the dispatch ended (cancelled) before this answer

    async def _dispatch(
        self,
        event: str,
        payload: dict[str, Any],
        only: int | None,
        timeout_s: float | None,
        flights: list[_Sent] | None,
    ) -> DispatchOutcome:
        """Send ``event`` to each subscribed worker in load order and combine the results.

        A worker that times out, crashes or answers with garbage counts as a failed
        handler. For a fail-closed event (``hook_kinds.ON_FAILURE``, issue 13 §1) the
        first failure is ``outcome.failure``: ``tool_call`` is blocked (later
        extensions' handlers still run and see the call, the first failure stays the
        reason); every other fail-closed event stops at the failing extension (its
        value goes to no later handler) and the caller blocks, withholds, stops or
        cancels. Notifications and ``resources_discover`` keep the previous state and
        go on (DESIGN §4). For a `hook_kinds.RECHECKED` event, when a project
        extension changed the value after more trusted (``cli``, ``user``) ones ran,
        those run a second time on the changed value (REDTEAM F5): their decision
        on the final value is what holds; failures in that pass count the same.
        A handler past its deadline, or one whose caller was cancelled (abort), gets
        ``$/cancel``; if it has not returned within `CANCEL_GRACE_S` its worker is
        killed (and restarted by the watcher).
        Never raises for worker failures; trio cancellation propagates.

        Args:
            only: dispatch to this extension index alone (a restarted worker's
                ``session_start``).
            timeout_s: per-handler deadline; default ``config.hook_timeout_s``.
        """
        state = hook_kinds.initial_state(event, payload)
        outcome = DispatchOutcome(state)
        # tool_call fails closed on the first failing handler (error, deadline, crash,
        # malformed result), but the handlers after it still run and see the call
        # (issue 5 case 4): the block, with the first failure's reason, is applied
        # once every handler ran; none of them can lift it.
        first_failure: str | None = None
        fails_closed = hook_kinds.fails_closed(event)
        indices = [
            i
            for i, (_, worker) in enumerate(self.extensions)
            if worker.registrations is not None
            and event in worker.registrations.events
            and (only is None or i == only)
        ]
        # REDTEAM F5: a less trusted (project) extension that changes a value the
        # more trusted extensions before it already guarded or redacted would have the
        # last word; those are run once more on the final value (`hook_kinds.RECHECKED`).
        rechecks = event in hook_kinds.RECHECKED and only is None
        trusted_ran: list[int] = []  # more trusted extensions that ran, in load order
        recheck: list[int] = []  # those that ran before the last less trusted change
        rechecking = False
        queue = list(indices)
        in_flight: dict[int, _Sent] = {}  # sent ahead by `_send_group` (flights given)
        while True:
            if not queue:
                if rechecking or not recheck:
                    break
                rechecking, queue = True, recheck
            index = queue.pop(0)
            if index >= len(self.extensions):
                break
            source = self.extensions[index][0]
            deadline = self._deadline(source, timeout_s)
            sent = None if rechecking else in_flight.pop(index, None)
            worker = sent.worker if sent else await self.ensure_extension_worker(index)
            if worker is None:
                message = f"extension {source.path} is disabled ({self.disabled[source.path]})"
                state, stop = hook_kinds.apply_error(event, state, message)
                outcome.errors.append({"path": str(source.path), "message": message})
                if fails_closed:
                    # A fail-closed hook that can never run again would fail every
                    # later event too: the caller ends the run.
                    outcome.fatal = outcome.failure = first_failure or message
                    break
                continue
            if worker.registrations is None or event not in worker.registrations.events:
                continue  # a restarted worker that no longer subscribes
            params = {"event": event, "payload": payload, "state": state, "ctx": self._ctx()}
            if (
                sent is None
                and flights is not None
                and not rechecking
                and event in worker.registrations.observers
            ):
                in_flight = await self._send_group(
                    event, (index, worker), queue, params, timeout_s, flights
                )
                sent = in_flight.pop(index)
            try:
                if sent is None:
                    raw = await worker.request(methods.EVENT_DISPATCH, params, timeout_s=deadline)
                else:
                    raw = await sent.result(state)
                result = DispatchResult.model_validate(raw)
                # A worker may not undo what earlier workers decided (a role change,
                # dropped messages or paths): the transition is checked, not just the shape.
                hook_kinds.check_transition(event, state, result.state)
                # ...and what becomes a message is checked against pi's schemas and
                # the extension's limits (issue 13 §4): a bad one counts as a failure.
                check_handler_result(self, source, event, result.state)
                if sent is not None and sent.observer and result.state != state:
                    # It was sent ahead of the extensions after it on its promise.
                    raise hook_kinds.HandlerResultError(
                        f"declared its {event} handlers observe_only but changed the call"
                    )
            except trio.Cancelled:
                if sent is None:
                    self._settle(worker)  # a request sent ahead settles in its own task
                raise
            except (PiSandboxError, pydantic.ValidationError, hook_kinds.HandlerResultError) as exc:
                if isinstance(exc, WorkerTimeoutError):
                    # The handler cannot be pre-empted: it was cancelled; if it does
                    # not return within the grace period its worker is killed.
                    self._settle(worker)
                    message = f"{event} handler in {source.path} timed out after {deadline:g} s"
                elif isinstance(exc, pydantic.ValidationError):
                    message = (
                        f"{event} handler in {source.path} returned a malformed result "
                        f"({exc.error_count()} problem(s))"
                    )
                else:
                    message = f"{event} handler in {source.path} failed: {exc}"
                outcome.errors.append({"path": str(source.path), "message": message})
                if fails_closed:
                    first_failure = first_failure or message
                    if event == "tool_call":
                        continue
                state, stop = hook_kinds.apply_error(event, state, message)
                if stop:
                    break
                continue
            outcome.errors += [
                {"path": str(source.path), "message": e.message, "traceback": e.traceback}
                for e in result.errors
            ]
            if fails_closed and result.errors:
                first_failure = first_failure or result.errors[0].message
                if event != "tool_call":
                    # The worker stopped at its failing handler; what it returns is
                    # not a value to pass on (and not trusted to say so): fold the
                    # failure into the state this worker was given.
                    state, _ = hook_kinds.apply_error(event, state, first_failure)
                    break
                # tool_call: the worker ran its other handlers and left the block to us.
            if rechecks and not rechecking:
                if source.origin not in hook_kinds.LESS_TRUSTED_ORIGINS:
                    trusted_ran.append(index)
                elif result.state != state and trusted_ran:
                    recheck = list(trusted_ran)
            state = result.state
            # The worker's own `stopped` flag is advisory: the chain ends only on a
            # decisive state (a real block, a cancel), judged here.
            if hook_kinds.is_decisive(event, state):
                break
        if first_failure is not None and not outcome.fatal:
            if event == "tool_call":
                state, _ = hook_kinds.apply_error(event, state, first_failure)
            outcome.failure = first_failure
        outcome.state = state
        return outcome

    def required_failure(self) -> str | None:
        """Why a required extension (policy ``extensions.required``, issue 13 §2) is not
        active, or None when every required pattern matches a running extension.

        A pattern is unmet when no extension of the current generation matching it
        is loaded and not disabled: it failed to load, was refused by the policy,
        was disabled after crashing past its restart budget, or was never found.
        A worker between a crash and its restart still counts as active.
        """
        rules = self.config.extension_rules
        if rules is None or not rules.required:
            return None
        for pattern, policy_file in rules.required:

            def meets(source: ExtensionSource, pattern: str = pattern) -> bool:
                return rules.requirement_met(
                    pattern,
                    extension_name(source.path),
                    source.path,
                    source.origin,
                    discovered=source.discovered,
                )

            matching = [source for source, _ in self.extensions if meets(source)]
            if any(source.path not in self.disabled for source in matching):
                continue
            failed = [(s, error) for s, error in self.failed_to_load.values() if meets(s)]
            refused = [(s, why) for s, why in self.refused if meets(s)]
            if matching:
                why = f"{matching[0].path} is disabled: {self.disabled[matching[0].path]}"
            elif failed:
                why = f"{failed[0][0].path} failed to load: {failed[0][1]}"
            elif refused:
                why = f"{refused[0][0].path} was refused: {refused[0][1]}"
            else:
                why = "no extension matching it was found (is it installed, or given with -e?)"
            return f"required extension {pattern!r} (policy {policy_file}) is not active: {why}"
        return None

    def _deadline(self, source: ExtensionSource, timeout_s: float | None) -> float:
        """One handler call's deadline (seconds) for ``source``: the policy's for its
        origin (issue 13 §3: a project's ``handler_timeout_s`` binds only project
        extensions), never longer than the pool's ``hook_timeout_s`` (a run sets it
        to the managed and user tiers' value, which the project's can only be below)
        nor than a caller's ``timeout_s``."""
        rules = self.config.extension_rules
        deadline = self.config.hook_timeout_s
        if rules is not None:
            deadline = min(deadline, rules.handler_timeout_for(source.origin))
        return deadline if timeout_s is None else min(deadline, timeout_s)

    def _settle(self, worker: WorkerProcess) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(worker.settle_cancels, CANCEL_GRACE_S)
        else:
            worker.kill()

    async def end_generation(self) -> list[WorkerProcess]:
        """End the current generation: every extension worker is told
        (``generation/end``: its ``pi``/``ctx`` raise `StaleContextError` from now on)
        and dropped from the pool; returns them for the caller to stop (after the
        command that asked for the change has returned). The tool worker stays.

        The workers join `retired` here, in the same step that drops them from the pool
        and before the first await: an old thread's StaleContextError (``log`` error)
        can arrive while the workers are notified, and a worker in neither list has its
        messages dropped unseen (issue 13 §7: case 3's report went missing under load).
        """
        old = [worker for _, worker in self.extensions]
        self.retired += old
        self.extensions = []
        self.generation += 1
        for worker in old:
            with trio.move_on_after(1):
                await worker.notify(methods.GENERATION_END, {"generation": worker.generation})
        self._restarts.clear()
        self.disabled.clear()
        self._reported_conflicts = {k for k in self._reported_conflicts if k[0] == "override"}
        self._build_registry()
        return old

    async def start_generation(self, sources: Sequence[ExtensionSource]) -> None:
        """Start a new generation's extension workers (after `end_generation`)."""
        self.load_errors = []
        self.failed_to_load = {}
        await self._start_extensions(sources)
        self._build_registry()

    def kill_all(self) -> None:
        """Kill every worker now, without the shutdown request (a second stop signal,
        issue 14 §3). A sandboxed worker's bwrap takes its PID namespace down with
        it; an unsandboxed worker gets SIGTERM, on which it kills its commands' process
        groups (they are not in its own) before exiting, and `aclose`'s escalation
        follows with SIGKILL. Reaping stays with `aclose`."""
        import signal

        self._closing = True
        for worker in self._spawned:
            if worker.pid is None or worker.exited.is_set():
                continue
            if worker.spec.sandbox is not None:
                worker.kill()
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(worker.pid, signal.SIGTERM)

    async def aclose(self, *, keep_logs: bool = False) -> None:
        """Stop every worker (escalating shutdown, always reaped).

        The per-worker logs are removed unless ``keep_logs`` (the caller shows their
        path when something failed).
        """
        self._closing = True
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for worker in self.retired:
                    nursery.start_soon(worker.aclose)
                for _, worker in self.extensions:
                    nursery.start_soon(worker.aclose)
                if self.tool_worker is not None:
                    nursery.start_soon(self.tool_worker.aclose)
                filed = {id(w) for w in (*self.retired, self.tool_worker)}
                filed |= {id(w) for _, w in self.extensions}
                for worker in self._spawned:
                    # Started but never filed (an interrupted start): reaped too.
                    if id(worker) not in filed and not worker.exited.is_set():
                        nursery.start_soon(worker.aclose)
        self.repaired_devices += self.repair_host_devices()
        if self._watch_scope is not None:
            self._watch_scope.cancel()
        if self.cgroups is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.cgroups.close)
            self.cgroups = None
        if self._userns is not None:
            self._userns.close()
        if self._proxy_dir is not None:
            shutil.rmtree(self._proxy_dir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self._log_dir, ignore_errors=True)
        else:
            self._write_kept_summary()

    def _write_kept_summary(self) -> None:
        """Write `KEPT_LOGS_FILE`: a kept directory is never empty (a load failure's
        traceback travels on the channel, not in the worker's log) and later runs
        leave it alone (`_remove_stale_log_dirs`)."""
        import time

        lines = [
            f"pi (pid {os.getpid()}) kept these worker logs on "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %z')}; workspace {self.config.cwd}",
            f"Later runs remove this directory {KEPT_LOGS_MAX_AGE_S // 86400} days after "
            "this file was written.",
            "",
        ]
        for error in self.load_errors:
            lines.append(error.get("message", ""))
            if error.get("traceback"):
                lines.append(error["traceback"].rstrip())
            lines.append("")
        for path, why in self.disabled.items():
            lines += [f"extension {path} was disabled: {why}", ""]
        for worker in self._spawned:
            code = worker.returncode
            lines.append(
                f"{worker.spec.log_path.name}: {worker.name} (generation {worker.generation}), "
                + ("not started" if worker.pid is None else f"exit {code}")
                + (f", {worker.failure}" if worker.failure else "")
            )
        with contextlib.suppress(OSError):
            (self._log_dir / KEPT_LOGS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")


_stale_log_cleanup = threading.Lock()
_stale_log_cleanup_started = False


def _remove_stale_log_dirs_in_background() -> None:
    """`_remove_stale_log_dirs` in a daemon thread, once per process: it scans the
    whole temporary directory (40–90 ms on a crowded ``/tmp``), which no start-up
    needs to wait for (issue 20). Only directories of processes that no longer exist
    are removed, never this run's; one cut short by our exit is finished by the next."""
    global _stale_log_cleanup_started
    with _stale_log_cleanup:
        if _stale_log_cleanup_started:
            return
        _stale_log_cleanup_started = True
    threading.Thread(target=_remove_stale_log_dirs, name="pi-log-cleanup", daemon=True).start()


def _remove_stale_log_dirs() -> None:
    """Remove the worker-log and MCP-log directories (``pi-workers-<pid>-…``,
    ``pi-mcp-<pid>-…``) of ``pi`` processes that no longer exist.

    A run killed by a signal cannot clean up after itself; the next run does. A
    directory the run kept (it said "worker logs kept in DIR" and wrote
    `KEPT_LOGS_FILE`) stays for `KEPT_LOGS_MAX_AGE_S` (issue 14 §3).
    """
    import itertools
    import time

    temporary = Path(tempfile.gettempdir())
    for entry in itertools.chain(temporary.glob("pi-workers-*-*"), temporary.glob("pi-mcp-*-*")):
        pid = entry.name.split("-")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's pi: alive, and not ours
        try:
            kept_at = (entry / KEPT_LOGS_FILE).stat().st_mtime
        except OSError:
            kept_at = None
        if kept_at is not None and time.time() - kept_at < KEPT_LOGS_MAX_AGE_S:
            continue
        shutil.rmtree(entry, ignore_errors=True)


def unsandboxed_env(home: Path) -> dict[str, str]:
    """The environment of a worker without bwrap: an allowlist, never the supervisor's own.

    Provider keys, tokens and ``SSH_AUTH_SOCK`` never reach a worker (DESIGN §1).
    """
    keep = (
        "PATH",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TERM",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "SHELL",
    )
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["HOME"] = str(home)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
