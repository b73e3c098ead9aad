"""Sandboxed workers as the pool starts them: seccomp, status fd, cgroups, the
persistence guard, fd hygiene and fail-closed start-up (issue 3), with real bwrap."""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from pi_sandbox.errors import SandboxUnavailableError
from pi_sandbox.protocol import methods
from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

pytestmark = pytest.mark.usefixtures("require_bwrap")


def make_pool(tmp_path: Path, workspace: Path, **settings) -> WorkerPool:
    records: list[dict] = []
    pool = WorkerPool(
        PoolConfig(
            cwd=workspace,
            agent_dir=tmp_path / "agent",
            home=tmp_path / "home",
            sandbox=True,
            settings=SandboxSettings(**settings),
            audit=records.append,
        )
    )
    pool.audit_records = records  # type: ignore[attr-defined]
    return pool


@asynccontextmanager
async def running(pool: WorkerPool):
    """The pool started with no extensions; stopped (every worker reaped) on exit."""
    async with trio.open_nursery() as nursery:
        await pool.start(nursery, [])
        try:
            yield pool
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


async def bash(pool: WorkerPool, command: str, timeout: float = 30) -> str:
    worker = await pool.ensure_tool_worker()
    raw = await worker.request(
        methods.TOOL_EXECUTE,
        {
            "tool_call_id": "c1",
            "name": "bash",
            "params": {"command": command, "timeout": timeout},
            "ctx": {"cwd": str(pool.config.cwd)},
        },
        timeout_s=timeout + 30,
    )
    return "".join(block.get("text", "") for block in raw["content"])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = Path(os.path.realpath(tmp_path)) / "ws"
    path.mkdir()
    (tmp_path / "home").mkdir()
    return path


async def test_the_tool_worker_runs_under_seccomp_with_no_capabilities(tmp_path, workspace):
    pool = make_pool(tmp_path, workspace)
    async with running(pool):
        out = await bash(pool, "grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status")
        assert "CapEff:\t0000000000000000" in out
        assert "Seccomp:\t2" in out
        assert "NoNewPrivs:\t1" in out
        # --json-status-fd told us the sandboxed child's host pid
        worker = pool.tool_worker
        with trio.fail_after(60):  # generous: only a hang reaches it (issue 13 §7)
            await worker.sandbox_status.wait()
        assert worker.sandbox_pid is not None and worker.sandbox_pid != worker.pid
        assert os.path.exists(f"/proc/{worker.sandbox_pid}")
    assert worker.sandbox_exit_code is not None


async def test_missing_persistence_paths_leave_nothing_on_the_host_and_planted_ones_are_quarantined(
    tmp_path, workspace
):
    (workspace / "README").write_text("hi\n")
    before = sorted(os.listdir(workspace))
    pool = make_pool(tmp_path, workspace)
    async with running(pool):
        # the model's listing is the real one, and so is the host's (issue 14 §1)
        assert sorted(os.listdir(workspace)) == before
        assert (await bash(pool, "ls -A")).split() == before
        out = await bash(
            pool,
            "git init -q . ; echo init=$?;"
            "mkdir -p .pi/extensions && echo 'x' > .pi/extensions/x.py; echo pi=$?;"
            "mkdir -p sub/.vscode && echo '{}' > sub/.vscode/tasks.json; touch .envrc;"
            "echo ok > notes.txt; echo notes=$?",
        )
        assert "notes=0" in out
        await pool.check_persistence()
        # (the inotify-driven check may have taken some during the call already)
        findings = pool.quarantined
        moved = {f.path for f in findings if f.moved_to}
        assert moved == {
            str(workspace / ".git"),
            str(workspace / ".pi"),
            str(workspace / "sub" / ".vscode"),
            str(workspace / ".envrc"),
        }
        # quarantined, not lost: it is where the report says
        assert all(os.path.lexists(f.moved_to) for f in findings if f.moved_to)
    assert (workspace / "notes.txt").read_text() == "ok\n"
    assert sorted(os.listdir(workspace)) == sorted([*before, "notes.txt", "sub"])
    assert os.listdir(workspace / "sub") == []
    events = [r for r in pool.audit_records if r["event"] == "quarantine"]
    assert {r["path"] for r in events if r["moved_to"]} == moved
    profile_records = [r for r in pool.audit_records if r["event"] == "sandbox_profile"]
    assert profile_records and profile_records[0]["role"] == "tool"


