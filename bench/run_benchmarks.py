#!/usr/bin/env python3
"""pi-sandbox benchmarks: every number beside a baseline measured in the same run.

Run with the interpreter that has pi-sandbox installed::

    python bench/run_benchmarks.py [--quick] [--json OUT] [--with-pi]

Sections (see bench/README.md):

(a) bare ``python -I -c pass`` start-up: the floor every worker pays.
(b) one extension worker, spawn → ``initialize`` handshake complete, sandboxed and not.
(c) round trip of a ``tool_call`` event to a worker with a no-op handler
    (``WorkerPool.dispatch``) against a raw socketpair JSON-lines echo.
(d) a ``bash true`` call through ``ToolPipeline.run`` (tool worker sandboxed and not)
    against ``bwrap <same profile> -- bash -c true`` spawned fresh each time.
(e) end to end: the ``pi`` CLI with a scripted model making 20 ``bash true`` calls,
    sandboxed, unsandboxed, with 10 hook extensions; with ``--with-pi`` the same
    scenario through the TypeScript ``pi`` (installed into a scratch folder under /tmp).
(f) where the time goes: start-up of the pieces (imports, bwrap alone) and
    ``python -X importtime`` cumulative costs of the supervisor's and the worker's imports.

Timing is ``time.perf_counter_ns``; every figure is printed in ms with 2 decimals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import trio

    import pi_sandbox
    from pi_sandbox.sandbox import build_bwrap_argv, find_bwrap, probe_bwrap, worker_profile
    from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd, seccomp_program
    from pi_sandbox.supervisor.providers.base import ToolCall
    from pi_sandbox.supervisor.tool_pipeline import ToolPipeline
    from pi_sandbox.supervisor.worker_pool import ExtensionSource, PoolConfig, WorkerPool
    from pi_sandbox.supervisor.worker_process import WorkerProcess, WorkerSpec
except ImportError as _exc:  # pragma: no cover - a usage error, not a benchmark result
    sys.exit(
        f"run_benchmarks.py: {_exc}; run it with the interpreter that has pi-sandbox installed"
    )

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ANCHORS = REPO_ROOT.parent / "shared" / "anchors"
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
DEFAULT_PI_DIR = Path(tempfile.gettempdir()) / f"pi-bench-anchor-{PI_VERSION}"
E2E_CALLS = 20
N_HOOKS = 10
FINAL_TEXT = "bench-done"

# The same work as /work/shared/anchors/pi-hook-ext.ts, as a pi-sandbox extension.
HOOK_EXTENSION = '''"""A trivial tool_call hook (the same work as anchors/pi-hook-ext.ts)."""


def extension(pi):
    def on_tool_call(event, ctx):
        if event.tool_name == "bash" and "NEVER-MATCHES" in str(event.input.get("command")):
            return {"block": True, "reason": "x"}
        return None

    pi.on("tool_call", on_tool_call)
'''

# Child of the raw echo baseline: echo newline-delimited lines on the inherited fd.
ECHO_CHILD = (
    "import socket,sys\n"
    "s=socket.socket(fileno=int(sys.argv[1]))\n"
    "r=s.makefile('rb')\n"
    "for line in r: s.sendall(line)\n"
)


# --- statistics and reporting --------------------------------------------------------------


def ms(ns: float) -> float:
    return ns / 1e6


def percentile(samples: Sequence[int], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``samples`` (ns)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def summary(samples: Sequence[int]) -> dict[str, float]:
    """Summary of a series in ms."""
    return {
        "n": len(samples),
        "min": round(ms(min(samples)), 3),
        "p50": round(ms(statistics.median(samples)), 3),
        "p90": round(ms(percentile(samples, 90)), 3),
        "p99": round(ms(percentile(samples, 99)), 3),
        "max": round(ms(max(samples)), 3),
        "mean": round(ms(statistics.fmean(samples)), 3),
    }


@dataclass
class Row:
    section: str
    label: str
    n: int
    value_ms: float | None
    baseline_label: str = ""
    baseline_ms: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.value_ms is None or not self.baseline_ms:
            return None
        return self.value_ms / self.baseline_ms

    def as_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "label": self.label,
            "n": self.n,
            "value_ms": None if self.value_ms is None else round(self.value_ms, 3),
            "baseline": self.baseline_label or None,
            "baseline_ms": None if self.baseline_ms is None else round(self.baseline_ms, 3),
            "ratio": None if self.ratio is None else round(self.ratio, 3),
        }


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    series: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: dict[str, list[int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    imports: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    section_seconds: dict[str, float] = field(default_factory=dict)

    def add_series(self, name: str, samples: list[int]) -> dict[str, float]:
        self.samples[name] = samples
        self.series[name] = summary(samples)
        return self.series[name]

    def stat(self, name: str, key: str = "p50") -> float | None:
        entry = self.series.get(name)
        return None if entry is None else entry[key]

    def row(
        self,
        section: str,
        label: str,
        name: str | None,
        key: str = "p50",
        *,
        base: str | None = None,
        base_key: str = "p50",
        base_label: str = "",
        value: float | None = None,
        n: int | None = None,
    ) -> None:
        if value is None and name is not None:
            value = self.stat(name, key)
        if n is None:
            n = int(self.series[name]["n"]) if name in self.series else 0
        baseline = self.stat(base, base_key) if base else None
        self.rows.append(Row(section, label, n, value, base_label if base else "", baseline))

    def skip(self, text: str) -> None:
        self.skipped.append(text)
        print(f"  skipped: {text}", flush=True)


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_table(rows: Sequence[Row]) -> str:
    headers = ("", "measurement", "n", "ms", "baseline", "baseline ms", "ratio")
    table = [headers] + [
        (
            r.section,
            r.label,
            str(r.n) if r.n else "",
            fmt_ms(r.value_ms),
            r.baseline_label,
            fmt_ms(r.baseline_ms) if r.baseline_label else "",
            f"{r.ratio:.2f}x" if r.ratio is not None else "",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    right = {2, 3, 5, 6}
    out = []
    for index, line in enumerate(table):
        cells = [
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# --- machine -------------------------------------------------------------------------------


def _run_text(argv: Sequence[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    return (
        (result.stdout or result.stderr).strip().splitlines()[0]
        if (result.stdout or result.stderr)
        else ""
    )


def machine_info(bwrap: str | None) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    node = shutil.which("node")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "loadavg_at_start": os.getloadavg(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "pi_sandbox": pi_sandbox.__version__,
        "bwrap": bwrap,
        "bwrap_version": _run_text([bwrap, "--version"]) if bwrap else None,
        "node": _run_text([node, "--version"]) if node else None,
    }


# --- process helpers -----------------------------------------------------------------------


def base_env(home: Path) -> dict[str, str]:
    """The small environment an unsandboxed worker gets (WorkerPool's own allowlist)."""
    from pi_sandbox.supervisor.worker_pool import unsandboxed_env

    return unsandboxed_env(home)


SECCOMP_FD = 5  # where bwrap finds the seccomp program in sandbox_argv's argv


def sandbox_argv(profile: Any, command: Sequence[str], bwrap: str) -> list[str]:
    """bwrap argv for ``profile``; with the seccomp filter on `SECCOMP_FD` when the
    profile wants it (spawn it with spawn_wait_ns, which puts a fresh program there)."""
    return build_bwrap_argv(
        profile, command, bwrap=bwrap, seccomp_fd=SECCOMP_FD if profile.seccomp else None
    )


def spawn_wait_ns(argv: Sequence[str], env: dict[str, str]) -> int:
    """posix_spawn ``argv`` (stdio on /dev/null) and wait for it; returns ns, checks exit 0.

    An argv with ``--seccomp 5`` gets a fresh memfd holding the (cached) seccomp
    program on fd 5, created inside the timed span, as WorkerProcess does.
    """
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    wants_seccomp = "--seccomp" in argv
    start = time.perf_counter_ns()
    memfd = None
    if wants_seccomp:
        memfd = seccomp_memfd()
        actions.append((os.POSIX_SPAWN_DUP2, memfd, SECCOMP_FD))
    try:
        pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions)
    finally:
        if memfd is not None:
            os.close(memfd)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter_ns() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}… exited with {code}")
    return elapsed


