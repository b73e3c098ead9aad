"""pi 1.6.0's RPC wire records, translated from our internal events (issue 17 §2).

The session, the extension host and the interactive UI speak our internal events
(``extension_ui_request {ui_id, method, extension, …}``, ``ui_notify``,
``ui_set_status``, ``ui_set_widget``, ``ui_set_title``, ``ui_set_editor_text``,
``message_update {delta}``, the ``session`` header). `RpcWire` sits between them and
the RPC client's stdout and writes what pi 1.6.0's RPC mode writes instead (pi docs
rpc.md, rpc-extension-ui.md; pi's ``dist/modes/rpc/rpc-mode.js``):

- no ``session`` record (pi's RPC stream has none; ``get_state`` names the file);
- dialogs: ``extension_ui_request {id, method, title, …, timeout}`` (``timeout`` in
  milliseconds, only when the extension gave one; never for ``editor``, as pi);
- fire-and-forget UI calls: ``extension_ui_request`` with a fresh ``id`` and
  ``method`` ``notify`` (``message``, ``notifyType``), ``setStatus`` (``statusKey``,
  ``statusText``), ``setWidget`` (``widgetKey``, ``widgetLines``), ``setTitle``
  (``title``), ``set_editor_text`` (``text``);
- ``message_update`` without an ``assistantMessageEvent`` (a provider that streams
  text deltas only) gains ``{"type": "text_delta", "contentIndex": 0, "delta"}``;
- ``queue_update {steering, followUp}`` whenever the steering/follow-up queue of
  `RpcQueue` changes, including when a queued message is delivered (pi matches the
  user message's text, agent-session.js);
- start-up ``notice``/``warning`` records (before the first command is read) go to
  stderr as ``pi: …`` lines: pi writes its start-up diagnostics there and opens the
  stream with nothing.

JSON mode does not use this module: its stream stays as it is.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RpcQueue", "RpcWire", "to_wire"]

# Our fire-and-forget UI events → (pi's method, {our field: pi's field}).
_FIRE_AND_FORGET: dict[str, tuple[str, dict[str, str]]] = {
    "ui_notify": ("notify", {"message": "message", "level": "notifyType"}),
    "ui_set_status": ("setStatus", {"key": "statusKey", "text": "statusText"}),
    "ui_set_widget": ("setWidget", {"key": "widgetKey", "lines": "widgetLines"}),
    "ui_set_title": ("setTitle", {"title": "title"}),
    "ui_set_editor_text": ("set_editor_text", {"text": "text"}),
}

# The fields of each dialog request, in pi's order (rpc-extension-ui.md).
_DIALOG_FIELDS: dict[str, tuple[str, ...]] = {
    "select": ("title", "options"),
    "confirm": ("title", "message"),
    "input": ("title", "placeholder"),
    "editor": ("title", "prefill"),
}


def to_wire(event: dict[str, Any]) -> dict[str, Any] | None:
    """pi's RPC record for one internal event (see the module docstring); None when
    pi's stream has no such record (the ``session`` header). Events pi and we share
    (``agent_start``, ``message_end``, responses, …) and our own records
    (``policy_decision``, ``extension_ui_cancelled``, …) pass unchanged, except that
    ``extension_ui_cancelled``'s ``ui_id`` is called ``id`` as in the request."""
    kind = event.get("type")
    if kind == "session":
        return None
    if kind == "extension_ui_request" and "ui_id" in event:
        method = str(event.get("method"))
        record: dict[str, Any] = {"type": "extension_ui_request", "id": event["ui_id"]}
        record["method"] = method
        for key in _DIALOG_FIELDS.get(method, ()):
            if key in event:
                record[key] = event[key]
        if method != "editor" and event.get("timeout") is not None:
            record["timeout"] = event["timeout"]
        return record
    if kind in _FIRE_AND_FORGET:
        method, fields = _FIRE_AND_FORGET[kind]
        record = {"type": "extension_ui_request", "id": str(uuid.uuid4()), "method": method}
        for ours, theirs in fields.items():
            if ours in event:
                record[theirs] = event[ours]
        return record
    if kind == "extension_ui_cancelled" and "ui_id" in event:
        return {"type": "extension_ui_cancelled", "id": event["ui_id"]}
    if kind == "message_update" and "assistantMessageEvent" not in event:
        delta = event.get("delta")
        if isinstance(delta, str):
            update = {"type": "text_delta", "contentIndex": 0, "delta": delta}
            return {**event, "assistantMessageEvent": update}
    return event


