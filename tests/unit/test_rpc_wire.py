"""`rpc_wire`: our internal events written as pi 1.6.0's RPC records (issue 17 §2;
pi docs rpc-extension-ui.md), and the RPC queue."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from pi_sandbox.supervisor.modes.rpc_wire import RpcQueue, RpcWire, to_wire


def test_a_dialog_request_gets_pis_id_and_timeout_and_loses_our_fields() -> None:
    ours = {
        "type": "extension_ui_request",
        "ui_id": "ui-3",
        "method": "confirm",
        "extension": "/x/ext.py",
        "title": "Go?",
        "message": "sure",
        "timeout": 5000,
    }
    assert to_wire(ours) == {
        "type": "extension_ui_request",
        "id": "ui-3",
        "method": "confirm",
        "title": "Go?",
        "message": "sure",
        "timeout": 5000,
    }


def test_an_editor_request_never_carries_a_timeout_as_in_pi() -> None:
    ours = {
        "type": "extension_ui_request",
        "ui_id": "ui-1",
        "method": "editor",
        "extension": "/x",
        "title": "Edit",
        "prefill": "p",
        "timeout": 1000,
    }
    assert set(to_wire(ours) or {}) == {"type", "id", "method", "title", "prefill"}


def test_fire_and_forget_ui_events_become_requests_with_fresh_ids() -> None:
    cases = [
        (
            {"type": "ui_notify", "extension": "/x", "message": "hi", "level": "error"},
            {"method": "notify", "message": "hi", "notifyType": "error"},
        ),
        (
            {"type": "ui_set_status", "extension": "/x", "key": "k", "text": None},
            {"method": "setStatus", "statusKey": "k", "statusText": None},
        ),
        (
            {"type": "ui_set_widget", "extension": "/x", "key": "w", "lines": ["a"]},
            {"method": "setWidget", "widgetKey": "w", "widgetLines": ["a"]},
        ),
        (
            {"type": "ui_set_title", "extension": "/x", "title": "T"},
            {"method": "setTitle", "title": "T"},
        ),
        (
            {"type": "ui_set_editor_text", "extension": "/x", "text": "draft"},
            {"method": "set_editor_text", "text": "draft"},
        ),
    ]
    ids = set()
    for ours, expected in cases:
        record = to_wire(ours)
        assert record is not None
        ids.add(record.pop("id"))
        assert record == {"type": "extension_ui_request", **expected}
    assert len(ids) == len(cases)


def test_the_session_header_is_dropped_and_a_text_delta_gains_pis_update() -> None:
    assert to_wire({"type": "session", "version": 3}) is None
    assert to_wire({"type": "message_update", "delta": "Hi"}) == {
        "type": "message_update",
        "delta": "Hi",
        "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "Hi"},
    }
    # A provider that already streams pi's events is passed through unchanged.
    pis = {"type": "message_update", "assistantMessageEvent": {"type": "thinking_start"}}
    assert to_wire(pis) == pis
    assert to_wire({"type": "extension_ui_cancelled", "ui_id": "ui-2"}) == {
        "type": "extension_ui_cancelled",
        "id": "ui-2",
    }
    assert to_wire({"type": "policy_decision", "x": 1}) == {"type": "policy_decision", "x": 1}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def test_the_queue_releases_held_messages_and_clear_takes_back_every_queued_one() -> None:
    session = SimpleNamespace(steering=[], follow_ups=[])
    queue = RpcQueue()
    queue.steering.append("S")
    queue.held_steering.append(_user("S"))
    queue.follow_up.append("F")
    queue.held_follow_up.append(_user("F"))
    assert queue.pending == 2
    queue.release(session)
    assert session.steering == [_user("S")] and session.follow_ups == [_user("F")]
    assert queue.held_steering == [] and queue.pending == 2  # still queued for the client
    assert queue.delivered(_user("S")) is True and queue.steering == []
    assert queue.delivered(_user("S")) is False  # already gone
    session.steering.clear()
    other = _user("an extension's own message")
    session.follow_ups.append(other)
    assert queue.clear(session) == {"steering": [], "followUp": ["F"]}
    assert session.follow_ups == [other] and queue.pending == 0


def test_startup_notices_go_to_stderr_and_a_delivered_message_updates_the_queue(capsys) -> None:
    written: list[dict[str, Any]] = []

    async def out(record: dict[str, Any]) -> None:
        written.append(record)

    async def main() -> None:
        wire = RpcWire(out)
        await wire({"type": "pisandbox_notice", "message": "Loaded user extension /x.py"})
        await wire({"type": "session", "version": 3})
        wire.live = True
        wire.queue.follow_up.append("F")
        await wire({"type": "pisandbox_notice", "message": "later"})
        await wire({"type": "message_end", "message": _user("F")})

    trio.run(main)
    assert "pi: Loaded user extension /x.py" in capsys.readouterr().err
    assert [r["type"] for r in written] == ["pisandbox_notice", "message_end", "queue_update"]
    assert written[-1] == {"type": "queue_update", "steering": [], "followUp": []}
