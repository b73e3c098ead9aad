"""Strict pydantic models for everything a worker sends (supervisor side only).

Everything a worker sends is untrusted (DESIGN §3): each frame is validated against
these models (``extra="forbid"``, frozen) before the supervisor acts on it. The
worker never imports this module (pydantic would cost it ~100 ms of start-up).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

__all__ = [
    "WORKER_MESSAGE",
    "ContentBlock",
    "DispatchResult",
    "HandlerError",
    "ImageContent",
    "InitializeResult",
    "LogParams",
    "NotificationMessage",
    "ResponseMessage",
    "RpcErrorObject",
    "TextContent",
    "ToolDefinitionWire",
    "ToolResultWire",
    "ToolUpdateParams",
    "WorkerMessage",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class RpcErrorObject(_Strict):
    """A JSON-RPC error object; ``data.traceback`` carries the remote traceback as text."""

    code: int
    message: Annotated[str, Field(max_length=1_000_000)]
    data: dict[str, Any] | None = None


class ResponseMessage(_Strict):
    """A response to one of the supervisor's requests: exactly one of ``result``/``error``."""

    jsonrpc: Literal["2.0"]
    id: int
    result: Any = None
    error: RpcErrorObject | None = None

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("result" in data) == ("error" in data):
            raise ValueError("a response must have exactly one of 'result' and 'error'")
        return data


class NotificationMessage(_Strict):
    """A worker notification (``log``, ``tool/update``). Workers may not send requests yet."""

    jsonrpc: Literal["2.0"]
    method: Annotated[str, Field(min_length=1, max_length=128)]
    params: dict[str, Any] = Field(default_factory=dict)


WorkerMessage = ResponseMessage | NotificationMessage
WORKER_MESSAGE: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)


class TextContent(_Strict):
    """A text content block."""

    type: Literal["text"]
    text: str


class ImageContent(_Strict):
    """An image content block (base64 ``data``), pi's spelling ``mimeType``."""

    type: Literal["image"]
    data: str
    mimeType: str


ContentBlock = Annotated[TextContent | ImageContent, Field(discriminator="type")]


class ToolDefinitionWire(_Strict):
    """A tool a worker offers: name (provider-safe), label, description, JSON Schema parameters."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    label: Annotated[str, Field(max_length=200)] = ""
    description: Annotated[str, Field(max_length=20_000)]
    parameters: dict[str, Any]


class InitializeResult(_Strict):
    """The handshake answer: what the worker registered."""

    protocol_version: int
    generation: int
    pid: int
    tools: list[ToolDefinitionWire] = Field(default_factory=list)
    events: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list)


class HandlerError(_Strict):
    """One handler failure inside a worker, reported with its traceback text."""

    message: str
    traceback: str = ""


class DispatchResult(_Strict):
    """The combined result of one worker's handlers for one event (``hook_kinds`` state)."""

    state: dict[str, Any]
    stopped: bool
    errors: list[HandlerError] = Field(default_factory=list)


class ToolResultWire(_Strict):
    """A tool result as a worker returns it."""

    content: list[ContentBlock]
    details: dict[str, Any] = Field(default_factory=dict)
    is_error: bool = False


class LogParams(_Strict):
    """``log`` notification parameters."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    message: Annotated[str, Field(max_length=100_000)]


class ToolUpdateParams(_Strict):
    """``tool/update`` notification parameters: partial output of a running tool call."""

    tool_call_id: str | None = None
    update: dict[str, Any]
