"""A repository's policy cannot make the user's redaction hook fail (issue 13 §3).

Real ``pi -p --mode json`` runs with the scripted model. A user extension
(``$PI_CODING_AGENT_DIR/extensions/redact.py``) redacts a sentinel from every tool
result after 0.5 s of work. The trusted project's ``.pi/policy.yaml`` says
``extensions.handler_timeout_s: 0.1``. The user's hook keeps the user's deadline
(30 s) and redacts. The control puts the same redactor in the project's own
``.pi/extensions``: the project's 0.1 s binds it, it times out — the value is
real, and under the old merge (smallest over every tier) the user's hook got it.

The same holds for the sandbox's limits: with ``--sandbox`` and a project
``address_space_mb: 512``, a redactor that maps 1 GiB of address space works in
the user's worker (the user's limits) and fails in a project extension's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from pi_runs import pi_env, run_pi, scripted_argv

pytestmark = pytest.mark.e2e

SENTINEL = "SENTINEL-tier-4c1d"

REDACTOR = f'''
"""Redacts the sentinel from tool results, after some work (0.5 s)."""
import time


def extension(pi):
    def redact(event, ctx):
        time.sleep(0.5)
        return {{"content": [
            {{**block, "text": block.get("text", "").replace({SENTINEL!r}, "[redacted]")}}
            for block in event.content
        ]}}

    pi.on("tool_result", redact)
'''


MAPPER = f'''
"""Redacts the sentinel from tool results, after mapping 1 GiB of address space."""
import mmap


def extension(pi):
    def redact(event, ctx):
        with mmap.mmap(-1, 1 << 30):  # address space only: no page is touched
            pass
        return {{"content": [
            {{**block, "text": block.get("text", "").replace({SENTINEL!r}, "[redacted]")}}
            for block in event.content
        ]}}

    pi.on("tool_result", redact)
'''

TIMEOUT_POLICY = "version: 1\nextensions:\n  handler_timeout_s: 0.1\n"
LIMIT_POLICY = "version: 1\nsandbox:\n  limits: {address_space_mb: 512}\n"


def run(
    root: Path,
    *,
    redactor_in: str,
    extension: str = REDACTOR,
    project_policy: str = TIMEOUT_POLICY,
    sandbox: bool = False,
) -> tuple[str, list[dict]]:
    ws, agent = root / "ws", root / "agent"
    (ws / ".pi").mkdir(parents=True)
    (ws / "data.txt").write_text(f"password={SENTINEL}\n")
    (ws / ".pi" / "policy.yaml").write_text(project_policy)
    where = agent / "extensions" if redactor_in == "user" else ws / ".pi" / "extensions"
    where.mkdir(parents=True)
    (where / "redact.py").write_text(extension)
    (root / "home").mkdir()
    (root / "managed.d").mkdir()
    script = root / "script.yaml"
    call = {"id": "c1", "name": "read", "arguments": {"path": "data.txt"}}
    script.write_text(yaml.safe_dump([{"tool_calls": [call]}, {"text": "done"}]))
    proc = run_pi(
        scripted_argv(
            script,
            ws,
            "--no-session",
            "--trust",
            "yes",
            "--sandbox" if sandbox else "--no-sandbox",
            "-p",
            "--mode",
            "json",
        ),
        env=pi_env(root, agent=agent, extra={"PI_MANAGED_POLICY_DIR": str(root / "managed.d")}),
        timeout=180,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
    assert len(ends) == 1, proc.stdout
    return json.dumps(ends[0]["result"]) + proc.stderr, events


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Path(os.path.realpath(tmp_path))


def test_a_projects_short_handler_timeout_does_not_break_the_users_redaction_hook(root):
    result, _ = run(root, redactor_in="user")
    assert "[redacted]" in result
    assert SENTINEL not in result
    assert "timed out" not in result


def test_control_the_projects_short_handler_timeout_binds_the_projects_own_hook(root):
    result, events = run(root, redactor_in="project")
    everything = result + json.dumps(events)
    assert "timed out after 0.1 s" in everything


@pytest.mark.usefixtures("require_bwrap")
def test_a_projects_address_space_limit_does_not_break_the_users_hook(root):
    result, _ = run(
        root, redactor_in="user", extension=MAPPER, project_policy=LIMIT_POLICY, sandbox=True
    )
    assert "[redacted]" in result
    assert SENTINEL not in result


@pytest.mark.usefixtures("require_bwrap")
def test_control_the_projects_address_space_limit_binds_the_projects_own_hook(root):
    result, events = run(
        root, redactor_in="project", extension=MAPPER, project_policy=LIMIT_POLICY, sandbox=True
    )
    everything = result + json.dumps(events)
    assert "[redacted]" not in everything
    assert "Cannot allocate memory" in everything  # the 512 MiB limit really bites
