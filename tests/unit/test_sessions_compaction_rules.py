"""Compaction's rules (issue 15, pi docs compaction.md) over generated sessions and
hand-made shapes: cut points, token counts, settings, the overflow classifier, and
the runner with an in-memory session (real `SessionWriter`, a fake provider and pool)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.base import AssistantTurn
from pi_sandbox.supervisor.providers.overflow import is_context_overflow
from pi_sandbox.supervisor.sessions.compaction import (
    calculate_context_tokens,
    context_projection,
    entry_messages,
    estimate_context_tokens,
    estimate_tokens,
    find_cut_point,
    prepare_compaction,
    serialize_conversation,
    should_compact,
)
from pi_sandbox.supervisor.sessions.compaction_runner import CompactionCancelledError, Compactor
from pi_sandbox.supervisor.sessions.compaction_settings import (
    CompactionSettings,
    CompactionSettingsError,
    load_compaction_config,
)
from pi_sandbox.supervisor.sessions.session_file import SessionWriter

# --- building sessions ---------------------------------------------------------------------


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(
    text: str = "", calls: list[tuple[str, str, dict[str, Any]]] = (), usage=None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    message = {"role": "assistant", "content": content, "stopReason": "stop", "timestamp": 1}
    if usage is not None:
        message["usage"] = usage
    return message


def result(call_id: str, text: str) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 1,
    }


def generated_session(rng: random.Random, writer: SessionWriter, spans: int) -> None:
    """Append ``spans`` user-message spans of random shape to ``writer``: each a user
    message (sometimes a bash execution or an extension message instead), assistant
    turns with 0–3 tool calls and their results (sometimes in another order), and
    metadata entries here and there."""
    for span in range(spans):
        kind = rng.random()
        if kind < 0.1:
            writer.append_message(
                {
                    "role": "bashExecution",
                    "command": "ls",
                    "output": "x" * rng.randint(0, 400),
                    "exitCode": 0,
                    "timestamp": 1,
                }
            )
        elif kind < 0.15:
            writer._append(
                {
                    "type": "custom_message",
                    "customType": "ext",
                    "content": "note " * rng.randint(1, 50),
                    "display": True,
                }
            )
        writer.append_message(user(f"USER-{span}-{rng.random()} " + "u" * rng.randint(0, 600)))
        for turn in range(rng.randint(0, 4)):
            calls = [
                (f"c{span}_{turn}_{n}", rng.choice(["read", "bash", "edit"]), {"path": f"f{n}.py"})
                for n in range(rng.randint(0, 3))
            ]
            writer.append_message(assistant("a" * rng.randint(0, 300), calls))
            order = list(calls)
            if rng.random() < 0.3:
                rng.shuffle(order)
            for call_id, _, _ in order:
                writer.append_message(result(call_id, "r" * rng.randint(0, 900)))
            if rng.random() < 0.2:
                writer.append_label(writer.last_id, "mark")
        if rng.random() < 0.5:
            writer.append_message(assistant("final " + "z" * rng.randint(0, 200)))
        if rng.random() < 0.1:
            writer.append_model_change("openai", f"m{span}")


# --- a fake session for the runner -------------------------------------------------------


@dataclass
class FakeProvider:
    name: str = "openai"
    model: str = "x"
    summary: str = "SUMMARY"
    fail: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def complete(self, *, system_prompt, messages, tools, **_: Any) -> AssistantTurn:
        self.requests.append({"system": system_prompt, "messages": messages, "tools": tools})
        if self.fail:
            raise ProviderError("openai/x: HTTP 500: server exploded")
        return AssistantTurn(text=self.summary, usage={"input": 100, "output": 20})


@dataclass
class Outcome:
    state: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)
    failure: str | None = None


@dataclass
class FakePool:
    before_compact: Outcome | None = None
    dispatched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def subscribed(self, event: str) -> bool:
        return event == "session_before_compact" and self.before_compact is not None

    async def dispatch(self, event: str, payload: dict[str, Any], **_: Any) -> Outcome:
        self.dispatched.append((event, payload))
        assert self.before_compact is not None
        return self.before_compact


@dataclass
class FakeSession:
    writer: SessionWriter
    provider: FakeProvider = field(default_factory=FakeProvider)
    pool: FakePool = field(default_factory=FakePool)
    running: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    notified: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    async def notify(self, event: str, payload: dict[str, Any], **_: Any) -> None:
        self.notified.append((event, payload))


def compactor(keep: int, reserve: int = 16384, enabled: bool = True) -> Compactor:
    from pi_sandbox.supervisor.sessions.compaction_settings import CompactionConfig

    return Compactor(config=CompactionConfig(base=CompactionSettings(enabled, reserve, keep)))


# --- invariants ---------------------------------------------------------------------------


def check_model_view(writer: SessionWriter, last_user_text: str) -> None:
    """What the model sees after compaction: every tool result follows its tool call;
    the last user message is there, as a message or verbatim inside the summary."""
    seen_calls: set[str] = set()
    visible_text = []
    for message in [m for _, m in context_projection(writer.branch())]:
        if message["role"] == "assistant":
            seen_calls |= {b["id"] for b in message["content"] if b["type"] == "toolCall"}
        if message["role"] == "toolResult":
            assert message["toolCallId"] in seen_calls, "a tool result without its call"
        visible_text.append(json.dumps(message.get("content") or message.get("summary")))
    assert json.dumps(last_user_text)[1:-1] in "".join(visible_text), "the last user message"


@pytest.mark.parametrize("seed", range(60))
async def test_generated_sessions_keep_tool_calls_with_results_and_the_last_user_message(seed):
    rng = random.Random(seed)
    writer = SessionWriter.in_memory(Path("/w"))
    session = FakeSession(writer)
    keep = rng.choice([1, 30, 200, 800, 3000])
    runner = compactor(keep)
    for _round in range(rng.randint(1, 4)):
        generated_session(rng, writer, rng.randint(1, 6))
        branch = writer.branch()
        last_user = next(
            m for _, m in reversed(context_projection(branch)) if m.get("role") == "user"
        )
        last_user_text = last_user["content"][0]["text"]
        preparation = prepare_compaction(branch, runner.settings_for(session))
        compacted = await runner.compact(session, reason="manual")
        assert (compacted is None) == (preparation is None)
        if preparation is not None:
            kept = branch[preparation.first_kept_index]
            assert kept["id"] == preparation.first_kept_entry_id
            assert all(m.get("role") != "toolResult" for m in entry_messages(kept))
            entry = writer.by_id[writer.last_id]
            assert entry["type"] == "compaction" and entry["firstKeptEntryId"] is not None
        check_model_view(writer, last_user_text)
        # Without provider usage the context size is the estimate of what the model sees.
        projection = context_projection(writer.branch())
        estimate = estimate_context_tokens(writer.branch())
        assert estimate.tokens == sum(estimate_tokens(m) for _, m in projection)


@pytest.mark.parametrize("seed", range(40))
def test_a_cut_never_separates_a_tool_result_from_its_call(seed):
    rng = random.Random(1000 + seed)
    writer = SessionWriter.in_memory(Path("/w"))
    generated_session(rng, writer, rng.randint(1, 8))
    branch = writer.branch()
    for keep in (0, 1, 5, 50, 300, 2000, 10**6):
        cut = find_cut_point(branch, 0, len(branch), keep)
        call_at = {}
        for index, entry in enumerate(branch):
            for message in entry_messages(entry):
                if message["role"] == "assistant":
                    for block in message["content"]:
                        if block["type"] == "toolCall":
                            call_at[block["id"]] = index
                if message["role"] == "toolResult" and index >= cut.first_kept_index:
                    assert call_at[message["toolCallId"]] >= cut.first_kept_index


def test_the_split_turn_of_pis_documentation_is_found():
    # compaction.md "Split user-message spans": hdr usr ass tool ass tool tool ass tool
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("u" * 40))
    writer.append_message(assistant("", [("c1", "bash", {"command": "x" * 40})]))
    writer.append_message(result("c1", "r" * 400))
    writer.append_message(assistant("", [("c2", "bash", {}), ("c3", "bash", {})]))
    writer.append_message(result("c2", "r" * 400))
    writer.append_message(result("c3", "r" * 400))
    writer.append_message(assistant("", [("c4", "bash", {})]))
    writer.append_message(result("c4", "r" * 400))
    branch = writer.branch()
    cut = find_cut_point(branch, 0, len(branch), 100)
    assert (cut.first_kept_index, cut.turn_start_index, cut.is_split_turn) == (6, 0, True)
    preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=100))
    assert preparation is not None
    assert preparation.messages_to_summarize == []
    assert [m["role"] for m in preparation.turn_prefix_messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "toolResult",
    ]
    assert preparation.carried_user_message == branch[0]["message"]


def test_a_huge_final_tool_result_keeps_only_its_own_turn():
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("first"))
    writer.append_message(assistant("one"))
    writer.append_message(user("second"))
    writer.append_message(assistant("", [("c1", "read", {"path": "big"})]))
    writer.append_message(result("c1", "r" * 400_000))
    branch = writer.branch()
    cut = find_cut_point(branch, 0, len(branch), 20_000)
    assert cut.first_kept_index == 3  # the call; pi would keep everything here


def test_a_session_that_fits_has_nothing_to_compact():
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("hi"))
    writer.append_message(assistant("hello"))
    assert prepare_compaction(writer.branch(), CompactionSettings()) is None


# --- tokens ----------------------------------------------------------------------------------


def test_token_estimates_are_characters_over_four_rounded_up():
    assert estimate_tokens(user("abcde")) == 2
    assert estimate_tokens({"role": "user", "content": "abcd"}) == 1
    image = {"role": "user", "content": [{"type": "image", "data": "…", "mimeType": "x"}]}
    assert estimate_tokens(image) == 1200
    call = assistant("", [("c", "read", {"path": "a"})])
    assert estimate_tokens(call) == -(-(len("read") + len('{"path":"a"}')) // 4)
    assert estimate_tokens({"role": "bashExecution", "command": "ls", "output": "ab"}) == 1
    assert estimate_tokens({"role": "compactionSummary", "summary": "x" * 9}) == 3
    assert estimate_tokens({"role": "system", "content": "x" * 100}) == 0


def test_context_tokens_use_the_last_usage_plus_estimates_of_what_follows():
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("x" * 4000))
    writer.append_message(assistant("ok", usage={"input": 900, "output": 100, "totalTokens": 0}))
    writer.append_message(user("y" * 40))
    estimate = estimate_context_tokens(writer.branch())
    assert (estimate.usage_tokens, estimate.trailing_tokens) == (1000, 10)
    assert estimate.tokens == 1010


def test_usage_of_failed_answers_and_from_before_a_compaction_is_not_used():
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("x" * 40))
    stale = writer.append_message(assistant("ok", usage={"totalTokens": 90_000}))
    writer.append_compaction("S" * 40, stale.id, 90_000)
    failed = assistant("boom", usage={"totalTokens": 50_000})
    failed["stopReason"] = "error"
    writer.append_message(failed)
    estimate = estimate_context_tokens(writer.branch())
    assert estimate.last_usage_index is None
    assert estimate.tokens == 10 + 1 + 1  # the summary, "ok" and "boom", estimated


def test_usage_totals_fall_back_to_the_sum_of_counts():
    assert calculate_context_tokens({"totalTokens": 7, "input": 100}) == 7
    usage = {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4}
    assert calculate_context_tokens(usage) == 10


def test_the_threshold_is_strictly_above_the_window_minus_the_reserve():
    settings = CompactionSettings(reserve_tokens=16384)
    assert not should_compact(128_000 - 16384, 128_000, settings)
    assert should_compact(128_000 - 16383, 128_000, settings)
    assert not should_compact(10**9, 128_000, CompactionSettings(enabled=False))


# --- the runner ----------------------------------------------------------------------------


def _long_session() -> SessionWriter:
    writer = SessionWriter.in_memory(Path("/w"))
    writer.append_message(user("FIRST " + "x" * 400))
    writer.append_message(assistant("", [("c1", "read", {"path": "src/a.py"})]))
    writer.append_message(result("c1", "content"))
    writer.append_message(assistant("", [("c2", "edit", {"path": "src/b.py"})]))
    writer.append_message(result("c2", "edited"))
    writer.append_message(user("SECOND " + "y" * 400))
    writer.append_message(assistant("done " + "z" * 400))
    return writer


async def test_the_model_summary_lists_read_and_modified_files_and_records_usage():
    session = FakeSession(_long_session())
    result_ = await compactor(keep=150).compact(session, reason="manual", instructions="FOCUS")
    assert result_ is not None
    entry = session.writer.by_id[session.writer.last_id]
    assert entry["details"] == {"readFiles": ["src/a.py"], "modifiedFiles": ["src/b.py"]}
    assert "<read-files>\nsrc/a.py\n</read-files>" in entry["summary"]
    assert entry["usage"]["input"] == 100 and entry["fromHook"] is False
    [request] = session.provider.requests
    assert request["tools"] == []
    asked = request["messages"][0]["content"][0]["text"]
    assert "FIRST" in asked and "SECOND" not in asked and "Additional focus: FOCUS" in asked
    assert [e["type"] for e in session.events] == ["compaction_start", "compaction_end"]
    assert session.notified[-1][0] == "session_compact"


async def test_an_extension_summary_is_used_but_it_cannot_move_the_cut():
    session = FakeSession(_long_session())
    supplied = {"summary": "EXT", "firstKeptEntryId": "nonexistent", "details": {"v": 1}}
    session.pool.before_compact = Outcome({"result": {"compaction": supplied}})
    result_ = await compactor(keep=150).compact(session, reason="threshold")
    assert result_ is not None and result_["summary"] == "EXT"
    entry = session.writer.by_id[session.writer.last_id]
    assert entry["fromHook"] is True and entry["details"] == {"v": 1}
    assert entry["firstKeptEntryId"] != "nonexistent"
    assert entry["firstKeptEntryId"] in session.writer.by_id
    assert session.provider.requests == []
    [(_, payload)] = session.pool.dispatched
    assert payload["reason"] == "threshold" and payload["will_retry"] is False
    assert payload["preparation"]["file_ops"]["edited"] == ["src/b.py"]


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome({"result": {"cancel": True}}),
        Outcome({"result": {"cancel": True, "reason": "x"}}, failure="handler raised"),
    ],
    ids=["cancel", "failed-handler"],
)
async def test_a_cancelling_or_failing_hook_writes_no_compaction(outcome):
    session = FakeSession(_long_session())
    session.pool.before_compact = outcome
    before = len(session.writer.entries)
    with pytest.raises(CompactionCancelledError):
        await compactor(keep=150).compact(session, reason="manual")
    assert len(session.writer.entries) == before
    assert session.provider.requests == []
    end = session.events[-1]
    assert end["type"] == "compaction_end" and end["aborted"] is True and "result" not in end
    assert session.notified[-1][0] == "session_compact_failed"


async def test_a_failed_summary_request_is_reported_and_writes_nothing():
    session = FakeSession(_long_session())
    session.provider.fail = True
    before = len(session.writer.entries)
    with pytest.raises(ProviderError):
        await compactor(keep=150).compact(session, reason="threshold")
    assert len(session.writer.entries) == before
    assert "server exploded" in session.events[-1]["errorMessage"]


async def test_overflow_recovery_compacts_only_for_overflow_errors_and_when_enabled():
    overflowed = ProviderError("openai/x: HTTP 400: prompt is too long: 213462 tokens > 200000")
    other = ProviderError("openai/x: HTTP 500: internal error")
    session = FakeSession(_long_session())
    assert await compactor(keep=150).recover_overflow(session, other) is False
    assert await compactor(keep=150, enabled=False).recover_overflow(session, overflowed) is False
    assert session.provider.requests == []
    assert await compactor(keep=150).recover_overflow(session, overflowed) is True
    assert session.events[-1]["willRetry"] is True and session.events[-1]["reason"] == "overflow"
    # Nothing left to summarise: a clear error, no retry.
    with pytest.raises(ProviderError, match="nothing left to compact; not retried"):
        await compactor(keep=150).recover_overflow(session, overflowed)


async def test_threshold_compaction_runs_only_past_the_threshold():
    session = FakeSession(_long_session())
    runner = compactor(keep=150, reserve=100)
    runner.context_window = 10_000
    await runner.before_request(session)
    assert session.provider.requests == []  # ~330 tokens: far below 9 900
    runner.context_window = 300  # ~330 tokens: past 300 - 100
    await runner.before_request(session)
    assert len(session.provider.requests) == 1
    assert session.events[0] == {"type": "compaction_start", "reason": "threshold"}


def test_the_context_window_comes_from_the_override_then_the_provider_then_the_default():
    session = FakeSession(SessionWriter.in_memory(Path("/w")))
    assert Compactor().window_for(session) == 128_000
    session.provider.context_window = 32_000  # type: ignore[attr-defined]
    assert Compactor().window_for(session) == 32_000
    assert Compactor(context_window=8_000).window_for(session) == 8_000


# --- serialisation -------------------------------------------------------------------------


def test_the_conversation_is_serialised_as_text_with_long_tool_results_cut():
    text = serialize_conversation(
        [
            user("hello"),
            assistant("sure", [("c1", "read", {"path": "a.py"})]),
            result("c1", "r" * 5000),
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "SECRET"}]},
        ]
    )
    assert text.startswith(
        '[User]: hello\n\n[Assistant]: sure\n\n[Assistant tool calls]: read(path="a.py")'
    )
    assert "[Tool result]: " + "r" * 2000 + "\n\n[... 3000 more characters truncated]" in text
    assert "SECRET" not in text


# --- settings --------------------------------------------------------------------------------


def test_settings_default_to_pis_values(tmp_path):
    config = load_compaction_config(tmp_path, tmp_path)
    assert config.base == CompactionSettings(True, 16384, 20000)


def test_project_settings_merge_over_the_users_only_when_the_project_is_trusted(tmp_path):
    agent, project = tmp_path / "agent", tmp_path / "project"
    (project / ".pi").mkdir(parents=True)
    agent.mkdir()
    (agent / "settings.json").write_text(
        json.dumps(
            {
                "compaction": {
                    "reserveTokens": 1000,
                    "modelOverrides": {"openai/big": {"reserveTokens": 400000}},
                }
            }
        )
    )
    (project / ".pi" / "settings.json").write_text(
        json.dumps({"compaction": {"enabled": False, "keepRecentTokens": 5}})
    )
    untrusted = load_compaction_config(agent, project, project_trusted=False)
    assert untrusted.base == CompactionSettings(True, 1000, 20000)
    trusted = load_compaction_config(agent, project, project_trusted=True)
    assert trusted.base == CompactionSettings(False, 1000, 5)
    assert trusted.for_model("openai", "big") == CompactionSettings(False, 400000, 5)
    assert trusted.for_model("openai", "Big") == trusted.base  # exact, case-sensitive


@pytest.mark.parametrize(
    ("compaction", "field_name"),
    [
        ({"enabled": "yes"}, "compaction.enabled"),
        ({"reserveTokens": -1}, "compaction.reserveTokens"),
        ({"keepRecentTokens": 1.5}, "compaction.keepRecentTokens"),
        ({"keepRecentTokens": 2**60}, "compaction.keepRecentTokens"),
        ({"modelOverrides": {"a/b": 3}}, 'compaction.modelOverrides["a/b"]'),
        ({"modelOverrides": {"a/b": {"reserveTokens": "9"}}}, "reserveTokens"),
    ],
)
def test_a_malformed_value_is_an_error_naming_the_file_and_field(tmp_path, compaction, field_name):
    (tmp_path / "settings.json").write_text(json.dumps({"compaction": compaction}))
    with pytest.raises(CompactionSettingsError) as caught:
        load_compaction_config(tmp_path, tmp_path)
    assert str(tmp_path / "settings.json") in str(caught.value)
    assert field_name in str(caught.value)


def test_an_unreadable_settings_file_is_a_notice_and_the_defaults(tmp_path):
    (tmp_path / "settings.json").write_text("{not json")
    config = load_compaction_config(tmp_path, tmp_path)
    assert config.base == CompactionSettings()
    assert "invalid JSON" in config.notices[0]


# --- the overflow classifier ------------------------------------------------------------------

OVERFLOWS = {
    "openai": "openai/gpt-4o: HTTP 400: This model's maximum context length is 128000 tokens. "
    "However, your messages resulted in 130000 tokens.",
    "openai-responses": "Your input exceeds the context window of this model",
    "openai-code": "error code: context_length_exceeded",
    "litellm": "Requested token count exceeds the model's maximum context length of 131072 tokens",
    "anthropic": "prompt is too long: 213462 tokens > 200000 maximum",
    "anthropic-413": '413 {"error":{"type":"request_too_large","message":"Request exceeds"}}',
    "llama.cpp": "the request exceeds the available context size, try increasing it",
    "ollama": "prompt too long; exceeded max context length by 1200 tokens",
    "vllm": "This model's maximum context length is 4096 tokens. However, you requested 200 "
    "output tokens and your prompt contains at least 4000 input tokens",
    "openrouter": "This endpoint's maximum context length is 8192 tokens. However, you "
    "requested about 9000 tokens",
    "openrouter-poolside": "Input length 9000 exceeds the maximum allowed input length of 8192 tokens.",
    "google": "The input token count (1196265) exceeds the maximum number of tokens allowed",
    "mistral": "Prompt contains 40000 tokens, too large for model with 32768 maximum context length",
}

NOT_OVERFLOWS = {
    "rate-limit": "openai/x: rate limit hit (HTTP 429): too many tokens per minute",
    "throttling": "ThrottlingException: Too many tokens, please wait before trying again.",
    "server": "openai/x: HTTP 500: internal server error",
    "auth": "openai/x: HTTP 401: invalid api key",
    "empty": "",
}


@pytest.mark.parametrize("text", OVERFLOWS.values(), ids=OVERFLOWS.keys())
def test_each_providers_overflow_message_is_recognised(text):
    assert is_context_overflow(text)
    assert is_context_overflow(ProviderError(text))


@pytest.mark.parametrize("text", NOT_OVERFLOWS.values(), ids=NOT_OVERFLOWS.keys())
def test_other_errors_are_not_overflows(text):
    assert not is_context_overflow(text)
    assert not is_context_overflow(None)
