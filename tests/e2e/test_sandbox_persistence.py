"""Nothing a sandboxed run does may leave code on the host that runs later (issue 3).

Each test drives ``pi --sandbox`` with a scripted ``bash`` call that tries to plant
something git, a later pi run or another tool would execute, then checks the host.
The attacks come from an adversarial review: renaming a protected path's parent,
a bare-repository layout, the agent directory inside the workspace. What a run
leaves in the workspace after each way of ending is in test_sandbox_no_trace.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pi_runs import bash_script, pi_env, run_pi, scripted_argv

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]


def pi(
    tmp_path: Path,
    workspace: Path,
    command: str | list[str],
    *flags: str,
    agent: Path | None = None,
    home: Path | None = None,
):
    """Run one sandboxed session whose scripted model makes one ``bash`` call per
    command given, then stops."""
    script = bash_script(
        tmp_path / "script.yaml", [command] if isinstance(command, str) else command
    )
    return run_pi(
        scripted_argv(script, workspace, "--sandbox", "--mode", "json", "--no-session", *flags),
        env=pi_env(tmp_path, agent=agent, home=home),
    )


def tool_text(stdout: str) -> str:
    texts = []
    for line in stdout.splitlines():
        event = json.loads(line)
        if event["type"] == "tool_execution_end":
            texts += [block.get("text", "") for block in event["result"]["content"]]
    return "\n".join(texts)


def warnings(stdout: str) -> list[str]:
    return [
        json.loads(line)["message"]
        for line in stdout.splitlines()
        if json.loads(line)["type"] == "pisandbox_warning"
    ]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = Path(os.path.realpath(tmp_path)) / "ws"
    path.mkdir()
    return path


def test_renaming_the_parent_of_a_protected_path_fails(tmp_path, workspace):
    (workspace / "sub" / ".git").mkdir(parents=True)
    (workspace / "sub" / ".git" / "config").write_text("[core]\n")
    (workspace / "pol").mkdir()
    policy = workspace / "pol" / "p.yaml"
    policy.write_text("version: 1\nsandbox:\n  filesystem: {deny_write: [sub/.git]}\n")
    result = pi(
        tmp_path,
        workspace,
        "mv sub sub_orig; echo mv=$?; rm -rf sub; mkdir -p sub/.git;"
        " printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> sub/.git/config; echo cfg=$?;"
        " mv pol pol_orig; echo mvpol=$?; echo 'version: 1' > pol/p.yaml; echo pol=$?;"
        " echo ok > sub/notes.txt; echo notes=$?",
        "--policy",
        str(policy),
    )
    assert result.returncode == 0, result.stderr
    out = tool_text(result.stdout)
    for attempt in ("mv", "cfg", "mvpol", "pol"):
        assert f"{attempt}=0" not in out
    assert "notes=0" in out  # the directory itself stays writable
    assert (workspace / "sub" / ".git" / "config").read_text() == "[core]\n"
    assert "deny_write" in policy.read_text()
    assert not (workspace / "sub_orig").exists() and not (workspace / "pol_orig").exists()


def test_the_root_cannot_become_a_bare_repository_and_new_repositories_are_reported(
    tmp_path, workspace
):
    result = pi(
        tmp_path,
        workspace,
        "mkdir -p objects refs/heads; echo 'ref: refs/heads/main' > HEAD; echo head=$?;"
        " mkdir -p sub/objects sub/refs; echo 'ref: refs/heads/main' > sub/HEAD;"
        " mkdir -p lib/.git",
    )
    assert result.returncode == 0, result.stderr
    assert not (workspace / "HEAD").exists()  # quarantined after the call
    assert not (workspace / "lib" / ".git").exists()
    reported = "\n".join(warnings(result.stdout))
    assert f"created {workspace / 'HEAD'}" in reported
    assert f"created {workspace / 'lib' / '.git'}" in reported
    assert f"{workspace / 'sub'} a git repository" in reported
    git = subprocess.run(
        ["git", "status"], cwd=workspace, capture_output=True, text=True, check=False
    )
    assert git.returncode != 0  # not a repository: nothing of the tool's runs there


def test_an_agent_directory_inside_the_workspace_cannot_be_planted(tmp_path, workspace):
    agent = workspace / "state"
    (agent / "sessions").mkdir(parents=True)
    result = pi(
        tmp_path,
        workspace,
        "mkdir -p state/extensions; echo 'x = 1' > state/extensions/persist.py; echo ext=$?",
        agent=agent,
    )
    assert result.returncode == 0, result.stderr
    assert "ext=0" not in tool_text(result.stdout)
    assert not (agent / "extensions").exists()


def test_an_audit_log_inside_the_workspace_is_neither_readable_nor_writable(tmp_path, workspace):
    log = workspace / "audit.jsonl"
    result = pi(
        tmp_path,
        workspace,
        "cat audit.jsonl; echo read=$?; : > audit.jsonl; echo trunc=$?;"
        ' echo \'{"event": "egress", "decision": "allow"}\' >> audit.jsonl; echo forge=$?;'
        " mv audit.jsonl moved.jsonl; echo mv=$?",
        "--audit-log",
        str(log),
    )
    assert result.returncode == 0, result.stderr
    out = tool_text(result.stdout)
    for attempt in ("trunc", "forge", "mv"):
        assert f"{attempt}=0" not in out
    records = [json.loads(line) for line in log.read_text().splitlines()]
    events = {r["event"] for r in records}
    assert events == {"policy", "trust", "sandbox_profile", "tool_call", "tool_call_outcome", "run"}
    assert "egress" not in events  # nothing forged
    assert '"sandbox_profile"' not in out  # not readable inside either


def test_a_workspace_containing_the_temporary_directory_is_refused(tmp_path):
    import tempfile

    tmp = Path(tempfile.gettempdir())
    home = Path(tempfile.mkdtemp(prefix="pi-home-", dir="/var/tmp"))
    try:
        result = pi(tmp_path, tmp, "true", home=home)
    finally:
        home.rmdir()
    assert result.returncode == 2
    assert "contains your temporary directory" in result.stderr


def test_no_setuid_or_setgid_file_can_be_planted(tmp_path, workspace):
    # As host root, a setuid-root copy of a shell left in the workspace would give
    # every local user root after the run (nosuid only covers the sandbox's mount).
    result = pi(
        tmp_path,
        workspace,
        "cp /usr/bin/env ./suenv; chmod 4755 suenv; echo chmod=$?; chmod g+s suenv;"
        " echo chmodg=$?; mkdir -m 2755 gdir; echo mkdir=$?;"
        " python3 -c \"import os; os.open('x', os.O_CREAT | os.O_WRONLY, 0o4755)\"; echo open=$?;"
        " install -m 4755 /usr/bin/env inst; echo install=$?; chmod 0755 suenv; echo plain=$?",
    )
    assert result.returncode == 0, result.stderr
    out = tool_text(result.stdout)
    for attempt in ("chmod", "chmodg", "mkdir", "open", "install"):
        assert f"{attempt}=0" not in out
    assert "plain=0" in out  # ordinary modes still work
    for path in workspace.rglob("*"):
        assert not path.lstat().st_mode & 0o6000, path


def test_only_unix_inet_inet6_and_netlink_sockets_can_be_created(tmp_path, workspace):
    result = pi(
        tmp_path,
        workspace,
        'python3 -c "import socket\nfor family in (1, 2, 10, 16, 17, 40, 38, 45, 99):\n'
        "    kind = socket.SOCK_DGRAM if family == 16 else socket.SOCK_STREAM\n"
        "    try:\n        socket.socket(family, kind).close(); print(family, 'ok')\n"
        '    except OSError as exc:\n        print(family, exc.errno)"',
    )
    assert result.returncode == 0, result.stderr
    lines = dict(
        line.split() for line in tool_text(result.stdout).splitlines() if line[:1].isdigit()
    )
    assert {lines[f] for f in ("1", "2", "10", "16")} == {"ok"}
    assert {lines[f] for f in ("17", "40", "38", "45", "99")} == {"97"}  # EAFNOSUPPORT


def test_a_deny_read_file_stays_hidden_after_renaming_its_parent_and_a_respawn(tmp_path, workspace):
    (workspace / "config").mkdir()
    (workspace / "config" / "prod.secret").write_text("SENTINEL-DENYREAD-7731\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nsandbox:\n  filesystem: {deny_read: [config/prod.secret]}\n")
    result = pi(
        tmp_path,
        workspace,
        [
            "mv config config2; echo mv=$?; kill -9 $PPID",
            "cat config2/prod.secret config/prod.secret",
        ],
        "--policy",
        str(policy),
    )
    assert "SENTINEL-DENYREAD-7731" not in result.stdout + result.stderr
    assert "mv=0" not in tool_text(result.stdout)  # the parent is pinned
    assert sorted(p.name for p in workspace.iterdir()) == ["config"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root-run sandbox owns the host's /dev nodes")
def test_a_mode_change_to_a_host_device_node_is_put_back_after_the_call(tmp_path, workspace):
    before = os.stat("/dev/full").st_mode
    result = pi(
        tmp_path,
        workspace,
        ["chmod 0600 /dev/full; echo chmod=$?", "stat -c %a /dev/full"],
    )
    assert os.stat("/dev/full").st_mode == before
    assert result.returncode == 0, result.stderr
    assert "pi put it back" in "\n".join(warnings(result.stdout))
    assert tool_text(result.stdout).splitlines()[-1] == "666"  # repaired before the next call
