"""``AnthropicProvider`` against a real HTTP server on 127.0.0.1 speaking the Messages API's SSE.

The server (``fake_anthropic``) queues replies and records requests; each test checks
the turn, pi's streaming events, or what reached the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import h11
import httpx
import pytest
import trio
from fake_anthropic import (
    MODEL,
    FakeAnthropic,
    Reply,
    error_reply,
    redacted_thinking,
    sse_event,
    stream,
    text,
    thinking,
    tool_use,
)

from pi_sandbox.errors import ProviderError, UsageError
from pi_sandbox.supervisor.providers import AssistantTurn, ToolCall, ToolDefinition, create_provider
from pi_sandbox.supervisor.providers.anthropic import (
    ANTHROPIC_VERSION,
    AnthropicProvider,
    thinking_parameters,
)

# Deadline of each guarded request: generous, only a hang reaches it (issue 13 §7).
WAIT_S = 60
API_KEY = "sk-ant-api03-SENTINEL-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def provider(server: FakeAnthropic, **kwargs: Any) -> AnthropicProvider:
    options: dict[str, Any] = {"max_tokens": 1024, **kwargs}
    key = options.pop("api_key", API_KEY)
    return AnthropicProvider(options.pop("model", MODEL), server.url, key, **options)


async def run(
    target: AnthropicProvider, **kwargs: Any
) -> tuple[AssistantTurn, list[str], list[dict[str, Any]]]:
    deltas: list[str] = []
    events: list[dict[str, Any]] = []

    async def on_text_delta(text: str) -> None:
        deltas.append(text)

    async def on_event(event: dict[str, Any]) -> None:
        events.append(event)

    request: dict[str, Any] = {"system_prompt": "You are terse.", "messages": [], "tools": []}
    request.update(kwargs)
    with trio.fail_after(WAIT_S):
        turn = await target.complete(**request, on_text_delta=on_text_delta, on_event=on_event)
    return turn, deltas, events


async def fails(target: AnthropicProvider, **kwargs: Any) -> str:
    request: dict[str, Any] = {"system_prompt": "", "messages": [], "tools": []}
    request.update(kwargs)
    with pytest.raises(ProviderError) as caught, trio.fail_after(WAIT_S):
        await target.complete(**request)
    message = str(caught.value)
    assert API_KEY[:8] not in message
    return message


def split_every(data: bytes, size: int) -> list[bytes]:
    """Cut the body at arbitrary byte offsets (inside events and inside UTF-8 characters)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def without_usage(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "usage"} for e in events]


# --- streaming ----------------------------------------------------------------------


async def test_text_streams_as_pi_events_and_deltas_and_joins_into_the_turn(
    server: FakeAnthropic,
) -> None:
    server.replies.append(stream(text("Héllo, wörld ✓")))

    turn, deltas, events = await run(provider(server))

    assert turn.text == "Héllo, wörld ✓"
    assert "".join(deltas) == "Héllo, wörld ✓" and len(deltas) == 3
    assert without_usage(events) == [
        {"type": "text_start", "contentIndex": 0},
        *[{"type": "text_delta", "contentIndex": 0, "delta": d} for d in deltas],
        {"type": "text_end", "contentIndex": 0, "content": "Héllo, wörld ✓"},
    ]
    # message_start's usage rides on the first event after it (pi: cumulative usage).
    assert events[0]["usage"]["input"] == 25
    assert turn.content == [{"type": "text", "text": "Héllo, wörld ✓"}]
    assert (turn.stop_reason, turn.tool_calls, turn.thinking) == ("stop", [], [])
    assert (turn.provider, turn.model, turn.api) == ("anthropic", MODEL, "anthropic-messages")
    assert (turn.response_id, turn.response_model) == ("msg_01FakeAnthropic", MODEL)
    assert turn.usage == {
        "input": 25,
        "output": 12,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 37,
        "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0},
    }


