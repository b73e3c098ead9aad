"""Long sessions stay fast (issue 20 target 3): what is derived from a session's
current branch before each request — the branch itself, its model context, the
provider form of it, the token estimate, the declared prompt and tools, the
``tool_search`` activations — is kept up to date as entries are appended instead
of being rebuilt from the whole session per request, and always equals a rebuild.

The work is counted (entries and messages looked at), not timed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio

from pi_sandbox.supervisor.agent import agent_session
from pi_sandbox.supervisor.agent.agent_session import AgentSession, LlmContext, llm_messages
from pi_sandbox.supervisor.agent.tool_exposure import activations_on_branch, replay_activations
from pi_sandbox.supervisor.providers.base import AssistantTurn
from pi_sandbox.supervisor.sessions import compaction, session_file
from pi_sandbox.supervisor.sessions.compaction import estimate_context_tokens
from pi_sandbox.supervisor.sessions.compaction_runner import Compactor
from pi_sandbox.supervisor.sessions.session_file import SessionWriter, context_messages

USAGE = {"input": 50, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 55}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(
    call_id: str | None = None, usage: dict[str, Any] | None = None, stop: str = "toolUse"
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "on it"}]
    if call_id is not None:
        content.append(
            {"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": "true"}}
        )
    return {
        "role": "assistant",
        "content": content,
        "usage": usage or {},
        "stopReason": stop,
        "timestamp": 2,
    }


def result(call_id: str) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": "(no output)"}],
        "isError": False,
        "timestamp": 3,
    }


def walked(writer: SessionWriter) -> list[dict[str, Any]]:
    """The current branch walked from the tree, as before the kept branch existed."""
    return writer._walk(writer.last_id)


def without_stamps(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Synthetic "No result provided" results are stamped when built: compare the rest."""
    return [
        {k: v for k, v in m.items() if k != "timestamp"}
        if m.get("content") == [{"type": "text", "text": "No result provided"}]
        else m
        for m in messages
    ]


# --- the kept branch ----------------------------------------------------------------------


def test_branch_tail_gives_only_the_entries_appended_since_the_mark(tmp_path: Path) -> None:
    writer = SessionWriter.in_memory(tmp_path)
    writer.append_message(user("one"))
    mark, entries, whole = writer.branch_tail(None)
    assert whole and len(entries) == 1

    second = writer.append_message(user("two"))
    third = writer.append_custom("state", {"n": 1})
    mark, entries, whole = writer.branch_tail(mark)

    assert not whole
    assert [e["id"] for e in entries] == [second.id, third["id"]]
    assert writer.branch() == walked(writer)


def test_branch_tail_starts_over_when_the_leaf_moves_elsewhere(tmp_path: Path) -> None:
    writer = SessionWriter.in_memory(tmp_path)
    first = writer.append_message(user("one"))
    writer.append_message(user("two"))
    mark, _, _ = writer.branch_tail(None)

    writer.move_leaf(first.id)
    other = writer.append_message(user("two, again"))
    mark, entries, whole = writer.branch_tail(mark)
    assert whole
    assert [e["id"] for e in entries] == [first.id, other.id]

    writer.last_id = None  # navigation assigns the leaf directly (pi's resetLeaf)
    root = writer.append_message(user("a new root"))
    _, entries, whole = writer.branch_tail(mark)
    assert whole and [e["id"] for e in entries] == [root.id]
    assert writer.branch() == walked(writer)


def test_the_kept_context_equals_a_rebuild_after_every_kind_of_append(tmp_path: Path) -> None:
    """Messages, custom messages, branch summaries, compactions (with a kept range
    and a checkpoint), context edits and leaf moves, in a seeded random order: after
    each, the kept context equals `context_messages` of the walked branch."""
    rng = random.Random(20)
    writer = SessionWriter(tmp_path / "s.jsonl", session_file.SessionHeader(id="s", cwd="/"))
    ids: list[str] = []
    generations = set()
    for step in range(600):
        kind = rng.random()
        if kind < 0.55 or not ids:
            ids.append(writer.append_message(user(f"m{step}")).id)
        elif kind < 0.65:
            ids.append(writer.append_custom_message("note", f"c{step}", True)["id"])
        elif kind < 0.7:
            ids.append(writer.append_custom("state", step)["id"])
        elif kind < 0.75:
            ids.append(
                writer.append_branch_summary(ids[-1], f"b{step}", parent_id=rng.choice(ids))["id"]
            )
        elif kind < 0.8:
            checkpoint = {"role": "system", "content": f"p{step}", "timestamp": 1}
            ids.append(
                writer.append_compaction(
                    f"s{step}", rng.choice(ids), 10, system_message=checkpoint
                )["id"]
            )
        elif kind < 0.87:
            replacement = rng.choice([None, {"content": f"edited {step}"}])
            ids.append(
                writer._append(
                    {
                        "type": "context_edit",
                        "targetId": rng.choice(ids),
                        "replacement": replacement,
                    }
                )["id"]
            )
        else:
            writer.move_leaf(rng.choice(ids))
        generation, kept = writer.context()
        generations.add(generation)
        assert kept == context_messages(walked(writer)), f"step {step}"
        assert writer.messages() == kept and writer.messages() is not kept
    assert len(generations) > 20  # rebuilt after compactions, edits and moves
    writer.close()


