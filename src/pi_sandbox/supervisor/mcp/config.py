"""MCP server configuration: pi's ``mcp.json`` files (pi docs mcp.md "Configure servers").

Where servers come from, strongest last (a later entry replaces an earlier one of the
same name):

1. servers extensions register (``pi.register_mcp_server``), for the session only;
2. ``~/.pi/agent/mcp.json`` (``$PI_CODING_AGENT_DIR/mcp.json``);
3. ``.pi/mcp.json`` of the project, **only when the project is trusted** — an untrusted
   repository must not be able to start a program (issue 19 §Build, pi security.md).

The format is the ``mcpServers`` object other MCP clients use. A stdio server has
``command`` (one executable, not a shell string), ``args``, ``env`` and ``cwd``; a
remote server has ``url`` (streamable HTTP) and ``headers``. Both take ``enabled``,
``timeout`` (seconds, default 60), ``description``, ``exposure`` and ``toolExposure``.
pi-sandbox adds ``sandbox`` (``{"filesystem": "none"|"read"|"write", "network":
[hosts…]}``: what the server's sandbox may reach) and, for remote servers in the user
file, ``auth: {"provider": NAME}`` (a bearer token from the user's credential store).

A project entry without ``command``, ``url`` or ``type`` only overrides ``enabled``,
``exposure`` and ``toolExposure`` of the user entry of that name (pi: the rest,
credentials included, cannot be changed by a repository). Values of ``env`` and
``headers`` expand ``${NAME}`` from the environment; ``!command`` values (pi runs them
on the host, unsandboxed) are refused.

Invalid entries are reported (naming the file and the field) and skipped; the others
still load (pi: "Invalid entries are reported and skipped").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "EXPOSURES",
    "McpConfig",
    "McpServerConfig",
    "add_server",
    "expand_value",
    "load_mcp_config",
    "mcp_namespace",
    "remove_server",
    "tool_exposure",
    "validate_server",
]

Exposure = Literal["direct", "deferred", "codemode", "hidden"]
EXPOSURES: tuple[str, ...] = ("codemode", "deferred", "direct", "hidden")
"""pi's exposures; ``codemode`` is the default (pi docs mcp.md "Control tool exposure")."""
_EXPOSURE_ALIASES = {"codemode-deferred": "codemode"}
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_OVERRIDE_KEYS = ("enabled", "exposure", "toolExposure")
_KNOWN_KEYS = frozenset(
    {
        "type",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "oauth",
        "auth",
        "enabled",
        "timeout",
        "description",
        "exposure",
        "toolExposure",
        "sandbox",
        "authEnv",
    }
)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
FilesystemAccess = Literal["none", "read", "write"]


@dataclass(frozen=True)
class McpServerConfig:
    """One validated server entry.

    Attributes:
        name: the server's name (letters, digits, ``_``, ``-``).
        kind: ``"stdio"`` or ``"http"``.
        command / args / env / cwd: the stdio server (``env`` values unexpanded).
        url / headers: the remote server (``headers`` values unexpanded).
        auth_provider: a provider whose stored key is sent as a bearer token
            (user file only).
        auth_env: ``(variable, provider)`` pairs: a stdio server gets the key stored
            for ``provider`` (``pi auth``) in ``variable`` (user file only).
        enabled: False keeps the entry without connecting.
        timeout_s: per-request timeout (seconds).
        description: one line for the system prompt.
        exposure / tool_exposure: pi's exposure of the server and per-tool overrides
            (keys are tool names or ``*`` patterns; exact names win, then the first
            matching pattern).
        filesystem: the workspace access of the server's sandbox.
        network: hosts (patterns as in the policy's ``sandbox.network.allow``) the
            server may reach through the egress proxy; empty: no network.
        source: the file that defined it, or ``"extension:<path>"``.
        scope: ``"user"``, ``"project"`` or ``"extension"``.
        override: the project file that overrode ``enabled``/exposure, if any.
    """

    name: str
    kind: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    auth_provider: str | None = None
    auth_env: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    timeout_s: float = 60.0
    description: str | None = None
    exposure: Exposure = "codemode"
    tool_exposure: tuple[tuple[str, Exposure], ...] = ()
    filesystem: FilesystemAccess = "none"
    network: tuple[str, ...] = ()
    source: str = ""
    scope: Literal["user", "project", "extension"] = "user"
    override: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class McpConfig:
    """The servers of a run and the problems found loading them.

    Attributes:
        servers: by name, in definition order.
        errors: one line per invalid file or entry, naming the file and field.
        project_file: the project's ``.pi/mcp.json`` when it was read (trusted).
        ignored_project_file: the project's file when it exists but was not read
            (the project is not trusted).
    """

    servers: dict[str, McpServerConfig] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    project_file: Path | None = None
    ignored_project_file: Path | None = None


