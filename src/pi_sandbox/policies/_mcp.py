"""The ``mcp`` policy section and its combination across tiers (issue 19 §2).

::

    mcp:
      enabled: true            # false: no MCP server connects (any tier can forbid)
      remote: allow            # allow | deny: remote (HTTP) servers
      allow: [git, time]       # server names (fnmatch); when given, only these connect
      deny: [shell*]           # server names never connected
      commands: [uvx, /opt/mcp/*]   # when given, a stdio server's command must match:
                               # a bare name matches the program's base name, a
                               # pattern with "/" its resolved absolute path
      servers:                 # managed and user tiers only: pin a server's profile
        git:
          filesystem: read     # none | read | write: replaces what mcp.json asks
          network: [api.github.com]   # replaces the server's own allowlist
          env: [GITHUB_TOKEN]  # when given, only these configured variables pass

Combination (a lower tier only tightens, DESIGN §7): ``enabled`` and ``remote`` —
the strictest wins; ``allow`` lists intersect (a server must match every tier's
list); ``deny`` and ``commands`` accumulate (``commands``: every tier's list must
match); ``servers`` pins come from managed and user files only (a project file
pinning its own servers could grant itself the workspace), the highest tier's pin
of a name wins whole.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, field_validator

__all__ = ["McpPin", "McpRules", "McpSection", "combine_mcp"]


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("must not be null")
    return value


_Names = Annotated[tuple[Annotated[str, Field(min_length=1)], ...], BeforeValidator(_not_null)]


class McpPin(BaseModel):
    """A server's profile fixed by policy (``mcp.servers.<name>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    filesystem: Literal["none", "read", "write"] | None = None
    network: _Names | None = None
    env: _Names | None = None


class McpSection(BaseModel):
    """The ``mcp`` section of one policy file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: StrictBool = True
    remote: Literal["allow", "deny"] = "allow"
    allow: _Names | None = None
    deny: _Names = ()
    commands: _Names | None = None
    servers: Annotated[
        dict[str, Annotated[McpPin, BeforeValidator(_not_null)]], BeforeValidator(_not_null)
    ] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpPin]) -> dict[str, McpPin]:
        for name in servers:
            if not name or not all(c.isalnum() or c in "_-" for c in name):
                raise ValueError(f"invalid server name {name!r} (letters, digits, _ and -)")
        return servers


@dataclass(frozen=True)
class McpRules:
    """The effective ``mcp`` rules of a run.

    Attributes:
        disabled_by: the first file with ``enabled: false``, or None.
        remote_denied_by: the first file with ``remote: deny``, or None.
        allow: ``(patterns, file)`` per file that gave an allowlist.
        deny: ``(pattern, file)`` pairs.
        commands: ``(patterns, file)`` per file that gave a command list.
        pins: server name → ``(pin, file)`` (managed and user tiers).
    """

    disabled_by: str | None = None
    remote_denied_by: str | None = None
    allow: tuple[tuple[tuple[str, ...], str], ...] = ()
    deny: tuple[tuple[str, str], ...] = ()
    commands: tuple[tuple[tuple[str, ...], str], ...] = ()
    pins: dict[str, tuple[McpPin, str]] = field(default_factory=dict)

    def refusal(self, name: str, *, command: str | None, remote: bool) -> str | None:
        """Why server ``name`` may not connect, or None.

        Args:
            name: the server's name.
            command: a stdio server's resolved program path (None for remote ones).
            remote: whether it is a remote server.
        """
        if self.disabled_by is not None:
            return f"MCP is disabled by policy {self.disabled_by}"
        if remote and self.remote_denied_by is not None:
            return f"remote MCP servers are not allowed by policy {self.remote_denied_by}"
        for pattern, source in self.deny:
            if fnmatch.fnmatchcase(name, pattern):
                return f"server {name!r} is denied by policy {source} (mcp.deny: {pattern})"
        for patterns, source in self.allow:
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return f"server {name!r} is not in the mcp.allow list of policy {source}"
        if command is not None:
            for patterns, source in self.commands:
                if not any(_command_matches(p, command) for p in patterns):
                    return (
                        f"server {name!r}: command {command} is not in the mcp.commands "
                        f"list of policy {source}"
                    )
        return None

    def pin(self, name: str) -> tuple[McpPin, str] | None:
        """The policy's pinned profile of server ``name`` and its file, or None."""
        return self.pins.get(name)


def _command_matches(pattern: str, command: str) -> bool:
    if "/" in pattern:
        return fnmatch.fnmatchcase(os.path.realpath(command), pattern) or fnmatch.fnmatchcase(
            command, pattern
        )
    return fnmatch.fnmatchcase(os.path.basename(command), pattern)


def combine_mcp(files: Sequence[tuple[str, str, McpSection]]) -> tuple[McpRules, list[str]]:
    """Combine the ``mcp`` sections of ``(tier, path, section)`` (highest tier first).

    Returns:
        The rules and diagnostics (a project file's ``servers`` pins are ignored).
    """
    disabled = remote = None
    allow: list[tuple[tuple[str, ...], str]] = []
    deny: list[tuple[str, str]] = []
    commands: list[tuple[tuple[str, ...], str]] = []
    pins: dict[str, tuple[McpPin, str]] = {}
    diagnostics: list[str] = []
    for tier, path, section in files:
        if not section.enabled and disabled is None:
            disabled = path
        if section.remote == "deny" and remote is None:
            remote = path
        if section.allow is not None:
            allow.append((section.allow, path))
        deny.extend((pattern, path) for pattern in section.deny)
        if section.commands is not None:
            commands.append((section.commands, path))
        if section.servers:
            if tier == "project":
                diagnostics.append(
                    f"{path}: mcp.servers ignored: only managed and user policies pin "
                    "MCP server profiles"
                )
                continue
            for name, pin in section.servers.items():
                pins.setdefault(name, (pin, path))
    rules = McpRules(disabled, remote, tuple(allow), tuple(deny), tuple(commands), pins)
    return rules, diagnostics
