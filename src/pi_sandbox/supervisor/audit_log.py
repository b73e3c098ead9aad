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
import errno
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pi_sandbox.errors import AuditLogError

__all__ = ["AuditLog", "redact_secrets"]

# Credentials by shape (issue 4: "canonical arguments, secrets redacted by
# pattern"). A match is replaced by "[REDACTED]"; the rest of the value is kept.
# Every repetition is bounded: redaction runs on every tool call (audit records,
# progress lines), and an unbounded ``.*?`` here makes it quadratic on hostile input.
_SECRET_PATTERNS = [
    # A key block to its END line, or (no END near) the next 16 KiB: always a match,
    # so no rescanning from every BEGIN.
    r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,20}-----"
    r"(?:[\s\S]{0,16384}?-----END [A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,20}-----|[\s\S]{0,16384})",
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI / Anthropic style keys
    r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{16,}",  # GitLab
    r"\bnpm_[A-Za-z0-9]{30,}",  # npm
    r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
    r"\bAIza[0-9A-Za-z_-]{30,}",  # Google API key
    r"\bya29\.[A-Za-z0-9_-]{20,}",  # Google OAuth access token
    r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",  # SendGrid
    r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
    r"(?<=authorization:)\s{0,8}(?:bearer|basic|token)\s{1,8}[^\s'\"]+",
    r"(?<=[?&])(?:access_token|api_key|apikey|token|password|secret)=[^&\s'\"]+",
    # user:password@ in URLs (the password may itself hold '@': up to the last one).
    r"(?<=://)[^/\s:@]{0,256}:[^/\s]{1,256}(?=@[^@/\s]{0,256}(?:[/\s?#'\"]|$))",
    # NAME=value / NAME: value where the name says secret (DB_PASSWORD=, MY_API_KEY:,
    # "password": "...", client_secret=..., AccountKey=...), quoted or not.
    # (Not `PWD`/`OLDPWD` holding a path, and no unquoted value that is code — a
    # `$(…)` or backquoted command substitution: hiding it would hide what runs;
    # red-team finding of 0.7, `pwd=\`curl …|sh\`` showed as [REDACTED].)
    r"(?:password|passwd|(?<![Oo][Ll][Dd])pwd(?![A-Za-z0-9_.-]{0,40}[\"']?\s{0,8}[=:]"
    r"\s{0,8}[\"']?/)|passphrase|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|account[_-]?key|auth[_-]?key|shared[_-]?key|signing[_-]?key"
    r"|master[_-]?key|credentials?)[A-Za-z0-9_.-]{0,40}[\"']?\s{0,8}[=:]\s{0,8}"
    r"(?:\"[^\"]{0,512}\"|'[^']{0,512}'|(?!`|\$\()[^\s,;}'\"]{3,})",
    # Command-line passwords: --password x, --password=x, -pSECRET (mysql), curl -u
    # user:pw / --user user:pw / -uuser:pw, sshpass -p pw, docker login -p pw,
    # redis-cli -a pw, aws configure set aws_secret_access_key VALUE.
    r"(?<=--password[= ])[^\s'\"]+",
    r"(?<=--passwd[= ])[^\s'\"]+",
    r"(?<=\bmysql )(?:[^|;&\n]{0,200}?\s)?-p[^\s'\"]+",
    r"(?<=\s-u )[^\s:'\"]+:[^\s'\"]+",
    r"(?<=\s-u)[^\s:'\"-][^\s:'\"]*:[^\s'\"]+",
    r"(?<=--user[= ])[^\s:'\"]+:[^\s'\"]+",
    r"(?<=\bsshpass -p )[^\s'\"]+",
    r"(?<=\blogin -p )[^\s'\"]+",
    r"(?<=\bredis-cli )(?:[^|;&\n]{0,200}?\s)?-a\s{1,8}[^\s'\"]+",
    r"(?<=aws_secret_access_key )[^\s'\"]+",
    r"(?<=aws_session_token )[^\s'\"]+",
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
    """Appends audit records to one or more files (or keeps nothing without files).

    Args:
        paths: JSON-lines files (``--audit-log``, the policy's ``audit.file``
            entries); each is created 0600 if missing and appended otherwise. A
            single path or None is accepted too.
        include: the record kinds to write (the ``event`` field); others are
            counted but not written. None: every kind.
        arguments: whether ``tool_call`` records keep their (redacted) arguments.
        fatal: a failed write, or a file deleted while the run writes it, raises
            `AuditLogError` (CI mode: "a full disk or an unwritable log is a fatal
            error, not silent loss", issue 4) instead of being reported once on
            stderr and dropping later records.

    Raises:
        OSError: a file cannot be opened (the CLI reports it, exit 2).
    """

    def __init__(
        self,
        paths: Path | Sequence[Path] | None,
        *,
        include: Iterable[str] | None = None,
        arguments: bool = True,
        fatal: bool = False,
    ) -> None:
        if paths is None:
            paths = ()
        elif isinstance(paths, str | os.PathLike):
            paths = (Path(paths),)
        self.paths: tuple[Path, ...] = tuple(dict.fromkeys(Path(p) for p in paths))
        self.session: str | None = None
        self.records = 0
        self.include = frozenset(include) if include is not None else None
        self.arguments = arguments
        self.fatal = fatal
        self._failed: set[Path] = set()
        self._handles: list[tuple[Path, TextIO]] = []
        try:
            for path in self.paths:
                # O_NOFOLLOW: a log path that is a symlink (planted by a repository in
                # CI mode's default location) is refused, not followed.
                # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
                flags = (
                    os.O_WRONLY
                    | os.O_APPEND
                    | os.O_CREAT
                    | os.O_CLOEXEC
                    | os.O_NOFOLLOW
                    | os.O_NONBLOCK
                )
                fd = os.open(path, flags, 0o600)
                self._handles.append((path, os.fdopen(fd, "a", encoding="utf-8")))
        except OSError as exc:
            self.close()
            exc.filename = exc.filename or str(path)
            raise

    def record(self, entry: dict[str, Any]) -> None:
        """Write one record (a JSON-ready dict with an ``event`` key).

        Raises:
            AuditLogError: only with ``fatal``: a write failed.
        """
        self.records += 1
        if not self._handles:
            return
        if self.include is not None and entry.get("event") not in self.include:
            return
        if not self.arguments and "arguments" in entry:
            entry = {key: value for key, value in entry.items() if key != "arguments"}
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        line = json.dumps({"time": now, "session": self.session, **entry}, default=str) + "\n"
        for path, handle in self._handles:
            if path in self._failed:
                continue
            try:
                handle.write(line)
                handle.flush()
                if self.fatal and os.fstat(handle.fileno()).st_nlink == 0:
                    raise OSError(errno.ENOENT, "the file was deleted during the run")
            except OSError as exc:
                self._failed.add(path)
                message = f"audit log {path}: write failed: {exc.strerror or exc}"
                if self.fatal:
                    raise AuditLogError(message) from exc
                print(f"pi: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Close the files (idempotent; a failing flush is ignored)."""
        for _, handle in self._handles:
            try:
                handle.close()
            except OSError:
                pass
        self._handles = []
