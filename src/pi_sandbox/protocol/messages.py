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
    "BusEmitParams",
    "CancelledParams",
    "CommandWire",
    "ContentBlock",
    "DispatchResult",
    "FlagWire",
    "HandlerError",
    "HostCallParams",
    "ImageContent",
    "InitializeResult",
    "LogParams",
    "McpServerWire",
    "NotificationMessage",
    "ProviderWire",
    "Registrations",
    "RequestMessage",
    "ResponseMessage",
    "RpcErrorObject",
    "ShortcutWire",
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
    """A worker notification (``log``, ``tool/update``, ``registrations/update``, …)."""

    jsonrpc: Literal["2.0"]
    method: Annotated[str, Field(min_length=1, max_length=128)]
    params: dict[str, Any] = Field(default_factory=dict)


class RequestMessage(_Strict):
    """A worker request: only ``host/call`` exists (an extension API action)."""

    jsonrpc: Literal["2.0"]
    id: int
    method: Literal["host/call"]
    params: dict[str, Any] = Field(default_factory=dict)


WorkerMessage = ResponseMessage | RequestMessage | NotificationMessage
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
    """A tool a worker offers: name (provider-safe), label, description, JSON Schema
    parameters, its system-prompt snippet and guidelines, and its execution mode."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    label: Annotated[str, Field(max_length=200)] = ""
    description: Annotated[str, Field(max_length=20_000)]
    parameters: dict[str, Any]
    prompt_snippet: Annotated[str, Field(max_length=2_000)] | None = None
    prompt_guidelines: Annotated[
        list[Annotated[str, Field(max_length=2_000)]], Field(max_length=50)
    ] = Field(default_factory=list)
    execution_mode: Literal["parallel", "sequential"] = "parallel"
    # issue 19 (pi docs extensions.md "Tool Exposure"): how the model reaches the tool.
    exposure: Literal["direct", "deferred", "codemode", "hidden"] = "direct"


_Name = Annotated[str, Field(min_length=1, max_length=128)]


class CommandWire(_Strict):
    """A ``/command`` an extension registered."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
    description: Annotated[str, Field(max_length=2_000)] = ""
    completions: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=500)] = (
        Field(default_factory=list)
    )
    dynamic_completions: bool = False


class FlagWire(_Strict):
    """A command-line flag an extension registered (``--name``)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")]
    type: Literal["bool", "string"] = "bool"
    default: bool | str | None = None
    description: Annotated[str, Field(max_length=2_000)] = ""


class ShortcutWire(_Strict):
    """A keyboard shortcut an extension registered."""

    key: Annotated[str, Field(min_length=1, max_length=64)]
    description: Annotated[str, Field(max_length=2_000)] = ""


class ProviderWire(_Strict):
    """A model provider an extension registered (configuration only)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    config: dict[str, Any] = Field(default_factory=dict)


class McpServerWire(_Strict):
    """An MCP server an extension registered (``pi.register_mcp_server``, issue 19):
    an ``mcpServers`` entry, validated by the supervisor."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    config: dict[str, Any] = Field(default_factory=dict)


class Registrations(_Strict):
    """Everything an extension registered; a bound extension re-sends all of it
    (``registrations/update``) whenever it changes."""

    tools: Annotated[list[ToolDefinitionWire], Field(max_length=500)] = Field(default_factory=list)
    events: Annotated[list[_Name], Field(max_length=200)] = Field(default_factory=list)
    commands: Annotated[list[CommandWire], Field(max_length=500)] = Field(default_factory=list)
    flags: Annotated[list[FlagWire], Field(max_length=200)] = Field(default_factory=list)
    shortcuts: Annotated[list[ShortcutWire], Field(max_length=200)] = Field(default_factory=list)
    renderers: Annotated[list[_Name], Field(max_length=200)] = Field(default_factory=list)
    providers: Annotated[list[ProviderWire], Field(max_length=50)] = Field(default_factory=list)
    channels: Annotated[list[_Name], Field(max_length=200)] = Field(default_factory=list)
    mcp_servers: Annotated[list[McpServerWire], Field(max_length=50)] = Field(default_factory=list)
    observers: Annotated[list[_Name], Field(max_length=200)] = Field(default_factory=list)
    """Events whose every handler in this extension promised to only look
    (``pi.on(..., observe_only=True)``); a claim the supervisor checks on each result
    (issue 20 target 2)."""


class HostCallParams(_Strict):
    """``host/call`` parameters: the action's name and its arguments."""

    op: _Name
    args: dict[str, Any] = Field(default_factory=dict)


class BusEmitParams(_Strict):
    """``bus/emit`` parameters: a channel and JSON data."""

    channel: _Name
    data: Any = None


class CancelledParams(_Strict):
    """``$/cancelled``: the cancelled request whose handler returned."""

    id: int


class InitializeResult(Registrations):
    """The handshake answer: what the worker registered while its factory ran."""

    protocol_version: int
    generation: int
    pid: int


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
    terminate: bool = False


class LogParams(_Strict):
    """``log`` notification parameters."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    message: Annotated[str, Field(max_length=100_000)]


class ToolUpdateParams(_Strict):
    """``tool/update`` notification parameters: partial output of a running tool call."""

    tool_call_id: str | None = None
    update: dict[str, Any]
