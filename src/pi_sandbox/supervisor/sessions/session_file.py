"""Append-only JSONL session files in ``pi``'s format (DESIGN §9).

Layout: ``<agent_dir>/sessions/--<cwd with / replaced by ->--/<timestamp>_<uuid>.jsonl``.
The first line is the header ``{"type": "session", "version": 3, "id", "timestamp",
"cwd"}``; every later line is an entry with ``type``, ``id`` (8 hex digits),
``parentId`` (the previous entry's id, ``null`` for the first) and ``timestamp``
(ISO 8601), with pi's camelCase field names so tools written for pi read them.

Each entry is written with a single ``write`` on an ``O_APPEND`` descriptor as it
happens, so a crash loses at most the entry being written; a torn last line is
skipped on load.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from pi_sandbox.supervisor.json_lines import dumps_line

__all__ = [
    "MAX_LINE_BYTES",
    "MessageEntry",
    "ModelChangeEntry",
    "SessionFileError",
    "SessionHeader",
    "SessionWriter",
    "load_session",
    "now_ms",
    "session_dir_for",
]

SESSION_VERSION = 3


def now_ms() -> int:
    """Milliseconds since the epoch: pi's ``timestamp`` inside messages."""
    return int(datetime.now(UTC).timestamp() * 1000)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True)
class SessionHeader:
    """The first line of a session file."""

    type: str = "session"
    version: int = SESSION_VERSION
    id: str
    timestamp: str = field(default_factory=_now_iso)
    cwd: str


@dataclass(frozen=True, kw_only=True)
class MessageEntry:
    """A ``message`` entry: one user, assistant or toolResult message in pi's shape."""

    type: str = "message"
    id: str
    parent_id: str | None
    timestamp: str = field(default_factory=_now_iso)
    message: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelChangeEntry:
    """A ``model_change`` entry: which provider and model answered from here on."""

    type: str = "model_change"
    id: str
    parent_id: str | None
    timestamp: str = field(default_factory=_now_iso)
    provider: str
    model_id: str


_converter = cattrs.Converter()
for _cls in (MessageEntry, ModelChangeEntry):
    _renames = {"parent_id": override(rename="parentId"), "model_id": override(rename="modelId")}
    _fields = {k: v for k, v in _renames.items() if k in _cls.__dataclass_fields__}
    _converter.register_unstructure_hook(
        _cls, make_dict_unstructure_fn(_cls, _converter, **_fields)
    )
    _converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, _converter, **_fields))

_ENTRY_TYPES: dict[str, type] = {"message": MessageEntry, "model_change": ModelChangeEntry}


def session_dir_for(agent_dir: Path, cwd: Path) -> Path:
    """pi's per-cwd session directory: ``--home-me-proj--`` for ``/home/me/proj``."""
    slug = str(cwd).lstrip("/\\").replace("/", "-").replace("\\", "-").replace(":", "-")
    return agent_dir / "sessions" / f"--{slug}--"


