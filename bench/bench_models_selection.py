"""Cost of choosing the model at run start (issue 16): the built-in catalogue, an
optional ~/.pi/agent/models.json (validated with pi's JSON Schema: the jsonschema
import is paid only when the file exists), auth.json, and building the provider.

Each case runs in a fresh interpreter that has already imported the providers
package (which a run imports anyway), so only the issue-16 work is timed.

    python bench/bench_models_selection.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = """
import time, sys
import pi_sandbox.supervisor.providers.openai
from pathlib import Path
t = time.perf_counter()
from pi_sandbox.supervisor.providers.model_selection import choose_model
choice, factory = choose_model(agent_dir=Path(sys.argv[1]), project_dir=None, model=sys.argv[2], cli_key="k")
factory.build(choice.model, initial=True)
print((time.perf_counter() - t) * 1000)
"""


def measure(agent: Path, model: str, runs: int) -> float:
    samples = [
        float(
            subprocess.run(
                [sys.executable, "-c", CASE, str(agent), model],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(runs)
    ]
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        bare, configured = Path(tmp, "bare"), Path(tmp, "configured")
        bare.mkdir()
        configured.mkdir()
        (configured / "models.json").write_text(
            json.dumps(
                {
                    "providers": {
                        "local": {
                            "baseUrl": "http://127.0.0.1:11434/v1",
                            "api": "openai-completions",
                            "models": [{"id": f"m{i}"} for i in range(20)],
                        }
                    }
                }
            )
        )
        print(
            f"choose+build, no models.json, median of {runs}: "
            f"{measure(bare, 'openai/gpt-4o-mini', runs):.1f} ms"
        )
        print(
            f"choose+build, models.json (20 models), median of {runs}: "
            f"{measure(configured, 'local/m3', runs):.1f} ms"
        )


if __name__ == "__main__":
    main()
