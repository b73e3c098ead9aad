"""The checks bench/run_benchmarks.py makes before timing issue 20's configurations:
our ``--sandbox`` run is really sandboxed, and pi 1.6.0's ``tool_call`` hooks really run.

Each probe has its control in the same call: the sandbox probe must read the sentinel
without ``--sandbox`` (else it reports a failed control), and the hook probe relies on
the unmodified hook letting ``bash`` run (the bench's warm-up checks 20 successful calls).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pi16"]  # the shared `pi16` fixture (tests/e2e/pi16.py)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "run_benchmarks.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("run_benchmarks", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_benchmarks"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def env(bench):
    report = bench.Report()
    made = bench.make_env(bench.QUICK, report)
    yield made
    shutil.rmtree(made.root, ignore_errors=True)


@pytest.mark.usefixtures("require_bwrap")
def test_the_sandbox_probe_passes_for_a_sandboxed_run_and_its_control_reads_the_sentinel(
    bench, env
):
    report = bench.Report()
    assert bench.verify_sandboxed(env, report) is None
    assert any("cannot read a sentinel outside the workspace" in n for n in report.notes)


@pytest.mark.usefixtures("require_bwrap")
def test_the_sandbox_probe_reports_a_run_that_reads_the_sentinel(bench, env, monkeypatch):
    # Control: make "--sandbox" run unsandboxed; the probe must say so.
    real = bench._run_once

    def unsandboxed(env_, argv, extra):
        return real(env_, ["--no-sandbox" if a == "--sandbox" else a for a in argv], extra)

    monkeypatch.setattr(bench, "_run_once", unsandboxed)
    problem = bench.verify_sandboxed(env, bench.Report())
    assert problem is not None and "NOT sandboxed" in problem


def test_pi_1_6_hooks_run_a_blocking_copy_of_the_hook_blocks_bash(bench, env, pi16):
    anchors = bench.DEFAULT_ANCHORS
    if not (anchors / "pi-hook-ext.ts").is_file():
        pytest.skip(f"no pi anchors in {anchors}")
    pi = bench.PiAnchor("pi16", "1.6.0", pi16.node, pi16.cli, anchors / bench.PI16_FAUX)
    assert bench.verify_pi_hooks(env, pi, anchors) is None
