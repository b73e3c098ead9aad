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

__all__ = ["AssistantTurn", "Provider", "TextDeltaCallback", "ToolCall", "ToolDefinition"]


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
        stop_reason: ``"stop"`` or ``"toolUse"`` (pi's spelling).
        usage: token counts as the provider reported them (``input``, ``output``), may be empty.
        provider: provider name, e.g. ``"openai"`` or ``"scripted"``.
        model: model id as sent to the provider.
    """

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=dict)
    provider: str = ""
    model: str = ""


TextDeltaCallback = Callable[[str], Awaitable[None]]


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
    ) -> AssistantTurn:
        """Run one request and return the whole assistant turn.

        Streams text through ``on_text_delta`` as it arrives. Raises
        ``pi_sandbox.errors.ProviderError`` on any failure (HTTP status, malformed
        stream, exhausted script); cancellation propagates as ``trio.Cancelled``.
        """
