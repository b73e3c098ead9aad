"""worker_profile + build_bwrap_argv under real bubblewrap (DESIGN §6).

Every sandboxed run gets a parent environment holding a sentinel and a fake HOME
whose credentials hold the same sentinel; the sentinel must never come back out.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pi_sandbox.errors import SandboxUnavailableError
from pi_sandbox.sandbox import build_bwrap_argv, find_bwrap, probe_bwrap, worker_profile
from pi_sandbox.sandbox.persistence_guard import PersistenceGuard
from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd
from pi_sandbox.sandbox.settings import SandboxSettings

SENTINEL = "PI-SANDBOX-SENTINEL-5d1f0c7e"

# Runs inside the sandbox: performs the operations given as JSON in argv[1] and
# prints one JSON result per operation. Only the stdlib, so it starts fast.
PROBE = r"""
import errno, json, os, socket, sys

def run(op):
    kind, arg = op
    try:
        if kind == "read":
            with open(arg) as f:
                return {"ok": True, "data": f.read()}
        if kind == "listdir":
            return {"ok": True, "data": sorted(os.listdir(arg))}
        if kind == "write":
            with open(arg, "a") as f:
                f.write("written by the sandbox\n")
            return {"ok": True}
        if kind == "connect":
            with socket.create_connection(("127.0.0.1", arg), timeout=5):
                return {"ok": True}
        if kind == "pids":
            pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
            return {"ok": True, "data": pids}
        if kind == "env":
            return {"ok": True, "data": dict(os.environ)}
    except OSError as exc:
        return {"ok": False, "errno": errno.errorcode.get(exc.errno, str(exc))}
    raise SystemExit(f"unknown op {kind}")

