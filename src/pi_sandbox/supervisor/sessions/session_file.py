"""Append-only JSONL session files in ``pi``'s format (DESIGN §9).

Layout: ``<agent_dir>/sessions/--<cwd with / replaced by ->--/<timestamp>_<uuid>.jsonl``.
The first line is the header ``{"type": "session", "version": 3, "id", "timestamp",
"cwd"}``; every later line is an entry with ``type``, ``id`` (8 hex digits),
``parentId`` (the previous entry's id, ``null`` for the first) and ``timestamp``
(ISO 8601), with pi's camelCase field names so tools written for pi read them.

Each entry is written with a single ``write`` on an ``O_APPEND`` descriptor as it
happens, so a crash loses at most the entry being written; a torn last line is
skipped on load. The file is ``fsync``'d at turn boundaries (`SessionWriter.sync`),
not per entry. A writer holds an exclusive ``flock`` on its file for its lifetime:
a second process continuing the same session is refused (`SessionLockedError`).

The model context of a leaf is built as pi 1.6.0's ``buildSessionContext`` builds it
(pi docs session-format.md "Context Building"; `context_messages`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import threading
import time
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
    "PendingResume",
    "SessionFileError",
    "SessionHeader",
    "SessionLockedError",
    "SessionWriter",
    "context_messages",
    "load_session",
    "new_session_id",
    "now_ms",
    "session_dir_for",
]

SESSION_VERSION = 3


def now_ms() -> int:
    """Milliseconds since the epoch: pi's ``timestamp`` inside messages."""
    return int(datetime.now(UTC).timestamp() * 1000)


