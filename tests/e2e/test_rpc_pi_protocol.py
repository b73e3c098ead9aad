"""pi 1.6.0's RPC protocol in ours (issue 17 §2; docs/rpc.md), without pi installed:
the queue (``steer``/``follow_up``/``clear_queue``/``queue_update``), the extension UI
sub-protocol with a real extension, ``bash`` streaming and ``abort_bash``,
``agent_settled``, ``export_html`` and our ``sandbox_`` commands. The real CLI as a
subprocess, real workers, the scripted model."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e

RUNTIME = Path(__file__).resolve().parent.parent / "fixtures" / "extensions" / "runtime"
DEADLINE_S = 120  # generous: a busy 2-core machine; each wait ends as soon as it can


class Rpc:
    """``pi --mode rpc`` with the scripted model: `send`, then `until` a record matches."""

    def __init__(self, tmp_path: Path, turns: list[dict[str, Any]], *args: str) -> None:
        import yaml

        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump(turns))
        argv = [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--no-sandbox",
            "--no-session",
            "--no-extensions",
            "-C",
            str(self.work),
            "--model",
            "scripted",
            "--script",
            str(script),
            *args,
            "--mode",
            "rpc",
        ]
        self.proc = subprocess.Popen(
            argv,
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.records: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw.append(line)
            self.records.put(json.loads(line))
        self.records.put(None)

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()

    def until(self, matches: Any) -> dict[str, Any]:
        """The next record for which ``matches(record)`` (a string: that ``type``)."""
        if isinstance(matches, str):
            kind = matches
            matches = lambda r: r.get("type") == kind  # noqa: E731
        end = time.monotonic() + DEADLINE_S
        while True:
            record = self.records.get(timeout=max(0.1, end - time.monotonic()))
            assert record is not None, f"pi ended; records: {self.seen}"
            self.seen.append(record)
            if matches(record):
                return record

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send ``command`` with an id and return its response."""
        command.setdefault("id", f"c{len(self.seen)}-{command['type']}")
        self.send(command)
        return self.until(lambda r: r.get("type") == "response" and r.get("id") == command["id"])

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        finally:
            self.proc.kill()


def _user_texts(records: list[dict[str, Any]]) -> list[str]:
    return [
        r["message"]["content"][0]["text"]
        for r in records
        if r.get("type") == "message_end" and r["message"].get("role") == "user"
    ]


def test_idle_steer_and_follow_up_wait_for_the_next_prompt_and_are_delivered_in_its_run(
    tmp_path,
):
    rpc = Rpc(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    try:
        steer = rpc.call({"type": "steer", "message": "S"})
        assert steer["data"] == {"disposition": "queued"}
        follow = rpc.call({"type": "follow_up", "message": "F"})
        assert follow["data"] == {"disposition": "queued"}
        updates = [r for r in rpc.seen if r.get("type") == "queue_update"]
        assert updates[-1] == {"type": "queue_update", "steering": ["S"], "followUp": ["F"]}
        state = rpc.call({"type": "get_state"})
        assert state["data"]["pendingMessageCount"] == 2
        assert not [r for r in rpc.seen if r.get("type") == "agent_start"]  # nothing ran

        started = len(rpc.seen)
        prompt = rpc.call({"type": "prompt", "message": "P"})
        assert prompt["data"] == {"disposition": "started"}
        settled = rpc.until("agent_settled")
        assert settled == {"type": "agent_settled", "aborted": False}
        run = rpc.seen[started:]
        # One run: the prompt, the steering message after its first turn, the
        # follow-up when the model stopped; each leaves the queue as it is delivered.
        assert [r["type"] for r in run].count("agent_start") == 1
        assert _user_texts(run) == ["P", "S", "F"]
        assert [r for r in run if r.get("type") == "queue_update"][-1] == {
            "type": "queue_update",
            "steering": [],
            "followUp": [],
        }
        assert rpc.call({"type": "get_last_assistant_text"})["data"] == {"text": "three"}
        assert rpc.call({"type": "get_state"})["data"]["pendingMessageCount"] == 0
    finally:
        assert rpc.close() == 0


def test_clear_queue_hands_the_queued_messages_back_and_they_never_reach_the_model(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "one"}, {"text": "two"}])
    try:
        rpc.call({"type": "steer", "message": "S"})
        rpc.call({"type": "follow_up", "message": "F"})
        cleared = rpc.call({"type": "clear_queue"})
        assert cleared["data"] == {"steering": ["S"], "followUp": ["F"]}
        assert rpc.seen[-2] == {"type": "queue_update", "steering": [], "followUp": []}
        started = len(rpc.seen)
        rpc.call({"type": "prompt", "message": "P"})
        rpc.until("agent_settled")
        assert _user_texts(rpc.seen[started:]) == ["P"]
    finally:
        assert rpc.close() == 0


