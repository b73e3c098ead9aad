"""Every value an extension hands the supervisor, checked before it touches state,
disk or output (issue 13 §4).

An extension is untrusted code (a project's ``.pi/extensions`` under trust
``sandboxed``): the wire models (`pi_sandbox.protocol.messages`) check the
envelope, this module checks what is inside — the arguments of each action
(``send_message``, ``append_entry``, ``ctx.ui.*`` …) and the results of chained
handlers that become messages (``context``, ``message_end``,
``before_agent_start``, ``before_provider_request``, ``input``,
``tool_result``) — against pi's message schemas (`agent_messages`) and the size
limits of `ExtensionLimits`. A refused value raises `MessageRefusedError` naming
the action and field; the caller answers the extension with it and audits it.
"""

from __future__ import annotations

from typing import Any

from pi_sandbox.policies._extension_limits import ExtensionLimits
from pi_sandbox.supervisor.boundary.agent_messages import (
    MessageRefusedError,
    check_agent_message,
    check_content_blocks,
)
from pi_sandbox.supervisor.json_lines import dumps_line

__all__ = [
    "DELIVERY_MODES",
    "IDENTIFIER_CHARS",
    "check_bus_message",
    "check_entry",
    "check_handler_result",
    "check_handler_state",
    "check_text",
    "check_ui_call",
    "custom_message_from",
    "json_size",
    "user_message_from",
]

DELIVERY_MODES = (None, "steer", "follow_up", "next_turn")
"""``deliver_as`` values (pi docs extensions.md ``sendMessage``)."""

IDENTIFIER_CHARS = 128
"""Longest ``custom_type``, status/widget key (fixed; like channel and event names)."""

MAX_MESSAGES_PER_RESULT = 100
"""Most messages one ``before_agent_start`` result may add."""

_CUSTOM_KEYS = frozenset({"custom_type", "customType", "content", "display", "details"})
# A full CustomMessage handed back (role and timestamp set) is accepted too; the
# supervisor sets both itself.
_TOLERATED_KEYS = frozenset({"role", "timestamp"})

_UI_FIELDS: dict[str, dict[str, str]] = {
    # field -> "text" (text_chars), "long" (message_bytes), "lines", "key", "level"
    "notify": {"message": "text", "level": "level"},
    "set_status": {"key": "key", "text": "text?"},
    "set_widget": {"key": "key", "lines": "lines?"},
    "set_title": {"title": "text"},
    "select": {"title": "text", "options": "lines"},
    "confirm": {"title": "text", "message": "long"},
    "input": {"title": "text", "placeholder": "text"},
    "editor": {"title": "text", "prefill": "long"},
}


def json_size(value: Any) -> int:
    """Bytes of ``value`` as one line of JSON (UTF-8), as the session file stores it."""
    return len(dumps_line(value).encode("utf-8"))


def _check_size(where: str, value: Any, limit: int, key: str) -> int:
    size = json_size(value)
    if size > limit:
        raise MessageRefusedError(
            f"{where}: {size} bytes of JSON, more than the limit of {limit} "
            f"(extensions.limits.{key})"
        )
    return size


