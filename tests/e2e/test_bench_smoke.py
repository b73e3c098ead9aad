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


def test_the_resource_discovery_section_runs():
    """(j) needs no bwrap: it builds a skills/prompts tree and checks what loads."""
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--only", "j"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "discover 1,000 skills + 200 prompt templates" in result.stdout
    assert "bare os.walk of the same tree p50" in result.stdout
    assert "(j) target discovery p50 <= 3x a bare os.walk of the same tree" in result.stdout
    assert "900 skills loaded, 100 error diagnostics" in result.stdout
