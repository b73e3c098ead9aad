"""Issue 13 §4 end to end: a project extension under ``--trust sandboxed`` (real
bwrap, no capabilities) attacks the supervisor through the values it hands over;
the supervisor does not crash, refuses and audits each bad value, keeps the
session file small and loadable, and disables an extension that keeps trying.

Every run is the ``pi`` CLI as a subprocess with a private ``HOME`` and
``PI_CODING_AGENT_DIR`` and a session file; the project is ``tmp_path/proj`` with
a ``.git`` of its own and the attacking extension in ``.pi/extensions``. The
extension cannot write outside its sandbox, so what it saw comes back as a
well-formed ``send_message`` (the control: that one reaches the model and the
session), in the audit log, or on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text

from pi_sandbox.supervisor.sessions.session_file import load_session

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("require_bwrap")]

TIMEOUT_S = 120
MIB = 1024 * 1024


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / ".pi" / "extensions").mkdir(parents=True)
    return root


def plant(proj: Path, body: str) -> Path:
    path = proj / ".pi" / "extensions" / "attack.py"
    path.write_text(body)
    return path


class Run:
    """One finished ``pi`` run: its exit status, output, audit records, session
    file and peak memory (the largest resident set of pi and its workers)."""

    def __init__(self, tmp_path: Path, proj: Path, model: list[str], *extra: str) -> None:
        env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        }
        env.pop("OPENAI_API_KEY", None)
        self.audit_path = tmp_path / "audit.jsonl"
        argv = [sys.executable, "-m", "pi_sandbox.cli", "-C", str(proj), "--trust", "sandboxed"]
        argv += ["--audit-log", str(self.audit_path), *model, *extra, "-p", "hello"]
        out, err = tmp_path / "stdout", tmp_path / "stderr"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            process = subprocess.Popen(
                argv, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL
            )
            try:
                # wait4, not Popen.wait: the run's own peak memory is part of the evidence.
                _, status, usage = os.wait4(process.pid, 0)
            finally:
                if process.poll() is None:
                    process.kill()
        process.returncode = os.waitstatus_to_exitcode(status)
        self.returncode = process.returncode
        self.max_rss_bytes = usage.ru_maxrss * 1024
        self.stdout, self.stderr = out.read_text(), err.read_text()
        [self.session_file] = (tmp_path / "agent" / "sessions").glob("*/*.jsonl")

    def audit(self, action: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.audit_path.read_text().splitlines()]
        return [r for r in records if r.get("event") == "extension" and r.get("action") == action]

    def session(self) -> list[Any]:
        _, entries = load_session(self.session_file)  # raises if it does not load
        return [
            e if isinstance(e, dict) else {"type": e.type, "message": getattr(e, "message", None)}
            for e in entries
        ]


def scripted(tmp_path: Path) -> list[str]:
    script = tmp_path / "script.yaml"
    script.write_text("- text: done\n")
    return ["--model", "scripted", "--script", str(script)]


def no_crash(run: Run, *, extension_tracebacks: bool = False) -> None:
    """The supervisor did not fail: no internal error and no traceback through its
    code (``extension_tracebacks``: the extension's own errors are shown, expected)."""
    assert "internal error" not in run.stderr, run.stderr[-3000:]
    assert "pi_sandbox/supervisor" not in run.stderr, run.stderr[-3000:]
    if not extension_tracebacks:
        for word in ("Traceback", "TypeError", "AttributeError", "RecursionError"):
            assert word not in run.stderr, run.stderr[-3000:]


REPORTING = """
def report(pi, what):
    pi.send_message({"custom_type": "report", "content": "REPORT " + what}, deliver_as="next_turn")
"""


def test_send_message_with_a_numeric_content_is_refused_and_a_good_one_reaches_the_model(
    tmp_path, proj
):
    extension = plant(
        proj,
        REPORTING
        + """
def extension(pi):
    def on_start(event, ctx):
        bad = {"custom_type": "x", "content": 5}
        outcomes = []
        for attempt in (
            lambda: pi.send_message(bad, deliver_as="next_turn"),
            # Past the worker's own check, as code writing its own frames would be:
            lambda: pi._call("pi.send_message", "send_message", message=bad,
                             deliver_as="next_turn", trigger_turn=False),
        ):
            try:
                attempt()
                outcomes.append("ACCEPTED")
            except Exception as exc:
                outcomes.append(type(exc).__name__ + ": " + str(exc))
        report(pi, " | ".join(outcomes))
    pi.on("session_start", on_start)
""",
    )
    with FakeOpenAI([text("fine")]) as server:
        run = Run(tmp_path, proj, ["--model", "openai/x", "--base-url", server.url])
        [request] = server.requests
    no_crash(run)
    assert run.returncode == 0, run.stderr
    expected = (
        "REPORT TypeError: send_message: content must be a string or a list of text/image "
        "blocks | ValueError: send_message: message.content: expected a string or a list of "
        "content blocks"
    )
    # The control: the well-formed message reached the model...
    assert expected in json.dumps(request.body)
    # ...and the session file; the refused one is nowhere, and the file loads.
    # Extension messages are custom_message entries, as pi 1.6.0 writes them (issue 15).
    customs = [e for e in run.session() if e["type"] == "custom_message"]
    assert [m["customType"] for m in customs] == ["report"]
    assert customs[0]["content"] == [{"type": "text", "text": expected}]
    assert str(extension) in run.stderr and "send_message refused" in run.stderr
    [refused] = run.audit("value_refused")
    assert refused["extension"] == str(extension) and refused["op"] == "send_message"
    assert "message.content" in refused["reason"]


def test_a_context_handler_returning_a_numeric_content_never_reaches_the_provider(tmp_path, proj):
    extension = plant(
        proj,
        """
def extension(pi):
    def on_context(event, ctx):
        return {"messages": list(event.messages) + [{"role": "custom", "customType": "x", "content": 5}]}
    pi.on("context", on_context)
""",
    )
    with FakeOpenAI([text("fine")]) as server:
        run = Run(tmp_path, proj, ["--model", "openai/x", "--base-url", server.url])
        requests = list(server.requests)
    no_crash(run)
    # A failed `context` transform stops the request (issue 13 §1; docs/extensions.md
    # "When a handler fails": context → stop, exit 1): the supervisor survives,
    # names the extension, and neither the bad nor the untransformed context is sent.
    assert run.returncode == 1, run.stderr
    assert str(extension) in run.stderr and "context: messages[1].content" in run.stderr
    assert "the request was not sent to the model (context hooks fail closed)" in run.stderr
    assert requests == []
    for entry in run.session():
        assert entry["type"] != "message" or entry["message"].get("content") != 5
    [refused] = run.audit("value_refused")
    assert refused["op"] == "context" and refused["extension"] == str(extension)


FLOOD = """
def extension(pi):
    def on_start(event, ctx):
        blob = "A" * {size}
        refused = 0
        for _ in range({count}):
            try:
                pi.append_entry("flood", blob)
            except Exception:
                refused += 1
                if refused > {give_up}:
                    break
    pi.on("session_start", on_start)
"""


def test_an_append_entry_flood_is_capped_and_the_extension_disabled(tmp_path, proj):
    extension = plant(proj, FLOOD.format(size=MIB - 100, count=400, give_up=1000))
    run = Run(tmp_path, proj, scripted(tmp_path))
    no_crash(run)
    assert run.returncode == 0, run.stderr  # its only hook is session_start: the run goes on
    size = run.session_file.stat().st_size
    assert size < 33 * MIB, size  # extensions.limits.session_bytes: 32 MiB (was 419 MB)
    floods = [
        e for e in run.session() if e.get("type") == "custom" and e.get("customType") == "flood"
    ]
    assert 20 <= len(floods) <= 32
    assert f"extension {extension} is disabled for this session" in run.stderr
    [disabled] = run.audit("disabled")
    assert (
        disabled["extension"] == str(extension)
        and "extensions.limits.strikes" in disabled["reason"]
    )
    assert len(run.audit("limit_exceeded")) == 50  # the default strikes, then nothing more
    assert run.max_rss_bytes < 300 * MIB, run.max_rss_bytes  # was 477 MB
    assert "done" in run.stdout  # the model still answered


def test_the_control_a_policy_that_raises_the_limits_lets_the_same_flood_through(tmp_path, proj):
    """With the protection loosened (a managed policy raising the session budget),
    the same extension writes past the default cap: the limit is what stops it."""
    plant(proj, FLOOD.format(size=MIB - 100, count=40, give_up=0))
    policy = tmp_path / "loose.yaml"
    policy.write_text(
        "version: 1\nextensions:\n  limits: {session_bytes: 1073741824, session_bytes_total: 1073741824}\n"
    )
    run = Run(tmp_path, proj, scripted(tmp_path), "--policy", str(policy))
    no_crash(run)
    assert run.returncode == 0, run.stderr
    assert run.session_file.stat().st_size > 40 * MIB
    assert run.audit("limit_exceeded") == [] and run.audit("disabled") == []


def test_a_flood_of_tiny_entries_meets_the_rate_limit(tmp_path, proj):
    extension = plant(proj, FLOOD.format(size=1, count=100_000, give_up=1000))
    run = Run(tmp_path, proj, scripted(tmp_path))
    no_crash(run)
    assert run.returncode == 0, run.stderr
    floods = [e for e in run.session() if e.get("type") == "custom"]
    # The burst (200) plus what 20 a second refill while it runs (a busy machine
    # may take several seconds), far below the 100 000 it asked for.
    assert 200 <= len(floods) < 2000, len(floods)
    assert f"extension {extension} is disabled for this session" in run.stderr
    assert "writes_per_s" in run.audit("limit_exceeded")[0]["reason"]


def test_a_policy_sets_the_limits_for_everyone(tmp_path, proj):
    extension = plant(
        proj,
        REPORTING
        + """
def extension(pi):
    def on_start(event, ctx):
        outcomes = []
        for data in ("x" * 100, "x" * 5000):
            try:
                pi.append_entry("state", data)
                outcomes.append("ok")
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        report(pi, ",".join(outcomes))
    pi.on("session_start", on_start)
""",
    )
    policy = tmp_path / "tight.yaml"
    policy.write_text("version: 1\nextensions:\n  limits: {entry_bytes: 4096}\n")
    run = Run(tmp_path, proj, scripted(tmp_path), "--policy", str(policy))
    no_crash(run)
    entries = run.session()
    [report] = [e for e in entries if e["type"] == "custom_message"]
    assert report["content"][0]["text"] == "REPORT ok,ValueError"
    assert [len(e["data"]) for e in entries if e.get("type") == "custom"] == [100]
    [refused] = run.audit("value_refused")
    assert "extensions.limits.entry_bytes" in refused["reason"] and refused["extension"] == str(
        extension
    )


def test_names_labels_and_bus_messages_are_bounded_too(tmp_path, proj):
    plant(
        proj,
        REPORTING
        + """
def extension(pi):
    pi.events.on("chan", lambda data: None)
    def on_start(event, ctx):
        outcomes = []
        for name, call in [
            ("name", lambda: pi.set_session_name("N" * 100_000)),
            ("good-name", lambda: pi.set_session_name("short")),
            ("label", lambda: pi.set_label("nope", "L" * 100_000)),
        ]:
            try:
                call()
                outcomes.append(name + "=ok")
            except Exception as exc:
                outcomes.append(name + "=" + type(exc).__name__)
        pi.events.emit("chan", "B" * 300_000)
        pi.events.emit("chan", "small")
        report(pi, ",".join(outcomes))
    pi.on("session_start", on_start)
""",
    )
    run = Run(tmp_path, proj, scripted(tmp_path))
    no_crash(run)
    assert run.returncode == 0, run.stderr
    entries = run.session()
    [report] = [e for e in entries if e["type"] == "custom_message"]
    assert report["content"][0]["text"] == "REPORT name=ValueError,good-name=ok,label=ValueError"
    assert [e["name"] for e in entries if e.get("type") == "session_info"] == ["short"]
    refused = run.audit("value_refused")
    assert {r["op"] for r in refused} == {"set_session_name", "set_label", "events.emit"}
    assert any("extensions.limits.bus_bytes" in r["reason"] for r in refused)


def test_a_flood_of_log_lines_is_rate_limited_and_the_extension_disabled(tmp_path, proj):
    """Each thread that dies sends a ``log`` notification: 3000 of them in a row."""
    extension = plant(
        proj,
        """
import threading

def extension(pi):
    def on_start(event, ctx):
        def boom():
            raise RuntimeError("LOG-FLOOD")
        for _ in range(3000):
            thread = threading.Thread(target=boom)
            thread.start()
            thread.join()
    pi.on("session_start", on_start)
""",
    )
    run = Run(tmp_path, proj, scripted(tmp_path))
    no_crash(run, extension_tracebacks=True)
    assert run.returncode == 0, run.stderr
    assert f"extension {extension} is disabled for this session" in run.stderr
    exceeded = run.audit("limit_exceeded")
    assert exceeded and {r["op"] for r in exceeded} == {"log"}
    assert "extensions.limits.logs_per_s" in exceeded[0]["reason"]
    # At most the existing cap of shown errors (20) plus the notices: no flood on stderr.
    assert run.stderr.count("LOG-FLOOD") <= 21


def test_a_notification_flood_from_a_trusted_extension_meets_the_ui_rate(tmp_path, proj):
    """``ctx.ui`` needs a capability a sandboxed project extension lacks, so the
    flood comes from a command-line extension (``-e``): every origin is bounded."""
    flooder = tmp_path / "notifier.py"
    flooder.write_text(
        """
def extension(pi):
    def on_start(event, ctx):
        for index in range(5000):
            try:
                ctx.ui.notify(f"NOTE-{index}", "info")
            except Exception:
                pass
    pi.on("session_start", on_start)
"""
    )
    run = Run(tmp_path, proj, scripted(tmp_path), "-e", str(flooder))
    no_crash(run)
    assert run.returncode == 0, run.stderr
    shown = run.stderr.count("NOTE-")
    assert 200 <= shown < 1000, shown  # the burst and a little refill, not 5000 lines
    assert f"extension {flooder} is disabled for this session" in run.stderr
    assert "ui_per_s" in run.audit("limit_exceeded")[0]["reason"]
