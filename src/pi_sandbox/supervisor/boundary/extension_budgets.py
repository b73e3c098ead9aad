"""Rates and per-session budgets of what each extension makes the supervisor do
(issue 13 §4; limits in `ExtensionLimits`, policy ``extensions.limits``).

- **Rates**: one token bucket per extension and kind (``writes``, ``ui``, ``bus``,
  ``logs``): ``KIND_per_s`` tokens a second, at most ``KIND_burst`` saved up.
  An action with no token left is refused, not delayed (a delay would keep its
  request open and pile up work in the supervisor).
- **Session budgets**: what one extension wrote into the current session (bytes
  and entries), and what all extensions together wrote (bytes). They start over
  when the session is replaced (new, fork, switch), not on reload: reloading
  does not buy an extension a fresh budget.
- **Strikes**: each refusal counts against the extension (except one caused by
  the shared total, which another extension may have used up); at
  ``limits.strikes`` the caller disables it.

Buckets are keyed by the extension's path, so a restarted or reloaded worker of
the same extension continues its predecessor's account.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pi_sandbox.policies._extension_limits import ExtensionLimits, LimitRules
from pi_sandbox.supervisor.boundary.agent_messages import MessageRefusedError

__all__ = ["KINDS", "ExtensionBudgets", "LimitExceededError"]

KINDS = ("writes", "ui", "bus", "logs")
"""The rate-limited kinds of action."""


class LimitExceededError(MessageRefusedError):
    """An action past a rate or a session budget.

    Attributes:
        strike: whether it counts against the extension (False when the shared
            ``session_bytes_total`` was the limit).
    """

    def __init__(self, message: str, *, strike: bool = True) -> None:
        super().__init__(message)
        self.strike = strike


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class _Account:
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    session_bytes: int = 0
    session_entries: int = 0
    strikes: int = 0


class ExtensionBudgets:
    """The accounts of every extension of one run.

    Args:
        rules: the policy's ``extensions.limits`` (`LimitRules`).
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, rules: LimitRules, clock: Callable[[], float] = time.monotonic) -> None:
        self.rules = rules
        self._clock = clock
        self._accounts: dict[Path, _Account] = {}
        self._session: str | None = None
        self.session_bytes_total = 0

    def limits(self, origin: str) -> ExtensionLimits:
        """The limits of an extension of ``origin`` (``"project"`` or another)."""
        return self.rules.for_origin(origin)

    def _account(self, path: Path) -> _Account:
        return self._accounts.setdefault(path, _Account())

    def begin_session(self, session_id: str) -> None:
        """Start the session budgets over when ``session_id`` differs from the last."""
        if session_id == self._session:
            return
        self._session = session_id
        self.session_bytes_total = 0
        for account in self._accounts.values():
            account.session_bytes = account.session_entries = 0
            account.strikes = 0

    def take(self, path: Path, origin: str, kind: str) -> None:
        """Spend one token of ``kind`` (`KINDS`) for extension ``path``.

        Raises:
            LimitExceededError: none left (names ``extensions.limits.KIND_per_s``).
        """
        limits = self.limits(origin)
        rate: int = getattr(limits, f"{kind}_per_s")
        burst: int = getattr(limits, f"{kind}_burst")
        now = self._clock()
        account = self._account(path)
        bucket = account.buckets.get(kind)
        if bucket is None:
            bucket = account.buckets[kind] = _Bucket(float(burst), now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            raise LimitExceededError(
                f"more than {rate} {kind} a second (burst {burst}; "
                f"extensions.limits.{kind}_per_s / {kind}_burst)"
            )
        bucket.tokens -= 1.0

    def charge(self, path: Path, origin: str, size: int) -> None:
        """Account one session write of ``size`` bytes by extension ``path``: its own
        bytes and entries, and the shared total. Nothing is charged when refused.

        Raises:
            LimitExceededError: ``session_entries``, ``session_bytes`` or
                ``session_bytes_total`` would be exceeded.
        """
        limits = self.limits(origin)
        account = self._account(path)
        if account.session_entries + 1 > limits.session_entries:
            raise LimitExceededError(
                f"more than {limits.session_entries} session writes by this extension in "
                "this session (extensions.limits.session_entries)"
            )
        if account.session_bytes + size > limits.session_bytes:
            raise LimitExceededError(
                f"this extension's writes to this session would exceed "
                f"{limits.session_bytes} bytes (extensions.limits.session_bytes)"
            )
        total = self.rules.shared.session_bytes_total
        if self.session_bytes_total + size > total:
            raise LimitExceededError(
                f"extensions' writes to this session would exceed {total} bytes "
                "(extensions.limits.session_bytes_total)",
                strike=False,
            )
        account.session_entries += 1
        account.session_bytes += size
        self.session_bytes_total += size

    def strike(self, path: Path, origin: str) -> bool:
        """Count one refusal against extension ``path``; True when it has reached
        ``limits.strikes`` (the caller disables it)."""
        account = self._account(path)
        account.strikes += 1
        return account.strikes >= self.limits(origin).strikes

    def strikes(self, path: Path) -> int:
        """Refusals counted against extension ``path`` in this session."""
        return self._account(path).strikes
