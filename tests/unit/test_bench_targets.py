"""bench/run_benchmarks.py's issue 20 pieces: the targets table and the memory sum over
a process tree (the rest of the script is exercised by tests/e2e/test_bench_smoke.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "run_benchmarks.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("run_benchmarks", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_benchmarks"] = module
    spec.loader.exec_module(module)
    return module


def test_a_target_is_met_at_or_below_its_limit_and_not_met_above(bench):
    def verdict(ours, pi, limit=1.0, stretch=None):
        return bench.Target("x", ours, {"pi16": pi}, "pi16", limit, stretch).verdict

    assert verdict(100.0, 100.0) == "met"
    assert verdict(101.0, 100.0) == "NOT met"
    assert verdict(60.0, 100.0, stretch=0.7) == "met, stretch met"
    assert verdict(None, 100.0) == "no data"
    assert verdict(50.0, None) == "no data"
    assert verdict(50.0, 100.0, limit=None) == ""


def test_the_targets_table_has_one_row_per_config_with_ours_pi_ratio_target_and_verdict(bench):
    targets = [
        bench.Target("(e) 10 hooks, --sandbox", 900.0, {"pi16": 1000.0, "pi073": 1200.0},
                     "pi16", 1.0, 0.7, load1=3.5, paired=[0.8, 1.1, 0.9]),
        bench.Target("(i.e) memory, Pss", 160.0, {"pi16": 100.0}, "pi16", 1.5, unit="MiB"),
    ]  # fmt: skip
    lines = bench.render_targets(targets).splitlines()
    assert lines[0].split() == [
        "config", "ours", "pi", "1.6.0", "ratio", "target", "verdict",
        "pi", "0.73.1", "ours/0.73.1", "paired", "p50", "(min-max)", "load",
    ]  # fmt: skip
    assert len(lines) == 2 + len(targets)
    first, second = lines[2], lines[3]
    assert "0.90x" in first and "<= 1.00x (stretch 0.70x)" in first and " met" in first
    assert "0.75x" in first  # ours / pi 0.73.1
    assert "0.90x (0.80-1.10)" in first and first.rstrip().endswith("3.5")
    assert "1.60x" in second and "NOT met" in second and "160.00 MiB" in second


def test_memory_is_summed_over_every_process_of_the_tree(bench):
    # A child that starts a grandchild; both idle until killed.
    code = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; print(1, flush=True); "
        "time.sleep(60)'], stdout=subprocess.PIPE)\n"
        "g.stdout.readline(); print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        tree = bench._process_tree(child.pid)
        assert len(tree) == 2
        memory = bench.tree_memory(child.pid)
        assert memory["processes"] == 2
        own = [bench._vmrss_kb(pid) for pid in tree]
        assert memory["rss_kb"] >= max(own)
        assert 0 < memory["pss_kb"] <= memory["rss_kb"]
        assert memory["bwrap"] == 0 and memory["sandboxed_workers"] == 0
    finally:
        for pid in bench._process_tree(child.pid)[::-1]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        child.wait(timeout=30)
