"""All workers of one session: the tool worker and one worker per extension.

The pool discovers extensions (DESIGN §8: project extensions only with a trust
decision), builds each worker's sandbox profile from its role, starts every worker
concurrently, collects registrations into one tool registry, and routes events to
the workers that subscribed to them, combining results with ``protocol.hook_kinds``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic
import trio

from pi_sandbox.errors import (
    PiSandboxError,
    RemoteError,
    SandboxError,
    WorkerError,
    WorkerTimeoutError,
)
from pi_sandbox.policies._effective import ExtensionRules
from pi_sandbox.protocol import hook_kinds, methods
from pi_sandbox.protocol.messages import DispatchResult, ToolDefinitionWire
from pi_sandbox.sandbox import find_bwrap, probe_bwrap, worker_profile
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter, remove_stale_cgroups
from pi_sandbox.sandbox.device_guard import DeviceGuard
from pi_sandbox.sandbox.placeholders import PlaceholderLease
from pi_sandbox.sandbox.profile import shared_directories
from pi_sandbox.sandbox.settings import SandboxSettings
from pi_sandbox.supervisor.worker_process import WorkerProcess, WorkerSpec

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

Origin = Literal["cli", "user", "project"]

MAX_EXTENSION_RESTARTS = 2


@dataclass(frozen=True)
class ExtensionSource:
    """An extension found on disk: its canonical path and where it came from.

    Attributes:
        path: the canonical path (symlinks resolved); what is loaded.
        origin: ``"cli"``, ``"user"`` or ``"project"``.
        discovered: the path it was found at, before symlinks were resolved (a
            ``.pi/extensions/helper.py`` linking elsewhere); None when unknown.
            Policy patterns are matched against both paths.
    """

    path: Path
    origin: Origin
    discovered: Path | None = None


@dataclass(frozen=True)
class RegisteredTool:
    """A tool the model may call, and the worker that executes it."""

    definition: ToolDefinitionWire
    worker: WorkerProcess
    source: str  # "builtin" or the extension's path


@dataclass
class DispatchOutcome:
    """The combined result of one event across workers.

    Attributes:
        state: the final ``hook_kinds`` state.
        errors: one message per failed handler or worker (for ``extension_error``).
        fatal: set when a fail-closed event (``tool_call``) met a disabled extension:
            every later call would be blocked, so the session should end.
    """

    state: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)
    fatal: str | None = None


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
        handshake_timeout_s / hook_timeout_s: deadlines for ``initialize`` and each event.
        settings: the policy's ``sandbox`` section (filesystem, network, limits).
        audit: called with one JSON-ready record per sandbox decision (the profile
            each worker got, every egress proxy decision); None to drop them.
        policy_files: the policy files in force; kept read-only in every sandbox.
        audit_log: the audit log file; kept read-only and masked in every sandbox.
        audit_logs: further audit log files (the policy's ``audit.file``), treated
            like ``audit_log``.
        extension_rules: the policy's ``extensions`` section (capabilities); None:
            the defaults of `ExtensionRules`.
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


def _extension_entries(directory: Path, notices: list[str] | None = None) -> list[Path]:
    """One level deep (seed 004): ``*.py`` files, package directories with
    ``__init__.py``, and directories whose ``pyproject.toml`` declares
    ``[tool.pi] extensions = ["entry.py", "pkg", …]`` (entries relative to that
    directory, which must stay inside it: a file or a package directory each).

    A ``pyproject.toml`` that cannot be read, or an entry that is missing, leaves
    the directory or that entry out with a line in ``notices`` naming the file.
    """
    if not directory.is_dir():
        return []
    found = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if (entry.is_file() and entry.suffix == ".py") or (
            entry.is_dir() and (entry / "__init__.py").is_file()
        ):
            found.append(entry)
        elif entry.is_dir() and (entry / "pyproject.toml").is_file():
            found += _declared_entries(entry, notices if notices is not None else [])
    return found


def _listing(directory: Path) -> list[Path]:
    """The visible ``*.py`` files and directories of ``directory`` (none when it is
    missing), by metadata alone: what may be extensions, without reading any."""
    try:
        return sorted(
            e
            for e in directory.iterdir()
            if not e.name.startswith((".", "_")) and (e.suffix == ".py" or e.is_dir())
        )
    except OSError:
        return []


def _declared_entries(package: Path, notices: list[str]) -> list[Path]:
    """The ``[tool.pi] extensions`` entries of ``package/pyproject.toml``."""
    import tomllib

    manifest = package / "pyproject.toml"
    try:
        with manifest.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        notices.append(f"Skipped {package}: cannot read {manifest}: {exc}")
        return []
    declared = data.get("tool", {}).get("pi", {}).get("extensions")
    if declared is None:
        return []  # a Python project that is not an extension
    if not isinstance(declared, list) or not all(isinstance(e, str) for e in declared):
        notices.append(f"Skipped {package}: {manifest}: tool.pi.extensions must be a list of paths")
        return []
    root = os.path.realpath(package)
    entries = []
    for relative in declared:
        path = package / relative
        real = os.path.realpath(path)
        if not real.startswith(root + os.sep):
            notices.append(f"Skipped {relative!r} of {manifest}: outside {package}")
        elif (path.is_file() and path.suffix == ".py") or (
            path.is_dir() and (path / "__init__.py").is_file()
        ):
            entries.append(path)
        else:
            notices.append(
                f"Skipped {relative!r} of {manifest}: not a .py file or a package directory"
            )
    return entries


def discover_extensions(
    *,
    cwd: Path,
    agent_dir: Path,
    cli_paths: Sequence[Path],
    no_extensions: bool,
    project_trust: str | None,
    rules: ExtensionRules | None = None,
    refused: list[tuple[ExtensionSource, str]] | None = None,
) -> tuple[list[ExtensionSource], list[str]]:
    """Find extensions in load order: ``-e`` paths, project ``.pi/extensions``, user extensions.

    ``--no-extensions`` disables discovery but not explicit ``-e`` paths. An ``-e``
    path inside ``<cwd>/.pi/extensions`` (as given or once symlinks are resolved)
    is a project extension, not a ``cli`` one. Project extensions load only with
    trust ``yes`` or ``sandboxed`` (DESIGN §8); otherwise they are skipped and a
    notice says so. Duplicates (same canonical path) load once, at the first
    position, with the most trusted origin that found them (``cli``, ``user``,
    ``project``): a repository linking the user's own extension into
    ``.pi/extensions`` cannot make it a project extension. The policy's
    ``extensions`` section (``rules``) refuses extensions by name or path glob,
    matched against both the discovered and the canonical path, and project
    extensions as a whole (issue 4); each refusal is a notice naming the policy
    file, and is appended to ``refused``.

    Returns:
        ``(sources, notices)``; notices are human-readable lines for the user.
    """
    project_dir = cwd / ".pi" / "extensions"
    trusted = project_trust in ("yes", "sandboxed")
    candidates: list[ExtensionSource] = []
    notices: list[str] = []
    for given in cli_paths:
        found = Path(os.path.abspath(given))
        if not _inside_project_extensions(found, project_dir):
            candidates.append(ExtensionSource(found, "cli", found))
        elif trusted:
            candidates.append(ExtensionSource(found, "project", found))
        else:
            notices.append(
                f"Skipped -e {given}: it is a project extension (in {project_dir}) and the "
                "project is not trusted. Use --trust sandboxed (sandboxed) or --trust yes to load it."
            )
    if not no_extensions:
        # Untrusted: only the directory listing, for the notice; no file of the
        # project (a pyproject.toml included) is read before trust (DESIGN §8).
        project = _extension_entries(project_dir, notices) if trusted else _listing(project_dir)
        if project and trusted:
            candidates += [ExtensionSource(p, "project", p) for p in project]
        elif project:
            names = ", ".join(p.name for p in project)
            notices.append(
                f"Skipped {len(project)} project extension(s) in {cwd / '.pi' / 'extensions'} ({names}): "
                "the project is not trusted. Use --trust sandboxed (sandboxed) or --trust yes to load them."
            )
        candidates += [
            ExtensionSource(p, "user", p)
            for p in _extension_entries(agent_dir / "extensions", notices)
        ]
    # One source per canonical path: the first position, the most trusted finder.
    rank = {"cli": 0, "user": 1, "project": 2}
    chosen: dict[Path, ExtensionSource] = {}
    for candidate in candidates:
        canonical = Path(os.path.realpath(candidate.path))
        source = ExtensionSource(canonical, candidate.origin, candidate.discovered)
        best = chosen.get(canonical)
        if best is None or rank[source.origin] < rank[best.origin]:
            chosen[canonical] = source
    sources = []
    for source in chosen.values():
        canonical = source.path
        why = (
            rules.refusal(
                extension_name(canonical), canonical, source.origin, discovered=source.discovered
            )
            if rules
            else None
        )
        if why is not None:
            notices.append(f"Refused {source.origin} extension {canonical}: {why}")
            if refused is not None:
                refused.append((source, why))
            continue
        sources.append(source)
    return sources, notices


def _inside_project_extensions(path: Path, project_dir: Path) -> bool:
    """Whether ``path`` (absolute) is in ``project_dir``, as given or once symlinks
    of either are resolved."""
    pairs = (
        (path, project_dir),
        (Path(os.path.realpath(path)), Path(os.path.realpath(project_dir))),
        (path, Path(os.path.realpath(project_dir))),
        (Path(os.path.realpath(path)), project_dir),
    )
    return any(p == d or p.is_relative_to(d) for p, d in pairs)


def extension_name(path: Path) -> str:
    """An extension's name for policy patterns: the file's stem, or the package
    directory's name (``foo.py`` → ``foo``, ``pkg/`` → ``pkg``)."""
    return path.stem if path.suffix == ".py" else path.name


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
        self.load_errors: list[dict[str, str]] = []
        self._bwrap: str | None = None
        _remove_stale_log_dirs()
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"pi-workers-{os.getpid()}-"))
        self._counter = 0
        self._nursery: trio.Nursery | None = None
        self._respawn_lock = trio.Lock()
        self._restarts: dict[Path, int] = {}
        self.disabled: dict[Path, str] = {}
        # tool call id → the worker executing it (set by the tool pipeline).
        self.running_calls: dict[str, WorkerProcess] = {}
        self.cgroups: CgroupLimiter | None = None
        self.placeholders: set[str] = set()
        # Host device nodes whose mode a sandbox changed and the pool put back.
        self.repaired_devices: list[str] = []
        self._lease: PlaceholderLease | None = None
        self._released_lease: PlaceholderLease | None = None
        self._devices: DeviceGuard | None = None
        self._proxy_socket: str | None = None

    def is_placeholder(self, path: str) -> bool:
        """Whether ``path`` is a placeholder of this run or, per the shared list,
        of a concurrent sandboxed run of the same user."""
        if path in self.placeholders:
            return True
        lease = self._lease or self._released_lease
        return lease is not None and path in lease.recorded()

    @property
    def log_dir(self) -> Path:
        """Where each worker's stdout/stderr log is written."""
        return self._log_dir

    def _ctx(self) -> dict[str, Any]:
        return {"cwd": str(self.config.cwd), "has_ui": self.config.has_ui, "mode": self.config.mode}

    def _spec(
        self,
        name: str,
        init_params: dict[str, Any],
        *,
        role: str,
        sandboxed: bool,
        extra_ro: Sequence[Path] = (),
        network: bool = True,
    ) -> WorkerSpec:
        self._counter += 1
        slug = "".join(c if c.isalnum() else "-" for c in name)[-60:]
        log_path = self._log_dir / f"{self._counter:02d}-{slug}.log"
        profile = None
        if sandboxed:
            profile = worker_profile(
                role,
                workspace=self.config.cwd,
                home=self.config.home,
                agent_dir=self.config.agent_dir,
                extra_ro=extra_ro,
                settings=self.config.settings,
                proxy_socket=self._proxy_socket if network else None,
                protect=(*self.config.policy_files, *self._audit_paths()),
                hide=self._audit_paths(),
            )
            self.placeholders.update(profile.placeholders)
            if self._lease is not None:
                # Listed before bwrap creates them: after a run killed with SIGKILL
                # the next run to end with no other run active removes them.
                self._lease.record(profile.placeholders)
            self.audit(
                {
                    "event": "sandbox_profile",
                    "worker": name,
                    "role": role,
                    "writable": list(profile.rw_binds),
                    "protected": [p for p, _ in profile.protect_mounts],
                    "network": profile.network,
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
        )

    def _audit_paths(self) -> tuple[Path, ...]:
        single = (self.config.audit_log,) if self.config.audit_log is not None else ()
        return (*single, *self.config.audit_logs)

    def capabilities(self, source: ExtensionSource) -> dict[str, bool]:
        """The policy's capabilities for one extension (`ExtensionRules.capabilities_for`)."""
        rules = self.config.extension_rules or ExtensionRules()
        return rules.capabilities_for(
            extension_name(source.path), source.path, source.origin, discovered=source.discovered
        )

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
        the placeholder lease, the device guard, and the egress proxy.

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
        # logs, egress proxy sockets and placeholder bookkeeping.
        for what, path in shared_directories(self.config.home):
            if os.path.commonpath([path, workspace]) == workspace:
                raise SandboxError(
                    f"refusing to sandbox the workspace {workspace}: it contains your {what} "
                    f"({path}); run pi in a project directory (-C DIR)"
                )
        from pi_sandbox.sandbox.seccomp_filter import seccomp_program

        self._bwrap = find_bwrap()
        await trio.to_thread.run_sync(probe_bwrap, self._bwrap)
        await trio.to_thread.run_sync(seccomp_program)  # built once, cached
        remove_stale_cgroups()
        self.cgroups = await trio.to_thread.run_sync(CgroupLimiter.detect)
        self._lease = PlaceholderLease.acquire()
        self._devices = DeviceGuard()
        settings = self.config.settings
        if settings.network_enabled:
            from pi_sandbox.sandbox.network_rules import NetworkRules
            from pi_sandbox.supervisor.egress_proxy import EgressProxy

            socket_path = self._log_dir / "egress.sock"
            proxy = EgressProxy(
                NetworkRules(allow=settings.network_allow, deny=settings.network_deny),
                socket_path,
                audit=self.audit,
            )
            await nursery.start(proxy.serve)
            self._proxy_socket = str(socket_path)

    def _needs_bwrap(self, sources: Sequence[ExtensionSource]) -> bool:
        return self.config.sandbox or (
            self.config.project_trust == "sandboxed" and any(s.origin == "project" for s in sources)
        )

    async def start(
        self,
        nursery: trio.Nursery,
        sources: Sequence[ExtensionSource],
        *,
        on_tool_update: Callable[..., Any] | None = None,
    ) -> None:
        """Start the tool worker and every extension worker concurrently.

        A failing extension is recorded in ``load_errors`` (path + original error) and
        the others keep working. The tool worker failing is fatal.

        Raises:
            SandboxUnavailableError: a sandbox is required and bwrap cannot run here.
            WorkerStartError: the tool worker could not start.
        """
        if self._needs_bwrap(sources):
            await self._prepare_sandbox(nursery)
        tool_spec = self._spec(
            "tool worker",
            {"kind": "tools", "ctx": self._ctx()},
            role="tool",
            # A sandboxed-trust project extension steers tool calls (its tool_call hook
            # may rewrite the input), so the tools it steers must run sandboxed too.
            sandboxed=self._needs_bwrap(sources),
        )
        self.tool_worker = WorkerProcess(tool_spec, generation=self.generation)
        self.tool_worker.tool_updates = on_tool_update
        slots: list[tuple[ExtensionSource, WorkerProcess] | None] = [None] * len(sources)

        # A sandboxed-trust project extension's tool_call hook may rewrite the input of
        # any tool, an extension's included: every extension worker then runs
        # sandboxed too, like the tool worker (non-project ones with role "extension").
        all_sandboxed = self._needs_bwrap(sources)

        async def start_extension(index: int, source: ExtensionSource) -> None:
            # sandboxed trust runs project code under the strictest profile even without --sandbox.
            untrusted = source.origin == "project" and self.config.project_trust == "sandboxed"
            sandboxed = all_sandboxed or untrusted
            capabilities = self.capabilities(source)
            spec = self._spec(
                f"extension {source.path}",
                {
                    "kind": "extension",
                    "path": str(source.path),
                    "ctx": {**self._ctx(), "capabilities": capabilities},
                },
                role="sandboxed-extension" if untrusted else "extension",
                sandboxed=sandboxed,
                # Only the extension itself (the file, or its package directory) is
                # bound: binding a file's parent would expose its neighbours.
                extra_ro=[source.path],
                # The policy's network allowlist reaches an extension only with the
                # ``network`` capability (issue 4; off by default).
                network=capabilities["network"],
            )
            worker = WorkerProcess(spec, generation=self.generation)
            worker.tool_updates = on_tool_update
            try:
                await worker.start(nursery, timeout_s=self.config.handshake_timeout_s)
            except RemoteError as exc:
                text = str(exc).removeprefix(f"{worker.name}: ")
                self.load_errors.append(
                    {
                        "path": str(source.path),
                        "message": f"Failed to load extension {source.path}: {text}",
                        "traceback": exc.remote_traceback,
                    }
                )
                return
            except WorkerError as exc:
                self.load_errors.append(
                    {
                        "path": str(source.path),
                        "message": f"Failed to load extension {source.path}: {exc}",
                    }
                )
                return
            slots[index] = (source, worker)

        tool_worker_failure: list[WorkerError] = []

        async def start_tool_worker() -> None:
            try:
                await self._start_tool_worker(nursery)
            except WorkerError as exc:
                tool_worker_failure.append(exc)

        async with trio.open_nursery() as starters:
            starters.start_soon(start_tool_worker)
            for index, source in enumerate(sources):
                starters.start_soon(start_extension, index, source)
        self.extensions = [slot for slot in slots if slot is not None]
        if tool_worker_failure:
            raise tool_worker_failure[0]
        self._build_registry()

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
        """
        async with self._respawn_lock:
            source, worker = self.extensions[index]
            if worker.alive:
                return worker
            if source.path in self.disabled:
                return None
            used = self._restarts.get(source.path, 0)
            if used >= MAX_EXTENSION_RESTARTS:
                self.disabled[source.path] = f"it stopped {used + 1} times"
                return None
            self._restarts[source.path] = used + 1
            try:
                replacement = await self._respawn(worker)
            except (RemoteError, WorkerError) as exc:
                self.disabled[source.path] = f"its restart failed: {exc}"
                self.load_errors.append(
                    {
                        "path": str(source.path),
                        "message": f"Extension {source.path} disabled: {exc}",
                    }
                )
                return None
            self.extensions[index] = (source, replacement)
            return replacement

    async def _respawn(self, old: WorkerProcess) -> WorkerProcess:
        assert self._nursery is not None
        await old.aclose()
        replacement = WorkerProcess(old.spec, generation=old.generation + 1)
        replacement.tool_updates = old.tool_updates
        await replacement.start(self._nursery, timeout_s=self.config.handshake_timeout_s)
        for name, tool in list(self.tools.items()):
            if tool.worker is old:
                self.tools[name] = RegisteredTool(tool.definition, replacement, tool.source)
        return replacement

    def _build_registry(self) -> None:
        assert self.tool_worker is not None and self.tool_worker.registrations is not None
        for definition in self.tool_worker.registrations.tools:
            self.tools[definition.name] = RegisteredTool(definition, self.tool_worker, "builtin")
        # Tool names are claimed in trust order, not load order: a project extension
        # (trusted or only sandboxed) must never take over a tool the user installed.
        rank = {"cli": 0, "user": 1, "project": 2}
        for source, worker in sorted(self.extensions, key=lambda item: rank[item[0].origin]):
            assert worker.registrations is not None
            may_override = self.capabilities(source)["override_builtin_tools"]
            for definition in worker.registrations.tools:
                existing = self.tools.get(definition.name)
                if existing is not None and existing.source == "builtin" and may_override:
                    # The policy's ``override_builtin_tools`` capability (issue 4).
                    self.tools[definition.name] = RegisteredTool(
                        definition, worker, str(source.path)
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
                    self.load_errors.append(
                        {
                            "path": str(source.path),
                            "message": f"Extension {source.path}: tool {definition.name!r} is already "
                            f"registered by {existing.source}; the first registration wins{why}.",
                        }
                    )
                    continue
                self.tools[definition.name] = RegisteredTool(definition, worker, str(source.path))

    async def dispatch(self, event: str, payload: dict[str, Any]) -> DispatchOutcome:
        """Send ``event`` to each subscribed worker in load order and combine the results.

        A worker that times out, crashes or answers with garbage counts as a failed
        handler: ``tool_call`` is blocked (fail-closed), other events keep the previous
        state (DESIGN §4). Never raises for worker failures.
        """
        state = hook_kinds.initial_state(event, payload)
        outcome = DispatchOutcome(state)
        indices = [
            i
            for i, (_, worker) in enumerate(self.extensions)
            if worker.registrations is not None and event in worker.registrations.events
        ]
        for index in indices:
            source = self.extensions[index][0]
            worker = await self.ensure_extension_worker(index)
            if worker is None:
                message = f"extension {source.path} is disabled ({self.disabled[source.path]})"
                state, stop = hook_kinds.apply_error(event, state, message)
                outcome.errors.append({"path": str(source.path), "message": message})
                if stop:
                    # A fail-closed hook that can never run again would block every
                    # call for the rest of the session: the caller ends the run.
                    outcome.fatal = message
                    break
                continue
            params = {"event": event, "payload": payload, "state": state, "ctx": self._ctx()}
            try:
                raw = await worker.request(
                    methods.EVENT_DISPATCH, params, timeout_s=self.config.hook_timeout_s
                )
                result = DispatchResult.model_validate(raw)
                hook_kinds.check_state(event, result.state)
            except (PiSandboxError, pydantic.ValidationError, hook_kinds.HandlerResultError) as exc:
                if isinstance(exc, WorkerTimeoutError):
                    # The hung handler's thread cannot be pre-empted: kill the worker so
                    # the next event gets a fresh one instead of another full timeout.
                    worker.kill()
                    message = f"{event} handler in {source.path} timed out after {self.config.hook_timeout_s:g} s"
                else:
                    message = f"{event} handler in {source.path} failed: {exc}"
                outcome.errors.append({"path": str(source.path), "message": message})
                state, stop = hook_kinds.apply_error(event, state, message)
                if stop:
                    break
                continue
            outcome.errors += [
                {"path": str(source.path), "message": e.message, "traceback": e.traceback}
                for e in result.errors
            ]
            state = result.state
            # The worker's own `stopped` flag is advisory: the chain ends only on a
            # decisive state (a real block, a cancel), judged here.
            if hook_kinds.is_decisive(event, state):
                break
        outcome.state = state
        return outcome

    async def aclose(self, *, keep_logs: bool = False) -> None:
        """Stop every worker (escalating shutdown, always reaped).

        The per-worker logs are removed unless ``keep_logs`` (the caller shows their
        path when something failed).
        """
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for _, worker in self.extensions:
                    nursery.start_soon(worker.aclose)
                if self.tool_worker is not None:
                    nursery.start_soon(self.tool_worker.aclose)
        self.repaired_devices += self.repair_host_devices()
        if self._lease is not None:
            # Every sandbox of this run is gone: placeholders may go unless another
            # sandboxed run of this user is still active (see placeholders.py).
            self._lease.release(self.placeholders)
            self._released_lease = self._lease
            self._lease = None
        if self.cgroups is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.cgroups.close)
            self.cgroups = None
        if not keep_logs:
            shutil.rmtree(self._log_dir, ignore_errors=True)


def _remove_stale_log_dirs() -> None:
    """Remove worker-log directories of ``pi`` processes that no longer exist.

    A run killed by a signal cannot clean up after itself; the next run does.
    """
    for entry in Path(tempfile.gettempdir()).glob("pi-workers-*-*"):
        pid = entry.name.split("-")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # another user's pi: alive, and not ours


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
