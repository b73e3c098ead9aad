"""An incremental Server-Sent Events decoder (WHATWG HTML "event stream interpretation").

Pure and synchronous: feed it decoded text as it arrives, get complete events back.
We keep our own ~60 lines instead of ``httpx-sse`` because providers need to feed
arbitrary text chunks (and unit-test that), and ``httpx-sse`` refuses responses whose
content type is not ``text/event-stream``, which some local OpenAI-compatible servers
get wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_EVENT_CHARS", "SSEDecoder", "SSEEvent", "SSEEventTooLarge"]

_LINE_END = re.compile(r"\r\n|\r|\n")

DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024
"""Largest event (its lines together, in characters) a decoder buffers by default: far
above any real model event, bounded against a server that never ends a line (issue 16,
"a huge event")."""


class SSEEventTooLarge(ValueError):
    """An event grew past the decoder's ``max_event_chars`` before it ended."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event.

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
    """Turns a stream of text chunks into ``SSEEvent`` objects.

    Lines may be split anywhere across chunks, including between the ``\\r`` and
    ``\\n`` of a CRLF. Comment lines (starting with ``:``) are ignored; unknown fields
    are ignored; an event with no ``data:`` line is not dispatched (as the spec says).
    """

    def __init__(self, max_event_chars: int = DEFAULT_MAX_EVENT_CHARS) -> None:
        """``max_event_chars``: the bound on one event's buffered text (its unterminated
        line plus its ``data:`` lines); past it ``feed`` raises `SSEEventTooLarge`."""
        self.max_event_chars = max_event_chars
        # The current, unterminated line, kept as pieces: joining only at its end keeps
        # a long line linear in its length.
        self._pieces: list[str] = []
        self._pieces_len = 0
        self._data_len = 0
        self._after_cr = False  # the last chunk ended in "\r": a "\n" next is part of it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self._last_id: str | None = None

    def feed(self, chunk: str) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed (often none).

        Raises:
            SSEEventTooLarge: the current event passed ``max_event_chars``.
        """
        if not chunk:
            return []
        if not self._started:
            self._started = True
            chunk = chunk.removeprefix("\ufeff")
        if self._after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        self._after_cr = False
        events: list[SSEEvent] = []
        # Every element but the last is a complete line; the last is the unterminated
        # rest (often ""). ``str.split`` is the fast path for the usual LF-only stream.
        lines = _LINE_END.split(chunk) if "\r" in chunk else chunk.split("\n")
        if len(lines) > 1:
            if self._pieces:
                lines[0] = "".join(self._pieces) + lines[0]
                self._pieces, self._pieces_len = [], 0
            for index in range(len(lines) - 1):
                self._line(lines[index], events)
        self._after_cr = chunk.endswith("\r")
        rest = lines[-1]
        if rest:
            self._pieces.append(rest)
            self._pieces_len += len(rest)
        if self._pieces_len + self._data_len > self.max_event_chars:
            raise SSEEventTooLarge(
                f"a stream event is larger than {self.max_event_chars} characters"
            )
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: return the pending event, if any.

        The spec discards an event that is not followed by a blank line; we are lenient
        and dispatch it (including an unterminated last line), because some servers
        close the stream right after their final ``data:`` line.
        """
        events: list[SSEEvent] = []
        if self._pieces:
            self._line("".join(self._pieces), events)
            self._pieces, self._pieces_len = [], 0
        self._line("", events)
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(
                    SSEEvent(
                        event=self._event or "message",
                        data="\n".join(self._data),
                        id=self._last_id,
                        retry=self._retry,
                    )
                )
            self._event, self._data, self._retry, self._data_len = "", [], None, 0
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > self.max_event_chars:
                raise SSEEventTooLarge(
                    f"a stream event is larger than {self.max_event_chars} characters"
                )
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
