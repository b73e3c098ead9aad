"""Files that a repository's own ``.git/config`` points git at stay read-only
under ``--sandbox``.

The repository sets ``core.hooksPath = .githooks`` and ``include.path =
../.gitconfig``: both name files in the (writable) workspace, outside ``.git``.
A sandboxed bash call that plants ``.githooks/pre-commit`` would run on the
user's next ``git commit``; one that appends ``[core] fsmonitor = …`` to
``.gitconfig`` would run on the next ``git status``, on the host. Under
``--sandbox`` both writes fail and the host files are unchanged (while an
ordinary file in the workspace can still be written); the control without the
sandbox shows the same calls succeed and that host git then runs the planted
commands.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

POLICY = """\
version: 1
tool_call:
  default: allow
  unparseable: allow
"""

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
GITCONFIG = "[user]\n\tname = Someone\n\temail = someone@example.com\n"


def _git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=workspace, capture_output=True, text=True, check=True, env=GIT_ENV
    )


class Repo:
    """A git workspace whose config names ``.githooks`` and ``.gitconfig``."""

    def __init__(self, tmp_path: Path) -> None:
        root = Path(os.path.realpath(tmp_path))
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.agent = root / "agent"
        self.agent.mkdir()
        self.host_dir = root / "host-side"  # outside the workspace
        self.host_dir.mkdir()
        self.hook_marker = self.host_dir / "pre-commit-ran"
        self.fsmonitor_marker = self.host_dir / "fsmonitor-ran"
        self.workspace = root / "ws"
        self.workspace.mkdir()
        _git(self.workspace, "init", "-q", ".")
        _git(self.workspace, "config", "core.hooksPath", ".githooks")
        _git(self.workspace, "config", "include.path", "../.gitconfig")
        (self.workspace / "README").write_text("hello\n")
        self.hooks = self.workspace / ".githooks"  # missing: the persistence guard watches it
        self.pre_commit = self.hooks / "pre-commit"
        self.gitconfig = self.workspace / ".gitconfig"
        self.gitconfig.write_text(GITCONFIG)
        self.ordinary = self.workspace / "ordinary.txt"
        self.config = self.workspace / ".git" / "config"
        self.config_before = self.config.read_bytes()
        self.policy = root / "policy.yaml"
        self.policy.write_text(POLICY)

    @property
    def commands(self) -> list[str]:
        plant_hook = (
            "mkdir -p .githooks && "
            f"printf '#!/bin/sh\\ntouch {self.hook_marker}\\n' > .githooks/pre-commit && "
            "chmod +x .githooks/pre-commit"
        )
        # git appends arguments to the fsmonitor command: comment them out.
        plant_fsmonitor = (
            f"printf '[core]\\n\\tfsmonitor = \"touch {self.fsmonitor_marker} #\"\\n' >> .gitconfig"
        )
        return [plant_hook, plant_fsmonitor, "echo written > ordinary.txt"]

    def run(self, *flags: str) -> subprocess.CompletedProcess[str]:
        env = {**GIT_ENV, "HOME": str(self.home), "PI_CODING_AGENT_DIR": str(self.agent)}
        return self.pi_bash_run(
            self.root, self.workspace, self.policy, self.commands, *flags, env=env
        )

    def host_git_status_and_commit(self) -> None:
        """What the user does next on the host: ``git status``, ``git commit``."""
        subprocess.run(["git", "status"], cwd=self.workspace, env=GIT_ENV, capture_output=True)
        subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", "next"],
            cwd=self.workspace,
            env=GIT_ENV,
            capture_output=True,
        )


@pytest.fixture
def repo(tmp_path: Path, pi_bash_run) -> Repo:
    made = Repo(tmp_path)
    made.pi_bash_run = pi_bash_run
    return made


def tool_results(stdout: str) -> list[dict]:
    found = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    results = []
    for event in found:
        if event["type"] == "tool_execution_end":
            text = "\n".join(block.get("text", "") for block in event["result"]["content"])
            results.append({"text": text, "error": event["isError"]})
    return results


def test_sandboxed_tools_cannot_write_what_git_config_points_at(repo):
    proc = repo.run("--sandbox")
    assert proc.returncode == 0, proc.stderr
    _, include, ordinary = tool_results(proc.stdout)

    # The missing hooks directory is not mounted (no entry on the host, issue 14
    # §1): creating it succeeds inside, and it is quarantined and reported as soon
    # as the call ends, before any host git can run.
    quarantined = [
        json.loads(line)["quarantine"]
        for line in proc.stdout.splitlines()
        if '"quarantine"' in line and json.loads(line)["type"] == "pisandbox_warning"
    ]
    # (the inotify-driven check may take the directory before the hook is written
    # into it: then writing the hook fails inside; either way it is quarantined)
    assert {q["path"] for q in quarantined} == {str(repo.hooks)}
    assert all(Path(q["moved_to"]).is_dir() for q in quarantined)
    assert include["error"], include["text"]
    assert "Read-only file system" in include["text"]
    # The workspace itself stayed writable: the sandbox, not a broken run, stopped them.
    assert not ordinary["error"], ordinary["text"]
    assert repo.ordinary.read_text() == "written\n"

    # Nothing changed on the host: no hook (quarantined), the
    # included file and the repository config byte-for-byte as before.
    assert not repo.pre_commit.exists()
    assert not repo.hooks.exists() or list(repo.hooks.iterdir()) == []
    assert repo.gitconfig.read_text() == GITCONFIG
    assert repo.config.read_bytes() == repo.config_before

    repo.host_git_status_and_commit()
    assert not repo.hook_marker.exists()
    assert not repo.fsmonitor_marker.exists()
    assert list(repo.host_dir.iterdir()) == []


def test_control_without_the_sandbox_the_writes_succeed_and_run_on_the_host(repo):
    """Shows the attack is real: without bwrap, host git runs what was planted."""
    proc = repo.run("--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    hook, include, ordinary = tool_results(proc.stdout)
    assert not hook["error"], hook["text"]
    assert not include["error"], include["text"]
    assert not ordinary["error"], ordinary["text"]
    assert repo.pre_commit.exists()
    assert "fsmonitor" in repo.gitconfig.read_text()

    repo.host_git_status_and_commit()
    assert repo.fsmonitor_marker.exists()
    assert repo.hook_marker.exists()