def test_a_prompt_during_a_run_needs_a_streaming_behaviour_and_is_then_queued(tmp_path):
    # The first turn's bash call keeps the run going until the test creates "go".
    wait = "while [ ! -e go ]; do sleep 0.05; done; echo went"
    turns = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": wait}}]},
        {"text": "after the tool"},
        {"text": "answer to the follow-up"},
    ]
    rpc = Rpc(tmp_path, turns)
    try:
        rpc.call({"type": "prompt", "message": "P"})
        rpc.until("tool_execution_start")
        refused = rpc.call({"type": "prompt", "message": "too soon"})
        assert refused["success"] is False
        assert refused["error"].startswith("Agent is already processing.")
        queued = rpc.call({"type": "prompt", "message": "Q", "streamingBehavior": "followUp"})
        assert queued["data"] == {"disposition": "queued"}
        (rpc.work / "go").touch()
        rpc.until("agent_settled")
        assert _user_texts(rpc.seen) == ["P", "Q"]
        assert rpc.call({"type": "get_last_assistant_text"})["data"]["text"] == (
            "answer to the follow-up"
        )
    finally:
        assert rpc.close() == 0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # pi's default: one steering message per turn.
        (None, ["user:P", "assistant:", "user:S1", "assistant:a", "user:S2", "assistant:b"]),
        ("all", ["user:P", "assistant:", "user:S1", "user:S2", "assistant:a"]),
    ],
)
def test_the_steering_mode_decides_how_many_messages_one_delivery_takes(tmp_path, mode, expected):
    wait = "while [ ! -e go ]; do sleep 0.05; done"
    turns = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": wait}}]},
        {"text": "a"},
        {"text": "b"},
        {"text": "c"},
    ]
    rpc = Rpc(tmp_path, turns)
    try:
        if mode is not None:
            assert rpc.call({"type": "set_steering_mode", "mode": mode})["success"]
        state = rpc.call({"type": "get_state"})["data"]
        assert state["steeringMode"] == (mode or "one-at-a-time")
        rpc.call({"type": "prompt", "message": "P"})
        rpc.until("tool_execution_start")
        rpc.call({"type": "steer", "message": "S1"})
        rpc.call({"type": "steer", "message": "S2"})
        (rpc.work / "go").touch()
        rpc.until("agent_settled")
    finally:
        assert rpc.close() == 0
    said = [
        f"{r['message']['role']}:"
        + "".join(b.get("text", "") for b in r["message"]["content"] if b["type"] == "text")
        for r in rpc.seen
        if r.get("type") == "message_end" and r["message"]["role"] in ("user", "assistant")
    ]
    assert said == expected


def test_the_extension_ui_sub_protocol_is_pis_and_answers_get_no_response(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "spare"}], "-e", str(RUNTIME / "rpc_ui_wire.py"))
    try:
        assert rpc.call({"type": "prompt", "message": "/uiwire"})["data"] == {
            "disposition": "handled"
        }
        answers = {
            "confirm": {"confirmed": True},
            "select": {"value": "B"},
            "input": {"value": "typed"},
            "editor": {"cancelled": True},
        }
        while True:
            request = rpc.until("extension_ui_request")
            if request["method"] in answers:
                answer = answers[request["method"]]
                rpc.send({"type": "extension_ui_response", "id": request["id"], **answer})
            if request["method"] == "editor":
                break
        late = rpc.until(lambda r: r.get("method") == "confirm" and r.get("title") == "Late?")
        assert late["timeout"] == 500  # milliseconds, as pi
        cancelled = rpc.until("extension_ui_cancelled")
        assert cancelled == {"type": "extension_ui_cancelled", "id": late["id"]}
        # An answer to a dialog that ended is dropped without a response, as pi.
        rpc.send({"type": "extension_ui_response", "id": late["id"], "confirmed": True})
        assert rpc.call({"type": "get_state"})["success"] is True
    finally:
        assert rpc.close() == 0
    by_method = {r["method"]: r for r in rpc.seen if r.get("type") == "extension_ui_request"}
    assert {k: v for k, v in by_method["notify"].items() if k != "id"} == {
        "type": "extension_ui_request",
        "method": "notify",
        "message": "hello",
        "notifyType": "warning",
    }
    assert by_method["setStatus"]["statusKey"] == "wire"
    assert by_method["setStatus"]["statusText"] == "busy"
    assert by_method["setWidget"]["widgetKey"] == "wire"
    assert by_method["setWidget"]["widgetLines"] == ["line 1", "line 2"]
    assert by_method["setTitle"]["title"] == "wire title"
    assert by_method["set_editor_text"]["text"] == "draft text"
    confirm = next(r for r in rpc.seen if r.get("title") == "Proceed?")
    assert set(confirm) == {"type", "id", "method", "title", "message", "timeout"}
    assert set(by_method["editor"]) == {"type", "id", "method", "title", "prefill"}
    assert not [
        r
        for r in rpc.seen
        if r.get("type") == "response" and r["command"] == "extension_ui_response"
    ]
    log = (rpc.work / "uiwire.jsonl").read_text().splitlines()
    assert json.loads(log[0]) == {
        "confirm": True,
        "select": "B",
        "input": "typed",
        "editor": None,
        "late": False,
    }


