"""``tool_search`` over 1,000 deferred tools (issue 19 "Performance": p99 under 5 ms).

Builds a registry of N deferred tools shaped like MCP tools (``mcp__srvK__verb_noun``,
a sentence of description, three or four parameters with descriptions), then times
`ToolExposure.search` for a mix of queries: one rare word, several common words, a
tool's exact name, parameter names and a query that matches nothing. Also reported:
the import of the BM25 library (a fresh interpreter), the first search (index build),
and the rebuild after one more tool registers.

    python bench/bench_tool_search.py [--tools 1000] [--queries 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time

from pi_sandbox.supervisor.agent.tool_exposure import ToolExposure
from pi_sandbox.supervisor.providers.base import ToolDefinition

VERBS = [
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "find",
    "read",
    "write",
    "sync",
    "run",
    "check",
    "fetch",
]
NOUNS = [
    "issue",
    "pull_request",
    "commit",
    "branch",
    "file",
    "page",
    "user",
    "team",
    "project",
    "ticket",
    "build",
    "job",
    "deployment",
    "alert",
    "metric",
    "log",
    "trace",
    "invoice",
    "payment",
    "customer",
    "order",
    "weather",
    "calendar",
]
WORDS = [
    "returns",
    "the",
    "current",
    "state",
    "of",
    "a",
    "resource",
    "with",
    "pagination",
    "filtering",
    "sorting",
    "by",
    "date",
    "owner",
    "label",
    "status",
    "priority",
    "for",
    "the",
    "given",
    "identifier",
    "in",
    "the",
    "workspace",
    "repository",
]


def build(count: int, seed: int = 7) -> ToolExposure:
    rng = random.Random(seed)
    exposure = ToolExposure()
    for i in range(count):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        name = f"mcp__srv{i % 25}__{verb}_{noun}_{i}"
        description = f"{verb.title()} a {noun.replace('_', ' ')}: " + " ".join(
            rng.choice(WORDS) for _ in range(18)
        )
        properties = {
            f"{rng.choice(WORDS)}_{k}": {"type": "string", "description": rng.choice(WORDS)}
            for k in range(rng.randint(3, 4))
        }
        exposure.register(
            ToolDefinition(name, description, {"type": "object", "properties": properties}),
            "deferred",
            f"mcp:srv{i % 25}",
        )
    return exposure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()

    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t=time.perf_counter(); import rank_bm25; "
            "print((time.perf_counter()-t)*1000)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exposure = build(args.tools)
    start = time.perf_counter()
    exposure.search("weather")
    first_ms = (time.perf_counter() - start) * 1000
    queries = [
        "weather",
        "search issue by label and priority",
        "mcp__srv3__get_invoice_3",
        "owner_1 status_2",
        "deployment alert metric",
        "nothing matches zzzz",
        "list the pull requests of a repository",
    ]
    samples: list[float] = []
    for i in range(args.queries):
        query = queries[i % len(queries)]
        start = time.perf_counter()
        exposure.search(query, 5)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    exposure.register(ToolDefinition("late_tool", "Registered late", {}), "deferred", "x")
    start = time.perf_counter()
    exposure.search("late")
    rebuild_ms = (time.perf_counter() - start) * 1000

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(len(samples) * p))]

    print(f"tools: {args.tools}, queries: {args.queries}")
    print(f"import rank_bm25 (with numpy), fresh interpreter: {float(imported):.1f} ms")
    print(
        f"first search (index build): {first_ms:.1f} ms; after one registration: {rebuild_ms:.1f} ms"
    )
    print(
        f"search: p50 {pct(0.5):.3f} ms, p90 {pct(0.9):.3f} ms, p99 {pct(0.99):.3f} ms, "
        f"max {samples[-1]:.3f} ms, mean {statistics.fmean(samples):.3f} ms"
    )
    target = "met" if pct(0.99) < 5.0 else "MISSED"
    print(f"target p99 < 5 ms: {target}")


if __name__ == "__main__":
    main()
