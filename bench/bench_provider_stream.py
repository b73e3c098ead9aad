#!/usr/bin/env python3
"""Provider streaming overhead and import cost (issue 16 "Performance").

Two measurements, each beside its baseline from the same run:

1. **Streaming overhead per token.** A loopback server in a child process streams
   ``--tokens`` (default 5,000) text deltas as real SSE, one HTTP chunk per event, in
   the Anthropic Messages format (``/v1/messages``) and the OpenAI Chat Completions
   format (``/v1/chat/completions``). Timed per round, alternating: reading the same
   bytes with httpx alone (``aiter_bytes``), and a full ``complete()`` through our
   provider (``AnthropicProvider`` / ``OpenAIProvider``) with ``on_event`` and
   ``on_text_delta`` callbacks. When the ``anthropic`` SDK is importable its raw
   event stream (``messages.create(stream=True)``) is timed too. Wall time and the
   client process's CPU time (the server is another process) per token; target:
   provider / httpx ≤ 1.5x.
2. **Import cost.** Fresh interpreters (``python -I``) importing the CLI's start path
   (``pi_sandbox.cli``, ``pi_sandbox.supervisor.modes.run`` and ``create_provider``), the same
   plus our Anthropic provider module, and plus the ``anthropic`` SDK when installed;
   interleaved, medians. ``--baseline-src DIR`` adds the start path of another
   checkout (e.g. the main branch's ``src``) to show start-up is unchanged.

Usage::

    python bench/bench_provider_stream.py [--tokens 5000] [--rounds 9] [--imports 15]
        [--baseline-src ../main/src] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOKEN = " tok"


# --- the server (child process) -----------------------------------------------------


def anthropic_events(tokens: int) -> list[bytes]:
    def event(payload: dict[str, Any]) -> bytes:
        return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()

    usage = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0}
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-bench",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        },
    }
    out = [
        event(start),
        event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        event({"type": "ping"}),
    ]
    delta = event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TOKEN}}
    )
    out += [delta] * tokens
    out += [
        event({"type": "content_block_stop", "index": 0}),
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": tokens},
            }
        ),
        event({"type": "message_stop"}),
    ]
    return out


def openai_events(tokens: int) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-bench",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": TOKEN})] * tokens
    out += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return out


def serve(tokens: int) -> None:
    """Serve both formats until stdin closes; print the port first."""
    bodies = {
        "/v1/messages": anthropic_events(tokens),
        "/v1/chat/completions": openai_events(tokens),
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            events = bodies[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for part in events:  # one HTTP chunk per event, as the real APIs send
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except ConnectionError:
                pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    httpd = Server(("127.0.0.1", 0), Handler)
    import threading

    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(httpd.server_address[1], flush=True)
    sys.stdin.read()  # the parent closes stdin to stop us


# --- the client ---------------------------------------------------------------------


def percent(values: list[float]) -> float:
    return statistics.median(values)


async def stream_bench(base: str, tokens: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    import httpx

    from pi_sandbox.supervisor.providers.anthropic import AnthropicProvider
    from pi_sandbox.supervisor.providers.openai import OpenAIProvider

    results: dict[str, dict[str, list[float]]] = {}

    def record(name: str, wall: float, cpu: float) -> None:
        entry = results.setdefault(name, {"wall": [], "cpu": []})
        entry["wall"].append(wall / tokens * 1e6)  # µs per token
        entry["cpu"].append(cpu / tokens * 1e6)

    sdk = None
    try:
        import anthropic

        sdk = anthropic.AsyncAnthropic(base_url=base, api_key="bench", max_retries=0)
    except ImportError:
        pass

    async with httpx.AsyncClient(timeout=60) as client:
        anthropic_provider = AnthropicProvider(
            "claude-bench", base, "bench-key", max_tokens=tokens, client=client
        )
        openai_provider = OpenAIProvider("gpt-bench", f"{base}/v1", "bench-key", client=client)
        seen = 0

        async def on_event(event: dict[str, Any]) -> None:
            nonlocal seen
            seen += 1

        async def on_text(text: str) -> None:
            pass

        async def raw(path: str, body: dict[str, Any]) -> int:
            size = 0
            async with client.stream("POST", base + path, json=body) as response:
                async for part in response.aiter_bytes():
                    size += len(part)
            return size

        async def ours(provider: Any) -> None:
            turn = await provider.complete(
                system_prompt="bench",
                messages=[{"role": "user", "content": "go"}],
                tools=[],
                on_text_delta=on_text,
                on_event=on_event,
            )
            assert len(turn.text) == tokens * len(TOKEN), len(turn.text)

        async def sdk_raw() -> None:
            count = 0
            events = await sdk.messages.create(  # type: ignore[union-attr]
                model="claude-bench",
                max_tokens=tokens,
                messages=[{"role": "user", "content": "go"}],
                stream=True,
            )
            async for event in events:
                if event.type == "content_block_delta":
                    count += 1
            assert count == tokens, count

        body = {"model": "x", "messages": [{"role": "user", "content": "go"}], "stream": True}
        cases = [
            ("anthropic: httpx alone", lambda: raw("/v1/messages", body)),
            ("anthropic: AnthropicProvider", lambda: ours(anthropic_provider)),
            ("openai: httpx alone", lambda: raw("/v1/chat/completions", body)),
            ("openai: OpenAIProvider", lambda: ours(openai_provider)),
        ]
        if sdk is not None:
            cases.append(("anthropic: SDK raw events", sdk_raw))
        for case in cases:  # warm-up
            await case[1]()
        for round_number in range(rounds):
            order = cases if round_number % 2 == 0 else list(reversed(cases))
            for name, run in order:
                wall0, cpu0 = time.perf_counter(), time.process_time()
                await run()
                record(name, time.perf_counter() - wall0, time.process_time() - cpu0)
    return results


def import_bench(runs: int, baseline_src: str | None) -> dict[str, list[float]]:
    start_path = (
        "import pi_sandbox.cli, pi_sandbox.supervisor.modes.run\n"
        "from pi_sandbox.supervisor.providers import create_provider\n"
    )
    cases = {
        "CLI start path (no Anthropic)": start_path,
        "CLI start path + providers.anthropic": start_path
        + "import pi_sandbox.supervisor.providers.anthropic\n",
    }
    try:
        import anthropic  # noqa: F401

        cases["CLI start path + anthropic SDK"] = start_path + "import anthropic\n"
    except ImportError:
        pass
    if baseline_src:
        cases[f"CLI start path of {baseline_src}"] = (
            f"import sys; sys.path.insert(0, {os.path.abspath(baseline_src)!r})\n" + start_path
        )
    times: dict[str, list[float]] = {name: [] for name in cases}
    for code in cases.values():  # warm the page cache and .pyc files
        subprocess.run([sys.executable, "-I", "-c", code], check=True)
    for _ in range(runs):
        for name, code in cases.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-I", "-c", code], check=True)
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--imports", type=int, default=15, help="runs per import case")
    parser.add_argument("--baseline-src", help="another checkout's src/ for the start-path row")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0

    import trio

    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(args.tokens)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(child.stdout.readline())  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        streams = trio.run(stream_bench, base, args.tokens, args.rounds)
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(10)
    imports = import_bench(args.imports, args.baseline_src)

    print(f"Streaming {args.tokens} text deltas, {args.rounds} rounds, medians (µs per token)")
    print(f"{'case':42} {'wall':>8} {'cpu':>8} {'wall x':>8} {'cpu x':>8}")
    for name, series in streams.items():
        family = name.split(":")[0]
        base_series = streams[f"{family}: httpx alone"]
        wall, cpu = percent(series["wall"]), percent(series["cpu"])
        print(
            f"{name:42} {wall:8.2f} {cpu:8.2f} "
            f"{wall / percent(base_series['wall']):7.2f}x {cpu / percent(base_series['cpu']):7.2f}x"
        )
    print(f"\nImport cost, fresh `python -I`, {args.imports} interleaved runs, medians (ms)")
    base_import = percent(imports["CLI start path (no Anthropic)"])
    for name, series in imports.items():
        value = percent(series)
        print(f"{name:60} {value:8.1f}  {value - base_import:+8.1f}")
    if args.json:
        args.json.write_text(json.dumps({"stream_us_per_token": streams, "import_ms": imports}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