def test_a_wrongly_typed_answer_is_the_dialogs_default_never_a_yes(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "spare"}], "-e", str(RUNTIME / "rpc_dialogs.py"))
    try:
        rpc.send({"type": "prompt", "message": "/ask"})
        confirm = rpc.until("extension_ui_request")
        # A yes given as a string must stay a no; an offered option is taken.
        rpc.send({"type": "extension_ui_response", "id": confirm["id"], "confirmed": "yes"})
        select = rpc.until("extension_ui_request")
        rpc.send({"type": "extension_ui_response", "id": select["id"], "value": "green"})
        rpc.send({"type": "prompt", "message": "/ask", "id": "second"})
        confirm = rpc.until(lambda r: r.get("type") == "extension_ui_request")
        # Control: the well-formed yes is a yes.
        rpc.send({"type": "extension_ui_response", "id": confirm["id"], "confirmed": True})
        select = rpc.until("extension_ui_request")
        rpc.send({"type": "extension_ui_response", "id": select["id"], "value": "purple"})
        rpc.call({"type": "get_state"})
    finally:
        assert rpc.close() == 0
    lines = [json.loads(x) for x in (rpc.work / "answers.jsonl").read_text().splitlines()]
    assert lines == [{"confirm": False, "select": "green"}, {"confirm": True, "select": None}]


def test_bash_streams_its_output_and_abort_bash_stops_a_long_command(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "spare"}])
    try:
        done = rpc.call({"type": "bash", "command": "echo one; echo two", "id": "b1"})
        updates = [r for r in rpc.seen if r.get("type") == "bash_execution_update"]
        assert updates and all(set(u) == {"type", "id", "delta"} for u in updates)
        assert all(u["id"] == "b1" for u in updates)
        assert "".join(u["delta"] for u in updates) == "one\ntwo\n"
        assert done["data"] == {
            "output": "one\ntwo",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
        }
        rpc.send({"type": "bash", "command": "echo started; sleep 600", "id": "long"})
        rpc.until(lambda r: r.get("type") == "bash_execution_update" and r.get("id") == "long")
        started = time.monotonic()
        assert rpc.call({"type": "abort_bash"})["success"] is True
        aborted = rpc.until(lambda r: r.get("type") == "response" and r.get("id") == "long")
        assert time.monotonic() - started < 60  # not the 600 s of the sleep
        assert aborted["data"]["cancelled"] is True
        assert aborted["data"]["output"].startswith("started")
        # A bash command alone is no agent run: nothing settles.
        assert not [r for r in rpc.seen if r.get("type") == "agent_settled"]
    finally:
        assert rpc.close() == 0


def test_the_stream_opens_with_no_session_record_and_startup_notes_go_to_stderr(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "spare"}], "-e", str(RUNTIME / "rpc_dialogs.py"))
    try:
        rpc.call({"type": "get_state", "id": "first"})
        assert [r["type"] for r in rpc.seen] == ["response"]
    finally:
        assert rpc.close() == 0
    assert rpc.proc.stderr is not None
    assert "Loaded cli extension" in rpc.proc.stderr.read().decode()


def test_export_html_writes_a_page_where_the_models_markup_is_only_text(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "<script>alert(1)</script><b>bold</b>"}])
    try:
        rpc.call({"type": "prompt", "message": "hi <img src=x onerror=alert(2)>"})
        rpc.until("agent_settled")
        exported = rpc.call({"type": "export_html", "outputPath": "out.html"})
        assert exported["data"] == {"path": str(rpc.work / "out.html")}
        default = rpc.call({"type": "export_html"})
        assert Path(default["data"]["path"]).parent == rpc.work
        assert Path(default["data"]["path"]).name.startswith("pi-session-")
    finally:
        assert rpc.close() == 0
    page = (rpc.work / "out.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert "hi &lt;img src=x onerror=alert(2)&gt;" in page


def test_our_own_commands_have_sandbox_names_and_the_old_names_still_work(tmp_path):
    rpc = Rpc(tmp_path, [{"text": "spare"}])
    try:
        unknown = rpc.call({"type": "navigate"})
        assert unknown == {
            "type": "response",
            "command": "navigate",
            "success": False,
            "id": unknown["id"],
            "error": "Unknown command: navigate",
        }
        reloaded = rpc.call({"type": "sandbox_reload"})
        assert reloaded["success"] is True and reloaded["command"] == "sandbox_reload"
        assert rpc.call({"type": "reload"})["success"] is True
        assert rpc.call({"type": "sandbox_quit"})["success"] is True
        assert rpc.proc.wait(timeout=DEADLINE_S) == 0
    finally:
        rpc.close()
