"""``tool_call`` dispatch through 10 hooking extension workers (issue 20 target 2).

Each of the 10 extensions is a separate worker process (sandboxed: its own bwrap
sandbox) with one ``tool_call`` handler that returns ``None``; one sample is one
``WorkerPool.dispatch("tool_call", ...)`` through all of them, as bench/run_benchmarks.py
section (i.b) measures it (that file is not imported: another branch owns it). Target:
p99 < 2 ms. Prints p50/p90/p99 (ms) per run and the load average beside each.

Three configurations, alternated within each run (so the baseline is measured in the
same run, under the same load): ``baseline`` is the path before issue 20 (handlers
without ``observe_only``, the channel read and written through trio's socket stream);
``direct`` the same handlers with the channel's direct reads/writes; ``observe_only``
the handlers registered with ``observe_only=True`` (sent together, applied in load
order) plus the direct reads/writes.

Usage: ``python bench/bench_hook_dispatch.py [--n 1000] [--runs 3] [--hooks 10]
[--sandbox yes|no|both] [--configs baseline,direct,observe_only] [--profile out.prof]``.
``--mutate K`` makes extension K (0-based) change the input on every call.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.supervisor.extensions.extension_discovery import ExtensionSource
from pi_sandbox.supervisor.workers import rpc_channel
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

TRIVIAL = '''"""bench: one tool_call hook that only looks."""


def extension(pi):
    def on_tool_call(event, ctx):
        return None

    pi.on("tool_call", on_tool_call)
'''

OBSERVING = TRIVIAL.replace(
    'pi.on("tool_call", on_tool_call)', 'pi.on("tool_call", on_tool_call, observe_only=True)'
)

MUTATING = '''"""bench: one tool_call hook that changes the input on every call."""


def extension(pi):
    def on_tool_call(event, ctx):
        event.input["seen"] = event.input.get("seen", 0) + 1
        return None

    pi.on("tool_call", on_tool_call)
'''


_DIRECT = [True]
_channel_init = rpc_channel.RpcChannel.__init__


def _init_channel(self: rpc_channel.RpcChannel, *args: Any, **kwargs: Any) -> None:
    """``RpcChannel.__init__``; for the baseline, without the direct socket path."""
    _channel_init(self, *args, **kwargs)
    if not _DIRECT[0]:
        self._socket = None


rpc_channel.RpcChannel.__init__ = _init_channel  # type: ignore[method-assign]

CONFIGS = {"baseline": (False, False), "direct": (False, True), "observe_only": (True, True)}
"""name → (handlers registered with observe_only, channel direct reads/writes)."""


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a sandboxed worker is bwrap's grandchild)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending += children.get(current, [])
    return found


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of every thread of ``pids`` (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def _payload(i: int) -> dict[str, Any]:
    return {"tool_name": "bash", "tool_call_id": f"call_{i}", "input": {"command": "true"}}


async def _series(
    root: Path,
    *,
    hooks: int,
    sandbox: bool,
    n: int,
    mutate: int | None,
    profile: str | None,
    observe: bool,
    direct: bool,
    cpu: dict[str, float],
) -> list[int]:
    ws, home, agent, exts = (root / d for d in ("ws", "home", "agent", "exts"))
    for d in (ws, home, agent, exts):
        d.mkdir(exist_ok=True)
    sources = []
    for i in range(hooks):
        path = exts / f"hook_{i:02d}.py"
        path.write_text(MUTATING if i == mutate else OBSERVING if observe else TRIVIAL)
        sources.append(ExtensionSource(path, "cli"))
    pool = WorkerPool(PoolConfig(cwd=ws, agent_dir=agent, home=home, sandbox=sandbox))
    samples: list[int] = []
    _DIRECT[0] = direct
    try:
        async with trio.open_nursery() as nursery:
            try:
                await pool.start(nursery, sources)
                if pool.load_errors:
                    raise RuntimeError(f"extension load errors: {pool.load_errors}")
                for i in range(100):
                    await pool.dispatch("tool_call", _payload(i))
                workers = [p for _, w in pool.extensions if w.pid for p in _process_tree(w.pid)]
                workers_before = _cpu_s(workers)
                usage = resource.getrusage(resource.RUSAGE_SELF)
                own_before = usage.ru_utime + usage.ru_stime
                profiler = None
                if profile:
                    import cProfile

                    profiler = cProfile.Profile()
                    profiler.enable()
                for i in range(n):
                    payload = _payload(i)
                    start = time.perf_counter_ns()
                    outcome = await pool.dispatch("tool_call", payload)
                    samples.append(time.perf_counter_ns() - start)
                    if outcome.errors or outcome.state["block"]:
                        raise RuntimeError(f"dispatch failed: {outcome}")
                    if mutate is not None and outcome.state["input"].get("seen") != 1:
                        raise RuntimeError(f"mutation lost: {outcome.state}")
                usage = resource.getrusage(resource.RUSAGE_SELF)
                cpu["supervisor"] = (usage.ru_utime + usage.ru_stime - own_before) / n
                cpu["workers"] = (_cpu_s(workers) - workers_before) / n
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(profile)
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(pool.log_dir, ignore_errors=True)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hooks", type=int, default=10)
    parser.add_argument("--sandbox", choices=("yes", "no", "both"), default="both")
    parser.add_argument("--configs", default="baseline,direct,observe_only")
    parser.add_argument("--mutate", type=int, default=None)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    variants = {"yes": [True], "no": [False], "both": [False, True]}[args.sandbox]
    configs = args.configs.split(",")
    for run in range(args.runs):
        for sandbox, config in [(s, c) for s in variants for c in configs]:
            observe, direct = CONFIGS[config]
            root = Path(tempfile.mkdtemp(prefix="pi-bench-dispatch-"))
            cpu: dict[str, float] = {}
            try:
                samples = trio.run(
                    lambda sandbox=sandbox, root=root, observe=observe, direct=direct: _series(
                        root,
                        hooks=args.hooks,
                        sandbox=sandbox,
                        n=args.n,
                        mutate=args.mutate,
                        profile=args.profile,
                        observe=observe,
                        direct=direct,
                        cpu=cpu,  # noqa: B023 (run at once, in this iteration)
                    )
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)
            load = os.getloadavg()[0]
            print(
                f"run {run + 1} {'sandboxed' if sandbox else 'unsandboxed'} hooks={args.hooks}"
                f" {config:<12}"
                f"{f' mutate={args.mutate}' if args.mutate is not None else ''}: "
                f"p50 {_pct(samples, 0.5):.2f} ms  p90 {_pct(samples, 0.9):.2f} ms  "
                f"p99 {_pct(samples, 0.99):.2f} ms  mean {statistics.fmean(samples) / 1e6:.2f} ms"
                f"; CPU per dispatch: supervisor {cpu['supervisor'] * 1e3:.2f} ms, "
                f"workers {cpu['workers'] * 1e3:.2f} ms  (n={len(samples)}, load {load:.2f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
