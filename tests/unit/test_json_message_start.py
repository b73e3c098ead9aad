"""``message_start`` for every message (issue 17 §1, pi docs json.md) without
undoing issue 13 §1: while a ``message_end`` hook may redact a message, its
``message_start`` shows none of what the hook could take out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from pi_sandbox.supervisor.agent.agent_session import AgentSession
from pi_sandbox.supervisor.sessions.session_file import SessionWriter

SENTINEL = "SENTINEL-7f3a-tool-output"


class Pool:
    def __init__(self, subscribed: set[str]) -> None:
        self._subscribed = subscribed

    def subscribed(self, event: str) -> bool:
        return event in self._subscribed

    async def dispatch(self, event: str, payload: dict[str, Any]) -> None:
        return None


def committed(tmp_path: Path, subscribed: set[str]) -> list[dict[str, Any]]:
    emitted: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        emitted.append(event)

    agent = AgentSession(
        provider=None,  # type: ignore[arg-type]
        pool=Pool(subscribed),  # type: ignore[arg-type]
        pipeline=None,  # type: ignore[arg-type]
        emit=emit,
        cwd=tmp_path,
        writer=SessionWriter.in_memory(tmp_path),
    )
    result = {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "bash",
        "content": [{"type": "text", "text": SENTINEL}],
        "details": {"note": SENTINEL},
        "isError": False,
        "timestamp": 1,
    }
    trio.run(agent.commit, result)
    return emitted


@pytest.mark.parametrize("hooked", [True, False])
def test_message_start_shows_no_content_while_a_message_end_hook_may_redact(
    tmp_path: Path, hooked: bool
) -> None:
    emitted = committed(tmp_path, {"message_end"} if hooked else set())
    assert [e["type"] for e in emitted] == ["message_start", "message_end"]
    start = emitted[0]["message"]
    assert start["role"] == "toolResult" and start["toolCallId"] == "c1"
    if hooked:
        assert start["content"] == [] and "details" not in start
        assert SENTINEL not in json.dumps(start)
    else:  # the control: without such a hook, message_start is the whole message
        assert start == emitted[1]["message"] and SENTINEL in json.dumps(start)
