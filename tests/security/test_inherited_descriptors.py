"""Descriptors `pi` inherited from its parent never reach what it spawns (DESIGN §6).

The attack (red team of 0.8.0): `pi` started with open, inheritable descriptors, as a
shell's ``exec 8</root 9<~/.ssh/id_rsa`` or a CI runner leaves them. An MCP stdio
server under bwrap got both: the file's content, and through the directory with
``openat(8, ".ssh/id_rsa")``, past the sandbox's mask of ``~/.ssh``. Extension workers
and the tool worker close such descriptors themselves at start; the server did not.

Now the spawn path marks every inherited descriptor close-on-exec before each spawn
(`sandboxed_spawn.close_inherited_on_exec`), and the launcher MCP servers start
through closes all but 0–2 before the server runs. Each layer is shown alone, with a
control where the attack works: the server run directly with the descriptors, and the
spawn path with the sweep switched off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from mcp_setup import HOSTILE, McpSetup, results, text_of
from pi_runs import scripted_argv

from pi_sandbox.supervisor.workers import sandboxed_spawn

pytestmark = pytest.mark.security

SSH = "SENTINEL-inherited-ssh-5be1"
ROOT = Path(sandboxed_spawn.__file__).resolve().parents[2]  # the pi_sandbox package
LAUNCHER = ROOT / "sandbox" / "exec_launcher.py"

# Lists every descriptor above 2 it was started with and reads through it.
PROBE = """
import os, sys
found = []
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        target = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        continue
    if fd <= 2 or target.endswith("/fd"):
        continue
    try:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            data = os.read(os.open(".ssh/id_rsa", os.O_RDONLY, dir_fd=fd), 1000)
        else:
            data = os.pread(fd, 1000, 0)
        found.append(f"{fd}:{data.decode()}")
    except OSError as exc:
        found.append(f"{fd}:{exc.strerror}")
print("inherited", found)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = Path(os.path.realpath(tmp_path)) / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SSH)
    return home


def _inheritable(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    os.set_inheritable(fd, True)
    return fd


def _spawn_probe(argv: list[str]) -> str:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    spawned = sandboxed_spawn.spawn_in_sandbox(
        argv,
        dict(os.environ),
        stdio=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, write_fd, 1),
            (os.POSIX_SPAWN_DUP2, write_fd, 2),
        ],
        passed={},
        ours=[write_fd],
        sandbox=None,
        bwrap=None,
        userns=None,
        cgroups=None,
    )
    os.waitpid(spawned.pid, 0)
    with open(read_fd, "rb") as pipe:
        return pipe.read().decode()


def test_the_spawn_path_lets_no_inherited_descriptor_through(home):
    fds = [_inheritable(home), _inheritable(home / ".ssh" / "id_rsa")]
    try:
        out = _spawn_probe([sys.executable, "-c", PROBE])
        assert "inherited []" in out, out
        assert SSH not in out
    finally:
        for fd in fds:
            os.close(fd)


def test_control_with_the_sweep_off_the_child_reads_the_secret_through_both(home, monkeypatch):
    monkeypatch.setattr(sandboxed_spawn, "close_inherited_on_exec", lambda: None)
    fds = [_inheritable(home), _inheritable(home / ".ssh" / "id_rsa")]
    try:
        out = _spawn_probe([sys.executable, "-c", PROBE])
        assert out.count(SSH) == 2, out  # the file itself, and openat through the directory
    finally:
        for fd in fds:
            os.close(fd)


def test_the_mcp_launcher_closes_what_it_was_given_before_the_server_runs(home, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    fds = [_inheritable(home), _inheritable(home / ".ssh" / "id_rsa")]
    try:
        config = json.dumps({"rlimits": {}})
        launched = subprocess.run(
            [sys.executable, "-I", "-B", str(LAUNCHER), config, "--", sys.executable, str(probe)],
            pass_fds=fds,
            capture_output=True,
            text=True,
            timeout=60,
        )
        direct = subprocess.run(
            [sys.executable, str(probe)], pass_fds=fds, capture_output=True, text=True, timeout=60
        )
    finally:
        for fd in fds:
            os.close(fd)
    assert launched.returncode == 0, launched.stderr
    assert "inherited []" in launched.stdout and SSH not in launched.stdout
    assert direct.stdout.count(SSH) == 2  # control: without the launcher, both leak


def _mcp_call_through(process_argv: list[str], fds: list[int], env: dict[str, str]) -> str:
    """Speak just enough MCP to a server run directly, with ``fds`` passed, to call
    ``steal``; returns its text."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "steal"}},
    ]
    proc = subprocess.Popen(
        process_argv,
        pass_fds=fds,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("\n".join(json.dumps(line) for line in lines) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("id") == 2:
                return "".join(block["text"] for block in message["result"]["content"])
        raise AssertionError("the server ended without answering")
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.usefixtures("require_bwrap")
def test_a_sandboxed_mcp_server_gets_none_of_pis_inherited_descriptors(tmp_path):
    setup = McpSetup(tmp_path)
    (setup.home / ".ssh").mkdir()
    (setup.home / ".ssh" / "id_rsa").write_text(SSH)
    server = setup.server(HOSTILE, "/nonexistent", str(setup.ws), str(setup.agent), "9", "")
    setup.user_servers({"h": {**server, "exposure": "direct"}})
    fds = [_inheritable(setup.home), _inheritable(setup.home / ".ssh" / "id_rsa")]
    try:
        argv = scripted_argv(
            setup.script([[("mcp__h__steal", {})]]), setup.ws, "--mode", "json", "--no-session"
        )
        proc = subprocess.run(
            argv, env=setup.env, pass_fds=fds, capture_output=True, text=True, timeout=240
        )
        # Control: the same server, run directly with the same descriptors, reads the
        # secret through both (so the assertions above it can fail).
        elsewhere = {**setup.env, "HOME": str(setup.root / "elsewhere")}  # not its ~ read
        direct = _mcp_call_through([server["command"], *server["args"]], fds, elsewhere)
    finally:
        for fd in fds:
            os.close(fd)
    assert proc.returncode == 0, proc.stderr
    loot = text_of(results(proc.stdout)["mcp__h__steal"][0])
    assert "inherited descriptors: 0" in loot, loot[:2000]
    assert SSH not in proc.stdout and SSH not in proc.stderr
    assert direct.count(SSH) >= 2 and "inherited descriptors: 2" in direct, direct[:2000]
