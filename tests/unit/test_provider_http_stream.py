"""`IdleDeadline`: a stream ends after a silence of the idle limit, never earlier,
and as long as chunks keep coming it never ends (issue 16: the idle-stream timeout
replaces the fixed 600 s). Trio's autojump clock makes the times exact."""

from __future__ import annotations

import pytest
import trio

from pi_sandbox.supervisor.providers.http_stream import (
    IdleDeadline,
    StreamIdleTimeout,
    http_timeout,
)


async def test_a_silence_longer_than_the_limit_ends_the_stream(autojump_clock) -> None:
    began = trio.current_time()
    with pytest.raises(StreamIdleTimeout, match="no bytes received for 10 s"), IdleDeadline(10):
        await trio.sleep(1000)

    silence = trio.current_time() - began
    assert 10 <= silence <= 10 * 17 / 16


async def test_chunks_that_keep_coming_never_hit_the_limit(autojump_clock) -> None:
    with IdleDeadline(10) as idle:
        for _ in range(100):  # 900 s in all, never 10 s without a chunk
            await trio.sleep(9)
            idle.touch()


async def test_the_limit_counts_from_the_last_chunk_not_from_the_start(autojump_clock) -> None:
    with pytest.raises(StreamIdleTimeout), IdleDeadline(10) as idle:
        for _ in range(5):
            await trio.sleep(9)
            idle.touch()
        last = trio.current_time()
        await trio.sleep(1000)

    assert 10 <= trio.current_time() - last <= 10 * 17 / 16


async def test_no_limit_never_fires(autojump_clock) -> None:
    with IdleDeadline(None) as idle:
        await trio.sleep(10_000)
        idle.touch()


async def test_an_outer_cancel_is_not_mistaken_for_silence(autojump_clock) -> None:
    with trio.move_on_after(5) as outer:
        with IdleDeadline(10):
            await trio.sleep(1000)

    assert outer.cancelled_caught


def test_the_http_timeout_separates_connect_from_idle() -> None:
    timeout = http_timeout(120, 30)
    assert (timeout.connect, timeout.pool, timeout.read, timeout.write) == (30, 30, 120, 120)
    assert http_timeout(None, 5).read is None
