"""pi's ``AgentMessage`` schema (pi docs message-types.md), checked at every boundary.

A message that reaches the session file, the provider or the output comes from
the supervisor itself, a model, a session file on disk, or an extension. Only the
first is trusted: the others are checked against this schema before they touch
state or disk (issue 13 §4). The schema follows pi 1.6.0's TypeScript interfaces:

- ``user``: ``content`` a string or a list of text/image blocks;
- ``assistant``: ``content`` a list of text/thinking/toolCall blocks;
- ``toolResult``: ``toolCallId``, ``toolName`` strings, ``content`` text/image
  blocks, ``isError`` a boolean;
- ``custom``: ``customType`` a string, ``content`` as for ``user``, ``display`` a
  boolean;
- ``bashExecution``: ``command``, ``output`` strings, ``exitCode`` an integer or
  null, ``cancelled`` a boolean;
- ``compactionSummary``/``branchSummary``: ``summary`` a string;
- ``system``: ``content`` a string or text blocks.

Fields pi marks optional are optional here but, when present, must have their
type; other fields pass through (provider metadata, signatures), as JSON.
``timestamp`` may be a number (pi) or an ISO string (this supervisor's compaction
summaries). Unknown roles are refused from extensions; a session file written by
an augmented pi may hold them, and there they are kept and never sent to a model
(pi docs: "consumers should tolerate unknown custom roles").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "KNOWN_ROLES",
    "MessageRefusedError",
    "check_agent_message",
    "check_content_blocks",
]


class MessageRefusedError(ValueError):
    """A value does not fit pi's message schema; the message names the field."""


class _Open(BaseModel):
    # strict: 1 is not "1", True is not 1; extra fields are pi's optional metadata.
    model_config = ConfigDict(extra="allow", strict=True)


class _Text(_Open):
    type: Literal["text"]
    text: str
    textSignature: str | None = None


class _Image(_Open):
    type: Literal["image"]
    data: str
    mimeType: str


class _Thinking(_Open):
    type: Literal["thinking"]
    thinking: str
    thinkingSignature: str | None = None
    redacted: bool | None = None


class _ToolCall(_Open):
    type: Literal["toolCall"]
    id: str
    name: str
    arguments: dict[str, Any]


_UserBlock = Annotated[_Text | _Image, Field(discriminator="type")]
_AssistantBlock = Annotated[_Text | _Thinking | _ToolCall, Field(discriminator="type")]
_Timestamp = int | float | str | None


class _User(_Open):
    role: Literal["user"]
    content: str | list[_UserBlock]
    timestamp: _Timestamp = None


class _Assistant(_Open):
    role: Literal["assistant"]
    content: list[_AssistantBlock]
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    stopReason: str | None = None
    errorMessage: str | None = None
    timestamp: _Timestamp = None


class _ToolResult(_Open):
    role: Literal["toolResult"]
    toolCallId: str
    toolName: str
    content: list[_UserBlock]
    isError: bool = False
    timestamp: _Timestamp = None


class _Custom(_Open):
    role: Literal["custom"]
    customType: str
    content: str | list[_UserBlock]
    display: bool = True
    timestamp: _Timestamp = None


class _BashExecution(_Open):
    role: Literal["bashExecution"]
    command: str
    output: str
    exitCode: int | None = None
    cancelled: bool = False
    truncated: bool | None = None
    excludeFromContext: bool | None = None
    timestamp: _Timestamp = None


class _CompactionSummary(_Open):
    role: Literal["compactionSummary"]
    summary: str
    tokensBefore: int | None = None
    timestamp: _Timestamp = None


class _BranchSummary(_Open):
    role: Literal["branchSummary"]
    summary: str
    fromId: str | None = None
    timestamp: _Timestamp = None


class _System(_Open):
    role: Literal["system"]
    content: str | list[_Text]
    timestamp: _Timestamp = None


_AGENT_MESSAGE: TypeAdapter[Any] = TypeAdapter(
    Annotated[
        _User
        | _Assistant
        | _ToolResult
        | _Custom
        | _BashExecution
        | _CompactionSummary
        | _BranchSummary
        | _System,
        Field(discriminator="role"),
    ]
)
_BLOCKS: TypeAdapter[Any] = TypeAdapter(list[_UserBlock])

KNOWN_ROLES = frozenset(
    {
        "user",
        "assistant",
        "toolResult",
        "custom",
        "bashExecution",
        "compactionSummary",
        "branchSummary",
        "system",
    }
)
"""The roles of pi 1.6.0's coding-agent ``AgentMessage`` union."""


def _first_problem(exc: pydantic.ValidationError, prefix: str) -> str:
    errors = exc.errors(include_url=False)
    # ``str | list[...]`` fields report one error per alternative: the list's (a
    # wrong block inside a list) says more than "not a string".
    in_list = [e for e in errors if any(str(p).startswith("list[") for p in e["loc"])]
    error = (in_list or errors)[0]
    where = prefix
    loc = error["loc"]
    for index, part in enumerate(loc):
        # Unions add the alternative ("str", "list[...]") or the tag ("user" at the
        # top, "text" after a list index) to the location: noise for the reader.
        if isinstance(part, str) and (
            part == "str"
            or part.startswith("list[")
            or (index == 0 and part in KNOWN_ROLES)
            or (index > 0 and isinstance(loc[index - 1], int) and part in _BLOCK_TAGS)
        ):
            continue
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    message = error["msg"]
    if (
        loc
        and str(loc[-1]).startswith("list[")
        and any(e["loc"] and str(e["loc"][-1]) == "str" for e in errors)
    ):
        message = "expected a string or a list of content blocks"
    return f"{where}: {message}"


_BLOCK_TAGS = frozenset({"text", "image", "thinking", "toolCall"})


def check_agent_message(message: Any, *, where: str, allow_unknown_role: bool = False) -> None:
    """Check one message against pi's ``AgentMessage`` schema (module docstring).

    Args:
        message: the value (parsed JSON).
        where: names it in the error (``"send_message: message"``, ``"line 4"``).
        allow_unknown_role: accept a mapping whose ``role`` is a string this
            schema does not know (session files; see the module docstring).

    Raises:
        MessageRefusedError: the first problem, e.g. ``"context: messages[2].content:
            Input should be a valid string"``.
    """
    if not isinstance(message, dict):
        raise MessageRefusedError(f"{where}: a message must be an object")
    role = message.get("role")
    if not isinstance(role, str):
        raise MessageRefusedError(f"{where}.role: a message needs a string role")
    if role not in KNOWN_ROLES:
        if allow_unknown_role:
            return
        raise MessageRefusedError(
            f"{where}.role: unknown role {role[:40]!r} (expected one of {', '.join(sorted(KNOWN_ROLES))})"
        )
    try:
        _AGENT_MESSAGE.validate_python(message)
    except pydantic.ValidationError as exc:
        raise MessageRefusedError(_first_problem(exc, where)) from None
    except RecursionError:
        raise MessageRefusedError(f"{where}: nested too deeply") from None


def check_content_blocks(content: Any, *, where: str) -> None:
    """Check a list of text/image content blocks (a tool result's, a user message's).

    Raises:
        MessageRefusedError: naming the first bad block.
    """
    try:
        _BLOCKS.validate_python(content)
    except pydantic.ValidationError as exc:
        raise MessageRefusedError(_first_problem(exc, where)) from None
    except RecursionError:
        raise MessageRefusedError(f"{where}: nested too deeply") from None