def mcp_namespace(server: str) -> str:
    """``mcp__<server>`` with ``-`` as ``_`` (pi-mcp ``mcpNamespace``)."""
    return "mcp__" + server.replace("-", "_")


def tool_exposure(config: McpServerConfig, tool: str) -> Exposure:
    """A tool's exposure: its exact ``toolExposure`` entry, else the first matching
    pattern, else the server's (pi core/mcp-servers.js ``getMcpToolExposure``)."""
    overrides = dict(config.tool_exposure)
    if tool in overrides:
        return overrides[tool]
    for pattern, exposure in config.tool_exposure:
        if "*" in pattern and _pattern(pattern).match(tool):
            return exposure
    return config.exposure


def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$")


def expand_value(value: str, environ: Mapping[str, str], *, where: str) -> str:
    """Expand ``${NAME}`` in a configured ``env`` or ``headers`` value.

    Raises:
        ValueError: the value is a ``!command`` (refused: it would run on the host,
            outside every sandbox), or names a variable the environment lacks.
    """
    if value.startswith("!"):
        raise ValueError(
            f"{where}: '!command' values are not supported by pi-sandbox "
            "(the command would run unsandboxed); use ${NAME}"
        )

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ValueError(f"{where}: ${{{name}}} is not set in the environment")
        return environ[name]

    return _VARIABLE.sub(substitute, value)


