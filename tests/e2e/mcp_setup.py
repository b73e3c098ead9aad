"""Runs of the real ``pi`` CLI with MCP servers from ``tests/fixtures/mcp`` (issue 19).

`McpSetup` makes a private HOME, agent directory and workspace under ``tmp_path``,
writes ``mcp.json`` (user or project), a scripted-model script whose turns call
tools, and runs ``pi --mode json``. Security tests import it like `pi_runs`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from pi_runs import json_events, run_pi, scripted_argv, tool_texts

__all__ = ["FIXTURES", "HOSTILE", "WELL_BEHAVED", "McpSetup", "json_events", "tool_texts"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "mcp"
WELL_BEHAVED = FIXTURES / "well_behaved_server.py"
HOSTILE = FIXTURES / "hostile_server.py"


class McpSetup:
    """A workspace, a home and an agent directory for MCP runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = Path(os.path.realpath(tmp_path))
        self.ws = self.root / "ws"
        self.home = self.root / "home"
        self.agent = self.root / "agent"
        for path in (self.ws, self.home, self.agent):
            path.mkdir(exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "HOME": str(self.home), "PI_CODING_AGENT_DIR": str(self.agent)}
        env["PI_MANAGED_POLICY_DIR"] = str(self.root / "managed.d")
        return env

    def server(self, script: Path = WELL_BEHAVED, *args: str, **fields: Any) -> dict[str, Any]:
        """An ``mcpServers`` entry running ``script`` with this interpreter."""
        return {"command": sys.executable, "args": [str(script), *args], **fields}

    def user_servers(self, servers: dict[str, Any]) -> Path:
        path = self.agent / "mcp.json"
        path.write_text(json.dumps({"mcpServers": servers}, indent=2))
        return path

    def project_servers(self, servers: dict[str, Any]) -> Path:
        path = self.ws / ".pi" / "mcp.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"mcpServers": servers}, indent=2))
        return path

    def script(self, turns: list[list[tuple[str, dict[str, Any]]]]) -> Path:
        """A script: each turn a list of ``(tool name, arguments)``; then ``done``."""
        path = self.root / "script.yaml"
        document = [
            {"tool_calls": [{"name": n, "arguments": a} for n, a in turn]} for turn in turns
        ]
        path.write_text(yaml.safe_dump([*document, {"text": "done"}]))
        return path

    def run(
        self,
        turns: list[list[tuple[str, dict[str, Any]]]],
        *flags: str,
        timeout: float = 240,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = scripted_argv(self.script(turns), self.ws, "--mode", "json", "--no-session", *flags)
        return run_pi(argv, env=env or self.env, timeout=timeout)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``pi ARGS…`` in the workspace (``pi mcp …``)."""
        return run_pi(
            [sys.executable, "-m", "pi_sandbox.cli", *args],
            env=self.env,
            cwd=self.ws,
            timeout=timeout,
        )


def results(stdout: str) -> dict[str, list[dict[str, Any]]]:
    """``tool_execution_end`` events by tool name, in order."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for event in json_events(stdout):
        if event["type"] == "tool_execution_end":
            by_name.setdefault(event["toolName"], []).append(event)
    return by_name


def text_of(event: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in event["result"]["content"])


def messages(stdout: str, kind: str) -> list[str]:
    """The ``message`` of every record of ours of kind ``kind`` (``warning``,
    ``notice``: the ``pisandbox_warning`` / ``pisandbox_notice`` records)."""
    return [e.get("message", "") for e in json_events(stdout) if e["type"] == f"pisandbox_{kind}"]