async def test_tool_use_input_split_across_json_deltas_is_assembled_with_pi_events(
    server: FakeAnthropic,
) -> None:
    server.replies.append(
        stream(
            text("Let me look."),
            tool_use("toolu_01A", "read", {"path": "src/main.py", "offset": 10}, cut=5),
            tool_use("toolu_01B", "bash", {"command": "ls -la | head -n 3"}, cut=3),
            stop_reason="tool_use",
        )
    )

    turn, _, events = await run(provider(server))

    assert turn.tool_calls == [
        ToolCall("toolu_01A", "read", {"path": "src/main.py", "offset": 10}),
        ToolCall("toolu_01B", "bash", {"command": "ls -la | head -n 3"}),
    ]
    assert turn.stop_reason == "toolUse"
    assert [b["type"] for b in turn.content or []] == ["text", "toolCall", "toolCall"]
    starts = [e for e in events if e["type"] == "toolcall_start"]
    assert [(e["contentIndex"], e["id"], e["toolName"]) for e in starts] == [
        (1, "toolu_01A", "read"),
        (2, "toolu_01B", "bash"),
    ]
    pieces = [
        e["delta"] for e in events if e["type"] == "toolcall_delta" and e["contentIndex"] == 2
    ]
    assert len(pieces) > 3 and json.loads("".join(pieces)) == {"command": "ls -la | head -n 3"}
    ends = [e for e in events if e["type"] == "toolcall_end"]
    assert ends[1] == {
        "type": "toolcall_end",
        "contentIndex": 2,
        "toolCall": {
            "type": "toolCall",
            "id": "toolu_01B",
            "name": "bash",
            "arguments": {"command": "ls -la | head -n 3"},
        },
    }


async def test_thinking_is_kept_with_its_signature_in_content_and_thinking(
    server: FakeAnthropic,
) -> None:
    server.replies.append(
        stream(thinking("The user wants a greeting. Keep it short.", "EqQBCgIYAhIM1g"), text("Hi."))
    )

    turn, deltas, events = await run(provider(server), thinking_level="medium")

    block = {
        "type": "thinking",
        "thinking": "The user wants a greeting. Keep it short.",
        "thinkingSignature": "EqQBCgIYAhIM1g",
    }
    assert turn.thinking == [block]
    assert turn.content == [block, {"type": "text", "text": "Hi."}]
    assert deltas == ["H", "i", "."]  # thinking is never sent as answer text
    kinds = [(e["type"], e["contentIndex"]) for e in events]
    assert kinds[:4] == [
        ("thinking_start", 0),
        ("thinking_delta", 0),
        ("thinking_delta", 0),
        ("thinking_end", 0),
    ]
    assert events[3]["content"] == block["thinking"]
    assert kinds[4] == ("text_start", 1)


async def test_redacted_thinking_is_kept_opaque_with_its_data(server: FakeAnthropic) -> None:
    server.replies.append(stream(redacted_thinking("EmwKAhgBEgy3va3pzix/encrypted"), text("Ok.")))

    turn, _, events = await run(provider(server), thinking_level="low")

    assert turn.thinking == [
        {
            "type": "thinking",
            "thinking": "[Reasoning redacted]",
            "thinkingSignature": "EmwKAhgBEgy3va3pzix/encrypted",
            "redacted": True,
        }
    ]
    assert "EmwKAhgBEgy3va3pzix" not in json.dumps(events)  # the payload is not streamed


async def test_cache_usage_is_read_back_into_cache_read_and_cache_write(
    server: FakeAnthropic,
) -> None:
    server.replies.append(
        stream(
            text("cached"),
            usage={
                "input_tokens": 4,
                "cache_read_input_tokens": 1800,
                "cache_creation_input_tokens": 300,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 300,
                    "ephemeral_1h_input_tokens": 0,
                },
            },
            output_tokens=9,
        )
    )

    turn, _, _ = await run(provider(server))

    assert {k: turn.usage[k] for k in ("input", "output", "cacheRead", "cacheWrite")} == {
        "input": 4,
        "output": 9,
        "cacheRead": 1800,
        "cacheWrite": 300,
    }
    assert turn.usage["totalTokens"] == 4 + 9 + 1800 + 300
    assert turn.usage["cacheWrite1h"] == 0


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
async def test_streams_cut_at_any_byte_and_crlf_framed_decode_the_same(
    server: FakeAnthropic, newline: str
) -> None:
    whole = stream(
        text("día ☃ 🎉"), tool_use("toolu_9", "write", {"path": "ñ.txt"}), newline=newline
    )
    server.replies.append(Reply(chunks=split_every(b"".join(whole.chunks), 5)))

    turn, _, _ = await run(provider(server))

    assert turn.text == "día ☃ 🎉"
    assert turn.tool_calls == [ToolCall("toolu_9", "write", {"path": "ñ.txt"})]


