"""Anthropic Messages API over streaming HTTP (Claude).

One ``complete()`` is one ``POST {base_url}/v1/messages`` with ``stream: true``. The
Server-Sent Events answer (``message_start``, ``content_block_start`` /
``content_block_delta`` / ``content_block_stop``, ``message_delta``, ``message_stop``,
``ping``, ``error``) is decoded by ``sse.SSEDecoder`` and folded into an
``AssistantTurn`` whose ``content`` keeps text, thinking and tool-call blocks in
stream order. Wire format reference: Anthropic API docs, "Messages", "Streaming
Messages", "Extended thinking", "Prompt caching", "Tool use", "Vision", "Errors".

We use httpx and our own SSE decoder rather than the official ``anthropic`` SDK:
importing the SDK costs ~630 ms and ~3,300 modules on top of httpx and pydantic,
and its typed event objects add per-token work; see docs/providers.md "Why httpx
and not the anthropic SDK" for the measurements.

Conventions that follow pi (pi-ai ``anthropic.ts``, ``transform-messages.ts``,
``simple-options.ts``):

- Thinking: ``off`` sends no ``thinking`` parameter. Claude Opus/Sonnet 4.6 and later
  get adaptive thinking (``{"type": "adaptive"}`` and ``output_config.effort``);
  other models get ``{"type": "enabled", "budget_tokens": N}`` with pi's default
  budgets (minimal 1024, low 2048, medium 8192, high 16384; xhigh is clamped to
  high), and ``max_tokens`` grows by the budget (capped at the model's maximum).
- Thinking blocks are kept with their signatures and replayed unchanged when the
  conversation goes back to the same provider and model; for any other model a
  thinking block becomes plain text (or is dropped when empty) and a redacted block
  is dropped. Errored or aborted assistant messages are not replayed; a tool call
  left without a result gets a synthetic error result, as the API requires one.
- Prompt caching: ``cache_control: {"type": "ephemeral"}`` on the system prompt
  and on the last block of the last user message; the usage read back fills pi's
  ``cacheRead`` / ``cacheWrite``.

The API key lives only in this object and the ``x-api-key`` header; it is never put
in an error message or a repr (DESIGN §1: secrets stay in the supervisor).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pi_sandbox.errors import ProviderError

from .base import (
    THINKING_LEVELS,
    AssistantEventCallback,
    AssistantTurn,
    TextDeltaCallback,
    ToolCall,
    ToolDefinition,
    normalise_usage,
)
from .http_stream import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    IdleDeadline,
    http_timeout,
)
from .httpx_import import httpx
from .retry import TRANSIENT_STATUSES, parse_retry_after
from .sse import DEFAULT_MAX_EVENT_CHARS, SSEDecoder, SSEEvent, SSEEventTooLarge, loads_json

__all__ = [
    "ANTHROPIC_DEFAULT_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_THINKING_BUDGETS",
    "AnthropicProvider",
    "convert_messages",
    "supports_adaptive_thinking",
    "thinking_parameters",
]

ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
API = "anthropic-messages"

DEFAULT_THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
"""pi's built-in ``thinkingBudgets`` (pi settings.md; pi-ai ``simple-options.ts``)."""

_MIN_BUDGET = 1024  # the API's minimum ``budget_tokens``
_MIN_OUTPUT_TOKENS = 1024  # room left for the answer when the budget must shrink
_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "max"}
_INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"

TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)
"""``error.type`` values of a mid-stream ``error`` event worth a retry (before output)."""

_ERROR_BODY_BYTES = 16 * 1024
_EXCERPT_CHARS = 500

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # pi: the client may resubmit; nothing is lost
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "toolUse",
    "refusal": "error",
    "sensitive": "error",
}

# Anthropic tool-use ids must match ^[a-zA-Z0-9_-]+$ and be at most 64 characters.
_BAD_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet)-(\d+)(?:[-.](\d{1,2}))?(?=$|[-@.:])")

_ErrorFactory = Callable[..., ProviderError]


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def supports_adaptive_thinking(model: str) -> bool:
    """Whether ``model`` takes ``thinking: {"type": "adaptive"}`` (Claude Opus and
    Sonnet 4.6 and later); older models take a ``budget_tokens``."""
    match = _CLAUDE_VERSION.search(model.lower())
    if match is None:
        return False
    version = (int(match.group(1)), int(match.group(2) or 0))
    return version >= (4, 6)


