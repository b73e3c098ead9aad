"""Session files: pi's layout and field names, and a torn last line tolerated on load."""

import json

import pytest

from pi_sandbox.supervisor.sessions.session_file import MessageEntry, SessionWriter, load_session


def test_entries_chain_by_parent_id_and_use_pi_field_names(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path / "proj")
    first = writer.append_message({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    change = writer.append_model_change("openai", "gpt")
    writer.close()
    lines = [json.loads(line) for line in writer.path.read_text().splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["cwd"] == str(tmp_path / "proj")
    assert lines[1] == {**lines[1], "type": "message", "id": first.id, "parentId": None}
    assert (
        lines[2]["parentId"] == first.id
        and lines[2]["modelId"] == "gpt"
        and change.parent_id == first.id
    )
    assert (
        writer.path.parent.name
        == "--" + str(tmp_path / "proj").lstrip("/").replace("/", "-") + "--"
    )


def test_a_torn_last_line_is_skipped_on_load(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    writer.append_message({"role": "user", "content": []})
    writer.close()
    with open(writer.path, "a") as handle:
        handle.write('{"type": "message", "id": "dead')  # the crash happened mid-write
    header, entries = load_session(writer.path)
    assert header.cwd == str(tmp_path)
    assert len(entries) == 1 and isinstance(entries[0], MessageEntry)


def test_a_broken_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    writer.close()
    with open(writer.path, "a") as handle:
        handle.write("not json\n" + json.dumps({"type": "label", "id": "x"}) + "\n")
    with pytest.raises(ValueError, match=r":2: not valid JSON"):
        load_session(writer.path)


def test_resuming_a_torn_session_file_drops_the_torn_line_before_appending(tmp_path):
    from pi_sandbox.supervisor.sessions.session_file import SessionWriter, load_session

    writer = SessionWriter.create(tmp_path, tmp_path / "ws")
    writer.append_message({"role": "user", "content": "one"})
    writer.append_message({"role": "user", "content": "two"})
    writer.close()
    assert writer.path is not None
    writer.path.write_bytes(writer.path.read_bytes()[:-20])  # a crash mid-write
    resumed = SessionWriter.resume(writer.path)
    assert [m["content"] for m in resumed.messages()] == ["one"]
    resumed.append_message({"role": "user", "content": "three"})
    resumed.close()
    _, entries = load_session(writer.path)  # every line parses again
    assert [e.message["content"] for e in entries if hasattr(e, "message")] == ["one", "three"]


def test_resuming_refuses_a_fifo_without_blocking(tmp_path):
    import os

    import pytest

    from pi_sandbox.supervisor.sessions.session_file import SessionWriter

    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        SessionWriter.resume(fifo)