@pytest.mark.parametrize(
    ("raw", "ours"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("refusal", "error"),
    ],
)
async def test_stop_reasons_map_to_pi_stop_reasons(
    server: FakeAnthropic, raw: str, ours: str
) -> None:
    server.replies.append(stream(text("x"), stop_reason=raw))

    turn, _, _ = await run(provider(server))

    assert turn.stop_reason == ours
    assert (turn.error_message is not None) == (ours == "error")


async def test_an_unknown_stop_reason_is_an_error_naming_it(server: FakeAnthropic) -> None:
    server.replies.append(stream(text("x"), stop_reason="brand_new_reason"))

    assert "unknown stop_reason 'brand_new_reason'" in await fails(provider(server))


# --- the request --------------------------------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
TOOLS = [
    ToolDefinition(
        "bash",
        "Run a shell command.",
        {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    )
]


def assistant(content: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": MODEL,
        "usage": {},
        "stopReason": "toolUse",
        "timestamp": 2,
        **fields,
    }


def tool_result(call_id: str, content: list[dict[str, Any]], *, error: bool = False):
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": content,
        "details": {},
        "isError": error,
        "timestamp": 3,
    }


async def test_the_request_converts_pi_messages_images_tool_results_and_marks_the_cache(
    server: FakeAnthropic,
) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
            ],
            "timestamp": 1,
        },
        assistant(
            [
                {"type": "text", "text": "Running two commands."},
                {
                    "type": "toolCall",
                    "id": "toolu_1",
                    "name": "bash",
                    "arguments": {"command": "ls"},
                },
                {
                    "type": "toolCall",
                    "id": "toolu_2",
                    "name": "bash",
                    "arguments": {"command": "x"},
                },
            ]
        ),
        tool_result("toolu_1", [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b"}]),
        tool_result(
            "toolu_2", [{"type": "image", "data": PNG, "mimeType": "image/png"}], error=True
        ),
        assistant([{"type": "text", "text": "half an answ"}], stopReason="error"),
        {"role": "user", "content": "Thanks!", "timestamp": 5},
    ]
    server.replies.append(stream(text("ok")))

    await run(provider(server), messages=messages, tools=TOOLS)

    [request] = server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in request.headers
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    ephemeral = {"type": "ephemeral"}
    assert request.body == {
        "model": MODEL,
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is in this picture?"}, image],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running two commands."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "bash",
                        "input": {"command": "ls"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "bash",
                        "input": {"command": "x"},
                    },
                ],
            },
            {
                # both results in one user turn, the errored assistant message dropped
                # and the next user text merged after the results
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a.py\nb",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "(see attached image)"}, image],
                        "is_error": True,
                    },
                    {"type": "text", "text": "Thanks!", "cache_control": ephemeral},
                ],
            },
        ],
        "tools": [
            {
                "name": "bash",
                "description": "Run a shell command.",
                "input_schema": TOOLS[0].parameters,
            }
        ],
    }


async def test_a_tool_call_left_without_a_result_gets_a_synthetic_error_result(
    server: FakeAnthropic,
) -> None:
    messages = [
        {"role": "user", "content": "go", "timestamp": 1},
        assistant([{"type": "toolCall", "id": "toolu_7", "name": "bash", "arguments": {}}]),
        {"role": "user", "content": "never mind", "timestamp": 4},
    ]
    server.replies.append(stream(text("ok")))

    await run(provider(server), messages=messages)

    last = server.requests[0].body["messages"][-1]
    assert last["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_7",
        "content": "No result provided",
        "is_error": True,
    }


SIGNED = {"type": "thinking", "thinking": "Check the file first.", "thinkingSignature": "sig-A=="}
REDACTED = {
    "type": "thinking",
    "thinking": "[Reasoning redacted]",
    "thinkingSignature": "opaque-B==",
    "redacted": True,
}


