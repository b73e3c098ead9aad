"""Automatic retries of a model request (issue 16 "Retries"; pi docs settings.md
"Network and retries", json.md "Retry events", rpc-commands.md "Retry").

A request that fails with a transient error (``ProviderError.transient``: HTTP 408,
409, 429, 500, 502, 503, 504, 529, a refused or reset connection, a connection closed
or a stream gone silent) *before any output* is sent again after an exponential
backoff with jitter, at most ``retry.maxRetries`` times. A server's ``Retry-After`` /
``retry-after-ms`` is honoured (the wait is never shorter) up to
``retry.maxAgentDelayMs``; a server that asks for longer is not retried — its error
says so. A failure after the answer began (``ProviderError.output_started``) is never
retried: the text already streamed would be streamed again (docs/providers.md).

Each retry is announced with pi's events::

    {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000,
     "errorMessage": "…"}
    {"type": "auto_retry_end", "success": true, "attempt": 1}
    {"type": "auto_retry_end", "success": false, "attempt": 3, "finalError": "…"}

``attempt`` counts retries (1 = the first retry), as pi does. The wait is cancelled by
`AutoRetry.abort_retry` (RPC ``abort_retry``: the run ends with the last error) and by
the session's abort (Ctrl-C, RPC ``abort``: the run ends as aborted).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio

from pi_sandbox.errors import ProviderError
from pi_sandbox.resources.settings_lists import MAX_SETTINGS_BYTES

__all__ = [
    "TRANSIENT_STATUSES",
    "AutoRetry",
    "RetrySettings",
    "load_retry_settings",
    "parse_retry_after",
]

TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses worth a retry (issue 16): timeout, conflict, rate limit, server
errors and Anthropic's 529 overloaded."""

T = TypeVar("T")
EmitFn = Callable[[dict[str, Any]], Awaitable[None]]


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds a server asks to wait, from response ``headers`` (case-insensitive
    mapping, e.g. ``httpx.Headers``).

    ``retry-after-ms`` (milliseconds, OpenAI and Anthropic send it) wins over
    ``Retry-After``, which is seconds (``"2"``, ``"1.5"``) or an HTTP date (RFC 9110
    §10.2.3; a date in the past is 0). ``now`` is the clock for dates (epoch seconds,
    default ``time.time()``). Returns None when neither header holds a usable,
    finite, non-negative value.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        with contextlib.suppress(ValueError):
            value = float(raw_ms.strip())
            if math.isfinite(value) and value >= 0:
                return value / 1000
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    with contextlib.suppress(ValueError):
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class RetrySettings:
    """The ``retry`` settings and ``httpIdleTimeoutMs`` (pi's names and defaults, pi
    docs settings.md "Network and retries").

    Attributes:
        enabled: ``retry.enabled`` (true).
        max_retries: ``retry.maxRetries`` (3): retries after the first attempt.
        base_delay_ms: ``retry.baseDelayMs`` (2000): the first backoff; it doubles.
        max_delay_ms: ``retry.maxAgentDelayMs`` (60000; ``retry.maxDelayMs`` is read
            as another name for it): no backoff is longer, and a server asking for a
            longer wait is not retried.
        idle_timeout_ms: ``httpIdleTimeoutMs`` (300000): no bytes for this long ends
            a request; None when ``0`` or ``"disabled"``.
    """

    enabled: bool = True
    max_retries: int = 3
    base_delay_ms: int = 2000
    max_delay_ms: int = 60000
    idle_timeout_ms: int | None = 300000

    @property
    def idle_timeout_s(self) -> float | None:
        """``idle_timeout_ms`` in seconds (None: no limit)."""
        return None if self.idle_timeout_ms is None else self.idle_timeout_ms / 1000


IDLE_TIMEOUT_ENV = "PI_HTTP_IDLE_TIMEOUT_MS"
"""Environment override of ``httpIdleTimeoutMs`` (ours, for tests and one-off runs)."""


