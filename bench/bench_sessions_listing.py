"""Bench: one ``pi sessions`` row and one RPC ``get_tree`` for a 10,000-entry session
(issue 15: a listing must not hold a huge session in memory; get_tree must not recurse).

    python bench/bench_sessions_listing.py

Prints the median of 5 of `catalog.summarise` (streamed row) and `tree.tree_json`,
beside a plain ``json.loads`` of every line of the same file (the cost of parsing it
whole, which a listing avoids holding in memory).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from pi_sandbox.supervisor.sessions.catalog import summarise
from pi_sandbox.supervisor.sessions.session_file import SessionWriter
from pi_sandbox.supervisor.sessions.tree import tree_json


def _median_ms(action) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        writer = SessionWriter.create(Path(tmp) / "agent", Path(tmp), "bench-10k")
        for i in range(5000):
            writer.append_message(
                {"role": "user", "content": [{"type": "text", "text": f"q{i} " + "x" * 200}]}
            )
            writer.append_message(
                {"role": "assistant", "content": [{"type": "text", "text": f"a{i} " + "y" * 400}]}
            )
        writer.close()
        assert writer.path is not None
        path = writer.path
        size = path.stat().st_size / 1e6
        row = _median_ms(lambda: summarise(path))
        whole = _median_ms(lambda: [json.loads(line) for line in path.read_text().splitlines()])
        tree = _median_ms(lambda: tree_json(writer.entries, writer.last_id))
        print(f"10,000-entry session ({size:.1f} MB), median of 5:")
        print(f"  pi sessions row (streamed summarise)   {row:7.1f} ms")
        print(f"  json.loads of every line (baseline)    {whole:7.1f} ms  ratio {row / whole:.2f}x")
        print(f"  get_tree text (tree_json, no recursion) {tree:6.1f} ms")


if __name__ == "__main__":
    main()