def check_text(
    where: str, value: Any, limit: int, *, key: str = "text_chars", optional: bool = False
) -> str | None:
    """``value`` if it is a string of at most ``limit`` characters (or None when
    ``optional``).

    Raises:
        MessageRefusedError: another type, or too long (naming ``extensions.limits.KEY``).
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "a string or null" if optional else "a string"
        raise MessageRefusedError(f"{where}: expected {kind}, got {type(value).__name__}")
    if len(value) > limit:
        suffix = f" (extensions.limits.{key})" if key else ""
        raise MessageRefusedError(
            f"{where}: {len(value)} characters, more than the limit of {limit}{suffix}"
        )
    return value


def custom_message_from(
    message: Any, limits: ExtensionLimits, *, where: str, timestamp: int
) -> dict[str, Any]:
    """The ``custom`` message an extension's ``send_message`` (or a
    ``before_agent_start`` result) stands for, checked.

    ``message``: ``{"custom_type" | "customType": str, "content": str | [text/image
    block], "display"?: bool, "details"?: JSON}`` (pi docs extensions.md
    ``sendMessage``); a missing ``custom_type`` is ``"extension"``, a missing
    ``content`` an empty string.

    Returns:
        ``{"role": "custom", "customType", "content" (blocks), "display", "details",
        "timestamp"}``.

    Raises:
        MessageRefusedError: not an object, an unknown key, a field of the wrong
            type, or more than ``limits.message_bytes`` of JSON.
    """
    if not isinstance(message, dict):
        raise MessageRefusedError(f"{where}: expected an object, got {type(message).__name__}")
    unknown = sorted(str(k) for k in message if k not in _CUSTOM_KEYS | _TOLERATED_KEYS)
    if unknown:
        raise MessageRefusedError(
            f"{where}: unknown key {unknown[0][:40]!r} (expected custom_type, content, "
            "display, details)"
        )
    if message.get("role", "custom") != "custom":
        raise MessageRefusedError(f"{where}.role: an extension message has role 'custom'")
    custom_type = message.get("custom_type", message.get("customType"))
    custom_type = "extension" if custom_type is None or custom_type == "" else custom_type
    check_text(f"{where}.custom_type", custom_type, IDENTIFIER_CHARS, key="")
    content = message.get("content", "")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    display = message.get("display", True)
    if not isinstance(display, bool):
        raise MessageRefusedError(f"{where}.display: expected a boolean")
    built = {
        "role": "custom",
        "customType": custom_type,
        "content": content,
        "display": display,
        "details": message.get("details"),
        "timestamp": timestamp,
    }
    check_agent_message(built, where=where)
    _check_size(where, built, limits.message_bytes, "message_bytes")
    return built


def user_message_from(
    text: Any, limits: ExtensionLimits, *, where: str, timestamp: int
) -> dict[str, Any]:
    """The user message of ``send_user_message(text)``.

    Raises:
        MessageRefusedError: ``text`` is not a string, or longer than
            ``limits.message_bytes`` of JSON.
    """
    check_text(f"{where}.text", text, limits.message_bytes, key="message_bytes")
    built = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": timestamp}
    _check_size(where, built, limits.message_bytes, "message_bytes")
    return built


def check_entry(custom_type: Any, data: Any, limits: ExtensionLimits) -> int:
    """An ``append_entry(custom_type, data)``; returns the data's JSON size (bytes).

    Raises:
        MessageRefusedError: ``custom_type`` not a non-empty string of at most
            `IDENTIFIER_CHARS`, or ``data`` over ``limits.entry_bytes``.
    """
    check_text("custom_type", custom_type, IDENTIFIER_CHARS, key="")
    if not custom_type:
        raise MessageRefusedError("custom_type must not be empty")
    return _check_size("data", data, limits.entry_bytes, "entry_bytes")


def check_bus_message(data: Any, limits: ExtensionLimits) -> int:
    """``pi.events.emit`` data; returns its JSON size (bytes).

    Raises:
        MessageRefusedError: over ``limits.bus_bytes``.
    """
    return _check_size("data", data, limits.bus_bytes, "bus_bytes")


def check_ui_call(kind: str, args: dict[str, Any], limits: ExtensionLimits) -> dict[str, Any]:
    """The arguments of one ``ctx.ui.KIND(...)`` call (they go to the output and to an
    RPC client as they are), checked field by field; returns them.

    Raises:
        MessageRefusedError: an unknown dialog or field, a wrong type, or a text
            over its limit (``text_chars``, ``message_bytes``, ``widget_lines``).
    """
    spec = _UI_FIELDS.get(kind)
    if spec is None:
        raise MessageRefusedError(f"ctx.ui: unknown dialog {str(kind)[:40]!r}")
    for name in args:
        if name not in spec:
            raise MessageRefusedError(f"ctx.ui.{kind}: unknown argument {str(name)[:40]!r}")
    for name, rule in spec.items():
        where = f"ctx.ui.{kind}: {name}"
        value = args.get(name)
        optional = rule.endswith("?")
        rule = rule.rstrip("?")
        if name not in args and not optional and rule != "level":
            value = "" if rule in ("text", "long") else value
        if rule == "text":
            check_text(where, value, limits.text_chars, optional=optional)
        elif rule == "long":
            check_text(where, value, limits.message_bytes, key="message_bytes")
        elif rule == "key":
            check_text(where, value, IDENTIFIER_CHARS, key="")
        elif rule == "level":
            if value is not None and value not in ("info", "warning", "error"):
                raise MessageRefusedError(f"{where}: expected info, warning or error")
        elif rule == "lines":
            if value is None and optional:
                continue
            if not isinstance(value, list):
                raise MessageRefusedError(f"{where}: expected a list of strings")
            if len(value) > limits.widget_lines:
                raise MessageRefusedError(
                    f"{where}: {len(value)} lines, more than the limit of "
                    f"{limits.widget_lines} (extensions.limits.widget_lines)"
                )
            for index, line in enumerate(value):
                check_text(f"{where}[{index}]", line, limits.text_chars)
    return args


def check_handler_state(event: str, state: dict[str, Any], limits: ExtensionLimits) -> None:
    """The state a worker's handlers left for a chained event, where it holds
    messages or content that the supervisor stores, shows or sends to a model.

    - ``context``: every message fits pi's schema (a ``content`` of 5 would crash
      the provider; issue 13 §4).
    - ``before_provider_request``: ``payload.messages`` likewise.
    - ``message_end``: the message fits the schema (it is written to the session).
    - ``before_agent_start``: at most `MAX_MESSAGES_PER_RESULT` messages, each a
      valid custom message within ``limits.message_bytes``.
    - ``input``: ``images`` are image blocks; ``tool_result``: ``content`` is a list
      of text/image blocks.

    Raises:
        MessageRefusedError: naming the event and the first bad field.
    """
    if event == "context":
        for index, message in enumerate(state.get("messages") or []):
            check_agent_message(message, where=f"context: messages[{index}]")
    elif event == "before_provider_request":
        payload = state.get("payload")
        messages = payload.get("messages") if isinstance(payload, dict) else None
        if isinstance(messages, list):
            for index, message in enumerate(messages):
                check_agent_message(
                    message, where=f"before_provider_request: payload.messages[{index}]"
                )
    elif event == "message_end":
        check_agent_message(state.get("message"), where="message_end: message")
    elif event == "before_agent_start":
        messages = state.get("messages") or []
        if len(messages) > MAX_MESSAGES_PER_RESULT:
            raise MessageRefusedError(
                f"before_agent_start: {len(messages)} messages, more than {MAX_MESSAGES_PER_RESULT}"
            )
        for index, message in enumerate(messages):
            custom_message_from(
                message, limits, where=f"before_agent_start: messages[{index}]", timestamp=0
            )
    elif event == "input":
        check_content_blocks(state.get("images") or [], where="input: images")
        images = state.get("images") or []
        if any(block.get("type") != "image" for block in images):
            raise MessageRefusedError("input: images: every block must be an image block")
    elif event == "tool_result":
        check_content_blocks(state.get("content"), where="tool_result: content")


def check_handler_result(pool: Any, source: Any, event: str, state: dict[str, Any]) -> None:
    """`check_handler_state` for the worker of extension ``source`` in ``pool`` (a
    `WorkerPool`), as the dispatcher calls it after each worker: a refused state
    is audited (``"action": "value_refused"``) and raised as the handler failure
    the event's failure rule then applies to (DESIGN §4, issue 13 §1).

    Raises:
        HandlerResultError: the state was refused (its message names the field).
    """
    from pi_sandbox.policies._extension_limits import LimitRules
    from pi_sandbox.protocol.hook_kinds import HandlerResultError

    if event not in _CHECKED_EVENTS:
        return
    rules = pool.config.extension_rules
    limits = (rules.limits if rules is not None else LimitRules()).for_origin(source.origin)
    try:
        check_handler_state(event, state, limits)
    except MessageRefusedError as exc:
        pool.audit(
            {
                "event": "extension",
                "action": "value_refused",
                "extension": str(source.path),
                "op": event,
                "reason": str(exc)[:1000],
            }
        )
        raise HandlerResultError(f"refused: {exc}") from exc


_CHECKED_EVENTS = frozenset(
    {
        "context",
        "before_provider_request",
        "message_end",
        "before_agent_start",
        "input",
        "tool_result",
    }
)