def _apply(settings: RetrySettings, data: dict[str, Any], where: str) -> None:
    """Apply one settings object's keys; raises ValueError naming ``where`` and the key."""

    def number(key: str, value: Any, *, minimum: int = 0) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{where}: {key}: expected a number, got {value!r}")
        if value < minimum:
            raise ValueError(f"{where}: {key}: must be at least {minimum}, got {value!r}")
        return int(value)

    if "httpIdleTimeoutMs" in data:
        value = data["httpIdleTimeoutMs"]
        if value == "disabled":
            settings.idle_timeout_ms = None
        else:
            ms = number("httpIdleTimeoutMs", value)
            settings.idle_timeout_ms = ms or None
    retry = data.get("retry")
    if retry is None:
        return
    if not isinstance(retry, dict):
        raise ValueError(f"{where}: retry: expected an object, got {type(retry).__name__}")
    if "enabled" in retry:
        if not isinstance(retry["enabled"], bool):
            raise ValueError(f"{where}: retry.enabled: expected true or false")
        settings.enabled = retry["enabled"]
    if "maxRetries" in retry:
        settings.max_retries = number("retry.maxRetries", retry["maxRetries"])
    if "baseDelayMs" in retry:
        settings.base_delay_ms = number("retry.baseDelayMs", retry["baseDelayMs"])
    for key in ("maxDelayMs", "maxAgentDelayMs"):  # pi's name last: it wins
        if key in retry:
            settings.max_delay_ms = number(f"retry.{key}", retry[key])


def load_retry_settings(
    agent_dir: Path, cwd: Path | None = None, *, environ: Mapping[str, str] | None = None
) -> tuple[RetrySettings, list[str]]:
    """The retry settings of a run: pi's defaults, then ``<agent_dir>/settings.json``,
    then ``<cwd>/.pi/settings.json`` (only when ``cwd`` is given: the caller passes it
    for a trusted project only, DESIGN §8), then ``$PI_HTTP_IDLE_TIMEOUT_MS``.

    Returns:
        ``(settings, notices)``: a file that is missing, unreadable or not JSON is
        skipped (the extension loader reports such a file); one with a retry key of the
        wrong type is skipped as a whole with a notice naming the file and the key (the
        defaults stay: retries are a convenience, a bad file must not stop the run).
    """
    from pi_sandbox.regular_files import FileRefusedError, read_regular_file

    settings = RetrySettings()
    notices: list[str] = []
    files = [agent_dir / "settings.json"]
    if cwd is not None:
        files.append(cwd / ".pi" / "settings.json")
    for path in files:
        try:
            data = json.loads(read_regular_file(path, MAX_SETTINGS_BYTES))
        except (FileRefusedError, OSError, ValueError, UnicodeDecodeError, RecursionError):
            # Missing, unreadable or not JSON: the same file's other loaders
            # (extension_discovery.settings_paths) report it once; the defaults stay.
            continue
        if not isinstance(data, dict):
            continue  # the settings loaders of other keys report this shape once
        candidate = RetrySettings(**vars(settings))
        try:
            _apply(candidate, data, str(path))
        except ValueError as exc:
            notices.append(f"{exc}; the retry settings of this file were not used")
            continue
        settings = candidate
    env = (os.environ if environ is None else environ).get(IDLE_TIMEOUT_ENV)
    if env is not None:
        try:
            _apply(settings, {"httpIdleTimeoutMs": float(env)}, f"${IDLE_TIMEOUT_ENV}")
        except ValueError as exc:
            notices.append(f"${IDLE_TIMEOUT_ENV}: {env!r} is not a number of ms ({exc}); ignored")
    return settings, notices


