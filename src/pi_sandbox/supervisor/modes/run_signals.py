"""Signals during a run: SIGTERM and SIGINT stop it cleanly, SIGHUP reloads the
policy (issue 14 §3; issue 4 case 8 for the reload).

One receiver (`RunStop.serve`) holds all three signals from the first moment of
the run to the last: the run's own tear-down included, so no signal ever meets
Python's default action while workers, sandboxes or the session file are open.

- The first ``SIGTERM`` or ``SIGINT`` stops the run: every guarded wait
  (`RunStop.guard`: worker start, the trust question, ``session_start``, the agent
  run, the RPC loop) is cancelled, the running prompt is aborted (its tool calls
  get ``$/cancel``), and the run then takes its ordinary way out — the session
  file gets no further entry and is closed, ``session_shutdown`` reaches the
  extensions, every worker is stopped and reaped (shutdown request, SIGTERM,
  SIGKILL; bash commands go with their worker; a sandbox's whole PID namespace
  goes with bwrap), and the run's temporary files, cgroups and user
  namespace are removed. Exit status: 128 + the signal, 143 for ``SIGTERM``, 130 for ``SIGINT``.
- A second ``SIGTERM`` or ``SIGINT`` during that tear-down does not interrupt it;
  it kills every worker at once instead of waiting for them
  (`RunStop.on_hurry`), so the tear-down ends within moments.
- ``SIGHUP`` reloads the policy while the run works (`RunStop.reload`); once a
  stop began it is ignored (said once on stderr): neither a reload nor death by
  the default action may cut a tear-down short.

pi 1.6.0 (rpc.md) ends on ``SIGHUP`` too; here ``SIGHUP`` is the policy reload
(docs/policy.md), so only ``SIGTERM`` and ``SIGINT`` stop.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

__all__ = ["HANDLED_SIGNALS", "RunStop", "RunStopped"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANDLED_SIGNALS = (*STOP_SIGNALS, signal.SIGHUP)
"""Every signal `RunStop.serve` receives for the whole run."""


class RunStopped(Exception):
    """A stop signal ended the run (raised by `RunStop.guard` when it cancelled the
    guarded wait, or when the signal came before it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class RunStop:
    """What a run does on ``SIGTERM``/``SIGINT``/``SIGHUP`` (see the module docstring).

    Attributes:
        signum: the first stop signal received, or None.
        on_stop: called once, synchronously, with the first stop signal (abort the
            running prompt).
        on_hurry: called for every further stop signal (kill workers now).
        reload: awaited for each ``SIGHUP`` before any stop (the policy reload).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.on_stop: list[Callable[[], Any]] = []
        self.on_hurry: list[Callable[[], Any]] = []
        self.reload: Callable[[], Awaitable[None]] | None = None
        self._scopes: set[trio.CancelScope] = set()
        self._told_hup = False
        self._early: list[int] = []
        self._previous: dict[int, Any] = {}
        self._handled: tuple[int, ...] | None = None

    @property
    def exit_status(self) -> int | None:
        """128 + the stop signal's number (143 for SIGTERM, 130 for SIGINT), or None."""
        return None if self.signum is None else 128 + self.signum

    def hold(self) -> None:
        """Before ``trio.run`` (main thread): from now until `release`,
        `HANDLED_SIGNALS` are recorded, never left to their default action, whenever
        `receiving` is not open.

        A signal that comes just before the receiver opens is acted on once it is
        open; one that trio raises again after its receiver closed (trio does so
        for signals still pending then, possibly from a callback that runs after
        the receiver's own clean-up), or one that comes while the run's last
        records are written, is dropped instead of killing ``pi`` by the default
        action after the tear-down already ran.
        """
        if not self._previous:
            self._previous = {
                signum: signal.signal(signum, self._record) for signum in self.signals()
            }

    def signals(self) -> tuple[int, ...]:
        """The `HANDLED_SIGNALS` this run handles: all but a stop signal the parent
        set to be ignored (a shell's background job ignores ``SIGINT``; that choice
        is kept, as every Unix program keeps it). ``SIGHUP`` is always handled: the
        policy reload works under ``nohup`` too (docs/policy.md)."""
        if self._handled is None:
            self._handled = tuple(
                signum
                for signum in HANDLED_SIGNALS
                if signum == signal.SIGHUP or signal.getsignal(signum) is not signal.SIG_IGN
            )
        return self._handled

    def release(self) -> None:
        """Put back the handlers `hold` replaced (idempotent)."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """`hold` … `release` as a context manager."""
        self.hold()
        try:
            yield
        finally:
            self.release()

    def _record(self, signum: int, frame: object) -> None:
        self._early.append(signum)

    @contextlib.contextmanager
    def receiving(self) -> Iterator[Any]:
        """`trio.open_signal_receiver` for `HANDLED_SIGNALS` (inside `holding`); a stop
        signal recorded before it opened is acted on at once."""
        with trio.open_signal_receiver(*self.signals()) as signals:
            early, self._early = self._early, []
            for signum in early:
                if signum in STOP_SIGNALS:
                    self.stop(signum)
            yield signals

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """A scope the first stop signal cancels; raises `RunStopped` when it was
        cancelled (or when a stop signal came before it was entered).

        Raises:
            RunStopped: on leaving, if a stop signal cancelled the scope.
        """
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            if self.signum is not None:
                scope.cancel()
            try:
                yield
            finally:
                self._scopes.discard(scope)
        if scope.cancelled_caught and self.signum is not None:
            raise RunStopped(self.signum)

    def stop(self, signum: int) -> None:
        """Act on one stop signal (``serve`` calls it; tests may too)."""
        name = signal.Signals(signum).name
        if self.signum is not None:
            _say(f"{name} again: stopping every worker now")
            for hurry in self.on_hurry:
                with contextlib.suppress(Exception):
                    hurry()
            return
        self.signum = signum
        _say(
            f"{name} received: stopping (tool calls cancelled, workers stopped, exit {128 + signum})"
        )
        for scope in list(self._scopes):
            scope.cancel()
        for callback in self.on_stop:
            with contextlib.suppress(Exception):  # a stop must go on whatever fails
                callback()

    async def serve(self, signals: Any) -> None:
        """Handle the signals from ``signals`` (a `trio.open_signal_receiver` of
        `HANDLED_SIGNALS`) until cancelled."""
        async for signum in signals:
            if signum in STOP_SIGNALS:
                self.stop(signum)
            elif self.signum is None and self.reload is not None:
                await self.reload()
            elif not self._told_hup:
                self._told_hup = True
                _say("SIGHUP ignored: the run is stopping")


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        print(f"pi: {text}", file=sys.stderr, flush=True)