class SessionWriter:
    """Writes one session file, entry by entry, linking each entry to its parent
    (the current leaf), and keeps every entry in memory (``entries``, ``by_id``) for
    ``ctx.session_manager``.

    ``path`` None keeps the session in memory only (``--no-session``).
    """

    def __init__(
        self,
        path: Path | None,
        header: SessionHeader,
        *,
        existing: list[dict[str, Any]] | None = None,
    ) -> None:
        self.path = path
        self.header = header
        self.last_id: str | None = None
        self.entries: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.name: str | None = None
        self._fd = -1
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        if existing is None:
            self._write(_converter.unstructure(header))
        else:
            for record in existing:
                self._remember(record)

    @classmethod
    def in_memory(cls, cwd: Path, session_id: str | None = None) -> SessionWriter:
        """A session that is never written (``--no-session``)."""
        return cls(None, SessionHeader(id=session_id or str(uuid.uuid4()), cwd=str(cwd)))

    @classmethod
    def resume(cls, path: Path) -> SessionWriter:
        """Continue an existing session file (``switch_session``): its entries are
        loaded, the leaf is its last entry, new entries are appended.

        Raises:
            ValueError: the file is not a session file (see `load_session`).
            OSError: it cannot be read or opened for appending.
        """
        # Non-blocking and checked on the open descriptor: a FIFO (or a device) named
        # like a session file must not block the supervisor or be appended to.
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{path}: not a regular file")
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            header, entries = parse_session(path, data)
            if data and not data.endswith(b"\n"):
                # A torn last line (a crash mid-write) is dropped from the file before
                # anything is appended, or the next entry would be glued onto it.
                os.ftruncate(fd, data.rfind(b"\n") + 1)
        finally:
            os.close(fd)
        records = [e if isinstance(e, dict) else _converter.unstructure(e) for e in entries]
        return cls(path, header, existing=records)

    def _remember(self, record: dict[str, Any]) -> None:
        entry_id = record.get("id")
        if not isinstance(entry_id, str):
            return
        self.entries.append(record)
        self.by_id[entry_id] = record
        self.last_id = entry_id
        if record.get("type") == "session_info" and isinstance(record.get("name"), str):
            self.name = record["name"]

    def branch(self, leaf: str | None = None) -> list[dict[str, Any]]:
        """The entries from the root to ``leaf`` (default: the current leaf)."""
        chain: list[dict[str, Any]] = []
        current = self.last_id if leaf is None else leaf
        seen: set[str] = set()
        while current is not None and current in self.by_id and current not in seen:
            seen.add(current)
            record = self.by_id[current]
            chain.append(record)
            current = record.get("parentId")
        return chain[::-1]

    def messages(self) -> list[dict[str, Any]]:
        """The messages on the current branch, in order (what the model sees).

        After a ``compaction`` entry: its summary (a ``compactionSummary`` message),
        the messages from its ``firstKeptEntryId`` up to it, then the ones after it.
        """
        branch = self.branch()
        last = max(
            (i for i, record in enumerate(branch) if record.get("type") == "compaction"),
            default=None,
        )
        if last is None:
            return _messages_of(branch)
        compaction = branch[last]
        kept = next(
            (
                i
                for i, record in enumerate(branch[:last])
                if record.get("id") == compaction.get("firstKeptEntryId")
            ),
            last,
        )
        summary = {
            "role": "compactionSummary",
            "summary": str(compaction.get("summary", "")),
            "tokensBefore": compaction.get("tokensBefore"),
            "timestamp": compaction.get("timestamp"),
        }
        return [summary, *_messages_of(branch[kept:last]), *_messages_of(branch[last + 1 :])]

    def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        *,
        from_extension: bool = False,
        details: Any = None,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append a ``compaction`` entry: the model sees ``summary`` instead of the
        messages before ``first_kept_entry_id`` (see `messages`). ``usage`` (pi's
        ``Usage`` of the summary request) is written when given."""
        record = {
            "type": "compaction",
            "summary": summary,
            "firstKeptEntryId": first_kept_entry_id,
            "tokensBefore": tokens_before,
            "fromHook": from_extension,
            "details": details,
        }
        if usage is not None:
            record["usage"] = usage
        return self._append(record)

    def _append(self, record: dict[str, Any]) -> dict[str, Any]:
        record = {
            "type": record.pop("type"),
            "id": self._next_id(),
            "parentId": self.last_id,
            "timestamp": _now_iso(),
            **record,
        }
        self._write(record)
        self._remember(record)
        return record

    def append_thinking_level_change(self, level: str) -> dict[str, Any]:
        """Append a ``thinking_level_change`` entry (pi docs session-format.md)."""
        return self._append({"type": "thinking_level_change", "thinkingLevel": level})

    def append_custom(self, custom_type: str, data: Any) -> dict[str, Any]:
        """Append a ``custom`` entry (extension state; never sent to the model)."""
        return self._append({"type": "custom", "customType": custom_type, "data": data})

    def append_session_info(self, name: str) -> dict[str, Any]:
        """Append a ``session_info`` entry naming the session."""
        return self._append({"type": "session_info", "name": name})

    def append_label(self, target_id: str, label: str | None) -> dict[str, Any]:
        """Append a ``label`` entry for ``target_id`` (``None`` clears it)."""
        return self._append({"type": "label", "targetId": target_id, "label": label})

    def move_leaf(self, target_id: str) -> None:
        """Make ``target_id`` the leaf: the next entry branches from it.

        Raises:
            KeyError: no entry has that id.
        """
        if target_id not in self.by_id:
            raise KeyError(target_id)
        self.last_id = target_id

    @classmethod
    def create(cls, agent_dir: Path, cwd: Path, session_id: str | None = None) -> SessionWriter:
        """Start a new session file for ``cwd`` under ``agent_dir/sessions``.

        ``session_id`` (a UUID string) is generated when not given: a run names its
        session before the file exists, so its first audit records carry the id.
        """
        session_id = session_id or str(uuid.uuid4())
        header = SessionHeader(id=session_id, cwd=str(cwd))
        stamp = header.timestamp.replace(":", "-").replace(".", "-")
        return cls(session_dir_for(agent_dir, cwd) / f"{stamp}_{session_id}.jsonl", header)

    def _write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            os.write(self._fd, (dumps_line(record) + "\n").encode())

    def _next_id(self) -> str:
        # 8 hex digits (pi's format) collide often enough in a long session (two in
        # a hundred at 10 000 entries) to matter: a repeated id would re-link the tree.
        while (candidate := secrets.token_hex(4)) in self.by_id:
            pass
        return candidate

    def append_message(self, message: dict[str, Any]) -> MessageEntry:
        """Append a message entry now; returns it (its ``id`` is the new leaf)."""
        entry = MessageEntry(id=self._next_id(), parent_id=self.last_id, message=message)
        record = _converter.unstructure(entry)
        self._write(record)
        self._remember(record)
        return entry

    def append_model_change(self, provider: str, model_id: str) -> ModelChangeEntry:
        """Append a ``model_change`` entry."""
        entry = ModelChangeEntry(
            id=self._next_id(), parent_id=self.last_id, provider=provider, model_id=model_id
        )
        record = _converter.unstructure(entry)
        self._write(record)
        self._remember(record)
        return entry

    def close(self) -> None:
        """Close the file; further appends raise ``OSError``."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _messages_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for record in records:
        if record.get("type") == "message" and isinstance(record.get("message"), dict):
            out.append(record["message"])
        elif record.get("type") == "branch_summary" and record.get("summary"):
            # pi's createBranchSummaryMessage (session-format.md "Context Building").
            out.append(
                {
                    "role": "branchSummary",
                    "summary": str(record["summary"]),
                    "fromId": record.get("fromId"),
                    "timestamp": record.get("timestamp"),
                }
            )
    return out