async def test_thinking_blocks_are_replayed_unchanged_to_the_same_model(
    server: FakeAnthropic,
) -> None:
    messages = [
        {"role": "user", "content": "go", "timestamp": 1},
        assistant(
            [
                SIGNED,
                REDACTED,
                {
                    "type": "toolCall",
                    "id": "toolu_1",
                    "name": "bash",
                    "arguments": {"command": "ls"},
                },
            ]
        ),
        tool_result("toolu_1", [{"type": "text", "text": "a.py"}]),
    ]
    server.replies.append(stream(text("ok")))

    await run(provider(server), messages=messages, thinking_level="high")

    replayed = server.requests[0].body["messages"][1]["content"]
    assert replayed[:2] == [
        {"type": "thinking", "thinking": "Check the file first.", "signature": "sig-A=="},
        {"type": "redacted_thinking", "data": "opaque-B=="},
    ]


@pytest.mark.parametrize(
    "other",
    [{"model": "claude-other-model"}, {"provider": "openai"}, {"api": "openai-completions"}],
)
async def test_thinking_from_another_model_becomes_text_and_redacted_thinking_is_dropped(
    server: FakeAnthropic, other: dict[str, str]
) -> None:
    messages = [
        {"role": "user", "content": "go", "timestamp": 1},
        assistant(
            [SIGNED, REDACTED, {"type": "text", "text": "Done."}], stopReason="stop", **other
        ),
        {"role": "user", "content": "and now?", "timestamp": 4},
    ]
    server.replies.append(stream(text("ok")))

    await run(provider(server), messages=messages)

    assert server.requests[0].body["messages"][1]["content"] == [
        {"type": "text", "text": "Check the file first."},
        {"type": "text", "text": "Done."},
    ]


async def test_tool_call_ids_from_another_provider_are_made_valid_in_call_and_result(
    server: FakeAnthropic,
) -> None:
    odd = "call|fc_68a:" + "x" * 80
    messages = [
        {"role": "user", "content": "go", "timestamp": 1},
        assistant(
            [{"type": "toolCall", "id": odd, "name": "bash", "arguments": {}}], provider="openai"
        ),
        tool_result(odd, [{"type": "text", "text": "done"}]),
    ]
    server.replies.append(stream(text("ok")))

    await run(provider(server), messages=messages)

    sent = server.requests[0].body["messages"]
    call_id = sent[1]["content"][0]["id"]
    assert call_id == ("call_fc_68a_" + "x" * 80)[:64]
    assert sent[2]["content"][0]["tool_use_id"] == call_id


@pytest.mark.parametrize(
    ("level", "budget", "max_tokens"),
    [
        ("minimal", 1024, 4096 + 1024),
        ("low", 2048, 4096 + 2048),
        ("medium", 8192, 4096 + 8192),
        ("high", 16384, 4096 + 16384),
        ("xhigh", 16384, 4096 + 16384),  # pi clamps xhigh to high for budgets
    ],
)
async def test_a_thinking_level_sends_pi_s_budget_and_room_for_the_answer(
    server: FakeAnthropic, level: str, budget: int, max_tokens: int
) -> None:
    server.replies.append(stream(text("ok")))

    await run(provider(server, max_tokens=4096), thinking_level=level)

    [request] = server.requests
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert request.body["max_tokens"] == max_tokens
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_thinking_off_sends_no_thinking_parameter(server: FakeAnthropic) -> None:
    server.replies.append(stream(text("ok")))

    await run(provider(server), thinking_level="off")

    [request] = server.requests
    assert "thinking" not in request.body and "anthropic-beta" not in request.headers


def test_the_model_limit_caps_max_tokens_and_shrinks_the_budget() -> None:
    assert thinking_parameters("high", max_tokens=8000, model_max_tokens=16000) == (
        16000,
        {"type": "enabled", "budget_tokens": 16000 - 1024},
        None,
    )
    assert thinking_parameters("low", max_tokens=1000, budgets={"low": 3000}) == (
        4000,
        {"type": "enabled", "budget_tokens": 3000},
        None,
    )