def _text_of(message: Any) -> str | None:
    if not isinstance(message, dict) or message.get("role") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return None


@dataclass
class RpcQueue:
    """The RPC client's queued ``steer``/``follow_up`` messages (pi's queue, rpc.md
    "Queue").

    Attributes:
        steering / follow_up: the texts waiting, oldest first (what ``queue_update``,
            ``clear_queue`` and ``get_state.pendingMessageCount`` report).
        held_steering / held_follow_up: messages sent while idle: they wait here
            until the next ``prompt`` starts a run (pi delivers them with it), then
            move to the session's queues (`release`).
        steering_mode / follow_up_mode: ``"all"`` or ``"one-at-a-time"`` (pi's
            default), set by ``set_steering_mode``/``set_follow_up_mode``.
    """

    steering: list[str] = field(default_factory=list)
    follow_up: list[str] = field(default_factory=list)
    held_steering: list[dict[str, Any]] = field(default_factory=list)
    held_follow_up: list[dict[str, Any]] = field(default_factory=list)
    steering_mode: str = "one-at-a-time"
    follow_up_mode: str = "one-at-a-time"

    def record(self) -> dict[str, Any]:
        """The ``queue_update`` record: ``{type, steering: [text], followUp: [text]}``."""
        return {
            "type": "queue_update",
            "steering": list(self.steering),
            "followUp": list(self.follow_up),
        }

    @property
    def pending(self) -> int:
        """pi's ``pendingMessageCount``."""
        return len(self.steering) + len(self.follow_up)

    def delivered(self, message: Any) -> bool:
        """A user message reached the conversation: if it was queued, it leaves the
        queue (True: a ``queue_update`` is due). pi matches on the text, steering first."""
        text = _text_of(message)
        if text is None:
            return False
        for texts in (self.steering, self.follow_up):
            if text in texts:
                texts.remove(text)
                return True
        return False

    def release(self, session: Any) -> None:
        """A run is about to start: messages held while idle go to the session's
        steering and follow-up queues, to be delivered in that run."""
        session.steering.extend(self.held_steering)
        session.follow_ups.extend(self.held_follow_up)
        self.held_steering.clear()
        self.held_follow_up.clear()

    def clear(self, session: Any) -> dict[str, list[str]]:
        """``clear_queue``: every queued message leaves the queue (held ones and those
        already handed to the session); returns ``{"steering", "followUp"}`` texts."""
        result = {"steering": list(self.steering), "followUp": list(self.follow_up)}
        queued = {id(m) for m in (*self.held_steering, *self.held_follow_up)}
        queued_texts = set(self.steering) | set(self.follow_up)
        for name in ("steering", "follow_ups"):
            kept = [
                m
                for m in getattr(session, name)
                if id(m) not in queued and _text_of(m) not in queued_texts
            ]
            getattr(session, name)[:] = kept
        self.steering.clear()
        self.follow_up.clear()
        self.held_steering.clear()
        self.held_follow_up.clear()
        return result


class RpcWire:
    """The RPC client's output: an ``emit`` function (``await wire(event)``) that
    writes each internal event as pi's wire record (`to_wire`) through ``out``
    (a `JsonOutput`).

    ``live`` is False until `serve_rpc` reads commands: before that, ``notice`` and
    ``warning`` records go to stderr (see the module docstring).
    """

    def __init__(self, out: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.out = out
        self.queue = RpcQueue()
        self.live = False

    async def __call__(self, event: dict[str, Any]) -> None:
        if not self.live and event.get("type") in ("pisandbox_notice", "pisandbox_warning"):
            try:
                print(f"pi: {event.get('message')}", file=sys.stderr, flush=True)
            except OSError:
                pass
            return
        record = to_wire(event)
        if record is None:
            return
        await self.out(record)
        if record.get("type") == "message_end" and self.queue.delivered(record.get("message")):
            await self.out(self.queue.record())

    async def write_line(self, line: str) -> None:
        """A record already serialised (``get_tree``), passed through as it is."""
        write_line = getattr(self.out, "write_line", None)
        if write_line is not None:
            await write_line(line)
        else:
            import json

            await self.out(json.loads(line))

    @property
    def closed(self) -> bool:
        """Whether the client's stdout is gone (`JsonOutput.closed`)."""
        return bool(getattr(self.out, "closed", False))

    @property
    def failed(self) -> bool:
        """Whether a write failed for another reason than the reader leaving
        (`JsonOutput.failed`): the run's status is then 1, as in ``--mode json``."""
        return bool(getattr(self.out, "failed", False))