def thinking_parameters(
    level: str,
    *,
    max_tokens: int,
    model_max_tokens: int | None = None,
    budgets: dict[str, int] | None = None,
    adaptive: bool = False,
) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
    """The request's ``max_tokens``, ``thinking`` and ``output_config`` for a level.

    Args:
        level: one of ``THINKING_LEVELS``.
        max_tokens: tokens for the answer without thinking.
        model_max_tokens: the model's output limit, when known (caps the sum).
        budgets: pi's ``thinkingBudgets`` overrides per level (tokens).
        adaptive: the model takes adaptive thinking with an effort level.

    Returns:
        ``(max_tokens, thinking, output_config)``; ``thinking`` is None for ``off``
        and ``output_config`` is None unless adaptive.

    Raises:
        ValueError: ``level`` is not a thinking level.
    """
    if level not in THINKING_LEVELS:
        raise ValueError(f"unknown thinking level {level!r}; one of {', '.join(THINKING_LEVELS)}")
    if level == "off":
        return max_tokens, None, None
    if adaptive:
        return max_tokens, {"type": "adaptive"}, {"effort": _EFFORT[level]}
    clamped = "high" if level == "xhigh" else level
    budget = int({**DEFAULT_THINKING_BUDGETS, **(budgets or {})}[clamped])
    total = max_tokens + budget
    if model_max_tokens is not None:
        total = min(total, model_max_tokens)
    if total <= budget:
        budget = total - _MIN_OUTPUT_TOKENS
    if budget < _MIN_BUDGET:
        budget = _MIN_BUDGET
        total = max(total, budget + _MIN_OUTPUT_TOKENS)
    return total, {"type": "enabled", "budget_tokens": budget}, None


# --- request ------------------------------------------------------------------------


def _normal_id(call_id: str) -> str:
    return _BAD_ID_CHARS.sub("_", call_id)[:64] or "call"


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": part.get("mimeType", "image/png"),
            "data": part.get("data", ""),
        },
    }


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type")
        if kind == "text" and str(part.get("text", "")).strip():
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            blocks.append(_image_block(part))
    return blocks


def _tool_result_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = content or []
    if not any(p.get("type") == "image" for p in parts):
        return "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")
    blocks = [
        {"type": "text", "text": p.get("text", "")} if p.get("type") == "text" else _image_block(p)
        for p in parts
        if p.get("type") in ("text", "image")
    ]
    if not any(b["type"] == "text" for b in blocks):
        blocks.insert(0, {"type": "text", "text": "(see attached image)"})
    return blocks


def _assistant_blocks(message: dict[str, Any], same_model: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.get("content") or []:
        kind = part.get("type")
        if kind == "text":
            if str(part.get("text", "")).strip():
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "thinking":
            text = str(part.get("thinking", ""))
            signature = part.get("thinkingSignature")
            if part.get("redacted"):
                # Opaque encrypted reasoning: only the model that wrote it can read it.
                if same_model and signature:
                    blocks.append({"type": "redacted_thinking", "data": signature})
            elif not text.strip():
                continue
            elif same_model and signature:
                # Replayed byte for byte: the signature covers the text.
                blocks.append({"type": "thinking", "thinking": text, "signature": signature})
            else:
                # Another model's reasoning, or a block cut off before its signature:
                # plain text, without tags the model might learn to imitate (pi).
                blocks.append({"type": "text", "text": text})
        elif kind == "toolCall":
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _normal_id(str(part.get("id", ""))),
                    "name": part.get("name", ""),
                    "input": part.get("arguments") or {},
                }
            )
    return blocks


