"""``pi --mode rpc`` against hostile or careless clients, dialogs, compaction, the user's
own ``bash`` and extension flags: the real CLI as a subprocess, real workers, a
loopback OpenAI-compatible server where the provider request must be checked."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e

RUNTIME = Path(__file__).resolve().parent.parent / "fixtures" / "extensions" / "runtime"
SCRIPT = "- text: first\n- text: second\n- text: third\n"


def argv(tmp_path: Path, *rest: str, model: list[str] | None = None) -> list[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if model is None:
        script = tmp_path / "script.yaml"
        script.write_text(SCRIPT)
        model = ["--model", "scripted", "--script", str(script)]
    return [
        sys.executable,
        "-m",
        "pi_sandbox.cli",
        "--no-sandbox",
        "--no-session",
        "--no-extensions",
        "-C",
        str(work),
        *model,
        *rest,
    ]


def run_pi(
    tmp_path: Path, *args: str, model: list[str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One ``pi`` run to its end (text mode), with the test's private environment."""
    return subprocess.run(
        argv(tmp_path, *args, model=model),
        input=stdin,
        env=fake_provider_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def responses(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "response"]


class RpcSession:
    """``pi --mode rpc`` as a subprocess: `send` a command, `until` an event matches."""

    def __init__(self, tmp_path: Path, *args: str, model: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv(tmp_path, "--mode", "rpc", *args, model=model),
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: list[dict[str, Any]] = []

    def send(self, payload: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()

    def until(self, matches: Any) -> dict[str, Any]:
        """The next event for which ``matches(event)`` (a type name matches that type)."""
        assert self.proc.stdout is not None
        if isinstance(matches, str):
            kind = matches
            matches = lambda e: e.get("type") == kind  # noqa: E731
        for line in self.proc.stdout:
            self.seen.append(json.loads(line))
            if matches(self.seen[-1]):
                return self.seen[-1]
        raise AssertionError(f"pi ended; events: {self.seen}")

    def command(self, payload: dict[str, Any], matches: Any) -> dict[str, Any]:
        self.send(payload)
        return self.until(matches)

    def close(self, timeout: float = 120) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()


def test_malformed_command_lines_each_get_one_failed_response_and_the_session_goes_on(
    tmp_path,
):
    bad = [
        b'{"type": "get_state", "id": ' + b"9" * 5000 + b"}",  # past int's digit limit
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the stack
        b'{"type": "get_state", "id": 1e999}',  # infinity
        b"[1, 2]",  # not an object
        b"\xff\xfe not utf-8",
        b'{"no": "type"}',
        b'{"type": "launch_missiles"}',
        b"x" * (9 * 1024 * 1024),  # longer than a command may be, in one line
    ]
    stdin = b"\n".join([*bad, b'{"type": "get_state", "id": "ok"}']) + b"\n"
    proc = subprocess.run(
        argv(tmp_path, "--mode", "rpc"),
        input=stdin,
        env=fake_provider_env(tmp_path),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    answered = responses(lines(proc.stdout.decode()))
    assert [r["success"] for r in answered] == [False] * len(bad) + [True]
    assert answered[-1]["id"] == "ok" and answered[-1]["data"]["isStreaming"] is False
    # pi's shapes: a line that is no command is a "parse" failure, an unknown type is not.
    assert [r["command"] for r in answered[:-1]] == ["parse"] * 6 + ["launch_missiles", "parse"]
    assert answered[-3]["error"] == "Unknown command: launch_missiles"
    assert "4300" in answered[0]["error"] and "recursion" in answered[1]["error"]
    assert "longer than" in answered[-2]["error"]


def test_dialog_answers_must_fit_the_dialog_and_open_dialogs_end_with_the_input(tmp_path):
    log = tmp_path / "work" / "answers.jsonl"
    rpc = RpcSession(tmp_path, "-e", str(RUNTIME / "rpc_dialogs.py"))
    try:
        # Answers of the wrong type are the defaults: "false" never becomes a yes.
        confirm = rpc.command({"type": "prompt", "message": "/ask"}, "extension_ui_request")
        assert confirm["method"] == "confirm"
        select = rpc.command(
            {"type": "extension_ui_response", "id": confirm["id"], "confirmed": "false"},
            "extension_ui_request",
        )
        rpc.send({"type": "extension_ui_response", "id": select["id"], "value": "blue"})
        _wait_for_line(log)
        assert json.loads(log.read_text().splitlines()[0]) == {"confirm": False, "select": None}
        # A dialog left open when the client's input ends gets its default at once.
        rpc.command({"type": "prompt", "message": "/ask"}, "extension_ui_request")
        assert rpc.close() == 0
        assert json.loads(log.read_text().splitlines()[1]) == {"confirm": False, "select": None}
    finally:
        rpc.proc.kill()


def test_an_abort_sent_with_the_prompt_aborts_it_before_any_provider_request(tmp_path):
    with FakeOpenAI([text("never")]) as server:
        stdin = '{"type": "prompt", "message": "go", "id": "p"}\n{"type": "abort", "id": "a"}\n'
        proc = run_pi(
            tmp_path,
            "--mode",
            "rpc",
            model=["--model", "openai/x", "--base-url", server.url],
            stdin=stdin,
        )
        assert proc.returncode == 0, proc.stderr
        events = lines(proc.stdout)
        [abort] = [r for r in responses(events) if r["command"] == "abort"]
        assert abort["data"] == {"aborted": True}
        assert server.requests == []
        assert not [e for e in events if e.get("type") == "message_update"]


def test_compaction_uses_the_extension_summary_and_the_next_request_sees_it(tmp_path):
    long = "x" * 100_000  # ~25 000 tokens: more than compaction keeps
    # The newer prompt alone reaches compaction.keepRecentTokens (20 000), so the cut
    # falls at it and the first prompt and its answer are summarised (pi's cut rule).
    recent = "y" * 100_000
    with FakeOpenAI([text("one"), text("two"), text("three")]) as server:
        rpc = RpcSession(
            tmp_path,
            "-e",
            str(RUNTIME / "rpc_compact.py"),
            model=["--model", "openai/x", "--base-url", server.url],
        )
        try:
            rpc.command({"type": "prompt", "message": f"hi {long}"}, "agent_end")
            rpc.command({"type": "prompt", "message": f"again {recent}"}, "agent_end")
            compacted = rpc.command({"type": "compact", "id": "c"}, "response")
            assert compacted["data"]["compacted"] is True
            assert compacted["data"]["summary"] == "EXTENSION-SUMMARY of 2 message(s)"
            rpc.command({"type": "prompt", "message": "third"}, "agent_end")
            bash = rpc.command({"type": "bash", "command": "fake", "id": "b"}, "response")
            assert bash["data"] == {
                "output": "FAKE-OUTPUT",
                "exitCode": 0,
                "cancelled": False,
                "truncated": False,
            }
        finally:
            rpc.close()
        last = json.dumps(server.requests[-1].body["messages"])
        assert "EXTENSION-SUMMARY of 2 message(s)" in last
        assert long not in last  # the summarised message is gone from the context
        assert "again" in last and "third" in last  # the kept ones are not


def test_the_users_bash_goes_through_the_policy_gate(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\ntool_call:\n  rules:\n    - id: no-rm\n      tool: bash\n"
        "      command: [rm]\n      decision: deny\n      reason: no deletions\n"
    )
    victim = tmp_path / "work" / "victim"
    victim.parent.mkdir(parents=True)
    victim.write_text("keep me")
    stdin = (
        '{"type": "bash", "command": "rm -f victim", "id": "rm"}\n'
        '{"type": "bash", "command": "echo fine", "id": "echo"}\n'
    )
    proc = run_pi(tmp_path, "--mode", "rpc", "--policy", str(policy), stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    by_id = {r["id"]: r for r in responses(lines(proc.stdout)) if "id" in r}
    # The second command waits for the first: both are answered in order.
    assert by_id["rm"]["success"] is False and "no-rm" in by_id["rm"]["error"]
    assert victim.read_text() == "keep me"
    assert by_id["echo"]["success"] is True and by_id["echo"]["data"]["output"] == "fine"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--label", "blue", "go"], "label=blue loud=False"),
        (["go", "--label", "blue", "--loud"], "label=blue loud=True"),
        (["--loud", "go"], "label=None loud=True"),
    ],
)
def test_extension_flags_are_parsed_once_extensions_registered_them(tmp_path, args, expected):
    proc = run_pi(tmp_path, "--mode", "json", "-e", str(RUNTIME / "flag_echo.py"), *args)
    assert proc.returncode == 0, proc.stderr
    messages = [
        e["message"]
        for e in lines(proc.stdout)
        if e.get("type") == "message_end" and e["message"]["role"] != "system"
    ]
    assert messages[0]["content"] == [{"type": "text", "text": "go"}]  # never the flag's value
    assert messages[1]["content"] == [{"type": "text", "text": expected}]


def test_an_unknown_option_is_still_a_usage_error_naming_it(tmp_path):
    proc = run_pi(tmp_path, "-p", "-e", str(RUNTIME / "flag_echo.py"), "--labl", "x", "go")
    assert proc.returncode == 2
    assert "--labl" in proc.stderr and "Traceback" not in proc.stderr


def test_an_extension_cannot_keep_the_agent_going_without_the_capability(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nextensions:\n  capabilities:\n    looper: {send_user_messages: false}\n"
    )
    script = tmp_path / "many.yaml"
    script.write_text("".join(f"- text: answer {n}\n" for n in range(30)))
    model = ["--model", "scripted", "--script", str(script)]
    capped = run_pi(tmp_path, "--mode", "json", "-e", str(RUNTIME / "looper.py"), "hi", model=model)
    assert capped.returncode == 0, capped.stderr
    events = lines(capped.stdout)
    # With the capability (the default) the follow-ups run, but only MAX_SETTLE_RUNS times.
    from pi_sandbox.supervisor.extensions.session_host import MAX_SETTLE_RUNS

    assert len([e for e in events if e.get("type") == "agent_start"]) == 1 + MAX_SETTLE_RUNS
    assert any("kept the agent going" in e.get("message", "") for e in events)
    refused = run_pi(
        tmp_path,
        "--mode",
        "json",
        "--policy",
        str(policy),
        "-e",
        str(RUNTIME / "looper.py"),
        "hi",
        model=model,
    )
    assert refused.returncode == 0, refused.stderr
    events = lines(refused.stdout)
    assert len([e for e in events if e.get("type") == "agent_start"]) == 1
    errors = [e["error"] for e in events if e.get("type") == "extension_error"]
    assert any("send_user_messages" in error for error in errors), errors


def _wait_for_line(path: Path, timeout: float = 120) -> None:
    """Poll until ``path`` holds a whole line (it may exist before it is written)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} got no line"
        time.sleep(0.05)


def _wait_for_text(path: Path, timeout: float = 120) -> None:
    """Poll until ``path`` is not empty (it exists before its writer has written)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} got no text"
        time.sleep(0.05)


def _wait_for_file(path: Path, timeout: float = 120) -> None:
    """Poll until ``path`` exists; generous, it ends as soon as the file is there."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_rpc_abort_cancels_a_running_command_and_kills_one_that_ignores_it(tmp_path):
    rpc = RpcSession(tmp_path, "-e", str(RUNTIME / "slow_command.py"))
    work = tmp_path / "work"
    try:
        rpc.command({"type": "prompt", "message": "/wait"}, "response")
        _wait_for_file(work / "wait.started")
        aborted = rpc.command({"type": "abort"}, "response")
        assert aborted["data"] == {"aborted": True}
        signal_file = work / "signal.txt"
        _wait_for_text(signal_file)
        assert signal_file.read_text() == "True"  # ctx.signal was set
        # A command that ignores the signal: its worker is killed after the grace period.
        rpc.command({"type": "prompt", "message": "/stuck"}, "response")
        _wait_for_file(work / "stuck.started")
        started = time.monotonic()
        rpc.command({"type": "abort"}, "response")
        rpc.until(lambda e: e.get("type") == "extension_error" and e.get("event") == "restart")
        # Killed and restarted, not waited for: /stuck sleeps 600 s. The bound is
        # generous (issue 13 §7): a restart on a saturated machine takes seconds.
        assert time.monotonic() - started < 300
        state = rpc.command({"type": "get_state"}, "response")
        assert state["data"]["isStreaming"] is False
    finally:
        assert rpc.close() == 0


def test_an_extension_steering_after_every_turn_is_capped_within_the_run(tmp_path):
    from pi_sandbox.supervisor.agent.agent_session import MAX_EXTENSION_TURNS

    script = tmp_path / "many.yaml"
    script.write_text("".join(f"- text: answer {n}\n" for n in range(40)))
    proc = run_pi(
        tmp_path,
        "--mode",
        "json",
        "-e",
        str(RUNTIME / "steer_loop.py"),
        "go",
        model=["--model", "scripted", "--script", str(script)],
    )
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert len([e for e in events if e.get("type") == "agent_start"]) == 1
    assert len([e for e in events if e.get("type") == "turn_start"]) == 1 + MAX_EXTENSION_TURNS
    assert any("answer again more than" in e.get("message", "") for e in events)