def test_opus_and_sonnet_4_6_and_later_get_adaptive_thinking_with_an_effort() -> None:
    for model in (
        "claude-opus-4-6",
        "claude-sonnet-4-6-20260101",
        "claude-opus-4.6",
        "claude-opus-5",
    ):
        target = AnthropicProvider(model, "http://127.0.0.1:9", None, max_tokens=2000)
        body = target.request_body(system_prompt="", messages=[], tools=[], thinking_level="xhigh")
        assert (body["thinking"], body["output_config"]) == (
            {"type": "adaptive"},
            {"effort": "max"},
        ), model
    for model in (
        "claude-sonnet-4-5",
        "claude-sonnet-4-20250514",
        "claude-opus-4-1-20250805",
        "claude-3-7-sonnet-latest",
        "claude-haiku-4-5",
    ):
        target = AnthropicProvider(model, "http://127.0.0.1:9", None, max_tokens=2000)
        body = target.request_body(system_prompt="", messages=[], tools=[], thinking_level="low")
        assert body["thinking"]["type"] == "enabled", model


def test_an_unknown_thinking_level_is_a_provider_error_naming_it() -> None:
    target = AnthropicProvider(MODEL, "http://127.0.0.1:9", None, max_tokens=100)
    with pytest.raises(ProviderError, match="unknown thinking level 'maximum'"):
        target.request_body(system_prompt="", messages=[], tools=[], thinking_level="maximum")


async def test_cache_retention_none_sends_no_cache_control(server: FakeAnthropic) -> None:
    server.replies.append(stream(text("ok")))

    await run(provider(server, cache_retention="none"), messages=[{"role": "user", "content": "q"}])

    assert "cache_control" not in json.dumps(server.requests[0].body)


# --- failures -----------------------------------------------------------------------


async def test_an_overloaded_api_is_reported_with_status_type_and_request_id(
    server: FakeAnthropic,
) -> None:
    server.replies.append(error_reply(529, "overloaded_error", "Overloaded"))

    message = await fails(provider(server))

    assert "overloaded (HTTP 529)" in message
    assert "overloaded_error: Overloaded" in message
    assert "req_011FakeAnthropic" in message


async def test_a_rate_limit_names_retry_after_and_the_server_message(
    server: FakeAnthropic,
) -> None:
    server.replies.append(
        error_reply(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            headers={"retry-after": "7"},
        )
    )

    message = await fails(provider(server))

    assert "rate limit hit" in message and "HTTP 429" in message
    assert "retry after 7 s (retry-after)" in message
    assert "rate_limit_error: Number of request tokens" in message


async def test_an_auth_failure_says_authentication_failed_and_names_the_variable(
    server: FakeAnthropic,
) -> None:
    server.replies.append(error_reply(401, "authentication_error", "invalid x-api-key"))

    message = await fails(provider(server))

    assert "authentication failed" in message and "HTTP 401" in message
    assert "ANTHROPIC_API_KEY" in message


async def test_an_error_event_mid_stream_is_reported_after_the_text_so_far(
    server: FakeAnthropic,
) -> None:
    partial = stream(text("Half of the answ"))
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.replies.append(Reply(chunks=[*partial.chunks[:5], sse_event(error)]))
    deltas: list[str] = []

    async def on_text_delta(text: str) -> None:
        deltas.append(text)

    with pytest.raises(ProviderError) as caught, trio.fail_after(WAIT_S):
        await provider(server).complete(
            system_prompt="", messages=[], tools=[], on_text_delta=on_text_delta
        )

    assert "error mid-stream: overloaded_error: Overloaded" in str(caught.value)
    assert deltas  # what streamed before the error was shown; the caller decides on retry


async def test_a_malformed_event_is_reported_with_an_excerpt(server: FakeAnthropic) -> None:
    good = stream(text("hi"))
    server.replies.append(
        Reply(chunks=[good.chunks[0], b"event: content_block_start\ndata: {not json\n\n"])
    )

    message = await fails(provider(server))

    assert "malformed stream event (not JSON): {not json" in message


