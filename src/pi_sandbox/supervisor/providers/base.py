"""Provider-neutral types for one model request (supervisor only).

Messages travel in ``pi``'s shape (camelCase keys, as written to session files):

- user: ``{"role": "user", "content": [{"type": "text", "text": str}], "timestamp": ms}``
- assistant: ``{"role": "assistant", "content": [{"type": "text", "text": str} |
  {"type": "toolCall", "id": str, "name": str, "arguments": dict}], "provider": str,
  "model": str, "usage": dict, "stopReason": "stop" | "toolUse" | "error",
  "timestamp": ms}``
- toolResult: ``{"role": "toolResult", "toolCallId": str, "toolName": str,
  "content": [{"type": "text", "text": str}], "details": dict, "isError": bool,
  "timestamp": ms}``

Each provider converts these to its own wire format. Providers never run inside
workers: API keys stay in the supervisor (DESIGN §1).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "THINKING_LEVELS",
    "AssistantEventCallback",
    "AssistantTurn",
    "Provider",
    "TextDeltaCallback",
    "ToolCall",
    "ToolDefinition",
    "normalise_usage",
]

# pi's thinking levels, weakest first (pi docs models.md, settings.md
# ``defaultThinkingLevel``). "off" sends no reasoning parameter at all.
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")

_USAGE_COUNTS = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
_COST_KEYS = ("input", "output", "cacheRead", "cacheWrite", "total")


def normalise_usage(raw: dict[str, Any] | None) -> dict[str, Any]:
    """pi's ``Usage`` shape (pi docs message-types.md) filled from ``raw``.

    Returns ``{"input", "output", "cacheRead", "cacheWrite", "totalTokens": int,
    "cost": {"input", "output", "cacheRead", "cacheWrite", "total": float}}``; missing
    counts are 0, a missing ``totalTokens`` is the sum of the four counts, a missing
    cost is all zeros (USD). Extra keys of ``raw`` (``reasoning``, ``cacheWrite1h``)
    are kept. Non-numeric values count as 0.
    """
    raw = dict(raw or {})
    out: dict[str, Any] = {k: v for k, v in raw.items() if k not in (*_USAGE_COUNTS, "cost")}
    for key in _USAGE_COUNTS[:4]:
        value = raw.get(key)
        out[key] = (
            int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
        )
    total = raw.get("totalTokens")
    out["totalTokens"] = (
        int(total)
        if isinstance(total, int | float) and not isinstance(total, bool)
        else sum(out[k] for k in _USAGE_COUNTS[:4])
    )
    cost = raw.get("cost") if isinstance(raw.get("cost"), dict) else {}
    out["cost"] = {
        k: float(v)
        if isinstance((v := cost.get(k)), int | float) and not isinstance(v, bool)
        else 0.0
        for k in _COST_KEYS
    }
    return out


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for. ``arguments`` is the decoded JSON object."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as offered to the model: name, description and JSON Schema ``parameters``."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class AssistantTurn:
    """The complete assistant message of one provider request.

    Attributes:
        text: the concatenated text content ("" when the model only called tools).
        tool_calls: the tool calls in the order the model emitted them.
        stop_reason: pi's spelling: ``"stop"``, ``"length"``, ``"toolUse"``, ``"error"``
            or ``"aborted"`` (pi docs message-types.md).
        usage: pi's ``Usage`` (see ``normalise_usage``); may be partial or empty, the
            session normalises it before recording.
        provider: provider name, e.g. ``"openai"``, ``"anthropic"`` or ``"scripted"``.
        model: model id as sent to the provider.
        api: the wire API, pi's names: ``"openai-completions"``, ``"anthropic-messages"``
            (``""`` for the scripted provider, recorded as ``"scripted"``).
        thinking: thinking blocks in pi's shape, in stream order:
            ``{"type": "thinking", "thinking": str, "thinkingSignature"?: str,
            "redacted"?: bool}``; replayed to providers that require them.
        content: when not None, the complete assistant content in stream order (text,
            thinking and toolCall blocks, pi's shapes); providers that interleave
            blocks set it so the recorded message keeps their order.
        response_model: the concrete model the server reported, when it did.
        response_id: the server's id for this response, when it gave one.
        error_message: why the turn ended with ``stop_reason == "error"``.
    """

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = "stop"
    usage: dict[str, Any] = field(default_factory=dict)
    provider: str = ""
    model: str = ""
    api: str = ""
    thinking: list[dict[str, Any]] = field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    response_model: str | None = None
    response_id: str | None = None
    error_message: str | None = None


TextDeltaCallback = Callable[[str], Awaitable[None]]

# One streaming event in pi's ``assistantMessageEvent`` wire shape (pi docs json.md
# "Reconstruct streaming messages"): ``{"type": "text_start" | "text_delta" |
# "text_end" | "thinking_start" | "thinking_delta" | "thinking_end" |
# "toolcall_start" | "toolcall_delta" | "toolcall_end", "contentIndex": int, ...}``.
AssistantEventCallback = Callable[[dict[str, Any]], Awaitable[None]]


class Provider(Protocol):
    """A model endpoint. Implementations: ``ScriptedProvider``, ``OpenAIProvider``."""

    name: str
    model: str

    async def complete(
        self,
        *,
        system_prompt: str,
        messages: list[dict[str, Any]],
        tools: list[ToolDefinition],
        on_text_delta: TextDeltaCallback | None = None,
        on_event: AssistantEventCallback | None = None,
        thinking_level: str = "off",
    ) -> AssistantTurn:
        """Run one request and return the whole assistant turn.

        Streams text through ``on_text_delta`` as it arrives and, when given, every
        content-block event through ``on_event`` (pi's ``assistantMessageEvent``
        shapes). ``thinking_level`` is one of ``THINKING_LEVELS``; providers or models
        without reasoning ignore it. Raises
        ``pi_sandbox.errors.ProviderError`` on any failure (HTTP status, malformed
        stream, exhausted script); cancellation propagates as ``trio.Cancelled``.
        """