def spawn_series(argv: Sequence[str], env: dict[str, str], n: int, warmup: int = 2) -> list[int]:
    for _ in range(warmup):
        spawn_wait_ns(argv, env)
    return [spawn_wait_ns(argv, env) for _ in range(n)]


@dataclass
class Sizes:
    python_start: int
    handshake: int
    round_trips: int
    pipeline: int
    e2e_runs: int
    pieces: int
    importtime_runs: int


QUICK = Sizes(
    python_start=20,
    handshake=10,
    round_trips=1000,
    pipeline=50,
    e2e_runs=2,
    pieces=6,
    importtime_runs=1,
)
FULL = Sizes(
    python_start=50,
    handshake=30,
    round_trips=5000,
    pipeline=200,
    e2e_runs=5,
    pieces=20,
    importtime_runs=5,
)


@dataclass
class Env:
    """Scratch directories and files shared by the sections."""

    root: Path
    workspace: Path
    home: Path
    agent_dir: Path
    hooks: list[Path]
    bwrap: str | None
    sizes: Sizes

    def pool_config(self, *, sandbox: bool) -> PoolConfig:
        return PoolConfig(
            cwd=self.workspace, agent_dir=self.agent_dir, home=self.home, sandbox=sandbox
        )


def make_env(sizes: Sizes, report: Report) -> Env:
    root = Path(tempfile.mkdtemp(prefix="pi-bench-"))
    workspace, home, agent_dir, hooks_dir = (
        root / n for n in ("workspace", "home", "agent", "hooks")
    )
    for d in (workspace, home, agent_dir, hooks_dir):
        d.mkdir()
    hooks = []
    for i in range(N_HOOKS):
        path = hooks_dir / f"hook_{i:02d}.py"
        path.write_text(HOOK_EXTENSION)
        hooks.append(path)
    bwrap: str | None = None
    try:
        bwrap = find_bwrap()
        probe_bwrap(bwrap)
    except Exception as exc:  # SandboxUnavailableError: sandboxed rows are skipped
        report.skip(f"sandboxed measurements: {exc}")
        bwrap = None
    return Env(root, workspace, home, agent_dir, hooks, bwrap, sizes)


async def with_pool(
    env: Env, *, sandbox: bool, sources: Sequence[Path], body: Callable[[WorkerPool], Any]
) -> Any:
    pool = WorkerPool(env.pool_config(sandbox=sandbox))
    try:
        async with trio.open_nursery() as nursery:
            try:
                await pool.start(nursery, [ExtensionSource(p, "cli") for p in sources])
                if pool.load_errors:
                    raise RuntimeError(f"extension load errors: {pool.load_errors}")
                return await body(pool)
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(pool.log_dir, ignore_errors=True)


# --- (a) python start ----------------------------------------------------------------------


def bench_python_start(env: Env, report: Report) -> None:
    argv = [sys.executable, "-I", "-c", "pass"]
    report.add_series(
        "a.python_start", spawn_series(argv, base_env(env.home), env.sizes.python_start)
    )
    report.row("(a)", "python -I -c pass, start-up p50", "a.python_start")


# --- (b) worker spawn to handshake ---------------------------------------------------------


async def _handshakes(env: Env, *, sandboxed: bool, n: int, seccomp: bool = True) -> list[int]:
    ext = env.hooks[0]
    profile = None
    if sandboxed:
        # As WorkerPool does: the extension role, with only the extension file bound.
        profile = worker_profile(
            "extension",
            workspace=env.workspace,
            home=env.home,
            agent_dir=env.agent_dir,
            extra_ro=[ext],
        )
        if not seccomp:
            profile = profile.model_copy(update={"seccomp": False})
    ctx = {"cwd": str(env.workspace), "has_ui": False, "mode": "print"}
    samples: list[int] = []
    for i in range(n + 2):  # two warm-up spawns (page cache, bwrap binary)
        spec = WorkerSpec(
            name=f"bench extension {i}",
            init_params={"kind": "extension", "path": str(ext), "ctx": ctx},
            log_path=env.root / "logs" / f"handshake-{int(sandboxed)}-{i}.log",
            env=base_env(env.home),
            sandbox=profile,
            bwrap=env.bwrap if sandboxed else None,
        )
        worker = WorkerProcess(spec, generation=1)
        async with trio.open_nursery() as nursery:
            start = time.perf_counter_ns()
            registrations = await worker.start(nursery, timeout_s=30)
            elapsed = time.perf_counter_ns() - start
            await worker.aclose()
            nursery.cancel_scope.cancel()
        if registrations.events != ["tool_call"]:
            raise RuntimeError(f"unexpected registrations: {registrations}")
        if i >= 2:
            samples.append(elapsed)
    return samples