def new_session_id() -> str:
    """A new session id: a UUIDv7 string (time-ordered), as pi 1.6.0's ``createSessionId``
    writes in session headers and file names (RFC 9562 §5.7: 48-bit Unix milliseconds,
    version 7, 74 random bits)."""
    ms = time.time_ns() // 1_000_000
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(secrets.token_bytes(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    return str(uuid.UUID(int=value))


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


class SessionFileError(ValueError):
    """A session file that cannot be loaded; the message is ``FILE:LINE: problem``."""


class SessionLockedError(SessionFileError):
    """Another process (or another writer in this one) has the session file open for
    writing: appending from both would interleave their entries (issue 15
    "Robustness"). The message names the file and the holder's pid when known."""


def _lock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on ``fd``'s file, from ``/proc/locks`` (Linux);
    None when it cannot be told."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            for line in handle:
                # "1: FLOCK  ADVISORY  WRITE 12345 08:01:1234567 0 EOF"
                fields = line.split()
                if "->" in fields:
                    continue  # a waiter, not the holder
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
                    return int(fields[4])
    except (OSError, ValueError):
        return None
    return None


def _lock(fd: int, path: Path) -> None:
    """Take an exclusive, non-blocking ``flock`` on the session file itself.

    Why ``flock`` on the file (not a lock file beside it): the kernel drops it when the
    holder dies, so a crash never leaves a stale lock behind; nothing extra appears in
    the session directory for pi's listing to trip over; and it is tied to this open
    file description, so it lasts exactly as long as the writer's descriptor.

    Raises:
        SessionLockedError: another open file description holds it.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        pid = _lock_holder(fd)
        who = (
            "this process"
            if pid == os.getpid()
            else f"process {pid}"
            if pid is not None
            else "another process"
        )
        raise SessionLockedError(
            f"{path}: the session is in use by {who}, which is writing to it; "
            "two writers would interleave their entries. Wait for it to end, or "
            "use --fork to continue a copy"
        ) from None


def _open_locked(path: Path) -> int:
    """Open a session file for reading and appending and lock it (`_lock`).

    Raises:
        SessionLockedError: another writer holds it.
        ValueError: it is not a regular file.
        OSError: it cannot be opened.
    """
    # Non-blocking and checked on the open descriptor: a FIFO (or a device) named
    # like a session file must not block the supervisor or be appended to.
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        _lock(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class PendingResume:
    """A session file being continued: locked at once (so a second process is refused
    before anything starts), read and checked on a thread while the run starts its
    workers (`result`). Resuming a long session then costs start-up little.

    Raises (constructor): as `SessionWriter.resume` for the lock and the open.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = _open_locked(path)
        self.header_id = _header_id(self._fd)
        # The parse's lazy imports happen here, on this thread: an import racing the
        # main thread's imports of the same package can fail (KeyError in importlib).
        import pi_sandbox.protocol.framing
        import pi_sandbox.supervisor.boundary.agent_messages  # noqa: F401

        self._outcome: SessionWriter | BaseException | None = None
        self._thread = threading.Thread(target=self._load, name="session-resume", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            self._outcome = SessionWriter._load_locked(self.path, self._fd)
        except BaseException as exc:  # handed to the caller of result()
            self._outcome = exc

    def result(self) -> SessionWriter:
        """The loaded writer (waits for the thread).

        Raises:
            SessionFileError: the file is damaged (``FILE:LINE: problem``).
            OSError: it could not be read.
        """
        self._thread.join()
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    def close(self) -> None:
        """Release the file (its lock) whether or not `result` was taken."""
        self._thread.join()
        if isinstance(self._outcome, SessionWriter):
            self._outcome.close()


def _header_id(fd: int) -> str | None:
    """The ``id`` of the header line, read alone (None when it is not readable yet:
    the full parse then reports the problem)."""
    first = os.pread(fd, 64 * 1024, 0).split(b"\n", 1)[0]
    try:
        header = json.loads(first)
    except ValueError:
        return None
    value = header.get("id") if isinstance(header, dict) else None
    return value if isinstance(value, str) else None


class SessionWriter:
    """Writes one session file, entry by entry, linking each entry to its parent
    (the current leaf), and keeps every entry in memory (``entries``, ``by_id``) for
    ``ctx.session_manager``.

    ``path`` None keeps the session in memory only (``--no-session``). A writer with a
    file holds an exclusive ``flock`` on it until `close` (see `_lock`).

    Appends are O(1) in the session length: one ``write`` of one complete line on an
    ``O_APPEND`` descriptor, a list append and a dict insert; nothing is re-read.

    Raises (constructor):
        SessionLockedError: another writer holds the file.
        OSError: the file cannot be created or opened.
    """

    def __init__(
        self,
        path: Path | None,
        header: SessionHeader,
        *,
        existing: list[dict[str, Any]] | None = None,
        fd: int = -1,
    ) -> None:
        self.path = path
        self.header = header
        self.last_id: str | None = None
        self.entries: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.name: str | None = None
        # issue 20 target 3: the current branch and its model context are kept up to
        # date as entries are appended, so that a request in a 10,000-entry session
        # does not walk the whole tree (see `_current_branch`, `context`).
        self._chain: list[dict[str, Any]] = []
        self._chain_leaf: str | None = None
        self._chain_valid = False
        self._branch_epoch = 0
        self._context = _ContextCache()
        self._fd = fd
        self._dirty = False
        self._syncing: threading.Thread | None = None
        self._sync_error: OSError | None = None
        if path is not None and fd < 0:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                _lock(self._fd, path)
            except BaseException:
                os.close(self._fd)
                self._fd = -1
                raise
        if existing is None:
            self._write(_converter.unstructure(header))
        else:
            for record in existing:
                self._remember(record)

    @classmethod
    def in_memory(cls, cwd: Path, session_id: str | None = None) -> SessionWriter:
        """A session that is never written (``--no-session``)."""
        return cls(None, SessionHeader(id=session_id or new_session_id(), cwd=str(cwd)))

    @classmethod
    def resume(cls, path: Path) -> SessionWriter:
        """Continue an existing session file (``--session``, ``switch_session``): its
        entries are loaded, the leaf is its last entry, new entries are appended.

        The file is locked before it is read (`_lock`), so two processes never both
        repair a torn tail or append.

        Raises:
            SessionLockedError: another writer holds the file.
            SessionFileError: (a ``ValueError``) the file is not a session file or a
                line is damaged (see `parse_session`), naming the file and line.
            ValueError: it is not a regular file.
            OSError: it cannot be read or opened for appending.
        """
        return cls._load_locked(path, _open_locked(path))

    @classmethod
    def _load_locked(cls, path: Path, fd: int) -> SessionWriter:
        """Read and check the file open (and locked) on ``fd``; the writer then owns
        ``fd``. Closes ``fd`` when it raises."""
        try:
            data = _read_all(fd)
            header, numbered = _parse_records(path, data)
            lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if data and not data.endswith(b"\n") and len(numbered) + 1 < lines:
                # A torn last line (a crash mid-write, no newline) is dropped from the
                # file before anything is appended: the next entry would be glued onto
                # it. A complete line that does not parse stops the load instead.
                os.ftruncate(fd, data.rfind(b"\n") + 1)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, header, existing=[record for _, record in numbered], fd=fd)

    def _remember(self, record: dict[str, Any]) -> None:
        entry_id = record.get("id")
        if not isinstance(entry_id, str):
            return
        if (
            self._chain_valid
            and entry_id not in self.by_id
            and record.get("parentId") == self._chain_leaf
        ):
            # A child of the cached branch's leaf: the branch to it is one entry longer.
            self._chain.append(record)
            self._chain_leaf = entry_id
        elif entry_id in self.by_id:
            # A repeated id (a damaged file) re-links the tree: walk it again.
            self._chain_valid = False
        self.entries.append(record)
        self.by_id[entry_id] = record
        self.last_id = entry_id
        if record.get("type") == "session_info" and isinstance(record.get("name"), str):
            self.name = record["name"]

    def branch(self, leaf: str | None = None) -> list[dict[str, Any]]:
        """The entries from the root to ``leaf`` (default: the current leaf), a new list.

        The current leaf's branch is a copy of the kept one (`branch_tail`); another
        leaf's is walked from the tree."""
        if leaf is None or leaf == self.last_id:
            return list(self._current_branch())
        return self._walk(leaf)

    def _current_branch(self) -> list[dict[str, Any]]:
        """The kept branch of the current leaf (not a copy: never mutate it). It is
        extended in place as children of its leaf are appended; when the leaf moved
        anywhere else (navigation assigns ``last_id``) it is walked again and
        ``_branch_epoch`` counts up, so `branch_tail` marks of the old one are void."""
        if not self._chain_valid or self._chain_leaf != self.last_id:
            self._chain = self._walk(self.last_id)
            self._chain_leaf = self.last_id
            self._chain_valid = True
            self._branch_epoch += 1
        return self._chain

    def branch_tail(
        self, mark: tuple[int, int] | None
    ) -> tuple[tuple[int, int], list[dict[str, Any]], bool]:
        """The current branch as seen since ``mark``, for callers that fold it
        incrementally (issue 20 target 3: per-request work must not grow with the
        session).

        Args:
            mark: what an earlier call returned, or None the first time.

        Returns:
            ``(new mark, entries, whole)``: when the branch has only grown since
            ``mark``, ``entries`` are the entries appended to it since (``whole``
            False); otherwise (first call, navigation, a new branch) ``entries`` is
            the whole branch, root first, and ``whole`` is True. ``entries`` is a new
            list; the entries themselves are the session's records (read only).
        """
        chain = self._current_branch()
        new_mark = (self._branch_epoch, len(chain))
        if mark is not None and mark[0] == self._branch_epoch and mark[1] <= len(chain):
            return new_mark, chain[mark[1] :], False
        return new_mark, list(chain), True

    def _walk(self, leaf: str | None) -> list[dict[str, Any]]:
        chain: list[dict[str, Any]] = []
        current = leaf
        seen: set[str] = set()
        while current is not None and current in self.by_id and current not in seen:
            seen.add(current)
            record = self.by_id[current]
            chain.append(record)
            current = record.get("parentId")
        return chain[::-1]

    def messages(self, leaf: str | None = None) -> list[dict[str, Any]]:
        """The messages the model sees at ``leaf`` (default: the current leaf), as pi
        1.6.0 builds them (`context_messages`), in a new list."""
        if leaf is None or leaf == self.last_id:
            return list(self.context()[1])
        return context_messages(self.branch(leaf))

    def context(self) -> tuple[int, list[dict[str, Any]]]:
        """The current leaf's model context, kept up to date as entries are
        appended (issue 20 target 3): ``(generation, messages)``.

        ``messages`` equals ``context_messages(self.branch())`` and is the writer's
        own list (never mutate it): while ``generation`` stays the same it only grows
        at its end, so a caller that converted its first N messages may convert only
        the rest. A compaction, a context edit or a move of the leaf elsewhere builds
        it again under a new generation."""
        mark, entries, whole = self.branch_tail(self._context.mark)
        self._context.update(mark, entries, whole)
        return self._context.generation, self._context.messages

    def settings(self) -> tuple[tuple[str, str] | None, str]:
        """The branch's recorded ``((provider, model_id) | None, thinking_level)``, as
        pi's ``getSessionContextSettings``: the last ``model_change`` or assistant
        message names the model, the last ``thinking_level_change`` the level
        (``"off"`` when none)."""
        model: tuple[str, str] | None = None
        level = "off"
        for record in self.branch():
            kind = record.get("type")
            if kind == "thinking_level_change" and isinstance(record.get("thinkingLevel"), str):
                level = record["thinkingLevel"]
            elif kind == "model_change":
                model = (str(record.get("provider")), str(record.get("modelId")))
            elif kind == "message":
                message = record.get("message") or {}
                if message.get("role") == "assistant" and isinstance(message.get("model"), str):
                    model = (str(message.get("provider")), message["model"])
        return model, level

    def record_settings(self, provider: str, model_id: str, thinking_level: str) -> None:
        """At session start: a new session records its model and thinking level (pi
        writes ``model_change`` then ``thinking_level_change`` first); a continued one
        records only what differs from its branch (pi's ``_recordModelSelection``,
        ``_recordThinkingLevel``)."""
        fresh = not self.entries
        model, level = self.settings()
        if model != (provider, model_id):
            self.append_model_change(provider, model_id)
        if fresh or level != thinking_level:
            self.append_thinking_level_change(thinking_level)

    def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        *,
        from_extension: bool = False,
        details: Any = None,
        usage: dict[str, Any] | None = None,
        system_message: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append a ``compaction`` entry: the model sees ``summary`` instead of the
        messages before ``first_kept_entry_id`` (see `context_messages`).

        ``first_kept_entry_id`` None keeps nothing: the entry's own id is written, as
        pi does ("a retain-none compaction stores its own ID"; the field is never null).
        """
        entry_id = self._next_id()
        record: dict[str, Any] = {
            "type": "compaction",
            "id": entry_id,
            "summary": summary,
            "firstKeptEntryId": first_kept_entry_id or entry_id,
            "tokensBefore": tokens_before,
            "details": details,
            "fromHook": from_extension,
        }
        if usage is not None:
            record["usage"] = usage
        if system_message is not None:
            record["systemMessage"] = system_message
        return self._append(record)

    def _append(self, record: dict[str, Any]) -> dict[str, Any]:
        record = {
            "type": record.pop("type"),
            "id": record.pop("id", None) or self._next_id(),
            "parentId": record.pop("parentId", self.last_id),
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

    def append_custom_message(
        self, custom_type: str, content: Any, display: bool, details: Any = None
    ) -> dict[str, Any]:
        """Append a ``custom_message`` entry: an extension's message that the model
        sees as user content (pi's ``appendCustomMessageEntry``; ``details`` is not
        sent). The message's timestamp is the entry's."""
        return self._append(
            {
                "type": "custom_message",
                "customType": custom_type,
                "content": content,
                "display": display,
                "details": details,
            }
        )

    def append_branch_summary(
        self,
        from_leaf: str | None,
        summary: str,
        *,
        parent_id: str | None,
        details: Any = None,
        from_extension: bool = False,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append a ``branch_summary`` entry as a child of ``parent_id`` (the entry the
        new branch continues from; it becomes the leaf), summarising the abandoned
        branch that ended at ``from_leaf`` (pi's ``branchWithSummary``; ``"root"``
        when there was none).

        Raises:
            KeyError: ``parent_id`` names no entry.
        """
        if parent_id is not None and parent_id not in self.by_id:
            raise KeyError(parent_id)
        record: dict[str, Any] = {
            "type": "branch_summary",
            "parentId": parent_id,
            "fromId": from_leaf or "root",
            "summary": summary,
            "details": details,
            "fromHook": from_extension,
        }
        if usage is not None:
            record["usage"] = usage
        return self._append(record)

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

        ``session_id`` is generated (a UUIDv7, `new_session_id`) when not given: a run
        names its session before the file exists, so its first audit records carry
        the id.
        """
        session_id = session_id or new_session_id()
        header = SessionHeader(id=session_id, cwd=str(cwd))
        stamp = header.timestamp.replace(":", "-").replace(".", "-")
        return cls(session_dir_for(agent_dir, cwd) / f"{stamp}_{session_id}.jsonl", header)

    def _write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        if self._fd < 0:
            raise OSError(errno.EBADF, "the session file is closed", str(self.path))
        data = (dumps_line(record) + "\n").encode()
        # One write of one complete line on an O_APPEND descriptor: the kernel places
        # it at the end in one piece. A short write (disk full, a signal) is finished
        # from where it stopped; the lock keeps other writers out meanwhile.
        written = os.write(self._fd, data)
        while written < len(data):
            written += os.write(self._fd, data[written:])
        self._dirty = True

    def sync(self) -> None:
        """``fsync`` what was appended since the last sync, after any sync started by
        `sync_soon` has finished: called at the end of a run and on close, not per
        entry.

        Raises:
            OSError: this fsync, or one `sync_soon` started, failed.
        """
        self._finish_sync()
        if self._dirty and self._fd >= 0:
            os.fsync(self._fd)
            self._dirty = False

    def sync_soon(self) -> None:
        """Start an ``fsync`` of what was appended since the last sync in a thread and
        return at once: called at turn boundaries (issue 15 "Robustness").

        The lines are already in the kernel when this is called (one ``write`` each),
        so a crash of this process loses nothing either way; the fsync guards against
        the machine losing power, and ~3 ms of it per turn on the event loop was most
        of a tool call's cost on a virtual disk (issue 20 target 1). One sync runs at a
        time; `sync` and `close` wait for it.

        Raises:
            OSError: the previous background fsync failed.
        """
        if not self._dirty or self._fd < 0:
            return
        self._finish_sync()
        self._dirty = False
        self._syncing = threading.Thread(
            target=self._fsync_in_thread, args=(self._fd,), name="session-fsync", daemon=True
        )
        self._syncing.start()

    def _fsync_in_thread(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            self._sync_error = exc

    def _finish_sync(self) -> None:
        if self._syncing is not None:
            self._syncing.join()
            self._syncing = None
        if (error := self._sync_error) is not None:
            self._sync_error = None
            raise error

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
        """Sync and close the file (releasing its lock); further appends raise ``OSError``."""
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _ms(iso: Any) -> Any:
    """An entry's ISO 8601 timestamp as Unix milliseconds (a message's timestamp, as
    pi's ``new Date(timestamp).getTime()``); unparseable ones are passed through."""
    if not isinstance(iso, str):
        return iso
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return iso


_EDITABLE_ROLES = ("user", "assistant", "toolResult", "custom")


def _entry_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """pi's ``sessionEntryToContextMessages``: the messages one entry contributes."""
    kind = record.get("type")
    if kind == "message":
        message = record.get("message")
        if not isinstance(message, dict):
            return []
        if message.get("content") is None:
            if message.get("role") == "system":
                return [{**message, "content": ""}]
            if message.get("role") in ("user", "assistant", "toolResult"):
                return [{**message, "content": []}]
        return [message]
    if kind == "custom_message":
        return [
            {
                "role": "custom",
                "customType": record.get("customType"),
                "content": record.get("content") if record.get("content") is not None else [],
                "display": record.get("display"),
                "details": record.get("details"),
                "timestamp": _ms(record.get("timestamp")),
            }
        ]
    if kind == "branch_summary" and record.get("summary"):
        return [
            {
                "role": "branchSummary",
                "summary": record["summary"],
                "fromId": record.get("fromId"),
                "timestamp": _ms(record.get("timestamp")),
            }
        ]
    if kind == "compaction":
        summary = {
            "role": "compactionSummary",
            "summary": record.get("summary"),
            "tokensBefore": record.get("tokensBefore"),
            "timestamp": _ms(record.get("timestamp")),
        }
        system = record.get("systemMessage")
        return [system, summary] if isinstance(system, dict) else [summary]
    # usage, custom, label, session_info, model_change, thinking_level_change,
    # context_edit and entry types this version does not know: no message.
    return []


class _ContextCache:
    """`SessionWriter.context`'s state: the context of the branch up to ``mark``."""

    def __init__(self) -> None:
        self.mark: tuple[int, int] | None = None
        self.generation = 0
        self.messages: list[dict[str, Any]] = []
        self.edits: dict[Any, dict[str, Any]] = {}
        self.branch: list[dict[str, Any]] = []

    def update(self, mark: tuple[int, int], entries: list[dict[str, Any]], whole: bool) -> None:
        self.mark = mark
        if not whole and not any(e.get("type") in _RESELECTING for e in entries):
            # Entries after the selection's end: each adds its own messages (the same
            # loop body as `context_messages`).
            self.branch += entries
            _add_context(entries, self.edits, self.messages)
            return
        if not whole:
            entries = self.branch + entries
        self.branch = entries
        self.generation += 1
        selected, self.edits = _selection(entries)
        # A new list: a caller holding the old generation's keeps it unchanged.
        self.messages = []
        _add_context(selected, self.edits, self.messages, skip_first_compaction=False)


# Entry types that change which entries the context selects, or their content.
_RESELECTING = ("compaction", "context_edit")


def context_messages(branch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model context of a branch (root → leaf entries), as pi 1.6.0's
    ``buildSessionContext`` (pi docs session-format.md "Context Building"):

    1. with a ``compaction`` on the branch, the latest one: its ``systemMessage`` and
       summary (``compactionSummary``), the non-system entries from its
       ``firstKeptEntryId`` up to it (none when that id is not found before it, or is
       its own id), then every entry after it; without one, the whole branch;
    2. the latest ``context_edit`` per target among those entries replaces the
       target's content (``replacement: null`` omits it);
    3. ``message`` → its message, ``custom_message`` → a ``custom`` message,
       ``branch_summary`` → ``branchSummary``; other entries give none.

    System messages stay in the list (extensions see them, as in pi); `llm_messages`
    leaves them out of provider requests: each program sends its own system prompt.
    """
    selected, edits = _selection(branch)
    out: list[dict[str, Any]] = []
    _add_context(selected, edits, out, skip_first_compaction=False)
    return out


def _selection(
    branch: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[Any, dict[str, Any]]]:
    """`context_messages` steps 1 and 2: the selected entries and the latest
    ``context_edit`` per target among them."""
    last = None
    for index, record in enumerate(branch):
        if record.get("type") == "compaction":
            last = index
    selected = branch
    if last is not None:
        compaction = branch[last]
        first_kept = compaction.get("firstKeptEntryId")
        selected = [compaction]
        found = False
        for record in branch[:last]:
            if record.get("id") == first_kept:
                found = True
            if found and not (
                record.get("type") == "message"
                and isinstance(record.get("message"), dict)
                and record["message"].get("role") == "system"
            ):
                selected.append(record)
        selected += branch[last + 1 :]
    edits = {
        record.get("targetId"): record
        for record in selected
        if record.get("type") == "context_edit"
    }
    return selected, edits


def _add_context(
    selected: list[dict[str, Any]],
    edits: dict[Any, dict[str, Any]],
    out: list[dict[str, Any]],
    *,
    skip_first_compaction: bool = True,
) -> None:
    """`context_messages` step 3: append the messages of ``selected`` to ``out``. A
    compaction entry gives messages only as the first of a selection."""
    for index, record in enumerate(selected):
        if record.get("type") == "compaction" and (index > 0 or skip_first_compaction):
            continue
        messages = _entry_messages(record)
        edit = edits.get(record.get("id")) if edits else None
        if edit is not None:
            replacement = edit.get("replacement")
            if replacement is None:
                continue
            if isinstance(replacement, dict):
                messages = [_replaced(m, replacement.get("content")) for m in messages]
        out += messages


def _replaced(message: dict[str, Any], content: Any) -> dict[str, Any]:
    role = message.get("role")
    if role not in _EDITABLE_ROLES:
        return message
    if role in ("assistant", "toolResult") and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {**message, "content": content}


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


def _parse_records(
    path: Path, data: bytes
) -> tuple[SessionHeader, list[tuple[int, dict[str, Any]]]]:
    """`parse_session`'s checks; the entries as ``(line number, record)``, plain dicts."""
    lines = data.split(b"\n")
    # Only a last line without its newline can be torn: every entry is written with
    # its newline in one write, so a complete line that does not parse is damage,
    # reported rather than dropped (red-team finding: it was cut off the file).
    torn_tail = bool(lines) and lines[-1] != b""
    if lines and lines[-1] == b"":
        lines.pop()
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(lines, start=1):
        try:
            record = _parse_line(raw)
        except _TornLineError as exc:
            if number == len(lines) and torn_tail:
                break  # torn last line: the crash happened mid-write
            raise SessionFileError(f"{path}:{number}: {exc}") from None
        except ValueError as exc:
            raise SessionFileError(f"{path}:{number}: {exc}") from None
        records.append((number, record))
    if not records or records[0][1].get("type") != "session":
        raise SessionFileError(f"{path}:1: missing session header")
    header = _header(path, records[0][1])
    for number, record in records[1:]:
        try:
            _check_entry(record)
        except ValueError as exc:
            raise SessionFileError(f"{path}:{number}: {exc}") from None
    _check_tree(path, records[1:])
    return header, records[1:]


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
    header, records = _parse_records(path, data)
    entries: list[MessageEntry | ModelChangeEntry | dict[str, Any]] = []
    for number, record in records:
        cls = _ENTRY_TYPES.get(record["type"])
        try:
            entries.append(_converter.structure(record, cls) if cls else record)
        except (cattrs.BaseValidationError, ValueError, TypeError) as exc:  # pragma: no cover
            # _check_entry checked every field cattrs reads; kept as a backstop.
            raise SessionFileError(f"{path}:{number}: malformed {record['type']} entry") from exc
    return header, entries


MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest session file line read (bytes): far above anything pi writes (a worker
frame is at most 8 MiB), so a longer one is damage, not data."""

MAX_NESTING = 100
"""Deepest JSON nesting in a session line (as on the worker channel, `framing`)."""


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
    # Nesting depth is bounded by the number of opening brackets: most lines have far
    # fewer than the limit and skip the walk (as `framing` does for worker frames).
    if raw.count(b"{") + raw.count(b"[") > MAX_NESTING and nests_deeper_than(record, MAX_NESTING):
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
    "context_edit": {"targetId": (_STR, "a string")},
    "usage": {"kind": (_STR, "a string"), "usage": ((dict,), "an object")},
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
    elif kind == "compaction" and record.get("systemMessage") is not None:
        from pi_sandbox.supervisor.boundary.agent_messages import check_agent_message

        check_agent_message(record["systemMessage"], where="systemMessage")
        if record["systemMessage"].get("role") != "system":
            raise ValueError("systemMessage.role: expected 'system'")
    elif kind == "context_edit":
        replacement = record.get("replacement")
        if replacement is not None:
            if not isinstance(replacement, dict):
                raise ValueError(
                    f"replacement: expected an object or null, got {_json_type(replacement)}"
                )
            content = replacement.get("content")
            # An assistant target's replacement may hold thinking or toolCall blocks.
            if not isinstance(content, str) and not (
                isinstance(content, list)
                and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content)
            ):
                raise ValueError(
                    "replacement.content: expected a string or a list of content blocks"
                )


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
