"""Supervisor-executed tools registered through `SessionHost.expose` (the way MCP tools
join the session, issue 19) with ``deferred`` and ``codemode`` exposure: found by
``tool_search``, called by the next turn, called from a sandboxed codemode script —
every call through the tool pipeline, with the codemode call as parent.

A test double stands in for an MCP server: `HostTool`s whose ``execute`` records its
calls. The session, pool, pipeline, sandboxed codemode worker and scripted model are
real.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio
import yaml

from pi_sandbox.protocol.messages import ToolDefinitionWire
from pi_sandbox.supervisor.agent.agent_session import AgentSession
from pi_sandbox.supervisor.agent.tool_pipeline import HostTool, ToolPipeline
from pi_sandbox.supervisor.agent.tool_selection import ToolSelection
from pi_sandbox.supervisor.extensions.session_host import SessionHost
from pi_sandbox.supervisor.providers.scripted import ScriptedProvider
from pi_sandbox.supervisor.sessions.session_file import SessionWriter
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

WAIT_S = 120.0


class FakeServer:
    """Two tools of a pretend MCP server ``fake``; remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def tool(self, name: str, description: str, **properties: str) -> HostTool:
        async def execute(call: Any, arguments: dict[str, Any], session: Any) -> dict[str, Any]:
            self.calls.append((name, arguments))
            return {
                "content": [{"type": "text", "text": f"{name} says {arguments}"}],
                "details": {},
                "is_error": False,
            }

        definition = ToolDefinitionWire(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {k: {"type": v} for k, v in properties.items()},
            },
        )
        return HostTool(definition, execute, source="mcp:fake")


async def run_session(
    tmp_path: Path, turns: list[dict[str, Any]], selection: ToolSelection
) -> tuple[list[dict[str, Any]], FakeServer, SessionHost]:
    workspace = Path(os.path.realpath(tmp_path)) / "ws"
    workspace.mkdir()
    (tmp_path / "home").mkdir()
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(turns))
    config = PoolConfig(
        cwd=workspace, agent_dir=tmp_path / "agent", home=tmp_path / "home", sandbox=True
    )
    pool = WorkerPool(config)
    events: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        events.append(event)

    server = FakeServer()
    async with trio.open_nursery() as nursery:
        try:
            with trio.fail_after(WAIT_S):
                await pool.start(nursery, [])
                session = AgentSession(
                    provider=ScriptedProvider(script),
                    pool=pool,
                    pipeline=ToolPipeline(pool=pool, policy=None, cwd=workspace, emit=emit),
                    emit=emit,
                    cwd=workspace,
                    writer=SessionWriter.in_memory(workspace),
                )
                host = SessionHost(
                    pool=pool,
                    session=session,
                    emit=emit,
                    audit=lambda record: None,
                    discover=lambda: ([], []),
                    new_writer=lambda: SessionWriter.in_memory(workspace),
                    tools_filter=selection,
                )
                host.expose(
                    server.tool("mcp__fake__lookup", "Look up a customer record", id="string"),
                    "deferred",
                )
                host.expose(server.tool("mcp__fake__secret", "Read the vault"), "codemode")
                host.expose(server.tool("mcp__fake__gone", "Customer archive"), "hidden")
                await host.start(nursery)
                await host.submit("go")
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()
    return events, server, host


def ends(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "tool_execution_end" and e["toolName"] == name]


def text_of(event: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in event["result"]["content"])


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_an_exposed_deferred_tool_is_found_loaded_and_called_and_scripts_reach_both(
    tmp_path, require_bwrap
):
    script = (
        "print(tools.mcp__fake__secret())\n"
        "print(tools.mcp__fake__lookup(id='7'))\n"
        "print(call_tool('mcp__fake__gone')['content'][0]['text'])\n"
    )
    events, server, host = await run_session(
        tmp_path,
        [
            call("mcp__fake__lookup", id="0"),
            call("tool_search", query="customer record"),
            call("mcp__fake__lookup", id="1"),
            call("codemode", script=script),
            {"text": "done"},
        ],
        ToolSelection.from_options(),
    )
    lookups = [e for e in ends(events, "mcp__fake__lookup") if "parentToolCallId" not in e]
    # Before tool_search: not declared, not callable. After: called.
    assert lookups[0]["isError"] and "not found" in text_of(lookups[0])
    assert ends(events, "tool_search")[0]["result"]["details"]["added"] == ["mcp__fake__lookup"]
    assert not lookups[1]["isError"]
    (codemode,) = [e for e in ends(events, "codemode") if "parentToolCallId" not in e]
    assert not codemode["isError"], text_of(codemode)
    assert "mcp__fake__secret says {}" in text_of(codemode)
    assert "mcp__fake__lookup says {'id': '7'}" in text_of(codemode)
    assert "Tool mcp__fake__gone not found" in text_of(codemode)
    assert server.calls == [
        ("mcp__fake__lookup", {"id": "1"}),
        ("mcp__fake__secret", {}),
        ("mcp__fake__lookup", {"id": "7"}),
    ]
    nested = [e for e in events if e.get("parentToolCallId") == codemode["toolCallId"]]
    assert {e["toolName"] for e in nested} == {
        "mcp__fake__secret",
        "mcp__fake__lookup",
        "mcp__fake__gone",
    }
    # codemode-exposed tools are never declared to the model.
    assert "mcp__fake__secret" not in [d.name for d in host.active_definitions()]


async def test_an_mcp_entry_in_tools_makes_other_servers_tools_unreachable_even_from_scripts(
    tmp_path, require_bwrap
):
    events, server, _ = await run_session(
        tmp_path,
        [
            call("tool_search", query="customer record"),
            call("codemode", script="print(call_tool('mcp__fake__secret')['is_error'])"),
            {"text": "done"},
        ],
        ToolSelection.from_options(tools="read,codemode,tool_search,mcp__other__*"),
    )
    assert ends(events, "tool_search")[0]["result"]["details"]["matches"] == []
    (codemode,) = [e for e in ends(events, "codemode") if "parentToolCallId" not in e]
    assert "True" in text_of(codemode)
    assert server.calls == []
