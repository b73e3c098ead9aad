"""bench/bench_long_session.py still runs against the current code (it drives the CLI
and internal APIs: `SessionWriter`, `AgentSession._request`, `LlmContext`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_long_session.py"


def run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_a_short_cli_session_prints_its_blocks_and_the_last_to_first_ratio():
    out = run("--calls", "60", "--block", "20")
    assert "60 bash calls (no sandbox)" in out
    assert "last/first block time:" in out
    assert "supervisor CPU ms/call per block:" in out


def test_the_agent_loop_alone_and_the_context_cost_run():
    assert "last/first" in run("--loop-only", "--calls", "200", "--block", "100")
    out = run("--context-cost", "--calls", "200")
    assert "200 calls (401 entries): ours" in out
