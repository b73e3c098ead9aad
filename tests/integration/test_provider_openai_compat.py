"""OpenAI-compatible servers that differ (issue 16 "OpenAI"; pi docs
models-configuration.md "Compatibility"): the request body each `OpenAICompat` switch
produces, as captured by a loopback server, and reasoning deltas kept as thinking."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from fault_servers import FaultServer, http_error, openai_text, stream

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.base import ToolDefinition
from pi_sandbox.supervisor.providers.openai import OpenAICompat, OpenAIProvider

WAIT_S = 60

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "list"}], "timestamp": 1},
    {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c1", "name": "ls", "arguments": {}}],
        "timestamp": 2,
    },
    {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "ls",
        "content": [{"type": "text", "text": "a.txt"}],
        "isError": False,
        "timestamp": 3,
    },
    {"role": "user", "content": [{"type": "text", "text": "thanks"}], "timestamp": 4},
]
TOOL = ToolDefinition("ls", "list files", {"type": "object", "properties": {}})


async def body_of(
    model: str = "gpt-test",
    *,
    tools: list[ToolDefinition] | None = None,
    thinking_level: str = "off",
    **provider_args: Any,
) -> dict[str, Any]:
    """The JSON body one request sends (the server answers a short text)."""
    with FaultServer([stream(openai_text("ok"))]) as server:
        provider = OpenAIProvider(model, server.url(), "sk-x", **provider_args)
        with trio.fail_after(WAIT_S):
            await provider.complete(
                system_prompt="be brief",
                messages=HISTORY,
                tools=tools or [],
                thinking_level=thinking_level,
            )
    return server.hits[0].body


def test_base_urls_are_recognised() -> None:
    detect = OpenAICompat.detect
    assert detect("https://api.openai.com/v1").server == "openai"
    assert detect("https://openrouter.ai/api/v1").server == "openrouter"
    assert detect("http://localhost:11434/v1").server == "ollama"
    assert detect("http://127.0.0.1:1234/v1").server == "lm-studio"
    assert detect("http://127.0.0.1:8080/v1").server == "llama.cpp"
    assert detect("http://gpu-box:8000/v1").server == "vllm"
    assert detect("https://proxy.example/v1").server == "generic"


async def test_a_generic_server_gets_system_max_tokens_no_tools_key_and_null_content() -> None:
    body = await body_of(max_tokens=512)

    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["max_tokens"] == 512 and "max_completion_tokens" not in body
    assert "tools" not in body  # never `tools: []`
    assert body["messages"][2]["content"] is None  # tool-call-only assistant message
    assert body["stream_options"] == {"include_usage": True}
    assert "reasoning_effort" not in body and "name" not in body["messages"][3]


async def test_openai_gets_developer_role_max_completion_tokens_and_reasoning_effort() -> None:
    compat = OpenAICompat.detect("https://api.openai.com/v1")

    body = await body_of("o4-mini", compat=compat, max_tokens=1000, thinking_level="minimal")
    plain = await body_of("gpt-4o-mini", compat=compat, thinking_level="high")

    assert body["messages"][0]["role"] == "developer"
    assert body["max_completion_tokens"] == 1000 and "max_tokens" not in body
    assert body["reasoning_effort"] == "minimal"
    # Not a reasoning model: system role and no reasoning parameter.
    assert plain["messages"][0]["role"] == "system" and "reasoning_effort" not in plain


@pytest.mark.parametrize(
    ("level", "sent"),
    [("off", None), ("minimal", "low"), ("low", "low"), ("medium", "medium"), ("xhigh", "high")],
)
async def test_thinking_levels_map_to_reasoning_effort_on_a_local_server(level, sent) -> None:
    body = await body_of("gpt-oss:20b", thinking_level=level)

    assert body.get("reasoning_effort") == sent


async def test_openrouter_takes_reasoning_as_an_object() -> None:
    compat = OpenAICompat.detect("https://openrouter.ai/api/v1")

    body = await body_of("deepseek-r1", compat=compat, thinking_level="high")

    assert body["reasoning"] == {"effort": "high"} and "reasoning_effort" not in body


async def test_reasoning_from_models_json_overrides_the_guess() -> None:
    body = await body_of("my-local-thinker", reasoning=True, thinking_level="medium")
    none = await body_of("o3", reasoning=False, thinking_level="medium")

    assert body["reasoning_effort"] == "medium" and "reasoning_effort" not in none


async def test_pi_compat_overrides_change_the_body() -> None:
    compat = OpenAICompat().with_overrides(
        {
            "requiresNonNullAssistantContent": True,
            "requiresToolsWithToolHistory": True,
            "requiresToolResultName": True,
            "requiresAssistantAfterToolResult": True,
            "supportsUsageInStreaming": False,
            "maxTokensField": "max_completion_tokens",
            "supportsReasoningEffort": False,
            "supportsStore": True,  # a pi field with no effect here: accepted, ignored
        }
    )

    body = await body_of("qwq", compat=compat, max_tokens=64, thinking_level="high")

    messages = body["messages"]
    assert messages[2]["content"] == ""
    assert body["tools"] == []  # the history has tool calls and no tool is offered
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "a.txt", "name": "ls"}
    assert messages[4] == {"role": "assistant", "content": "I have processed the tool results."}
    assert messages[5]["role"] == "user"
    assert "stream_options" not in body and body["max_completion_tokens"] == 64
    assert "reasoning_effort" not in body


async def test_offered_tools_are_sent_whatever_the_switches() -> None:
    body = await body_of(tools=[TOOL])

    assert [t["function"]["name"] for t in body["tools"]] == ["ls"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"maxTokensField": "max_output"}, "compat.maxTokensField"),
        ({"thinkingFormat": "zai"}, "compat.thinkingFormat"),
        ({"requiresToolResultName": "yes"}, "compat.requiresToolResultName"),
    ],
)
def test_a_bad_compat_value_names_the_field(overrides, field) -> None:
    with pytest.raises(ValueError, match=field):
        OpenAICompat().with_overrides(overrides)


async def test_reasoning_deltas_become_a_thinking_block_before_the_text() -> None:
    with FaultServer(
        [stream(openai_text("The answer.", reasoning=["Let me ", "think."]))]
    ) as server:
        provider = OpenAIProvider("deepseek-r1", server.url(), None)
        with trio.fail_after(WAIT_S):
            turn = await provider.complete(system_prompt="", messages=[], tools=[])

    assert turn.text == "The answer."
    assert turn.thinking == [{"type": "thinking", "thinking": "Let me think."}]
    assert turn.content == [
        {"type": "thinking", "thinking": "Let me think."},
        {"type": "text", "text": "The answer."},
    ]
    assert turn.api == "openai-completions"


async def test_ollama_style_reasoning_field_is_read_too() -> None:
    chunk = (
        b'data: {"choices": [{"index": 0, "delta": {"reasoning": "hmm"}, '
        b'"finish_reason": null}]}\n\n'
    )
    with FaultServer([stream([chunk, *openai_text("yes")])]) as server:
        provider = OpenAIProvider("qwen3:8b", server.url(), None)
        with trio.fail_after(WAIT_S):
            turn = await provider.complete(system_prompt="", messages=[], tools=[])

    assert turn.thinking == [{"type": "thinking", "thinking": "hmm"}] and turn.text == "yes"


async def test_without_finish_reason_support_a_clean_end_completes_the_turn() -> None:
    compat = OpenAICompat(supports_finish_reason=False)
    with FaultServer(
        [stream(openai_text("short", done=False)), stream(openai_text("cut", done=False))]
    ) as server:
        lenient = OpenAIProvider("m", server.url(), None, compat=compat)
        strict = OpenAIProvider("m", server.url(), None)
        with trio.fail_after(WAIT_S):
            turn = await lenient.complete(system_prompt="", messages=[], tools=[])
            with pytest.raises(ProviderError, match="stream ended early"):
                await strict.complete(system_prompt="", messages=[], tools=[])

    assert turn.text == "short"


async def test_http_errors_carry_status_retry_after_and_transient() -> None:
    with FaultServer([http_error(429, retry_after="2"), http_error(401)]) as server:
        provider = OpenAIProvider("m", server.url(), "sk-x")
        with trio.fail_after(WAIT_S):
            with pytest.raises(ProviderError) as limited:
                await provider.complete(system_prompt="", messages=[], tools=[])
            with pytest.raises(ProviderError) as denied:
                await provider.complete(system_prompt="", messages=[], tools=[])

    assert (limited.value.status, limited.value.retry_after, limited.value.transient) == (
        429,
        2.0,
        True,
    )
    assert (denied.value.status, denied.value.transient) == (401, False)
