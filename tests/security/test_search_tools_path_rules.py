"""A policy ``path`` rule on a directory holds against ``grep``, ``find`` and ``ls``
(issue 17 §6: "path rules see grep/find paths"), in a real ``pi -p --sandbox`` run.

The attack: a sentinel secret sits in ``secret/key.txt`` and in ``app/.env`` of the
workspace; a policy denies ``read`` of ``secret/**`` and ``**/.env``. The scripted
model does not ``read`` them: it searches for them, by naming the directory, by a
path that walks back into it (``src/../secret``), through a symlink to it, and by
searching the whole workspace, which reaches the directory without naming it. The
sentinel must appear nowhere in the run's output and session file, and the calls
naming the directory are blocked by the rule. A control run without the policy
shows that the same calls do find the sentinel, so the assertions are able to fail.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from pi_runs import json_events, pi_env, run_pi, scripted_argv

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

SENTINEL = "SENTINEL-51e0-grep-find-must-not-see"
ENV_SENTINEL = "TOKEN-8c2d-in-dotenv"

POLICY = """
version: 1
tool_call:
  rules:
    - id: secrets
      tool: [read]
      path: ["secret/**", "**/.env"]
      decision: deny
      reason: Secrets are off limits.
"""

CALLS = [
    {"name": "grep", "arguments": {"pattern": "SENTINEL|TOKEN"}},
    {"name": "grep", "arguments": {"pattern": "SENTINEL", "path": "secret"}},
    {"name": "grep", "arguments": {"pattern": "SENTINEL", "path": "src/../secret/key.txt"}},
    {"name": "grep", "arguments": {"pattern": "SENTINEL", "path": "via-link"}},
    {"name": "grep", "arguments": {"pattern": "TOKEN", "path": "app", "glob": ".env"}},
    {"name": "grep", "arguments": {"pattern": "SENTINEL", "context": 5, "glob": "**/*"}},
    {"name": "find", "arguments": {"pattern": "*"}},
    {"name": "find", "arguments": {"pattern": "*", "path": "secret"}},
    {"name": "ls", "arguments": {"path": "secret"}},
    {"name": "ls", "arguments": {}},
]


def workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "secret").mkdir(parents=True)
    (ws / "secret" / "key.txt").write_text(f"key = {SENTINEL}\n")
    (ws / "app").mkdir()
    (ws / "app" / ".env").write_text(f"API={ENV_SENTINEL}\n")
    (ws / "app" / "main.py").write_text("print('SENTINEL is not here')\n")
    (ws / "src").mkdir()
    (ws / "via-link").symlink_to(ws / "secret")
    return ws


def run_attack(root: Path, *, with_policy: bool):
    ws = workspace(root)
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": CALLS}, {"text": "done"}]))
    flags = ["--sandbox", "--mode", "json", "--tools", "grep,find,ls,read"]
    if with_policy:
        policy = root / "policy.yaml"
        policy.write_text(POLICY)
        flags += ["--policy", str(policy)]
    proc = run_pi(scripted_argv(script, ws, *flags), env=pi_env(root))
    assert proc.returncode == 0, proc.stderr
    ends = {}
    for event in json_events(proc.stdout):
        if event["type"] == "tool_execution_end":
            ends[event["toolCallId"]] = event
    assert len(ends) == len(CALLS)
    sessions = list((root / "agent").rglob("*.jsonl"))
    session_text = "".join(p.read_text() for p in sessions)
    return proc, list(ends.values()), session_text


def test_grep_find_and_ls_never_show_what_a_read_path_rule_denies(tmp_path):
    proc, ends, session = run_attack(Path(os.path.realpath(tmp_path)), with_policy=True)
    everything = proc.stdout + proc.stderr + session
    assert SENTINEL not in everything
    assert ENV_SENTINEL not in everything
    blocked = [e for e in ends if e["result"]["details"].get("blocked_by") == "policy"]
    # secret, src/../secret/key.txt, via-link (symlink), find in secret, ls secret.
    assert len(blocked) == 5
    assert all(
        "Blocked by policy rule secrets" in e["result"]["content"][0]["text"] for e in blocked
    )
    searched = [e for e in ends if not e["isError"]]
    assert searched, "the whole-workspace searches ran"
    texts = json.dumps([e["result"] for e in searched])
    assert "app/main.py" in texts  # the rest of the workspace is still searched
    assert "secret/" not in texts.replace("via-link", "")
    assert any(e["result"]["details"].get("hiddenByPolicy") for e in searched)


def test_control_without_the_policy_the_same_calls_find_the_sentinel(tmp_path):
    proc, ends, _ = run_attack(Path(os.path.realpath(tmp_path)), with_policy=False)
    assert SENTINEL in proc.stdout
    assert ENV_SENTINEL in proc.stdout
    assert not any(e["result"]["details"].get("blocked_by") for e in ends)
