#!/usr/bin/env python3
"""Streaming cost of the OpenAI provider layer with the idle-stream timeout (issue 16
"Performance": per token ≤ 1.5× reading the same SSE bytes with httpx alone).

A loopback server (``tests/integration/fault_servers.py``) streams N text deltas, one
SSE event and one HTTP chunk each. Alternating in one run, best of R:

- baseline: ``httpx`` alone — ``client.stream`` + ``aiter_text`` to the end, nothing
  decoded (same TLS context as the provider's, so client creation costs the same);
- ours: ``OpenAIProvider.complete`` (idle-timeout reader, SSE decoding, JSON, the
  text callback), with the default 300 s idle timeout;
- ours + `AutoRetry.run` around it (what the agent session runs).

Run: ``python bench/bench_provider_retry_stream.py [--tokens N] [--rounds R] [--coalesce]``
(``--coalesce``: the events in 64 KiB HTTP chunks, a worst case for the client's
parsing; without it each event is its own chunk, as a model streams).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from fault_servers import FaultServer, openai_text, stream

from pi_sandbox.supervisor.providers.http_stream import shared_ssl_context
from pi_sandbox.supervisor.providers.openai import OpenAIProvider
from pi_sandbox.supervisor.providers.retry import AutoRetry


async def _baseline(url: str) -> int:
    size = 0
    async with (
        httpx.AsyncClient(timeout=30, verify=shared_ssl_context()) as client,
        client.stream("POST", url + "/chat/completions", json={"model": "m"}) as response,
    ):
        async for text in response.aiter_text():
            size += len(text)
    return size


async def _ours(url: str, retry: AutoRetry | None) -> int:
    provider = OpenAIProvider("m", url, None)
    seen = 0

    async def delta(text: str) -> None:
        nonlocal seen
        seen += 1

    async def attempt():
        return await provider.complete(system_prompt="", messages=[], tools=[], on_text_delta=delta)

    async def emit(event: dict) -> None:
        pass

    await (retry.run(attempt, emit) if retry else attempt())
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--coalesce",
        action="store_true",
        help="send the events in 64 KiB HTTP chunks instead of one chunk per event "
        "(the client's parsing then dominates, not the server's pacing)",
    )
    args = parser.parse_args()
    body = openai_text(*[f"tok{i} " for i in range(args.tokens)])
    if args.coalesce:
        joined = b"".join(body)
        body = [joined[i : i + 65536] for i in range(0, len(joined), 65536)]
    kinds = ("httpx alone", "OpenAIProvider", "OpenAIProvider + AutoRetry")
    best = dict.fromkeys(kinds, float("inf"))
    with FaultServer([stream(body) for _ in range(3 * args.rounds)]) as server:
        url = server.url()
        for _ in range(args.rounds):
            for kind in kinds:
                began = time.perf_counter()
                if kind == "httpx alone":
                    trio.run(_baseline, url)
                else:
                    retry = AutoRetry() if "AutoRetry" in kind else None
                    assert trio.run(_ours, url, retry) == args.tokens
                best[kind] = min(best[kind], time.perf_counter() - began)
    base = best["httpx alone"]
    framing = "64 KiB HTTP chunks" if args.coalesce else "one HTTP chunk per event"
    print(f"{args.tokens} tokens, {framing}, best of {args.rounds} rounds (same run, alternated)")
    for kind in kinds:
        per_token_us = best[kind] / args.tokens * 1e6
        print(
            f"  {kind:28} {best[kind] * 1000:8.1f} ms  {per_token_us:6.1f} µs/token  "
            f"{best[kind] / base:5.2f}x"
        )


if __name__ == "__main__":
    main()
