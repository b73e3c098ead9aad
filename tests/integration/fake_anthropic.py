"""A loopback Anthropic Messages API server for tests (real HTTP on 127.0.0.1, real SSE).

It answers ``POST /v1/messages`` with replies taken in order from a queue and records
every request (path, headers, JSON body). Streams are written as the API sends them:
``event:`` + ``data:`` lines, one HTTP chunk per event (Anthropic docs, "Streaming
Messages": ``message_start``, ``content_block_start`` / ``_delta`` / ``_stop``,
``ping``, ``message_delta``, ``message_stop``, ``error``)::

    with FakeAnthropic() as server:
        server.replies.append(stream(text("Hi"), tool_use("toolu_1", "bash", {...})))
        AnthropicProvider(MODEL, server.url, KEY, max_tokens=1024).complete(...)
        server.requests[0].body["messages"]

Other tests import it from ``tests/integration`` (put that folder on ``sys.path``).
Once the queue is empty every request gets ``stream(text(DEFAULT_TEXT))``.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "DEFAULT_TEXT",
    "MODEL",
    "Block",
    "FakeAnthropic",
    "Reply",
    "Request",
    "error_reply",
    "redacted_thinking",
    "sse_event",
    "stream",
    "text",
    "thinking",
    "tool_use",
]

DEFAULT_TEXT = "fake-anthropic: script exhausted"
MODEL = "claude-test-4-5"


def sse_event(payload: dict[str, Any], *, newline: str = "\n") -> bytes:
    """One event as the API frames it: ``event: TYPE`` then ``data: JSON``, blank line."""
    return (
        f"event: {payload['type']}{newline}data: {json.dumps(payload)}{newline}{newline}".encode()
    )


@dataclass(frozen=True)
class Block:
    """One content block of a streamed answer and the pieces its deltas carry."""

    start: dict[str, Any]
    deltas: tuple[dict[str, Any], ...] = ()


def text(value: str, *, pieces: int = 3) -> Block:
    """A text block whose text arrives in about ``pieces`` ``text_delta`` events."""
    size = max(1, -(-len(value) // pieces))
    parts = [value[i : i + size] for i in range(0, len(value), size)] or [""]
    return Block(
        {"type": "text", "text": ""},
        tuple({"type": "text_delta", "text": part} for part in parts),
    )


def thinking(value: str, signature: str) -> Block:
    """A thinking block: ``thinking_delta`` events, then one ``signature_delta``."""
    half = len(value) // 2
    return Block(
        {"type": "thinking", "thinking": ""},
        (
            {"type": "thinking_delta", "thinking": value[:half]},
            {"type": "thinking_delta", "thinking": value[half:]},
            {"type": "signature_delta", "signature": signature},
        ),
    )


def redacted_thinking(data: str) -> Block:
    """A ``redacted_thinking`` block: its encrypted ``data`` comes whole in the start."""
    return Block({"type": "redacted_thinking", "data": data})


def tool_use(call_id: str, name: str, arguments: dict[str, Any], *, cut: int = 7) -> Block:
    """A ``tool_use`` block whose input JSON arrives in ``input_json_delta`` fragments
    of ``cut`` characters (the cuts fall inside keys, strings and numbers)."""
    raw = json.dumps(arguments)
    return Block(
        {"type": "tool_use", "id": call_id, "name": name, "input": {}},
        tuple(
            {"type": "input_json_delta", "partial_json": raw[i : i + cut]}
            for i in range(0, len(raw), cut)
        ),
    )


@dataclass
class Reply:
    """What the server sends for one request.

    Attributes:
        status: HTTP status.
        headers: response headers.
        chunks: the body, one HTTP chunk each (a stream) or joined (an error body).
        hang: send nothing until the test ends.
        cut_after: close the connection after this many chunks, mid-body.
        endless: after ``chunks``, keep writing this block until the client leaves
            (a huge event); ``sent`` counts what was written.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    chunks: list[bytes] = field(default_factory=list)
    hang: bool = False
    cut_after: int | None = None
    endless: bytes | None = None
    endless_limit: int = 256 * 1024 * 1024
    sent: int = 0
    finished: threading.Event = field(default_factory=threading.Event)


def stream(
    *blocks: Block,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
    output_tokens: int = 12,
    model: str = MODEL,
    ping: bool = True,
    newline: str = "\n",
) -> Reply:
    """A complete streamed answer, event by event as the API sends it."""
    start_usage = {
        "input_tokens": 25,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
        **(usage or {}),
    }
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_01FakeAnthropic",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        }
    ]
    for index, block in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block.start})
        if ping and index == 0:
            events.append({"type": "ping"})
        for delta in block.deltas:
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return Reply(chunks=[sse_event(e, newline=newline) for e in events])


def error_reply(
    status: int, kind: str, message: str, *, headers: dict[str, str] | None = None
) -> Reply:
    """An HTTP error as the API sends it: ``{"type": "error", "error": {...}}``."""
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011FakeAnthropic",
    }
    return Reply(
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
        chunks=[json.dumps(body).encode()],
    )


@dataclass
class Request:
    """What the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The provider closes the connection at message_stop or when it gives up on a
        # stream: a reset here is expected, anything else is not.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeAnthropic:
    """The server; ``url`` is the base URL (``/v1/messages`` is appended by clients)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    outer.requests.append(
                        Request(
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            json.loads(raw),
                        )
                    )
                    reply = outer.replies.popleft() if outer.replies else stream(text(DEFAULT_TEXT))
                try:
                    self._answer(reply)
                finally:
                    reply.finished.set()

            def _answer(self, reply: Reply) -> None:
                if reply.hang:
                    outer.release.wait(60)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.status != 200:
                    payload = b"".join(reply.chunks)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.close_connection = True
                for number, part in enumerate(reply.chunks):
                    if reply.cut_after is not None and number >= reply.cut_after:
                        return  # the connection closes without the last chunk
                    self._chunk(reply, part)
                if reply.endless is not None:
                    while reply.sent < reply.endless_limit:
                        self._chunk(reply, reply.endless)
                    return
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, reply: Reply, part: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                reply.sent += len(part)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval keeps shutdown() (which waits for one poll) fast.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving (releases hanging replies first)."""
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeAnthropic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