print(json.dumps([run(op) for op in json.loads(sys.argv[1])]))
"""


@pytest.fixture(scope="module")
def bwrap() -> str:
    try:
        path = find_bwrap()
        probe_bwrap(path)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot create a sandbox on this host: {exc}")
    return path


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """A fake HOME with credentials, agent state and a project with a .git."""
    root = Path(os.path.realpath(tmp_path))
    home = root / "home"
    agent_dir = home / ".pi" / "agent"
    project = home / "-my project"  # a space and a leading dash, through real bwrap
    for directory in (home / ".ssh", home / ".aws", agent_dir / "sessions", project / ".git/hooks"):
        directory.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{SENTINEL}\n")
    (home / ".aws" / "credentials").write_text(f"aws_secret_access_key = {SENTINEL}\n")
    (home / ".netrc").write_text(f"machine example.com password {SENTINEL}\n")
    (agent_dir / "auth.json").write_text(json.dumps({"anthropic": SENTINEL}))
    (agent_dir / "sessions" / "s1.jsonl").write_text(SENTINEL)
    (project / ".git" / "config").write_text("[core]\n")
    (project / "README").write_text("hello\n")
    return {"root": root, "home": home, "agent_dir": agent_dir, "project": project}


def run_in_sandbox(bwrap: str, profile, ops: list) -> list[dict]:
    seccomp_fd = seccomp_memfd()
    argv = build_bwrap_argv(
        profile, ["python3", "-c", PROBE, json.dumps(ops)], bwrap=bwrap, seccomp_fd=seccomp_fd
    )
    try:
        result = _run(argv, seccomp_fd)
    finally:
        os.close(seccomp_fd)
    assert SENTINEL not in result.stdout
    assert SENTINEL not in result.stderr
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _run(argv: list[str], seccomp_fd: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        pass_fds=(seccomp_fd,),
        env={**os.environ, "PI_SANDBOX_TEST_SECRET": SENTINEL},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_profile(role: str, host: dict[str, Path], workspace: Path):
    return worker_profile(role, workspace=workspace, home=host["home"], agent_dir=host["agent_dir"])


@pytest.mark.parametrize("role", ["tool", "extension"])
@pytest.mark.parametrize("workspace_is_home", [True, False], ids=["workspace=home", "nested"])
def test_credentials_and_agent_state_are_unreadable(bwrap, host, role, workspace_is_home):
    home, agent_dir = host["home"], host["agent_dir"]
    workspace = home if workspace_is_home else host["project"]
    profile = make_profile(role, host, workspace)

    results = run_in_sandbox(
        bwrap,
        profile,
        [
            ("read", str(home / ".ssh/id_rsa")),
            ("listdir", str(home / ".ssh")),
            ("read", str(home / ".aws/credentials")),
            ("read", str(home / ".netrc")),
            ("read", str(agent_dir / "auth.json")),
            ("listdir", str(agent_dir / "sessions")),
            ("read", str(agent_dir / "sessions/s1.jsonl")),
            ("write", str(home / ".ssh/authorized_keys")),
        ],
    )

    *reads, plant = results
    for result in reads:
        # Masked directories are empty, masked files read as /dev/null, and what
        # is not bound does not exist.
        assert not result["ok"] or not result["data"], result
    # A writable tmpfs over a denied directory would be a place to plant files.
    assert plant["ok"] is False
    assert not (home / ".ssh/authorized_keys").exists()


def test_the_workspace_stays_readable(bwrap, host):
    profile = make_profile("extension", host, host["project"])

    [readme] = run_in_sandbox(bwrap, profile, [("read", str(host["project"] / "README"))])

    assert readme == {"ok": True, "data": "hello\n"}


def test_only_sandbox_processes_are_visible(bwrap, host):
    profile = make_profile("tool", host, host["project"])

    [pids] = run_in_sandbox(bwrap, profile, [("pids", None)])

    # A fresh pid namespace: bwrap's init as pid 1 and the probe; nothing of the host.
    assert pids["ok"]
    assert pids["data"][0] == 1
    assert len(pids["data"]) <= 3


def test_only_allowlisted_environment_crosses(bwrap, host):
    profile = make_profile("tool", host, host["project"])

    [env] = run_in_sandbox(bwrap, profile, [("env", None)])

    # bwrap itself sets PWD when it changes into --chdir.
    assert env["data"] == {**dict(profile.env), "PWD": profile.cwd}
    assert "PI_SANDBOX_TEST_SECRET" not in env["data"]


def test_writes_outside_the_workspace_fail_and_never_reach_the_host(bwrap, host):
    root = host["root"]
    profile = make_profile("tool", host, host["project"])
    read_only = [
        Path("/pi-sandbox-escape"),  # the root bwrap built, remounted read-only
        Path(os.path.expanduser("~")) / "pi-sandbox-escape",  # the real HOME
        Path("/usr/pi-sandbox-escape"),
        Path("/etc/pi-sandbox-escape"),
        Path(sys.prefix) / "pi-sandbox-escape",
        Path(os.path.realpath(sys.base_prefix)) / "pi-sandbox-escape",
    ]
    # Under /tmp a write lands in the sandbox's private tmpfs, never on the host.
    private_tmp = [root / "scratch.txt", host["home"] / "escape.txt"]

    results = run_in_sandbox(
        bwrap, profile, [("write", str(path)) for path in read_only + private_tmp]
    )

    for path, result in zip(read_only, results, strict=False):
        assert result["ok"] is False, path
        assert result["errno"] in {"EROFS", "EACCES", "ENOENT"}, (path, result)
    for path in read_only + private_tmp:
        assert not path.exists(), path


def test_tool_worker_writes_the_workspace(bwrap, host):
    target = host["project"] / "out.txt"
    profile = make_profile("tool", host, host["project"])

    [result] = run_in_sandbox(bwrap, profile, [("write", str(target))])

    assert result == {"ok": True}
    assert target.read_text() == "written by the sandbox\n"


def test_extension_worker_cannot_write_the_workspace(bwrap, host):
    target = host["project"] / "out.txt"
    profile = make_profile("extension", host, host["project"])

    [result] = run_in_sandbox(bwrap, profile, [("write", str(target))])

    assert result == {"ok": False, "errno": "EROFS"}
    assert not target.exists()


def test_tool_worker_cannot_touch_git_hooks_config_or_pi(bwrap, host):
    project = host["project"]
    (project / ".pi").mkdir()
    profile = make_profile("tool", host, project)
    targets = [project / ".git/hooks/pre-commit", project / ".git/config", project / ".pi/x"]

    results = run_in_sandbox(bwrap, profile, [("write", str(path)) for path in targets])

    assert results == [{"ok": False, "errno": "EROFS"}] * 3
    assert not (project / ".git/hooks/pre-commit").exists()
    assert (project / ".git/config").read_text() == "[core]\n"
    assert not (project / ".pi/x").exists()


def test_network_is_unreachable_even_on_loopback(bwrap, host):
    profile = make_profile("tool", host, host["project"])
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        [result] = run_in_sandbox(bwrap, profile, [("connect", port)])

        assert result["ok"] is False
        assert result["errno"] in {"ENETUNREACH", "ECONNREFUSED"}
        # The sandbox has exited: a connection that got through would be queued.
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_find_bwrap_returns_an_executable(bwrap):
    assert os.access(bwrap, os.X_OK)


def test_probe_failure_names_the_cause_and_runs_once(tmp_path: Path):
    calls = tmp_path / "calls"
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo call >> '{calls}'\n"
        "echo 'bwrap: No permissions to creating new namespace, likely because the kernel"
        " does not allow non-privileged user namespaces.' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)

    for _ in range(2):
        with pytest.raises(SandboxUnavailableError) as info:
            probe_bwrap(str(fake))
        message = str(info.value)
        assert "No permissions to creating new namespace" in message
        assert "kernel.unprivileged_userns_clone" in message
        assert "apparmor_restrict_unprivileged_userns" in message

    assert calls.read_text() == "call\n"


def test_probe_of_a_missing_binary_is_unavailable(tmp_path: Path):
    with pytest.raises(SandboxUnavailableError, match="cannot run"):
        probe_bwrap(str(tmp_path / "no-such-bwrap"))


def test_probe_of_a_working_bwrap_passes_every_time(bwrap):
    probe_bwrap(bwrap)
    probe_bwrap(bwrap)


@pytest.mark.parametrize("git_mode", ["read", "commit"])
def test_sandboxed_bash_cannot_replace_or_redirect_the_workspaces_git_directory(tmp_path, git_mode):
    """The .git swap attack: rename .git away and plant a new one with a hook and
    fsmonitor, or point commondir elsewhere. With git "commit" the directory is
    writable, so a new commondir can be written inside; the persistence guard
    quarantines it right after the call (issue 14 §1, §2)."""
    try:
        bwrap = find_bwrap()
        probe_bwrap(bwrap)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap cannot run here: {exc}")
    workspace = tmp_path / "ws"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    profile = worker_profile(
        "tool",
        workspace=workspace,
        home=tmp_path / "home",
        agent_dir=tmp_path / "agent",
        settings=SandboxSettings(git=git_mode),
    )
    guard = PersistenceGuard(profile.rw_binds, quarantine_dir=str(tmp_path / "q"))
    attack = (
        "mv .git .git-orig; echo mv=$?; "
        "echo '[core]\\n fsmonitor = touch PWNED' >> .git/config; echo config=$?; "
        "echo x > .git/hooks/pre-commit; echo hook=$?; "
        "rm -rf .git; echo rm=$?; "
        "echo x > .git/commondir; echo commondir=$?; true"
    )
    seccomp_fd = seccomp_memfd()
    argv = build_bwrap_argv(profile, ["/bin/sh", "-c", attack], bwrap=bwrap, seccomp_fd=seccomp_fd)
    try:
        out = _run(argv, seccomp_fd)
    finally:
        os.close(seccomp_fd)
    findings = guard.check()
    for attempt in ("mv", "config", "hook", "rm"):
        assert f"{attempt}=0" not in out.stdout
    if git_mode == "read":
        assert "commondir=0" not in out.stdout
        assert findings == []
        assert (workspace / ".git" / "HEAD").exists()
    # (with "commit", rm -rf deletes what is not protected: history is not code)
    else:
        assert [f.path for f in findings] == [str(workspace / ".git" / "commondir")]
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    assert not (workspace / ".git" / "commondir").exists()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / ".git-orig").exists()
