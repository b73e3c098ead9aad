"""The audit stream: one JSON line per security decision (DESIGN §7 ``audit``).

This issue's records: the sandbox profile each worker got (``sandbox_profile``) and
every egress proxy decision (``egress``). Each line is the record plus ``time``
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

__all__ = ["AuditLog"]


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
