"""The terminal UI's dialogs answered by keys (issue 18), on prompt_toolkit's pipe
input and a dummy output: the policy ``ask`` approval prompt of the contract with
the approvals backend (``policy_approval_request`` in; ``approval_response(id,
decision, scope, message)`` out, here recorded by a stand-in frontend), extension
dialogs, and the start-up trust question."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prompt_toolkit")

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from pi_sandbox.supervisor.tui.app import TerminalApp

DEADLINE_S = 30.0


class StandInFrontend:
    """Test-only: what `TerminalFrontend` gives the screen (an event queue) and what
    the screen calls back (``act``), recorded."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.actions: list[tuple[Any, ...]] = []

    def act(self, *action: Any) -> None:
        self.actions.append(action)


@pytest.fixture
def screen(tmp_path: Path):
    frontend = StandInFrontend()
    ready = threading.Event()
    with create_pipe_input() as pipe:
        app = TerminalApp(
            frontend,
            cwd=tmp_path,
            history_path=tmp_path / "agent" / "prompt-history",
            on_ready=ready.set,
            input=pipe,
            output=DummyOutput(),
        )
        thread = threading.Thread(target=app.run, daemon=True)
        thread.start()
        assert ready.wait(DEADLINE_S)

        class Screen:
            def post(self, event: dict[str, Any]) -> None:
                frontend.events.put(event)
                app.wake()

            def keys(self, data: str) -> None:
                pipe.send_text(data)

            def wait_action(self, count: int = 1) -> list[tuple[Any, ...]]:
                deadline = time.monotonic() + DEADLINE_S
                while time.monotonic() < deadline and len(frontend.actions) < count:
                    time.sleep(0.01)
                assert len(frontend.actions) >= count, frontend.actions
                return frontend.actions

            def wait(self, predicate: Any) -> None:
                deadline = time.monotonic() + DEADLINE_S
                while time.monotonic() < deadline and not predicate():
                    time.sleep(0.01)
                assert predicate()

        yield Screen(), app, frontend
        app.request_exit()
        thread.join(DEADLINE_S)


APPROVAL = {
    "type": "policy_approval_request",
    "id": "ap-1",
    "toolCallId": "call_1",
    "toolName": "bash",
    "args": {"command": "git push origin main"},
    "rule": "ask-push",
    "tier": "project",
    "source": "/p/.pi/policy.yaml",
    "reason": "pushing needs a human",
    "commands": [{"argv": ["git", "push", "origin", "main"], "decision": "ask"}],
    "scopes": [
        {"id": "exact", "label": "bash: git push origin main"},
        {"id": "prefix", "label": "bash: git push …"},
    ],
}

ESC = "\x1b"


def test_an_approval_allowed_once_answers_allow_once(screen):
    term, app, _ = screen
    term.post(APPROVAL)
    term.wait(lambda: app.dialogs)
    text = "".join(t for _, t in app._dialog_text())
    assert "git push origin main" in text and "ask-push" in text and "needs a human" in text
    term.keys("o")
    assert term.wait_action() == [("approval", "ap-1", "allow_once", None, None)]
    assert not app.dialogs


def test_allow_for_this_session_shows_the_scopes_and_sends_the_chosen_one(screen):
    term, app, _ = screen
    term.post(APPROVAL)
    term.wait(lambda: app.dialogs)
    term.keys("s")
    term.wait(lambda: app.dialogs and app.dialogs[0].stage == "scope")
    text = "".join(t for _, t in app._dialog_text())
    assert "bash: git push …" in text  # shown before confirming
    term.keys("\x1b[B")  # Down
    term.wait(lambda: app.dialogs[0].selected == 1)
    term.keys("\r")
    assert term.wait_action() == [("approval", "ap-1", "allow_session", "prefix", None)]


def test_deny_with_a_message_sends_the_typed_message(screen):
    term, app, _ = screen
    term.post(APPROVAL)
    term.wait(lambda: app.dialogs)
    term.keys("d")
    term.wait(lambda: app.dialogs and app.dialogs[0].stage == "message")
    term.keys("do not push, open a PR")
    term.wait(lambda: app.dialog_input.text == "do not push, open a PR")
    term.keys("\r")
    assert term.wait_action() == [("approval", "ap-1", "deny", None, "do not push, open a PR")]
    assert app.editor.text == ""  # the typing went to the dialog, not the editor


