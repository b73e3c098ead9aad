"""Reading a streamed HTTP answer with an idle deadline (issue 16: "an idle-stream
timeout (no bytes for N seconds, configurable) replaces the fixed 600 s").

Shared by every streaming provider (``openai.py``; ``anthropic.py``): the whole answer
may take as long as the model keeps talking, but a silence longer than the idle
timeout ends it with `StreamIdleTimeout`. The connect step has its own, shorter
timeout (`http_timeout`). pi's setting is ``httpIdleTimeoutMs`` (pi docs settings.md,
"Network and retries"; default 300000, ``0`` or ``"disabled"`` turn it off).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import trio

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "StreamIdleTimeout",
    "http_timeout",
    "iter_text_with_idle_timeout",
]

DEFAULT_IDLE_TIMEOUT_S = 300.0
"""pi's ``httpIdleTimeoutMs`` default (300000 ms), in seconds."""

DEFAULT_CONNECT_TIMEOUT_S = 30.0
"""Seconds to open the TCP (and TLS) connection; a dead host fails in this time."""


class StreamIdleTimeout(httpx.ReadTimeout):
    """No byte of the answer arrived for ``idle_timeout_s`` seconds.

    A subclass of ``httpx.ReadTimeout`` so a provider handles it with the other
    timeouts; ``idle_timeout_s`` is the limit that passed.
    """

    def __init__(self, idle_timeout_s: float) -> None:
        super().__init__(f"no bytes received for {idle_timeout_s:g} s")
        self.idle_timeout_s = idle_timeout_s


def http_timeout(idle_timeout_s: float | None, connect_timeout_s: float) -> httpx.Timeout:
    """The ``httpx.Timeout`` of a streaming request.

    ``connect``/``pool``: ``connect_timeout_s``; ``read``/``write``: the idle timeout
    (so waiting for the response headers is bounded by it too, as pi's "header and
    body idle timeout"); None disables them (no idle limit).
    """
    return httpx.Timeout(
        connect=connect_timeout_s,
        pool=connect_timeout_s,
        read=idle_timeout_s,
        write=idle_timeout_s,
    )


async def iter_text_with_idle_timeout(
    response: httpx.Response, idle_timeout_s: float | None
) -> AsyncIterator[str]:
    """Yield the decoded text of ``response`` as it arrives.

    Args:
        response: a streamed response (``client.stream(...)``), not yet read.
        idle_timeout_s: the longest silence allowed between two chunks, in seconds;
            None waits forever (``httpIdleTimeoutMs: "disabled"``).

    Raises:
        StreamIdleTimeout: nothing arrived for ``idle_timeout_s`` seconds. The deadline
            is trio's, so it holds whatever the transport's own read timeout is.
        httpx.HTTPError: as ``response.aiter_text()`` (a reset or closed connection).
    """
    chunks = response.aiter_text()
    try:
        while True:
            if idle_timeout_s is None:
                chunk = await anext(chunks, None)
            else:
                with trio.move_on_after(idle_timeout_s) as idle:
                    chunk = await anext(chunks, None)
                if idle.cancelled_caught:
                    raise StreamIdleTimeout(idle_timeout_s)
            if chunk is None:
                return
            yield chunk
    finally:
        await chunks.aclose()
