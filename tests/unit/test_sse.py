"""The incremental SSE decoder: line splitting, fields, comments, dispatch rules."""

from __future__ import annotations

import pytest

from pi_sandbox.supervisor.providers.sse import SSEDecoder, SSEEvent


def feed_all(chunks: list[str]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_a_blank_line_dispatches_the_event_with_default_type_message() -> None:
    assert feed_all(["data: hello\n\n"]) == [SSEEvent(event="message", data="hello")]


def test_an_event_is_not_dispatched_before_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: hello\n") == []
    assert decoder.feed("\n") == [SSEEvent(data="hello")]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_lf_crlf_and_cr_all_end_lines(newline: str) -> None:
    stream = f"data: a{newline}{newline}data: b{newline}{newline}"
    assert [e.data for e in feed_all([stream])] == ["a", "b"]


def test_every_split_point_of_a_stream_gives_the_same_events() -> None:
    stream = 'event: delta\r\ndata: {"x": 1}\r\n\r\n: keep-alive\r\ndata: [DONE]\r\n\r\n'
    whole = feed_all([stream])
    assert whole == [SSEEvent(event="delta", data='{"x": 1}'), SSEEvent(data="[DONE]")]
    for cut in range(len(stream) + 1):
        assert feed_all([stream[:cut], stream[cut:]]) == whole, cut


def test_one_character_chunks_give_the_same_events() -> None:
    stream = "data: first\r\ndata: second\r\n\r\ndata: third\n\n"
    assert feed_all(list(stream)) == [SSEEvent(data="first\nsecond"), SSEEvent(data="third")]


def test_a_crlf_split_between_chunks_does_not_make_an_empty_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: a\r") == []
    # The "\n" completes the CRLF; a second blank line would have dispatched here.
    assert decoder.feed("\n") == []
    assert decoder.feed("\r") == [SSEEvent(data="a")]


def test_multiple_data_lines_are_joined_with_newlines() -> None:
    assert feed_all(["data: one\ndata:two\ndata\ndata: \n\n"]) == [SSEEvent(data="one\ntwo\n\n")]


def test_only_one_space_after_the_colon_is_removed() -> None:
    assert feed_all(["data:   padded\n\n"]) == [SSEEvent(data="  padded")]


def test_comment_lines_are_ignored() -> None:
    assert feed_all([": ping\n\n: another\ndata: x\n\n"]) == [SSEEvent(data="x")]


def test_an_event_without_data_is_not_dispatched_and_resets_the_event_type() -> None:
    assert feed_all(["event: lonely\n\ndata: x\n\n"]) == [SSEEvent(event="message", data="x")]


def test_the_event_field_names_the_event_type() -> None:
    assert feed_all(["event: error\ndata: {}\n\n"]) == [SSEEvent(event="error", data="{}")]


def test_id_persists_across_events_and_retry_applies_to_its_event() -> None:
    events = feed_all(["id: 7\nretry: 1500\ndata: a\n\ndata: b\n\nretry: soon\ndata: c\n\n"])
    assert events == [
        SSEEvent(data="a", id="7", retry=1500),
        SSEEvent(data="b", id="7"),
        SSEEvent(data="c", id="7"),
    ]


def test_unknown_fields_are_ignored() -> None:
    assert feed_all(["foo: bar\ndata: x\n\n"]) == [SSEEvent(data="x")]


def test_a_leading_byte_order_mark_is_dropped() -> None:
    assert feed_all(["\ufeffdata: x\n\n"]) == [SSEEvent(data="x")]


def test_flush_dispatches_an_unterminated_last_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: a\n\ndata: [DONE]") == [SSEEvent(data="a")]
    assert decoder.flush() == [SSEEvent(data="[DONE]")]
    assert decoder.flush() == []


def test_empty_chunks_change_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: a\r") == []
    assert decoder.feed("") == []
    assert decoder.feed("\n\n") == [SSEEvent(data="a")]
