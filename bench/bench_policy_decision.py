#!/usr/bin/env python3
"""Policy decisions against one no-op worker round trip (issue 20 target 4).

The calls and the 200-rule policy are those of ``run_benchmarks.py`` section (h)
(imported from it). Three ways of timing ``evaluate_tool_call``, each per call
(µs, nearest-rank percentiles), in rounds that alternate with the no-op
``tool_call`` round trip to one unsandboxed worker (the baseline, p50):

- ``cold``: the shell parse cache is emptied before every call, so every command
  is parsed afresh: the cost of a command the gate has not seen;
- ``h-style``: one untimed pass, then a timed pass over the same 1,000 calls, as
  section (h) does (the parse cache holds 256 texts, fewer than the 685 distinct
  commands, so this is mostly cold as well);
- ``repeat``: each call decided twice in a row, the second one timed: what a
  re-check of the same call costs (a hook that changed nothing, an approval
  scope's masked re-evaluation).

Also a "min of 5" figure per call for ``cold`` (the cost without the scheduler
noise of a shared machine). The load average is printed beside each round.

    .venv/bin/python bench/bench_policy_decision.py [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_benchmarks as rb
import trio

from pi_sandbox.policies import _shell_grammar as grammar
from pi_sandbox.policies import evaluate_tool_call, load_policies


def _pct(samples: list[int], q: float) -> float:
    return rb.percentile(samples, q) / 1000


def _clear_parse_cache() -> None:
    # Also runs against a tree without the cache (the baseline: no-op there).
    cache = getattr(grammar, "_cache", None)
    if cache is not None:
        cache.clear()


def _series(policy: Any, calls: list[Any], ws: Path, mode: str) -> list[int]:
    clock = time.perf_counter_ns
    out: list[int] = []
    clear = _clear_parse_cache
    if mode == "h-style":
        clear()
        for tool, args in calls:
            evaluate_tool_call(policy, tool, args, workspace=ws)
    for tool, args in calls:
        if mode == "cold":
            clear()
        elif mode == "repeat":
            evaluate_tool_call(policy, tool, args, workspace=ws)
        start = clock()
        evaluate_tool_call(policy, tool, args, workspace=ws)
        out.append(clock() - start)
    return out


def _min_of(policy: Any, calls: list[Any], ws: Path, k: int = 5) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for tool, args in calls:
        best = None
        for _ in range(k):
            _clear_parse_cache()
            start = clock()
            evaluate_tool_call(policy, tool, args, workspace=ws)
            took = clock() - start
            best = took if best is None else min(best, took)
        out.append(best)
    return out


def _round_trip(env: Any, n: int) -> list[int]:
    return trio.run(lambda: rb._dispatch_series(env, sandbox=False, n=n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-trips", type=int, default=300)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="pi-bench-policy-"))
    workspace, home, agent_dir, hooks_dir = (
        root / n for n in ("workspace", "home", "agent", "hooks")
    )
    for d in (workspace, home, agent_dir, hooks_dir):
        d.mkdir()
    hook = hooks_dir / "hook_00.py"
    hook.write_text(rb.HOOK_EXTENSION)
    env = rb.Env(root, workspace, home, agent_dir, [hook], None, rb.QUICK)
    policy_path = root / "bench-policy.yaml"
    rb.write_bench_policy(policy_path)
    policy = load_policies([policy_path])
    calls = rb._CallGen().calls(rb.H_POLICY_CALLS)

    results: list[dict[str, Any]] = []
    for index in range(options.rounds):
        load = os.getloadavg()
        rt = _round_trip(env, options.round_trips)
        row: dict[str, Any] = {"round": index + 1, "loadavg": [round(x, 2) for x in load]}
        row["round_trip_p50_us"] = round(_pct(rt, 50), 1)
        for mode in ("cold", "h-style", "repeat"):
            samples = _series(policy, calls, workspace, mode)
            row[mode] = {
                "p50_us": round(_pct(samples, 50), 1),
                "p99_us": round(_pct(samples, 99), 1),
            }
        best = _min_of(policy, calls, workspace)
        row["cold_min_of_5"] = {
            "p50_us": round(_pct(best, 50), 1),
            "p99_us": round(_pct(best, 99), 1),
        }
        results.append(row)
        print(
            f"round {index + 1} (load {row['loadavg'][0]:.2f}): round trip p50 "
            f"{row['round_trip_p50_us']:.0f} µs | "
            + " | ".join(
                f"{mode} p50 {row[mode]['p50_us']:.0f} p99 {row[mode]['p99_us']:.0f}"
                for mode in ("cold", "h-style", "repeat", "cold_min_of_5")
            )
            + " µs",
            flush=True,
        )
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
