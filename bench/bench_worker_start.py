"""Worker start-up: N sandboxed hook extensions from spawn to ready (issue 20 target 5).

Runs `WorkerPool.start` (the tool worker plus N trivial ``tool_call`` hook extensions,
as ``pi --sandbox -e … ×N`` does) and then the ``session_start`` dispatch, for
N = 1, 5, 10, alternating with the baseline measured in the same run: N sequential
``python -I -c pass`` start-ups. Each count is repeated ``--rounds`` times; the
median is reported with the load average.

Per-phase breakdown (summed over the N+1 workers of one start, supervisor main
thread unless noted), by wrapping the functions involved (bench-only
instrumentation, the product code is unchanged):

- ``prepare``: `WorkerPool._prepare_sandbox` (once per run: bwrap probe, seccomp
  program, cgroups, user namespace);
- ``profile``: `WorkerPool._spec` (building each worker's `SandboxProfile`);
- ``spawn``: `WorkerProcess._spawn` (argv, descriptors, cgroup, ``posix_spawn``),
  of which ``argv`` (`build_bwrap_argv`), ``fds`` (`sandbox_descriptors`),
  ``posix_spawn`` (the call itself: the parent waits for the child's exec);
- ``handshake``: from spawn to the ``initialize`` answer, per worker (wall; median
  and max), i.e. bwrap's sandbox set-up, the interpreter, the worker's imports, the
  extension's import and factory;
- ``CPU sup``: CPU of the supervisor for the whole start (all threads);
- ``CPU all``: with ``--cpuacct``, the CPU of every process from the start to the
  last worker's exit: supervisor, bwrap, sandboxed workers;


Usage: ``python bench/bench_worker_start.py [--rounds 3] [--counts 1,5,10] [--no-sandbox]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.sandbox import find_bwrap, probe_bwrap
from pi_sandbox.supervisor.extensions.extension_discovery import ExtensionSource
from pi_sandbox.supervisor.workers import sandboxed_spawn as spawn_module
from pi_sandbox.supervisor.workers import worker_process as process_module
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

# The hook every benchmark of this folder uses (run_benchmarks.HOOK_EXTENSION).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_benchmarks import HOOK_EXTENSION

# name -> list of durations (seconds) recorded during the current start
_phases: dict[str, list[float]] = defaultdict(list)
# --concurrency: the limiter every worker start goes through (None: unbounded)
_start_slots: trio.CapacityLimiter | None = None


def _timed(name: str, func: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            _phases[name].append(time.perf_counter() - start)

    return wrapper


def _timed_async(name: str, func: Any) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await func(*args, **kwargs)
        finally:
            _phases[name].append(time.perf_counter() - start)

    return wrapper


def instrument() -> None:
    """Wrap the start-up path's functions to record their durations in `_phases`."""
    WorkerPool._spec = _timed("profile", WorkerPool._spec)  # type: ignore[method-assign]
    WorkerPool._prepare_sandbox = _timed_async("prepare", WorkerPool._prepare_sandbox)  # type: ignore[method-assign]
    process_module.WorkerProcess._spawn = _timed("spawn", process_module.WorkerProcess._spawn)  # type: ignore[method-assign]
    timed_start = _timed_async("handshake", process_module.WorkerProcess.start)

    async def start(*args: Any, **kwargs: Any) -> Any:
        if _start_slots is None:
            return await timed_start(*args, **kwargs)
        async with _start_slots:  # --concurrency: at most N handshakes at once
            return await timed_start(*args, **kwargs)

    process_module.WorkerProcess.start = start  # type: ignore[method-assign]
    spawn_module.build_bwrap_argv = _timed("argv", spawn_module.build_bwrap_argv)
    spawn_module.sandbox_descriptors = _timed("fds", spawn_module.sandbox_descriptors)
    real_spawn = os.posix_spawn

    class _Os:
        """``os`` as sandboxed_spawn sees it, with ``posix_spawn`` timed."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        posix_spawn = staticmethod(_timed("posix_spawn", real_spawn))

    spawn_module.os = _Os()  # type: ignore[assignment]


_CPUACCT: Path | None = None  # --cpuacct: the cgroup (v1 cpuacct) this process runs in


def join_cpuacct() -> None:
    """Move this process into a cgroup v1 ``cpuacct`` group of its own, so the CPU of
    everything it starts — bwrap, its init, the sandboxed workers — is counted
    (the pool moves workers into pids/memory cgroups, never cpuacct). Needs root
    and a v1 cpuacct hierarchy."""
    global _CPUACCT
    group = Path(f"/sys/fs/cgroup/cpuacct/pi-bench-start-{os.getpid()}")
    group.mkdir()
    (group / "cgroup.procs").write_text(str(os.getpid()))
    _CPUACCT = group


def leave_cpuacct() -> None:
    if _CPUACCT is not None:
        with contextlib.suppress(OSError):
            Path("/sys/fs/cgroup/cpuacct/cgroup.procs").write_text(str(os.getpid()))
            time.sleep(0.1)
            _CPUACCT.rmdir()


def tree_cpu() -> float:
    """CPU seconds of this process and all it started (``--cpuacct``), else 0."""
    if _CPUACCT is None:
        return 0.0
    return int((_CPUACCT / "cpuacct.usage").read_text()) / 1e9


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_start(config: PoolConfig, hooks: list[Path], limit: int = 0) -> dict[str, float]:
    """Start the pool with ``hooks`` to ready, dispatch session_start, stop; returns times.

    ``limit``: workers starting at once (0: unbounded, as `WorkerPool` does)."""
    global _start_slots
    _phases.clear()
    _start_slots = trio.CapacityLimiter(limit) if limit > 0 else None
    pool = WorkerPool(config)
    cpu_sup, cpu_tree = self_cpu(), tree_cpu()
    result: dict[str, float] = {}
    try:
        async with trio.open_nursery() as nursery:
            try:
                start = time.perf_counter()
                await pool.start(nursery, [ExtensionSource(p, "cli") for p in hooks])
                result["ready"] = time.perf_counter() - start
                if pool.load_errors:
                    raise RuntimeError(f"load errors: {pool.load_errors}")
                t = time.perf_counter()
                await pool.dispatch("session_start", {"reason": "startup"})
                result["session_start"] = time.perf_counter() - t
                result["cpu_sup"] = self_cpu() - cpu_sup
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(pool.log_dir, ignore_errors=True)
    if _CPUACCT is not None:
        time.sleep(0.05)  # the last workers' exit
        result["cpu_tree"] = tree_cpu() - cpu_tree
    for name, values in _phases.items():
        result[f"sum_{name}"] = sum(values)
    shakes = _phases.get("handshake", [])
    if shakes:
        result["handshake_p50"] = statistics.median(shakes)
        result["handshake_max"] = max(shakes)
    return result


def pieces(root: Path, hook: Path, rounds: int) -> None:
    """Where one sandboxed extension worker's start goes: each piece run alone,
    sequentially, alternating, median wall (ms) of ``rounds`` runs each."""
    from pi_sandbox.sandbox import build_bwrap_argv
    from pi_sandbox.sandbox.profile import worker_profile
    from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd
    from pi_sandbox.supervisor.workers.worker_process import worker_command, worker_sys_path

    workspace, home, agent_dir = (root / n for n in ("workspace", "home", "agent"))
    profile = worker_profile(
        "extension", workspace=workspace, home=home, agent_dir=agent_dir, extra_ro=[hook]
    )
    bwrap = find_bwrap()
    py = sys.executable
    paths = "import sys;sys.path+=sys.argv[1:];"
    imports = "import pi_sandbox.worker.runtime, pi_sandbox.worker.confinement"
    cases = [
        ("python -I -c pass", [py, "-I", "-c", "pass"], False),
        ("python -I -S -c pass", [py, "-I", "-S", "-c", "pass"], False),
        (
            "python -I -B -m … (before): imports of a worker",
            [py, "-I", "-B", "-c", imports],
            False,
        ),
        (
            "python -I -S -B -c … (now): imports of a worker",
            [py, "-I", "-S", "-B", "-c", paths + imports, *worker_sys_path()],
            False,
        ),
        ("bwrap (extension profile, seccomp) /bin/true", ["/bin/true"], True),
        ("bwrap + python -I -S -c pass", [py, "-I", "-S", "-c", "pass"], True),
        (
            "bwrap + worker imports (now)",
            [py, "-I", "-S", "-B", "-c", paths + imports, *worker_sys_path()],
            True,
        ),
    ]
    assert worker_command()[1:4] == ["-I", "-S", "-B"]
    samples: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        for name, command, sandboxed in cases:
            argv, fds = command, ()
            seccomp = None
            if sandboxed:
                seccomp = seccomp_memfd()
                argv = build_bwrap_argv(profile, command, bwrap=bwrap, seccomp_fd=seccomp)
                fds = (seccomp,)
            start = time.perf_counter()
            subprocess.run(argv, check=True, pass_fds=fds)
            samples[name].append(time.perf_counter() - start)
            if seccomp is not None:
                os.close(seccomp)
    print(f"\n# one worker's pieces, alone, median of {rounds} (ms); load {os.getloadavg()}")
    print("| piece | wall p50 (ms) |\n|---|---|")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values) * 1000:.1f} |")


def python_baseline(count: int) -> float:
    """N sequential ``python -I -c pass`` (seconds)."""
    start = time.perf_counter()
    for _ in range(count):
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--counts", default="1,5,10")
    parser.add_argument("--no-sandbox", action="store_true")
    parser.add_argument(
        "--cpuacct",
        action="store_true",
        help="count the CPU of every process of a start (root, cgroup v1 cpuacct)",
    )
    parser.add_argument(
        "--pieces", type=int, default=0, help="also time one worker's pieces, N runs each"
    )
    parser.add_argument(
        "--concurrency",
        default="",
        help="comma-separated limits on the workers starting at once, compared in "
        "the same run (0: unbounded, as the pool does); default: 0",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    sandbox = not args.no_sandbox
    if sandbox:
        probe_bwrap(find_bwrap())
    instrument()
    if args.cpuacct:
        join_cpuacct()
    root = Path(tempfile.mkdtemp(prefix="pi-bench-start-"))
    try:
        workspace, home, agent_dir, hooks_dir = (
            root / n for n in ("workspace", "home", "agent", "hooks")
        )
        for d in (workspace, home, agent_dir, hooks_dir):
            d.mkdir()
        hooks = []
        for i in range(max(counts)):
            path = hooks_dir / f"hook_{i:02d}.py"
            path.write_text(HOOK_EXTENSION)
            hooks.append(path)
        config = PoolConfig(cwd=workspace, agent_dir=agent_dir, home=home, sandbox=sandbox)
        trio.run(one_start, config, hooks[:1])  # warm-up
        python_baseline(1)
        limits = [int(c) for c in args.concurrency.split(",")] if args.concurrency else [0]
        runs = [(count, limit) for count in counts for limit in limits]
        samples: dict[tuple[int, int], list[dict[str, float]]] = {r: [] for r in runs}
        baseline: dict[int, list[float]] = {c: [] for c in counts}
        for _ in range(args.rounds):
            for count in counts:
                for limit in limits:  # alternating, so load drift hits each alike
                    samples[count, limit].append(trio.run(one_start, config, hooks[:count], limit))
                baseline[count].append(python_baseline(count))
        load = os.getloadavg()
        if args.pieces and sandbox:
            pieces(root, hooks[0], args.pieces)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        leave_cpuacct()

    def ms(value: float) -> str:
        return f"{value * 1000:.1f}"

    kind = "sandboxed" if sandbox else "unsandboxed"
    print(f"# worker start-up, {kind}, {args.rounds} rounds, medians (ms); load {load}")
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cpus, pid {os.getpid()}")
    columns = [
        ("ready", "start→ready"),
        ("sum_prepare", "prepare"),
        ("session_start", "session_start"),
        ("sum_profile", "Σprofile"),
        ("sum_spawn", "Σspawn"),
        ("sum_argv", "Σargv"),
        ("sum_fds", "Σfds"),
        ("sum_posix_spawn", "Σposix_spawn"),
        ("handshake_p50", "handshake p50"),
        ("handshake_max", "handshake max"),
        ("cpu_sup", "CPU sup"),
        ("cpu_tree", "CPU all (start+stop)"),
    ]
    print(
        "| N exts | starting at once | "
        + " | ".join(label for _, label in columns)
        + " | N× python -I -c pass | ratio |"
    )
    print("|---" * (len(columns) + 4) + "|")
    for count, limit in runs:
        cells = []
        for key, _ in columns:
            values = [s[key] for s in samples[count, limit] if key in s]
            cells.append(ms(statistics.median(values)) if values else "-")
        ready = statistics.median(s["ready"] for s in samples[count, limit])
        base = statistics.median(baseline[count])
        at_once = "all" if limit == 0 else str(limit)
        print(
            f"| {count} | {at_once} | "
            + " | ".join(cells)
            + f" | {ms(base)} | {ready / base:.2f}× |"
        )
    for count, limit in runs:
        workers = count + 1
        sup = statistics.median(s["cpu_sup"] for s in samples[count, limit]) / workers
        print(f"# N={count} ({limit}): supervisor CPU per worker (N+1={workers}): {ms(sup)} ms")
    with contextlib.suppress(Exception):
        print(
            "# uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        )


if __name__ == "__main__":
    main()