def convert_messages(
    messages: list[dict[str, Any]],
    *,
    provider: str,
    model: str,
    cache_control: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """pi messages (see ``base``) as Anthropic ``messages``.

    Args:
        messages: user, assistant and toolResult messages in pi's shape.
        provider: our provider name; with ``model`` it decides which assistant
            messages are "the same model" (their thinking is replayed as is).
        model: the model of the request.
        cache_control: put on the last block of the last user message (prompt
            caching); None for none.

    Returns:
        Alternating ``{"role": "user" | "assistant", "content": [blocks]}``: a run of
        tool results becomes one user message of ``tool_result`` blocks, adjacent
        messages of one role are merged (tool results first), empty ones dropped.

    Raises:
        ValueError: a message has a role that cannot be sent.
    """
    wire: list[dict[str, Any]] = []
    pending: dict[str, str] = {}  # normalised tool_use id -> tool name, awaiting a result

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if wire and wire[-1]["role"] == role:
            merged = wire[-1]["content"] + blocks
            if role == "user":  # tool results must open the user turn after tool_use
                merged.sort(key=lambda b: b.get("type") != "tool_result")
            wire[-1]["content"] = merged
        else:
            wire.append({"role": role, "content": blocks})

    def close_pending() -> None:
        if pending:
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": "No result provided",
                        "is_error": True,
                    }
                    for call_id in pending
                ],
            )
            pending.clear()

    for message in messages:
        role = message.get("role")
        if role == "user":
            close_pending()
            add("user", _user_blocks(message.get("content")))
        elif role == "assistant":
            close_pending()
            if message.get("stopReason") in ("error", "aborted"):
                continue  # an unfinished turn: the model retries from the last good state
            same_model = (
                message.get("provider") == provider
                and message.get("model") == model
                and message.get("api", API) == API
            )
            blocks = _assistant_blocks(message, same_model)
            for block in blocks:
                if block["type"] == "tool_use":
                    pending[block["id"]] = block["name"]
            add("assistant", blocks)
        elif role == "toolResult":
            call_id = _normal_id(str(message.get("toolCallId", "")))
            pending.pop(call_id, None)
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": _tool_result_content(message.get("content")),
                        "is_error": bool(message.get("isError")),
                    }
                ],
            )
        else:
            raise ValueError(f"cannot send a message with role {role!r} to the model")
    close_pending()
    if cache_control is not None and wire and wire[-1]["role"] == "user":
        last = wire[-1]["content"][-1]
        wire[-1]["content"][-1] = {**last, "cache_control": cache_control}
    return wire


def _tool_schema(tool: ToolDefinition) -> dict[str, Any]:
    schema = dict(tool.parameters or {})
    schema["type"] = "object"  # the API takes object schemas only
    schema.setdefault("properties", {})
    return {"name": tool.name, "description": tool.description, "input_schema": schema}


# --- response -----------------------------------------------------------------------


@dataclass
class _Block:
    """A content block being streamed: its position in the turn's content and parts."""

    position: int
    kind: str  # "text" | "thinking" | "redacted" | "toolCall"
    parts: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    closed: bool = False
    bad_json: str | None = None  # why the tool input did not parse