def load_session(
    path: Path,
) -> tuple[SessionHeader, list[MessageEntry | ModelChangeEntry | dict[str, Any]]]:
    """Read a session file. A torn (unparseable) last line is skipped; entry types this
    version does not model are returned as plain dicts.

    Raises:
        SessionFileError: (a ``ValueError``) the file is empty, its header is missing
            or malformed, or a line is not a valid entry (see `parse_session`),
            naming the file and line number.
    """
    return parse_session(path, path.read_bytes())


def parse_session(
    path: Path, data: bytes
) -> tuple[SessionHeader, list[MessageEntry | ModelChangeEntry | dict[str, Any]]]:
    """Parse a session file's bytes (see `load_session`); ``path`` names it in errors.

    Every line is checked before anything is built from it (issue 13 §4: a session
    file is input like any other — it may be corrupted, or hold what an extension
    once wrote): at most `MAX_LINE_BYTES`, UTF-8, JSON nesting at most
    `MAX_NESTING` deep, an object; the header's and each entry's fields have their
    types (session-format.md); a ``message`` entry's message fits pi's schema
    (`check_agent_message`; roles this version does not know are kept); the
    ``parentId`` links form no cycle.

    Raises:
        SessionFileError: the first problem, as ``FILE:LINE: what is wrong`` — never a
            ``TypeError``, ``AttributeError`` or ``RecursionError``.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(lines, start=1):
        try:
            record = _parse_line(raw)
        except _TornLineError as exc:
            if number == len(lines):
                break  # torn last line: the crash happened mid-write
            raise SessionFileError(f"{path}:{number}: {exc}") from None
        except ValueError as exc:
            raise SessionFileError(f"{path}:{number}: {exc}") from None
        records.append((number, record))
    if not records or records[0][1].get("type") != "session":
        raise SessionFileError(f"{path}:1: missing session header")
    header = _header(path, records[0][1])
    entries: list[MessageEntry | ModelChangeEntry | dict[str, Any]] = []
    for number, record in records[1:]:
        try:
            _check_entry(record)
        except ValueError as exc:
            raise SessionFileError(f"{path}:{number}: {exc}") from None
        cls = _ENTRY_TYPES.get(record["type"])
        try:
            entries.append(_converter.structure(record, cls) if cls else record)
        except (cattrs.BaseValidationError, ValueError, TypeError) as exc:  # pragma: no cover
            # _check_entry checked every field cattrs reads; kept as a backstop.
            raise SessionFileError(f"{path}:{number}: malformed {record['type']} entry") from exc
    _check_tree(path, records[1:])
    return header, entries


MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest session file line read (bytes): far above anything pi writes (a worker
frame is at most 8 MiB), so a longer one is damage, not data."""

MAX_NESTING = 100
"""Deepest JSON nesting in a session line (as on the worker channel, `framing`)."""


class SessionFileError(ValueError):
    """A session file that cannot be loaded; the message is ``FILE:LINE: problem``."""


class _TornLineError(ValueError):
    """A line that is not complete JSON: tolerated as the last line only."""


