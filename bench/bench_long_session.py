"""Bench: throughput over a long session, first 1,000 calls against the last 1,000
(issue 20 target 3: the last block may take at most 1.1× the time of the first).

    python bench/bench_long_session.py [--calls 5000] [--block 1000] [--runs 1]
                                       [--sandbox] [--tool bash|ls] [--profile OUT]
                                       [--baseline-src DIR] [--loop-only]
    python bench/bench_long_session.py --context-cost

The real ``pi`` CLI runs one session (written to a session file under a fresh agent
dir) with ``--model scripted``: ``--calls / 50`` prompts, each ``50`` turns of one tool
call and a closing text turn (a prompt's run stops after ``max_turns`` = 100 turns, so
the session is many prompts of one conversation, as a long interactive session is).
Every call's end is timed as its ``tool_execution_end`` event arrives on stdout
(``--mode json``); a block's time is from the end of the call before it to the end of
its last call. Prints calls/s of each block and last/first.

The scripted model answers without reading the request (O(1) per turn), so what is
measured is ours: the agent loop, the context and request building a real provider
gets (``llm_messages`` of the whole branch), the tool pipeline, the session file.

Also prints the CPU time per call of each block, of the supervisor and of the other
processes (workers and their children), read from /proc: on a shared machine it
shows growth that wall time hides in noise.

``--profile OUT`` runs the CLI under cProfile (one run) and writes the stats to OUT.
``--loop-only`` times the agent loop alone in process (CPU per turn; see
`loop_only`). ``--context-cost`` times the context building of one request.
``--baseline-src DIR`` alternates runs of another source tree (``PYTHONPATH=DIR``),
e.g. ``git archive <commit> src | tar -x -C /tmp/base`` then ``/tmp/base/src``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

CALLS_PER_PROMPT = 50
FINAL_TEXT = "block done"


def pi_command() -> list[str]:
    local = Path(sys.executable).with_name("pi")
    if local.exists():
        return [str(local)]
    return [sys.executable, "-m", "pi_sandbox.cli"]


def write_script(path: Path, calls: int, tool: str) -> int:
    """The script: ``calls`` one-call turns, a text turn after every CALLS_PER_PROMPT.
    Returns the number of prompts."""
    arguments = {"command": "true"} if tool == "bash" else {"path": "."}
    turns: list[dict] = []
    prompts = 0
    for i in range(calls):
        turns.append({"tool_calls": [{"name": tool, "arguments": arguments}]})
        if (i + 1) % CALLS_PER_PROMPT == 0 or i + 1 == calls:
            turns.append({"text": FINAL_TEXT})
            prompts += 1
    path.write_text(json.dumps(turns) + "\n")
    return prompts


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root_pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by ``root_pid`` itself and by its live
    descendants (the workers; their exited children count in the worker's ``cutime``
    once reaped, so they are included too). Less sensitive to other load on the
    machine than wall time."""
    stats: dict[int, tuple[int, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        ppid = int(fields[1])
        own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        stats[int(entry)] = (ppid, own, reaped)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    supervisor = stats.get(root_pid, (0, 0.0, 0.0))[1]
    others = 0.0
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        others += stats[pid][1] + stats[pid][2]
        stack += children.get(pid, [])
    return supervisor, others


def run_once(
    root: Path,
    calls: int,
    tool: str,
    sandbox: bool,
    profile: Path | None,
    block: int,
    src: Path | None = None,
) -> tuple[list[float], float, list[tuple[float, float]]]:
    """One session; returns (arrival time of each tool_execution_end, start time,
    CPU seconds of the supervisor and of the other processes at each block's end)."""
    script = root / "script.json"
    prompts = write_script(script, calls, tool)
    agent = Path(tempfile.mkdtemp(prefix="agent-", dir=root))
    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    argv = pi_command() if src is None else [sys.executable, "-m", "pi_sandbox.cli"]
    if profile is not None:
        argv = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "pi_sandbox.cli"]
    argv += [
        "--sandbox" if sandbox else "--no-sandbox",
        "--mode",
        "json",
        "--model",
        "scripted",
        "--script",
        str(script),
    ]
    if tool == "ls":
        argv += ["--tools", "ls"]
    argv += ["go"] * prompts
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(agent)}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    ends: list[float] = []
    cpu: list[tuple[float, float]] = []
    errors = 0
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stderr_chunks: list[bytes] = []
    drain = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()))
    drain.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.perf_counter()
        # Cheap test before parsing: most lines are other events.
        if b'"tool_execution_end"' not in line[:60]:
            continue
        event = json.loads(line)
        if event.get("type") == "tool_execution_end":
            ends.append(now)
            errors += bool(event.get("isError"))
            if len(ends) % block == 0 or len(ends) == 1:
                cpu.append(tree_cpu(proc.pid))
    proc.wait()
    drain.join()
    if proc.returncode != 0 or len(ends) != calls or errors:
        tail = b"".join(stderr_chunks)[-800:].decode(errors="replace")
        raise SystemExit(
            f"run failed: exit {proc.returncode}, {len(ends)}/{calls} calls, "
            f"{errors} errors\n{tail}"
        )
    sessions = list(agent.rglob("*.jsonl"))
    if not sessions:
        raise SystemExit("no session file was written")
    shutil.rmtree(agent, ignore_errors=True)
    return ends, start, cpu