@pytest.mark.parametrize(
    "odd",
    [
        {"type": "content_block_delta", "index": [0], "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_start", "index": {"a": 1}, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use"}},
        [1, 2, 3],
    ],
)
async def test_odd_shapes_from_the_server_are_malformed_stream_errors_not_crashes(
    server: FakeAnthropic, odd: Any
) -> None:
    good = stream(text("hi"))
    odd_event = b"event: odd\ndata: " + json.dumps(odd).encode() + b"\n\n"
    server.replies.append(Reply(chunks=[*good.chunks[:2], odd_event, *good.chunks[2:]]))

    assert "malformed stream" in await fails(provider(server))


async def test_a_huge_event_is_refused_and_the_stream_is_abandoned_with_memory_bounded(
    server: FakeAnthropic,
) -> None:
    reply = Reply(
        chunks=[stream(text("x")).chunks[0], b'event: content_block_delta\ndata: {"x": "'],
        endless=b"A" * 65536,  # the line never ends
    )
    server.replies.append(reply)

    message = await fails(provider(server, max_event_chars=1024 * 1024))

    assert "larger than 1048576 characters (UTF-8 bytes); the stream was abandoned" in message
    assert reply.finished.wait(WAIT_S)
    # Abandoned after about the limit (plus socket buffers), not after the whole
    # 256 MiB the server was willing to send.
    assert reply.sent < 64 * 1024 * 1024


async def test_a_stream_without_message_stop_or_stop_reason_is_an_error(
    server: FakeAnthropic,
) -> None:
    whole = stream(text("cut"))
    server.replies.append(Reply(chunks=whole.chunks[:-2]))  # no message_delta, no message_stop

    assert "stream ended early" in await fails(provider(server))


async def test_a_connection_cut_mid_stream_is_a_provider_error_with_its_cause(
    server: FakeAnthropic,
) -> None:
    server.replies.append(Reply(chunks=stream(text("cut short")).chunks, cut_after=4))

    with pytest.raises(ProviderError, match="failed: RemoteProtocolError") as caught:
        with trio.fail_after(WAIT_S):
            await provider(server).complete(system_prompt="", messages=[], tools=[])

    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


async def test_invalid_tool_input_at_the_token_limit_names_the_tool_call(
    server: FakeAnthropic,
) -> None:
    block = tool_use("toolu_w", "write", {"path": "a.txt", "content": "long"})
    cut = type(block)(block.start, block.deltas[:2])  # the JSON stops half-way
    server.replies.append(stream(cut, stop_reason="max_tokens"))

    message = await fails(provider(server))

    assert "tool call 'write' (id toolu_w) has invalid JSON input" in message
    assert "cut off at the token limit" in message


async def test_a_json_answer_instead_of_a_stream_is_reported(server: FakeAnthropic) -> None:
    server.replies.append(
        Reply(headers={"Content-Type": "application/json"}, chunks=[b'{"type": "message"}'])
    )

    assert "instead of an event stream" in await fails(provider(server))


async def test_cancellation_propagates_and_is_not_a_provider_error(server: FakeAnthropic) -> None:
    server.replies.append(Reply(hang=True))

    with trio.move_on_after(0.3) as scope:
        await provider(server).complete(system_prompt="", messages=[], tools=[])

    assert scope.cancelled_caught


async def test_a_silent_server_times_out_with_a_provider_error(server: FakeAnthropic) -> None:
    server.replies.append(Reply(hang=True))

    message = await fails(provider(server, timeout_s=0.3))

    assert "timed out" in message


# --- the key ------------------------------------------------------------------------


async def test_an_error_body_echoing_the_key_is_redacted(server: FakeAnthropic) -> None:
    server.replies.append(error_reply(400, "invalid_request_error", f"bad header {API_KEY}"))

    message = await fails(provider(server))  # asserts the key is absent

    assert "bad header <redacted>" in message
    assert server.requests[0].headers["x-api-key"] == API_KEY  # control: it was sent


async def test_a_key_echoed_in_an_error_event_or_cut_by_the_excerpt_is_redacted(
    server: FakeAnthropic,
) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": "x" * 480 + API_KEY}}
    server.replies.append(Reply(chunks=[stream(text("a")).chunks[0], sse_event(error)]))

    message = await fails(provider(server))  # the excerpt cut falls inside the key

    assert "<redacted>" in message


def test_a_key_that_cannot_go_in_a_header_is_refused_without_showing_it() -> None:
    bad = "sk-ant-SENTINEL-first\nsecond-half-SENTINEL"
    # Control: the HTTP layer would put the raw value in its error message.
    with pytest.raises(h11.LocalProtocolError) as raw:
        h11.Request(method="POST", target="/", headers=[("host", "x"), ("x-api-key", bad)])
    assert "second-half-SENTINEL" in str(raw.value)

    with pytest.raises(ProviderError) as caught:
        AnthropicProvider(MODEL, "http://127.0.0.1:9", bad, max_tokens=10)

    assert "SENTINEL" not in str(caught.value)
    assert "cannot be sent in a header" in str(caught.value)


def test_the_repr_does_not_show_the_key() -> None:
    target = AnthropicProvider(MODEL, "http://127.0.0.1:9", API_KEY, max_tokens=10)
    assert API_KEY not in repr(target) and API_KEY[:8] not in repr(target)


# --- create_provider ----------------------------------------------------------------


def test_create_provider_takes_the_key_from_anthropic_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    made = create_provider("anthropic/claude-sonnet-4-5")
    assert isinstance(made, AnthropicProvider)
    assert (made.model, made.base_url, made._api_key) == (
        "claude-sonnet-4-5",
        "https://api.anthropic.com",
        API_KEY,
    )


def test_create_provider_without_a_key_needs_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="set ANTHROPIC_API_KEY"):
        create_provider("anthropic/claude-sonnet-4-5")
    with pytest.raises(UsageError, match="name the model after a slash"):
        create_provider("anthropic")
    local = create_provider("anthropic/claude-x", base_url="http://127.0.0.1:8080")
    assert isinstance(local, AnthropicProvider) and local._api_key is None


