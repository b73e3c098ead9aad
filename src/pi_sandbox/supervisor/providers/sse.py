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

__all__ = ["SSEDecoder", "SSEEvent", "SSEEventTooLarge"]

_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEEventTooLarge(ValueError):
    """One event (its ``data:`` lines plus the line being read) passed the decoder's
    ``max_event_chars``: the stream is abandoned rather than buffered without bound."""


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

    Args:
        max_event_chars: when set, ``feed`` raises ``SSEEventTooLarge`` as soon as the
            pending event (its data so far plus the unterminated line) is longer, so a
            server that never ends a line cannot make us buffer it all (issue 16,
            "a huge event"). None: unbounded.
    """

    def __init__(self, max_event_chars: int | None = None) -> None:
        self._limit = max_event_chars
        self._size = 0  # characters of data in self._data
        self._partial = ""  # text of the current, unterminated line
        self._after_cr = False  # the last chunk ended in "\r": a "\n" next is part of it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self._last_id: str | None = None

    def feed(self, chunk: str) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed (often none)."""
        if not chunk:
            return []
        if not self._started:
            self._started = True
            chunk = chunk.removeprefix("\ufeff")
        if self._after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        self._after_cr = False
        events: list[SSEEvent] = []
        start = 0
        for match in _LINE_END.finditer(chunk):
            self._line(self._partial + chunk[start : match.start()], events)
            self._partial = ""
            start = match.end()
        if start and chunk[start - 1] == "\r" and start == len(chunk):
            self._after_cr = True
        self._partial += chunk[start:]
        if self._limit is not None and len(self._partial) + self._size > self._limit:
            raise SSEEventTooLarge(f"a server-sent event is longer than {self._limit} characters")
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: return the pending event, if any.

        The spec discards an event that is not followed by a blank line; we are lenient
        and dispatch it (including an unterminated last line), because some servers
        close the stream right after their final ``data:`` line.
        """
        events: list[SSEEvent] = []
        if self._partial:
            self._line(self._partial, events)
            self._partial = ""
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
            self._event, self._data, self._retry, self._size = "", [], None, 0
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._limit is not None and self._size > self._limit:
                raise SSEEventTooLarge(
                    f"a server-sent event is longer than {self._limit} characters"
                )
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