def blocks(ends: list[float], start: float, block: int) -> list[float]:
    """Seconds per block of ``block`` calls (the first block from the first call's end,
    so start-up is not in it)."""
    out = []
    for first in range(0, len(ends) - block + 1, block):
        before = ends[first - 1] if first else ends[0]
        count = block if first else block - 1
        out.append((ends[first + block - 1] - before) * block / count)
    return out


def _median_ms(function: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        begin = time.perf_counter()
        function()
        samples.append((time.perf_counter() - begin) * 1000)
    return statistics.median(samples)


def _context_cost_at(calls: int, repeat: int) -> str:
    from pi_sandbox.supervisor.agent.agent_session import LlmContext, llm_messages
    from pi_sandbox.supervisor.providers.openai import _request_body
    from pi_sandbox.supervisor.sessions.session_file import SessionWriter, context_messages

    def error(message: str, **_: object) -> Exception:
        return RuntimeError(message)

    writer = SessionWriter.in_memory(Path("/"))
    writer.append_message({"role": "user", "content": [{"type": "text", "text": "go"}]})
    for i in range(calls):
        call = {"type": "toolCall", "id": f"c{i}", "name": "bash"}
        writer.append_message(
            {
                "role": "assistant",
                "content": [{**call, "arguments": {"command": "true"}}],
                "usage": {},
                "stopReason": "toolUse",
                "timestamp": 1,
            }
        )
        writer.append_message(
            {
                "role": "toolResult",
                "toolCallId": f"c{i}",
                "toolName": "bash",
                "content": [{"type": "text", "text": "(no output)"}],
                "isError": False,
                "timestamp": 2,
            }
        )
    converter = LlmContext()

    def ours() -> None:
        # As before each request: the kept context, only the new messages converted.
        _, messages = writer.context()
        converter.feed(messages[converter.fed :])
        converter.result()

    def before() -> None:
        llm_messages(context_messages(writer._walk(writer.last_id)))

    sent = llm_messages(writer.messages())
    body = _request_body("m", "prompt", sent, [], error)
    return (
        f"  {calls:>5} calls ({len(writer.entries)} entries): ours "
        f"{_median_ms(ours, repeat):.3f}, before {_median_ms(before, repeat):.3f}; a real "
        f"provider's share: OpenAI body "
        f"{_median_ms(lambda: _request_body('m', 'prompt', sent, [], error), repeat):.3f} "
        f"+ json.dumps {_median_ms(lambda: json.dumps(body), repeat):.3f}"
    )


def context_cost(sizes: tuple[int, ...] = (1000, 5000), repeat: int = 20) -> None:
    """Per-request cost of building the model context after ``n`` tool calls, in ms
    (median of ``repeat``): what we do before a request (kept context, incremental
    provider conversion), what was done before issue 20 (walk the branch, build the
    context, convert all of it), and what a real provider then pays per request on
    top, inherent in sending the whole conversation (pi pays it too): the OpenAI
    request body built from every message, and its JSON encoding."""
    print(f"context building per request, ms (median of {repeat}), load {os.getloadavg()[0]:.2f}")
    for n in sizes:
        print(_context_cost_at(n, repeat), flush=True)


LOOP_CHILD = r"""
import sys, tempfile, time
from pathlib import Path
import trio
from pi_sandbox.supervisor.agent.agent_session import AgentSession
from pi_sandbox.supervisor.providers.base import AssistantTurn, ToolCall
from pi_sandbox.supervisor.sessions.session_file import SessionHeader, SessionWriter

calls, block = int(sys.argv[1]), int(sys.argv[2])

class Provider:  # answers at once with one bash call; reads nothing of the request
    name = model = "scripted"
    n = 0
    async def complete(self, **_):
        await trio.lowlevel.checkpoint()
        Provider.n += 1
        call = ToolCall(f"c{Provider.n}", "bash", {"command": "true"})
        return AssistantTurn(text="", tool_calls=[call], stop_reason="toolUse",
                             provider="scripted", model="scripted")

class Pool:  # no extensions
    tools = {}
    def subscribed(self, event): return False
    def required_failure(self): return None
    async def dispatch(self, event, payload): return None

async def emit(event): return None

root = Path(tempfile.mkdtemp(prefix="bench-loop-"))
writer = SessionWriter(root / "s.jsonl", SessionHeader(id="bench", cwd=str(root)))
session = AgentSession(provider=Provider(), pool=Pool(), pipeline=None, emit=emit, cwd=root,
                       writer=writer, active_tools=list, system_prompt=lambda: "prompt")

async def main():
    writer.append_message({"role": "user", "content": [{"type": "text", "text": "go"}],
                           "timestamp": 1})
    start = time.process_time()
    for i in range(1, calls + 1):
        if (system := session.system_message()) is not None:
            writer.append_message(system)
        turn = await session._request()
        writer.append_message(session._assistant_message(turn))
        writer.append_message({"role": "toolResult", "toolCallId": turn.tool_calls[0].id,
                               "toolName": "bash", "isError": False, "timestamp": 1,
                               "content": [{"type": "text", "text": "(no output)"}]})
        if i % block == 0:
            now = time.process_time()
            print(f"{(now - start) * 1000 / block:.4f}", flush=True)
            start = now

trio.run(main)
"""


def loop_only(calls: int, block: int, runs: int, baseline: Path | None) -> None:
    """The agent loop alone, in process (no workers, no CLI): per model turn, the
    system-message check, the compaction check, the context and provider messages
    of the request, the assistant message and a tool result appended to a session
    file. CPU ms per turn of each block (``time.process_time``), for this tree and,
    alternating, ``baseline``."""
    sides: list[tuple[str, Path | None]] = [("ours", None)]
    if baseline is not None:
        sides.append(("baseline", baseline.resolve()))
    for run, (side, src) in itertools.product(range(runs), sides):
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        load = os.getloadavg()[0]
        out = subprocess.run(
            [sys.executable, "-c", LOOP_CHILD, str(calls), str(block)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        per_turn = [float(x) for x in out]
        print(
            f"{side} run {run + 1} (load {load:.2f}): CPU ms per turn per block of {block}: "
            + " ".join(f"{x:.3f}" for x in per_turn)
            + f"; last/first {per_turn[-1] / per_turn[0]:.2f}x",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--block", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--sandbox", action="store_true", help="--sandbox (default --no-sandbox)")
    parser.add_argument("--tool", choices=("bash", "ls"), default="bash")
    parser.add_argument("--profile", type=Path, help="cProfile the CLI, stats to this file")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="a pi_sandbox source tree (its src/ directory) to run as well, alternating "
        "with this one, e.g. an export of the commit before a change",
    )
    parser.add_argument(
        "--context-cost",
        action="store_true",
        help="only measure the per-request cost of building the context (in process)",
    )
    parser.add_argument(
        "--loop-only",
        action="store_true",
        help="only the agent loop in process (no workers, no CLI), CPU time per block",
    )
    args = parser.parse_args()
    if args.context_cost:
        context_cost(tuple(sorted({min(1000, args.calls), args.calls})))
        return
    if args.loop_only:
        loop_only(args.calls, args.block, args.runs, args.baseline_src)
        return

    sides: list[tuple[str, Path | None]] = [("ours", None)]
    if args.baseline_src is not None:
        sides.append(("baseline", args.baseline_src.resolve()))
    root = Path(tempfile.mkdtemp(prefix="bench-long-"))
    try:
        for run, (side, src) in itertools.product(range(args.runs), sides):
            load = os.getloadavg()
            ends, start, cpu = run_once(
                root,
                args.calls,
                args.tool,
                args.sandbox,
                args.profile if run == 0 and src is None else None,
                args.block,
                src,
            )
            per_block = blocks(ends, start, args.block)
            rates = [args.block / s for s in per_block]
            ratio = per_block[-1] / per_block[0]
            print(
                f"{side} run {run + 1}: {args.calls} {args.tool} calls "
                f"({'sandbox' if args.sandbox else 'no sandbox'}), "
                f"total {ends[-1] - start:.1f} s, load {load[0]:.2f}"
            )
            print("  calls/s per block: " + " ".join(f"{r:.0f}" for r in rates))
            print(f"  last/first block time: {ratio:.2f}x (target <= 1.10x)")
            sup = [(b[0] - a[0]) * 1000 / args.block for a, b in itertools.pairwise(cpu)]
            rest = [(b[1] - a[1]) * 1000 / args.block for a, b in itertools.pairwise(cpu)]
            print("  supervisor CPU ms/call per block: " + " ".join(f"{x:.2f}" for x in sup))
            print("  workers (+children) CPU ms/call:  " + " ".join(f"{x:.2f}" for x in rest))
            if sup and sup[0]:
                print(f"  supervisor CPU last/first: {sup[-1] / sup[0]:.2f}x", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
