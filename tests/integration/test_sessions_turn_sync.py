"""The agent loop syncs its session file at turn boundaries, not per entry (issue 15
"Robustness"), and records pi 1.6.0's fields: a real tool worker runs a bash call
between two scripted turns."""

from __future__ import annotations

import json

from pi_sandbox.supervisor.agent.agent_session import AgentSession
from pi_sandbox.supervisor.agent.tool_pipeline import ToolPipeline
from pi_sandbox.supervisor.providers.scripted import ScriptedProvider
from pi_sandbox.supervisor.sessions import session_file
from pi_sandbox.supervisor.sessions.session_file import SessionWriter


async def test_one_fsync_per_turn_and_pi_s_fields_on_every_message(
    tmp_path, workspace, open_pool, monkeypatch
):
    script = tmp_path / "script.yaml"
    script.write_text(
        '- text: "looking"\n  tool_calls:\n    - name: bash\n      arguments: {command: "echo hi"}\n'
        '- text: "done"\n'
    )
    synced: list[int] = []
    real_fsync = session_file.os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(session_file.os, "fsync", counting_fsync)
    events: list[dict] = []

    async def emit(event: dict) -> None:
        events.append(event)

    async with open_pool() as pool:
        writer = SessionWriter.create(tmp_path / "agent", workspace)
        session = AgentSession(
            provider=ScriptedProvider(script),
            pool=pool,
            pipeline=ToolPipeline(pool=pool, policy=None, cwd=workspace, emit=emit),
            emit=emit,
            cwd=workspace,
            writer=writer,
            thinking_level="low",
        )
        writer.record_settings("scripted", "scripted", session.thinking_level)
        assert await session.run("go") == "done"
        entries_written = len(writer.entries)
        writer.close()
    # system, user, assistant, toolResult, assistant (+ the two settings entries) in
    # two turns: two syncs, one per turn, none per entry (close found nothing new).
    assert entries_written == 7 and len(synced) == 2
    records = [json.loads(line) for line in writer.path.read_text().splitlines()]
    assert [r["type"] for r in records[1:3]] == ["model_change", "thinking_level_change"]
    messages = [r["message"] for r in records if r["type"] == "message"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]
    # pi 1.6.0's leading system message: the prompt and the tools it declares.
    system = messages[0]
    assert system["content"] == "" and "pi-sandbox" in system["sections"]
    assert "bash" in {tool["name"] for tool in system["toolsAdded"]}
    first, result = messages[2], messages[3]
    assert first["api"] == "scripted" and first["thinkingLevel"] == "low"
    assert first["usage"]["cost"]["total"] == 0.0 and first["stopReason"] == "toolUse"
    assert isinstance(result["durationMs"], int) and result["durationMs"] >= 0
