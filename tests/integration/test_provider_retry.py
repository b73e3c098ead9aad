"""Retries, the idle-stream timeout and stream bounds of a real provider against a
loopback fault server (issue 16 "Retries", "Tests"): `AutoRetry` around
`OpenAIProvider.complete`, each failure produced on a real TCP connection.

Delays are measured with ``time.monotonic()`` between the requests the server
received; bounds are generous above (a busy 2-core machine) and exact below (the
server's ``Retry-After`` is a minimum).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
import trio
from fault_servers import FaultServer, anthropic_text, http_error, openai_text, stream

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.openai import OpenAIProvider
from pi_sandbox.supervisor.providers.retry import AutoRetry, RetrySettings
from pi_sandbox.supervisor.providers.sse import SSEDecoder

KEY = "sk-RETRY-SENTINEL-0123456789abcdef"
WAIT_S = 60  # only a hang reaches it


def fast(**changes: Any) -> AutoRetry:
    """Retries with short delays (50 ms base), seeded jitter."""
    settings = RetrySettings(base_delay_ms=50, max_delay_ms=10_000)
    for name, value in changes.items():
        setattr(settings, name, value)
    return AutoRetry(settings, rng=random.Random(7))


class Recorder:
    """Collects events and text deltas."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.deltas: list[str] = []
        self.started = trio.Event()

    async def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["type"] == "auto_retry_start":
            self.started.set()

    async def delta(self, text: str) -> None:
        self.deltas.append(text)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


async def ask(server: FaultServer, retry: AutoRetry, rec: Recorder, **provider_args: Any) -> Any:
    provider = OpenAIProvider("gpt-test", server.url(), KEY, **provider_args)

    async def attempt() -> Any:
        return await provider.complete(
            system_prompt="s", messages=[], tools=[], on_text_delta=rec.delta
        )

    with trio.fail_after(WAIT_S):
        return await retry.run(attempt, rec.emit)


async def test_a_429_with_retry_after_waits_at_least_that_long_then_succeeds() -> None:
    rec = Recorder()
    with FaultServer(
        [
            http_error(429, {"error": {"message": "slow down"}}, retry_after="1"),
            stream(openai_text("ok")),
        ]
    ) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "ok"
    waited = server.hits[1].at - server.hits[0].at
    assert 1.0 <= waited < 1.0 + 10  # the header is a minimum; the bound is for a busy box
    [start] = rec.of("auto_retry_start")
    assert start["attempt"] == 1 and start["maxAttempts"] == 3
    assert start["delayMs"] >= 1000 and "HTTP 429" in start["errorMessage"]
    assert rec.of("auto_retry_end") == [{"type": "auto_retry_end", "success": True, "attempt": 1}]


async def test_retry_after_ms_is_read_in_milliseconds() -> None:
    rec = Recorder()
    with FaultServer(
        [http_error(503, retry_after_ms="400", retry_after="9"), stream(openai_text("ok"))]
    ) as server:
        await ask(server, fast(), rec)

    assert 0.4 <= server.hits[1].at - server.hits[0].at < 9  # -ms wins over Retry-After
    assert 400 <= rec.of("auto_retry_start")[0]["delayMs"] < 9000


async def test_a_529_overload_is_retried() -> None:
    rec = Recorder()
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with FaultServer([http_error(529, body), stream(openai_text("fine"))]) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "fine" and len(server.hits) == 2
    assert "HTTP 529" in rec.of("auto_retry_start")[0]["errorMessage"]


async def test_a_500_then_success_backs_off_then_answers() -> None:
    rec = Recorder()
    with FaultServer([http_error(500), http_error(502), stream(openai_text("done"))]) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "done" and len(server.hits) == 3
    delays = [e["delayMs"] for e in rec.of("auto_retry_start")]
    assert [e["attempt"] for e in rec.of("auto_retry_start")] == [1, 2]
    assert 40 <= delays[0] <= 60 and 80 <= delays[1] <= 120  # 50 ms doubling, ±20 % jitter
    assert rec.of("auto_retry_end")[-1] == {"type": "auto_retry_end", "success": True, "attempt": 2}


async def test_a_connection_cut_before_the_first_token_is_retried() -> None:
    rec = Recorder()
    with FaultServer(
        [stream(openai_text("never", done=False)[:1], then="cut"), stream(openai_text("again"))]
    ) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "again" and rec.deltas == ["again"]
    assert len(server.hits) == 2


async def test_a_connection_reset_before_any_byte_is_retried() -> None:
    rec = Recorder()
    with FaultServer([stream([], then="reset"), stream(openai_text("back"))]) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "back" and len(server.hits) == 2


