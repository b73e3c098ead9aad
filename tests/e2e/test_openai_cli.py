"""``pi --model openai/MODEL --base-url URL``: the whole agent loop against a real local server.

A Chat Completions server on 127.0.0.1 streams a tool call in the first answer and
text in the second; the test checks what the CLI sent (tools, the tool result in the
second request, the key only in the Authorization header) and that the sandboxed
``bash`` call never saw the key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

KEY = "sk-SENTINEL-e2e-openai-0042"


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


TOOL_TURN = _sse(
    [
        _chunk({"role": "assistant", "content": "Checking. "}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk(
            {
                "tool_calls": [
                    {"index": 0, "function": {"arguments": '{"command": "echo key=$OPENAI'}}
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '_API_KEY; echo hi"}'}}]}),
        _chunk({}, "tool_calls"),
    ]
)
TEXT_TURN = _sse(
    [
        _chunk({"role": "assistant", "content": "The answer "}),
        _chunk({"content": "is 42."}),
        _chunk({}, "stop"),
    ]
)


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                has_result = any(m.get("role") == "tool" for m in body["messages"])
                payload = TEXT_TURN if has_result else TOOL_TURN
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.mark.parametrize("sandbox", ["--no-sandbox", "--sandbox"])
def test_openai_provider_drives_a_tool_call_and_the_key_stays_in_the_supervisor(
    server, tmp_path, sandbox, request
):
    if sandbox == "--sandbox":
        request.getfixturevalue("require_bwrap")
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        "OPENAI_API_KEY": KEY,
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            sandbox,
            "--mode",
            "json",
            "--model",
            "openai/test-model",
            "--base-url",
            server.url,
            "-C",
            str(work),
            "what is the answer?",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert end["toolCallId"] == "call_1" and end["result"]["content"][0]["text"] == "key=\nhi"
    final = [
        e for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant"
    ][-1]
    assert final["message"]["content"] == [{"type": "text", "text": "The answer is 42."}]
    assert KEY not in proc.stdout and KEY not in proc.stderr
    sessions = "".join(p.read_text() for p in Path(tmp_path / "agent").rglob("*.jsonl"))
    assert KEY not in sessions
    # What the server saw: the key only as the bearer token, tools offered, the tool result sent back.
    (headers1, body1), (headers2, body2) = server.requests
    assert headers2["authorization"] == f"Bearer {KEY}"
    assert headers1["authorization"] == f"Bearer {KEY}" and body1["model"] == "test-model"
    # pi's default selection: read, bash, edit, write (ls, grep, find are opt-in).
    assert {t["function"]["name"] for t in body1["tools"]} == {"bash", "read", "write", "edit"}
    tool_message = next(m for m in body2["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_1" and "hi" in tool_message["content"]
    assert KEY not in json.dumps(body1) + json.dumps(body2)