def _string_map(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{what} must map names to strings")
    return tuple(value.items())


def _exposure(value: Any, what: str) -> Exposure:
    value = _EXPOSURE_ALIASES.get(value, value) if isinstance(value, str) else value
    if value not in EXPOSURES:
        raise ValueError(f"{what} must be one of {', '.join(repr(e) for e in EXPOSURES)}")
    return value  # type: ignore[no-any-return]


def validate_server(
    name: str, raw: Any, *, source: str, scope: Literal["user", "project", "extension"]
) -> McpServerConfig:
    """Validate one ``mcpServers`` entry (pi-mcp ``validateMcpServerConfig`` plus ours).

    Raises:
        ValueError: the message names the server and the field (``server "x": args
            must be an array of strings``).
    """
    if not _SERVER_NAME.match(name):
        raise ValueError(f'invalid server name "{name}" (use letters, digits, "_" and "-")')
    if not isinstance(raw, dict):
        raise ValueError(f'server "{name}" must be an object')

    def bad(text: str) -> ValueError:
        return ValueError(f'server "{name}": {text}')

    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        raise bad(f"unknown field {unknown[0]!r}")
    if scope != "user":
        # A project's (or an extension's) entry cannot read the user's environment:
        # `"env": {"K": "${ANTHROPIC_API_KEY}"}` or a `headers` value would send a
        # key to a server the project chose (red-team finding of 0.7; the same rule
        # as a project's models.json values). The user's own file may.
        for field_name in ("command", "args", "env", "cwd", "url", "headers"):
            if "${" in json.dumps(raw.get(field_name, "")):
                raise bad(
                    f"{field_name}: a {scope} entry cannot read the environment "
                    "(${NAME}); its values must be literal (a key a server needs "
                    "belongs in the user's mcp.json, or authEnv there)"
                )
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise bad("enabled must be a boolean")
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise bad("description must be a string")
    timeout = raw.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise bad("timeout must be a positive number of seconds")
    try:
        exposure = _exposure(raw.get("exposure", "codemode"), "exposure")
        per_tool = raw.get("toolExposure", {})
        if not isinstance(per_tool, dict):
            raise ValueError("toolExposure must map tool names to exposures")
        tool_exposures = tuple(
            (tool, _exposure(value, f'toolExposure "{tool}"')) for tool, value in per_tool.items()
        )
    except ValueError as exc:
        raise bad(str(exc)) from None
    filesystem: FilesystemAccess = "none"
    network: tuple[str, ...] = ()
    box = raw.get("sandbox", {})
    if not isinstance(box, dict):
        raise bad("sandbox must be an object")
    extra = sorted(set(box) - {"filesystem", "network"})
    if extra:
        raise bad(f"unknown field sandbox.{extra[0]}")
    if "filesystem" in box:
        if box["filesystem"] not in ("none", "read", "write"):
            raise bad("sandbox.filesystem must be 'none', 'read' or 'write'")
        filesystem = box["filesystem"]
    if "network" in box:
        hosts = box["network"]
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            raise bad("sandbox.network must be an array of host names")
        network = tuple(hosts)
    kind_type = raw.get("type")
    if kind_type == "sse":
        raise bad("legacy SSE transport is not supported; use the streamable HTTP URL")
    if kind_type not in (None, "stdio", "http", "streamable-http"):
        raise bad("type must be 'stdio', 'http' or 'streamable-http'")
    common: dict[str, Any] = {
        "name": name,
        "enabled": enabled,
        "timeout_s": float(timeout),
        "description": description,
        "exposure": exposure,
        "tool_exposure": tool_exposures,
        "filesystem": filesystem,
        "network": network,
        "source": source,
        "scope": scope,
        "raw": dict(raw),
    }
    url = raw.get("url")
    command = raw.get("command")
    if command is not None and not isinstance(command, str):
        raise bad("command must be a string (one executable; arguments go in args)")
    if url is not None and not isinstance(url, str):
        raise bad("url must be a string")
    if isinstance(url, str) and kind_type in (None, "http", "streamable-http"):
        if not re.match(r"^https?://[^/\s]+", url):
            raise bad("url must be an http or https URL")
        try:
            headers = _string_map(raw.get("headers", {}), "headers")
        except ValueError as exc:
            raise bad(str(exc)) from None
        auth = raw.get("auth")
        provider = None
        if auth is not None:
            if not isinstance(auth, dict) or not isinstance(auth.get("provider"), str):
                raise bad("auth.provider must be a provider name")
            if scope == "project":
                raise bad("auth is only allowed in the user's mcp.json")
            provider = auth["provider"]
        if raw.get("oauth") is not None:
            raise bad("oauth is not supported by pi-sandbox yet; use headers or auth.provider")
        return McpServerConfig(
            kind="http", url=url, headers=headers, auth_provider=provider, **common
        )
    if isinstance(command, str) and kind_type in (None, "stdio"):
        if not command.strip():
            raise bad("command must not be empty")
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise bad("args must be an array of strings")
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise bad("cwd must be a string")
        try:
            env = _string_map(raw.get("env", {}), "env")
        except ValueError as exc:
            raise bad(str(exc)) from None
        auth_env: tuple[tuple[str, str], ...] = ()
        if raw.get("authEnv") is not None:
            try:
                auth_env = _string_map(raw["authEnv"], "authEnv")
            except ValueError as exc:
                raise bad(str(exc)) from None
            if scope != "user":
                # A repository or an extension must not route the user's keys.
                raise bad("authEnv is only allowed in the user's mcp.json")
        return McpServerConfig(
            kind="stdio",
            command=command,
            args=tuple(args),
            env=env,
            cwd=cwd,
            auth_env=auth_env,
            **common,
        )
    raise bad('needs either "command" (stdio) or "url" (streamable HTTP)')


def _is_override(raw: Any) -> bool:
    return isinstance(raw, dict) and not ({"command", "url", "type"} & set(raw))


def _read_file(
    path: Path, scope: Literal["user", "project"], config: McpConfig, autos: list[bool]
) -> None:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return
    except OSError as exc:
        config.errors.append(f"{path}: cannot read: {exc.strerror or exc}")
        return
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        config.errors.append(f"{path}: invalid JSON: {exc}")
        return
    if not isinstance(parsed, dict) or not isinstance(parsed.get("mcpServers", {}), dict):
        config.errors.append(f'{path}: expected an object with an "mcpServers" object')
        return
    auto = parsed.get("autoEnableCodemode")
    if isinstance(auto, bool):
        autos.append(auto)
    elif auto is not None:
        config.errors.append(f"{path}: autoEnableCodemode must be a boolean")
    for name, raw in parsed.get("mcpServers", {}).items():
        if scope == "project" and _is_override(raw):
            base = config.servers.get(name)
            extra = sorted(set(raw) - set(_OVERRIDE_KEYS))
            if base is None:
                config.errors.append(
                    f'{path}: server "{name}" needs "command" or "url", or a user-level '
                    "server to override"
                )
            elif extra:
                config.errors.append(
                    f'{path}: server "{name}": an override can only set '
                    f"{', '.join(_OVERRIDE_KEYS)} (not {extra[0]!r})"
                )
            else:
                try:
                    merged = validate_server(
                        name, {**base.raw, **raw}, source=base.source, scope=base.scope
                    )
                except ValueError as exc:
                    config.errors.append(f"{path}: {exc}")
                    continue
                config.servers[name] = replace(merged, override=str(path))
            continue
        try:
            server = validate_server(name, raw, source=str(path), scope=scope)
        except ValueError as exc:
            config.errors.append(f"{path}: {exc}")
            continue
        clash = next(
            (
                other
                for other in config.servers
                if other != name and mcp_namespace(other) == mcp_namespace(name)
            ),
            None,
        )
        if clash is not None:
            config.errors.append(f'{path}: server "{name}" conflicts with "{clash}"')
            continue
        config.servers[name] = server


def load_mcp_config(
    agent_dir: Path,
    cwd: Path,
    *,
    project_trusted: bool,
    registered: Mapping[str, McpServerConfig] | None = None,
) -> McpConfig:
    """Load the user's and (trusted only) the project's ``mcp.json``.

    Args:
        agent_dir: ``~/.pi/agent`` (or ``$PI_CODING_AGENT_DIR``).
        cwd: the project directory (its ``.pi/mcp.json``).
        project_trusted: whether the project's file may be read (trust ``yes``; with
            ``sandboxed`` or ``no`` it is ignored: its servers would run programs
            a repository chose).
        registered: servers extensions registered; a file entry of the same name wins.

    Returns:
        The servers and the errors (never raises for bad content).
    """
    config = McpConfig()
    autos: list[bool] = []
    for name, server in (registered or {}).items():
        config.servers[name] = server
    _read_file(agent_dir / "mcp.json", "user", config, autos)
    project = cwd / ".pi" / "mcp.json"
    if project_trusted:
        config.project_file = project
        _read_file(project, "project", config, autos)
    elif project.exists():
        config.ignored_project_file = project
    return config


def _edit(path: Path, edit: Any) -> Any:
    text = path.read_text(encoding="utf-8-sig") if path.exists() else None
    parsed = {} if text is None else json.loads(text)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("mcpServers", {}), dict):
        raise ValueError(f'{path}: expected an object with an "mcpServers" object')
    servers = parsed.setdefault("mcpServers", {})
    outcome = edit(servers)
    indent_match = re.search(r"^([ \t]+)\S", text or "", re.MULTILINE)
    indent = indent_match.group(1) if indent_match else "  "
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(parsed, indent=indent) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return outcome


