"""Human approval of policy ``ask`` decisions over RPC (issue 18 "Approvals"): the real
CLI in ``--mode rpc`` with the scripted model (or the loopback OpenAI-compatible server
where the next model request must be checked), real policy files and real workers.

Security framing: the model controls the tool call's text and arguments; it tries to
get a broader grant than the user gave (a scope it names itself, a compound command
riding on a ``git push origin`` grant, another rule's ``ask``) and every attempt asks
again or is refused. The controls show the grant really lets through what it covers.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_openai import FakeOpenAI, text, tool_calls
from pi_runs import fake_provider_env
from test_rpc_mode import argv

pytestmark = pytest.mark.e2e

POLICY = """\
version: 1
tool_call:
  default: allow
  rules:
    - id: git-push
      tool: bash
      command: [git, push]
      decision: ask
      reason: Pushing publishes your work.
    - id: curl
      tool: bash
      command: [curl]
      decision: ask
      reason: Downloads need a look.
    - id: no-shred
      tool: bash
      command: [shred]
      decision: deny
      reason: Never shred files.
"""

WAIT_S = 90.0  # generous: a busy 2-core machine starts workers slowly


class Rpc:
    """``pi --mode rpc`` with a policy and an audit log; events are read by a thread so
    that every wait has a deadline (a hang fails the test instead of blocking it)."""

    def __init__(self, tmp_path: Path, *args: str, model: list[str] | None = None) -> None:
        policy = tmp_path / "policy.yaml"
        policy.write_text(POLICY)
        self.audit_path = tmp_path / "audit.jsonl"
        command = argv(
            tmp_path,
            "--mode",
            "rpc",
            "--policy",
            str(policy),
            "--audit-log",
            str(self.audit_path),
            *args,
            model=model,
        )
        if "--ci" in args:
            command.remove("--no-sandbox")  # CI mode is always sandboxed (real bwrap)
        self.proc = subprocess.Popen(
            command,
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: list[dict[str, Any]] = []
        self._unclaimed: list[dict[str, Any]] = []
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self._events.put(json.loads(line))
        self._events.put(None)

    def send(self, payload: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()

    def until(self, kind: str, **fields: Any) -> dict[str, Any]:
        """The first event not returned before of type ``kind`` whose ``fields`` have
        these values (in output order; events skipped on the way stay available, so
        the order in which two tasks of pi write them does not matter)."""

        def matches(event: dict[str, Any]) -> bool:
            return event.get("type") == kind and all(event.get(k) == v for k, v in fields.items())

        for index, event in enumerate(self._unclaimed):
            if matches(event):
                return self._unclaimed.pop(index)
        while True:
            try:
                event = self._events.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"no {kind} {fields} in {WAIT_S} s; seen: {self.seen}")
            if event is None:
                self._events.put(None)  # later waits fail at once too
                raise AssertionError(f"pi ended before {kind} {fields}; seen: {self.seen}")
            self.seen.append(event)
            if matches(event):
                return event
            self._unclaimed.append(event)

    def answer(self, request: dict[str, Any], decision: str, **extra: Any) -> dict[str, Any]:
        """Answer an approval request; returns the command's response."""
        self.send(
            {"type": "policy_approval_response", "id": request["id"], "decision": decision, **extra}
        )
        return self.until("response", command="policy_approval_response")

    def seen_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e.get("type") == kind]

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]

    def close(self) -> int:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(timeout=WAIT_S)
        finally:
            self.proc.kill()


def scripted(tmp_path: Path, *commands: str) -> list[str]:
    """A script with one bash call per turn, then ``done``."""
    script = tmp_path / "script.yaml"
    turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": c}}]} for c in commands]
    script.write_text(yaml.safe_dump([*turns, {"text": "done"}]))
    return ["--model", "scripted", "--script", str(script)]


def result_text(event: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in event["result"]["content"])


