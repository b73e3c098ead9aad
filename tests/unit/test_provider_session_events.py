"""The session's side of streaming (issue 16): provider events become pi's ``message_update``
records, the thinking level reaches the provider, and hold-back still applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pi_sandbox.supervisor.agent.agent_session import AgentSession
from pi_sandbox.supervisor.providers.base import AssistantTurn
from pi_sandbox.supervisor.sessions.session_file import SessionWriter

USAGE = {"input": 7, "output": 1}


class FakePool:
    """Just what ``AgentSession._request`` asks of a pool: no extensions, or a
    ``message_end`` subscriber."""

    def __init__(self, subscribed: set[str] | None = None) -> None:
        self._subscribed = subscribed or set()
        self.tools: dict[str, Any] = {}

    def subscribed(self, event: str) -> bool:
        return event in self._subscribed

    def required_failure(self) -> str | None:
        return None

    async def dispatch(self, event: str, payload: dict[str, Any]) -> None:
        return None


class EventProvider:
    name, model = "fake", "fake-1"

    def __init__(self, *, events: bool = True) -> None:
        self.events = events
        self.thinking_level: str | None = None

    async def complete(self, *, on_text_delta=None, on_event=None, thinking_level="off", **_):
        self.thinking_level = thinking_level
        if self.events and on_event is not None:
            await on_event({"type": "thinking_start", "contentIndex": 0, "usage": USAGE})
            await on_event({"type": "thinking_delta", "contentIndex": 0, "delta": "hmm"})
            await on_event({"type": "text_start", "contentIndex": 1})
            await on_event({"type": "text_delta", "contentIndex": 1, "delta": "Hi"})
        if on_text_delta is not None:
            await on_text_delta("Hi")
        return AssistantTurn(text="Hi", provider="fake", model="fake-1")


async def updates(tmp_path: Path, provider: EventProvider, **session: Any) -> list[dict]:
    emitted: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        emitted.append(event)

    agent = AgentSession(
        provider=provider,  # type: ignore[arg-type]
        pool=session.pop("pool", FakePool()),  # type: ignore[arg-type]
        pipeline=None,  # type: ignore[arg-type]
        emit=emit,
        cwd=tmp_path,
        writer=SessionWriter.in_memory(tmp_path),
        active_tools=list,
        system_prompt=lambda: "",
        **session,
    )
    await agent._request()
    return [e for e in emitted if e["type"] == "message_update"]


async def test_each_provider_event_is_a_message_update_with_usage_and_nothing_else(
    tmp_path: Path,
) -> None:
    records = await updates(tmp_path, EventProvider())

    assert [r["assistantMessageEvent"]["type"] for r in records] == [
        "thinking_start",
        "thinking_delta",
        "text_start",
        "text_delta",
    ]
    assert "usage" not in records[0]["assistantMessageEvent"]  # lifted to the record
    assert all(r["usage"]["input"] == 7 and r["usage"]["totalTokens"] == 8 for r in records)
    # pi's record: type, usage, assistantMessageEvent; our old `delta` copy is gone.
    assert all(set(r) == {"type", "usage", "assistantMessageEvent"} for r in records)


async def test_a_provider_that_streams_no_events_still_gives_pi_shaped_text_deltas(
    tmp_path: Path,
) -> None:
    records = await updates(tmp_path, EventProvider(events=False))

    assert [r["assistantMessageEvent"] for r in records] == [
        {"type": "text_delta", "contentIndex": 0, "delta": "Hi"}
    ]
    assert all(set(r) == {"type", "usage", "assistantMessageEvent"} for r in records)


async def test_nothing_streams_while_a_message_end_hook_may_redact(tmp_path: Path) -> None:
    pool = FakePool(subscribed={"message_end"})

    assert await updates(tmp_path, EventProvider(), pool=pool) == []
    assert await updates(tmp_path, EventProvider(events=False), pool=pool) == []


async def test_the_session_s_thinking_level_reaches_the_provider(tmp_path: Path) -> None:
    default, chosen = EventProvider(), EventProvider()

    await updates(tmp_path, default)
    await updates(tmp_path, chosen, thinking_level="high")

    assert (default.thinking_level, chosen.thinking_level) == ("off", "high")
