"""The extension SDK: what extension authors import (standard library only).

Importing it needs none of the supervisor's dependencies (no pydantic, no trio), so
an extension can be written, type-checked and unit-tested with only this package
on the path. At run time the worker passes the objects documented here::

    from pi_sandbox.sdk import ExtensionAPI, ToolCallEvent, Context, block

    def extension(pi: ExtensionAPI) -> None:
        def guard(event: ToolCallEvent, ctx: Context):
            if event.tool_name == "bash" and "sudo" in event.input.get("command", ""):
                return block("no sudo here")
        pi.on("tool_call", guard)

Event payloads are `Event` dicts (keys readable as attributes); the ``TypedDict``
classes below describe their keys for type checkers. Handler results are plain
dicts; the helpers build the common ones. Semantics of each event: DESIGN §4 and
``pi_sandbox.protocol.hook_kinds``.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from pi_sandbox.protocol.hook_kinds import EVENT_KINDS, KNOWN_EVENTS, kind_of
from pi_sandbox.worker.api import (
    CapabilityError,
    CommandContext,
    Context,
    Event,
    EventBus,
    ExtensionAPI,
    HostError,
    NotAvailableDuringLoadingError,
    SessionManagerView,
    StaleContextError,
    UserInterface,
)

__all__ = [
    "EVENT_KINDS",
    "KNOWN_EVENTS",
    "BeforeAgentStartEvent",
    "CapabilityError",
    "CommandContext",
    "Context",
    "ContextEvent",
    "Event",
    "EventBus",
    "ExtensionAPI",
    "HostError",
    "InputEvent",
    "MessageEndEvent",
    "NotAvailableDuringLoadingError",
    "SessionManagerView",
    "SessionStartEvent",
    "StaleContextError",
    "ToolCallEvent",
    "ToolResultEvent",
    "UserInterface",
    "block",
    "handled",
    "kind_of",
    "patch_input",
    "patch_result",
    "text_result",
    "transform",
]


class SessionStartEvent(TypedDict):
    """``session_start``: ``reason`` is startup, reload, new, resume, fork or restart
    (a crashed worker's replacement)."""

    type: Literal["session_start"]
    reason: str


class InputEvent(TypedDict):
    """``input``: the user's text before it reaches the agent (chained)."""

    type: Literal["input"]
    text: str
    images: list[dict[str, Any]]
    source: str


class BeforeAgentStartEvent(TypedDict):
    """``before_agent_start``: return ``{"message": {...}}`` to add a custom message
    and/or ``{"system_prompt": str}`` to replace the system prompt for this prompt."""

    type: Literal["before_agent_start"]
    prompt: str
    images: list[dict[str, Any]]
    system_prompt: str


class ContextEvent(TypedDict):
    """``context``: a deep copy of the messages of the next request; return
    ``{"messages": [...]}`` to change what this request sends."""

    type: Literal["context"]
    messages: list[dict[str, Any]]


class MessageEndEvent(TypedDict):
    """``message_end``: return ``{"message": {...}}`` (same ``role``) to replace it."""

    type: Literal["message_end"]
    message: dict[str, Any]


class ToolCallEvent(TypedDict):
    """``tool_call``: before a tool runs (fail-closed: an exception blocks the call)."""

    type: Literal["tool_call"]
    tool_name: str
    tool_call_id: str
    input: dict[str, Any]


class ToolResultEvent(TypedDict):
    """``tool_result``: after a tool ran; return field patches (`patch_result`)."""

    type: Literal["tool_result"]
    tool_name: str
    tool_call_id: str
    input: dict[str, Any]
    content: list[dict[str, Any]]
    details: dict[str, Any]
    is_error: bool
    terminate: bool


def block(reason: str, *, terminate: bool = False) -> dict[str, Any]:
    """A ``tool_call`` result that blocks the call; ``terminate`` also ends the run
    after this batch (when every call of the batch asks to)."""
    return {"block": True, "reason": str(reason), "terminate": bool(terminate)}


def patch_input(**fields: Any) -> dict[str, Any]:
    """A ``tool_call`` result that changes some input fields (merged into the input;
    the changed input is validated and gated again)."""
    return {"input": fields}


def patch_result(
    *,
    content: str | list[dict[str, Any]] | None = None,
    details: dict[str, Any] | None = None,
    is_error: bool | None = None,
    terminate: bool | None = None,
) -> dict[str, Any]:
    """A ``tool_result`` patch: only the fields given change."""
    patch: dict[str, Any] = {}
    if content is not None:
        patch["content"] = content
    if details is not None:
        patch["details"] = details
    if is_error is not None:
        patch["is_error"] = is_error
    if terminate is not None:
        patch["terminate"] = terminate
    return patch


def text_result(
    text: str, *, details: dict[str, Any] | None = None, is_error: bool = False
) -> dict[str, Any]:
    """A tool ``execute`` return value with one text block."""
    return {
        "content": [{"type": "text", "text": str(text)}],
        "details": dict(details or {}),
        "is_error": bool(is_error),
    }


def transform(text: str, images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``input`` result that replaces the user's text (and images)."""
    result: dict[str, Any] = {"action": "transform", "text": str(text)}
    if images is not None:
        result["images"] = images
    return result


def handled() -> dict[str, Any]:
    """An ``input`` result that consumes the input: no agent run happens."""
    return {"action": "handled"}
