"""``tool_search`` and ``codemode`` as a user runs ``pi`` (issue 19).

Every run is the real CLI with the scripted model, the extension
``tests/fixtures/extensions/codemode/deferred_tools.py`` (tools with each exposure)
and real workers; codemode runs need bwrap (``require_bwrap``).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pi_runs import pi_env, scripted_argv

pytestmark = pytest.mark.e2e

EXTENSION = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "extensions"
    / "codemode"
    / "deferred_tools.py"
)
WAIT_S = 60.0

DENY_SECRET = """
version: 1
tool_call:
  rules:
    - id: no-secret
      tool: secret_code
      decision: deny
      reason: The launch code stays secret.
"""


def write_script(path: Path, turns: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump(turns, sort_keys=False))
    return path


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def run_json(tmp_path: Path, turns: list[dict[str, Any]], *flags: str) -> list[dict[str, Any]]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    script = write_script(tmp_path / "script.yaml", turns)
    argv = scripted_argv(script, workspace, "-e", str(EXTENSION), "--mode", "json", *flags)
    proc = subprocess.run(argv, env=pi_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def ends(events: list[dict[str, Any]], name: str, *, nested: bool = False) -> list[dict[str, Any]]:
    """The ``tool_execution_end`` events of ``name``: the model's calls, or with
    ``nested`` the calls codemode scripts made."""
    return [
        e
        for e in events
        if e.get("type") == "tool_execution_end"
        and e.get("toolName") == name
        and ("parentToolCallId" in e) == nested
    ]


def text_of(event: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in event["result"]["content"])


def session_records(tmp_path: Path) -> list[dict[str, Any]]:
    files = list((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


# --- tool_search ---------------------------------------------------------------------------


def test_tool_search_loads_a_deferred_tool_that_the_next_turn_calls(tmp_path):
    events = run_json(
        tmp_path,
        [
            call("tool_search", query="weather forecast for a city"),
            call("lookup_weather", city="Paris"),
            {"text": "done"},
        ],
    )
    search = ends(events, "tool_search")[0]
    assert not search["isError"]
    assert search["result"]["details"]["added"] == ["lookup_weather"]
    # The match comes with its schema, and the hidden tool never matches.
    assert '"city"' in text_of(search)
    assert "never_reach" not in text_of(search)
    weather = ends(events, "lookup_weather")[0]
    assert not weather["isError"]
    assert text_of(weather) == "Weather in Paris: sunny"
    # Recorded like pi's tool changes: a system message with toolsAdded.
    added = [
        tool["name"]
        for record in session_records(tmp_path)
        if record.get("type") == "message" and record["message"].get("role") == "system"
        for tool in record["message"].get("toolsAdded", [])
    ]
    assert added == ["lookup_weather"]


def test_a_deferred_tool_is_not_callable_before_tool_search_loads_it(tmp_path):
    # The control of the test above: the same call without the search fails.
    events = run_json(tmp_path, [call("lookup_weather", city="Paris"), {"text": "done"}])
    weather = ends(events, "lookup_weather")[0]
    assert weather["isError"]
    assert "not found" in text_of(weather)


def test_codemode_only_tools_are_never_declared_and_tool_search_off_when_removed(tmp_path):
    events = run_json(
        tmp_path,
        [call("secret_code"), call("tool_search", query="weather"), {"text": "done"}],
        "--tools=-tool_search",
    )
    assert "not found" in text_of(ends(events, "secret_code")[0])
    assert "not found" in text_of(ends(events, "tool_search")[0])


class Rpc:
    """``pi --mode rpc`` in a subprocess: commands on stdin, events read by a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pi_sandbox.cli", "--mode", "rpc", *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                with self._cond:
                    self.events.append(json.loads(line))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait(self, predicate: Any, *, after: int = 0) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while True:
                for index in range(after, len(self.events)):
                    if predicate(self.events[index]):
                        return index, self.events[index]
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(json.dumps(self.events[after:])[-3000:])
                self._cond.wait(min(left, 0.2))

    def call(self, kind: str, **fields: Any) -> tuple[int, dict[str, Any]]:
        request_id = str(next(self._ids))
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            json.dumps({"id": request_id, "type": kind, **fields}).encode() + b"\n"
        )
        self.proc.stdin.flush()
        return self.wait(lambda e: e.get("type") == "response" and e.get("id") == request_id)

    def prompt(self, message: str, until: str = "agent_end") -> list[dict[str, Any]]:
        """Submit ``message``; the events up to the first ``until`` event after it."""
        deadline = time.monotonic() + WAIT_S
        while True:
            start, response = self.call("prompt", message=message)
            if response["success"]:
                break
            # The previous job (a prompt, a /command) may still be settling.
            busy = "running" in response["error"] or "in progress" in response["error"]
            assert busy and time.monotonic() < deadline, response
            time.sleep(0.05)
        end, _ = self.wait(lambda e: e.get("type") == until, after=start)
        return self.events[start : end + 1]

    def state(self) -> dict[str, Any]:
        _, response = self.call("get_state")
        return response["data"]

    def wait_idle(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while not self.state()["is_idle"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.stdin.close()  # type: ignore[union-attr]
            except (OSError, AssertionError):
                pass
        try:
            self.proc.wait(timeout=WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def test_tool_search_activation_survives_reload_and_a_resumed_session(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = write_script(
        tmp_path / "script.yaml",
        [
            call("tool_search", query="weather"),
            {"text": "loaded"},
            call("lookup_weather", city="Oslo"),
            {"text": "after reload"},
            call("lookup_weather", city="Rome"),
            {"text": "in the new session"},
            call("lookup_weather", city="Lima"),
            {"text": "after resume"},
        ],
    )
    rpc = Rpc(
        [
            "--model",
            "scripted",
            "--script",
            str(script),
            "-C",
            str(workspace),
            "-e",
            str(EXTENSION),
        ],
        pi_env(tmp_path),
    )
    try:
        rpc.prompt("find a weather tool")
        first = rpc.state()
        assert "lookup_weather" in first["active_tools"]
        session_file = first["session_file"]

        _, reloaded = rpc.call("reload")
        assert reloaded["success"], reloaded
        rpc.wait_idle()
        assert rpc.state()["generation"] > first["generation"]
        assert "lookup_weather" in rpc.state()["active_tools"]
        weather = ends(rpc.prompt("weather in Oslo"), "lookup_weather")[0]
        assert text_of(weather) == "Weather in Oslo: sunny"

        # A new session has no activation (the control) ...
        _, fresh = rpc.call("new_session")
        assert fresh["success"], fresh
        rpc.wait_idle()
        assert "lookup_weather" not in rpc.state()["active_tools"]
        weather = ends(rpc.prompt("weather in Rome"), "lookup_weather")[0]
        assert weather["isError"] and "not found" in text_of(weather)

        # ... and resuming the first session brings it back.
        rpc.prompt(f"/resume {session_file}", until="session_replaced")
        rpc.wait_idle()
        assert rpc.state()["session_file"] == session_file
        assert "lookup_weather" in rpc.state()["active_tools"]
        weather = ends(rpc.prompt("weather in Lima"), "lookup_weather")[0]
        assert text_of(weather) == "Weather in Lima: sunny"
    finally:
        rpc.close()


# --- codemode ------------------------------------------------------------------------------


def test_codemode_script_gets_a_policy_denial_as_an_error_and_goes_on(tmp_path, require_bwrap):
    policy = tmp_path / "policy.yaml"
    policy.write_text(DENY_SECRET)
    audit = tmp_path / "audit.jsonl"
    script = (
        "try:\n"
        "    print('code:', tools.secret_code())\n"
        "except ToolError as error:\n"
        "    print('denied:', error.text)\n"
        "print(tools.echo_upper(text='still running'))\n"
        "print(sorted(t['name'] for t in search_tools('weather forecast')))\n"
    )
    events = run_json(
        tmp_path,
        [call("codemode", script=script), {"text": "done"}],
        "--sandbox",
        "--tools",
        "+codemode",
        "--policy",
        str(policy),
        "--audit-log",
        str(audit),
    )
    result = ends(events, "codemode")[0]
    parent = result["toolCallId"]
    text = text_of(result)
    assert not result["isError"], text
    assert text.startswith("Script completed")
    assert "denied: Blocked by policy rule no-secret" in text
    assert "CODE-4711" not in text
    assert "STILL RUNNING" in text
    # search_tools finds what scripts may call, never the hidden tool.
    assert "['lookup_weather']" in text
    # Nested calls are events of their own, with the codemode call as parent.
    nested = [e for e in events if e.get("parentToolCallId") == parent]
    assert {(e["type"], e["toolName"]) for e in nested} >= {
        ("tool_execution_end", "secret_code"),
        ("tool_execution_end", "echo_upper"),
        ("policy_decision", "secret_code"),
    }
    assert ends(events, "secret_code", nested=True)[0]["blocked"]
    # ... and audited with it.
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    calls = {
        r["tool"]: r for r in records if r["event"] == "tool_call" and r.get("parent_tool_call_id")
    }
    assert calls["secret_code"]["parent_tool_call_id"] == parent
    assert calls["secret_code"]["effective"] == "deny"
    assert calls["echo_upper"]["effective"] == "allow"
    script_records = [r for r in records if r["event"] == "codemode_script"]
    assert script_records and script_records[0]["tool_call_id"] == parent
    assert script_records[0]["calls"] == 2


def test_codemode_turns_on_by_itself_when_codemode_tools_exist(tmp_path, require_bwrap):
    events = run_json(
        tmp_path,
        [call("codemode", script="print(tools.secret_code())"), {"text": "done"}],
        "--sandbox",
    )
    result = ends(events, "codemode")[0]
    assert not result["isError"], text_of(result)
    assert "CODE-4711" in text_of(result)


def test_codemode_refuses_to_run_a_script_outside_the_sandbox(tmp_path):
    events = run_json(
        tmp_path,
        [call("codemode", script="print('ran')"), {"text": "done"}],
        "--no-sandbox",
    )
    result = ends(events, "codemode")[0]
    assert result["isError"]
    assert "only in the sandbox" in text_of(result)
    assert "ran" not in text_of(result).split("sandbox")[-1]


def test_codemode_cannot_call_itself_or_tool_search(tmp_path, require_bwrap):
    script = (
        "for name in ('codemode', 'tool_search', 'never_reach'):\n"
        "    result = call_tool(name, {'script': 'print(1)', 'query': 'x'})\n"
        "    print(name, result['is_error'], result['content'][0]['text'])\n"
    )
    events = run_json(
        tmp_path,
        [call("codemode", script=script), {"text": "done"}],
        "--sandbox",
        "--tools",
        "+tool_search",
    )
    text = text_of(ends(events, "codemode")[0])
    for name in ("codemode", "tool_search", "never_reach"):
        assert f"{name} True Tool {name} not found" in text
    assert os.path.exists(tmp_path / "ws")


def test_codemode_calls_pass_extension_hooks_like_the_models_calls(tmp_path, require_bwrap):
    fixtures = EXTENSION.parent.parent
    script = (
        "try:\n"
        "    tools.bash(command='echo forbidden')\n"
        "except ToolError as error:\n"
        "    print('blocked:', error.text)\n"
        "print('rewritten:', tools.bash(command='MUTATE_ME'))\n"
    )
    events = run_json(
        tmp_path,
        [call("codemode", script=script), {"text": "done"}],
        "--sandbox",
        "-e",
        str(fixtures / "blocker.py"),
        "-e",
        str(fixtures / "mutator.py"),
    )
    (result,) = ends(events, "codemode")
    text = text_of(result)
    # tool_call hooks block and rewrite nested calls; tool_result hooks patch them.
    assert "blocked: blocker.py says no" in text
    assert "rewritten: mutated" in text and "+mutator" in text
    (rewritten,) = [e for e in ends(events, "bash", nested=True) if not e["blocked"]]
    assert rewritten["parentToolCallId"] == result["toolCallId"]


def test_parallel_codemode_calls_share_two_workers_and_all_complete(tmp_path, require_bwrap):
    turn = {
        "tool_calls": [
            {"name": "codemode", "arguments": {"script": f"print('script {i}')"}} for i in range(4)
        ]
    }
    events = run_json(tmp_path, [turn, {"text": "done"}], "--sandbox", "--tools", "+codemode")
    results = ends(events, "codemode")
    assert len(results) == 4
    assert sorted(text_of(r).splitlines()[1] for r in results) == [f"script {i}" for i in range(4)]


def test_a_warning_says_when_nothing_can_reach_the_non_direct_tools(tmp_path):
    events = run_json(tmp_path, [{"text": "done"}], "--tools", "read,bash")
    warnings = [e["message"] for e in events if e.get("type") == "warning"]
    assert any("lookup_weather" in w and "+tool_search" in w for w in warnings), warnings
    # With tool_search on by itself (the default), nothing to warn about.
    again = tmp_path / "again"
    again.mkdir()
    quiet = run_json(again, [{"text": "done"}])
    assert not any(e.get("type") == "warning" for e in quiet)