async def test_a_descriptor_left_inheritable_in_the_supervisor_is_closed_inside(
    tmp_path, workspace
):
    secret = tmp_path / "secret"
    secret.write_text("LEAKED-FD-SENTINEL")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        pool = make_pool(tmp_path, workspace)
        async with running(pool):
            out = await bash(
                pool,
                f"ls /proc/self/fd; cat <&{fd}; cat /proc/$PPID/fd/{fd}; "
                f"python3 -c 'import os; print(os.listdir(\"/proc/%d/fd\" % os.getppid()))'",
            )
    finally:
        os.close(fd)
    assert "LEAKED-FD-SENTINEL" not in out
    # the worker (bash's parent) holds only 0-3 plus what Python opens for itself
    worker_fds = json.loads(out.strip().splitlines()[-1].replace("'", '"'))
    assert str(fd) not in worker_fds or fd <= 3


async def test_a_sandboxed_start_fails_closed_when_seccomp_cannot_be_built(
    tmp_path, workspace, monkeypatch
):
    from pi_sandbox.sandbox import seccomp_filter

    def broken() -> bytes:
        raise SandboxUnavailableError("libseccomp.so.2 cannot be loaded: install libseccomp2")

    monkeypatch.setattr(seccomp_filter, "seccomp_program", broken)
    pool = make_pool(tmp_path, workspace)
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await pool.start(nursery, [])
    (error,) = info.value.exceptions
    assert isinstance(error, SandboxUnavailableError) and "libseccomp" in str(error)
    assert pool.tool_worker is None


async def test_rlimits_and_the_tmp_cap_follow_the_policy(tmp_path, workspace):
    limits = SandboxLimits(open_files=200, file_size_mb=8, tmp_size_mb=4, cpu_seconds=7)
    pool = make_pool(tmp_path, workspace, limits=limits)
    async with running(pool):
        out = await bash(
            pool,
            "ulimit -n; ulimit -t; ulimit -Hn; "
            "dd if=/dev/zero of=/tmp/big bs=1M count=16 2>&1 | grep -c 'No space'; "
            "(dd if=/dev/zero of=big bs=1M count=16 2>&1); echo dd=$?; "
            "dd if=/dev/zero of=/dev/shm/big bs=1M count=16 2>&1 | grep -c 'No space'; "
            "touch /dev/planted; echo devtouch=$?",
        )
    lines = out.splitlines()
    assert lines[:3] == ["200", "7", "200"]
    assert lines[3] == "1"  # ENOSPC from the 4 MiB /tmp
    assert "dd=0" not in out  # SIGXFSZ at the file size limit
    assert lines[-3] == "1"  # /dev/shm is sized like /tmp
    assert "devtouch=0" not in out  # /dev itself is read-only
    assert os.path.getsize(workspace / "big") <= 8 * 1024 * 1024


def _have_pids_cgroup() -> bool:
    limiter = CgroupLimiter.detect()
    if limiter is None:
        return False
    limiter.close()
    return True


@pytest.mark.skipif(not _have_pids_cgroup(), reason="no writable pids cgroup here")
async def test_a_fork_bomb_is_held_by_the_pids_cgroup_and_the_worker_recovers(tmp_path, workspace):
    pool = make_pool(tmp_path, workspace, limits=SandboxLimits(processes=48))
    async with running(pool):
        # The shell must end by itself (the note is given when it exits, not when it
        # times out): a generous timeout, as the bomb shares a busy machine's CPUs.
        with trio.fail_after(180):
            out = await bash(pool, "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", 120)
        assert "process limit" in out
        with trio.fail_after(60):
            assert "alive" in await bash(pool, "echo alive")


async def test_host_sysctls_and_proc_files_cannot_be_written(tmp_path, workspace):
    # As host root, /proc/sys would be writable without capabilities; with
    # kernel.core_pattern the host kernel then runs a program as root outside every
    # namespace. Each attempt writes back the current value, so a failure of the
    # sandbox changes nothing on the host.
    pool = make_pool(tmp_path, workspace)
    async with running(pool):
        out = await bash(
            pool,
            "for f in /proc/sys/vm/stat_interval /proc/sys/kernel/core_pattern; do"
            ' v=$(cat $f); printf "%s\\n" "$v" > $f && echo "WROTE $f"; done;'
            " grep -c ' /proc/sys ro,' /proc/self/mountinfo",
        )
    assert "WROTE" not in out
    assert out.strip().splitlines()[-1] == "1"  # /proc/sys is a read-only mount


async def test_a_guard_that_cannot_record_every_directory_says_so(tmp_path, workspace, monkeypatch):
    import functools

    from pi_sandbox.sandbox.persistence_guard import PersistenceGuard

    (workspace / "a" / "b").mkdir(parents=True)
    monkeypatch.setattr(
        "pi_sandbox.supervisor.workers.worker_pool.PersistenceGuard",
        functools.partial(PersistenceGuard, max_directories=1),
    )
    pool = make_pool(tmp_path, workspace)
    async with running(pool):
        assert pool.guard_warning is not None
        assert "could not record every directory" in pool.guard_warning
