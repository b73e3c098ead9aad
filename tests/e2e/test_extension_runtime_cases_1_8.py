"""Issue 5, "Cases to cover" 1–8, end to end: the ``pi`` CLI as a subprocess, real
worker processes, the extensions in ``tests/fixtures/extensions/runtime/c<N>_*.py``.

Runs use ``--no-sandbox`` (the cases are about the extension runtime, not bwrap), a
private ``HOME``/``PI_CODING_AGENT_DIR`` and ``--no-session``. Where the test must see
what reached the provider it runs against the loopback server of ``fake_openai``;
otherwise the scripted model. ``--mode json`` prints every event as a JSON line;
``--mode rpc`` is driven through `Rpc` when a test must act while pi is running.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text, tool_calls
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e

RUNTIME = Path(__file__).resolve().parent.parent / "fixtures" / "extensions" / "runtime"
# Whole pi runs: only a hang reaches it; generous for a saturated machine (issue 13 §7).
TIMEOUT_S = 180
# How long a wait for an event, a file or a process may take before the test fails.
# Generous on purpose (issue 13 §7): every wait ends as soon as its condition holds,
# and on a saturated 2-core machine starting a worker generation alone can take
# seconds; only a product that never gets there waits this long.
WAIT_S = 120.0


def fixture(name: str) -> Path:
    path = RUNTIME / f"{name}.py"
    assert path.is_file(), path
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def pi_argv(work: Path, extensions: list[str], model: list[str], *rest: str) -> list[str]:
    argv = [sys.executable, "-m", "pi_sandbox.cli", "--no-sandbox", "--no-session"]
    argv += ["--no-extensions", "-C", str(work), *model]
    for name in extensions:
        argv += ["-e", str(fixture(name))]
    return [*argv, *rest]


def scripted(tmp_path: Path, script: str) -> list[str]:
    path = tmp_path / "script.yaml"
    path.write_text(script)
    return ["--model", "scripted", "--script", str(path)]


def openai(server: FakeOpenAI) -> list[str]:
    return ["--model", "openai/x", "--base-url", server.url]


def run_json(
    tmp_path: Path, work: Path, extensions: list[str], model: list[str], prompt: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = subprocess.run(
        pi_argv(work, extensions, model, "--mode", "json", prompt),
        env=fake_provider_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, events


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == kind]


def result_text(end: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in end["result"]["content"])


def ends_by_id(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["toolCallId"]: e for e in of(events, "tool_execution_end")}


class Rpc:
    """``pi --mode rpc`` as a subprocess: send commands, wait for events."""

    def __init__(self, tmp_path: Path, work: Path, extensions: list[str], model: list[str]):
        self.proc = subprocess.Popen(
            pi_argv(work, extensions, model, "--mode", "rpc"),
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._seen = 0
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def send(self, kind: str, **fields: Any) -> str:
        self._ids += 1
        command_id = f"r{self._ids}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"type": kind, "id": command_id, **fields}) + "\n")
        self.proc.stdin.flush()
        return command_id

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT_S
    ) -> dict[str, Any]:
        """The first event not waited for yet that matches (earlier ones are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            while self._seen < len(self.events):
                event = self.events[self._seen]
                self._seen += 1
                if predicate(event):
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; events so far: {self.events}")
            try:
                event = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                stderr = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"pi exited; events: {self.events}; stderr: {stderr}")
            self.events.append(event)

    def seen_or_wait(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT_S
    ) -> dict[str, Any]:
        """The first matching event since the start, waiting for one if none came yet."""
        self.drain()
        for event in self.events:
            if predicate(event):
                return event
        return self.wait_for(predicate, timeout)

    def response(self, command_id: str, timeout: float = WAIT_S) -> dict[str, Any]:
        return self.wait_for(
            lambda e: e.get("type") == "response" and e.get("id") == command_id, timeout
        )

    def call(self, kind: str, **fields: Any) -> dict[str, Any]:
        return self.response(self.send(kind, **fields))

    def drain(self) -> None:
        """Collect what has arrived so far without waiting."""
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not None:
                self.events.append(event)

    def close(self) -> str:
        """Quit and return stderr."""
        if self.proc.poll() is None:
            try:
                self.send("quit")
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        try:
            self.proc.wait(timeout=TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        # pi has exited: the reader thread ends with None at the end of its output.
        # Waited for, not guessed: events still in the pipe would be lost otherwise.
        while True:
            try:
                event = self._queue.get(timeout=WAIT_S)
            except queue.Empty:
                break
            if event is None:
                break
            self.events.append(event)
        return self.proc.stderr.read() if self.proc.stderr else ""


@pytest.fixture
def rpc_factory(tmp_path: Path, work: Path):
    started: list[Rpc] = []

    def start(extensions: list[str], model: list[str]) -> Rpc:
        rpc = Rpc(tmp_path, work, extensions, model)
        started.append(rpc)
        return rpc

    yield start
    for rpc in started:
        if rpc.proc.poll() is None:
            rpc.proc.kill()
            rpc.proc.wait()


def wait_until(check: Callable[[], Any], timeout: float = WAIT_S, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


# --- case 1 -------------------------------------------------------------------------------


def _read_or_empty(path: Path) -> str:
    """The file's text, or "" before it exists (a marker exists before it is written)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_case_1_good_extensions_work_and_two_load_errors_name_their_files(tmp_path, work):
    """Case 1: two good extensions, one with a syntax error, one whose factory raises:
    the session starts, the good tools work, two load errors name files and messages."""
    script = """
- tool_calls:
    - {id: a1, name: c1_alpha, arguments: {}}
    - {id: b1, name: c1_beta, arguments: {word: ok}}
- text: case one done
"""
    proc, events = run_json(
        tmp_path,
        work,
        ["c1_alpha", "c1_syntax_error", "c1_beta", "c1_factory_raises"],
        scripted(tmp_path, script),
        "use the tools",
    )
    assert proc.returncode == 0, proc.stderr
    load_errors = [e for e in of(events, "extension_error") if e["event"] == "load"]
    by_path = {e["extensionPath"]: e["error"] for e in load_errors}
    assert len(load_errors) == 2, load_errors
    assert set(by_path) == {
        str(fixture("c1_syntax_error")),
        str(fixture("c1_factory_raises")),
    }
    assert "SyntaxError" in by_path[str(fixture("c1_syntax_error"))]
    factory_error = by_path[str(fixture("c1_factory_raises"))]
    assert "RuntimeError" in factory_error and "c1 factory refused to start" in factory_error
    ends = ends_by_id(events)
    assert set(ends) == {"a1", "b1"}
    assert not ends["a1"]["isError"] and result_text(ends["a1"]) == "alpha-ok"
    assert not ends["b1"]["isError"] and result_text(ends["b1"]) == "beta-ok"
    final = of(events, "message_end")[-1]["message"]
    assert final["role"] == "assistant" and final["content"][0]["text"] == "case one done"
    # The failed factory's registration was discarded, not half-applied.
    started = {e["toolName"] for e in of(events, "tool_execution_start")}
    assert started == {"c1_alpha", "c1_beta"}


# --- case 2 -------------------------------------------------------------------------------


def test_case_2_duplicate_commands_are_both_callable_and_bare_name_is_ambiguous(
    tmp_path, work, rpc_factory
):
    """Case 2: two extensions register /review: ``/review:1`` and ``/review:2`` run
    their own handler, both extensions keep their tools, bare ``/review`` is an error
    listing both."""
    script = """
- tool_calls:
    - {id: t1, name: c2_tool_one, arguments: {}}
    - {id: t2, name: c2_tool_two, arguments: {}}
- text: case two done
"""
    rpc = rpc_factory(["c2_review_one", "c2_review_two"], scripted(tmp_path, script))
    commands = rpc.call("get_commands")
    assert commands["success"]
    names = {
        c["name"]: (c["source"], c["path"])
        for c in commands["data"]["commands"]
        if c["source"] != "builtin"
    }
    assert {name: path for name, (_, path) in names.items()} == {
        "review:1": str(fixture("c2_review_one")),
        "review:2": str(fixture("c2_review_two")),
    }
    assert {source for source, _ in names.values()} == {"extension"}  # pi's source

    assert rpc.call("prompt", message="/review:1 first pass")["success"]
    assert wait_until(lambda: _read_or_empty(work / "review-1.marker"), what="review:1")
    assert rpc.call("prompt", message="/review:2 second pass")["success"]
    assert wait_until(lambda: _read_or_empty(work / "review-2.marker"), what="review:2")
    assert (work / "review-1.marker").read_text() == "one:first pass"
    assert (work / "review-2.marker").read_text() == "two:second pass"

    # pi's protocol: a prompt that fails before it starts gets a failed response.
    refused = rpc.call("prompt", message="/review again")
    assert refused["success"] is False and "/review is ambiguous" in refused["error"]
    error = rpc.wait_for(lambda e: e.get("type") == "pisandbox_error")
    assert "/review is ambiguous" in error["error"]
    assert "/review:1" in error["error"] and "/review:2" in error["error"]
    # Neither handler ran for the ambiguous name.
    assert (work / "review-1.marker").read_text() == "one:first pass"
    assert (work / "review-2.marker").read_text() == "two:second pass"

    # Neither extension lost its tool.
    assert rpc.call("prompt", message="use both tools")["success"]
    rpc.wait_for(lambda e: e.get("type") == "agent_end")
    rpc.close()
    ends = ends_by_id(rpc.events)
    assert set(ends) == {"t1", "t2"}
    assert not ends["t1"]["isError"] and result_text(ends["t1"]) == "tool-one-ok"
    assert not ends["t2"]["isError"] and result_text(ends["t2"]) == "tool-two-ok"


# --- case 3 -------------------------------------------------------------------------------


def _pid_files(work: Path) -> dict[int, Path]:
    return {int(p.read_text()): p for p in work.glob("c3-*.pid")}


def _ticks(work: Path, pid: int) -> int:
    path = work / f"c3-{pid}.ticks"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_case_3_background_task_touching_a_stale_ctx_dies_with_its_generation(
    tmp_path, work, rpc_factory
):
    """Case 3: a thread keeps using ``ctx`` after ``ctx.new_session()``: the session
    stays alive (the next prompt runs a tool), the StaleContextError is reported, and
    the old generation's worker process (and so the thread) is gone."""
    script = """
- tool_calls:
    - {id: p1, name: c3_ping, arguments: {}}
- text: case three done
"""
    rpc = rpc_factory(["c3_background"], scripted(tmp_path, script))
    [old_pid] = wait_until(lambda: list(_pid_files(work)), what="generation 1 pid")
    wait_until(lambda: _ticks(work, old_pid) >= 3, what="generation 1 ticks")

    assert rpc.call("prompt", message="/fresh")["success"]
    replaced = rpc.wait_for(lambda e: e.get("type") == "session_replaced")
    assert replaced["reason"] == "new"
    new_pid = wait_until(
        lambda: next((p for p in _pid_files(work) if p != old_pid), None), what="new pid"
    )

    # The error of the thread that touched the stale ctx is reported.
    def stale_report(event: dict[str, Any]) -> bool:
        message = event.get("error") or event.get("message") or ""
        return event.get("type") in (
            "extension_error",
            "pisandbox_notice",
            "pisandbox_warning",
        ) and ("StaleContextError" in message)

    report = rpc.seen_or_wait(stale_report)
    assert report["type"] == "extension_error"
    assert report["extensionPath"] == str(fixture("c3_background"))
    assert "ctx.is_idle" in report["error"]

    # The old worker process is gone while pi still runs; its thread stopped ticking.
    wait_until(lambda: not Path(f"/proc/{old_pid}").exists(), what="old worker exit")
    frozen = _ticks(work, old_pid)
    time.sleep(0.3)
    assert _ticks(work, old_pid) == frozen
    # The new generation's thread is alive and ticking.
    assert Path(f"/proc/{new_pid}").exists()
    before = _ticks(work, new_pid)
    wait_until(lambda: _ticks(work, new_pid) > before, what="new generation ticks")

    # The session stays alive: the next prompt runs the new generation's tool.
    assert rpc.call("prompt", message="ping")["success"]
    end = rpc.wait_for(lambda e: e.get("type") == "tool_execution_end")
    assert not end["isError"] and result_text(end) == f"pong from {new_pid}"
    rpc.wait_for(lambda e: e.get("type") == "agent_end")
    rpc.close()
    assert rpc.proc.returncode == 0


# --- case 4 -------------------------------------------------------------------------------


def test_case_4_raising_tool_call_hook_blocks_the_tool_but_the_next_hook_still_runs(tmp_path, work):
    """Case 4: the first ``tool_call`` handler raises, the second records the call id:
    the second still runs, the tool does not run, the result is an error naming the
    first extension."""
    script = """
- tool_calls:
    - {id: c4_call, name: bash, arguments: {command: "touch c4-ran.txt"}}
- text: case four done
"""
    proc, events = run_json(
        tmp_path,
        work,
        ["c4_first_raises", "c4_second_records"],
        scripted(tmp_path, script),
        "touch it",
    )
    assert proc.returncode == 0, proc.stderr
    assert not (work / "c4-ran.txt").exists()
    assert (work / "c4-seen.txt").read_text() == "c4_call\n"
    [end] = of(events, "tool_execution_end")
    assert end["isError"] and end["result"]["details"]["blocked_by"] and "durationMs" not in end
    text_ = result_text(end)
    assert str(fixture("c4_first_raises")) in text_ and "c4 first hook exploded" in text_
    errors = [e for e in of(events, "extension_error") if e["event"] == "tool_call"]
    assert [e["extensionPath"] for e in errors] == [str(fixture("c4_first_raises"))]


# --- case 5 -------------------------------------------------------------------------------


def test_case_5_terminating_block_ends_the_run_without_another_provider_request(tmp_path, work):
    """Case 5a: a ``tool_call`` hook blocks the only call with ``terminate: true``:
    no further provider request."""
    with FakeOpenAI(
        [tool_calls(("s1", "bash", {"command": "echo stop now > c5-ran.txt"})), text("unused")]
    ) as server:
        proc, events = run_json(tmp_path, work, ["c5_terminator"], openai(server), "go")
        requests = list(server.requests)
    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 1
    assert not (work / "c5-ran.txt").exists()
    [end] = of(events, "tool_execution_end")
    assert end["isError"] and end["result"]["details"]["blocked_by"] and "durationMs" not in end
    assert result_text(end) == "c5 says stop here"
    assert of(events, "agent_settled")[-1]["aborted"] is False


def test_case_5_one_terminating_call_of_two_does_not_end_the_run(tmp_path, work):
    """Case 5b: only one of two calls in a batch terminates: the other runs and the
    run continues with a further provider request carrying both results."""
    with FakeOpenAI(
        [
            tool_calls(
                ("s1", "bash", {"command": "echo stop here"}),
                ("s2", "bash", {"command": "echo kept > c5-kept.txt; echo kept"}),
            ),
            text("case five done"),
        ]
    ) as server:
        proc, events = run_json(tmp_path, work, ["c5_terminator"], openai(server), "go")
        requests = list(server.requests)
    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 2
    assert (work / "c5-kept.txt").read_text() == "kept\n"
    ends = ends_by_id(events)
    assert ends["s1"]["isError"] and ends["s1"]["result"]["details"]["blocked_by"]
    assert not ends["s2"]["isError"] and result_text(ends["s2"]).strip() == "kept"
    sent = {m["tool_call_id"]: m["content"] for m in requests[1].tool_messages()}
    assert set(sent) == {"s1", "s2"}
    assert "c5 says stop here" in json.dumps(sent["s1"]) and "kept" in json.dumps(sent["s2"])
    final = of(events, "message_end")[-1]["message"]
    assert final["content"][0]["text"] == "case five done"


# --- case 6 -------------------------------------------------------------------------------


def test_case_6_abort_in_tool_call_gives_one_error_result_and_keeps_the_follow_up(
    tmp_path, work, rpc_factory
):
    """Case 6: ``ctx.abort()`` inside ``tool_call`` for the first of two parallel calls:
    exactly one tool result (an error), ``tool_result`` hooks still see it, and the
    follow-up queued before the abort stays queued."""
    script = """
- tool_calls:
    - {id: c6_first, name: bash, arguments: {command: "touch c6-first.txt"}}
    - {id: c6_second, name: bash, arguments: {command: "touch c6-second.txt"}}
- text: should not be reached by the aborted run
- text: also unused
"""
    rpc = rpc_factory(["c6_aborter"], scripted(tmp_path, script))
    assert rpc.call("prompt", message="run two commands")["success"]
    settled = rpc.wait_for(lambda e: e.get("type") == "agent_settled")
    assert settled["aborted"] is True
    time.sleep(1.0)  # give a wrongly resumed follow-up run the time to start
    state = rpc.call("get_state")
    rpc.close()
    assert state["success"]
    assert state["data"]["sandbox"]["pending"]["follow_up"] == 1
    assert state["data"]["isStreaming"] is False

    ends = of(rpc.events, "tool_execution_end")
    assert [e["toolCallId"] for e in ends] == ["c6_first"]
    assert ends[0]["isError"] is True
    results = [
        m
        for m in (e["message"] for e in of(rpc.events, "message_end"))
        if m["role"] == "toolResult"
    ]
    assert [(m["toolCallId"], m["isError"]) for m in results] == [("c6_first", True)]
    seen = [json.loads(line) for line in (work / "c6-results.jsonl").read_text().splitlines()]
    assert [(s["id"], s["is_error"]) for s in seen] == [("c6_first", True)]
    assert "Aborted" in seen[0]["text"]
    assert (work / "c6-calls.txt").read_text() == "c6_first\n"
    assert not (work / "c6-first.txt").exists() and not (work / "c6-second.txt").exists()
    assert len(of(rpc.events, "agent_start")) == 1  # the follow-up did not start a run
    user_texts = [
        b.get("text")
        for e in of(rpc.events, "message_end")
        if e["message"]["role"] == "user"
        for b in e["message"]["content"]
    ]
    assert "c6 queued follow-up" not in user_texts


# --- case 7 -------------------------------------------------------------------------------


def test_case_7_input_patches_merge_a_bad_patch_is_an_error_result_and_the_guard_sees_it(
    tmp_path, work
):
    """Case 7: hook A patches ``command``, hook B returns nothing, hook C patches only
    ``timeout``: the executed input has both; a patch that breaks the schema yields an
    error result, not a crash; a guard hook after them sees the final input."""
    script = """
- tool_calls:
    - {id: c7_ok, name: bash, arguments: {command: "echo original"}}
- tool_calls:
    - {id: c7_bad, name: bash, arguments: {command: "echo second"}}
- text: case seven done
"""
    proc, events = run_json(
        tmp_path,
        work,
        ["c7_a_command", "c7_b_nothing", "c7_c_timeout", "c7_d_guard"],
        scripted(tmp_path, script),
        "run it",
    )
    assert proc.returncode == 0, proc.stderr
    starts = {e["toolCallId"]: e for e in of(events, "tool_execution_start")}
    assert starts["c7_ok"]["args"] == {"command": "echo patched-by-a", "timeout": 7}
    assert starts["c7_ok"]["originalArgs"] == {"command": "echo original"}
    ends = ends_by_id(events)
    assert not ends["c7_ok"]["isError"] and result_text(ends["c7_ok"]).strip() == "patched-by-a"
    bad = ends["c7_bad"]
    assert bad["isError"] and bad["result"]["details"]["blocked_by"]
    assert "timeout" in result_text(bad) and "A tool_call hook changed the input" in result_text(
        bad
    )
    assert (work / "c7-b.txt").read_text() == "c7_ok\nc7_bad\n"
    guard = [json.loads(line) for line in (work / "c7-guard.jsonl").read_text().splitlines()]
    assert guard == [
        {"id": "c7_ok", "input": {"command": "echo patched-by-a", "timeout": 7}},
        {"id": "c7_bad", "input": {"command": "echo patched-by-a", "timeout": "soon"}},
    ]
    # The run went on after the bad patch.
    final = of(events, "message_end")[-1]["message"]
    assert final["content"][0]["text"] == "case seven done"


# --- case 8 -------------------------------------------------------------------------------


C8_SECRET = "SECRET-c8-4711"
"""What c8_leak's tool result holds (tests/fixtures/extensions/runtime/c8_*.py)."""


def run_case_8(tmp_path: Path, work: Path, extensions: list[str]):
    """Case 8's run: the model calls ``c8_leak`` once, then answers; returns the run,
    its events, the tool message of the second (last) provider request, and the
    requests."""
    with FakeOpenAI([tool_calls(("leak1", "c8_leak", {})), text("case eight done")]) as server:
        proc, events = run_json(tmp_path, work, extensions, openai(server), "get the token")
        requests = list(server.requests)
    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 2
    [tool_message] = requests[1].tool_messages()
    return proc, events, tool_message, requests


def test_case_8_tool_result_chain_redacts_and_appends(tmp_path, work):
    """Case 8: two ``tool_result`` handlers (redact, append): the model sees the
    redacted and appended text, ``details`` are preserved, the secret never reaches
    the provider request."""
    proc, events, tool_message, requests = run_case_8(
        tmp_path, work, ["c8_source", "c8_redact", "c8_append"]
    )
    assert tool_message["tool_call_id"] == "leak1"
    sent = json.dumps(tool_message["content"])
    assert "token=[redacted] status=ok" in sent and "appended-by-c8" in sent
    assert all(C8_SECRET not in r.raw for r in requests)
    [end] = of(events, "tool_execution_end")
    assert not end["isError"]
    assert [b["text"] for b in end["result"]["content"]] == [
        "token=[redacted] status=ok",
        "appended-by-c8",
    ]
    assert end["result"]["details"] == {"kept": [1, 2, 3], "origin": "c8_source"}
    result_messages = [
        e["message"] for e in of(events, "message_end") if e["message"]["role"] == "toolResult"
    ]
    assert result_messages[0]["details"] == {"kept": [1, 2, 3], "origin": "c8_source"}
    assert not [e for e in of(events, "extension_error") if e["event"] == "tool_result"]
    assert C8_SECRET not in proc.stdout and C8_SECRET not in proc.stderr


def test_case_8_a_raising_tool_result_hook_withholds_the_result(tmp_path, work):
    """Case 8 with a third handler that raises: issue 13 §1 makes ``tool_result`` fail
    closed (the departure from issue 5's fail-open chain): the model gets an error
    result saying the result was withheld and which extension failed; the secret
    never reaches the provider, the output or the events."""
    proc, events, tool_message, requests = run_case_8(
        tmp_path, work, ["c8_source", "c8_redact", "c8_append", "c8_raise"]
    )
    sent = json.dumps(tool_message["content"])
    assert "withheld" in sent and "c8 third hook exploded" in sent and "c8_raise" in sent
    assert all(C8_SECRET not in r.raw for r in requests)
    [end] = of(events, "tool_execution_end")
    assert end["isError"] and end["result"]["details"]["withheld"] is True
    errors = [e for e in of(events, "extension_error") if e["event"] == "tool_result"]
    assert [e["extensionPath"] for e in errors] == [str(fixture("c8_raise"))]
    assert "c8 third hook exploded" in errors[0]["error"]
    assert C8_SECRET not in proc.stdout and C8_SECRET not in proc.stderr
