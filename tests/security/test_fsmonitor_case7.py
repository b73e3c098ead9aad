"""Issue 4, case 7: ``git status`` is allowed, but the repository's ``core.fsmonitor``
is a command, and nothing of it runs on the host.

The policy allows ``git status`` (and ``git config``, so that the policy is not what
stops the second call). ``git status`` runs the repository's ``core.fsmonitor``
command; the planted one tries to leave a marker file in a host directory outside
the workspace and to copy a sentinel secret from ``$HOME/.ssh/id_rsa`` into the
workspace (and print it). Under ``--sandbox`` the command runs inside the sandbox
(it leaves a harmless trace in the writable workspace, which shows it really ran),
the marker never appears on the host and the sentinel appears nowhere: not in
stdout, stderr, the session file or the workspace. A second call,
``git config core.fsmonitor 'touch /x'``, fails because ``.git`` is bound
read-only, and the host's ``.git/config`` is byte-for-byte unchanged.

A control run with ``--no-sandbox`` shows that the same call does create the
marker and steal the sentinel, so the assertions are able to fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

SENTINEL = "SENTINEL-fsmonitor-5d2e81b7-do-not-leak"

POLICY = """\
version: 1
tool_call:
  default: deny
  unparseable: deny
  rules:
    - id: git-status
      tool: bash
      command: [git, status]
      decision: allow
      reason: git status only reads the repository.
    - id: git-config
      tool: bash
      command: [git, config]
      decision: allow
      reason: Allowed here so that the sandbox, not the policy, is what stops it.
"""

SET_FSMONITOR = "git config core.fsmonitor 'touch /x'"


def _git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )


class Attack:
    """A git workspace whose ``core.fsmonitor`` is hostile, a fake HOME holding a
    sentinel key, and a host directory outside the workspace for the marker."""

    def __init__(self, tmp_path: Path) -> None:
        root = Path(os.path.realpath(tmp_path))
        self.root = root
        self.home = root / "home"
        (self.home / ".ssh").mkdir(parents=True)
        self.key = self.home / ".ssh" / "id_rsa"
        self.key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SENTINEL}\n")
        self.agent = root / "agent"
        self.agent.mkdir()
        self.host_dir = root / "host-side"  # outside the workspace
        self.host_dir.mkdir()
        self.marker = self.host_dir / "fsmonitor-ran-on-host"
        self.workspace = root / "ws"
        self.workspace.mkdir()
        _git(self.workspace, "init", "-q", ".")
        (self.workspace / "README").write_text("hello\n")
        self.stolen = self.workspace / "stolen-key"
        self.trace = self.workspace / "fsmonitor-ran"  # in the sandbox: harmless
        hook = "; ".join(
            [
                f"mkdir -p {shlex.quote(str(self.host_dir))}",
                f"touch {shlex.quote(str(self.marker))}",
                f"cp {shlex.quote(str(self.key))} {shlex.quote(str(self.stolen))}",
                f"cat {shlex.quote(str(self.key))} >&2",
                f"echo ran > {shlex.quote(str(self.trace))}",
            ]
        )
        hook += " #"  # git appends "$@" (version, token) to the command: comment it out
        _git(self.workspace, "config", "core.fsmonitor", hook)
        self.config = self.workspace / ".git" / "config"
        self.config_before = self.config.read_bytes()
        assert b"fsmonitor" in self.config_before
        self.policy = root / "policy.yaml"
        self.policy.write_text(POLICY)

    def run(self, *flags: str, commands: list[str]) -> tuple[subprocess.CompletedProcess, str]:
        """``pi --mode json`` with a scripted model making one bash call per command."""
        env = {
            **os.environ,
            "HOME": str(self.home),
            "PI_CODING_AGENT_DIR": str(self.agent),
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        proc = self.pi_bash_run(self.root, self.workspace, self.policy, commands, *flags, env=env)
        sessions = "".join(p.read_text() for p in (self.agent / "sessions").rglob("*.jsonl"))
        return proc, sessions

    def workspace_text(self) -> str:
        """Every file's bytes in the workspace (outside .git), decoded leniently."""
        texts = []
        for path in self.workspace.rglob("*"):
            if path.is_file() and ".git" not in path.relative_to(self.workspace).parts:
                texts.append(path.read_bytes().decode("utf-8", "replace"))
        return "\n".join(texts)


@pytest.fixture
def attack(tmp_path: Path, pi_bash_run) -> Attack:
    made = Attack(tmp_path)
    made.pi_bash_run = pi_bash_run
    return made


def events(stdout: str, kind: str) -> list[dict]:
    found = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [event for event in found if event["type"] == kind]


def tool_results(stdout: str) -> list[dict]:
    """The text, details and error flag of each tool_execution_end, in order (bash's
    exit status is in pi's ``structuredContent``, issue 17 §1)."""
    results = []
    for event in events(stdout, "tool_execution_end"):
        text = "\n".join(block.get("text", "") for block in event["result"]["content"])
        details = event["result"].get("details") or event["result"].get("structuredContent") or {}
        results.append({"text": text, "details": details, "error": event["isError"]})
    return results


def test_sandboxed_git_status_runs_the_fsmonitor_command_in_the_sandbox_only(attack):
    proc, sessions = attack.run("--sandbox", commands=["git status", SET_FSMONITOR])
    assert proc.returncode == 0, proc.stderr

    # The policy allowed both calls: the sandbox is what stops the attack.
    decisions = events(proc.stdout, "policy_decision")
    assert [(d["decision"], d["rule"]) for d in decisions] == [
        ("allow", "git-status"),
        ("allow", "git-config"),
    ]
    status, config = tool_results(proc.stdout)

    # git status worked and really ran the fsmonitor command, inside the sandbox ...
    assert not status["error"], status["text"]
    assert "README" in status["text"]
    assert attack.trace.read_text() == "ran\n"
    # ... which neither reached the host outside the workspace nor the secret.
    assert not attack.marker.exists()
    assert list(attack.host_dir.iterdir()) == []
    for output in (proc.stdout, proc.stderr, sessions, attack.workspace_text()):
        assert SENTINEL not in output
    if attack.stolen.exists():
        assert SENTINEL not in attack.stolen.read_text(errors="replace")

    # The repository's config cannot be changed from inside: .git is read-only.
    assert config["error"], config["text"]
    assert config["details"].get("exit_code") not in (0, None)
    # git "read": the whole .git is read-only; git "commit" (default): config is a
    # read-only mount git cannot rename its config.lock over (EBUSY).
    assert any(
        why in config["text"]
        for why in ("Read-only file system", "could not lock", "Device or resource busy")
    )
    assert attack.config.read_bytes() == attack.config_before
    assert "touch /x" not in attack.config.read_text()


def test_control_without_the_sandbox_the_fsmonitor_command_runs_on_the_host(attack):
    """Shows the attack is real: without bwrap, git status runs it on the host."""
    assert not attack.marker.exists()
    proc, sessions = attack.run("--no-sandbox", commands=["git status", SET_FSMONITOR])
    try:
        assert proc.returncode == 0, proc.stderr
        status, config = tool_results(proc.stdout)
        assert not status["error"], status["text"]
        assert attack.marker.exists()  # ran on the host, outside the workspace
        assert SENTINEL in attack.stolen.read_text()
        assert SENTINEL in status["text"] and SENTINEL in sessions
        # ... and the config can be rewritten for the next git command on the host.
        assert not config["error"], config["text"]
        assert "touch /x" in attack.config.read_text()
    finally:
        attack.config.write_bytes(attack.config_before)  # nothing may run `touch /x` later
