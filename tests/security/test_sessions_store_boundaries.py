"""The session store's boundaries (issue 15).

1. A ``--session-dir`` inside the workspace is masked from sandboxed tools like the
   default session store (sessions hold every earlier prompt and output). The
   attack: a sandboxed ``bash`` call reads the session files of the store the run
   itself uses. The control: the same call without the sandbox reads the sentinel.
2. A session file from outside the store cannot choose the workspace: resuming runs
   in the recorded cwd, which becomes the sandbox's writable root. The attack: a
   repository ships a session recorded in the user's home. The control: the same
   file in the store resumes in its recorded directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "e2e"))
from pi_runs import bash_script, json_events, pi_env, run_pi, scripted_argv

pytestmark = pytest.mark.e2e

SENTINEL = "SENTINEL-SESSION-4471"


def _plant(tmp_path: Path, workspace: Path) -> None:
    script = tmp_path / "plant.yaml"
    script.write_text("- text: noted\n")
    argv = scripted_argv(script, workspace, "--no-sandbox", "--session-dir", "store", "-p")
    argv[-1] = f"remember {SENTINEL}"
    planted = run_pi(argv, env=pi_env(tmp_path), cwd=workspace)
    assert planted.returncode == 0, planted.stderr
    assert SENTINEL in "".join(p.read_text() for p in (workspace / "store").glob("*.jsonl"))


def _read_store(tmp_path: Path, workspace: Path, *flags: str) -> str:
    script = bash_script(tmp_path / "read.yaml", ["cat store/*.jsonl; echo END"])
    run = run_pi(
        scripted_argv(script, workspace, *flags, "--session-dir", "store", "--mode", "json"),
        env=pi_env(tmp_path),
        cwd=workspace,
    )
    assert run.returncode == 0, run.stderr
    ends = [e for e in json_events(run.stdout) if e["type"] == "tool_execution_end"]
    assert ends, run.stdout
    return json.dumps(ends[0]["result"])


def test_a_sandboxed_tool_cannot_read_the_session_dir_the_run_uses(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _plant(tmp_path, workspace)
    seen = _read_store(tmp_path, workspace, "--sandbox")
    assert "END" in seen, "the command ran"
    assert SENTINEL not in seen


def test_control_without_the_sandbox_the_same_call_reads_the_sentinel(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _plant(tmp_path, workspace)
    assert SENTINEL in _read_store(tmp_path, workspace, "--no-sandbox")


def _planted_session(path: Path, recorded_cwd: Path) -> Path:
    header = {"type": "session", "version": 3, "id": "planted-1", "cwd": str(recorded_cwd)}
    message = {
        "type": "message",
        "id": "m1",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(header) + "\n" + json.dumps(message) + "\n")
    return path


def test_a_session_file_from_outside_the_store_cannot_move_the_workspace(tmp_path):
    # The attack: a repository ships a session file recorded in the user's home;
    # resumed, the home would become the sandbox's writable workspace.
    workspace, home = tmp_path / "repo", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    planted = _planted_session(workspace / "resume-me.jsonl", home)
    script = tmp_path / "s.yaml"
    script.write_text("- text: done\n")
    argv = scripted_argv(script, workspace, "--session", str(planted), "--mode", "json")
    run = run_pi(argv, env=pi_env(tmp_path, home=home), cwd=workspace)
    assert run.returncode == 2
    assert "not in the session store" in run.stderr and f"pi -C {home}" in run.stderr
    assert not any(e.get("type") == "session" for e in json_events(run.stdout))


def test_control_the_same_file_in_the_session_store_resumes_in_its_directory(tmp_path):
    workspace, home = tmp_path / "repo", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    store = tmp_path / "agent" / "sessions" / "--x--"
    planted = _planted_session(store / "resume-me.jsonl", home)
    script = tmp_path / "s.yaml"
    script.write_text("- text: done\n")
    argv = scripted_argv(script, workspace, "--session", str(planted), "--mode", "json")
    run = run_pi(argv, env=pi_env(tmp_path, home=home), cwd=workspace)
    assert run.returncode == 0, run.stderr
    assert json_events(run.stdout)[0]["cwd"] == str(home)
