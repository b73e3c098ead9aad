"""A ``--session-dir`` inside the workspace is masked from sandboxed tools like the
default session store (issue 15; sessions hold every earlier prompt and output).

The attack: a sandboxed ``bash`` call reads the session files of the store the run
itself uses. The control: the same call without the sandbox reads the sentinel.
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