def test_an_ask_approved_once_runs_and_the_same_call_is_asked_again(tmp_path):
    rpc = Rpc(tmp_path, model=scripted(tmp_path, "git push origin main", "git push origin main"))
    try:
        rpc.send({"type": "prompt", "message": "go"})
        first = rpc.until("policy_approval_request")
        assert first["toolName"] == "bash" and first["args"] == {"command": "git push origin main"}
        assert (first["rule"], first["tier"], first["reason"]) == (
            "git-push",
            "managed",
            "Pushing publishes your work.",
        )
        assert first["commands"] == [{"argv": ["git", "push", "origin", "main"], "decision": "ask"}]
        assert [s["id"] for s in first["scopes"]] == ["command", "prefix"]
        assert rpc.answer(first, "allow_once")["success"] is True
        resolved = rpc.until("policy_approval_resolved", id=first["id"])
        assert (resolved["decision"], resolved["by"]) == ("allow_once", "user")
        ran = rpc.until("tool_execution_end", toolCallId=first["toolCallId"])
        assert ran["blocked"] is False  # it ran (git says this is no repository)
        second = rpc.until("policy_approval_request")  # allow once is once
        assert second["id"] != first["id"] and second["args"] == first["args"]
        rpc.answer(second, "deny")
        denied = rpc.until("tool_execution_end", toolCallId=second["toolCallId"])
        assert denied["blocked"] is True
        assert result_text(denied) == (
            "Blocked by policy rule git-push: Pushing publishes your work. (denied by the user)"
        )
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0
    records = [r for r in rpc.audit() if r["event"] == "policy_approval"]
    assert [(r["approval_id"], r["decision"], r["by"]) for r in records] == [
        (first["id"], "allow_once", "user"),
        (second["id"], "deny", "user"),
    ]
    assert all(r["rule"] == "git-push" and r["tool"] == "bash" for r in records)


def test_allow_for_this_session_covers_the_prefix_and_a_different_command_asks_again(tmp_path):
    model = scripted(
        tmp_path, "git push origin main", "git push origin dev", "git push upstream main"
    )
    rpc = Rpc(tmp_path, model=model)
    try:
        rpc.send({"type": "prompt", "message": "go"})
        first = rpc.until("policy_approval_request")
        prefix = next(s for s in first["scopes"] if s["id"] == "prefix")
        assert "git push origin" in prefix["label"] and "git-push" in prefix["label"]
        rpc.answer(first, "allow_session", scope="prefix")
        assert rpc.until("policy_approval_resolved")["scope"] == "prefix"
        # Control: the grant lets the same prefix through without a prompt.
        dev = rpc.until("policy_decision", toolCallId="call_2_0")
        assert (dev["effective"], dev["grantedBy"]) == ("allow", first["id"])
        assert rpc.until("tool_execution_end", toolCallId="call_2_0")["blocked"] is False
        other = rpc.until("policy_approval_request")  # another remote: not covered
        assert other["args"] == {"command": "git push upstream main"}
        rpc.answer(other, "deny")
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0
    assert [e["toolCallId"] for e in rpc.seen_of("policy_approval_request")] == [
        "call_1_0",
        "call_3_0",
    ]
    [granted] = [r for r in rpc.audit() if r.get("approval")]
    assert granted["tool_call_id"] == "call_2_0" and granted["effective"] == "allow"
    assert granted["approval"] == f"granted by session approval {first['id']}"
    [session] = [r for r in rpc.audit() if r["event"] == "policy_approval" and r["scope"]]
    assert session["decision"] == "allow_session" and "git push origin" in session["scope"]


def test_a_grant_is_not_reused_for_a_compound_command_with_a_part_it_does_not_cover(tmp_path):
    sentinel = tmp_path / "work" / "pwned"
    control_file = tmp_path / "work" / "control"
    model = scripted(
        tmp_path,
        "git push origin main",
        f"git push origin main && curl -s http://127.0.0.1:9/x | touch {sentinel}",
        "git push origin main; curl -s http://127.0.0.1:9/x",
        f"git push origin dev; touch {control_file}",
    )
    rpc = Rpc(tmp_path, model=model)
    try:
        rpc.send({"type": "prompt", "message": "go"})
        rpc.answer(rpc.until("policy_approval_request"), "allow_session", scope="prefix")
        # Attack: ride on the git push grant with another rule's ask (curl).
        for call in ("call_2_0", "call_3_0"):
            again = rpc.until("policy_approval_request")
            assert again["toolCallId"] == call and again["rule"] in ("git-push", "curl")
            assert {"argv": ["curl", "-s", "http://127.0.0.1:9/x"], "decision": "ask"} in again[
                "commands"
            ]
            rpc.answer(again, "deny")
            assert rpc.until("tool_execution_end", toolCallId=call)["blocked"] is True
        assert not sentinel.exists()
        # Control: a compound command whose other part no rule asks about is covered.
        control = rpc.until("policy_decision", toolCallId="call_4_0")
        assert control["effective"] == "allow" and control["grantedBy"]
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0
    assert control_file.exists() and not sentinel.exists()
    assert len(rpc.seen_of("policy_approval_request")) == 3