# --- what the retry layer reads (errors.ProviderError attributes, issue 16 "Retries") ---


async def raised(target: AnthropicProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught, trio.fail_after(WAIT_S):
        await target.complete(system_prompt="", messages=[], tools=[])
    return caught.value


@pytest.mark.parametrize(
    ("reply", "status", "retry_after", "transient"),
    [
        (error_reply(529, "overloaded_error", "Overloaded"), 529, None, True),
        (
            error_reply(429, "rate_limit_error", "slow", headers={"retry-after": "7"}),
            429,
            7.0,
            True,
        ),
        (error_reply(503, "api_error", "x", headers={"retry-after-ms": "1500"}), 503, 1.5, True),
        (error_reply(401, "authentication_error", "bad key"), 401, None, False),
        (error_reply(400, "invalid_request_error", "bad body"), 400, None, False),
    ],
)
async def test_http_errors_carry_status_retry_after_and_whether_to_retry(
    server: FakeAnthropic, reply: Reply, status: int, retry_after: float | None, transient: bool
) -> None:
    server.replies.append(reply)

    error = await raised(provider(server))

    assert (error.status, error.retry_after, error.transient) == (status, retry_after, transient)  # type: ignore[attr-defined]
    assert error.output_started is False  # type: ignore[attr-defined]


async def test_an_overloaded_event_before_any_output_may_be_retried(server: FakeAnthropic) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.replies.append(Reply(chunks=[stream(text("x")).chunks[0], sse_event(error)]))

    raised_error = await raised(provider(server))

    assert (raised_error.transient, raised_error.output_started) == (True, False)  # type: ignore[attr-defined]


async def test_a_failure_after_the_answer_started_is_never_retried(server: FakeAnthropic) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    started = stream(text("Half of the answ")).chunks[:5]
    server.replies.append(Reply(chunks=[*started, sse_event(error)]))
    server.replies.append(Reply(chunks=stream(text("cut short")).chunks, cut_after=5))

    mid_stream = await raised(provider(server))
    cut = await raised(provider(server))

    for failure in (mid_stream, cut):
        assert (failure.transient, failure.output_started) == (False, True)  # type: ignore[attr-defined]
    assert "after the answer had started; not retried" in str(cut)


async def test_a_refused_connection_may_be_retried() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = AnthropicProvider(MODEL, f"http://127.0.0.1:{port}", API_KEY, max_tokens=10)

    error = await raised(target)

    assert "cannot connect to" in str(error)
    assert (error.transient, error.output_started) == (True, False)  # type: ignore[attr-defined]