def _parse_line(raw: bytes) -> dict[str, Any]:
    from pi_sandbox.protocol.framing import nests_deeper_than

    if len(raw) > MAX_LINE_BYTES:
        raise ValueError(f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _TornLineError(f"not UTF-8 (byte {exc.start}: {exc.reason})") from None
    try:
        record = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested more than {MAX_NESTING} levels deep") from None
    except json.JSONDecodeError as exc:
        raise _TornLineError(f"not valid JSON: {exc}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise ValueError(f"not valid JSON: {exc}") from None
    if nests_deeper_than(record, MAX_NESTING):
        raise ValueError(f"JSON nested more than {MAX_NESTING} levels deep")
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {_json_type(record)}")
    return record


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else "an object"
    )


def _field(record: dict[str, Any], key: str, kinds: tuple[type, ...], what: str) -> None:
    value = record.get(key)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds) or (value is None and type(None) in kinds)
    if not ok:
        raise ValueError(f"{key}: expected {what}, got {_json_type(value)}")


def _header(path: Path, record: dict[str, Any]) -> SessionHeader:
    try:
        _field(record, "id", (str,), "a string")
        _field(record, "cwd", (str,), "a string")
        if "version" in record:
            _field(record, "version", (int,), "an integer")
        if "timestamp" in record:
            _field(record, "timestamp", (str,), "an ISO 8601 string")
    except ValueError as exc:
        raise SessionFileError(f"{path}:1: malformed session header: {exc}") from None
    known = {k: record[k] for k in ("version", "id", "timestamp", "cwd") if k in record}
    return SessionHeader(**known)


_STR, _OPT_STR, _INT_OR_NONE = (str,), (str, type(None)), (int, type(None))

_ENTRY_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    # type -> field -> (types, description); session-format.md
    "model_change": {"provider": (_STR, "a string"), "modelId": (_STR, "a string")},
    "session_info": {"name": (_OPT_STR, "a string")},
    "label": {"targetId": (_STR, "a string"), "label": (_OPT_STR, "a string or null")},
    "custom": {"customType": (_STR, "a string")},
    "custom_message": {"customType": (_STR, "a string"), "display": ((bool,), "a boolean")},
    "compaction": {
        "summary": (_STR, "a string"),
        "firstKeptEntryId": (_OPT_STR, "a string or null"),
        "tokensBefore": (_INT_OR_NONE, "an integer"),
    },
    "branch_summary": {"summary": (_STR, "a string"), "fromId": (_OPT_STR, "a string or null")},
    "thinking_level_change": {"thinkingLevel": (_STR, "a string")},
}


def _check_entry(record: dict[str, Any]) -> None:
    kind = record.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError("an entry needs a string 'type'")
    if kind == "session":
        raise ValueError("a second session header")
    modelled = kind in _ENTRY_TYPES
    if modelled or "id" in record:
        _field(record, "id", _STR, "a string")
    if modelled or "parentId" in record:
        _field(record, "parentId", _OPT_STR, "a string or null")
        if "parentId" not in record:
            raise ValueError("parentId: missing")
    if "timestamp" in record:
        _field(record, "timestamp", _STR, "an ISO 8601 string")
    for key, (kinds, what) in _ENTRY_FIELDS.get(kind, {}).items():
        if key in record or kind in ("model_change", "custom", "label"):
            _field(record, key, kinds, what)
    if kind == "message":
        from pi_sandbox.supervisor.boundary.agent_messages import check_agent_message

        check_agent_message(record.get("message"), where="message", allow_unknown_role=True)
    elif kind == "custom_message":
        content = record.get("content")
        if not isinstance(content, str):
            from pi_sandbox.supervisor.boundary.agent_messages import check_content_blocks

            check_content_blocks(content, where="content")


def _check_tree(path: Path, records: list[tuple[int, dict[str, Any]]]) -> None:
    """No entry is its own ancestor (a cycle would make the leaf's branch endless)."""
    parent: dict[str, Any] = {}
    line_of: dict[str, int] = {}
    for number, record in records:
        entry_id = record.get("id")
        if isinstance(entry_id, str):
            parent[entry_id] = record.get("parentId")
            line_of[entry_id] = number
    done: set[str] = set()
    for start in parent:
        trail: list[str] = []
        on_trail: set[str] = set()
        current: Any = start
        while isinstance(current, str) and current in parent and current not in done:
            if current in on_trail:
                cycle = [*trail[trail.index(current) :], current]
                raise SessionFileError(
                    f"{path}:{line_of[current]}: parentId cycle: {' -> '.join(cycle[:10])}"
                )
            trail.append(current)
            on_trail.add(current)
            current = parent[current]
        done.update(trail)
