"""What compaction costs a long session (issue 15).

Builds an in-memory session of about 10,000 entries (user prompts, assistant turns
with tool calls and results of random sizes; seeded) and times, each beside the
baseline of walking the branch once (``SessionWriter.branch``):

- the threshold check made before every model request (``estimate_context_tokens``),
  with a recent usage (the ordinary case: only the messages after it are estimated)
  and without any usage (everything estimated);
- ``prepare_compaction`` (the cut and the messages to summarise), made once per
  compaction.

Run: ``python bench/bench_sessions_compaction.py [--entries N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from pi_sandbox.supervisor.sessions.compaction import estimate_context_tokens, prepare_compaction
from pi_sandbox.supervisor.sessions.compaction_settings import CompactionSettings
from pi_sandbox.supervisor.sessions.session_file import SessionWriter


def _session(entries: int, seed: int = 1) -> SessionWriter:
    rng = random.Random(seed)
    writer = SessionWriter.in_memory(Path("/bench"))
    span = 0
    while len(writer.entries) < entries:
        text = f"prompt {span} " + "u" * rng.randint(0, 600)
        writer.append_message(
            {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}
        )
        for turn in range(rng.randint(0, 4)):
            calls = [
                {
                    "type": "toolCall",
                    "id": f"c{span}_{turn}_{n}",
                    "name": "read",
                    "arguments": {"path": f"f{n}.py"},
                }
                for n in range(rng.randint(0, 3))
            ]
            writer.append_message(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "a" * 200}, *calls],
                    "stopReason": "toolUse" if calls else "stop",
                    "timestamp": 1,
                }
            )
            for call in calls:
                writer.append_message(
                    {
                        "role": "toolResult",
                        "toolCallId": call["id"],
                        "toolName": "read",
                        "content": [{"type": "text", "text": "r" * rng.randint(0, 900)}],
                        "isError": False,
                        "timestamp": 1,
                    }
                )
        span += 1
    return writer


def _ms(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    writer = _session(args.entries)
    branch = writer.branch()
    base = _ms(writer.branch, args.repeat)
    rows = [("walk the branch (baseline)", base)]
    rows.append(
        ("threshold check, no usage", _ms(lambda: estimate_context_tokens(branch), args.repeat))
    )
    writer.append_message(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "stopReason": "stop",
            "usage": {"totalTokens": 90_000},
            "timestamp": 1,
        }
    )
    writer.append_message(
        {"role": "user", "content": [{"type": "text", "text": "next"}], "timestamp": 1}
    )
    branch = writer.branch()
    rows.append(
        ("threshold check, recent usage", _ms(lambda: estimate_context_tokens(branch), args.repeat))
    )
    settings = CompactionSettings()
    rows.append(
        ("prepare_compaction", _ms(lambda: prepare_compaction(branch, settings), args.repeat))
    )
    print(f"session of {len(writer.entries)} entries, median of {args.repeat}")
    for name, value in rows:
        print(f"{name:34} {value:9.3f} ms  {value / base:6.2f}x baseline")


if __name__ == "__main__":
    main()