def test_a_request_converts_only_what_was_appended_since_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 400 tool turns, each request (with the system-message check and the
    compaction threshold check before it) looks at each entry and message a constant
    number of times in all: per request, the work does not grow with the session.
    What the provider receives equals ``llm_messages`` of a full rebuild."""
    counts = {"entry": 0, "llm": 0, "estimate": 0, "walk": 0}

    def counting(key: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        session_file, "_entry_messages", counting("entry", session_file._entry_messages)
    )
    monkeypatch.setattr(agent_session, "_llm_message", counting("llm", agent_session._llm_message))
    monkeypatch.setattr(
        compaction, "entry_messages", counting("estimate", compaction.entry_messages)
    )
    monkeypatch.setattr(SessionWriter, "_walk", counting("walk", SessionWriter._walk))

    sent: list[list[dict[str, Any]]] = []

    class Recording:
        name, model = "scripted", "scripted"

        async def complete(self, *, messages: list[dict[str, Any]], **_: Any) -> AssistantTurn:
            sent.append(messages)
            return AssistantTurn(text="ok", provider="scripted", model="scripted")

    class Pool:
        tools: dict[str, Any] = {}

        def subscribed(self, event: str) -> bool:
            return False

        def required_failure(self) -> None:
            return None

        async def dispatch(self, event: str, payload: dict[str, Any]) -> None:
            return None

    async def emit(event: dict[str, Any]) -> None:
        return None

    writer = SessionWriter.in_memory(tmp_path)
    session = AgentSession(
        provider=Recording(),  # type: ignore[arg-type]
        pool=Pool(),  # type: ignore[arg-type]
        pipeline=None,  # type: ignore[arg-type]
        emit=emit,
        cwd=tmp_path,
        writer=writer,
        active_tools=list,
        system_prompt=lambda: "prompt",
        compactor=Compactor(context_window=10**9),
    )
    turns = 400

    async def run() -> None:
        writer.append_message(user("go"))
        for turn in range(turns):
            # The scripted model reports no usage: the estimate has no usage to stop at.
            writer.append_message(assistant(f"c{turn}"))
            writer.append_message(result(f"c{turn}"))
            if (system := session.system_message()) is not None:
                writer.append_message(system)
            await session._request()

    trio.run(run)

    entries = len(writer.entries)
    assert entries == 2 * turns + 2
    # Linear in the session: a per-request rebuild would be ~turns * entries / 2 each.
    assert counts["entry"] <= 2 * entries
    assert counts["llm"] <= 2 * entries
    assert counts["estimate"] <= 2 * entries
    assert counts["walk"] <= 2
    assert without_stamps(sent[-1]) == without_stamps(
        llm_messages(context_messages(walked(writer)))
    )
    assert len(sent) == turns


def test_control_a_per_request_rebuild_is_what_the_count_would_catch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control for the test above: rebuilding the context from the walked branch per
    request (what was done before) counts quadratically."""
    counted = 0
    original = session_file._entry_messages

    def counting(record: dict[str, Any]) -> list[dict[str, Any]]:
        nonlocal counted
        counted += 1
        return original(record)

    monkeypatch.setattr(session_file, "_entry_messages", counting)
    writer = SessionWriter.in_memory(tmp_path)
    for turn in range(400):
        writer.append_message(assistant(f"c{turn}"))
        writer.append_message(result(f"c{turn}"))
        context_messages(walked(writer))
    assert counted > 50 * len(writer.entries)


# --- the derived values equal a rebuild -----------------------------------------------------


