"""A loopback OpenAI-compatible server for the compaction tests (issue 15).

Like `fake_openai`, it answers ``POST /v1/chat/completions`` from a script and
records every request, and in addition a reply may

- report usage (``answer("text", prompt_tokens=90_000)``: the final chunk carries
  ``usage``, so the agent believes its context is that large), or
- be a context-overflow error (``overflow()``: HTTP 400 with OpenAI's
  ``context_length_exceeded`` body, or any message given).

Once the script is used up every request gets ``answer(EXHAUSTED)``::

    with CompactionServer([answer("one"), overflow(), answer("SUMMARY"), answer("two")]) as s:
        run pi with --model openai/x --base-url s.url
        assert s.requests[2].is_summary_request()
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["EXHAUSTED", "OVERFLOW_MESSAGE", "CompactionServer", "Reply", "answer", "overflow"]

EXHAUSTED = "compaction-server: script exhausted"
OVERFLOW_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages "
    "resulted in 9100 tokens. Please reduce the length of the messages."
)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text (with optional usage) or an HTTP error."""

    text: str = ""
    prompt_tokens: int | None = None
    status: int = 200
    error: str | None = None
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()


def answer(
    text: str,
    *,
    prompt_tokens: int | None = None,
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = (),
) -> Reply:
    """A streamed answer; ``prompt_tokens`` is reported as its usage; ``calls`` are
    ``(id, name, arguments)`` tool calls."""
    return Reply(text=text, prompt_tokens=prompt_tokens, calls=calls)


def overflow(message: str = OVERFLOW_MESSAGE, status: int = 400) -> Reply:
    """An HTTP error whose body is OpenAI's ``context_length_exceeded`` error."""
    return Reply(status=status, error=message)


@dataclass
class Request:
    """What the server received."""

    body: dict[str, Any]
    raw: str = field(repr=False, default="")

    def system_prompt(self) -> str:
        """The text of the request's system message ("" when none)."""
        for message in self.body.get("messages", []):
            if message.get("role") == "system":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
        return ""

    def is_summary_request(self) -> bool:
        """A compaction's summary request: no tools, the summariser's system prompt."""
        return not self.body.get("tools") and "summarise conversations" in self.system_prompt()

    def conversation(self) -> str:
        """Every message of the request but the system prompt, as JSON text."""
        return json.dumps([m for m in self.body.get("messages", []) if m.get("role") != "system"])


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "fake",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(reply: Reply) -> bytes:
    chunks = [_chunk({"role": "assistant", "content": reply.text})]
    for index, (call_id, name, arguments) in enumerate(reply.calls):
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        chunks.append(_chunk({"tool_calls": [call]}))
    chunks.append(_chunk({}, "tool_calls" if reply.calls else "stop"))
    if reply.prompt_tokens is not None:
        chunks.append(
            {
                "id": "fake",
                "object": "chat.completion.chunk",
                "model": "fake",
                "choices": [],
                "usage": {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": 10,
                    "total_tokens": reply.prompt_tokens + 10,
                },
            }
        )
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


class CompactionServer:
    """The server; ``url`` is the base URL to pass as ``--base-url``."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
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
                    outer.requests.append(Request(json.loads(raw), raw))
                    reply = outer.replies.pop(0) if outer.replies else Reply(text=EXHAUSTED)
                if reply.error is not None:
                    payload = json.dumps(
                        {
                            "error": {
                                "message": reply.error,
                                "type": "invalid_request_error",
                                "code": "context_length_exceeded",
                            }
                        }
                    ).encode()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                else:
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

    def __enter__(self) -> CompactionServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
