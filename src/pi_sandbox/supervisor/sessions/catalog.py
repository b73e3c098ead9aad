"""Finding sessions on disk: listing, ``--continue``, id prefixes, ``--fork`` (issue 15 §CLI).

Layout (pi 1.6.0, session-format.md "File Location"): by default each session file
is ``<agent_dir>/sessions/--<cwd encoded>--/<timestamp>_<id>.jsonl``; with
``--session-dir DIR`` (or ``$PI_CODING_AGENT_SESSION_DIR``) the files sit directly
in ``DIR`` for every working directory, and lookups there keep only the sessions
whose header names the cwd (pi's ``SessionManager.list``/``continueRecent``). Files
written by pi 1.6.0 and by us share the layout, so one listing shows both.

A listing row is built by streaming the file line by line (`summarise`): the
header is read with a bound, message lines are counted from their first bytes,
and only ``session_info`` lines and the first user message are decoded — a huge
session never sits in memory to show one row.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pi_sandbox.supervisor.sessions.session_file import (
    new_session_id,
    parse_session,
    session_dir_for,
)

__all__ = [
    "MAX_HEADER_BYTES",
    "SESSION_ID_PATTERN",
    "SessionLookupError",
    "SessionSummary",
    "check_session_id",
    "fork_session_file",
    "list_sessions",
    "lookup_directory",
    "most_recent_session",
    "read_header",
    "resolve_session",
    "summarise",
]

MAX_HEADER_BYTES = 1024 * 1024
"""Longest header line read (bytes); pi's headers are about 200 bytes."""

_MAX_DECODED_LINE = 4 * 1024 * 1024
"""Longest line decoded for a listing row (a first prompt, a name); longer ones
are counted but not decoded, so a pasted megabyte file does not slow a listing."""

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
"""pi's ``assertValidSessionId`` (cli.md: letters, numbers, ``.``, ``_`` and ``-``,
starting and ending with a letter or number)."""


SESSION_VERSION = 3
"""The header version a fork writes (session-format.md "Session Version")."""


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SessionLookupError(ValueError):
    """A session argument that names no session, or more than one; the message
    lists the candidates (id, name, cwd, time)."""


def check_session_id(value: str, *, argument: str = "--session-id") -> str:
    """``value`` if it is a valid session id (`SESSION_ID_PATTERN`).

    Raises:
        ValueError: naming ``argument`` and the rule.
    """
    if len(value) > 200 or not SESSION_ID_PATTERN.match(value):
        raise ValueError(
            f"argument {argument}: {value!r} is not a session id (letters, numbers, '.', '_' "
            "and '-', starting and ending with a letter or number)"
        )
    return value


