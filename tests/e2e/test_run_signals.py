"""Stopping a sandboxed run with a signal leaves nothing behind (issue 14 §3).

Each test starts ``pi --sandbox -p`` with three sandboxed extensions and a scripted
``bash`` call of ``sleep 300``, waits until that ``sleep`` is visible in /proc,
signals the supervisor, and then checks: the exit status; no process left whose
command line or working directory names this test's workspace (the workspace's
name carries a per-test marker; every sandboxed process runs in it); nothing new
in the workspace; nothing left in the run's temporary directory; a session file
whose every line is JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("require_bwrap")]

DEADLINE_S = 60.0


def wait_for(condition, what: str, timeout: float = DEADLINE_S, detail=None):
    """Poll ``condition`` until it returns something truthy; fail naming ``what``
    (and ``detail()``, if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            more = f": {detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}{more}")
        time.sleep(0.05)


def marked_processes(marker: str) -> dict[int, str]:
    """pid → command line of every process whose command line or working directory
    contains ``marker`` (zombies and vanished processes are skipped)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            cwd = ""
        if marker in cmdline or marker in cwd:
            found[int(entry)] = cmdline.strip()
    return found


def new_entries(workspace: Path, before: set[str]) -> list[str]:
    """Names in ``workspace`` that were not there before the run: a run leaves
    nothing in the user's tree, not even empty directories (issue 14 §1)."""
    return sorted(set(os.listdir(workspace)) - before)


EXTENSION = """
def extension(pi):
    def on_call(event, ctx):
        return None
    pi.on("tool_call", on_call)
"""

# Blocks its session_shutdown handler until the test creates RELEASE beside it (the
# package directory is bound into its sandbox, so the file shows up there): the
# tear-down then provably runs while the test sends its next signal.
SLOW_SHUTDOWN = """
import os, time
HERE = os.path.dirname(os.path.abspath(__file__))

def extension(pi):
    def on_shutdown(event, ctx):
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not os.path.exists(os.path.join(HERE, "RELEASE")):
            time.sleep(0.05)
    pi.on("session_shutdown", on_shutdown)
"""


