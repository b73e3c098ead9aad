"""``OpenAIProvider`` against a real HTTP server on 127.0.0.1 replaying recorded-shape streams.

The server is ``http.server.ThreadingHTTPServer`` in a thread: each test queues the
replies it wants and afterwards reads what the server received.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trio

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers import AssistantTurn, OpenAIProvider, ToolCall, ToolDefinition

# Deadline of each guarded request: generous, only a hang reaches it (issue 13 §7).
WAIT_S = 60
API_KEY = "sk-test-0123456789abcdef"
MODEL = "gpt-test"


@dataclass
class Reply:
    """What the server sends for one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    chunks: list[bytes] = field(default_factory=list)
    hang: bool = False  # never answer (until the test ends)
    drop_after_chunks: bool = False  # promise more body than sent, then close


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The provider closes the connection as soon as it has [DONE], sometimes before
        # the last bytes are written: a reset here is expected, anything else is not.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                server.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                reply = server.replies.popleft()
                if reply.hang:
                    server.release.wait(30)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.drop_after_chunks:
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    for part in reply.chunks:
                        self.wfile.write(part)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if reply.status != 200:
                    payload = b"".join(reply.chunks)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for part in reply.chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def provider(self, api_key: str | None = API_KEY, **kwargs: Any) -> OpenAIProvider:
        return OpenAIProvider(MODEL, self.base_url, api_key, **kwargs)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    fake = FakeOpenAIServer()
    # A short poll interval keeps shutdown() (which waits for one poll) fast.
    thread = threading.Thread(target=fake.httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        fake.httpd.shutdown()
        fake.httpd.server_close()
        thread.join(5)


# --- recorded-shape stream pieces ---------------------------------------------------


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_test",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
    }


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def sse_body(*events: dict[str, Any] | str, newline: str = "\n") -> bytes:
    lines = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        lines.append(f"data: {data}{newline}{newline}")
    return "".join(lines).encode()


