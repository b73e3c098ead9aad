"""``pi --model anthropic/MODEL --base-url URL``: the whole agent loop against a loopback
Messages API server (``tests/integration/fake_anthropic.py``, real SSE).

The first answer streams a ``bash`` tool call whose input arrives in fragments; the
tool runs in the sandboxed tool worker; the second answer is text. The key is the
``x-api-key`` header only: never in a worker, the output or the session file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))

from fake_anthropic import FakeAnthropic, stream, text, tool_use

pytestmark = pytest.mark.e2e

KEY = "sk-ant-api03-SENTINEL-e2e-anthropic-0042"
MODEL = "claude-test-4-5"

# Runs the CLI as `python -m pi_sandbox.cli` would, then writes the names of the
# modules the supervisor process loaded to $MODULES_OUT (the start-path check).
WITH_MODULE_LIST = (
    "import atexit, json, os, runpy, sys\n"
    "atexit.register(lambda: open(os.environ['MODULES_OUT'], 'w').write("
    "json.dumps(sorted(sys.modules))))\n"
    "sys.argv = ['pi', *sys.argv[1:]]\n"
    "runpy.run_module('pi_sandbox.cli', run_name='__main__')\n"
)


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        fake.replies.extend(
            [
                stream(
                    text("Checking. "),
                    tool_use(
                        "toolu_01E2E",
                        "bash",
                        {"command": "echo key=$ANTHROPIC_API_KEY; echo hi"},
                        cut=4,
                    ),
                    stop_reason="tool_use",
                ),
                stream(text("The answer is 42.")),
            ]
        )
        yield fake


def run_pi(tmp_path: Path, *flags: str, key: str | None = KEY) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        "MODULES_OUT": str(tmp_path / "modules.json"),
    }
    env.pop("ANTHROPIC_API_KEY", None)
    if key is not None:
        env["ANTHROPIC_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-c", WITH_MODULE_LIST, *flags, "-C", str(work), "what is the answer?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def loaded_modules(tmp_path: Path) -> set[str]:
    return set(json.loads((tmp_path / "modules.json").read_text()))


def test_print_mode_runs_a_sandboxed_tool_call_and_the_key_stays_in_the_supervisor(
    server: FakeAnthropic, tmp_path: Path, require_bwrap: str
) -> None:
    proc = run_pi(
        tmp_path, "--sandbox", "-p", "--model", f"anthropic/{MODEL}", "--base-url", server.url
    )

    assert proc.returncode == 0, proc.stderr
    assert "The answer is 42." in proc.stdout
    assert KEY not in proc.stdout + proc.stderr
    first, second = server.requests
    assert first.headers["x-api-key"] == KEY == second.headers["x-api-key"]
    assert first.body["model"] == MODEL and first.body["stream"] is True
    assert {t["name"] for t in first.body["tools"]} >= {"bash", "read", "write", "edit"}
    # The tool ran in the sandboxed worker, which never had the key.
    [result] = [
        block
        for message in second.body["messages"]
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert result["tool_use_id"] == "toolu_01E2E"
    assert result["content"] == "key=\nhi" and result["is_error"] is False
    assert KEY not in json.dumps(first.body) + json.dumps(second.body)
    sessions = "".join(p.read_text() for p in (tmp_path / "agent").rglob("*.jsonl"))
    assert "toolu_01E2E" in sessions and KEY not in sessions
    # Control for the start-path check below: choosing Anthropic did import it.
    assert "pi_sandbox.supervisor.providers.anthropic" in loaded_modules(tmp_path)


def test_json_mode_message_updates_carry_pi_events_usage_and_the_text_delta(
    server: FakeAnthropic, tmp_path: Path
) -> None:
    proc = run_pi(
        tmp_path,
        "--no-sandbox",
        "--mode",
        "json",
        "--model",
        f"anthropic/{MODEL}",
        "--base-url",
        server.url,
    )

    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    updates = [e for e in events if e["type"] == "message_update"]
    kinds = [u["assistantMessageEvent"]["type"] for u in updates]
    assert kinds[:2] == ["text_start", "text_delta"]
    assert "toolcall_start" in kinds and "toolcall_end" in kinds
    start = next(u for u in updates if u["assistantMessageEvent"]["type"] == "toolcall_start")
    assert start["assistantMessageEvent"] == {
        "type": "toolcall_start",
        "contentIndex": 1,
        "id": "toolu_01E2E",
        "toolName": "bash",
    }
    end = next(u for u in updates if u["assistantMessageEvent"]["type"] == "toolcall_end")
    assert end["assistantMessageEvent"]["toolCall"]["arguments"] == {
        "command": "echo key=$ANTHROPIC_API_KEY; echo hi"
    }
    for update in updates:
        assert update["usage"]["input"] == 25  # message_start's count, cumulative
        assert set(update) == {"type", "usage", "assistantMessageEvent"}  # pi's record
    texts = "".join(
        u["assistantMessageEvent"]["delta"]
        for u in updates
        if u["assistantMessageEvent"]["type"] == "text_delta"
    )
    assert texts == "Checking. The answer is 42."


def test_a_scripted_run_never_imports_the_anthropic_provider(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- text: hello\n")

    proc = run_pi(tmp_path, "--no-sandbox", "-p", "--model", "scripted", "--script", str(script))

    assert proc.returncode == 0, proc.stderr
    loaded = loaded_modules(tmp_path)
    assert "pi_sandbox.supervisor.agent.agent_session" in loaded  # the run really happened
    assert "pi_sandbox.supervisor.providers.anthropic" not in loaded
    assert "anthropic" not in loaded
