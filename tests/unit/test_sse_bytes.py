"""The SSE decoder fed raw bytes (as providers do), its size bound, and the JSON helper."""

from __future__ import annotations

import json

import pytest

from pi_sandbox.supervisor.providers.sse import (
    SSEDecoder,
    SSEEvent,
    SSEEventTooLarge,
    loads_json,
)

STREAM = 'event: content_block_delta\ndata: {"text": "día ☃ 🎉"}\n\n'.encode()


def feed_bytes(chunks: list[bytes], **options: int) -> list[SSEEvent]:
    decoder = SSEDecoder(**options)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed_bytes(chunk))
    return [*events, *decoder.flush()]


def test_every_byte_split_including_inside_utf8_characters_gives_the_same_event() -> None:
    whole = [SSEEvent(event="content_block_delta", data='{"text": "día ☃ 🎉"}')]
    assert feed_bytes([STREAM]) == whole
    for cut in range(len(STREAM) + 1):
        assert feed_bytes([STREAM[:cut], STREAM[cut:]]) == whole, cut
    assert feed_bytes([STREAM[i : i + 1] for i in range(len(STREAM))]) == whole


def test_a_byte_order_mark_split_across_chunks_is_still_dropped() -> None:
    data = b"\xef\xbb\xbfdata: x\n\n"
    for cut in range(1, 4):
        assert feed_bytes([data[:cut], data[cut:]]) == [SSEEvent(data="x")], cut


def test_invalid_utf8_becomes_the_replacement_character() -> None:
    assert feed_bytes([b"data: a\xffb\n\n"]) == [SSEEvent(data="a\ufffdb")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_an_event_past_the_limit_raises_before_it_is_all_buffered(newline: bytes) -> None:
    decoder = SSEDecoder(max_event_chars=1000)
    decoder.feed_bytes(b"data: " + b"x" * 400 + newline)  # a complete line, within
    with pytest.raises(SSEEventTooLarge, match="larger than 1000 characters"):
        decoder.feed_bytes(b"data: " + b"y" * 700)  # the unterminated line passes it


def test_the_limit_counts_one_event_and_resets_after_it() -> None:
    decoder = SSEDecoder(max_event_chars=100)
    for _ in range(20):
        assert decoder.feed_bytes(b"data: " + b"z" * 60 + b"\n\n") == [SSEEvent(data="z" * 60)]


def test_loads_json_agrees_with_json_loads_including_lone_surrogates() -> None:
    for text in ('{"a": [1, 2.5, null, true]}', '"\\ud83c"', '{"t": "\\ud83c\\udf89"}'):
        assert loads_json(text) == json.loads(text)
    with pytest.raises(ValueError):
        loads_json("{not json")