async def test_a_connection_cut_after_the_first_token_is_an_error_and_not_retried() -> None:
    rec = Recorder()
    with (
        FaultServer(
            [
                stream(openai_text("Hello", " wor", done=False), then="cut"),
                stream(openai_text("dup")),
            ]
        ) as server,
        pytest.raises(ProviderError) as caught,
    ):
        await ask(server, fast(), rec)

    assert len(server.hits) == 1  # no second request: "Hello wor" is not streamed twice
    assert rec.deltas == ["Hello", " wor"]
    assert caught.value.output_started and not caught.value.transient
    assert "after the answer had started (9 characters received); not retried" in str(caught.value)
    assert rec.of("auto_retry_start") == []


async def test_a_silent_stream_hits_the_idle_timeout_not_600_s_and_is_retried() -> None:
    rec = Recorder()
    with FaultServer(
        [stream(openai_text("x", done=False)[:1], then="hang"), stream(openai_text("awake"))]
    ) as server:
        began = time.monotonic()
        turn = await ask(server, fast(), rec, idle_timeout_s=0.5)
        took = time.monotonic() - began

    assert turn.text == "awake"
    assert 0.5 <= server.hits[1].at - server.hits[0].at < 30
    assert took < 30
    assert (
        "the stream went silent: no bytes for 0.5 s"
        in rec.of("auto_retry_start")[0]["errorMessage"]
    )


async def test_a_server_that_sends_no_headers_times_out_and_is_retried() -> None:
    rec = Recorder()
    with FaultServer([stream([], then="hang"), stream(openai_text("late"))]) as server:
        server.faults[0].status = 0  # see FaultServer: status 0 hangs before answering
        turn = await ask(server, fast(), rec, idle_timeout_s=0.5)

    assert turn.text == "late"
    assert (
        "no answer (status line and headers) for 0.5 s"
        in (rec.of("auto_retry_start")[0]["errorMessage"])
    )


async def test_a_stream_that_goes_silent_after_output_is_an_error() -> None:
    rec = Recorder()
    with (
        FaultServer([stream(openai_text("partial", done=False), then="hang")]) as server,
        pytest.raises(ProviderError, match=r"went silent.*not retried"),
    ):
        await ask(server, fast(), rec, idle_timeout_s=0.5)

    assert len(server.hits) == 1 and rec.deltas == ["partial"]


async def test_a_stream_with_headers_and_no_body_times_out() -> None:
    rec = Recorder()
    # The server sends its status line and headers, then nothing: the body's
    # first byte never comes.
    with (
        FaultServer([stream([], then="hang")]) as server,
        pytest.raises(ProviderError, match=r"the stream went silent: no bytes for 0\.3 s"),
    ):
        await ask(server, fast(enabled=False), rec, idle_timeout_s=0.3)


async def test_malformed_sse_is_an_error_that_is_not_retried() -> None:
    rec = Recorder()
    with (
        FaultServer([stream([b"data: {not json\n\n"]), stream(openai_text("no"))]) as server,
        pytest.raises(ProviderError, match="malformed stream chunk"),
    ):
        await ask(server, fast(), rec)

    assert len(server.hits) == 1


async def test_a_huge_event_is_refused_at_the_bound_without_buffering_the_rest() -> None:
    rec = Recorder()
    piece = b"x" * (1024 * 1024)
    huge = [b"data: " + piece] + [piece] * 20  # 21 MiB and never a line end
    with (
        FaultServer([stream(huge, then="hang")]) as server,
        pytest.raises(ProviderError, match="larger than 16777216 characters"),
    ):
        await ask(server, fast(), rec, idle_timeout_s=30)

    assert len(server.hits) == 1


async def test_exhausted_retries_give_a_clear_error_naming_the_attempts() -> None:
    rec = Recorder()
    with (
        FaultServer([http_error(503, {"error": {"message": "busy"}})] * 4) as server,
        pytest.raises(ProviderError) as caught,
    ):
        await ask(server, fast(), rec)

    assert len(server.hits) == 4
    message = str(caught.value)
    assert "HTTP 503" in message and "busy" in message
    assert "gave up after 4 attempts" in message
    assert [e["attempt"] for e in rec.of("auto_retry_start")] == [1, 2, 3]
    [end] = rec.of("auto_retry_end")
    assert end["success"] is False and end["attempt"] == 3
    assert "gave up after 4 attempts" in end["finalError"]


async def test_a_retry_after_longer_than_the_maximum_is_not_waited_for() -> None:
    rec = Recorder()
    with (
        FaultServer([http_error(429, retry_after="3600")]) as server,
        pytest.raises(ProviderError, match="asks to wait 3600 s, longer than"),
    ):
        await ask(server, fast(), rec)

    assert len(server.hits) == 1 and rec.events == []


