"""An incremental Server-Sent Events decoder (WHATWG HTML "event stream interpretation").

Pure and synchronous: feed it bytes (or text) as they arrive, get complete events
back. We keep our own decoder instead of ``httpx-sse`` because providers need to feed
arbitrary chunks (and unit-test that), ``httpx-sse`` refuses responses whose content
type is not ``text/event-stream``, which some local OpenAI-compatible servers get
wrong, and the per-token cost matters (issue 16: streaming overhead ≤ 1.5x httpx).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from pydantic_core import from_json

__all__ = ["DEFAULT_MAX_EVENT_CHARS", "SSEDecoder", "SSEEvent", "SSEEventTooLarge", "loads_json"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"

_EVENT_NAMES: dict[bytes, str] = {b"": "message"}  # decoded event names, per process

DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024
"""Largest event a decoder buffers by default (UTF-8 bytes of its lines together): far
above any real model event, bounded against a server that never ends a line (issue 16,
"a huge event")."""


class SSEEventTooLarge(ValueError):
    """One event (its ``data:`` lines plus the line being read) passed the decoder's
    ``max_event_chars``: the stream is abandoned rather than buffered without bound."""


class SSEEvent(NamedTuple):
    """One dispatched event (a named tuple: built once per streamed token, so cheap).

    Attributes:
        event: the ``event:`` field, ``"message"`` when the event had none.
        data: the ``data:`` lines joined with ``"\\n"``.
        id: the last event id seen on the stream so far (it persists across events), or None.
        retry: the ``retry:`` field of this event in ms, or None.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Turns a stream of byte (or text) chunks into ``SSEEvent`` objects.

    Lines may be split anywhere across chunks, including between the ``\\r`` and
    ``\\n`` of a CRLF and inside a UTF-8 character. Comment lines (starting with
    ``:``) are ignored; unknown fields are ignored; an event with no ``data:`` line is
    not dispatched (as the spec says). Text is UTF-8; invalid bytes become U+FFFD.

    The decoder works on bytes: a provider feeds ``response.aiter_bytes()`` straight
    in, and only each event's fields are decoded (once per event, not per chunk).

    Args:
        max_event_chars: ``feed_bytes`` / ``feed`` raise ``SSEEventTooLarge`` as soon as
            the pending event (its data so far plus the unterminated line) is longer,
            in UTF-8 bytes (the same as characters for the ASCII JSON of real events),
            so a server that never ends a line cannot make us buffer it all (issue 16,
            "a huge event"). None: unbounded.
    """

    def __init__(self, max_event_chars: int | None = DEFAULT_MAX_EVENT_CHARS) -> None:
        self.max_event_chars = max_event_chars
        self._limit = max_event_chars
        self._size = 0  # bytes of data in self._data
        self._partial = b""  # the current, unterminated line
        self._after_cr = False  # the last chunk ended in "\r": a "\n" next is part of it
        self._started = False
        self._event = b""
        self._data: list[bytes] = []
        self._retry: int | None = None
        self._last_id: str | None = None

    def feed(self, chunk: str) -> list[SSEEvent]:
        """Consume a text ``chunk`` and return the events it completed (often none)."""
        return self.feed_bytes(chunk.encode("utf-8", "surrogatepass"))

    def feed_bytes(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed (often none)."""
        if not chunk:
            return []
        if not self._started:
            head = self._partial + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._partial = head  # a byte order mark may still be arriving
                return []
            self._started, self._partial = True, b""
            chunk = head.removeprefix(_BOM)
        if self._after_cr:
            self._after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if b"\r" in chunk:
            return self._feed_any(chunk)
        # The common case, LF-only framing: split once and handle ``data:``, ``event:``
        # and blank lines inline (per-token cost, issue 16 "Performance").
        lines = (self._partial + chunk).split(b"\n") if self._partial else chunk.split(b"\n")
        self._partial = lines.pop()
        events: list[SSEEvent] = []
        limit = self._limit
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    self._event, self._retry = b"", None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                self._data.append(value)
                self._size += len(value) + 1
                if limit is not None and self._size > limit:
                    raise SSEEventTooLarge(
                        f"a stream event is larger than {limit} characters (UTF-8 bytes)"
                    )
            elif line.startswith(b"event: "):
                self._event = line[7:]
            else:
                self._line(line, events)
        if limit is not None and len(self._partial) + self._size > limit:
            raise SSEEventTooLarge(
                f"a stream event is larger than {limit} characters (UTF-8 bytes)"
            )
        return events

    def _feed_any(self, chunk: bytes) -> list[SSEEvent]:
        # Any line ends (CR, LF, CRLF), a CRLF possibly cut between two chunks.
        events: list[SSEEvent] = []
        start = 0
        for match in _LINE_END.finditer(chunk):
            self._line(self._partial + chunk[start : match.start()], events)
            self._partial = b""
            start = match.end()
        if start and chunk[start - 1 : start] == b"\r" and start == len(chunk):
            self._after_cr = True
        self._partial += chunk[start:]
        if self._limit is not None and len(self._partial) + self._size > self._limit:
            raise SSEEventTooLarge(
                f"a stream event is larger than {self._limit} characters (UTF-8 bytes)"
            )
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: return the pending event, if any.

        The spec discards an event that is not followed by a blank line; we are lenient
        and dispatch it (including an unterminated last line), because some servers
        close the stream right after their final ``data:`` line.
        """
        events: list[SSEEvent] = []
        if self._partial:
            line, self._partial = self._partial, b""
            if self._started or not _BOM.startswith(line):
                self._line(line, events)
        self._line(b"", events)
        return events

    def _dispatch(self) -> SSEEvent:
        name = _EVENT_NAMES.get(self._event)
        if name is None:
            name = self._event.decode("utf-8", "replace")
            if len(_EVENT_NAMES) < 64:  # the few names a provider uses, not a server's whims
                _EVENT_NAMES[self._event] = name
        data = self._data
        event = SSEEvent(
            name,
            (data[0] if len(data) == 1 else b"\n".join(data)).decode("utf-8", "replace"),
            self._last_id,
            self._retry,
        )
        self._event, self._data, self._retry, self._size = b"", [], None, 0
        return event

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(self._dispatch())
            else:
                self._event, self._retry = b"", None
            return
        if line.startswith(b":"):
            return
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._limit is not None and self._size > self._limit:
                raise SSEEventTooLarge(
                    f"a stream event is larger than {self._limit} characters (UTF-8 bytes)"
                )
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)


def loads_json(data: str) -> Any:
    """Parse one event's JSON ``data`` (providers call this once per streamed token).

    pydantic-core's parser (already loaded by the supervisor) is ~2.5x faster than
    ``json.loads`` on a token-sized object; what it refuses (a lone surrogate escape,
    which ``json`` accepts) is parsed again by ``json``, so the two agree on every
    input ``json`` accepts.

    Raises:
        ValueError: ``data`` is not JSON (``json.JSONDecodeError`` is one).
        RecursionError: nesting too deep for ``json``.
    """
    try:
        return from_json(data)
    except ValueError:
        return json.loads(data)
