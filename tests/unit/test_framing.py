"""Newline-delimited JSON framing: split frames, limits, invalid input."""

import json

import pytest

from pi_sandbox.protocol.framing import FrameDecoder, FrameError, encode_frame


def test_a_frame_split_across_many_reads_is_decoded_once_complete():
    frame = encode_frame({"jsonrpc": "2.0", "id": 1, "result": {"text": "héllo\nworld"}})
    decoder = FrameDecoder()
    messages = []
    for i in range(len(frame)):
        messages += decoder.feed(frame[i : i + 1])
    assert messages == [{"jsonrpc": "2.0", "id": 1, "result": {"text": "héllo\nworld"}}]
    assert decoder.pending_bytes == 0


def test_several_frames_in_one_read_come_out_in_order():
    data = b"".join(encode_frame({"n": n}) for n in range(5))
    assert [m["n"] for m in FrameDecoder().feed(data)] == [0, 1, 2, 3, 4]


def test_a_newline_inside_a_string_never_ends_a_frame():
    frame = encode_frame({"text": "a\nb\r\nc"})
    assert frame.count(b"\n") == 1


def test_an_oversized_complete_frame_is_a_frame_error():
    decoder = FrameDecoder(max_frame_bytes=64)
    with pytest.raises(FrameError, match="exceeds the limit"):
        decoder.feed(json.dumps({"x": "y" * 100}).encode() + b"\n")


def test_an_unterminated_frame_past_the_limit_is_cut_off_without_growing():
    decoder = FrameDecoder(max_frame_bytes=64)
    decoder.feed(b'{"x": "' + b"y" * 40)
    with pytest.raises(FrameError, match="unterminated"):
        decoder.feed(b"y" * 40)


def test_invalid_json_is_a_frame_error_quoting_the_frame():
    with pytest.raises(FrameError, match="not valid JSON"):
        FrameDecoder().feed(b"{not json}\n")


def test_invalid_utf8_is_a_frame_error():
    with pytest.raises(FrameError, match="not valid JSON"):
        FrameDecoder().feed(b'{"a": "\xff"}\n')


@pytest.mark.parametrize("value", [b"[1, 2]", b"42", b'"text"', b"null"])
def test_json_that_is_not_an_object_is_a_frame_error(value):
    with pytest.raises(FrameError, match="not an object"):
        FrameDecoder().feed(value + b"\n")


def test_blank_lines_between_frames_are_ignored():
    assert FrameDecoder().feed(b'\n\n{"a":1}\n\n') == [{"a": 1}]


def test_encoding_refuses_a_frame_over_the_limit_and_nan():
    with pytest.raises(FrameError):
        encode_frame({"x": "y" * 100}, max_frame_bytes=50)
    with pytest.raises(ValueError):
        encode_frame({"x": float("nan")})


def test_an_integer_past_the_digit_limit_is_a_frame_error_not_a_crash():
    with pytest.raises(FrameError):
        FrameDecoder().feed(b'{"n": ' + b"9" * 5000 + b"}\n")


def test_nesting_deeper_than_the_stack_is_a_frame_error_not_a_crash():
    with pytest.raises(FrameError):
        FrameDecoder().feed(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n")


def test_a_lone_surrogate_round_trips_as_a_json_escape():
    frame = encode_frame({"text": "a\ud800b"})
    assert b"\\ud800" in frame
    assert FrameDecoder().feed(frame) == [{"text": "a\ud800b"}]


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_numbers_are_a_frame_error(number):
    with pytest.raises(FrameError):
        FrameDecoder().feed(b'{"n": ' + number + b"}\n")


def test_frames_nested_deeper_than_the_limit_are_refused():
    from pi_sandbox.protocol.framing import MAX_NESTING

    ok = {"a": [[{}]]}
    deep: dict = {}
    node = deep
    for _ in range(MAX_NESTING):
        node["x"] = {}
        node = node["x"]
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(ok)) == [ok]
    with pytest.raises(FrameError, match="nests deeper"):
        decoder.feed(encode_frame(deep))