class _MessageStream:
    """Folds the Messages stream's events into one turn, emitting pi's events."""

    def __init__(
        self,
        error: _ErrorFactory,
        on_text_delta: TextDeltaCallback | None,
        on_event: AssistantEventCallback | None,
    ) -> None:
        self._error = error
        self._on_text_delta = on_text_delta
        self._on_event = on_event
        self.content: list[dict[str, Any]] = []
        self.blocks: dict[int, _Block] = {}
        self.ignored: set[int] = set()
        self.usage: dict[str, Any] = {}
        self._usage_changed = False
        self.raw_stop_reason: str | None = None
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.started = False
        self.output_started = False  # a content block began: a retry would repeat it
        self.done = False

    async def _emit(self, event: dict[str, Any]) -> None:
        if self._on_event is None:
            return
        if self._usage_changed:
            # The session lifts this to the record's top-level ``usage`` (pi json.md).
            event["usage"] = normalise_usage(self.usage)
            self._usage_changed = False
        await self._on_event(event)

    async def apply(self, event: SSEEvent) -> None:
        data = event.data
        try:
            payload = loads_json(data)
        except (ValueError, RecursionError) as exc:
            if not data.strip():
                return
            raise self._error(f"malformed stream event (not JSON): {_excerpt(data)}") from exc
        if type(payload) is not dict:
            raise self._error(f"malformed stream event (not an object): {_excerpt(data)}")
        kind = payload.get("type", event.event)
        if kind == "content_block_delta":
            # The per-token path, inlined (issue 16 "Performance": ≤ 1.5x httpx alone).
            delta = payload.get("delta")
            if type(delta) is dict and delta.get("type") == "text_delta":
                index = payload.get("index")
                block = self.blocks.get(index) if type(index) is int else None
                text = delta.get("text")
                if block is not None and block.kind == "text" and type(text) is str:
                    block.parts.append(text)
                    if self._on_event is not None:
                        update = {
                            "type": "text_delta",
                            "contentIndex": block.position,
                            "delta": text,
                        }
                        if self._usage_changed:
                            await self._emit(update)
                        else:
                            await self._on_event(update)
                    if self._on_text_delta is not None:
                        await self._on_text_delta(text)
                    return
            await self._delta(payload)
        elif kind == "content_block_start":
            await self._start(payload)
        elif kind == "content_block_stop":
            await self._stop(payload)
        elif kind == "message_start":
            self.started = True
            message = _object(payload.get("message"))
            self.response_id = message.get("id") if isinstance(message.get("id"), str) else None
            if isinstance(message.get("model"), str):
                self.response_model = message["model"]
            self._read_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = _object(payload.get("delta"))
            if isinstance(delta.get("stop_reason"), str):
                self.raw_stop_reason = delta["stop_reason"]
            self._read_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error" or event.event == "error":
            error = _object(payload.get("error"))
            raise self._error(
                f"the server reported an error mid-stream: {_error_text(payload)}",
                transient=error.get("type") in TRANSIENT_ERROR_TYPES,
            )
        # ``ping`` and event types added to the API later are ignored (Anthropic's
        # versioning policy: new event types may appear).

    def _read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for ours, theirs in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cacheRead", "cache_read_input_tokens"),
            ("cacheWrite", "cache_creation_input_tokens"),
        ):
            value = usage.get(theirs)
            # A proxy may send null for counts it does not know: keep what we have.
            if isinstance(value, int) and not isinstance(value, bool):
                self.usage[ours] = value
        creation = usage.get("cache_creation")
        if isinstance(creation, dict) and isinstance(
            creation.get("ephemeral_1h_input_tokens"), int
        ):
            self.usage["cacheWrite1h"] = creation["ephemeral_1h_input_tokens"]
        self._usage_changed = True

    def _block(self, payload: dict[str, Any]) -> _Block | None:
        index = payload.get("index")
        block = self.blocks.get(index) if type(index) is int else None
        if block is None and (type(index) is not int or index not in self.ignored):
            raise self._error(
                f"malformed stream: {payload.get('type')} for unknown content block {index!r}"
            )
        return block

    async def _start(self, payload: dict[str, Any]) -> None:
        index = payload.get("index")
        if not isinstance(index, int) or index in self.blocks or index in self.ignored:
            raise self._error(f"malformed stream: content_block_start with index {index!r}")
        start = _object(payload.get("content_block"))
        kind = start.get("type")
        position = len(self.content)
        self.output_started = True
        if kind == "text":
            block = _Block(position, "text")
            if start.get("text"):
                block.parts.append(start["text"])
            self.content.append({"type": "text", "text": ""})
            self.blocks[index] = block
            await self._emit({"type": "text_start", "contentIndex": position})
            if block.parts:
                await self._text(block, block.parts[0], append=False)
        elif kind == "thinking":
            block = _Block(position, "thinking")
            if start.get("thinking"):
                block.parts.append(start["thinking"])
            if start.get("signature"):
                block.signature.append(start["signature"])
            self.content.append({"type": "thinking", "thinking": ""})
            self.blocks[index] = block
            await self._emit({"type": "thinking_start", "contentIndex": position})
        elif kind == "redacted_thinking":
            block = _Block(position, "redacted", signature=[str(start.get("data", ""))])
            self.content.append({"type": "thinking", "thinking": ""})
            self.blocks[index] = block
            await self._emit({"type": "thinking_start", "contentIndex": position})
        elif kind == "tool_use":
            call_id, name = start.get("id"), start.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise self._error(f"malformed stream: a tool_use block without id or name: {start}")
            block = _Block(position, "toolCall")
            if isinstance(start.get("input"), dict) and start["input"]:
                block.parts.append(json.dumps(start["input"]))
            self.content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": {}})
            self.blocks[index] = block
            await self._emit(
                {
                    "type": "toolcall_start",
                    "contentIndex": position,
                    "id": call_id,
                    "toolName": name,
                }
            )
        else:
            # Server tools (web search results and the like) are not ours to record.
            self.ignored.add(index)

    async def _text(self, block: _Block, text: str, *, append: bool = True) -> None:
        if append:
            block.parts.append(text)
        await self._emit({"type": "text_delta", "contentIndex": block.position, "delta": text})
        if self._on_text_delta is not None:
            await self._on_text_delta(text)

    async def _delta(self, payload: dict[str, Any]) -> None:
        block = self._block(payload)
        if block is None:
            return
        delta = _object(payload.get("delta"))
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            await self._text(block, _string(delta.get("text")))
        elif kind == "thinking_delta" and block.kind == "thinking":
            text = _string(delta.get("thinking"))
            block.parts.append(text)
            await self._emit(
                {"type": "thinking_delta", "contentIndex": block.position, "delta": text}
            )
        elif kind == "signature_delta" and block.kind == "thinking":
            block.signature.append(_string(delta.get("signature")))
        elif kind == "input_json_delta" and block.kind == "toolCall":
            fragment = _string(delta.get("partial_json"))
            block.parts.append(fragment)
            await self._emit(
                {"type": "toolcall_delta", "contentIndex": block.position, "delta": fragment}
            )
        elif kind in ("text_delta", "thinking_delta", "signature_delta", "input_json_delta"):
            raise self._error(f"malformed stream: a {kind} for a {block.kind} block")
        # citations_delta and future delta types carry nothing we record.

    async def _stop(self, payload: dict[str, Any]) -> None:
        block = self._block(payload)
        if block is None or block.closed:
            return
        block.closed = True
        await self._emit(self._finish_block(block))

    def _finish_block(self, block: _Block) -> dict[str, Any]:
        """Fill the block's content entry; returns its ``*_end`` event."""
        entry = self.content[block.position]
        index = block.position
        if block.kind == "text":
            entry["text"] = "".join(block.parts)
            return {"type": "text_end", "contentIndex": index, "content": entry["text"]}
        if block.kind in ("thinking", "redacted"):
            if block.kind == "redacted":
                entry["thinking"] = "[Reasoning redacted]"
                entry["redacted"] = True
            else:
                entry["thinking"] = "".join(block.parts)
            signature = "".join(block.signature)
            if signature:
                entry["thinkingSignature"] = signature
            return {"type": "thinking_end", "contentIndex": index, "content": entry["thinking"]}
        raw = "".join(block.parts)
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            block.bad_json = f"{exc}: {_excerpt(raw, 200)}"
            arguments = None
        if arguments is not None and not isinstance(arguments, dict):
            block.bad_json = f"the input is a {type(arguments).__name__}, not a JSON object"
        if block.bad_json is None:
            entry["arguments"] = arguments
        return {"type": "toolcall_end", "contentIndex": index, "toolCall": dict(entry)}

    def finish(self, provider: str, model: str) -> AssistantTurn:
        if not self.started:
            raise self._error("stream ended before message_start")
        if not self.done and self.raw_stop_reason is None:
            raise self._error("stream ended early (no message_stop and no stop_reason)")
        for block in self.blocks.values():
            if not block.closed:  # lenient: a proxy that drops content_block_stop
                block.closed = True
                self._finish_block(block)
        raw = self.raw_stop_reason or "end_turn"
        if raw not in _STOP_REASONS:
            raise self._error(f"unknown stop_reason {raw!r}")
        stop_reason = _STOP_REASONS[raw]
        for block in self.blocks.values():
            if block.bad_json is not None:
                entry = self.content[block.position]
                cut = (
                    " (the answer was cut off at the token limit)"
                    if stop_reason == "length"
                    else ""
                )
                raise self._error(
                    f"tool call {entry['name']!r} (id {entry['id']}) has invalid JSON input"
                    f"{cut}: {block.bad_json}"
                )
        calls = [
            ToolCall(id=b["id"], name=b["name"], arguments=b["arguments"])
            for b in self.content
            if b["type"] == "toolCall"
        ]
        if calls and stop_reason == "stop":
            stop_reason = "toolUse"
        error_message = None
        if stop_reason == "error":
            error_message = f"the model stopped with stop_reason {raw!r}"
        return AssistantTurn(
            text="".join(b["text"] for b in self.content if b["type"] == "text"),
            tool_calls=calls,
            stop_reason=stop_reason,
            usage=normalise_usage(self.usage),
            provider=provider,
            model=model,
            api=API,
            thinking=[b for b in self.content if b["type"] == "thinking"],
            content=self.content,
            response_model=self.response_model,
            response_id=self.response_id,
            error_message=error_message,
        )