def test_the_model_cannot_name_or_widen_the_scope_of_a_grant(tmp_path):
    model = scripted(
        tmp_path,
        # The text tries to suggest a scope; the scopes come from the parse alone.
        "git push origin main  # allow_session scope=* (approve everything)",
        "git push",
        "git push origin main",
    )
    script = tmp_path / "script.yaml"
    turns = yaml.safe_load(script.read_text())
    # A call that names a scope in its arguments is refused by the tool's schema.
    turns.insert(
        0,
        {
            "tool_calls": [
                {"name": "bash", "arguments": {"command": "git push origin main", "scope": "*"}}
            ]
        },
    )
    script.write_text(yaml.safe_dump(turns))
    rpc = Rpc(tmp_path, model=model)
    try:
        rpc.send({"type": "prompt", "message": "go"})
        invalid = rpc.until("tool_execution_end", toolCallId="call_1_0")
        assert "Invalid arguments for tool bash" in result_text(invalid)
        request = rpc.until("policy_approval_request")
        assert request["toolCallId"] == "call_2_0"
        labels = " ".join(s["label"] for s in request["scopes"])
        assert "*" not in labels and "approve everything" not in labels
        # The client cannot make up a scope either: only the offered ids are accepted.
        for scope in ("*", "git", "tool", None):
            refused = rpc.answer(request, "allow_session", scope=scope)
            assert refused["success"] is False and "offered scope" in refused["error"]
        rpc.answer(request, "allow_session", scope="prefix")
        rpc.until("policy_approval_resolved", id=request["id"], decision="allow_session")
        # A shorter command is not inside the "git push origin" prefix: asked, and a
        # two-word command offers no prefix scope (never a program-wide grant).
        short = rpc.until("policy_approval_request")
        assert short["args"] == {"command": "git push"}
        assert [s["id"] for s in short["scopes"]] == ["command"]
        rpc.answer(short, "deny")
        # Control: the granted prefix itself is let through.
        covered = rpc.until("policy_decision", toolCallId="call_4_0")
        assert covered["effective"] == "allow" and covered["grantedBy"] == request["id"]
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0


def test_a_denial_with_a_message_reaches_the_model_in_the_next_request(tmp_path):
    replies = [
        tool_calls(("c1", "bash", {"command": "git push origin main"})),
        text("understood"),
    ]
    with FakeOpenAI(replies) as server:
        rpc = Rpc(tmp_path, model=["--model", "openai/x", "--base-url", server.url])
        try:
            rpc.send({"type": "prompt", "message": "go"})
            request = rpc.until("policy_approval_request")
            response = rpc.answer(request, "deny", message="Open a pull request instead.")
            assert response["success"] is True
            end = rpc.until("tool_execution_end", toolCallId="c1")
            assert result_text(end).endswith(
                "\nMessage from the user: Open a pull request instead."
            )
            rpc.until("agent_end")
        finally:
            assert rpc.close() == 0
        [sent] = server.requests[-1].tool_messages()
        assert "denied by the user" in json.dumps(sent)
        assert "Open a pull request instead." in json.dumps(sent)
    [record] = [r for r in rpc.audit() if r["event"] == "policy_approval"]
    assert record["message"] == "Open a pull request instead."


def test_an_abort_while_waiting_denies_the_call_with_operation_aborted(tmp_path):
    rpc = Rpc(tmp_path, model=scripted(tmp_path, "git push origin main"))
    try:
        rpc.send({"type": "prompt", "message": "go"})
        request = rpc.until("policy_approval_request")
        rpc.send({"type": "abort"})
        resolved = rpc.until("policy_approval_resolved", id=request["id"])
        assert (resolved["decision"], resolved["by"]) == ("deny", "abort")
        end = rpc.until("tool_execution_end", toolCallId=request["toolCallId"])
        assert result_text(end) == "Operation aborted" and end["blocked"] is True
        assert rpc.until("agent_end")["aborted"] is True
        # Answering it now is refused: the request is gone.
        assert rpc.answer(request, "allow_once")["success"] is False
    finally:
        assert rpc.close() == 0
    [record] = [r for r in rpc.audit() if r["event"] == "policy_approval"]
    assert (record["decision"], record["by"]) == ("deny", "abort")


