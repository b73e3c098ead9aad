"""A host Unix socket never reaches the sandbox through ``read_only`` (issue 13 §5).

The attack: a host "daemon" (a thread listening on a Unix socket, standing in for
``/run/docker.sock``) records whatever a client sends. A policy binds the socket,
or a directory holding it, with ``sandbox.filesystem.read_only``; a sandboxed
process connects and sends a sentinel. The profile refuses both policies, so the
daemon receives nothing. The control builds the same bind by hand (bypassing the
check) and shows that a read-only bind really lets the sandbox connect — a
read-only mount does not stop ``connect``. The explicit ``sandbox.sockets`` grant
works, and its worker's ``sandbox_profile`` audit record names it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox import build_bwrap_argv, worker_profile
from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd
from pi_sandbox.sandbox.settings import SandboxSettings

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

SENTINEL = b"SENTINEL-sock-3b9e"

CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print("refused", exc)
else:
    s.sendall(sys.argv[2].encode())
    s.close()
    print("connected")
"""


class Daemon:
    """A Unix socket server on the host that keeps every byte it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received = b""
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(30)
                while chunk := conn.recv(4096):
                    self.received += chunk

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.server.close()


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = Path(os.path.realpath(tmp_path))
    home, ws = root / "home", root / "ws"
    agent = home / ".pi" / "agent"
    for directory in (ws, agent, root / "run"):
        directory.mkdir(parents=True)
    return {"root": root, "home": home, "ws": ws, "agent": agent}


@pytest.fixture
def daemon(layout) -> Iterator[Daemon]:
    server = Daemon(layout["root"] / "run" / "docker.sock")
    yield server
    server.close()


def profile(layout, **settings):
    return worker_profile(
        "tool",
        workspace=layout["ws"],
        home=layout["home"],
        agent_dir=layout["agent"],
        settings=SandboxSettings(**settings),
    )


def connect_from_sandbox(require_bwrap: str, built, target: str) -> str:
    fd = seccomp_memfd()
    try:
        argv = build_bwrap_argv(
            built,
            ["python3", "-c", CLIENT, target, SENTINEL.decode()],
            bwrap=require_bwrap,
            seccomp_fd=fd,
        )
        done = subprocess.run(
            argv, pass_fds=(fd,), capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(condition, what: str) -> None:
    # The daemon's thread reads after the client closed: poll with a generous deadline.
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("entry", ["socket", "directory"])
def test_read_only_never_binds_a_host_socket(layout, daemon, entry):
    path = daemon.path if entry == "socket" else daemon.path.parent
    with pytest.raises(SandboxError, match=r"sandbox\.filesystem\.read_only"):
        profile(layout, read_only=(str(path),))
    assert daemon.received == b""


def test_control_a_read_only_bind_of_a_socket_lets_the_sandbox_connect(
    layout, daemon, require_bwrap
):
    # The bind read_only used to make, built by hand: the escape is real.
    built = profile(layout).model_copy(
        update={"ro_binds": (*profile(layout).ro_binds, str(daemon.path.parent))}
    )
    assert "connected" in connect_from_sandbox(require_bwrap, built, str(daemon.path))
    wait_for(lambda: SENTINEL in daemon.received, "the daemon got the sentinel")


def test_an_explicit_sockets_grant_binds_exactly_that_socket(layout, daemon, require_bwrap):
    other = Daemon(layout["root"] / "run" / "other.sock")
    try:
        built = profile(layout, sockets=(str(daemon.path),))
        assert "connected" in connect_from_sandbox(require_bwrap, built, str(daemon.path))
        wait_for(lambda: SENTINEL in daemon.received, "the granted socket got the sentinel")
        # Its neighbour stays out of reach.
        assert "refused" in connect_from_sandbox(require_bwrap, built, str(other.path))
        assert other.received == b""
    finally:
        other.close()


def test_a_worker_with_a_socket_grant_names_it_in_its_audit_record(layout, daemon):
    from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

    records: list[dict] = []
    pool = WorkerPool(
        PoolConfig(
            cwd=layout["ws"],
            agent_dir=layout["agent"],
            home=layout["home"],
            sandbox=True,
            settings=SandboxSettings(sockets=(str(daemon.path),)),
            audit=records.append,
        )
    )
    shutil.rmtree(pool._log_dir, ignore_errors=True)  # no worker starts: no logs
    pool._spec("tool", {}, role="tool", sandboxed=True)
    (record,) = [r for r in records if r["event"] == "sandbox_profile"]
    assert record["sockets"] == [str(daemon.path)]