def _object(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _error_text(payload: Any) -> str:
    """``error.type: error.message`` of an Anthropic error body, else an excerpt."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict):
            kind, message = error.get("type"), error.get("message")
            text = ": ".join(str(x) for x in (kind, message) if isinstance(x, str) and x)
            if text:
                request_id = payload.get("request_id")
                suffix = f" (request id {request_id})" if isinstance(request_id, str) else ""
                return _excerpt(text) + suffix
        if isinstance(payload.get("message"), str):
            return _excerpt(payload["message"])
    return _excerpt(json.dumps(payload) if not isinstance(payload, str) else payload)


def _body_text(text: str) -> str:
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):
        return _excerpt(text) or "(empty body)"
    return _error_text(payload)


async def _read_bounded(response: httpx.Response) -> str:
    data = bytearray()
    async for part in response.aiter_bytes():
        data += part
        if len(data) >= _ERROR_BODY_BYTES:
            break
    return bytes(data[:_ERROR_BODY_BYTES]).decode("utf-8", errors="replace")


# --- the provider -------------------------------------------------------------------


class AnthropicProvider:
    """A Claude model behind the Anthropic Messages API (``/v1/messages``).

    Attributes:
        name: the provider name recorded on messages (``"anthropic"`` by default).
        api: ``"anthropic-messages"`` (pi's name of the wire API).
        model: the model id sent as ``model``, e.g. ``"claude-sonnet-4-5"``.
        base_url: the API root without trailing slash, e.g. ``https://api.anthropic.com``.
        max_tokens: output tokens per request without thinking.
    """

    api = API

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None,
        *,
        max_tokens: int,
        model_max_tokens: int | None = None,
        reasoning: bool = True,
        thinking_budgets: dict[str, int] | None = None,
        adaptive_thinking: bool | None = None,
        cache_retention: str | None = None,
        headers: dict[str, str] | None = None,
        provider_name: str = "anthropic",
        timeout_s: float | None = None,
        max_event_chars: int = DEFAULT_MAX_EVENT_CHARS,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the endpoint; nothing is sent until ``complete()``.

        Args:
            model: model id.
            base_url: API root; ``/v1/messages`` is appended (``/messages`` when the
                root already ends in ``/v1``).
            api_key: sent as ``x-api-key``; None sends none (a local proxy).
            max_tokens: the answer's token limit (pi: the model's maximum, at most 32000).
            model_max_tokens: the model's output limit; thinking budgets are added to
                ``max_tokens`` up to it. None: not capped.
            reasoning: whether the model can think; False ignores thinking levels.
            thinking_budgets: pi's ``thinkingBudgets`` setting (level -> tokens).
            adaptive_thinking: force adaptive (True) or budget (False) thinking; None
                decides from the model id (Opus/Sonnet 4.6 and later are adaptive).
            cache_retention: ``"short"`` (5-minute cache, the default), ``"long"``
                (1 hour, api.anthropic.com only) or ``"none"``; default from
                ``$PI_CACHE_RETENTION`` as pi.
            headers: extra request headers (models.json ``headers``).
            provider_name: the name recorded on assistant messages.
            timeout_s: a fixed limit for each network step (connect, each read of the
                stream, write); None (the default): ``connect_timeout_s`` to connect
                and the idle-stream limit ``idle_timeout_s`` (``httpIdleTimeoutMs``,
                set by the run) for silence, as the OpenAI provider.
            max_event_chars: the largest server-sent event accepted (UTF-8 bytes; a
                server that never ends a line is cut off there).
            client: a shared client the caller owns and closes; by default each
                request uses its own short-lived client.

        Raises:
            ProviderError: the key has characters that cannot go in a header (the
                message does not show the key), or ``cache_retention`` is unknown.
        """
        self.name = provider_name
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.model_max_tokens = model_max_tokens
        self.reasoning = reasoning
        self.thinking_budgets = dict(thinking_budgets or {})
        self.adaptive_thinking = (
            supports_adaptive_thinking(model) if adaptive_thinking is None else adaptive_thinking
        )
        self._api_key = api_key or None
        if self._api_key is not None and not _header_safe(self._api_key):
            # httpx/h11 would echo the raw value in its error; say only what is wrong.
            raise ProviderError(
                f"{provider_name}/{model}: the API key contains whitespace, control or "
                "non-ASCII characters and cannot be sent in a header; check how it was set"
            )
        retention = cache_retention or (
            "long" if os.environ.get("PI_CACHE_RETENTION") == "long" else "short"
        )
        if retention not in ("short", "long", "none"):
            raise ProviderError(
                f"{provider_name}/{model}: cache retention {retention!r} is not short, long or none"
            )
        self.cache_retention = retention
        self._headers = dict(headers or {})
        self._fixed_timeout = httpx.Timeout(timeout_s) if timeout_s is not None else None
        # issue 16: the idle-stream limit (settings ``httpIdleTimeoutMs``, set by the run)
        # and a separate connect limit, as the OpenAI provider.
        self.idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S
        self.connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
        self._max_event_chars = max_event_chars
        self._client = client

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _url(self) -> str:
        if self.base_url.endswith("/v1"):
            return f"{self.base_url}/messages"
        return f"{self.base_url}/v1/messages"

    def _cache_control(self) -> dict[str, Any] | None:
        if self.cache_retention == "none":
            return None
        if self.cache_retention == "long" and "api.anthropic.com" in self.base_url:
            return {"type": "ephemeral", "ttl": "1h"}
        return {"type": "ephemeral"}

    def _error(self, message: str, *, transient: bool = False) -> ProviderError:
        """A ``ProviderError`` naming provider and model, the key scrubbed from it.

        It carries the retry layer's attributes (issue 16 "Retries"): ``status`` and
        ``retry_after`` (None here; set for HTTP errors), ``transient`` and
        ``output_started`` (set by ``complete`` once the answer had begun).
        """
        # Servers and proxies sometimes echo request headers in error bodies. The text
        # may already be cut to an excerpt, so a key cut short is redacted too (any
        # prefix of 8 or more characters).
        key = self._api_key
        if key:
            for length in range(len(key), min(8, len(key)) - 1, -1):
                if key[:length] in message:
                    message = message.replace(key[:length], "<redacted>")
        error = ProviderError(f"{self.name}/{self.model}: {message}")
        # Set after construction: the attributes work whether or not ProviderError's
        # constructor takes them.
        error.status = None  # type: ignore[attr-defined]
        error.retry_after = None  # type: ignore[attr-defined]
        error.transient = transient  # type: ignore[attr-defined]
        error.output_started = False  # type: ignore[attr-defined]
        return error

    def request_body(
        self,
        *,
        system_prompt: str,
        messages: list[dict[str, Any]],
        tools: list[ToolDefinition],
        thinking_level: str = "off",
    ) -> dict[str, Any]:
        """The JSON body of one request (see the module docstring for the rules).

        Raises:
            ProviderError: an unknown thinking level or a message with a role that
                cannot be sent.
        """
        cache_control = self._cache_control()
        try:
            wire = convert_messages(
                messages, provider=self.name, model=self.model, cache_control=cache_control
            )
            max_tokens, thinking, output_config = thinking_parameters(
                thinking_level if self.reasoning else "off",
                max_tokens=self.max_tokens,
                model_max_tokens=self.model_max_tokens,
                budgets=self.thinking_budgets,
                adaptive=self.adaptive_thinking,
            )
        except ValueError as exc:
            raise self._error(str(exc)) from exc
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": wire,
            "stream": True,
        }
        if system_prompt:
            system: dict[str, Any] = {"type": "text", "text": system_prompt}
            if cache_control is not None:
                system["cache_control"] = cache_control
            body["system"] = [system]
        if tools:
            body["tools"] = [_tool_schema(tool) for tool in tools]
        if thinking is not None:
            body["thinking"] = thinking
        if output_config is not None:
            body["output_config"] = output_config
        return body

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
        """Send one streaming request and return the whole assistant turn.

        Args:
            system_prompt: sent as one cached ``system`` text block (omitted when empty).
            messages: the conversation in pi's shape (see ``base``).
            tools: offered as client tools (the ``tools`` key is omitted when empty).
            on_text_delta: awaited with each text fragment as it arrives.
            on_event: awaited with each of pi's ``assistantMessageEvent`` dicts
                (``text_*``, ``thinking_*``, ``toolcall_*`` with ``contentIndex``);
                an event may also carry ``usage``, the cumulative pi ``Usage`` when
                it changed since the previous event.
            thinking_level: one of ``THINKING_LEVELS``.

        Returns:
            The turn: ``content`` holds text, thinking (with ``thinkingSignature``)
            and toolCall blocks in stream order; ``stop_reason`` is pi's mapping of
            the API's (``end_turn``/``stop_sequence``/``pause_turn`` -> ``stop``,
            ``max_tokens`` -> ``length``, ``tool_use`` -> ``toolUse``, ``refusal`` ->
            ``error`` with ``error_message``); ``usage`` has input, output,
            cacheRead and cacheWrite tokens.

        Raises:
            ProviderError: an HTTP error status (529 says overloaded, 429 names the
                rate limit and retry-after, 401/403 say authentication failed; each
                with the server's error type and message), an ``error`` event
                mid-stream, connection failure or timeout, a malformed, oversized or
                early-ended stream, tool input that is not a JSON object, or an
                unknown thinking level.
            trio.Cancelled: cancellation propagates; the connection is closed.
        """
        body = self.request_body(
            system_prompt=system_prompt,
            messages=messages,
            tools=tools,
            thinking_level=thinking_level,
        )
        headers = {
            "Accept": "text/event-stream",
            "anthropic-version": ANTHROPIC_VERSION,
            **self._headers,
        }
        if body.get("thinking", {}).get("type") == "enabled":
            # Thinking between tool calls (Claude 4), as pi asks for.
            headers["anthropic-beta"] = _INTERLEAVED_THINKING_BETA
        if self._api_key:
            headers["x-api-key"] = self._api_key
        stream = _MessageStream(self._error, on_text_delta, on_event)
        try:
            if self._client is not None:
                return await self._send(self._client, body, headers, stream)
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                return await self._send(client, body, headers, stream)
        except ProviderError as exc:
            if stream.output_started:
                # A retry would repeat what was already shown (issue 16 "Retries").
                exc.output_started, exc.transient = True, False  # type: ignore[attr-defined]
            raise
        except httpx.TimeoutException as exc:
            raise self._transport_error(
                f"request to {self._url} timed out ({type(exc).__name__}: no progress "
                f"for {self._timeout.read} s)",
                stream,
            ) from exc
        except httpx.ConnectError as exc:
            raise self._transport_error(f"cannot connect to {self._url}: {exc}", stream) from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(
                f"request to {self._url} failed: {type(exc).__name__}: {exc}", stream
            ) from exc

    def _transport_error(self, message: str, stream: _MessageStream) -> ProviderError:
        """A network failure: retryable unless the answer had started (then it says so)."""
        if stream.output_started:
            message += " after the answer had started; not retried, so nothing is repeated"
        error = self._error(message, transient=not stream.output_started)
        error.output_started = stream.output_started  # type: ignore[attr-defined]
        return error

    @property
    def _timeout(self) -> httpx.Timeout:
        if self._fixed_timeout is not None:
            return self._fixed_timeout
        return http_timeout(self.idle_timeout_s, self.connect_timeout_s)

    async def _send(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
        stream: _MessageStream,
    ) -> AssistantTurn:
        async with client.stream(
            "POST", self._url, json=body, headers=headers, timeout=self._timeout
        ) as response:
            if not response.is_success:
                raise self._http_error(response, await _read_bounded(response))
            content_type = response.headers.get("content-type", "")
            if "event-stream" not in content_type and "json" in content_type:
                text = await _read_bounded(response)
                raise self._error(
                    f"{self._url} answered with {content_type} instead of an event stream: "
                    f"{_body_text(text)}"
                )
            decoder = SSEDecoder(max_event_chars=self._max_event_chars)
            limit = None if self._fixed_timeout is not None else self.idle_timeout_s
            try:
                with IdleDeadline(limit) as idle:
                    async for chunk in response.aiter_bytes():
                        for event in decoder.feed_bytes(chunk):
                            await stream.apply(event)
                            if stream.done:
                                return stream.finish(self.name, self.model)
                        idle.touch()
                for event in decoder.flush():
                    await stream.apply(event)
            except SSEEventTooLarge as exc:
                raise self._error(f"{self._url}: {exc}; the stream was abandoned") from exc
            return stream.finish(self.name, self.model)

    def _http_error(self, response: httpx.Response, text: str) -> ProviderError:
        status = response.status_code
        detail = _body_text(text)
        error = self._http_error_message(response, status, detail)
        error.status = status  # type: ignore[attr-defined]
        error.retry_after = parse_retry_after(response.headers)  # type: ignore[attr-defined]
        error.transient = status in TRANSIENT_STATUSES  # type: ignore[attr-defined]
        return error

    def _http_error_message(
        self, response: httpx.Response, status: int, detail: str
    ) -> ProviderError:
        if status == 529:
            return self._error(f"the API is overloaded (HTTP 529) at {self._url}: {detail}")
        if status == 429:
            retry_after = (response.headers.get("retry-after") or "").strip()
            hint = ""
            if retry_after:
                unit = " s" if retry_after.isdigit() else ""
                hint = f"; the server asks to retry after {retry_after}{unit} (retry-after)"
            return self._error(f"rate limit hit at {self._url} (HTTP 429){hint}: {detail}")
        if status in (401, 403):
            advice = (
                "check the API key (ANTHROPIC_API_KEY)"
                if self._api_key
                else "no API key was sent; set ANTHROPIC_API_KEY"
            )
            return self._error(
                f"authentication failed at {self._url} (HTTP {status}): {detail}; {advice}"
            )
        return self._error(f"{self._url} answered HTTP {status}: {detail}")


def _header_safe(value: str) -> bool:
    return value.isascii() and value.isprintable() and not any(c.isspace() for c in value)