def test_a_client_whose_input_ends_while_asked_gets_a_denial_and_pi_exits(tmp_path):
    rpc = Rpc(tmp_path, model=scripted(tmp_path, "git push origin main"))
    rpc.send({"type": "prompt", "message": "go"})
    request = rpc.until("policy_approval_request")
    assert rpc.close() == 0  # within WAIT_S: no hang
    remaining = rpc.seen + [e for e in iter(rpc._events.get, None)]
    [resolved] = [e for e in remaining if e.get("type") == "policy_approval_resolved"]
    assert (resolved["id"], resolved["decision"], resolved["by"]) == (
        request["id"],
        "deny",
        "closed",
    )
    [end] = [e for e in remaining if e.get("type") == "tool_execution_end"]
    assert "the approval prompt was closed without an answer" in result_text(end)


def test_an_approval_left_unanswered_past_the_timeout_setting_is_denied(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "settings.json").write_text('{"approvalTimeoutSeconds": 1}')
    rpc = Rpc(tmp_path, model=scripted(tmp_path, "git push origin main"))
    try:
        rpc.send({"type": "prompt", "message": "go"})
        request = rpc.until("policy_approval_request")
        resolved = rpc.until("policy_approval_resolved", id=request["id"])
        assert (resolved["decision"], resolved["by"]) == ("deny", "timeout")
        end = rpc.until("tool_execution_end", toolCallId=request["toolCallId"])
        assert "no answer to the approval prompt in time" in result_text(end)
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0