def bench_handshake(env: Env, report: Report) -> None:
    n = env.sizes.handshake
    if env.bwrap:
        report.add_series(
            "b.handshake_sandboxed", trio.run(lambda: _handshakes(env, sandboxed=True, n=n))
        )
    report.add_series(
        "b.handshake_unsandboxed", trio.run(lambda: _handshakes(env, sandboxed=False, n=n))
    )
    base = "python -I -c pass p50 (a)"
    if env.bwrap:
        report.row(
            "(b)",
            "ext worker spawn→handshake, sandboxed, p50",
            "b.handshake_sandboxed",
            base="a.python_start",
            base_label=base,
        )
        report.row(
            "(b)",
            "ext worker spawn→handshake, sandboxed, p90",
            "b.handshake_sandboxed",
            "p90",
            base="a.python_start",
            base_label=base,
        )
    report.row(
        "(b)",
        "ext worker spawn→handshake, unsandboxed, p50",
        "b.handshake_unsandboxed",
        base="a.python_start",
        base_label=base,
    )
    report.row(
        "(b)",
        "ext worker spawn→handshake, unsandboxed, p90",
        "b.handshake_unsandboxed",
        "p90",
        base="a.python_start",
        base_label=base,
    )


# --- (c) event round trip ------------------------------------------------------------------


def _payload(i: int) -> dict[str, Any]:
    return {"tool_name": "bash", "tool_call_id": f"call_{i}", "input": {"command": "true"}}


async def _dispatch_series(env: Env, *, sandbox: bool, n: int) -> list[int]:
    async def body(pool: WorkerPool) -> list[int]:
        subscribed = [
            worker
            for _, worker in pool.extensions
            if worker.registrations and "tool_call" in worker.registrations.events
        ]
        if len(subscribed) != 1:
            raise RuntimeError("the hook extension did not subscribe to tool_call")
        for i in range(100):  # warm-up
            await pool.dispatch("tool_call", _payload(i))
        samples = []
        for i in range(n):
            payload = _payload(i)
            start = time.perf_counter_ns()
            outcome = await pool.dispatch("tool_call", payload)
            samples.append(time.perf_counter_ns() - start)
            if outcome.errors or outcome.state.get("block"):
                raise RuntimeError(f"dispatch failed: {outcome}")
        return samples

    return await with_pool(env, sandbox=sandbox, sources=[env.hooks[0]], body=body)


def raw_echo_series(env: Env, n: int) -> list[int]:
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", ECHO_CHILD, str(child.fileno())],
        pass_fds=[child.fileno()],
        stdin=subprocess.DEVNULL,
        env=base_env(env.home),
    )
    child.close()
    reader = parent.makefile("rb")
    samples = []
    try:
        for i in range(-100, n):  # 100 warm-up round trips
            message = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "event/dispatch",
                "params": {
                    "event": "tool_call",
                    "payload": _payload(i),
                    "state": {},
                    "ctx": {"cwd": str(env.workspace), "has_ui": False, "mode": "print"},
                },
            }
            start = time.perf_counter_ns()
            parent.sendall(json.dumps(message).encode() + b"\n")
            reply = json.loads(reader.readline())
            elapsed = time.perf_counter_ns() - start
            if reply["id"] != i:
                raise RuntimeError("echo mismatch")
            if i >= 0:
                samples.append(elapsed)
    finally:
        reader.close()
        parent.close()
        proc.wait(timeout=10)
    return samples


def bench_round_trip(env: Env, report: Report) -> None:
    n = env.sizes.round_trips
    report.add_series("c.raw_echo", raw_echo_series(env, n))
    report.add_series(
        "c.dispatch_unsandboxed", trio.run(lambda: _dispatch_series(env, sandbox=False, n=n))
    )
    if env.bwrap:
        report.add_series(
            "c.dispatch_sandboxed", trio.run(lambda: _dispatch_series(env, sandbox=True, n=n))
        )
    for key in ("p50", "p99"):
        label = f"raw socketpair JSON echo {key}"
        report.row(
            "(c)",
            f"tool_call dispatch, 1 no-op hook worker, {key}",
            "c.dispatch_unsandboxed",
            key,
            base="c.raw_echo",
            base_key=key,
            base_label=label,
        )
        if env.bwrap:
            report.row(
                "(c)",
                f"  same, worker sandboxed, {key}",
                "c.dispatch_sandboxed",
                key,
                base="c.raw_echo",
                base_key=key,
                base_label=label,
            )


# --- (d) bash true through the pipeline ----------------------------------------------------


async def _noop_emit(_event: dict[str, Any]) -> None:
    return None


async def _pipeline_series(env: Env, *, sandbox: bool, n: int) -> list[int]:
    async def body(pool: WorkerPool) -> list[int]:
        pipeline = ToolPipeline(pool=pool, policy=None, cwd=env.workspace, emit=_noop_emit)
        samples = []
        for i in range(-5, n):  # 5 warm-up calls
            call = ToolCall(f"call_{i}", "bash", {"command": "true"})
            start = time.perf_counter_ns()
            [outcome] = await pipeline.run([call])
            elapsed = time.perf_counter_ns() - start
            if outcome.result.get("is_error"):
                raise RuntimeError(f"bash true failed: {outcome.result}")
            if i >= 0:
                samples.append(elapsed)
        return samples

    return await with_pool(env, sandbox=sandbox, sources=[], body=body)


def _slow_share(report: Report, key: str, threshold_ms: float = 45.0) -> None:
    samples = report.samples.get(key)
    if samples:
        slow = sum(1 for x in samples if ms(x) >= threshold_ms)
        report.series[key]["share_ge_45ms"] = round(slow / len(samples), 3)
        report.notes.append(
            f"{key}: {slow}/{len(samples)} calls took >= {threshold_ms:g} ms (min {report.series[key]['min']:.2f} ms)"
        )


