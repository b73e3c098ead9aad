"""The MCP servers of one session: connecting them, isolating them, and turning what
they offer into tools the normal pipeline runs (issue 19 §2–§4).

`McpManager.start` connects every enabled server in parallel, in the background. Each
stdio server runs in its own sandbox (`sandbox.program_profile`): by default whenever
bwrap works — with ``--sandbox`` always, never unsandboxed; only an explicit
``--no-sandbox`` runs them as plain processes (documented in docs/mcp.md). Remote
servers are reached by the supervisor through an egress proxy that allows only the
server's host.

Tools. Each server tool becomes ``mcp__<server>__<tool>`` (`naming.mcp_tool_name`) in
the pool's registry (`WorkerPool.external_tools`), so the pipeline runs it like any
tool: schema validation, the policy gate (``tool: "mcp__git__*"`` and argument
matchers on its JSON), ``tool_call`` hooks, execution — here a request to the server
(`RegisteredTool.executor`) — and ``tool_result`` hooks. Exposure (pi's config keys)
goes through one adapter, `McpManager._expose`: ``direct`` tools are declared to the
model; ``deferred`` and ``codemode`` tools are registered (callable by the pipeline
for ``tool_search``/codemode, which another module owns) but never declared;
``hidden`` tools are not registered. The resource tools (``list_mcp_resources``,
``list_mcp_resource_templates``, ``read_mcp_resource``) follow the widest exposure of
the servers that have resources (pi mcp.md "Use resources").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.protocol.messages import ToolDefinitionWire
from pi_sandbox.supervisor.mcp.config import (
    McpConfig,
    McpServerConfig,
    expand_value,
    mcp_namespace,
    tool_exposure,
)
from pi_sandbox.supervisor.mcp.connection import McpConnection, McpUnavailable
from pi_sandbox.supervisor.mcp.naming import mcp_tool_name, normalise_schema, to_tool_result
from pi_sandbox.supervisor.mcp.stdio_process import StdioLaunch

__all__ = [
    "RESOURCE_TOOLS",
    "STARTUP_WAIT_S",
    "McpManager",
    "render_servers_section",
]

STARTUP_WAIT_S = 10.0
"""How long the first prompt waits for servers with ``direct`` tools (pi mcp.md)."""

RESOURCE_TOOLS = ("list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource")
_MAX_SECTION_CHARS = 4096
_MAX_SUMMARY_CHARS = 250

Emit = Callable[[dict[str, Any]], Awaitable[None]]


class McpManager:
    """All MCP servers of a session.

    Args:
        config: the loaded ``mcp.json`` servers.
        pool: the session's `WorkerPool` (its registry, sandbox settings, bwrap).
        rules: the policy's ``mcp`` rules (`policies._mcp.McpRules`); None allows all.
        cwd / home / agent_dir: the workspace, the user's home, the agent directory.
        sandbox_mode: ``"required"`` (``--sandbox``: never unsandboxed),
            ``"default"`` (sandboxed when bwrap works, else refused) or ``"off"``
            (explicit ``--no-sandbox``: plain processes).
        emit: receives ``{"type": "pisandbox_warning"|"pisandbox_notice", "message": …}``
            events.
        audit: receives audit records (each server's profile, secrets passed).
        auth_key: ``auth_key(provider)`` → the stored key, for ``auth.provider``.
    """

    def __init__(
        self,
        config: McpConfig,
        *,
        pool: Any,
        rules: Any = None,
        cwd: Path,
        home: Path,
        agent_dir: Path,
        sandbox_mode: str = "default",
        emit: Emit | None = None,
        audit: Callable[[dict[str, Any]], None] | None = None,
        auth_key: Callable[[str], str | None] | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.rules = rules
        self.cwd = cwd
        self.home = home
        self.agent_dir = agent_dir
        self.sandbox_mode = sandbox_mode
        self._emit = emit
        self._audit = audit or (lambda record: None)
        self._auth_key = auth_key
        self.connections: dict[str, McpConnection] = {}
        self.refused: dict[str, str] = {}
        self._nursery: trio.Nursery | None = None
        self._bwrap: str | None = None
        self._cgroups: Any = None
        self._client_ready = trio.Event()
        self._log_dir_path: Path | None = None
        self._tool_owner: dict[str, tuple[str, str]] = {}  # pi name -> (server, tool)
        self._registered: set[str] = set()
        self._waited = False

    @property
    def _log_dir(self) -> Path:
        """Server logs and proxy sockets (made at the first server's start, 0700)."""
        if self._log_dir_path is None:
            self._log_dir_path = Path(tempfile.mkdtemp(prefix=f"pi-mcp-{os.getpid()}-"))
        return self._log_dir_path

    # --- start-up ------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Check each enabled server against the policy and connect the allowed ones in
        the background (returns without waiting for them)."""
        self._nursery = nursery
        for problem in self.config.errors:
            await self._say("warning", f"MCP configuration: {problem}")
        if self.config.ignored_project_file is not None:
            await self._say(
                "notice",
                f"{self.config.ignored_project_file} ignored: the project is not trusted "
                "(its MCP servers would run programs the repository chose)",
            )
        await self._connect([s for s in self.config.servers.values() if s.enabled])

    async def add_servers(self, servers: list[McpServerConfig], errors: list[str]) -> None:
        """Add servers extensions registered (known once their workers loaded); a
        configured server of the same name wins (pi mcp.md)."""
        for problem in errors:
            await self._say("warning", f"MCP configuration: {problem}")
        new = [s for s in servers if s.name not in self.config.servers]
        for server in new:
            self.config.servers[server.name] = server
        await self._connect([s for s in new if s.enabled])

    async def _connect(self, enabled: list[McpServerConfig]) -> None:
        nursery = self._nursery
        assert nursery is not None
        if not enabled:
            return
        needs_bwrap = any(s.kind == "stdio" for s in enabled) and self.sandbox_mode != "off"
        if needs_bwrap and self._bwrap is None:
            problem = await self._prepare_bwrap()
            if problem is not None:
                for server in enabled:
                    if server.kind == "stdio":
                        self.refused[server.name] = problem
                        await self._say(
                            "warning", f"MCP server {server.name!r} not started: {problem}"
                        )
        started: list[McpConnection] = []
        for server in enabled:
            if server.name in self.refused:
                continue
            command = _resolve_program(server) if server.kind == "stdio" else None
            refusal = None
            if self.rules is not None:
                refusal = self.rules.refusal(
                    server.name, command=command or server.command, remote=server.kind == "http"
                )
            if refusal is None and server.kind == "stdio" and command is None:
                refusal = _missing_program(server)
            if refusal is not None:
                self.refused[server.name] = refusal
                self._audit(
                    {"event": "mcp", "server": server.name, "action": "refused", "reason": refusal}
                )
                await self._say("warning", f"MCP server {server.name!r} not started: {refusal}")
                continue
            connection = McpConnection(
                server,
                launch=(lambda s=server, c=command: self._launch(s, c))
                if server.kind == "stdio"
                else None,
                open_http=(lambda s=server: self._open_http(s)) if server.kind == "http" else None,
                notify=self._say,
            )
            self.connections[server.name] = connection
            connection.on_tools_changed = self.refresh_tools
            connection.client_ready = self._client_ready
            started.append(connection)
            await connection.start(nursery)
            nursery.start_soon(self._register_when_ready, connection)
        if started:
            nursery.start_soon(self._import_after_spawn, started)

    async def _import_after_spawn(self, connections: list[McpConnection]) -> None:
        """Import the SDK once every server of ``connections`` was spawned (at most
        10 s): the import holds the event loop for a second or more (it cannot go to
        a thread, see `connection.import_client_now`), and the servers' own start-up
        runs meanwhile on the other cores."""
        from pi_sandbox.supervisor.mcp.connection import import_client_now

        with trio.move_on_after(STARTUP_WAIT_S):
            for connection in connections:
                await connection.spawned.wait()
        import_client_now()
        self._client_ready.set()

    async def _prepare_bwrap(self) -> str | None:
        from pi_sandbox.errors import SandboxUnavailableError
        from pi_sandbox.sandbox import find_bwrap, probe_bwrap

        try:
            bwrap = getattr(self.pool, "_bwrap", None) or find_bwrap()
            await trio.to_thread.run_sync(probe_bwrap, bwrap)
            from pi_sandbox.sandbox.seccomp_filter import seccomp_program

            await trio.to_thread.run_sync(seccomp_program)
        except SandboxUnavailableError as exc:
            first = str(exc).splitlines()[0]
            if self.sandbox_mode == "required":
                return f"the sandbox is required and bwrap cannot run here: {first}"
            return (
                f"MCP servers run sandboxed and bwrap cannot run here ({first}); "
                "pass --no-sandbox to run them as plain processes"
            )
        self._bwrap = bwrap
        if getattr(self.pool, "cgroups", None) is None:
            from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter

            # Servers may start before the pool prepared its own (issue 19 §4).
            self._cgroups = await trio.to_thread.run_sync(CgroupLimiter.detect)
        return None

    async def _register_when_ready(self, connection: McpConnection) -> None:
        await connection.ready.wait()
        self.refresh_tools()

    async def wait_for_direct(self, timeout_s: float = STARTUP_WAIT_S) -> list[str]:
        """Before the first prompt: wait up to ``timeout_s`` for servers with ``direct``
        tools (pi mcp.md); returns the names still connecting (reported once)."""
        if self._waited:
            return []
        self._waited = True
        waiting = [
            c for c in self.connections.values() if _has_direct(c.config) and not c.ready.is_set()
        ]
        with trio.move_on_after(timeout_s):
            for connection in waiting:
                await connection.ready.wait()
        slow = [c.name for c in waiting if not c.ready.is_set()]
        if slow:
            await self._say(
                "notice",
                f"MCP servers still connecting after {timeout_s:g} s: {', '.join(slow)}; "
                "their tools become available once connected",
            )
        self.refresh_tools()
        return slow

    # --- isolation -----------------------------------------------------------------

    def _server_env(self, server: McpServerConfig) -> dict[str, str]:
        env: dict[str, str] = {}
        pin = self.rules.pin(server.name) if self.rules is not None else None
        allowed = set(pin[0].env) if pin is not None and pin[0].env is not None else None
        for name, value in server.env:
            if allowed is not None and name not in allowed:
                continue
            env[name] = expand_value(value, os.environ, where=f'server "{server.name}": env.{name}')
        providers = []
        for name, provider in server.auth_env:
            if allowed is not None and name not in allowed:
                continue
            key = self._auth_key(provider) if self._auth_key is not None else None
            if not key:
                raise ValueError(
                    f'server "{server.name}": authEnv.{name}: no key stored for provider '
                    f"{provider!r} (pi auth login {provider})"
                )
            env[name] = key
            providers.append(provider)
        if env:
            # Names only: the values are secrets passed to this server alone.
            self._audit(
                {
                    "event": "mcp",
                    "server": server.name,
                    "action": "env",
                    "names": sorted(env),
                    **({"providers": sorted(set(providers))} if providers else {}),
                }
            )
        return env

    def _grants(self, server: McpServerConfig) -> tuple[str, tuple[str, ...], str | None]:
        pin = self.rules.pin(server.name) if self.rules is not None else None
        filesystem, network, pinned_by = server.filesystem, server.network, None
        if pin is not None:
            pinned_by = pin[1]
            if pin[0].filesystem is not None:
                filesystem = pin[0].filesystem
            if pin[0].network is not None:
                network = tuple(pin[0].network)
        return filesystem, network, pinned_by

    async def _launch(self, server: McpServerConfig, program: str) -> StdioLaunch:
        """Build a new process's launch (called at each start and respawn).

        Raises:
            ValueError: an ``env`` value cannot be expanded.
            SandboxError: the profile cannot be built.
        """
        from pi_sandbox.sandbox.program_profile import program_profile

        env = self._server_env(server)
        cwd = _server_cwd(server, self.cwd)
        log_path = self._log_dir / f"{server.name}.log"
        if self.sandbox_mode == "off":
            base = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.home),
                "LANG": os.environ.get("LANG") or "C.UTF-8",
            }
            return StdioLaunch(server.name, (program, *server.args), {**base, **env}, cwd, log_path)
        filesystem, network, pinned_by = self._grants(server)
        settings = self.pool.config.settings
        proxy = await self._server_proxy(server, network) if network else None
        # Building a profile reads the file system (git configuration, symlinks): in a
        # thread, so that servers starting together do not wait for each other.
        profile = await trio.to_thread.run_sync(
            lambda: program_profile(
                program=program,
                args=server.args,
                workspace=self.cwd,
                home=self.home,
                agent_dir=self.agent_dir,
                env=env,
                filesystem=filesystem,  # type: ignore[arg-type]
                cwd=cwd,
                settings=settings,
                proxy_socket=proxy,
                network_allow=network,
                protect=self.pool.config.policy_files,
                hide=tuple(p for p in (self.pool.config.audit_log,) if p is not None),
            )
        )
        self._audit(
            {
                "event": "sandbox_profile",
                "worker": f"mcp server {server.name}",
                "filesystem": filesystem,
                "network": list(network),
                "pinned_by": pinned_by,
                "rw_binds": list(profile.rw_binds),
                "env_names": [name for name, _ in profile.env],
            }
        )
        return StdioLaunch(
            server.name,
            (program, *server.args),
            {},
            "/",
            log_path,
            sandbox=profile,
            bwrap=self._bwrap,
            cgroups=getattr(self.pool, "cgroups", None) or self._cgroups,
        )

    async def _server_proxy(self, server: McpServerConfig, hosts: tuple[str, ...]) -> str:
        """Start (once) an egress proxy whose allowlist is ``hosts`` minus the policy's
        deny list; returns its socket path."""
        from pi_sandbox.sandbox.network_rules import NetworkRules
        from pi_sandbox.supervisor.egress_proxy import EgressProxy

        path = self._log_dir / f"{server.name}.sock"
        if path.exists():
            return str(path)
        settings = self.pool.config.settings
        proxy = EgressProxy(
            NetworkRules(allow=hosts, deny=settings.network_deny),
            path,
            audit=lambda record: self._audit({**record, "mcp_server": server.name}),
        )
        assert self._nursery is not None
        await self._nursery.start(proxy.serve)
        return str(path)

    @contextlib.asynccontextmanager
    async def _open_http(self, server: McpServerConfig) -> Any:
        """The SDK's streamable HTTP transport, through an egress proxy that allows only
        the server's host (the policy decides, the proxy enforces)."""
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        from pi_sandbox.sandbox.network_rules import NetworkRules
        from pi_sandbox.supervisor.egress_proxy import EgressProxy
        from pi_sandbox.worker.proxy_relay import start_relay

        assert server.url is not None
        headers = {
            name: expand_value(value, os.environ, where=f'server "{server.name}": headers.{name}')
            for name, value in server.headers
        }
        if server.auth_provider is not None and self._auth_key is not None:
            key = self._auth_key(server.auth_provider)
            if not key:
                raise McpUnavailable(f"no stored key for provider {server.auth_provider!r}")
            headers["Authorization"] = f"Bearer {key}"
            self._audit(
                {
                    "event": "mcp",
                    "server": server.name,
                    "action": "auth",
                    "provider": server.auth_provider,
                }
            )
        from urllib.parse import urlsplit

        parts = urlsplit(server.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = self._log_dir / f"{server.name}-remote.sock"
        proxy = EgressProxy(
            NetworkRules(allow=(f"{host}:{port}",), deny=self.pool.config.settings.network_deny),
            path,
            audit=lambda record: self._audit({**record, "mcp_server": server.name}),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            relay_port = start_relay(str(path))
            client = httpx2.AsyncClient(
                headers=headers, proxy=f"http://127.0.0.1:{relay_port}", timeout=server.timeout_s
            )
            try:
                async with (
                    client,
                    streamable_http_client(server.url, http_client=client) as streams,
                ):
                    yield streams
            finally:
                nursery.cancel_scope.cancel()

    # --- tools ---------------------------------------------------------------------

    def refresh_tools(self) -> None:
        """Register the tools of every connected server in the pool's registry (names
        are stable: a name once given to a server tool stays with it)."""
        from pi_sandbox.supervisor.workers.worker_pool import RegisteredTool

        pool = self.pool
        with_resources: list[McpConnection] = []
        offered: set[str] = set()
        for connection in self.connections.values():
            if connection.state != "connected" and not connection.tools:
                offered.update(n for n, o in self._tool_owner.items() if o[0] == connection.name)
                continue
            server = connection.name
            plain = [mcp_tool_name(server, t.name) for t in connection.tools]
            for tool in connection.tools:
                owner = (server, tool.name)
                name = mcp_tool_name(
                    server,
                    tool.name,
                    lambda candidate, owner=owner, plain=plain: (
                        self._tool_owner.get(candidate, owner) != owner
                        or plain.count(candidate) > 1
                        or (candidate in pool.tools and candidate not in self._registered)
                    ),
                )
                self._tool_owner[name] = owner
                offered.add(name)
                exposure = tool_exposure(connection.config, tool.name)
                if exposure == "hidden":
                    continue
                description = tool.description or f"Tool {tool.name} of MCP server {server}"
                definition = ToolDefinitionWire(
                    name=name,
                    label=f"{server}/{tool.name}",
                    description=description[:20_000],
                    parameters=normalise_schema(tool.input_schema),
                )
                registered = RegisteredTool(
                    definition,
                    None,
                    f"mcp:{server}",
                    executor=self._executor(server, tool.name),
                    annotations=dict(tool.annotations),
                )
                self._add(registered, exposure)
            if connection.has_resources:
                with_resources.append(connection)
        withdrawn = [n for n in self._registered if n in self._tool_owner and n not in offered]
        for name in withdrawn:
            # pi mcp.md: a withdrawn tool becomes unreachable.
            self._registered.discard(name)
            pool.external_tools.pop(name, None)
        if withdrawn:
            pool.tools = {
                n: t
                for n, t in pool.tools.items()
                if n not in withdrawn or not t.source.startswith("mcp:")
            }
        if with_resources:
            widest = (
                "direct"
                if any(c.config.exposure == "direct" for c in with_resources)
                else "deferred"
                if any(c.config.exposure == "deferred" for c in with_resources)
                else "codemode"
            )
            for definition in _resource_definitions():
                self._add(
                    RegisteredTool(
                        definition,
                        None,
                        "mcp:resources",
                        executor=self._resource_executor(definition.name),
                        annotations={"readOnlyHint": True},
                    ),
                    widest,
                )

    def _add(self, registered: Any, exposure: str) -> None:
        name = registered.definition.name
        pool = self.pool
        existing = pool.tools.get(name)
        if existing is not None and name not in self._registered:
            return  # a built-in or extension tool keeps its name
        registered = self._expose(registered, exposure)
        pool.external_tools[name] = registered
        # A new dict, not an update in place: the session host resynchronises its
        # exposure registry when the registry object changes (`sync_exposure`).
        pool.tools = {**pool.tools, name: registered}
        self._registered.add(name)

    def _expose(self, registered: Any, exposure: str) -> Any:
        """The one place an MCP tool's exposure takes effect (issue 19 contract with
        ``supervisor/agent/tool_exposure.py``): the definition carries it
        (``ToolDefinitionWire.exposure``) and the session host's `ToolExposure`
        registry takes it from the pool's registry like any tool's — ``direct``
        declared, ``deferred`` after ``tool_search``, ``codemode`` for scripts.
        ``hidden`` tools never get here (not registered)."""
        definition = registered.definition.model_copy(update={"exposure": exposure})
        return dataclasses.replace(registered, definition=definition)

    def _executor(self, server: str, tool: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        async def execute(tool_call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
            connection = self.connections.get(server)
            if connection is None:
                return _error(f"MCP server {server!r} is not available")
            try:
                result = await connection.request(
                    f"tools/call {tool}", lambda s: s.call_tool(tool, arguments)
                )
            except McpUnavailable as exc:
                return _error(str(exc))
            except Exception as exc:  # the server's JSON-RPC error
                return _error(f"MCP server {server!r}: {tool} failed: {exc}"[:4000])
            await connection.tools_settled()
            return to_tool_result(result, server=server)

        return execute

    def _resource_executor(self, name: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        async def execute(tool_call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
            try:
                return await self._resource_call(name, arguments)
            except McpUnavailable as exc:
                return _error(str(exc))
            except Exception as exc:
                return _error(f"{name} failed: {exc}"[:4000])

        return execute

    async def _resource_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        server = arguments.get("server")
        targets = [
            c
            for c in self.connections.values()
            if c.has_resources and (server is None or c.name == server)
        ]
        if server is not None and not targets:
            return _error(f"no connected MCP server {server!r} with resources")
        if name == "read_mcp_resource":
            uri = str(arguments.get("uri", ""))
            connection = targets[0]
            result = await connection.request("resources/read", lambda s: s.read_resource(uri))
            content: list[dict[str, Any]] = []
            for item in result.contents:
                text = getattr(item, "text", None)
                if isinstance(text, str):
                    content.append({"type": "text", "text": text[:100_000]})
                elif (item.mime_type or "").startswith("image/"):
                    content.append({"type": "image", "data": item.blob, "mimeType": item.mime_type})
                else:
                    content.append({"type": "text", "text": f"[binary resource {item.uri}]"})
            return {
                "content": content or [{"type": "text", "text": "(empty)"}],
                "details": {"mcp_server": connection.name, "uri": uri},
            }
        listing: dict[str, Any] = {
            "resources" if name == "list_mcp_resources" else "resourceTemplates": []
        }
        key = next(iter(listing))
        for connection in targets:
            if name == "list_mcp_resources":
                result = await connection.request("resources/list", lambda s: s.list_resources())
                items = [
                    {
                        "server": connection.name,
                        **r.model_dump(mode="json", by_alias=True, exclude_none=True),
                    }
                    for r in result.resources
                    if not str(r.uri).startswith("ui://")
                ]
            else:
                result = await connection.request(
                    "resources/templates/list", lambda s: s.list_resource_templates()
                )
                items = [
                    {
                        "server": connection.name,
                        **r.model_dump(mode="json", by_alias=True, exclude_none=True),
                    }
                    for r in result.resource_templates
                ]
            for item in items:
                item.pop("icons", None)
            listing[key].extend(items)
        if server is not None:
            listing["server"] = server
        text = json.dumps(listing, ensure_ascii=False)
        return {"content": [{"type": "text", "text": text[:100_000]}], "details": {}}

    # --- the system prompt ---------------------------------------------------------

    def servers_section(self) -> str | None:
        """The ``mcp_servers`` system prompt section (see `render_servers_section`)."""
        return render_servers_section(
            [
                (c.config, c.instructions, c.has_resources, len(c.tools), c.state)
                for c in self.connections.values()
            ]
        )

    # --- reporting and shutdown ----------------------------------------------------

    async def _say(self, level: str, text: str) -> None:
        if self._emit is not None:
            # Our own records carry the pisandbox_ prefix (docs/json.md).
            await self._emit({"type": f"pisandbox_{level}", "message": text})

    def status(self) -> list[dict[str, Any]]:
        """One JSON-ready line per configured server (``pi mcp list``, ``/mcp``)."""
        lines = []
        for server in self.config.servers.values():
            connection = self.connections.get(server.name)
            state = (
                "disabled (config)"
                if not server.enabled
                else "refused"
                if server.name in self.refused
                else connection.state
                if connection is not None
                else "not started"
            )
            lines.append(
                {
                    "name": server.name,
                    "state": state,
                    "kind": server.kind,
                    "source": server.source,
                    "exposure": server.exposure,
                    "error": self.refused.get(server.name)
                    or (connection.error if connection is not None else None),
                    "tools": [
                        {
                            "name": t.name,
                            "exposure": tool_exposure(server, t.name),
                            "description": t.description.splitlines()[0][:200]
                            if t.description
                            else "",
                        }
                        for t in (connection.tools if connection is not None else [])
                    ],
                    "resources": bool(connection and connection.has_resources),
                    "prompts": bool(connection and connection.has_prompts),
                    "sandboxed": server.kind == "stdio" and self.sandbox_mode != "off",
                }
            )
        return lines

    def configured_exposures(self) -> set[str]:
        """Exposures the enabled, started servers' configurations give their tools
        (known before they connect: ``tool_search`` and ``codemode`` turn on from it)."""
        found: set[str] = set()
        for connection in self.connections.values():
            config = connection.config
            found.add(config.exposure)
            found.update(e for _, e in config.tool_exposure)
        return found

    async def wait_all(self, timeout_s: float = STARTUP_WAIT_S) -> None:
        """Wait (at most ``timeout_s``) until every server's first attempt ended."""
        with trio.move_on_after(timeout_s):
            for connection in list(self.connections.values()):
                await connection.ready.wait()

    def status_text(self) -> str:
        """``/mcp`` outside the TUI: one line per server (state, tool count, exposure,
        error), then configuration errors."""
        lines = []
        for line in self.status():
            text = (
                f"{line['name']}: {line['state']} ({len(line['tools'])} tools, {line['exposure']})"
            )
            if line["error"]:
                text += f" — {line['error'].splitlines()[0]}"
            lines.append(text)
        lines += [f"config error: {error}" for error in self.config.errors]
        return "\n".join(lines) or "no MCP servers"

    async def aclose(self) -> None:
        """Stop every server (stdin closed, SIGTERM, SIGKILL) and remove their logs."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for connection in self.connections.values():
                    nursery.start_soon(connection.aclose)
        if self._log_dir_path is not None:
            shutil.rmtree(self._log_dir_path, ignore_errors=True)


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": {}, "is_error": True}


def _has_direct(config: McpServerConfig) -> bool:
    return config.exposure == "direct" or any(e == "direct" for _, e in config.tool_exposure)


def _has_indirect(config: McpServerConfig) -> bool:
    kinds = {config.exposure, *(e for _, e in config.tool_exposure)}
    return bool(kinds & {"codemode", "deferred"})


def _resolve_program(server: McpServerConfig) -> str | None:
    """The absolute path of a stdio server's program (``~/`` expanded; looked up on
    the supervisor's PATH), or None when there is none."""
    assert server.command is not None
    command = os.path.expanduser(server.command)
    if os.sep in command:
        path = command if os.path.isabs(command) else os.path.abspath(command)
        return path if os.access(path, os.X_OK) and os.path.isfile(path) else None
    return shutil.which(command)


def _missing_program(server: McpServerConfig) -> str:
    """Why `_resolve_program` found no program: not there, a directory, or not
    executable (a script without ``chmod +x`` is the common one)."""
    assert server.command is not None
    command = os.path.expanduser(server.command)
    if os.sep not in command:
        return f"command {server.command!r} not found on PATH"
    path = command if os.path.isabs(command) else os.path.abspath(command)
    where = "" if path == server.command else f" ({path})"
    if not os.path.exists(path):
        return f"command {server.command!r} not found{where}"
    if not os.path.isfile(path):
        return f"command {server.command!r} is not a file{where}"
    return (
        f"command {server.command!r} is not executable{where}: make it executable, "
        "or give its interpreter as the command and the file in args"
    )


def _server_cwd(server: McpServerConfig, session_cwd: Path) -> str:
    if not server.cwd:
        return str(session_cwd)
    cwd = os.path.expanduser(server.cwd)
    return cwd if os.path.isabs(cwd) else str(session_cwd / cwd)


def _resource_definitions() -> list[ToolDefinitionWire]:
    server = {"type": "string", "description": "The MCP server's name"}
    return [
        ToolDefinitionWire(
            name="list_mcp_resources",
            label="MCP resources",
            description="List the resources MCP servers offer, as JSON. With server, one "
            "server's; without, every server's.",
            parameters={
                "type": "object",
                "properties": {"server": server, "cursor": {"type": "string"}},
            },
        ),
        ToolDefinitionWire(
            name="list_mcp_resource_templates",
            label="MCP resource templates",
            description="List the URI templates of resources MCP servers do not list directly.",
            parameters={
                "type": "object",
                "properties": {"server": server, "cursor": {"type": "string"}},
            },
        ),
        ToolDefinitionWire(
            name="read_mcp_resource",
            label="Read MCP resource",
            description="Read a resource of an MCP server by server name and URI.",
            parameters={
                "type": "object",
                "properties": {"server": server, "uri": {"type": "string"}},
                "required": ["server", "uri"],
            },
        ),
    ]


def render_servers_section(
    servers: list[tuple[McpServerConfig, str | None, bool, int, str]],
) -> str | None:
    """The ``mcp_servers`` section: every enabled server, how its tools are reached
    (``direct``, ``codemode``, ``tool_search``) and one summary line from its
    ``description`` or, once connected, the first line of its instructions, plus
    whether it offers resources (pi index.js ``renderServersSection``; at most 4096
    characters). None when there are no servers.

    Args:
        servers: ``(config, instructions, has_resources, tool count, state)`` each.
    """
    listed = sorted((s for s in servers if s[0].enabled), key=lambda s: s[0].name)
    if not listed:
        return None
    intro = (
        "MCP servers connected to this session. Tools of `direct` servers are declared "
        "to you as mcp__<server>__<tool>; call the tools of `codemode` servers from "
        "codemode scripts and load those of `tool_search` servers with `tool_search`."
    )
    lines = [intro]
    for config, instructions, resources, _count, state in listed:
        reach = (
            "direct"
            if not _has_indirect(config)
            else "codemode"
            if "codemode" in {config.exposure, *(e for _, e in config.tool_exposure)}
            else "tool_search"
        )
        summary = (config.description or instructions or "").strip().splitlines()
        head = f"- {mcp_namespace(config.name)} ({reach}"
        head += ", resources via read_mcp_resource" if resources else ""
        head += f", {state})" if state != "connected" else ")"
        if summary:
            text = summary[0]
            if len(text) > _MAX_SUMMARY_CHARS:
                text = text[: _MAX_SUMMARY_CHARS - 1].rstrip() + "…"
            head += f": {text}"
        if sum(len(line) + 1 for line in lines) + len(head) > _MAX_SECTION_CHARS:
            lines.append(f"- … {len(listed) - len(lines) + 1} more servers")
            break
        lines.append(head)
    return "\n".join(lines)
