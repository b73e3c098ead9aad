"""A loopback HTTP server that misbehaves on cue, for provider fault tests (issue 16).

It speaks no wire format of its own: each request (any ``POST`` path, so
``/v1/chat/completions`` and ``/v1/messages`` alike) gets the next scripted `Fault`,
whose body is the bytes a test gives — `openai_text` and `anthropic_text` build
well-formed streams of either API::

    with FaultServer([http_error(429, retry_after="1"), stream(openai_text("hi"))]) as server:
        provider = OpenAIProvider("m", server.url("/v1"), key)
        ...
        assert len(server.hits) == 2

A fault is an HTTP error (`http_error`), or a 200 event stream (`stream`) that then
ends properly (``"end"``), is cut off without its final chunk (``"cut"``: the peer
closed the connection), is reset (``"reset"``: TCP RST), or goes silent
(``"hang"``: no further byte until the server closes). Every request is recorded
with its arrival time (``time.monotonic()``) so tests can measure backoff.
Once the script is used up every request gets HTTP 500.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Fault",
    "FaultServer",
    "Hit",
    "anthropic_text",
    "http_error",
    "openai_text",
    "stream",
]


@dataclass
class Fault:
    """What the server does with one request (see the module docstring)."""

    status: int = 200  # 0: never answer (no status line), until the server closes
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # the whole body of a non-200 answer
    chunks: list[bytes] = field(default_factory=list)  # a 200 stream, one HTTP chunk each
    then: str = "end"  # "end" | "cut" | "reset" | "hang"
    pause_s: float = 0.0  # between chunks


def http_error(status: int, body: bytes | str | dict[str, Any] = b"", **headers: str) -> Fault:
    """An error answer; keyword headers use ``_`` for ``-`` (``retry_after="1"``)."""
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    wire = {name.replace("_", "-"): value for name, value in headers.items()}
    wire.setdefault("Content-Type", "application/json")
    return Fault(status=status, headers=wire, body=body)


def stream(chunks: Iterable[bytes], then: str = "end", pause_s: float = 0.0) -> Fault:
    """A 200 ``text/event-stream`` answer made of ``chunks``, then ``then``."""
    return Fault(
        headers={"Content-Type": "text/event-stream"},
        chunks=list(chunks),
        then=then,
        pause_s=pause_s,
    )


def _data(payload: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


def openai_text(*pieces: str, done: bool = True, reasoning: Iterable[str] = ()) -> list[bytes]:
    """A Chat Completions stream: a role chunk, one chunk per reasoning piece
    (``reasoning_content``) and per text piece, ``finish_reason: stop``, usage and
    ``[DONE]`` (``done=False`` leaves out the finish, the usage and ``[DONE]``)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data(
            {
                "id": "fault",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    out = [chunk({"role": "assistant"})]
    out += [chunk({"reasoning_content": r}) for r in reasoning]
    out += [chunk({"content": p}) for p in pieces]
    if done:
        out.append(chunk({}, "stop"))
        out.append(
            _data(
                {
                    "id": "fault",
                    "choices": [],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }
            )
        )
        out.append(b"data: [DONE]\n\n")
    return out


def anthropic_text(*pieces: str, done: bool = True) -> list[bytes]:
    """An Anthropic Messages stream (``message_start``, one text block with a
    ``text_delta`` per piece, ``message_delta`` with ``stop_reason: end_turn``,
    ``message_stop``; ``done=False`` stops after the deltas)."""
    out = [
        _data(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fault",
                    "type": "message",
                    "role": "assistant",
                    "model": "fault",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 3, "output_tokens": 0},
                },
            },
            "message_start",
        ),
        _data(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
    ]
    out += [
        _data(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
            "content_block_delta",
        )
        for p in pieces
    ]
    if done:
        out += [
            _data({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _data(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 2},
                },
                "message_delta",
            ),
            _data({"type": "message_stop"}, "message_stop"),
        ]
    return out


@dataclass
class Hit:
    """One request the server received."""

    at: float  # time.monotonic() when its body had been read
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up early (after [DONE], on a timeout) are expected here.
        if not isinstance(sys.exc_info()[1], ConnectionError | OSError):
            super().handle_error(request, client_address)


class FaultServer:
    """The server (a context manager; see the module docstring).

    Attributes:
        faults: the remaining script, consumed in order.
        hits: every request received, in order.
        release: set to end every ``"hang"`` at once (``__exit__`` sets it).
    """

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self.faults: deque[Fault] = deque(faults)
        self.hits: list[Hit] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    server.hits.append(
                        Hit(
                            time.monotonic(),
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                        )
                    )
                    fault = server.faults.popleft() if server.faults else http_error(500)
                if fault.status == 0:  # no answer at all: not even a status line
                    server.release.wait(120)
                    self.close_connection = True
                    return
                self.send_response(fault.status)
                for name, value in fault.headers.items():
                    self.send_header(name, value)
                if fault.status != 200:
                    self.send_header("Content-Length", str(len(fault.body)))
                    self.end_headers()
                    self.wfile.write(fault.body)
                    self.close_connection = True
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                for part in fault.chunks:
                    if fault.pause_s:
                        time.sleep(fault.pause_s)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.close_connection = True
                if fault.then == "end":
                    self.wfile.write(b"0\r\n\r\n")
                elif fault.then == "hang":
                    server.release.wait(120)
                elif fault.then == "reset":
                    # SO_LINGER 0: close() sends RST, the client sees a reset.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                # "cut": close without the final chunk (the peer closed mid-body).

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def url(self, root: str = "/v1") -> str:
        """The base URL of the server with ``root`` appended."""
        return f"http://127.0.0.1:{self.port}{root}"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(10)