def bench_pipeline(env: Env, report: Report) -> None:
    n = env.sizes.pipeline
    if env.bwrap:
        report.add_series(
            "d.pipeline_sandboxed", trio.run(lambda: _pipeline_series(env, sandbox=True, n=n))
        )
        profile = worker_profile(
            "tool", workspace=env.workspace, home=env.home, agent_dir=env.agent_dir
        )
        argv = sandbox_argv(profile, ["bash", "-c", "true"], env.bwrap)
        report.add_series("d.bwrap_bash_fresh", spawn_series(argv, {}, n))
        plain = profile.model_copy(update={"seccomp": False})
        argv = sandbox_argv(plain, ["bash", "-c", "true"], env.bwrap)
        report.add_series("d.bwrap_bash_fresh_noseccomp", spawn_series(argv, {}, n))
    report.add_series(
        "d.pipeline_unsandboxed", trio.run(lambda: _pipeline_series(env, sandbox=False, n=n))
    )
    _slow_share(report, "d.pipeline_sandboxed")
    _slow_share(report, "d.pipeline_unsandboxed")
    base = "bwrap <tool profile> -- bash -c true, fresh, p50"
    if env.bwrap:
        report.row(
            "(d)",
            "bash true via ToolPipeline, sandboxed, p50",
            "d.pipeline_sandboxed",
            base="d.bwrap_bash_fresh",
            base_label=base,
        )
        report.row(
            "(d)",
            "bash true via ToolPipeline, sandboxed, p90",
            "d.pipeline_sandboxed",
            "p90",
            base="d.bwrap_bash_fresh",
            base_key="p90",
            base_label="  same baseline, p90",
        )
        report.row(
            "(d)",
            "bash true via ToolPipeline, unsandboxed, p50",
            "d.pipeline_unsandboxed",
            base="d.bwrap_bash_fresh",
            base_label=base,
        )
    else:
        report.row("(d)", "bash true via ToolPipeline, unsandboxed, p50", "d.pipeline_unsandboxed")


# --- (g) sandbox hardening: floors and the cost of seccomp ------------------------------------


