"""Automatic retries seen from the command line (issue 16 "Retries"): ``pi -p`` shows
a retry line on stderr and succeeds, ``--mode json`` carries pi's ``auto_retry_*``
events, RPC ``abort_retry`` cancels the wait, Ctrl-C during the wait exits promptly.
The real CLI as a subprocess against the loopback fault server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
from fault_servers import FaultServer, http_error, openai_text, stream
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e


def pi_argv(tmp_path: Path, server: FaultServer, *rest: str) -> list[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return [
        sys.executable,
        "-m",
        "pi_sandbox.cli",
        "--no-sandbox",
        "--no-session",
        "--no-extensions",
        "--model",
        "openai/fault-model",
        "--base-url",
        server.url(),
        "-C",
        str(work),
        *rest,
    ]


def settings(tmp_path: Path, **retry: Any) -> None:
    """Write ``retry`` settings (short delays) to the test's agent directory."""
    agent = tmp_path / "agent"
    agent.mkdir(exist_ok=True)
    (agent / "settings.json").write_text(json.dumps({"retry": retry}))


class Lines:
    """A subprocess pipe read line by line in a thread; `wait_for` a matching line."""

    def __init__(self, pipe: Any) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe: Any) -> None:
        for line in pipe:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, needle: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line with {needle!r}: {self.lines}")
                self._cond.wait(left)


def test_print_mode_shows_the_retry_line_and_succeeds(tmp_path: Path) -> None:
    settings(tmp_path, baseDelayMs=100)
    with FaultServer(
        [
            http_error(503, {"error": {"message": "warming up"}}, retry_after="1"),
            stream(openai_text("fine answer")),
        ]
    ) as server:
        proc = subprocess.run(
            pi_argv(tmp_path, server, "-p", "hello"),
            env=fake_provider_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "fine answer"
    assert "retrying in 1.0 s (attempt 1/3): " in proc.stderr
    assert "HTTP 503" in proc.stderr and "warming up" in proc.stderr
    assert "retry 1 succeeded" in proc.stderr
    assert len(server.hits) == 2 and server.hits[1].at - server.hits[0].at >= 1.0


def test_json_mode_carries_pis_retry_events_and_a_final_failure(tmp_path: Path) -> None:
    settings(tmp_path, baseDelayMs=50, maxRetries=2)
    with FaultServer([http_error(500)] * 3) as server:
        proc = subprocess.run(
            pi_argv(tmp_path, server, "--mode", "json", "hello"),
            env=fake_provider_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )

    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    starts = [e for e in events if e["type"] == "auto_retry_start"]
    [end] = [e for e in events if e["type"] == "auto_retry_end"]
    assert proc.returncode == 1 and len(server.hits) == 3
    assert [(s["attempt"], s["maxAttempts"]) for s in starts] == [(1, 2), (2, 2)]
    assert all(
        set(s) == {"type", "attempt", "maxAttempts", "delayMs", "errorMessage"} for s in starts
    )
    assert end["success"] is False and end["attempt"] == 2
    assert "gave up after 3 attempts" in end["finalError"]
    assert "gave up after 3 attempts" in proc.stderr


def test_disabled_retries_fail_at_once_control(tmp_path: Path) -> None:
    settings(tmp_path, enabled=False)
    with FaultServer([http_error(503), stream(openai_text("unused"))]) as server:
        proc = subprocess.run(
            pi_argv(tmp_path, server, "-p", "hello"),
            env=fake_provider_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert proc.returncode == 1 and len(server.hits) == 1
    assert "retrying" not in proc.stderr and "HTTP 503" in proc.stderr


def test_ctrl_c_during_the_wait_exits_promptly_with_130(tmp_path: Path) -> None:
    with FaultServer([http_error(429, retry_after="50")]) as server:
        proc = subprocess.Popen(
            pi_argv(tmp_path, server, "-p", "hello"),
            env=fake_provider_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stderr = Lines(proc.stderr)
            stderr.wait_for("retrying in 50.0 s")
            began = time.monotonic()
            proc.send_signal(signal.SIGINT)
            status = proc.wait(timeout=60)
            took = time.monotonic() - began
        finally:
            proc.kill()
            proc.wait()

    assert status == 130
    assert took < 40  # well short of the 50 s the server asked for
    assert len(server.hits) == 1


def test_rpc_abort_retry_cancels_the_wait_and_set_auto_retry_turns_retries_off(
    tmp_path: Path,
) -> None:
    with FaultServer(
        [http_error(429, retry_after="50"), http_error(503), stream(openai_text("ok"))]
    ) as server:
        proc = subprocess.Popen(
            pi_argv(tmp_path, server, "--mode", "rpc"),
            env=fake_provider_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None

        def send(command: dict[str, Any]) -> None:
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()

        try:
            out = Lines(proc.stdout)
            send({"type": "prompt", "message": "hello", "id": "p1"})
            out.wait_for('"auto_retry_start"')
            began = time.monotonic()
            send({"type": "abort_retry", "id": "a1"})
            ended = json.loads(out.wait_for('"auto_retry_end"'))
            took = time.monotonic() - began
            out.wait_for('"agent_end"')
            send({"type": "set_auto_retry", "enabled": False, "id": "s1"})
            out.wait_for('"id": "s1"')
            send({"type": "prompt", "message": "again", "id": "p2"})
            out.wait_for("HTTP 503")
            send({"type": "set_auto_retry", "enabled": "yes", "id": "s2"})
            bad = json.loads(out.wait_for('"id": "s2"'))
            proc.stdin.close()
            proc.wait(timeout=60)
        finally:
            proc.kill()
            proc.wait()

    events = [json.loads(line) for line in out.lines if line.startswith("{")]
    [abort] = [e for e in events if e.get("id") == "a1"]
    assert abort["success"] is True and abort["data"] == {"aborted": True}
    assert ended == {
        "type": "auto_retry_end",
        "success": False,
        "attempt": 1,
        "finalError": "Retry cancelled",
    }
    assert took < 40  # well short of the 50 s the server asked for
    assert len(server.hits) == 2  # the 429 (cancelled wait), then the 503, not retried
    assert [e for e in events if e["type"] == "auto_retry_start"][1:] == []
    assert bad["success"] is False and "'enabled' must be true or false" in bad["error"]


def test_a_silent_stream_is_cut_by_the_idle_timeout_from_the_environment_and_retried(
    tmp_path: Path,
) -> None:
    settings(tmp_path, baseDelayMs=50)
    env = {**fake_provider_env(tmp_path), "PI_HTTP_IDLE_TIMEOUT_MS": "700"}
    with FaultServer(
        [stream(openai_text("x", done=False)[:1], then="hang"), stream(openai_text("awake"))]
    ) as server:
        began = time.monotonic()
        proc = subprocess.run(
            pi_argv(tmp_path, server, "-p", "hello"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - began

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "awake"
    assert "the stream went silent: no bytes for 0.7 s (httpIdleTimeoutMs)" in proc.stderr
    assert took < 60  # not the old fixed 600 s, nor pi's default 300 s