async def test_disabled_retries_send_once_control() -> None:
    # Control for the retry tests: the same 500 with retry.enabled false is final.
    rec = Recorder()
    with (
        FaultServer([http_error(500), stream(openai_text("no"))]) as server,
        pytest.raises(ProviderError, match="HTTP 500"),
    ):
        await ask(server, fast(enabled=False), rec)

    assert len(server.hits) == 1 and rec.events == []


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    rec = Recorder()
    with (
        FaultServer([http_error(status), stream(openai_text("no"))]) as server,
        pytest.raises(ProviderError) as caught,
    ):
        await ask(server, fast(), rec)

    assert len(server.hits) == 1 and caught.value.status == status
    assert not caught.value.transient


async def test_abort_retry_cancels_the_wait_and_ends_with_the_last_error() -> None:
    rec = Recorder()
    retry = fast(max_delay_ms=60_000)
    outcome: dict[str, Any] = {}
    with FaultServer([http_error(429, retry_after="30"), stream(openai_text("no"))]) as server:

        async def run() -> None:
            try:
                await ask(server, retry, rec)
            except ProviderError as exc:
                outcome["error"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            with trio.fail_after(WAIT_S):
                await rec.started.wait()
            began = time.monotonic()
            assert retry.waiting
            assert retry.abort_retry()
        took = time.monotonic() - began

    assert took < 10  # not the 30 s the server asked for
    assert len(server.hits) == 1
    assert "retry cancelled by abort_retry after 1 attempt(s)" in str(outcome["error"])
    assert rec.of("auto_retry_end") == [
        {"type": "auto_retry_end", "success": False, "attempt": 1, "finalError": "Retry cancelled"}
    ]
    assert not retry.abort_retry()  # nothing left to cancel


async def test_cancelling_the_session_during_the_wait_ends_it_promptly() -> None:
    rec = Recorder()
    with FaultServer([http_error(503, retry_after="30")]) as server:
        with trio.CancelScope() as scope:

            async def cancel_once_waiting() -> None:
                await rec.started.wait()
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_waiting)
                began = time.monotonic()
                await ask(server, fast(max_delay_ms=60_000), rec)
        took = time.monotonic() - began

    assert scope.cancelled_caught and took < 10
    assert rec.of("auto_retry_end")[-1]["finalError"] == "Retry cancelled"


async def test_a_mid_stream_overload_error_before_output_is_retried() -> None:
    rec = Recorder()
    overloaded = b'data: {"error": {"message": "Provider overloaded, try again"}}\n\n'
    with FaultServer([stream([overloaded]), stream(openai_text("ok"))]) as server:
        turn = await ask(server, fast(), rec)

    assert turn.text == "ok" and len(server.hits) == 2


async def test_the_key_never_appears_in_any_error_or_retry_event() -> None:
    # Every error path echoes the key the server saw; none may show it.
    echo = f"Authorization: Bearer {KEY}"
    faults = [
        http_error(500, {"error": {"message": echo}}),
        http_error(429, echo, retry_after="0"),
        stream([f'data: {{"error": {{"message": "overloaded {echo}"}}}}\n\n'.encode()]),
        http_error(503, {"error": {"message": echo[: len(echo) - 5]}}),  # cut inside the key
    ]
    rec = Recorder()
    with FaultServer(faults) as server, pytest.raises(ProviderError) as caught:
        await ask(server, fast(), rec)
    seen = [str(caught.value), repr(caught.value), *map(str, rec.events)]
    malformed: list[str] = []
    for body in (
        [f"data: {{not json {echo}\n\n".encode()],
        [*openai_text("a", done=False), f'data: {{"error": "{echo}"}}\n\n'.encode()],
    ):
        with FaultServer([stream(body)]) as server, pytest.raises(ProviderError) as other:
            await ask(server, fast(), Recorder())
        malformed.append(str(other.value))

    assert len(rec.of("auto_retry_start")) == 3
    for text in seen + malformed:
        assert KEY[:8] not in text, text
        assert "<redacted>" in text or "gave up" in text


async def test_the_control_echo_does_carry_the_key() -> None:
    # Control for the redaction test: the server really echoes the key.
    with (
        FaultServer([http_error(500, {"error": {"message": f"Bearer {KEY}"}})]) as server,
        pytest.raises(ProviderError),
    ):
        await ask(server, fast(enabled=False), Recorder())
    assert server.hits[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_fault_servers_anthropic_stream_decodes_as_the_messages_api_event_sequence() -> None:
    # For the Anthropic provider's fault tests: the same server, the other wire format.
    decoder = SSEDecoder()
    events = [e for chunk in anthropic_text("Hel", "lo") for e in decoder.feed(chunk.decode())]

    assert [e.event for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(json.loads(e.data)["type"] == e.event for e in events)
    assert "".join(json.loads(e.data)["delta"]["text"] for e in events[2:4]) == "Hello"
