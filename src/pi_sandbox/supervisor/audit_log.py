"""The audit stream: one JSON line per security decision (DESIGN §7 ``audit``).

Records so far: the sandbox profile each worker got (``sandbox_profile``), every
egress proxy decision (``egress``), every tool call's policy decision
(``tool_call``: tool, arguments with secrets redacted, decision, rule, tier, policy
file) and its outcome (``tool_call_outcome``: error or not, and what blocked it:
the policy, an extension's hook, validation). Each line is the record plus ``time``
(ISO 8601, UTC, milliseconds) and ``session`` (the session id once known). Lines
are appended and flushed one by one, so a crash loses at most the line being
written. The policy-file issue adds tool-call, trust and extension records, the
policy's ``audit`` section and fatal write failures in CI mode.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["AuditLog", "redact_secrets"]

# Credentials by shape (issue 4: "canonical arguments, secrets redacted by
# pattern"). A match is replaced by "[REDACTED]"; the rest of the value is kept.
_SECRET_PATTERNS = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI / Anthropic style keys
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
    r"\bAIza[0-9A-Za-z_-]{30,}",  # Google API key
    r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
    r"(?<=authorization: )(?:bearer|basic|token) [^\s'\"]+",
    r"(?<=[?&])(?:access_token|api_key|apikey|token|password|secret)=[^&\s'\"]+",
    r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # user:password@ in URLs
    r"\b(?:password|passwd|secret|token|api[_-]?key)\s*[=:]\s*[^\s'\"]{4,}",
]
_SECRET = None


def redact_secrets(value: Any) -> Any:
    """``value`` (JSON-like) with every string's credential-shaped parts replaced by
    ``[REDACTED]``; dict keys and non-strings are kept."""
    global _SECRET
    if _SECRET is None:
        import re

        _SECRET = re.compile("|".join(f"(?:{p})" for p in _SECRET_PATTERNS), re.IGNORECASE)
    if isinstance(value, str):
        return _SECRET.sub("[REDACTED]", value)
    if isinstance(value, dict):
        return {key: redact_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_secrets(item) for item in value]
    return value


class AuditLog:
    """Appends audit records to a file (or keeps nothing when ``path`` is None).

    Args:
        path: the JSON-lines file; created 0600 if missing, appended otherwise.

    Raises:
        OSError: the file cannot be opened (the CLI reports it, exit 2).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.session: str | None = None
        self.records = 0
        self._failed = False
        self._handle: TextIO | None = None
        if path is not None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._handle = os.fdopen(fd, "a", encoding="utf-8")

    def record(self, entry: dict[str, Any]) -> None:
        """Write one record (a JSON-ready dict). A failed write is reported on
        stderr once and later records are dropped; it never raises."""
        self.records += 1
        if self._handle is None or self._failed:
            return
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        line = json.dumps({"time": now, "session": self.session, **entry}, default=str)
        try:
            self._handle.write(line + "\n")
            self._handle.flush()
        except OSError as exc:
            self._failed = True
            print(f"pi: audit log {self.path}: write failed: {exc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None