def add_server(path: Path, name: str, entry: dict[str, Any]) -> bool:
    """Add or replace server ``name`` in ``path`` (created when missing), keeping the
    rest of the file; returns True when an entry was replaced (pi ``addMcpServerConfig``).

    Raises:
        ValueError: the entry is invalid (message names the field) or the file is not
            an ``mcpServers`` object.
    """
    validate_server(name, entry, source=str(path), scope="user")
    for key, value in entry.items():
        if key in ("env", "headers") and isinstance(value, dict):
            for field_name, text in value.items():
                if isinstance(text, str) and text.startswith("!"):
                    # Refused when the server starts; say so now (red-team finding).
                    expand_value(text, {}, where=f'server "{name}": {key}.{field_name}')

    def edit(servers: dict[str, Any]) -> bool:
        clash = next(
            (o for o in servers if o != name and mcp_namespace(o) == mcp_namespace(name)), None
        )
        if clash is not None:
            # The loader would refuse the pair (tool names would collide): refuse the
            # addition instead of writing a file that no longer loads.
            raise ValueError(f'server "{name}" conflicts with "{clash}" (tool names mcp__…)')
        replaced = name in servers
        servers[name] = entry
        return replaced

    return bool(_edit(path, edit))


def remove_server(path: Path, name: str) -> bool:
    """Remove server ``name`` from ``path``; False when the file does not define it."""
    if not path.exists():
        return False

    def edit(servers: dict[str, Any]) -> bool:
        return servers.pop(name, None) is not None

    return bool(_edit(path, edit))