class Run:
    """One ``pi --sandbox -p`` run in a marked workspace, started in the background."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        slow_shutdown: bool = False,
        hanging_factory: bool = False,
        mode: tuple[str, ...] = ("--sandbox", "-p"),
    ) -> None:
        self.marker = f"sig{uuid.uuid4().hex[:12]}"
        self.workspace = tmp_path / f"ws-{self.marker}"
        self.workspace.mkdir()
        (self.workspace / "README.md").write_text("a project\n")
        self.before = set(os.listdir(self.workspace))
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.agent = tmp_path / "agent"
        home = tmp_path / "home"
        home.mkdir()
        extensions = []
        for n in range(3):
            path = tmp_path / f"ext{n}.py"
            path.write_text(EXTENSION)
            extensions.append(path)
        if slow_shutdown:
            package = tmp_path / "slow_shutdown"
            package.mkdir()
            (package / "__init__.py").write_text(SLOW_SHUTDOWN)
            self.release = package / "RELEASE"
            extensions.append(package)
        if hanging_factory:
            path = tmp_path / "hanging_factory.py"
            path.write_text("import time\n\ndef extension(pi):\n    time.sleep(300)\n")
            extensions.append(path)
        script = tmp_path / "script.yaml"
        script.write_text(
            yaml.safe_dump(
                [
                    {
                        "tool_calls": [
                            {
                                "id": "call_sleep",
                                "name": "bash",
                                "arguments": {"command": "sleep 300", "timeout": 600},
                            }
                        ]
                    },
                    {"text": "done"},
                ]
            )
        )
        self.stderr_path = tmp_path / "stderr.txt"
        argv = [sys.executable, "-m", "pi_sandbox.cli", *mode]
        argv += ["--model", "scripted", "--script", str(script), "-C", str(self.workspace)]
        for path in extensions:
            argv += ["-e", str(path)]
        env = {
            **os.environ,
            "HOME": str(home),
            "PI_CODING_AGENT_DIR": str(self.agent),
            "TMPDIR": str(self.tmpdir),
        }
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [*argv, "go"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def state(self) -> str:
        """For failure messages: the exit status so far and stderr."""
        return f"exit status {self.process.poll()}; stderr:\n{self.stderr()}"

    def wait_for_sleep(self) -> dict[int, str]:
        """Wait until the bash call's ``sleep 300`` runs; returns the marked processes."""

        def sleeping():
            if self.process.poll() is not None:
                pytest.fail(f"pi ended early ({self.process.returncode}): {self.stderr()}")
            found = marked_processes(self.marker)
            return found if any(c == "sleep 300" for c in found.values()) else None

        return wait_for(sleeping, "the sandboxed `sleep 300` to start")

    def sigterm_during_the_call(self) -> None:
        """Once the bash call runs, send SIGTERM and wait until pi acknowledges it:
        the tear-down has begun."""
        self.wait_for_sleep()
        self.process.send_signal(signal.SIGTERM)
        wait_for(
            lambda: "SIGTERM received" in self.stderr(),
            "pi to acknowledge SIGTERM",
            detail=self.state,
        )

    def wait(self) -> int:
        try:
            self.stdout, _ = self.process.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            pytest.fail(f"pi did not end within {DEADLINE_S:g} s: {self.stderr()}")
        return self.process.returncode

    def assert_left_nothing(self) -> None:
        survivors = wait_for(
            lambda: not marked_processes(self.marker) or None,
            "every process of the run to be gone",
            timeout=10,
        )
        assert survivors, marked_processes(self.marker)
        assert new_entries(self.workspace, self.before) == []
        assert os.listdir(self.tmpdir) == []  # worker logs, sockets: all removed
        sessions = list((self.agent / "sessions").rglob("*.jsonl"))
        assert len(sessions) == 1
        lines = sessions[0].read_text().splitlines()
        assert lines and all(isinstance(json.loads(line), dict) for line in lines)
        assert json.loads(lines[0])["type"] == "session"


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"]
)
def test_a_stop_signal_during_a_long_bash_call_kills_every_sandboxed_process_and_cleans_up(
    tmp_path: Path, signum: int, status: int
):
    run = Run(tmp_path)
    running = run.wait_for_sleep()
    # The supervisor, and for the tool worker and each of the three extensions
    # bwrap, its sandbox init and the worker: all are counted before the signal.
    assert len(running) >= 1 + 4 * 3 + 1, running
    run.process.send_signal(signum)
    assert run.wait() == status, run.stderr()
    assert f"{signal.Signals(signum).name} received: stopping" in run.stderr()
    assert "handshake failed" not in run.stderr()
    run.assert_left_nothing()


def test_sigterm_in_json_mode_ends_the_event_stream_with_an_error_event_and_exits_143(
    tmp_path: Path,
):
    run = Run(tmp_path, mode=("--sandbox", "--mode", "json"))
    run.wait_for_sleep()
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr()
    events = [json.loads(line) for line in run.stdout.decode().splitlines()]
    assert {"type": "pisandbox_error", "error": "stopped by SIGTERM (exit 143)"} in events
    run.assert_left_nothing()


def test_sigterm_without_the_sandbox_still_kills_the_bash_command_in_its_own_session(
    tmp_path: Path,
):
    """Unsandboxed, a bash command runs in a session of its own, outside its worker's
    process group: the worker must take it down when it is stopped."""
    run = Run(tmp_path, mode=("-p",))
    run.wait_for_sleep()
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr()
    run.assert_left_nothing()


def test_sighup_during_the_tear_down_after_sigterm_is_ignored_and_the_run_still_ends_cleanly(
    tmp_path: Path,
):
    run = Run(tmp_path, slow_shutdown=True)
    run.sigterm_during_the_call()
    # The slow extension's session_shutdown handler holds the tear-down open.
    run.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP ignored" in run.stderr(), "pi to ignore SIGHUP", detail=run.state)
    assert run.process.poll() is None  # neither a reload nor death by SIGHUP
    run.release.write_text("")
    assert run.wait() == 143, run.stderr()
    run.assert_left_nothing()


def test_a_second_sigterm_kills_the_workers_instead_of_waiting_for_a_slow_shutdown_handler(
    tmp_path: Path,
):
    run = Run(tmp_path, slow_shutdown=True)
    run.sigterm_during_the_call()
    run.process.send_signal(signal.SIGTERM)
    # The handler never returns (RELEASE is never created): only the second
    # signal's kill ends the tear-down before the 10 s session_shutdown bound.
    started = time.monotonic()
    assert run.wait() == 143, run.stderr()
    assert time.monotonic() - started < 8, run.stderr()
    assert "SIGTERM again: stopping every worker now" in run.stderr()
    run.assert_left_nothing()


