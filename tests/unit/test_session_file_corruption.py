"""Issue 13 §4: a corrupted session file gives one clear error naming the file and
the line — never a TypeError, AttributeError or RecursionError — whether it is
loaded (`load_session`) or resumed (`SessionWriter.resume`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pi_sandbox.supervisor.sessions.session_file import (
    MAX_LINE_BYTES,
    SessionFileError,
    SessionWriter,
    load_session,
)

HEADER = {
    "type": "session",
    "version": 3,
    "id": "s-1",
    "timestamp": "2026-01-01T00:00:00Z",
    "cwd": "/w",
}


def entry(entry_id: str, parent: str | None, **fields) -> dict:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:01Z",
        **fields,
    }


GOOD = [
    entry("a1", None, message={"role": "user", "content": "hi", "timestamp": 1}),
    entry(
        "a2",
        "a1",
        message={
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
            "usage": {},
            "stopReason": "stop",
        },
    ),
    {"type": "custom", "id": "a3", "parentId": "a2", "customType": "state", "data": {"n": 1}},
    {"type": "label", "id": "a4", "parentId": "a3", "targetId": "a1", "label": "start"},
    {"type": "session_info", "id": "a5", "parentId": "a4", "name": "demo"},
    {"type": "thinking_level_change", "id": "a6", "parentId": "a5", "thinkingLevel": "high"},
]


def write(tmp_path: Path, *lines: bytes | str | dict) -> Path:
    path = tmp_path / "s.jsonl"
    out = b""
    for line in lines:
        if isinstance(line, dict):
            line = json.dumps(line)
        out += (line.encode() if isinstance(line, str) else line) + b"\n"
    path.write_bytes(out)
    return path


def test_a_well_formed_file_with_every_entry_kind_loads(tmp_path):
    path = write(tmp_path, HEADER, *GOOD)
    header, entries = load_session(path)
    assert header.id == "s-1" and len(entries) == len(GOOD)
    resumed = SessionWriter.resume(path)
    assert [m["role"] for m in resumed.messages()] == ["user", "assistant"]
    assert resumed.name == "demo"


def deep(n: int) -> str:
    return "[" * n + "]" * n


CORRUPTIONS = {
    # name: (lines after the header, the line the error names, words in it)
    "wrong type of content": (
        [entry("a1", None, message={"role": "custom", "customType": "x", "content": 5})],
        2,
        "message.content",
    ),
    "message not an object": ([entry("a1", None, message=[1])], 2, "must be an object"),
    "message without role": ([entry("a1", None, message={"content": "x"})], 2, "string role"),
    "missing message": ([entry("a1", None)], 2, "must be an object"),
    "content block of wrong type": (
        [entry("a1", None, message={"role": "user", "content": [7]})],
        2,
        "content[0]",
    ),
    "tool result without id": (
        [entry("a1", None, message={"role": "toolResult", "toolName": "x", "content": []})],
        2,
        "toolCallId",
    ),
    "deep nesting": (
        [
            json.dumps(entry("a1", None, message={"role": "user", "content": "x"}))[:-1]
            + ', "x": '
            + deep(5000)
            + "}"
        ],
        2,
        "nested more than 100",
    ),
    "moderate nesting past the bound": (
        [
            json.dumps(
                {
                    **entry("a1", None, message={"role": "user", "content": "x"}),
                    "x": json.loads(deep(150)),
                }
            )
        ],
        2,
        "nested more than 100",
    ),
    "invalid utf-8 in the middle": (
        [b'{"type": "custom", "id": "a1", "parentId": null, "customType": "\xff\xfe"}', GOOD[0]],
        2,
        "not UTF-8",
    ),
    "a number for a line": (["5", GOOD[0]], 2, "expected a JSON object, got a number"),
    "an array for a line": (["[1, 2]", GOOD[0]], 2, "got an array"),
    "null for a line": (["null", GOOD[0]], 2, "got null"),
    "missing type": ([{"id": "a1", "parentId": None}], 2, "string 'type'"),
    "type of the wrong type": ([{"type": 5, "id": "a1", "parentId": None}], 2, "string 'type'"),
    "a second header": ([HEADER], 2, "second session header"),
    "id of the wrong type": (
        [entry(5, None, message={"role": "user", "content": "x"})],
        2,
        "id: expected a string",
    ),
    "missing parentId": (
        [{"type": "message", "id": "a1", "message": {"role": "user", "content": "x"}}],
        2,
        "parentId: missing",
    ),
    "parentId of the wrong type": (
        [{"type": "custom", "id": "a1", "parentId": 3, "customType": "x"}],
        2,
        "parentId: expected a string or null",
    ),
    "model change without model": (
        [{"type": "model_change", "id": "a1", "parentId": None, "provider": "p"}],
        2,
        "modelId",
    ),
    "label of the wrong type": (
        [{"type": "label", "id": "a1", "parentId": None, "targetId": "a", "label": 3}],
        2,
        "label: expected",
    ),
    "compaction summary not text": (
        [
            {
                "type": "compaction",
                "id": "a1",
                "parentId": None,
                "summary": {},
                "firstKeptEntryId": None,
            }
        ],
        2,
        "summary",
    ),
    "custom message content": (
        [
            {
                "type": "custom_message",
                "id": "a1",
                "parentId": None,
                "customType": "x",
                "content": 5,
                "display": True,
            }
        ],
        2,
        "content",
    ),
    "timestamp not a string": (
        [{"type": "custom", "id": "a1", "parentId": None, "customType": "x", "timestamp": 5}],
        2,
        "timestamp",
    ),
    "cycle in parentId": (
        [
            {"type": "custom", "id": "a1", "parentId": "a3", "customType": "x"},
            {"type": "custom", "id": "a2", "parentId": "a1", "customType": "x"},
            {"type": "custom", "id": "a3", "parentId": "a2", "customType": "x"},
        ],
        2,
        "parentId cycle",
    ),
    "an entry that is its own parent": (
        [{"type": "custom", "id": "a1", "parentId": "a1", "customType": "x"}],
        2,
        "parentId cycle",
    ),
    "broken JSON in the middle": (['{"type": "custom", "id":', GOOD[0]], 2, "not valid JSON"),
    "integer past the digit limit": (
        [
            '{"type": "custom", "id": "a1", "parentId": null, "customType": "x", "n": '
            + "9" * 5000
            + "}"
        ],
        2,
        "not valid JSON",
    ),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupted_session_file_is_one_clear_error_naming_file_and_line(tmp_path, name):
    lines, line, words = CORRUPTIONS[name]
    path = write(tmp_path, HEADER, *lines)
    for load in (load_session, SessionWriter.resume):
        with pytest.raises(SessionFileError) as caught:
            load(path)
        assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)[:300]
        assert words in str(caught.value), str(caught.value)[:300]


@pytest.mark.parametrize(
    ("header", "words"),
    [
        ({"type": "session", "version": 3, "cwd": "/w"}, "id: expected a string"),
        (
            {"type": "session", "version": "3", "id": "x", "cwd": "/w"},
            "version: expected an integer",
        ),
        (
            {"type": "session", "version": True, "id": "x", "cwd": "/w"},
            "version: expected an integer",
        ),
        ({"type": "session", "id": "x", "cwd": ["/w"]}, "cwd: expected a string"),
        ({"type": "message"}, "missing session header"),
    ],
)
def test_a_malformed_header_names_line_one(tmp_path, header, words):
    path = write(tmp_path, header)
    with pytest.raises(SessionFileError, match=rf"^{path}:1: .*{words}"):
        load_session(path)


def test_an_empty_file_is_a_missing_header(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    with pytest.raises(SessionFileError, match=r":1: missing session header"):
        load_session(path)


def test_a_line_longer_than_the_limit_is_refused_without_parsing_it(tmp_path, monkeypatch):
    import pi_sandbox.supervisor.sessions.session_file as session_file

    monkeypatch.setattr(session_file, "MAX_LINE_BYTES", 1000)
    path = write(
        tmp_path,
        HEADER,
        {"type": "custom", "id": "a1", "parentId": None, "customType": "x", "data": "A" * 2000},
        GOOD[0],
    )
    with pytest.raises(SessionFileError, match=r":2: line longer than 1000 bytes"):
        load_session(path)
    assert MAX_LINE_BYTES >= 8 * 1024 * 1024  # above the largest worker frame


def test_a_torn_last_line_is_still_tolerated_even_when_it_cuts_a_utf8_character(tmp_path):
    good = json.dumps(GOOD[0]).encode()
    torn = '{"type": "custom", "id": "a9", "parentId": null, "customType": "é'.encode()[:-1]
    path = tmp_path / "s.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + good + b"\n" + torn)
    _, entries = load_session(path)
    assert len(entries) == 1


def test_a_well_formed_but_invalid_last_line_is_an_error_not_a_torn_line(tmp_path):
    path = write(
        tmp_path, HEADER, GOOD[0], entry("a2", "a1", message={"role": "user", "content": 5})
    )
    with pytest.raises(SessionFileError, match=r":3: message\.content"):
        load_session(path)


def test_an_unknown_entry_type_and_an_unknown_role_are_kept(tmp_path):
    path = write(
        tmp_path,
        HEADER,
        {"type": "usage", "id": "u1", "parentId": None, "kind": "cache_warm", "usage": {}},
        entry("a1", "u1", message={"role": "artifact", "body": {}}),
        entry("a2", "a1", message={"role": "user", "content": "x"}),
    )
    resumed = SessionWriter.resume(path)
    assert len(resumed.entries) == 3
    assert [m["role"] for m in resumed.messages()] == ["artifact", "user"]


def test_random_byte_damage_never_escapes_as_anything_but_a_session_file_error(tmp_path):
    """Fuzz: flips, deletions, insertions and truncations of a valid file (seeded, so
    a failure reproduces); every outcome is a load or one SessionFileError."""
    original = b"".join(json.dumps(line).encode() + b"\n" for line in [HEADER, *GOOD])
    rng = random.Random(13)
    path = tmp_path / "s.jsonl"
    loaded = refused = 0
    for _ in range(1500):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            action = rng.choice(("flip", "delete", "insert", "truncate", "duplicate"))
            position = rng.randrange(len(data))
            if action == "flip":
                data[position] = rng.randrange(256)
            elif action == "delete":
                del data[position : position + rng.randint(1, 20)]
            elif action == "insert":
                data[position:position] = rng.choice(
                    [b"[", b"{", b'"', b"\n", b"\xff", b"null", b"5", b"}"]
                ) * rng.randint(1, 300)
            elif action == "truncate":
                del data[position:]
            else:
                start = rng.randrange(len(data))
                data[position:position] = data[start : start + rng.randint(1, 200)]
            if not data:
                data = bytearray(b"x")
        path.write_bytes(bytes(data))
        try:
            load_session(path)
            loaded += 1
        except SessionFileError as exc:
            assert str(exc).startswith(f"{path}:"), str(exc)[:200]
            refused += 1
    assert loaded and refused  # both outcomes happened: the fuzz reached the checks