@dataclass(frozen=True)
class SessionSummary:
    """One row of a listing.

    ``modified`` is the last user/assistant message's time (pi's ``modified``:
    message timestamps, else the header's, else the file's mtime), ISO 8601 UTC;
    ``message_count`` counts ``message`` entries on every branch; ``first_prompt``
    is the first user message's text (at most 200 characters) or None.
    """

    path: Path
    id: str
    cwd: str
    created: str
    modified: str
    name: str | None
    message_count: int
    first_prompt: str | None
    parent_session: str | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON row of ``pi sessions --json`` (a public contract)."""
        return {
            "id": self.id,
            "name": self.name,
            "cwd": self.cwd,
            "path": str(self.path),
            "created": self.created,
            "modified": self.modified,
            "messageCount": self.message_count,
            "firstPrompt": self.first_prompt,
            "parentSession": self.parent_session,
        }

    def one_line(self) -> str:
        """``ID  TIME  NAME-or-first-prompt  (N messages, CWD)`` for error messages."""
        title = self.name or (self.first_prompt or "(no messages)").replace("\n", " ")[:60]
        return (
            f"{self.id}  {self.modified[:19].replace('T', ' ')}  {title}  "
            f"({self.message_count} messages, {self.cwd})"
        )


def read_header(path: Path) -> dict[str, Any] | None:
    """The header object of a session file (its first line), or None when the file
    cannot be read or does not start with a ``{"type": "session", "id": str}`` line
    of at most `MAX_HEADER_BYTES`. Never raises for a bad file."""
    try:
        with _open_regular(path) as stream:
            line = stream.readline(MAX_HEADER_BYTES + 1)
    except OSError:
        return None
    if len(line) > MAX_HEADER_BYTES:
        return None
    try:
        header = json.loads(line)
    except ValueError:
        return None
    if (
        not isinstance(header, dict)
        or header.get("type") != "session"
        or not isinstance(header.get("id"), str)
    ):
        return None
    return header


def _open_regular(path: Path) -> Any:
    # Non-blocking open, checked on the descriptor: a FIFO named *.jsonl in the
    # session directory must not hang a listing.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _lines(stream: Any) -> Iterator[tuple[bytes, bool]]:
    """``(first bytes of the line, complete)`` for each line; a line longer than
    `_MAX_DECODED_LINE` yields its first bytes with ``complete`` False and the rest
    is skipped in chunks (never held in memory whole)."""
    while True:
        line = stream.readline(_MAX_DECODED_LINE)
        if not line:
            return
        if line.endswith(b"\n") or len(line) < _MAX_DECODED_LINE:
            yield line, True
            continue
        head = line
        while line and not line.endswith(b"\n"):
            line = stream.readline(_MAX_DECODED_LINE)
        yield head, False


_TYPE_PREFIX = re.compile(rb'^\{\s*"type"\s*:\s*"([a-z_]+)"')


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            b.get("text", "")
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def _iso(ms: float) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def summarise(path: Path) -> SessionSummary | None:
    """A listing row for one session file (streamed, see the module docstring), or
    None when it is not a session file (no valid header). Never raises."""
    try:
        with _open_regular(path) as stream:
            mtime = os.fstat(stream.fileno()).st_mtime
            return _summarise_stream(path, stream, mtime)
    except OSError:
        return None


def _summarise_stream(path: Path, stream: Any, mtime: float) -> SessionSummary | None:
    header: dict[str, Any] | None = None
    name: str | None = None
    count = 0
    first: str | None = None
    last_activity: float | None = None
    for raw, complete in _lines(stream):
        if header is None:
            if not complete:
                return None
            try:
                header = json.loads(raw)
            except ValueError:
                return None
            if not isinstance(header, dict) or header.get("type") != "session":
                return None
            if not isinstance(header.get("id"), str):
                return None
            continue
        match = _TYPE_PREFIX.match(raw)
        kind = match.group(1).decode() if match else None
        if kind is None and complete:
            # Not written with "type" first (another writer): decode to find out.
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            kind = record.get("type") if isinstance(record, dict) else None
        if kind == "session_info" and complete:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            value = record.get("name") if isinstance(record, dict) else None
            name = value.strip() or None if isinstance(value, str) else None
        elif kind == "message":
            count += 1
            if not complete:
                continue
            needs_decoding = first is None or b'"timestamp"' in raw
            if not needs_decoding:
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            message = record.get("message") if isinstance(record, dict) else None
            if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                continue
            stamp = message.get("timestamp")
            if isinstance(stamp, int | float) and not isinstance(stamp, bool):
                last_activity = max(last_activity or 0, float(stamp))
            if first is None and message.get("role") == "user":
                text = _text_of(message.get("content")).strip()
                if text:
                    first = text[:200]
    if header is None:
        return None
    created = header.get("timestamp") if isinstance(header.get("timestamp"), str) else None
    if last_activity:
        modified = _iso(last_activity)
    elif created:
        modified = created
    else:
        modified = _iso(mtime * 1000)
    parent = header.get("parentSession")
    return SessionSummary(
        path=path,
        id=header["id"],
        cwd=header.get("cwd") if isinstance(header.get("cwd"), str) else "",
        created=created or _iso(mtime * 1000),
        modified=modified,
        name=name,
        message_count=count,
        first_prompt=first,
        parent_session=parent if isinstance(parent, str) else None,
    )


def lookup_directory(agent_dir: Path, cwd: Path, session_dir: Path | None) -> Path:
    """Where ``cwd``'s sessions are written and looked up: ``session_dir`` itself
    when given (pi's ``--session-dir``), else pi's per-cwd directory."""
    return session_dir if session_dir is not None else session_dir_for(agent_dir, cwd)


def _files_in(directory: Path) -> list[Path]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [directory / n for n in names if n.endswith(".jsonl")]


def _cwd_matches(recorded: Any, cwd: Path) -> bool:
    if not isinstance(recorded, str) or not recorded:
        return False
    return os.path.normpath(recorded) == os.path.normpath(str(cwd))


def list_sessions(
    agent_dir: Path, cwd: Path, *, session_dir: Path | None = None, every: bool = False
) -> list[SessionSummary]:
    """The sessions of ``cwd`` (or, with ``every``, of every directory), newest
    first by ``modified``.

    Without ``session_dir``: ``cwd``'s directory under ``<agent_dir>/sessions``, or
    with ``every`` all its subdirectories. With ``session_dir``: the files directly
    in it, those recorded for ``cwd`` unless ``every``. Files that are not session
    files are left out; nothing is raised for unreadable files or directories.
    """
    if session_dir is not None:
        files = _files_in(session_dir)
    elif every:
        root = agent_dir / "sessions"
        try:
            subdirs = sorted(root.iterdir())
        except OSError:
            subdirs = []
        files = [f for d in subdirs if d.is_dir() for f in _files_in(d)]
    else:
        files = _files_in(session_dir_for(agent_dir, cwd))
    rows = [row for row in map(summarise, files) if row is not None]
    if session_dir is not None and not every:
        rows = [row for row in rows if _cwd_matches(row.cwd, cwd)]
    rows.sort(key=lambda row: (row.modified, row.path.name), reverse=True)
    return rows


def most_recent_session(agent_dir: Path, cwd: Path, session_dir: Path | None = None) -> Path | None:
    """``--continue``: the most recently written session file of ``cwd`` (by file
    modification time, as pi's ``findMostRecentSession``; the header must name
    ``cwd``), or None."""
    directory = lookup_directory(agent_dir, cwd, session_dir)
    candidates = []
    for path in _files_in(directory):
        try:
            candidates.append((path.stat().st_mtime, path.name, path))
        except OSError:
            continue
    for _, _, path in sorted(candidates, reverse=True):
        header = read_header(path)
        if header is not None and _cwd_matches(header.get("cwd"), cwd):
            return path
    return None


@dataclass(frozen=True)
class ResolvedSession:
    """What a ``--session``/``--fork`` argument names: ``kind`` is ``"path"`` (a
    file path was given), ``"local"`` (an id of this cwd) or ``"global"`` (an id
    found only under another directory, recorded in ``cwd``)."""

    kind: str
    path: Path
    cwd: str | None = None


def _looks_like_path(argument: str) -> bool:
    # pi's resolveSessionPath: a separator or the .jsonl suffix makes it a path.
    return "/" in argument or "\\" in argument or argument.endswith(".jsonl")


def _pick(argument: str, rows: list[SessionSummary], where: str) -> SessionSummary | None:
    exact = [row for row in rows if row.id == argument]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [row for row in rows if row.id.startswith(argument)]
    if len(matches) > 1:
        listed = "\n".join(f"  {row.one_line()}" for row in matches[:20])
        more = f"\n  … and {len(matches) - 20} more" if len(matches) > 20 else ""
        raise SessionLookupError(
            f"session id {argument!r} is ambiguous: {len(matches)} sessions {where} start "
            f"with it; give more of the id:\n{listed}{more}"
        )
    return matches[0] if matches else None


def resolve_session(
    argument: str,
    *,
    agent_dir: Path,
    cwd: Path,
    session_dir: Path | None = None,
    option: str = "--session",
) -> ResolvedSession:
    """Resolve ``--session``/``--fork`` ``PATH|ID-PREFIX`` (pi's ``resolveSessionPath``).

    A path (it contains a separator or ends in ``.jsonl``) is taken relative to
    ``cwd`` and must be an existing file. Otherwise the id or id prefix is looked up
    among ``cwd``'s sessions first, then among every directory's; unlike pi, which
    takes the first match, a prefix matching several sessions is an error.

    Raises:
        SessionLookupError: no such file; no session matches (the recent sessions
            are listed); the prefix is ambiguous (the candidates are listed).
    """
    if _looks_like_path(argument):
        path = Path(os.path.abspath(cwd / Path(argument).expanduser()))
        if not path.is_file():
            what = "not a file" if path.exists() else "no such file"
            raise SessionLookupError(f"argument {option}: {what}: {path}")
        return ResolvedSession("path", path)
    local = list_sessions(agent_dir, cwd, session_dir=session_dir)
    found = _pick(argument, local, f"of {cwd}")
    if found is not None:
        return ResolvedSession("local", found.path, found.cwd)
    everywhere = list_sessions(agent_dir, cwd, session_dir=session_dir, every=True)
    found = _pick(argument, everywhere, "in all directories")
    if found is not None:
        return ResolvedSession("global", found.path, found.cwd)
    raise SessionLookupError(
        f"argument {option}: no session found matching {argument!r}"
        + recent_listing(everywhere, heading="recent sessions")
    )


def recent_listing(rows: list[SessionSummary], *, heading: str, limit: int = 10) -> str:
    """``"; HEADING:\\n  row…"`` for the first ``limit`` rows (or ``"; no sessions
    found"``): appended to lookup errors."""
    if not rows:
        return "; no sessions found"
    listed = "\n".join(f"  {row.one_line()}" for row in rows[:limit])
    more = f"\n  … and {len(rows) - limit} more (pi sessions --all)" if len(rows) > limit else ""
    return f"; {heading}:\n{listed}{more}"


def fork_session_file(
    source: Path,
    target_cwd: Path,
    directory: Path,
    *,
    session_id: str | None = None,
) -> Path:
    """Copy the session ``source`` into a new file in ``directory`` for
    ``target_cwd``: a new header (new id — ``session_id`` or a fresh UUID — the
    target cwd, ``parentSession`` the source's absolute path) followed by every
    entry of the source unchanged, as pi's ``SessionManager.forkFrom``. The source
    is checked first (`parse_session`); a torn last line is not copied.

    Raises:
        SessionFileError: the source is not a valid session file (file and line named).
        FileExistsError: a file of that name exists (never overwritten).
        OSError: reading or writing failed.
    """
    source = Path(os.path.abspath(source))
    with _open_regular(source) as stream:
        data = stream.read()
    parse_session(source, data)  # a damaged source is refused, naming file and line
    lines = data.split(b"\n")
    body = b"\n".join(line for line in lines[1:-1] if line.strip())  # all complete lines
    new_id = session_id or new_session_id()
    stamp = _now_iso()
    header = {
        "type": "session",
        "version": SESSION_VERSION,
        "id": new_id,
        "timestamp": stamp,
        "cwd": str(target_cwd),
        "parentSession": str(source),
    }
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{stamp.replace(':', '-').replace('.', '-')}_{new_id}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        payload = json.dumps(header, ensure_ascii=False).encode() + b"\n"
        if body:
            payload += body + b"\n"
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
