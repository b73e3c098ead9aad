"""The leading ``system`` message of a prompt (issue 17 §1, pi docs message-types.md
"SystemMessage"): declared when the system prompt or the tools differ from what the
session's transcript says, nothing when they do not, and pi's own declarations in a
session pi started are cleared and replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pi_sandbox.supervisor.agent.agent_session import SYSTEM_PROMPT_SECTION, AgentSession
from pi_sandbox.supervisor.providers.base import ToolDefinition
from pi_sandbox.supervisor.sessions.session_file import SessionWriter

READ = ToolDefinition("read", "Read a file", {"type": "object"})
BASH = ToolDefinition("bash", "Run a command", {"type": "object"})


def session(tmp_path: Path, tools: list[ToolDefinition], prompt: str = "PROMPT") -> AgentSession:
    return AgentSession(
        provider=None,  # type: ignore[arg-type]
        pool=None,  # type: ignore[arg-type]
        pipeline=None,  # type: ignore[arg-type]
        emit=None,  # type: ignore[arg-type]
        cwd=tmp_path,
        writer=SessionWriter.in_memory(tmp_path),
        active_tools=lambda: list(tools),
        system_prompt=lambda: prompt,
    )


def test_a_new_session_declares_its_prompt_and_every_tool(tmp_path: Path) -> None:
    message = session(tmp_path, [READ, BASH]).system_message()
    assert message is not None
    assert message["role"] == "system" and message["content"] == ""
    assert message["sections"] == {SYSTEM_PROMPT_SECTION: "PROMPT"}
    assert [t["name"] for t in message["toolsAdded"]] == ["read", "bash"]
    assert "toolsRemoved" not in message and isinstance(message["timestamp"], int)


def test_nothing_is_declared_again_while_prompt_and_tools_are_unchanged(tmp_path: Path) -> None:
    agent = session(tmp_path, [READ, BASH])
    agent.writer.append_message(agent.system_message())
    assert agent.system_message() is None


def test_a_changed_tool_set_declares_only_the_difference(tmp_path: Path) -> None:
    agent = session(tmp_path, [READ, BASH])
    agent.writer.append_message(agent.system_message())
    changed = ToolDefinition("read", "Read a file, better", {"type": "object"})
    agent.active_tools = lambda: [changed]
    message = agent.system_message()
    assert message is not None and "sections" not in message
    assert message["toolsAdded"] == [
        {"name": "read", "description": "Read a file, better", "parameters": {"type": "object"}}
    ]
    assert message["toolsRemoved"] == [{"name": "bash"}]


def test_pis_own_sections_and_tools_are_cleared_in_a_session_pi_started(tmp_path: Path) -> None:
    agent = session(tmp_path, [READ])
    pi_system: dict[str, Any] = {
        "role": "system",
        "content": "",
        "sections": {"preamble": "You are pi", "tools": "<tools>…</tools>"},
        "toolsAdded": [
            {"name": "read", "description": "pi's read", "parameters": {}},
            {"name": "write", "description": "pi's write", "parameters": {}},
        ],
        "timestamp": 1,
    }
    agent.writer.append_message(pi_system)
    message = agent.system_message()
    assert message is not None
    assert message["sections"] == {
        SYSTEM_PROMPT_SECTION: "PROMPT",
        "preamble": None,
        "tools": None,
    }
    assert [t["name"] for t in message["toolsAdded"]] == ["read"]
    assert message["toolsRemoved"] == [{"name": "write"}]