def test_the_provider_messages_fed_in_pieces_equal_a_whole_conversion() -> None:
    """Unanswered calls (mid-list and at the end), failed turns, custom and summary
    messages: fed in random pieces, the result equals ``llm_messages`` of all, and a
    mid-list "No result provided" is stamped anew on each result."""
    rng = random.Random(7)
    messages: list[dict[str, Any]] = []
    for i in range(300):
        roll = rng.random()
        if roll < 0.3:
            messages.append(assistant(f"c{i}"))
        elif roll < 0.55 and any(m.get("role") == "assistant" for m in messages):
            messages.append(result(f"c{rng.randrange(i)}"))
        elif roll < 0.65:
            messages.append(assistant(stop=rng.choice(["error", "aborted", "stop"])))
        elif roll < 0.75:
            messages.append({"role": "custom", "content": f"x{i}", "timestamp": 4})
        elif roll < 0.8:
            messages.append({"role": "branchSummary", "summary": f"b{i}", "timestamp": 5})
        elif roll < 0.85:
            messages.append({"role": "system", "content": "", "timestamp": 6})
        else:
            messages.append(user(f"u{i}"))
    converter = LlmContext()
    fed = 0
    while fed < len(messages):
        step = rng.randint(0, 17)
        converter.feed(messages[fed : fed + step])
        fed = min(len(messages), fed + step)
        whole = llm_messages(messages[:fed])
        assert without_stamps(converter.result()) == without_stamps(whole)
    synthetic = [m for m in converter.result() if m.get("isError")]
    assert synthetic, "the mix must leave calls unanswered"
    first, second = converter.result(), converter.result()
    assert all(a is not b for a, b in zip(first, second, strict=True) if a.get("isError"))


def test_the_extended_token_estimate_equals_a_whole_estimate(tmp_path: Path) -> None:
    """Turns with and without usage, and a compaction in between: the Compactor's
    kept estimate equals `estimate_context_tokens` of the walked branch each time."""
    rng = random.Random(3)
    writer = SessionWriter.in_memory(tmp_path)
    compactor = Compactor()
    ids = [writer.append_message(user("go")).id]
    for turn in range(300):
        usage = USAGE if rng.random() < 0.1 else None
        ids.append(writer.append_message(assistant(f"c{turn}", usage)).id)
        ids.append(writer.append_message(result(f"c{turn}")).id)
        if rng.random() < 0.03:
            writer.append_compaction("summary " * 40, rng.choice(ids[-20:]), 100)
        if rng.random() < 0.02:
            writer.move_leaf(rng.choice(ids))
        assert compactor.estimate(writer) == estimate_context_tokens(walked(writer))


def test_replayed_activations_in_pieces_equal_the_whole_replay() -> None:
    rng = random.Random(5)
    entries = []
    for i in range(200):
        message: dict[str, Any] = {"role": "system", "content": ""}
        if rng.random() < 0.6:
            message["toolsAdded"] = [{"name": f"t{rng.randrange(12)}"}]
        else:
            message["toolsRemoved"] = [{"name": f"t{rng.randrange(12)}"}]
        entries.append({"type": "message", "id": str(i), "message": message})
    active: dict[str, None] = {}
    for start in range(0, len(entries), 7):
        replay_activations(active, entries[start : start + 7])
        assert list(active) == activations_on_branch(entries[: start + 7])


def test_the_declared_prompt_and_tools_follow_the_branch(tmp_path: Path) -> None:
    """`AgentSession.system_message` declares a change once; after a move to a branch
    that never declared it, it declares it again."""

    class Pool:
        tools: dict[str, Any] = {}

    writer = SessionWriter.in_memory(tmp_path)
    root = writer.append_message(user("go"))
    prompt = ["first"]
    session = AgentSession(
        provider=None,  # type: ignore[arg-type]
        pool=Pool(),  # type: ignore[arg-type]
        pipeline=None,  # type: ignore[arg-type]
        emit=None,  # type: ignore[arg-type]
        cwd=tmp_path,
        writer=writer,
        active_tools=list,
        system_prompt=lambda: prompt[0],
    )
    declared = session.system_message()
    assert declared is not None and declared["sections"] == {"pi-sandbox": "first"}
    writer.append_message(declared)
    assert session.system_message() is None
    prompt[0] = "second"
    changed = session.system_message()
    assert changed is not None and changed["sections"] == {"pi-sandbox": "second"}
    writer.append_message(changed)
    assert session.system_message() is None
    writer.move_leaf(root.id)
    again = session.system_message()
    assert again is not None and again["sections"] == {"pi-sandbox": "second"}
