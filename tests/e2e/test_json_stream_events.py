"""Our ``--mode json`` stream in pi 1.6.0's order and shapes (issue 17 §1, pi docs
json.md), on runs of ours alone: what the conformance test against pi itself
(`test_pi16_json_conformance`) cannot reach — extension-made state events, a
thinking turn of the scripted model, a blocked call, and our own namespaced records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("require_bwrap")]

STATE_EXTENSION = """
def extension(pi):
    def on_agent_start(event, ctx):
        pi.append_entry("progress", {"step": 1})
        pi.set_session_name("json stream check")
        pi.set_thinking_level("high")
    pi.on("agent_start", on_agent_start)
"""


def run_json(tmp_path: Path, script: str, *extra: str) -> list[dict[str, Any]]:
    """Run ours ``--mode json --no-session`` on ``script``; its records, in order."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (tmp_path / "s.yaml").write_text(script)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
    }
    env.pop("OPENAI_API_KEY", None)
    argv = [sys.executable, "-m", "pi_sandbox.cli", "-C", str(work), "--no-session"]
    argv += ["--model", "scripted", "--script", str(tmp_path / "s.yaml"), "--mode", "json"]
    proc = subprocess.run(
        [*argv, *extra, "go"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_extension_state_changes_are_pis_entry_appended_session_info_and_thinking_events(
    tmp_path: Path,
) -> None:
    extension = tmp_path / "state.py"
    extension.write_text(STATE_EXTENSION)
    records = run_json(tmp_path, "- text: done\n", "-e", str(extension))
    by_type = {r["type"]: r for r in records}
    entry = by_type["entry_appended"]["entry"]
    assert entry["type"] == "custom" and entry["customType"] == "progress"
    assert entry["data"] == {"step": 1} and entry["id"]
    assert by_type["session_info_changed"] == {
        "type": "session_info_changed",
        "name": "json stream check",
    }
    assert by_type["thinking_level_changed"] == {"type": "thinking_level_changed", "level": "high"}
    # The level asked for is the one the assistant message records.
    [assistant] = [
        r["message"]
        for r in records
        if r["type"] == "message_end" and r["message"]["role"] == "assistant"
    ]
    assert assistant["thinkingLevel"] == "high"
    assert records[-1] == {"type": "agent_settled", "aborted": False}


def test_a_scripted_thinking_turn_streams_pis_thinking_events_and_records_the_block(
    tmp_path: Path,
) -> None:
    records = run_json(tmp_path, '- thinking: "Let me think."\n  text: "Thought it over."\n')
    events = [r["assistantMessageEvent"] for r in records if r["type"] == "message_update"]
    assert [e["type"] for e in events] == [
        "thinking_start",
        "thinking_delta",
        "thinking_end",
        "text_start",
        "text_delta",
        "text_end",
    ]
    assert events[1] == {"type": "thinking_delta", "contentIndex": 0, "delta": "Let me think."}
    assert events[4]["contentIndex"] == 1
    [end] = [
        r for r in records if r["type"] == "message_end" and r["message"]["role"] == "assistant"
    ]
    assert end["message"]["content"] == [
        {"type": "thinking", "thinking": "Let me think."},
        {"type": "text", "text": "Thought it over."},
    ]


def test_a_scripted_turn_with_only_thinking_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("- thinking: hmm\n")
    script = ["--script", str(tmp_path / "s.yaml")]
    proc = subprocess.run(
        [sys.executable, "-m", "pi_sandbox.cli", "--model", "scripted", *script, "-p", "go"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path), "PI_CODING_AGENT_DIR": str(tmp_path / "a")},
        check=False,
    )
    assert proc.returncode == 2
    assert "turn 1 (line 1)" in proc.stderr and "a turn needs `text` or `tool_calls`" in proc.stderr


def test_every_message_has_start_and_end_and_each_turn_starts_before_its_messages(
    tmp_path: Path,
) -> None:
    records = run_json(
        tmp_path,
        "- tool_calls:\n    - {name: bash, arguments: {command: 'echo hi'}}\n- text: done\n",
    )
    labels = [
        r["type"]
        + (f"[{r['message']['role']}]" if "message" in r and r["type"] != "turn_end" else "")
        for r in records
        if r["type"] not in ("message_update", "tool_execution_update", "policy_decision")
        and not r["type"].startswith("pisandbox_")
    ]
    assert labels == [
        "session",
        "agent_start",
        "turn_start",
        "message_start[system]",
        "message_end[system]",
        "message_start[user]",
        "message_end[user]",
        "message_start[assistant]",
        "message_end[assistant]",
        "tool_execution_start",
        "tool_execution_end",
        "message_start[toolResult]",
        "message_end[toolResult]",
        "turn_end",
        "turn_start",
        "message_start[assistant]",
        "message_end[assistant]",
        "turn_end",
        "agent_end",
        "agent_settled",
    ]
    start = next(r for r in records if r["type"] == "message_start")
    assert start["message"]["role"] == "system" and "bash" in {
        t["name"] for t in start["message"]["toolsAdded"]
    }
    pending = [
        r["message"]
        for r in records
        if r["type"] == "message_start" and r["message"]["role"] == "assistant"
    ]
    assert all(m["content"] == [] and m["stopReason"] == "pending" for m in pending)
    [end] = [r for r in records if r["type"] == "tool_execution_end"]
    assert isinstance(end["durationMs"], int) and "blocked" not in end
    assert end["result"]["structuredContent"]["exit_code"] == 0
    update = next(r for r in records if r["type"] == "tool_execution_update")
    assert update["toolName"] == "bash" and update["args"] == {"command": "echo hi"}
    assert update["partialResult"]["content"][0]["text"] == "hi\n"
    header = records[0]
    assert header["id"] and header["timestamp"] and "path" not in header  # --no-session
    agent_end = next(r for r in records if r["type"] == "agent_end")
    assert agent_end["willRetry"] is False and "aborted" not in agent_end


def test_a_call_stopped_before_it_ran_has_no_duration_and_says_who_stopped_it(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "deny.yaml"
    policy.write_text(
        "version: 1\ntool_call:\n  rules:\n    - {id: no-echo, tool: bash, command: [echo], "
        "decision: deny, reason: no echo here}\n"
    )
    records = run_json(
        tmp_path,
        "- tool_calls:\n    - {name: bash, arguments: {command: 'echo hi'}}\n- text: done\n",
        "--policy",
        str(policy),
    )
    [end] = [r for r in records if r["type"] == "tool_execution_end"]
    assert end["isError"] is True and "durationMs" not in end
    assert end["result"]["details"]["blocked_by"] == "policy"
    [result] = [
        r["message"]
        for r in records
        if r["type"] == "message_end" and r["message"]["role"] == "toolResult"
    ]
    assert "durationMs" not in result


def test_our_own_records_carry_the_pisandbox_prefix(tmp_path: Path) -> None:
    extension = tmp_path / "state.py"
    extension.write_text(STATE_EXTENSION)
    records = run_json(tmp_path, "- text: done\n", "-e", str(extension))
    notices = [r for r in records if r["type"] == "pisandbox_notice"]
    assert any("Loaded" in r["message"] and "state.py" in r["message"] for r in notices)
    assert not [r for r in records if r["type"] in ("notice", "warning", "error")]


def test_bash_progress_snapshots_stop_at_the_per_call_budget_with_a_note(tmp_path: Path) -> None:
    # ~20 KB every 0.12 s for 12 s or more: about one 16 KiB snapshot each time, so
    # the 1 MiB budget (MAX_UPDATE_BYTES_PER_CALL, ~63 snapshots) runs out first.
    command = "for i in $(seq 100); do head -c 20000 /dev/zero | tr '\\\\0' x; sleep 0.12; done"
    records = run_json(
        tmp_path,
        f'- tool_calls:\n    - {{name: bash, arguments: {{command: "{command}"}}}}\n- text: done\n',
    )
    updates = [r for r in records if r["type"] == "tool_execution_update"]
    sizes = [len(json.dumps(u)) for u in updates]
    assert sum(sizes) < 1.1 * 1024 * 1024
    assert "is not streamed" in updates[-1]["partialResult"]["content"][0]["text"]
    assert all(
        "is not streamed" not in u["partialResult"]["content"][0]["text"] for u in updates[:-1]
    )