def _seccomp_build_ns() -> tuple[int, int]:
    """(first build in a fresh process, cached call here), in ns."""
    code = (
        "import time; t = time.perf_counter_ns(); "
        "from pi_sandbox.sandbox.seccomp_filter import seccomp_program; seccomp_program(); "
        "print(time.perf_counter_ns() - t)"
    )
    first = int(
        subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    seccomp_program()
    start = time.perf_counter_ns()
    for _ in range(1000):
        seccomp_program()
    return first, (time.perf_counter_ns() - start) // 1000


def bench_hardening(env: Env, report: Report) -> None:
    if not env.bwrap:
        report.notes.append("(g) skipped: no working bwrap")
        return
    n = env.sizes.pipeline
    if "d.pipeline_sandboxed" not in report.samples:
        report.add_series(
            "d.pipeline_sandboxed", trio.run(lambda: _pipeline_series(env, sandbox=True, n=n))
        )
    profile = worker_profile(
        "tool", workspace=env.workspace, home=env.home, agent_dir=env.agent_dir
    )
    report.add_series(
        "g.bwrap_bash",
        spawn_series(sandbox_argv(profile, ["bash", "-c", "true"], env.bwrap), {}, n),
    )
    report.add_series(
        "g.bash_unsandboxed", spawn_series(["/bin/bash", "-c", "true"], base_env(env.home), n)
    )
    h = env.sizes.handshake
    report.add_series(
        "g.handshake_seccomp", trio.run(lambda: _handshakes(env, sandboxed=True, n=h))
    )
    report.add_series(
        "g.handshake_noseccomp",
        trio.run(lambda: _handshakes(env, sandboxed=True, n=h, seccomp=False)),
    )
    first, cached = _seccomp_build_ns()
    report.series["g.seccomp_build"] = {"first_ms": round(ms(first), 3), "cached_ns": cached}
    report.notes.append(
        f"(g) seccomp program: first build {ms(first):.2f} ms in a fresh process "
        f"(import pyseccomp + libseccomp + export), cached call {cached} ns"
    )
    floor = "bwrap <tool profile, seccomp> -- bash -c true, fresh, p50"
    report.row(
        "(g)",
        "bash -c true, unsandboxed, fresh, p50",
        "g.bash_unsandboxed",
        base="g.bwrap_bash",
        base_label=floor,
    )
    report.row(
        "(g)",
        "bash true via the full pipeline, sandboxed, p50",
        "d.pipeline_sandboxed",
        base="g.bwrap_bash",
        base_label=floor,
    )
    report.row(
        "(g)",
        "bash true via the full pipeline, sandboxed, p90",
        "d.pipeline_sandboxed",
        "p90",
        base="g.bwrap_bash",
        base_key="p90",
        base_label="  same floor, p90",
    )
    report.row(
        "(g)",
        "sandboxed worker start, seccomp, p50",
        "g.handshake_seccomp",
        base="g.handshake_noseccomp",
        base_label="same without the seccomp filter, p50",
    )


# --- (e) end to end ------------------------------------------------------------------------


def write_scripts(env: Env) -> tuple[Path, Path, Path, Path]:
    """YAML (ours) and JSON (pi) scripts: 20 bash calls then a text turn; and a 0-call one."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}
        for _ in range(E2E_CALLS)
    ]
    turns.append({"text": FINAL_TEXT})
    zero = [{"text": FINAL_TEXT}]
    paths = []
    for name, data in (("script20", turns), ("script0", zero)):
        # JSON is valid YAML: the same bytes serve both agents.
        for ext in ("yaml", "json"):
            path = env.root / f"{name}.{ext}"
            path.write_text(json.dumps(data, indent=1) + "\n")
            paths.append(path)
    return paths[0], paths[1], paths[2], paths[3]


def pi_console_script() -> list[str]:
    local = Path(sys.executable).with_name("pi")
    if local.exists():
        return [str(local)]
    found = shutil.which("pi")
    if found:
        return [found]
    return [sys.executable, "-m", "pi_sandbox.cli"]


@dataclass
class E2EConfig:
    """One end-to-end scenario: how to run it and how to tell that a run did the work."""

    key: str
    label: str
    argv: list[str]
    check: Callable[[subprocess.CompletedProcess], str | None]
    env: dict[str, str] = field(default_factory=dict)
    # Run once before timing (and checked); for the TS pi this is a --mode json run.
    warmup_argv: list[str] | None = None
    warmup_check: Callable[[subprocess.CompletedProcess], str | None] | None = None
    samples: list[int] = field(default_factory=list)
    failed: bool = False


def _run_once(
    env: Env, argv: list[str], extra_env: dict[str, str]
) -> tuple[int, subprocess.CompletedProcess]:
    """One run with a fresh, empty agent dir; returns (elapsed ns, result)."""
    agent_dir = Path(tempfile.mkdtemp(prefix="agent-", dir=env.root))
    run_env = {**os.environ, **extra_env, "PI_CODING_AGENT_DIR": str(agent_dir)}
    try:
        start = time.perf_counter_ns()
        result = subprocess.run(
            argv,
            cwd=env.workspace,
            env=run_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return time.perf_counter_ns() - start, result
    finally:
        shutil.rmtree(agent_dir, ignore_errors=True)


def run_e2e(env: Env, configs: Sequence[E2EConfig], runs: int, report: Report) -> None:
    """Warm each config up once, then time ``runs`` rounds, one run of every config per round.

    Interleaving the configs spreads any drift in machine load over all of them alike.
    A config whose run fails or is wrong is dropped (reported as skipped).
    """

    def attempt(cfg: E2EConfig, argv: list[str], check: Callable, timed: bool) -> None:
        try:
            elapsed, result = _run_once(env, argv, cfg.env)
        except subprocess.TimeoutExpired:
            cfg.failed = True
            report.skip(f"{cfg.label}: a run took more than 180 s")
            return
        problem = check(result)
        if problem:
            cfg.failed = True
            report.skip(f"{cfg.label}: {problem}\n    stderr tail: {result.stderr[-600:]!r}")
            return
        if timed:
            cfg.samples.append(elapsed)

    print(f"  warm-up: {len(configs)} configs", flush=True)
    for cfg in configs:
        attempt(cfg, cfg.warmup_argv or cfg.argv, cfg.warmup_check or cfg.check, timed=False)
    for round_index in range(runs):
        print(f"  round {round_index + 1}/{runs}", flush=True)
        for cfg in configs:
            if not cfg.failed:
                attempt(cfg, cfg.argv, cfg.check, timed=True)
    for cfg in configs:
        if not cfg.failed and cfg.samples:
            report.add_series(cfg.key, cfg.samples)


def _check_ours(calls: int) -> Callable[[subprocess.CompletedProcess], str | None]:
    def check(result: subprocess.CompletedProcess) -> str | None:
        if result.returncode != 0:
            return f"exit status {result.returncode}"
        if FINAL_TEXT not in result.stdout:
            return f"final text missing from stdout {result.stdout[-200:]!r}"
        done = result.stderr.count("✓ bash")
        if done != calls:
            return f"{done} successful bash calls reported, expected {calls}"
        return None

    return check


def _check_pi_json(calls: int) -> Callable[[subprocess.CompletedProcess], str | None]:
    def check(result: subprocess.CompletedProcess) -> str | None:
        if result.returncode != 0:
            return f"exit status {result.returncode}"
        ok = 0
        for line in result.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if (
                event.get("type") == "tool_execution_end"
                and event.get("toolName") == "bash"
                and not event.get("isError")
            ):
                ok += 1
        if ok != calls:
            return f"{ok} successful bash calls in the event stream, expected {calls}"
        return None

    return check


def _check_pi_print(result: subprocess.CompletedProcess) -> str | None:
    if result.returncode != 0:
        return f"exit status {result.returncode}"
    if FINAL_TEXT not in result.stdout:
        return f"final text missing from stdout {result.stdout[-200:]!r}"
    return None


def ours_configs(env: Env, scripts: tuple[Path, Path, Path, Path]) -> list[E2EConfig]:
    script20, _, script0, _ = scripts
    pi = pi_console_script()
    hook_args = [a for p in env.hooks for a in ("-e", str(p))]
    configs = []
    for sandbox in (True, False) if env.bwrap else (False,):
        flag = "--sandbox" if sandbox else "--no-sandbox"
        name = "sandbox" if sandbox else "nosandbox"
        for suffix, label, script, hooks, calls in (
            ("20", "20 bash calls", script20, False, E2E_CALLS),
            ("20_hooks", "20 calls + 10 hook exts", script20, True, E2E_CALLS),
            ("0", "0 calls (start+exit)", script0, False, 0),
        ):
            argv = [*pi, flag, "-p", "--model", "scripted", "--script", str(script), "--no-session"]
            argv += [*(hook_args if hooks else []), "go"]
            configs.append(
                E2EConfig(
                    f"e.ours_{name}_{suffix}", f"pi {flag}, {label}", argv, _check_ours(calls)
                )
            )
    return configs


def ensure_pi(pi_dir: Path, report: Report) -> Path | None:
    """Install the TypeScript pi into ``pi_dir`` (only called with --with-pi); returns cli.js."""
    cli = pi_dir / "node_modules" / "@mariozechner" / "pi-coding-agent" / "dist" / "cli.js"
    package_json = cli.parent.parent / "package.json"
    try:
        if json.loads(package_json.read_text()).get("version") == PI_VERSION and cli.exists():
            print(f"  reusing {PI_PACKAGE}@{PI_VERSION} in {pi_dir}", flush=True)
            return cli
    except (OSError, ValueError):
        pass
    npm, node = shutil.which("npm"), shutil.which("node")
    if not npm or not node:
        report.skip("pi anchor: node and npm are needed (not on PATH)")
        return None
    pi_dir.mkdir(parents=True, exist_ok=True)
    if not (pi_dir / "package.json").exists():
        (pi_dir / "package.json").write_text('{"name": "pi-bench-anchor", "private": true}\n')
    print(f"  npm install {PI_PACKAGE}@{PI_VERSION} into {pi_dir} ...", flush=True)
    start = time.perf_counter_ns()
    argv = [
        npm,
        "install",
        "--no-audit",
        "--no-fund",
        "--prefix",
        str(pi_dir),
        f"{PI_PACKAGE}@{PI_VERSION}",
    ]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.skip(f"pi anchor: npm install failed: {exc}")
        return None
    report.notes.append(
        f"npm install took {ms(time.perf_counter_ns() - start) / 1000:.1f} s (not timed)"
    )
    if result.returncode != 0 or not cli.exists():
        tail = (result.stderr or result.stdout).strip()[-400:]
        report.skip(f"pi anchor: npm install failed (exit {result.returncode}): {tail}")
        return None
    return cli


def pi_configs(
    env: Env,
    report: Report,
    scripts: tuple[Path, Path, Path, Path],
    *,
    with_pi: bool,
    pi_dir: Path,
    anchors: Path,
) -> list[E2EConfig]:
    """The TS pi scenarios, or [] (with the reason reported) when it cannot run."""
    if not with_pi:
        report.skip("TS pi anchor: pass --with-pi to install and run it beside ours")
        return []
    faux, hook = anchors / "pi-faux-provider.ts", anchors / "pi-hook-ext.ts"
    if not faux.is_file() or not hook.is_file():
        report.skip(f"TS pi anchor: {faux} or {hook} not found (use --anchors DIR)")
        return []
    cli = ensure_pi(pi_dir, report)
    node = shutil.which("node")
    if cli is None or node is None:
        return []
    hook_dir = env.root / "pi-hooks"
    hook_dir.mkdir(exist_ok=True)
    hook_args = []
    for i in range(N_HOOKS):  # ten distinct files, as for ours
        copy = hook_dir / f"hook_{i:02d}.ts"
        shutil.copyfile(hook, copy)
        hook_args += ["-e", str(copy)]
    _, json20, _, json0 = scripts
    configs = []
    for key, label, script, hooks, calls in (
        ("e.pi_20", "TS pi, 20 bash calls", json20, False, E2E_CALLS),
        ("e.pi_20_hooks", "TS pi, 20 calls + 10 hook exts", json20, True, E2E_CALLS),
        ("e.pi_0", "TS pi, 0 calls (start+exit)", json0, False, 0),
    ):
        common = [node, str(cli), "--offline", "-e", str(faux), *(hook_args if hooks else [])]
        common += ["--provider", "faux", "--model", "faux-1", "--no-session"]
        configs.append(
            E2EConfig(
                key,
                label,
                [*common, "-p", "go"],
                _check_pi_print,
                env={"PI_FAUX_SCRIPT": str(script)},
                # The warm-up run streams events, to check that every bash call really ran.
                warmup_argv=[*common, "--mode", "json", "go"],
                warmup_check=_check_pi_json(calls),
            )
        )
    return configs


def bench_e2e(
    env: Env,
    report: Report,
    scripts: tuple[Path, Path, Path, Path],
    *,
    with_pi: bool,
    pi_dir: Path,
    anchors: Path,
) -> None:
    configs = ours_configs(env, scripts)
    configs += pi_configs(env, report, scripts, with_pi=with_pi, pi_dir=pi_dir, anchors=anchors)
    run_e2e(env, configs, env.sizes.e2e_runs, report)

    a_base = {"base": "a.python_start", "base_label": "python -I -c pass p50 (a)"}
    if env.bwrap:
        report.row(
            "(e)",
            "pi --sandbox, 20 bash calls, median",
            "e.ours_sandbox_20",
            base="e.ours_nosandbox_20",
            base_label="pi --no-sandbox, same script",
        )
        report.row(
            "(e)",
            "pi --sandbox + 10 hook exts, median",
            "e.ours_sandbox_20_hooks",
            base="e.ours_sandbox_20",
            base_label="pi --sandbox, no extensions",
        )
    report.row(
        "(e)",
        "pi --no-sandbox + 10 hook exts, median",
        "e.ours_nosandbox_20_hooks",
        base="e.ours_nosandbox_20",
        base_label="pi --no-sandbox, no extensions",
    )
    if env.bwrap:
        report.row(
            "(e)", "pi --sandbox, 0 calls (start+exit), median", "e.ours_sandbox_0", **a_base
        )
    report.row(
        "(e)", "pi --no-sandbox, 0 calls (start+exit), median", "e.ours_nosandbox_0", **a_base
    )
    # Cost of one model turn + bash call inside a session, from the medians.
    for name, base in (
        ("sandbox", "d.pipeline_sandboxed"),
        ("nosandbox", "d.pipeline_unsandboxed"),
    ):
        full, zero = report.stat(f"e.ours_{name}_20"), report.stat(f"e.ours_{name}_0")
        if full is None or zero is None:
            continue
        per_call = (full - zero) / E2E_CALLS
        report.series[f"e.ours_{name}_per_call_derived"] = {"p50": round(per_call, 3)}
        flag = "--sandbox" if name == "sandbox" else "--no-sandbox"
        report.row(
            "(e)",
            f"  (20-call - 0-call)/20, {flag}",
            None,
            value=per_call,
            n=E2E_CALLS,
            base=base,
            base_label=f"(d) ToolPipeline p50, {'' if name == 'sandbox' else 'un'}sandboxed",
        )

    if "e.pi_20" not in report.series and "e.pi_0" not in report.series:
        return
    vs_pi = "TS pi, same scenario (ours/pi)"
    if env.bwrap:
        report.row(
            "(e/pi)",
            "ours --sandbox, 20 bash calls",
            "e.ours_sandbox_20",
            base="e.pi_20",
            base_label=vs_pi,
        )
    report.row(
        "(e/pi)",
        "ours --no-sandbox, 20 bash calls",
        "e.ours_nosandbox_20",
        base="e.pi_20",
        base_label=vs_pi,
    )
    if env.bwrap:
        report.row(
            "(e/pi)",
            "ours --sandbox + 10 hook exts",
            "e.ours_sandbox_20_hooks",
            base="e.pi_20_hooks",
            base_label=vs_pi,
        )
    report.row(
        "(e/pi)",
        "ours --no-sandbox + 10 hook exts",
        "e.ours_nosandbox_20_hooks",
        base="e.pi_20_hooks",
        base_label=vs_pi,
    )
    if env.bwrap:
        report.row(
            "(e/pi)",
            "ours --sandbox, 0 calls (start+exit)",
            "e.ours_sandbox_0",
            base="e.pi_0",
            base_label=vs_pi,
        )
    report.row(
        "(e/pi)",
        "ours --no-sandbox, 0 calls (start+exit)",
        "e.ours_nosandbox_0",
        base="e.pi_0",
        base_label=vs_pi,
    )
    report.row(
        "(e/pi)",
        "TS pi + 10 hook exts",
        "e.pi_20_hooks",
        base="e.pi_20",
        base_label="TS pi, no extensions",
    )
    full, zero = report.stat("e.pi_20"), report.stat("e.pi_0")
    if full is not None and zero is not None:
        report.series["e.pi_per_call_derived"] = {"p50": round((full - zero) / E2E_CALLS, 3)}
        for name in ("sandbox", "nosandbox"):
            key = f"e.ours_{name}_per_call_derived"
            if key in report.series:
                flag = "--sandbox" if name == "sandbox" else "--no-sandbox"
                report.row(
                    "(e/pi)",
                    f"  (20-call - 0-call)/20, ours {flag}",
                    key,
                    n=E2E_CALLS,
                    base="e.pi_per_call_derived",
                    base_label="TS pi, same derivation (ours/pi)",
                )


# --- (f) where the time goes ---------------------------------------------------------------


def bench_pieces(env: Env, report: Report) -> None:
    n = env.sizes.pieces
    penv = base_env(env.home)
    py = [sys.executable, "-I", "-c"]
    pieces: list[tuple[str, str, list[str], dict[str, str]]] = [
        (
            "f.import_worker",
            "python -I: import pi_sandbox.worker.runtime",
            [*py, "import pi_sandbox.worker.runtime"],
            penv,
        ),
        ("f.import_trio", "python -I: import trio", [*py, "import trio"], penv),
        ("f.import_pydantic", "python -I: import pydantic", [*py, "import pydantic"], penv),
        (
            "f.import_supervisor",
            "python -I: import pi_sandbox.supervisor.run",
            [*py, "import pi_sandbox.supervisor.run"],
            penv,
        ),
        (
            "f.pi_version",
            "pi --version (console script)",
            [*pi_console_script(), "--version"],
            dict(os.environ),
        ),
        ("f.true", "/bin/true, fresh", ["/bin/true"], penv),
        ("f.bash_true", "bash -c true, fresh (no bwrap)", ["/bin/bash", "-c", "true"], penv),
    ]
    for key, _label, argv, run_env in pieces:
        if not Path(argv[0]).is_absolute():
            argv[0] = shutil.which(argv[0]) or argv[0]
        report.add_series(key, spawn_series(argv, run_env, n))
    if env.bwrap:
        profile = worker_profile(
            "extension", workspace=env.workspace, home=env.home, agent_dir=env.agent_dir
        )
        report.add_series(
            "f.bwrap_true",
            spawn_series(sandbox_argv(profile, ["/bin/true"], env.bwrap), {}, n),
        )
        report.add_series(
            "f.bwrap_python",
            spawn_series(
                sandbox_argv(profile, [sys.executable, "-I", "-c", "pass"], env.bwrap),
                {},
                n,
            ),
        )
        report.add_series(
            "f.bwrap_worker_import",
            spawn_series(
                sandbox_argv(
                    profile,
                    [sys.executable, "-I", "-c", "import pi_sandbox.worker.runtime"],
                    env.bwrap,
                ),
                {},
                n,
            ),
        )
    base = ("a.python_start", "python -I -c pass p50 (a)")
    report.row(
        "(f)",
        "python -I: import pi_sandbox.worker.runtime",
        "f.import_worker",
        base=base[0],
        base_label=base[1],
    )
    report.row("(f)", "python -I: import trio", "f.import_trio", base=base[0], base_label=base[1])
    report.row(
        "(f)", "python -I: import pydantic", "f.import_pydantic", base=base[0], base_label=base[1]
    )
    report.row(
        "(f)",
        "python -I: import pi_sandbox.supervisor.run",
        "f.import_supervisor",
        base=base[0],
        base_label=base[1],
    )
    report.row(
        "(f)", "pi --version (no heavy imports)", "f.pi_version", base=base[0], base_label=base[1]
    )
    if env.bwrap:
        report.row(
            "(f)",
            "bwrap <ext profile> -- /bin/true",
            "f.bwrap_true",
            base="f.true",
            base_label="/bin/true, fresh",
        )
        report.row(
            "(f)",
            "bwrap <ext profile> -- python -I -c pass",
            "f.bwrap_python",
            base=base[0],
            base_label=base[1],
        )
        report.row(
            "(f)",
            "bwrap <ext profile> -- python: import worker",
            "f.bwrap_worker_import",
            base="f.import_worker",
            base_label="same import, no bwrap",
        )
    report.row(
        "(f)",
        "bash -c true, fresh, no bwrap",
        "f.bash_true",
        base="f.true",
        base_label="/bin/true, fresh",
    )


def importtime_buckets(
    argv: Sequence[str], env: dict[str, str], cwd: Path, runs: int
) -> dict[str, float]:
    """Import cost of running ``argv`` (a python command) under ``-X importtime``, by package.

    Each module's *self* time is added to the bucket of its top-level package name
    (the stdlib is one bucket), so the buckets do not overlap and add up to ``total``,
    the whole time the process spent importing. Medians over ``runs`` runs, in ms.
    """
    stdlib = set(sys.stdlib_module_names)
    per_bucket: dict[str, list[float]] = {}
    for _ in range(runs):
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"importtime run failed: {result.stderr[-400:]}")
        sums: dict[str, float] = {}
        for line in result.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            own, _cumulative, name = line.removeprefix("import time:").split("|", 2)
            if not own.strip().isdigit():
                continue  # the header line
            top = name.strip().split(".")[0]
            bucket = "stdlib" if top in stdlib or top.startswith("_") else top
            sums[bucket] = sums.get(bucket, 0.0) + int(own) / 1000
            sums["total"] = sums.get("total", 0.0) + int(own) / 1000
            if top == "pi_sandbox":  # its self time is mostly pydantic model building
                key = "module " + name.strip()
                sums[key] = sums.get(key, 0.0) + int(own) / 1000
        for bucket, value in sums.items():
            per_bucket.setdefault(bucket, []).append(value)
    medians = {
        name: round(statistics.median(v + [0.0] * (runs - len(v))), 2)
        for name, v in per_bucket.items()
    }
    return dict(sorted(medians.items(), key=lambda kv: -kv[1]))


def bench_imports(env: Env, report: Report, script0: Path) -> None:
    runs = env.sizes.importtime_runs
    agent_dir = env.root / "importtime-agent"
    agent_dir.mkdir(exist_ok=True)
    # The supervisor: a real `pi --no-sandbox -p` run of the 0-call script, run the way
    # the console script runs it (no -I), so lazily imported modules count too.
    cli = [
        sys.executable,
        "-X",
        "importtime",
        "-c",
        "import sys; from pi_sandbox.cli import main; sys.exit(main())",
        "--no-sandbox",
        "-p",
        "--model",
        "scripted",
        "--script",
        str(script0),
        "--no-session",
        "go",
    ]
    report.imports["pi (supervisor), 0-call -p run"] = importtime_buckets(
        cli, {**os.environ, "PI_CODING_AGENT_DIR": str(agent_dir)}, env.workspace, runs
    )
    worker = [sys.executable, "-I", "-X", "importtime", "-c", "import pi_sandbox.worker.runtime"]
    report.imports["worker: import pi_sandbox.worker.runtime"] = importtime_buckets(
        worker, base_env(env.home), env.workspace, runs
    )


def render_imports(report: Report, top: int = 8) -> str:
    lines = [
        "import cost by package (python -X importtime, self times summed per top-level package, "
        "median ms):"
    ]
    for what, costs in report.imports.items():
        buckets = [(n, v) for n, v in costs.items() if n != "total" and not n.startswith("module ")]
        modules = [
            (n.removeprefix("module "), v) for n, v in costs.items() if n.startswith("module ")
        ]
        lines.append(
            f"  {what}: total {fmt_ms(costs.get('total'))} = "
            + ", ".join(f"{name} {value:.2f}" for name, value in buckets[:top])
            + (", …" if len(buckets) > top else "")
        )
        if modules:
            lines.append(
                "      largest pi_sandbox modules (self): "
                + ", ".join(f"{name} {value:.2f}" for name, value in modules[:4])
            )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (about a minute)")
    parser.add_argument(
        "--json", type=Path, metavar="OUT", help="also write every number as JSON to OUT"
    )
    parser.add_argument(
        "--with-pi",
        action="store_true",
        help=f"install {PI_PACKAGE}@{PI_VERSION} under /tmp (if needed) and run it beside ours",
    )
    parser.add_argument(
        "--pi-dir", type=Path, default=DEFAULT_PI_DIR, help="scratch folder for the TS pi install"
    )
    parser.add_argument(
        "--anchors", type=Path, default=DEFAULT_ANCHORS, help="folder with pi-faux-provider.ts"
    )
    parser.add_argument(
        "--only", default="abcdefg", help="sections to run, e.g. 'abc' (default: all)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    report = Report()
    wall = time.perf_counter_ns()
    env = make_env(sizes, report)
    machine = machine_info(env.bwrap)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(
        f"pi-sandbox {machine['pi_sandbox']} benchmarks  {machine['date']}  ({'quick' if args.quick else 'full'})"
    )
    print(
        f"machine: nproc={machine['nproc']} cpu={machine['cpu']!r} kernel={machine['kernel']} "
        f"loadavg={' '.join(f'{x:.2f}' for x in machine['loadavg_at_start'])}"
    )
    print(
        f"python {machine['python']} ({machine['python_executable']}); bwrap: {machine['bwrap_version']} "
        f"({machine['bwrap']}); node: {machine['node']}"
    )
    print(flush=True)

    sections: list[tuple[str, str, Callable[[], None]]] = [
        ("a", "(a) python start-up", lambda: bench_python_start(env, report)),
        ("b", "(b) worker spawn → handshake", lambda: bench_handshake(env, report)),
        ("c", "(c) tool_call round trip", lambda: bench_round_trip(env, report)),
        ("d", "(d) bash true through the pipeline", lambda: bench_pipeline(env, report)),
    ]
    scripts = write_scripts(env)
    sections.append(
        (
            "e",
            "(e) end to end",
            lambda: bench_e2e(
                env, report, scripts, with_pi=args.with_pi, pi_dir=args.pi_dir, anchors=args.anchors
            ),
        )
    )
    sections.append(
        (
            "f",
            "(f) where the time goes",
            lambda: (bench_pieces(env, report), bench_imports(env, report, scripts[2])),
        )
    )
    sections.append(("g", "(g) sandbox hardening", lambda: bench_hardening(env, report)))
    if "a" not in args.only and any(s in args.only for s in "bf"):
        args.only += "a"  # (b) and (f) are measured against (a)
    try:
        for letter, title, run in sections:
            if letter not in args.only:
                continue
            print(f"{title} ...", flush=True)
            start = time.perf_counter_ns()
            run()
            report.section_seconds[title] = round(ms(time.perf_counter_ns() - start) / 1000, 2)
    finally:
        if not args.keep:
            shutil.rmtree(env.root, ignore_errors=True)

    total_s = ms(time.perf_counter_ns() - wall) / 1000
    machine["loadavg_at_end"] = os.getloadavg()
    print()
    print(render_table(report.rows))
    if report.imports:
        print()
        print(render_imports(report))
    if report.skipped:
        print()
        print("skipped: " + "\n         ".join(report.skipped))
    for note in report.notes:
        print(f"note: {note}")
    print()
    print(
        "section wall time (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in report.section_seconds.items())
    )
    load = machine["loadavg_at_end"]
    print(f"total {total_s:.1f} s; loadavg at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    if args.json:
        data = {
            "machine": machine,
            "command": command,
            "mode": "quick" if args.quick else "full",
            "total_seconds": round(total_s, 2),
            "section_seconds": report.section_seconds,
            "rows": [r.as_json() for r in report.rows],
            "series_ms": report.series,
            "imports_ms": report.imports,
            "skipped": report.skipped,
            "notes": report.notes,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
