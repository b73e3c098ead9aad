"""Newline-delimited JSON framing with a bounded buffer (stdlib only; DESIGN §3).

One frame is one JSON object encoded as UTF-8 followed by ``\\n``. JSON encoders
escape newlines inside strings, so a raw ``\\n`` byte always ends a frame.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from typing import Any

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MAX_NESTING",
    "FrameDecoder",
    "FrameError",
    "decode_line",
    "encode_frame",
    "nests_deeper_than",
]

DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024

MAX_NESTING = 100
"""Deepest nesting of arrays and objects a frame may have. Deeper values pass the
C decoder but overflow Python-level recursion later (``copy.deepcopy`` of a hook
state, pydantic validation), far from the frame that carried them."""


class FrameError(ValueError):
    """A frame is oversized, not valid UTF-8 JSON, or not a JSON object.

    The channel is unusable after this error: the supervisor kills the worker.
    """


def encode_frame(
    message: dict[str, Any], *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> bytes:
    """Encode ``message`` as one frame (compact JSON + ``\\n``).

    Raises:
        FrameError: the encoded frame exceeds ``max_frame_bytes`` bytes.
        TypeError / ValueError: ``message`` is not JSON-serialisable (NaN is refused).
    """
    # A lone surrogate (from a "\\ud800" escape a peer sent) is not encodable as UTF-8;
    # backslashreplace writes it back as the same JSON escape.
    data = _ENCODER.encode(message).encode("utf-8", "backslashreplace")
    if len(data) + 1 > max_frame_bytes:
        raise FrameError(
            f"frame of {len(data) + 1} bytes exceeds the limit of {max_frame_bytes} bytes"
        )
    return data + b"\n"


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get complete messages back.

    The buffer never holds more than ``max_frame_bytes`` bytes of an unfinished frame;
    a peer that sends a longer line is cut off with ``FrameError`` instead of being
    allowed to grow memory without bound.
    """

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add ``data`` and return every message completed by it, in order.

        Raises:
            FrameError: a frame (complete or still open) is larger than the limit, is
                not valid UTF-8 JSON, or is JSON but not an object.
        """
        self._buffer += data
        messages: list[dict[str, Any]] = []
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._buffer[start:end])
            start = end + 1
            if len(line) + 1 > self.max_frame_bytes:
                raise FrameError(
                    f"frame of {len(line) + 1} bytes exceeds the limit of {self.max_frame_bytes} bytes"
                )
            if not line.strip():
                continue
            messages.append(decode_line(line))
        del self._buffer[:start]
        if len(self._buffer) > self.max_frame_bytes:
            raise FrameError(
                f"unterminated frame of more than {self.max_frame_bytes} bytes (limit exceeded)"
            )
        return messages


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


# One encoder and decoder for every frame: ``json.dumps``/``json.loads`` with options
# build a new one per call, which cost more than the encoding of a small frame.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def decode_line(line: bytes) -> dict[str, Any]:
    """Decode one frame's bytes (without the newline) into a JSON object.

    Raises:
        FrameError: not UTF-8 JSON, not an object, a number out of range (NaN,
            infinity, more than 4300 digits), or nesting deeper than `MAX_NESTING`.
    """
    try:
        # NaN, Infinity and out-of-range numbers are refused: passed on to another peer
        # they would make its strict encoder fail far from the frame that carried them.
        value = _DECODER.decode(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, bad UTF-8 and integers past the
        # int-to-str digit limit; RecursionError, nesting deeper than the stack.
        preview = line[:80].decode("utf-8", "replace")
        raise FrameError(f"frame is not valid JSON ({exc}): {preview!r}") from exc
    if not isinstance(value, dict):
        raise FrameError(f"frame is JSON but not an object: {type(value).__name__}")
    # Nesting depth is bounded by the number of opening brackets: most frames have
    # far fewer than the limit, and skip the walk (it was most of a hop's cost).
    if line.count(b"{") + line.count(b"[") > MAX_NESTING and nests_deeper_than(value, MAX_NESTING):
        raise FrameError(f"frame nests deeper than {MAX_NESTING} levels")
    return value


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays/objects in ``value`` nest more than ``limit`` levels deep.

    Iterative, so it is safe on values too deep for recursive code.
    """
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            pending.extend(
                (child, depth + 1) for child in item.values() if isinstance(child, dict | list)
            )
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return False
