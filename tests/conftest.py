"""Shared fixtures: fixture extension paths and a started, unsandboxed worker pool."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

# pi reads piped stdin and prepends it to the first prompt (pi docs cli.md), as pi does:
# a pi process a test starts must not inherit a pipe of the test runner's that never
# closes (it would wait for its end).
if not os.isatty(0):
    _devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(_devnull, 0)
    os.close(_devnull)

# A suite started in the background by a non-interactive shell (`( pytest … & )`)
# inherits SIGINT ignored, and so would every pi a test starts. pi keeps an inherited
# "ignore" on purpose (a background job is not for Ctrl-C; tests/unit/test_run_stop.py),
# so the Ctrl-C tests would see pi not stopping. The test run takes Python's own
# handler back: its children then start from the default action.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

FIXTURES = Path(__file__).parent / "fixtures"
EXTENSIONS = FIXTURES / "extensions"
REPO_ROOT = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def _fresh_policy_caches():
    """Forget what the policy gate keeps between calls (issue 20: shell parses, the
    option reading of commands) before each test: a control test that switches a
    protection of the grammar off must see its own result, not one an earlier test
    kept."""
    import sys

    grammar = sys.modules.get("pi_sandbox.policies._shell_grammar")
    if grammar is not None:
        grammar._cache.clear()
    gate = sys.modules.get("pi_sandbox.policies._tool_gate")
    if gate is not None:
        gate._command_arguments.cache_clear()


@pytest.fixture
def ext():
    """``ext("blocker")`` → path of ``tests/fixtures/extensions/blocker.py`` (or a package dir)."""

    def path(name: str) -> Path:
        candidate = EXTENSIONS / f"{name}.py"
        return candidate if candidate.exists() else EXTENSIONS / name

    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def open_pool(tmp_path: Path, workspace: Path):
    """An async context manager factory that starts a WorkerPool and always reaps it;
    keyword arguments past ``origin`` are further `PoolConfig` fields."""
    from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, PoolConfig, WorkerPool

    @asynccontextmanager
    async def opener(
        extensions=(), *, sandbox=False, hook_timeout_s=10.0, origin="cli", **config_fields
    ):
        config = PoolConfig(
            cwd=workspace,
            agent_dir=tmp_path / "agent",
            home=tmp_path / "home",
            sandbox=sandbox,
            hook_timeout_s=hook_timeout_s,
            **config_fields,
        )
        pool = WorkerPool(config)
        async with trio.open_nursery() as nursery:
            try:
                await pool.start(nursery, [ExtensionSource(Path(p), origin) for p in extensions])
                yield pool
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()

    return opener


@pytest.fixture(scope="session")
def require_bwrap() -> str:
    """The bwrap binary, or skip with the reason it cannot create namespaces here."""
    from pi_sandbox.errors import SandboxUnavailableError
    from pi_sandbox.sandbox import find_bwrap, probe_bwrap

    try:
        bwrap = find_bwrap()
        probe_bwrap(bwrap)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap cannot create namespaces here: {exc}")
    return bwrap


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts (for tests
    that show a sandbox cannot reach the host's loopback)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def wait_for_connection(self, timeout: float = 60) -> bool:
        """True once a connection was accepted: one made just before a run ended may
        still wait in the backlog for the accepting thread (generous, issue 13 §7)."""
        deadline = time.monotonic() + timeout
        while self.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.connections > 0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener():
    """A started `Listener`, closed after the test."""
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def pi_bash_run():
    """``run(root, workspace, policy, commands, *flags, env=...)``: ``pi --mode json``
    over ``workspace`` with the scripted model making one ``bash`` call per command
    (the script is written to ``root/script.yaml``), under ``--policy policy``."""
    import subprocess
    import sys

    import yaml

    def run(
        root: Path,
        workspace: Path,
        policy: Path,
        commands: list[str],
        *flags: str,
        env: dict[str, str],
    ) -> subprocess.CompletedProcess[str]:
        turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": c}}]} for c in commands]
        script = root / "script.yaml"
        script.write_text(yaml.safe_dump([*turns, {"text": "done"}]))
        argv = [sys.executable, "-m", "pi_sandbox.cli", *flags, "--mode", "json"]
        argv += ["--model", "scripted", "--script", str(script), "--policy", str(policy)]
        argv += ["-C", str(workspace), "go"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)

    return run