class AutoRetry:
    """Runs one model request with pi's automatic retries (see the module docstring).

    Attributes:
        settings: the run's `RetrySettings`; ``settings.enabled`` is what RPC
            ``set_auto_retry`` changes.
        rng: the jitter's random source (tests seed it).
    """

    def __init__(self, settings: RetrySettings | None = None, *, rng: random.Random | None = None):
        self.settings = settings or RetrySettings()
        self.rng = rng or random.Random()
        self._wait: trio.CancelScope | None = None
        self._retry_aborted = False

    @property
    def waiting(self) -> bool:
        """Whether a retry's wait is in progress."""
        return self._wait is not None

    def abort_retry(self) -> bool:
        """Cancel the wait before a retry (RPC ``abort_retry``): no further attempt,
        the request fails with its last error. Returns whether a wait was cancelled."""
        if self._wait is None:
            return False
        self._retry_aborted = True
        self._wait.cancel()
        return True

    def delay_s(self, retry: int, retry_after: float | None) -> float | None:
        """The wait before retry number ``retry`` (1-based), in seconds.

        Exponential backoff ``baseDelayMs × 2^(retry-1)`` with ±20 % jitter, capped at
        ``maxAgentDelayMs``; never shorter than ``retry_after`` (the server's ask).
        None when the server asks for more than ``maxAgentDelayMs``: not worth a retry.
        """
        cap = self.settings.max_delay_ms / 1000
        if retry_after is not None and retry_after > cap:
            return None
        backoff = self.settings.base_delay_ms / 1000 * 2 ** (retry - 1)
        backoff *= self.rng.uniform(0.8, 1.2)
        return max(min(backoff, cap), retry_after or 0.0)

    async def run(self, attempt: Callable[[], Awaitable[T]], emit: EmitFn) -> T:
        """Await ``attempt()`` until it succeeds, fails for good, or retries run out.

        Args:
            attempt: one model request (a fresh call each time).
            emit: receives the ``auto_retry_start``/``auto_retry_end`` events.

        Raises:
            ProviderError: the last failure. When retries were made its message ends
                with how many attempts were made (or that ``abort_retry`` stopped
                them, or that the server asked to wait longer than the maximum).
            trio.Cancelled: the session was aborted (during a request or a wait); an
                ``auto_retry_end`` with ``success: false`` is emitted first when a
                retry was in progress.
        """
        retries = 0
        while True:
            try:
                result = await attempt()
            except ProviderError as exc:
                error = exc
            else:
                if retries:
                    await emit({"type": "auto_retry_end", "success": True, "attempt": retries})
                return result
            settings = self.settings
            if not (settings.enabled and error.transient and not error.output_started):
                if retries:
                    raise await self._give_up(error, retries, emit, "")
                raise error
            if retries >= settings.max_retries:
                if retries:
                    raise await self._give_up(
                        error, retries, emit, f"gave up after {retries + 1} attempts"
                    )
                raise error
            delay = self.delay_s(retries + 1, error.retry_after)
            if delay is None:
                why = (
                    f"not retried: the server asks to wait {error.retry_after:g} s, longer "
                    f"than retry.maxAgentDelayMs ({settings.max_delay_ms} ms)"
                )
                if retries:
                    raise await self._give_up(error, retries, emit, why)
                raise _annotated(error, why)
            retries += 1
            await emit(
                {
                    "type": "auto_retry_start",
                    "attempt": retries,
                    "maxAttempts": settings.max_retries,
                    "delayMs": round(delay * 1000),
                    "errorMessage": str(error),
                }
            )
            self._retry_aborted = False
            try:
                with trio.CancelScope() as self._wait:
                    await trio.sleep(delay)
            except trio.Cancelled:
                # The session's abort (Ctrl-C, RPC abort): say the retry ended, then go.
                with trio.CancelScope(shield=True):
                    await emit(
                        {
                            "type": "auto_retry_end",
                            "success": False,
                            "attempt": retries,
                            "finalError": "Retry cancelled",
                        }
                    )
                raise
            finally:
                self._wait = None
            if self._retry_aborted:
                self._retry_aborted = False
                await emit(
                    {
                        "type": "auto_retry_end",
                        "success": False,
                        "attempt": retries,
                        "finalError": "Retry cancelled",
                    }
                )
                raise _annotated(
                    error, f"retry cancelled by abort_retry after {retries} attempt(s)"
                )

    async def _give_up(
        self, error: ProviderError, retries: int, emit: EmitFn, why: str
    ) -> ProviderError:
        final = _annotated(error, why or f"after {retries + 1} attempts")
        await emit(
            {
                "type": "auto_retry_end",
                "success": False,
                "attempt": retries,
                "finalError": str(final),
            }
        )
        return final


def _annotated(error: ProviderError, note: str) -> ProviderError:
    """``error`` with ``note`` appended to its message, same attributes and cause."""
    out = ProviderError(
        f"{error} ({note})",
        status=error.status,
        retry_after=error.retry_after,
        transient=error.transient,
        output_started=error.output_started,
    )
    out.__cause__ = error.__cause__ or error
    return out
