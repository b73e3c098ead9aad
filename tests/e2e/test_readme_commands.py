"""The README's two commands, as a user runs them.

The main command is taken from the README itself (the ``.venv/bin/pi …`` part of
its first code block) and run with this environment's ``pi``, so the README cannot
drift from what is tested. HOME and the agent directory are temporary, with a
sentinel key planted, so the run touches nothing of the machine's user.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

README = (REPO_ROOT / "README.md").read_text()
SENTINEL = "SENTINEL-e2e-4b1d-never-print"


def _code_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def _main_command() -> list[str]:
    first = _code_blocks()[0].strip()
    assert "&& .venv/bin/pi " in first, first
    return shlex.split(first.split("&& .venv/bin/pi ", 1)[1])


def _pi_executable() -> str:
    candidate = Path(sys.executable).with_name("pi")
    return str(candidate) if candidate.exists() else shutil.which("pi") or "pi"


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SENTINEL)
    return {
        **os.environ,
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        "OPENAI_API_KEY": SENTINEL,
    }


@pytest.fixture
def clean_review():
    """No REVIEW.md before the run; afterwards, the one the user's own run of the
    README command wrote is put back (or none, if there was none)."""
    review = REPO_ROOT / "examples" / "untrusted-repo" / "REVIEW.md"
    kept = review.read_bytes() if review.is_file() else None
    review.unlink(missing_ok=True)
    yield review
    review.unlink(missing_ok=True)
    if kept is not None:
        review.write_bytes(kept)


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = _code_blocks()[1].strip()
    assert "pytest" in test_command
    assert test_command in (REPO_ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.usefixtures("require_bwrap")
def test_readme_main_command_reviews_the_example_and_blocks_the_hostile_parts(
    user_env, clean_review, tmp_path
):
    args = _main_command()
    assert "--sandbox" in args and "-p" in args
    proc = subprocess.run(
        [_pi_executable(), *args],
        cwd=REPO_ROOT,
        env=user_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Review complete:")
    assert "pipe-to-shell" in proc.stderr  # the curl | sh call, blocked and shown
    assert "OBTAINED" not in proc.stdout + proc.stderr
    assert SENTINEL not in proc.stdout + proc.stderr
    assert clean_review.is_file()
    sessions = list((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    assert len(sessions) == 1 and SENTINEL not in sessions[0].read_text()


@pytest.mark.usefixtures("require_bwrap")
def test_json_mode_of_the_main_command_reports_the_blocked_curl_as_a_policy_decision(
    user_env, clean_review, tmp_path
):
    args = [a for a in _main_command() if a != "-p"]
    proc = subprocess.run(
        [_pi_executable(), "--mode", "json", *args],
        cwd=REPO_ROOT,
        env=user_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = {e["type"] for e in events}
    for kind in (
        "session",
        "agent_start",
        "turn_start",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "turn_end",
        "agent_end",
        "policy_decision",
    ):
        assert kind in kinds, kind
    denials = [e for e in events if e["type"] == "policy_decision" and e["decision"] == "deny"]
    curl = [d for d in denials if d["toolCallId"] == "call_pipe_to_shell"]
    assert curl and curl[0]["rule"] == "pipe-to-shell" and curl[0]["reason"]
    ends = {e["toolCallId"]: e for e in events if e["type"] == "tool_execution_end"}
    assert (
        ends["call_pipe_to_shell"]["isError"] and ends["call_pipe_to_shell"]["toolName"] == "bash"
    )
    final = [
        e for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant"
    ][-1]
    assert final["message"]["content"][0]["text"].startswith("Review complete:")
    assert SENTINEL not in proc.stdout