def split_every(data: bytes, size: int) -> list[bytes]:
    """Cut the body at arbitrary byte offsets (inside events and inside UTF-8 characters)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def tool_call_delta(index: int, *, id: str | None = None, name: str | None = None, args: str = ""):
    call: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
        call["function"]["name"] = name
    return chunk({"tool_calls": [call]})


TEXT_STREAM = sse_body(
    chunk({"role": "assistant", "content": "", "refusal": None}),
    chunk({"content": "Héllo"}),
    chunk({"content": ", wörld"}),
    chunk({"content": " ✓"}),
    chunk({}, "stop"),
    usage_chunk(42, 7),
    "[DONE]",
)

TOOLS_STREAM = sse_body(
    chunk({"role": "assistant", "content": None, "refusal": None}),
    tool_call_delta(0, id="call_read1", name="read"),
    tool_call_delta(0, args='{"pa'),
    tool_call_delta(0, args='th": "src/ma'),
    tool_call_delta(1, id="call_bash2", name="bash"),
    tool_call_delta(0, args='in.py"}'),
    tool_call_delta(1, args='{"command": "ls'),
    tool_call_delta(1, args=' -la", "timeout": 30}'),
    chunk({}, "tool_calls"),
    usage_chunk(100, 25),
    "[DONE]",
)


async def run(provider: OpenAIProvider, **kwargs: Any) -> tuple[AssistantTurn, list[str]]:
    deltas: list[str] = []

    async def on_text_delta(text: str) -> None:
        deltas.append(text)

    request: dict[str, Any] = {"system_prompt": "You are terse.", "messages": [], "tools": []}
    request.update(kwargs)
    with trio.fail_after(WAIT_S):
        turn = await provider.complete(**request, on_text_delta=on_text_delta)
    return turn, deltas


async def fails(provider: OpenAIProvider) -> str:
    with pytest.raises(ProviderError) as caught, trio.fail_after(WAIT_S):
        await provider.complete(system_prompt="", messages=[], tools=[])
    message = str(caught.value)
    assert API_KEY not in message
    return message


# --- streaming ----------------------------------------------------------------------


async def test_text_deltas_are_streamed_and_joined_into_the_turn(
    server: FakeOpenAIServer,
) -> None:
    server.replies.append(Reply(chunks=split_every(TEXT_STREAM, 7)))

    turn, deltas = await run(server.provider())

    assert turn.text == "Héllo, wörld ✓"
    assert deltas == ["Héllo", ", wörld", " ✓"]  # one call per content delta, however cut
    assert turn.tool_calls == []
    assert turn.stop_reason == "stop"
    assert turn.usage == {"input": 42, "output": 7}
    assert (turn.provider, turn.model) == ("openai", MODEL)


async def test_crlf_framed_streams_decode_the_same(server: FakeOpenAIServer) -> None:
    body = sse_body(
        chunk({"content": "a"}), chunk({"content": "b"}, "stop"), "[DONE]", newline="\r\n"
    )
    server.replies.append(Reply(chunks=split_every(body, 5)))

    turn, _ = await run(server.provider())

    assert turn.text == "ab"


async def test_parallel_tool_calls_are_assembled_from_argument_fragments(
    server: FakeOpenAIServer,
) -> None:
    server.replies.append(Reply(chunks=split_every(TOOLS_STREAM, 11)))

    turn, deltas = await run(server.provider())

    assert turn.tool_calls == [
        ToolCall(id="call_read1", name="read", arguments={"path": "src/main.py"}),
        ToolCall(id="call_bash2", name="bash", arguments={"command": "ls -la", "timeout": 30}),
    ]
    assert turn.stop_reason == "toolUse"
    assert (turn.text, deltas) == ("", [])
    assert turn.usage == {"input": 100, "output": 25}


async def test_a_finish_reason_without_done_still_completes_the_turn(
    server: FakeOpenAIServer,
) -> None:
    body = sse_body(chunk({"content": "fine"}), chunk({}, "stop"))
    server.replies.append(Reply(chunks=[body]))

    turn, _ = await run(server.provider())

    assert (turn.text, turn.stop_reason) == ("fine", "stop")


async def test_a_tool_call_without_arguments_gets_an_empty_object(
    server: FakeOpenAIServer,
) -> None:
    body = sse_body(tool_call_delta(0, id="call_1", name="list_todos"), chunk({}, "tool_calls"))
    server.replies.append(Reply(chunks=[body]))

    turn, _ = await run(server.provider())

    assert turn.tool_calls == [ToolCall(id="call_1", name="list_todos", arguments={})]


async def test_a_caller_owned_client_is_used_and_left_open(server: FakeOpenAIServer) -> None:
    server.replies.append(Reply(chunks=[TEXT_STREAM]))
    async with httpx.AsyncClient() as client:
        turn, _ = await run(server.provider(client=client))
        assert not client.is_closed
    assert turn.text == "Héllo, wörld ✓"


# --- the request --------------------------------------------------------------------

PI_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "List the files."}], "timestamp": 1},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Sure."},
            {"type": "toolCall", "id": "call_1", "name": "bash", "arguments": {"command": "ls"}},
        ],
        "provider": "openai",
        "model": MODEL,
        "usage": {},
        "stopReason": "toolUse",
        "timestamp": 2,
    },
    {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}],
        "details": {"exit_code": 0},
        "isError": False,
        "timestamp": 3,
    },
    {
        "role": "assistant",
        "content": [],
        "provider": "openai",
        "model": MODEL,
        "usage": {},
        "stopReason": "error",
        "timestamp": 4,
    },
    {"role": "user", "content": "Thanks!", "timestamp": 5},
]

TOOLS = [
    ToolDefinition(
        name="bash",
        description="Run a shell command.",
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    )
]


async def test_the_request_converts_pi_messages_tools_and_sends_the_key(
    server: FakeOpenAIServer,
) -> None:
    server.replies.append(Reply(chunks=[TEXT_STREAM]))

    await run(server.provider(), messages=PI_MESSAGES, tools=TOOLS)

    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "List the files."},
            {
                "role": "assistant",
                "content": "Sure.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
            # the empty errored assistant message is dropped
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": "Run a shell command.",
                    "parameters": TOOLS[0].parameters,
                },
            }
        ],
    }


async def test_no_authorization_header_is_sent_without_a_key(server: FakeOpenAIServer) -> None:
    server.replies.append(Reply(chunks=[TEXT_STREAM]))

    await run(server.provider(api_key=None))

    [request] = server.received
    assert "authorization" not in request.headers
    assert "tools" not in request.body


async def test_a_user_image_is_sent_as_a_data_url_part(server: FakeOpenAIServer) -> None:
    server.replies.append(Reply(chunks=[TEXT_STREAM]))
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": "iVBORw0K", "mimeType": "image/png"},
        ],
        "timestamp": 1,
    }

    await run(server.provider(), messages=[message])

    assert server.received[0].body["messages"][1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
        ],
    }


# --- failures -----------------------------------------------------------------------


async def test_a_rate_limit_names_retry_after_and_the_server_message(
    server: FakeOpenAIServer,
) -> None:
    error = {
        "error": {
            "message": "Rate limit reached for gpt-test on tokens per min (TPM).",
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    server.replies.append(
        Reply(
            status=429,
            headers={"Content-Type": "application/json", "Retry-After": "20"},
            chunks=[json.dumps(error).encode()],
        )
    )

    message = await fails(server.provider())

    assert "rate limit" in message.lower()
    assert "HTTP 429" in message
    assert "retry after 20 s (Retry-After)" in message
    assert "Rate limit reached for gpt-test on tokens per min (TPM)." in message


async def test_a_server_error_reports_the_status_and_a_bounded_excerpt(
    server: FakeOpenAIServer,
) -> None:
    page = "<html><body>Internal Server Error " + "x" * 200_000 + "</body></html>"
    server.replies.append(
        Reply(status=500, headers={"Content-Type": "text/html"}, chunks=[page.encode()])
    )

    message = await fails(server.provider())

    assert "HTTP 500" in message
    assert "Internal Server Error" in message
    assert len(message) < 1000


async def test_an_auth_failure_says_authentication_failed(server: FakeOpenAIServer) -> None:
    body = {"error": {"message": "Incorrect API key provided: sk-test-***cdef.", "code": "x"}}
    server.replies.append(
        Reply(
            status=401,
            headers={"Content-Type": "application/json"},
            chunks=[json.dumps(body).encode()],
        )
    )

    message = await fails(server.provider())

    assert "authentication failed" in message
    assert "HTTP 401" in message
    assert "Incorrect API key provided" in message


async def test_an_error_body_echoing_the_key_is_redacted(server: FakeOpenAIServer) -> None:
    body = {"error": {"message": f"bad header: Bearer {API_KEY}"}}
    server.replies.append(
        Reply(
            status=403,
            headers={"Content-Type": "application/json"},
            chunks=[json.dumps(body).encode()],
        )
    )

    message = await fails(server.provider())  # asserts the key is absent

    assert "Bearer <redacted>" in message


async def test_invalid_tool_arguments_name_the_tool_call(server: FakeOpenAIServer) -> None:
    body = sse_body(
        tool_call_delta(0, id="call_w1", name="write"),
        tool_call_delta(0, args='{"path": "a.txt", "content": '),
        chunk({}, "length"),
        "[DONE]",
    )
    server.replies.append(Reply(chunks=[body]))

    message = await fails(server.provider())

    assert "tool call 'write' (id call_w1) has invalid JSON arguments" in message
    assert "token limit" in message


async def test_a_stream_that_stops_without_finish_or_done_is_an_error(
    server: FakeOpenAIServer,
) -> None:
    body = sse_body(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hal"}))
    server.replies.append(Reply(chunks=[body]))

    message = await fails(server.provider())

    assert "stream ended early" in message


async def test_an_error_event_mid_stream_is_reported(server: FakeOpenAIServer) -> None:
    body = sse_body(chunk({"content": "Hi"}), {"error": {"message": "model overloaded"}})
    server.replies.append(Reply(chunks=[body]))

    message = await fails(server.provider())

    assert "model overloaded" in message


async def test_a_json_answer_instead_of_a_stream_is_reported(server: FakeOpenAIServer) -> None:
    body = {"error": {"message": "streaming is not supported"}}
    server.replies.append(
        Reply(headers={"Content-Type": "application/json"}, chunks=[json.dumps(body).encode()])
    )

    message = await fails(server.provider())

    assert "instead of an event stream" in message
    assert "streaming is not supported" in message


async def test_an_html_page_instead_of_a_stream_is_reported_and_not_retried(
    server: FakeOpenAIServer,
) -> None:
    # A proxy's login page answered 200: a wrong base URL, not a transient failure.
    server.replies.append(
        Reply(
            headers={"Content-Type": "text/html; charset=utf-8"},
            chunks=[b"<html><body>Please sign in</body></html>"],
        )
    )
    with pytest.raises(ProviderError) as caught:
        await server.provider().complete(system_prompt="", messages=[], tools=[])
    assert "instead of an event stream" in str(caught.value)
    assert "Please sign in" in str(caught.value)
    assert not getattr(caught.value, "transient", False)


async def test_a_dropped_connection_is_a_provider_error_with_its_cause(
    server: FakeOpenAIServer,
) -> None:
    server.replies.append(
        Reply(chunks=[sse_body(chunk({"content": "Hal"}))], drop_after_chunks=True)
    )

    with pytest.raises(ProviderError, match="failed: RemoteProtocolError") as caught:
        with trio.fail_after(WAIT_S):
            await server.provider().complete(system_prompt="", messages=[], tools=[])

    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


async def test_a_refused_connection_is_a_provider_error_with_its_cause() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAIProvider(MODEL, f"http://127.0.0.1:{port}/v1", None)

    with pytest.raises(ProviderError, match="cannot connect to") as caught:
        with trio.fail_after(WAIT_S):
            await provider.complete(system_prompt="", messages=[], tools=[])

    assert isinstance(caught.value.__cause__, httpx.ConnectError)


async def test_a_silent_server_times_out_with_a_provider_error(server: FakeOpenAIServer) -> None:
    server.replies.append(Reply(hang=True))

    with pytest.raises(ProviderError, match="timed out") as caught:
        with trio.fail_after(WAIT_S):
            await server.provider(timeout_s=0.3).complete(system_prompt="", messages=[], tools=[])

    assert isinstance(caught.value.__cause__, httpx.TimeoutException)


async def test_cancellation_propagates_and_is_not_a_provider_error(
    server: FakeOpenAIServer,
) -> None:
    server.replies.append(Reply(hang=True))

    with trio.move_on_after(0.3) as scope:
        await server.provider().complete(system_prompt="", messages=[], tools=[])

    assert scope.cancelled_caught


async def test_a_key_echoed_past_the_excerpt_limit_is_redacted_even_when_cut(
    server: FakeOpenAIServer,
) -> None:
    body = {"error": {"message": "x" * 480 + " Bearer " + API_KEY}}  # the cut falls inside the key
    server.replies.append(
        Reply(
            status=400,
            headers={"Content-Type": "application/json"},
            chunks=[json.dumps(body).encode()],
        )
    )

    message = await fails(server.provider())

    assert API_KEY[:8] not in message
