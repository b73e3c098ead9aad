"""The provider streaming bench still runs against the current code (it drives internal APIs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_provider_stream.py"


def test_the_provider_stream_bench_runs_both_formats_and_the_import_rows() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--tokens", "200", "--rounds", "1", "--imports", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for row in (
        "anthropic: AnthropicProvider",
        "openai: OpenAIProvider",
        "CLI start path + providers.anthropic",
    ):
        assert row in result.stdout