def test_a_sigterm_while_an_extension_worker_still_starts_reaps_that_worker_too(
    tmp_path: Path,
):
    run = Run(tmp_path, hanging_factory=True)

    def workers_started():
        found = marked_processes(run.marker)
        workers = [c for c in found.values() if "pi_sandbox.worker" in c and "bwrap" not in c]
        return len(workers) >= 5  # the tool worker and four extension workers

    wait_for(workers_started, "every worker process to be spawned")
    assert run.process.poll() is None  # the hanging factory holds the start up
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr()
    assert "handshake failed" not in run.stderr()
    survivors = wait_for(
        lambda: not marked_processes(run.marker) or None, "every process to be gone", timeout=10
    )
    assert survivors
    assert new_entries(run.workspace, run.before) == []
    assert os.listdir(run.tmpdir) == []


def test_control_a_supervisor_killed_with_sigkill_leaves_its_temporary_files_behind(
    tmp_path: Path,
):
    """The checks above can fail: SIGKILL allows no clean-up, and the run's worker
    logs stay in its temporary directory (the next run removes them)."""
    run = Run(tmp_path)
    run.wait_for_sleep()
    run.process.kill()
    assert run.wait() == -signal.SIGKILL
    assert os.listdir(run.tmpdir) != []
    # bwrap --die-with-parent still takes every sandbox down.
    wait_for(lambda: not marked_processes(run.marker) or None, "the sandboxes to go", timeout=30)


def test_worker_logs_a_run_kept_survive_a_later_run_and_name_the_failure(tmp_path: Path):
    crashing = tmp_path / "crashing.py"
    crashing.write_text('def extension(pi):\n    raise RuntimeError("boom at load")\n')
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([{"text": "hi"}]))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # A private temporary directory: `pi` of other versions on this machine could
    # not see (and remove) the kept directory.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "TMPDIR": str(tmpdir)}
    env["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
    argv = [sys.executable, "-m", "pi_sandbox.cli", "-p", "--model", "scripted"]
    argv += ["--script", str(script), "--no-session", "-C", str(workspace)]
    first = subprocess.run(
        [*argv, "-e", str(crashing), "go"], env=env, capture_output=True, text=True, timeout=120
    )
    kept = [line for line in first.stderr.splitlines() if "worker logs kept in" in line]
    assert kept, first.stderr
    kept_dir = Path(kept[0].split("worker logs kept in ")[1].strip())
    second = subprocess.run([*argv, "go"], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert kept_dir.is_dir()
    summary = (kept_dir / "pi-run.txt").read_text()
    assert "boom at load" in summary and "Traceback" in summary
    assert str(crashing) in summary


def test_a_dead_runs_log_directory_it_did_not_keep_is_removed_by_the_next_run(tmp_path: Path):
    """The control: the next run still removes what a killed run left."""
    from pi_sandbox.supervisor.workers import worker_pool

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # A pid that does not exist: above the kernel's maximum.
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    dead = tmpdir / f"pi-workers-{pid_max + 1}-abc"
    dead.mkdir()
    (dead / "01-tool-worker.log").write_text("x")
    kept = tmpdir / f"pi-workers-{pid_max + 2}-def"
    kept.mkdir()
    (kept / worker_pool.KEPT_LOGS_FILE).write_text("kept")
    dead_mcp = tmpdir / f"pi-mcp-{pid_max + 4}-jkl"  # an MCP server's log (red team)
    dead_mcp.mkdir()
    (dead_mcp / "server.log").write_text("x")
    alive_mcp = tmpdir / f"pi-mcp-{os.getpid()}-mno"
    alive_mcp.mkdir()
    old = tmpdir / f"pi-workers-{pid_max + 3}-ghi"
    old.mkdir()
    (old / worker_pool.KEPT_LOGS_FILE).write_text("kept long ago")
    long_ago = time.time() - worker_pool.KEPT_LOGS_MAX_AGE_S - 60
    os.utime(old / worker_pool.KEPT_LOGS_FILE, (long_ago, long_ago))
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmpdir)
    import tempfile

    tempfile.tempdir = None
    try:
        worker_pool._remove_stale_log_dirs()
    finally:
        if saved is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
    assert not dead.exists() and not dead_mcp.exists()
    assert kept.is_dir() and alive_mcp.is_dir()
    assert not old.exists()
