"""Reading a streamed HTTP answer with an idle deadline (issue 16: "an idle-stream
timeout (no bytes for N seconds, configurable) replaces the fixed 600 s").

Shared by every streaming provider (``openai.py``; ``anthropic.py``): the whole answer
may take as long as the model keeps talking, but a silence longer than the idle
timeout ends it with `StreamIdleTimeout` (`IdleDeadline`). The connect step has its
own, shorter timeout (`http_timeout`). pi's setting is ``httpIdleTimeoutMs`` (pi docs settings.md,
"Network and retries"; default 300000, ``0`` or ``"disabled"`` turn it off).
"""

from __future__ import annotations

import functools
import math
import ssl

import trio

from .httpx_import import httpx

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "IdleDeadline",
    "StreamIdleTimeout",
    "http_timeout",
    "shared_ssl_context",
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


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle, ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` honoured), built once per process: loading the CA bundle costs
    ≈ 30 ms, which a short-lived client per request would pay every turn."""
    return httpx.create_ssl_context()


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


class IdleDeadline:
    """A cancel scope that ends a stream after ``idle_timeout_s`` seconds of silence.

    Use it around the loop that reads the answer, and `touch` it after each chunk is
    processed, so the time spent handing a chunk on (a slow terminal, an extension's
    ``message_update`` handler) is not added to the silence that follows (one chunk
    whose handling alone outlasts the whole limit still ends the stream)::

        with IdleDeadline(idle_timeout_s) as idle:
            async for chunk in response.aiter_text():
                ...
                idle.touch()

    On leaving, raises `StreamIdleTimeout` if the deadline passed. One scope serves the
    whole stream, and its deadline is moved only every ``idle_timeout_s / 16`` seconds,
    so the cost per chunk is one clock read (bench/bench_provider_retry_stream.py): the
    limit is met after a silence between ``idle_timeout_s`` and 17/16 of it, never
    earlier. A None timeout never fires.
    """

    def __init__(self, idle_timeout_s: float | None) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._scope = trio.CancelScope()
        self._step = 0.0 if idle_timeout_s is None else idle_timeout_s / 16
        self._moved = 0.0

    def __enter__(self) -> IdleDeadline:
        self._scope.__enter__()
        self._moved = -math.inf
        self.touch()
        return self

    def touch(self) -> None:
        """A byte arrived (or was handed on): the silence starts again from now."""
        if self.idle_timeout_s is None:
            return
        now = trio.current_time()
        if now - self._moved > self._step:
            self._moved = now
            self._scope.deadline = now + self.idle_timeout_s + self._step

    def __exit__(self, *exc_info: object) -> bool:
        suppressed = self._scope.__exit__(*exc_info)
        if self._scope.cancelled_caught and self.idle_timeout_s is not None:
            raise StreamIdleTimeout(self.idle_timeout_s)
        return bool(suppressed)