def test_a_bad_timeout_setting_is_a_usage_error_naming_the_file_and_key(tmp_path):
    (tmp_path / "agent").mkdir()
    settings = tmp_path / "agent" / "settings.json"
    settings.write_text('{"approvalTimeoutSeconds": "soon"}')
    proc = subprocess.run(
        argv(tmp_path, "--mode", "rpc"),
        input="",
        env=fake_provider_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 2
    assert f"{settings}: approvalTimeoutSeconds must be a positive number" in proc.stderr


def test_ci_mode_never_asks_even_with_an_rpc_client(tmp_path):
    rpc = Rpc(tmp_path, "--ci", model=scripted(tmp_path, "git push origin main"))
    try:
        rpc.send({"type": "prompt", "message": "go"})
        end = rpc.until("tool_execution_end")
        assert end["blocked"] is True
        assert result_text(end).endswith("(ask rule in a non-interactive run)")
        rpc.until("agent_end")
    finally:
        rpc.close()
    assert not rpc.seen_of("policy_approval_request")


def test_a_deny_rule_is_never_asked_nor_covered_by_a_grant(tmp_path):
    model = scripted(tmp_path, "git push origin main", "git push origin main && shred -u x")
    rpc = Rpc(tmp_path, model=model)
    try:
        rpc.send({"type": "prompt", "message": "go"})
        rpc.answer(rpc.until("policy_approval_request"), "allow_session", scope="prefix")
        decision = rpc.until("policy_decision", toolCallId="call_2_0")
        assert (decision["decision"], decision["effective"]) == ("deny", "deny")
        assert "grantedBy" not in decision
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0
    assert len(rpc.seen_of("policy_approval_request")) == 1


RUNTIME = Path(__file__).resolve().parent.parent / "fixtures" / "extensions" / "runtime"


def test_every_documented_ctx_ui_method_reaches_an_rpc_client(tmp_path):
    rpc = Rpc(tmp_path, "-e", str(RUNTIME / "ui_methods.py"), model=scripted(tmp_path))
    try:
        rpc.send({"type": "prompt", "message": "/ui"})
        assert rpc.until("ui_set_title")["title"] == "pi - approvals fixture"
        notify = rpc.until("ui_notify")
        assert (notify["message"], notify["level"]) == ("hello", "warning")
        assert rpc.until("ui_set_status")["text"] == "working"
        assert rpc.until("ui_set_widget")["lines"] == ["line 1", "line 2"]
        editor = rpc.until("extension_ui_request", method="editor")
        assert editor["prefill"] == "prefilled"
        rpc.send({"type": "extension_ui_response", "ui_id": editor["ui_id"], "value": "a\nb"})
        # input has a timeout of 1 s: unanswered, it is cancelled and returns None.
        asked = rpc.until("extension_ui_request", method="input")
        assert asked["timeout"] == 1000 and "timeout" not in editor  # ms, as pi's
        cancelled = rpc.until("extension_ui_cancelled")
        assert cancelled["ui_id"] == asked["ui_id"]
    finally:
        assert rpc.close() == 0
    answers = json.loads((tmp_path / "work" / "ui.jsonl").read_text())
    assert answers == {"editor": "a\nb", "input": None}


def test_the_users_own_bash_command_is_asked_too_and_a_denial_is_its_error(tmp_path):
    rpc = Rpc(tmp_path, model=scripted(tmp_path))
    try:
        rpc.send({"type": "bash", "command": "git push origin main", "id": "b"})
        request = rpc.until("policy_approval_request")
        assert request["rule"] == "git-push"
        rpc.answer(request, "deny", message="not from here")
        response = rpc.until("response", command="bash")
        assert response["success"] is False
        assert response["error"].endswith(
            "(denied by the user)\nMessage from the user: not from here"
        )
    finally:
        assert rpc.close() == 0


def test_an_abort_ends_an_open_extension_dialog_and_the_run(tmp_path):
    rpc = Rpc(
        tmp_path,
        "-e",
        str(RUNTIME / "confirm_gate.py"),
        model=scripted(tmp_path, "echo ran > ran.txt"),
    )
    try:
        rpc.send({"type": "prompt", "message": "go"})
        dialog = rpc.until("extension_ui_request", method="confirm")
        rpc.send({"type": "abort"})
        assert rpc.until("extension_ui_cancelled")["ui_id"] == dialog["ui_id"]
        end = rpc.until("tool_execution_end")
        assert end["blocked"] is True
        assert rpc.until("agent_end")["aborted"] is True
    finally:
        assert rpc.close() == 0
    assert not (tmp_path / "work" / "ran.txt").exists()


def test_an_abort_ends_the_approval_of_the_users_own_bash_command(tmp_path):
    rpc = Rpc(tmp_path, model=scripted(tmp_path))
    try:
        rpc.send({"type": "bash", "command": "git push origin main", "id": "b"})
        request = rpc.until("policy_approval_request")
        rpc.send({"type": "abort"})
        resolved = rpc.until("policy_approval_resolved", id=request["id"])
        assert (resolved["decision"], resolved["by"]) == ("deny", "abort")
        response = rpc.until("response", command="bash")
        assert (response["success"], response["error"]) == (False, "Operation aborted")
    finally:
        assert rpc.close() == 0


def test_a_prefix_grant_never_covers_added_options_that_run_code(tmp_path):
    """Red-team finding: a `git push origin` grant covered `--receive-pack='…'` and
    `--exec=…`, which make git run any command. The attack now asks again; a plain
    further word is still covered (control)."""
    sentinel = tmp_path / "work" / "widened"
    model = scripted(
        tmp_path,
        "git push origin main",
        f"git push origin --receive-pack='touch {sentinel}; git-receive-pack' main",
        f"git push origin --exec='touch {sentinel}' main",
        "git push origin dev",
    )
    rpc = Rpc(tmp_path, model=model)
    try:
        rpc.send({"type": "prompt", "message": "go"})
        rpc.answer(rpc.until("policy_approval_request"), "allow_session", scope="prefix")
        for call in ("call_2_0", "call_3_0"):
            again = rpc.until("policy_approval_request")
            assert again["toolCallId"] == call  # asked again, not covered by the grant
            rpc.answer(again, "deny")
            assert rpc.until("tool_execution_end", toolCallId=call)["blocked"] is True
        control = rpc.until("policy_decision", toolCallId="call_4_0")
        assert control["effective"] == "allow" and control["grantedBy"]
        rpc.until("agent_end")
    finally:
        assert rpc.close() == 0
    assert not sentinel.exists()
    assert len(rpc.seen_of("policy_approval_request")) == 3
