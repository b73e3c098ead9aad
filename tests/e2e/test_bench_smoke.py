"""The benchmark script still runs against the current code (it drives internal APIs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "run_benchmarks.py"


@pytest.mark.usefixtures("require_bwrap")
def test_the_round_trip_and_hardening_sections_run():
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--only", "cg"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "tool_call dispatch, 1 no-op hook worker" in result.stdout
    assert "bash true via the full pipeline, sandboxed" in result.stdout