def test_esc_denies_an_approval(screen):
    term, app, _ = screen
    term.post(APPROVAL)
    term.wait(lambda: app.dialogs)
    term.keys(ESC)
    assert term.wait_action() == [("approval", "ap-1", "deny", None, None)]


def test_a_timed_out_approval_closes_its_prompt_without_an_answer(screen):
    term, app, frontend = screen
    term.post(APPROVAL)
    term.wait(lambda: app.dialogs)
    term.post(
        {"type": "policy_approval_resolved", "id": "ap-1", "decision": "deny", "by": "timeout"}
    )
    term.wait(lambda: not app.dialogs)
    assert frontend.actions == []


def test_keys_other_than_the_choices_do_not_reach_the_editor_while_a_dialog_is_open(screen):
    term, app, _ = screen
    term.post(
        {"type": "extension_ui_request", "ui_id": "ui-1", "method": "confirm", "title": "Go?"}
    )
    term.wait(lambda: app.dialogs)
    term.keys("xz")
    term.keys("n")
    assert term.wait_action() == [("ui", "ui-1", False)]
    assert app.editor.text == ""


def test_an_input_dialog_sends_the_typed_line(screen):
    term, app, _ = screen
    term.post(
        {"type": "extension_ui_request", "ui_id": "ui-2", "method": "input", "title": "Name?"}
    )
    term.wait(lambda: app.dialogs)
    term.keys("Ada yes")
    term.wait(lambda: app.dialog_input.text == "Ada yes")
    term.keys("\r")
    assert term.wait_action() == [("ui", "ui-2", "Ada yes")]


def test_an_extension_dialog_cancelled_by_the_host_closes(screen):
    term, app, frontend = screen
    term.post(
        {
            "type": "extension_ui_request",
            "ui_id": "ui-3",
            "method": "select",
            "title": "Pick",
            "options": ["a", "b"],
            "timeout": 5,
        }
    )
    term.wait(lambda: app.dialogs)
    term.post({"type": "extension_ui_cancelled", "ui_id": "ui-3"})
    term.wait(lambda: not app.dialogs)
    assert frontend.actions == []


def test_the_trust_question_returns_the_decision_and_whether_to_save_it(screen):
    term, app, _ = screen
    answers: list[Any] = []
    term.post(
        {
            "type": "tui_trust_request",
            "cwd": "/p",
            "resources": ["/p/.pi/extensions/x.py"],
            "allowed": ["yes", "sandboxed", "no"],
            "reply": answers.append,
        }
    )
    term.wait(lambda: app.dialogs)
    term.keys("\x1b[B")
    term.wait(lambda: app.dialogs[0].selected == 1)
    term.keys("\r")
    term.wait(lambda: app.dialogs and app.dialogs[0].stage == "save")
    term.keys("\x1b[B")
    term.wait(lambda: app.dialogs[0].selected == 1)
    term.keys("\r")
    term.wait(lambda: answers)
    assert answers == [("sandboxed", False)]


def test_the_trust_question_offers_only_what_the_policy_allows(screen):
    term, app, _ = screen
    term.post(
        {
            "type": "tui_trust_request",
            "cwd": "/p",
            "resources": [],
            "allowed": ["sandboxed", "no"],
            "reply": lambda value: None,
        }
    )
    term.wait(lambda: app.dialogs)
    assert app.dialogs[0].options == ["Trust sandboxed", "Do not trust"]


def test_untrusted_text_in_a_dialog_cannot_inject_terminal_escapes(screen):
    term, app, _ = screen
    term.post({**APPROVAL, "args": {"command": "echo \x1b]0;pwned\x07 \x1b[2J"}})
    term.wait(lambda: app.dialogs)
    text = "".join(t for _, t in app._dialog_text())
    assert "\x1b" not in text and "\\x1b" in text


def test_extension_status_and_widgets_show_above_the_footer_and_clear(screen):
    term, app, _ = screen
    term.post({"type": "ui_set_status", "extension": "/e.py", "key": "build", "text": "build: ok"})
    term.post({"type": "ui_set_widget", "extension": "/e.py", "key": "w", "lines": ["a", "b"]})

    def status() -> str:
        return "".join(text for _, text in app._status_text() or [])

    term.wait(lambda: "build: ok" in status())
    assert status() == "a\nb\nbuild: ok"
    term.post({"type": "ui_set_status", "extension": "/e.py", "key": "build", "text": None})
    term.wait(lambda: "build: ok" not in status())
