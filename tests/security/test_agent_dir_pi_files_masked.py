"""pi 1.6.0's files in the shared agent directory are hidden from sandboxed tools
(issue 17 §4): ``mcp.json`` (MCP servers' ``env`` and ``headers`` may hold literal
tokens, pi docs mcp.md) and ``models-store.json``, like our ``auth.json``.

Attack: a tool call reads them from an agent directory inside the workspace (bound
into the sandbox, so only the masks hide them; the home is not bound at all).
Shown failing under ``--sandbox`` (the sentinel never appears in the tool result or
the session file); the control without the sandbox shows the read works.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from pi_runs import bash_script, run_pi, scripted_argv, tool_texts

SENTINEL = "SENTINEL-mcp-4b1d-do-not-leak"

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]


def _setup(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "work"
    # The agent directory inside the bound workspace: only the masks hide its files.
    agent = workspace / "agent"
    agent.mkdir(parents=True)
    mcp = {"mcpServers": {"docs": {"url": "https://x", "headers": {"Authorization": SENTINEL}}}}
    (agent / "mcp.json").write_text(json.dumps(mcp))
    (agent / "models-store.json").write_text(json.dumps({"p": {"token": SENTINEL}}))
    script = bash_script(
        tmp_path / "script.yaml",
        [f"cat {agent}/mcp.json {agent}/models-store.json; echo END-OF-READ"],
    )
    env = {**os.environ, "HOME": str(home), "PI_CODING_AGENT_DIR": str(agent)}
    return scripted_argv(script, workspace, "--mode", "json"), env, agent


def test_a_sandboxed_tool_cannot_read_pi_s_mcp_json_or_models_store(tmp_path):
    argv, env, agent = _setup(tmp_path)
    proc = run_pi([*argv, "--sandbox"], env=env)
    assert proc.returncode == 0, proc.stderr
    [result] = tool_texts(proc.stdout)
    assert "END-OF-READ" in result  # the command ran
    assert SENTINEL not in proc.stdout
    sessions = "".join(p.read_text() for p in (agent / "sessions").rglob("*.jsonl"))
    assert SENTINEL not in sessions


def test_control_without_the_sandbox_the_read_works(tmp_path):
    argv, env, _ = _setup(tmp_path)
    proc = run_pi([*argv, "--no-sandbox"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert SENTINEL in "".join(tool_texts(proc.stdout))
