"""A loopback OpenAI-compatible Chat Completions server for end-to-end tests.

It answers ``POST /v1/chat/completions`` with streamed (SSE) replies taken in order
from a script, and records every request (headers and JSON body) so a test can check
what reached the provider::

    with FakeOpenAI([tool_calls(("c1", "bash", {"command": "ls"})), text("done")]) as server:
        run pi with --model openai/x --base-url server.url
        assert len(server.requests) == 2

A reply is ``text("...")`` or ``tool_calls((id, name, arguments), ..., text=None)``.
Once the script is used up every further request gets ``text(DEFAULT_TEXT)``.
No API key is needed: the provider accepts a loopback server without one.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DEFAULT_TEXT", "FakeOpenAI", "Reply", "Request", "text", "tool_calls"]

DEFAULT_TEXT = "fake-openai: script exhausted"


@dataclass(frozen=True)
class Reply:
    """One scripted assistant answer."""

    text: str | None = None
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()


def text(value: str) -> Reply:
    """An answer with text only (the model stops)."""
    return Reply(text=value)


def tool_calls(*calls: tuple[str, str, dict[str, Any]], text: str | None = None) -> Reply:
    """An answer calling tools: each call is ``(id, name, arguments)``."""
    return Reply(text=text, calls=tuple(calls))


@dataclass
class Request:
    """What the server received."""

    headers: dict[str, str]
    body: dict[str, Any]
    raw: str = field(repr=False, default="")

    def tool_messages(self) -> list[dict[str, Any]]:
        """The ``role: tool`` messages of the request (tool results sent back)."""
        return [m for m in self.body.get("messages", []) if m.get("role") == "tool"]

    def tool_names(self) -> list[str]:
        """The names of the tools offered in the request."""
        return [t["function"]["name"] for t in self.body.get("tools") or []]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "fake",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(reply: Reply) -> bytes:
    chunks = [_chunk({"role": "assistant", "content": reply.text or ""})]
    for index, (call_id, name, arguments) in enumerate(reply.calls):
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                    ]
                }
            )
        )
    chunks.append(_chunk({}, "tool_calls" if reply.calls else "stop"))
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


class FakeOpenAI:
    """The server; ``url`` is the base URL to pass as ``--base-url``."""

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.replies = list(replies or [])
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                with outer._lock:
                    outer.requests.append(
                        Request(
                            {k.lower(): v for k, v in self.headers.items()}, json.loads(raw), raw
                        )
                    )
                    reply = outer.replies.pop(0) if outer.replies else Reply(text=DEFAULT_TEXT)
                payload = _sse(reply)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
