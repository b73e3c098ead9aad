"""Session files (issue 15 "Fidelity", "Robustness"): every entry type pi 1.6.0 writes
is written and read back, the model context of a leaf is built as pi builds it, the
writer holds a lock, syncs at turn boundaries and tolerates a torn tail.

Real files in ``tmp_path``; pi 1.6.0 itself is in tests/e2e/test_sessions_pi16_interop.py.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from pi_sandbox.supervisor.agent.agent_session import (
    AgentSession,
    bash_execution_text,
    llm_messages,
)
from pi_sandbox.supervisor.providers.base import AssistantTurn, ToolCall
from pi_sandbox.supervisor.sessions import session_file
from pi_sandbox.supervisor.sessions.session_file import (
    SessionFileError,
    SessionLockedError,
    SessionWriter,
    context_messages,
    load_session,
    new_session_id,
)


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_file(path: Path, records: list[dict]) -> Path:
    header = {"type": "session", "version": 3, "id": new_session_id(), "cwd": "/w"}
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))
    return path


def entry(type_: str, entry_id: str, parent: str | None, **fields) -> dict:
    return {
        "type": type_,
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-12-01T10:00:00.000Z",
        **fields,
    }


def msg(entry_id: str, parent: str | None, message: dict) -> dict:
    return entry("message", entry_id, parent, message=message)


# --- writing what pi 1.6.0 writes -------------------------------------------------------


def fake_session(provider_name: str = "openai", thinking: str = "high") -> SimpleNamespace:
    return SimpleNamespace(
        provider=SimpleNamespace(name=provider_name, model="gpt-x"), thinking_level=thinking
    )


def test_an_assistant_message_carries_api_full_usage_stop_reason_and_thinking_level():
    turn = AssistantTurn(
        text="answer",
        tool_calls=[ToolCall("c1", "bash", {"command": "ls"})],
        stop_reason="toolUse",
        usage={"input": 10, "output": 5},
        provider="openai",
        model="gpt-x",
        api="openai-completions",
        thinking=[{"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"}],
        response_model="gpt-x-2026",
        response_id="resp_1",
    )
    message = AgentSession._assistant_message(fake_session(), turn)
    assert list(message) == [
        "role",
        "content",
        "api",
        "provider",
        "model",
        "responseModel",
        "responseId",
        "usage",
        "stopReason",
        "timestamp",
        "thinkingLevel",
    ]
    assert message["api"] == "openai-completions" and message["thinkingLevel"] == "high"
    assert message["usage"] == {
        "input": 10,
        "output": 5,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 15,
        "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0},
    }
    # Thinking blocks first, then text, then tool calls (no provider-kept order).
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "toolCall"]


def test_an_assistant_message_keeps_the_providers_stream_order_and_its_error():
    turn = AssistantTurn(
        text="a",
        tool_calls=[ToolCall("c1_2", "read", {"path": "x"})],
        stop_reason="error",
        content=[
            {"type": "text", "text": "a"},
            {"type": "thinking", "thinking": "later thought"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "x"}},
        ],
        error_message="overloaded",
    )
    message = AgentSession._assistant_message(fake_session("scripted", "off"), turn)
    assert [b["type"] for b in message["content"]] == ["text", "thinking", "toolCall"]
    # The id the loop made unique is the one recorded (results refer to it).
    assert message["content"][2]["id"] == "c1_2"
    assert message["errorMessage"] == "overloaded" and message["api"] == "scripted"
    assert "responseModel" not in message and "responseId" not in message


def test_a_new_session_starts_with_model_change_then_thinking_level_change_as_pi(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path / "proj")
    writer.record_settings("openai", "gpt-x", "off")
    writer.close()
    records = lines(writer.path)
    assert [r["type"] for r in records] == ["session", "model_change", "thinking_level_change"]
    assert records[2]["thinkingLevel"] == "off" and records[2]["parentId"] == records[1]["id"]
    assert uuid.UUID(records[0]["id"]).version == 7  # pi 1.6.0's session ids are UUIDv7


def test_a_continued_session_records_only_the_settings_that_changed(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    writer.record_settings("openai", "gpt-x", "off")
    writer.close()
    same = SessionWriter.resume(writer.path)
    same.record_settings("openai", "gpt-x", "off")
    same.close()
    assert len(lines(writer.path)) == 3
    changed = SessionWriter.resume(writer.path)
    changed.record_settings("anthropic", "claude", "high")
    changed.close()
    assert [(r["type"], r.get("thinkingLevel")) for r in lines(writer.path)[3:]] == [
        ("model_change", None),
        ("thinking_level_change", "high"),
    ]


def test_every_entry_type_is_written_with_pi_field_names_and_read_back(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    first = writer.append_message(user("hi")).id
    writer.append_thinking_level_change("medium")
    writer.append_custom_message("ext", "injected", False, {"k": 1})
    writer.append_custom("ext-state", {"n": 2})
    writer.append_label(first, "start")
    writer.append_session_info("named")
    summary = writer.append_branch_summary("leaf1", "tried A", parent_id=first)
    compaction = writer.append_compaction("earlier", None, 1234)
    writer.close()
    records = lines(writer.path)
    assert [r["type"] for r in records] == [
        "session",
        "message",
        "thinking_level_change",
        "custom_message",
        "custom",
        "label",
        "session_info",
        "branch_summary",
        "compaction",
    ]
    assert records[3] == {
        **records[3],
        "customType": "ext",
        "content": "injected",
        "display": False,
        "details": {"k": 1},
    }
    assert summary["parentId"] == first and summary["fromId"] == "leaf1"
    # A retain-none compaction names itself: firstKeptEntryId is never null (pi does this).
    assert compaction["firstKeptEntryId"] == compaction["id"]
    _header, entries = load_session(writer.path)
    resumed = SessionWriter.resume(writer.path)
    assert resumed.name == "named" and resumed.last_id == compaction["id"]
    assert len(entries) == 8
    resumed.close()


def test_writing_a_custom_message_makes_a_custom_message_entry_the_model_sees(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    holder = SimpleNamespace(writer=writer)
    AgentSession.record(
        holder,
        {"role": "custom", "customType": "note", "content": "psst", "display": True},
    )
    writer.close()
    assert lines(writer.path)[1]["type"] == "custom_message"
    assert llm_messages(writer.messages()) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "psst"}],
            "timestamp": writer.messages()[0]["timestamp"],
        }
    ]


# --- reading everything pi writes: the context of a leaf ---------------------------------


def test_a_pi_file_with_every_entry_type_loads_and_gives_pi_s_context(tmp_path):
    system = {"role": "system", "content": "", "sections": {"preamble": "P"}, "timestamp": 1}
    path = write_file(
        tmp_path / "s.jsonl",
        [
            entry(
                "model_change",
                "0190aaaa-0000-7000-8000-000000000001",
                None,
                provider="p",
                modelId="m",
            ),
            entry(
                "thinking_level_change",
                "t1",
                "0190aaaa-0000-7000-8000-000000000001",
                thinkingLevel="off",
            ),
            msg("s1", "t1", system),
            msg("u1", "s1", user("one")),
            msg("a1", "u1", {"role": "assistant", "content": [{"type": "text", "text": "r1"}]}),
            entry(
                "usage", "g1", "a1", kind="cache_warm", provider="p", model="m", usage={"input": 1}
            ),
            entry(
                "custom_message",
                "cm",
                "g1",
                customType="x",
                content="extension says",
                display=False,
            ),
            entry("custom", "c1", "cm", customType="x", data={}),
            entry("label", "l1", "c1", targetId="u1", label="here"),
            entry("session_info", "i1", "l1", name="n"),
            entry("context_edit", "e1", "i1", targetId="a1", replacement={"content": "r1 edited"}),
            entry("future_entry_type", "f1", "e1", whatever=[1, 2]),
            msg(
                "b1",
                "f1",
                {
                    "role": "bashExecution",
                    "command": "ls",
                    "output": "x",
                    "exitCode": 2,
                    "cancelled": False,
                    "truncated": False,
                    "timestamp": 3,
                },
            ),
            entry("branch_summary", "bs", "b1", fromId="old", summary="went elsewhere"),
            msg("u2", "bs", user("two")),
        ],
    )
    writer = SessionWriter.resume(path)
    writer.close()
    context = writer.messages()
    assert [m["role"] for m in context] == [
        "system",
        "user",
        "assistant",
        "custom",
        "bashExecution",
        "branchSummary",
        "user",
    ]
    assert context[2]["content"] == [{"type": "text", "text": "r1 edited"}]
    assert writer.settings() == (("p", "m"), "off")
    sent = llm_messages(context)
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "user", "user", "user"]
    assert sent[2]["content"] == [{"type": "text", "text": "extension says"}]
    assert sent[3]["content"][0]["text"] == "Ran `ls`\n```\nx\n```\n\nCommand exited with code 2"
    assert sent[4]["content"][0]["text"] == (
        "The following is a summary of a branch that this conversation came back from:"
        "\n\n<summary>\nwent elsewhere</summary>"
    )


def test_a_context_edit_with_null_replacement_omits_its_target():
    branch = [
        msg("u1", None, user("secret")),
        msg("u2", "u1", user("kept")),
        entry("context_edit", "e1", "u2", targetId="u1", replacement=None),
    ]
    assert [m["content"][0]["text"] for m in context_messages(branch)] == ["kept"]


def test_the_latest_compaction_gives_its_checkpoint_summary_and_kept_non_system_entries():
    checkpoint = {"role": "system", "content": "CHECKPOINT", "timestamp": 9}
    branch = [
        msg("s0", None, {"role": "system", "content": "old prompt", "timestamp": 0}),
        msg("u1", "s0", user("dropped")),
        msg("u2", "u1", user("kept")),
        msg("s2", "u2", {"role": "system", "content": "mid", "timestamp": 0}),
        msg("a2", "s2", {"role": "assistant", "content": [{"type": "text", "text": "kept too"}]}),
        entry(
            "compaction",
            "k1",
            "a2",
            summary="S",
            firstKeptEntryId="u2",
            tokensBefore=5,
            systemMessage=checkpoint,
        ),
        msg("u3", "k1", user("after")),
    ]
    context = context_messages(branch)
    assert [m["role"] for m in context] == [
        "system",
        "compactionSummary",
        "user",
        "assistant",
        "user",
    ]
    assert context[0]["content"] == "CHECKPOINT" and context[1]["summary"] == "S"
    assert context[1]["timestamp"] == 1796119200000  # the entry's ISO time, in ms
    sent = llm_messages(context)
    assert sent[0]["content"][0]["text"] == (
        "The conversation history before this point was compacted into the following "
        "summary:\n\n<summary>\nS\n</summary>"
    )


def test_a_retain_none_compaction_keeps_nothing_before_it():
    branch = [
        msg("u1", None, user("gone")),
        entry("compaction", "k1", "u1", summary="S", firstKeptEntryId="k1", tokensBefore=1),
    ]
    assert [m["role"] for m in context_messages(branch)] == ["compactionSummary"]


def test_the_context_follows_parent_ids_from_the_leaf_not_file_order(tmp_path):
    path = write_file(
        tmp_path / "s.jsonl",
        [
            msg("u1", None, user("root")),
            msg("x1", "u1", user("abandoned branch")),
            msg("y1", "u1", user("current branch")),
        ],
    )
    writer = SessionWriter.resume(path)
    writer.close()
    assert [m["content"][0]["text"] for m in writer.messages()] == ["root", "current branch"]
    assert [m["content"][0]["text"] for m in writer.messages("x1")] == [
        "root",
        "abandoned branch",
    ]


def test_an_unknown_entry_type_stays_on_disk_and_later_appends_keep_it(tmp_path):
    path = write_file(
        tmp_path / "s.jsonl",
        [msg("u1", None, user("a")), entry("from_the_future", "f1", "u1", payload={"x": 1})],
    )
    writer = SessionWriter.resume(path)
    writer.append_message(user("b"))
    writer.close()
    records = lines(path)
    assert records[2]["type"] == "from_the_future" and records[3]["parentId"] == "f1"
    assert [m["content"][0]["text"] for m in writer.messages()] == ["a", "b"]


def test_bash_execution_text_matches_pi_for_cancelled_and_empty_output():
    assert bash_execution_text({"command": "x", "output": "", "cancelled": True}) == (
        "Ran `x`\n(no output)\n\n(command cancelled)"
    )
    assert (
        llm_messages(
            [{"role": "bashExecution", "command": "x", "output": "o", "excludeFromContext": True}]
        )
        == []
    )


# --- robustness ----------------------------------------------------------------------------


def test_appends_are_not_fsynced_until_a_turn_boundary(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(session_file.os, "fsync", lambda fd: synced.append(fd))
    writer = SessionWriter.create(tmp_path, tmp_path)
    for n in range(5):
        writer.append_message(user(str(n)))
    assert synced == []
    writer.sync()
    writer.sync()  # nothing new: no second fsync
    assert len(synced) == 1
    writer.append_message(user("x"))
    writer.close()  # close syncs what is left
    assert len(synced) == 2


def test_each_entry_is_one_write_of_one_complete_line(tmp_path, monkeypatch):
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    writer = SessionWriter.create(tmp_path, tmp_path)
    monkeypatch.setattr(session_file.os, "write", recording_write)
    writer.append_message(user("x" * 100_000))
    writer.append_label(writer.last_id, "l")
    writer.close()
    assert len(writes) == 2 and all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in writes)


def test_a_second_writer_on_the_same_file_is_refused_naming_the_file_and_holder(tmp_path):
    writer = SessionWriter.create(tmp_path, tmp_path)
    with pytest.raises(SessionLockedError) as refused:
        SessionWriter.resume(writer.path)
    assert str(writer.path) in str(refused.value) and "this process" in str(refused.value)
    writer.close()  # the lock goes with the writer
    SessionWriter.resume(writer.path).close()


def test_a_torn_last_line_of_a_pi_file_is_dropped_and_the_session_continues(tmp_path):
    path = write_file(tmp_path / "s.jsonl", [msg("u1", None, user("a"))])
    with open(path, "a") as handle:
        handle.write('{"type":"message","id":"u2","parentId":"u1","mess')
    writer = SessionWriter.resume(path)
    writer.append_message(user("b"))
    writer.close()
    assert [r.get("id") for r in lines(path)][1] == "u1" and len(lines(path)) == 3


def test_a_damaged_line_in_the_middle_is_one_error_naming_file_and_line(tmp_path):
    path = write_file(
        tmp_path / "s.jsonl", [msg("u1", None, user("a")), msg("u2", "u1", user("b"))]
    )
    text = path.read_text().splitlines()
    text[1] = text[1][:30]
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(SessionFileError, match=rf"^{path}:2: not valid JSON"):
        SessionWriter.resume(path)


def test_a_malformed_context_edit_or_compaction_checkpoint_is_refused_with_its_line(tmp_path):
    path = write_file(
        tmp_path / "s.jsonl",
        [
            msg("u1", None, user("a")),
            entry("context_edit", "e1", "u1", targetId="u1", replacement=5),
        ],
    )
    with pytest.raises(SessionFileError, match=r":3: replacement: expected an object or null"):
        load_session(path)
    path = write_file(
        tmp_path / "t.jsonl",
        [
            entry(
                "compaction",
                "k1",
                None,
                summary="S",
                firstKeptEntryId="k1",
                tokensBefore=1,
                systemMessage={"role": "user", "content": "x"},
            )
        ],
    )
    with pytest.raises(SessionFileError, match=r":2: systemMessage.role"):
        load_session(path)


def test_session_ids_are_uuid_v7_and_time_ordered():
    first, second = new_session_id(), new_session_id()
    assert uuid.UUID(first).version == 7 and uuid.UUID(first).variant == uuid.RFC_4122
    assert first[:8] <= second[:8]


def test_a_pending_resume_locks_at_once_and_reports_damage_when_its_result_is_taken(tmp_path):
    path = write_file(tmp_path / "s.jsonl", [msg("u1", None, user("a"))])
    pending = session_file.PendingResume(path)
    assert pending.header_id is not None
    with pytest.raises(SessionLockedError):
        SessionWriter.resume(path)  # locked whether or not the thread has read it yet
    writer = pending.result()
    assert [m["content"][0]["text"] for m in writer.messages()] == ["a"]
    pending.close()
    SessionWriter.resume(path).close()  # the lock went with it

    damaged = write_file(tmp_path / "d.jsonl", [msg("u1", None, user("a"))])
    with damaged.open("a") as handle:
        handle.write("oops\n{}\n")
    pending = session_file.PendingResume(damaged)
    with pytest.raises(SessionFileError, match=rf"^{damaged}:3: not valid JSON"):
        pending.result()
    pending.close()
    os.close(session_file._open_locked(damaged))  # a failed load released its lock too


def test_a_tool_call_left_without_result_gets_pi_s_error_result_and_failed_turns_are_not_replayed():
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {}}
    answered = {"type": "toolCall", "id": "c2", "name": "read", "arguments": {}}
    sent = llm_messages(
        [
            user("go"),
            {"role": "assistant", "content": [call, answered], "stopReason": "toolUse"},
            {
                "role": "toolResult",
                "toolCallId": "c2",
                "toolName": "read",
                "content": [],
                "isError": False,
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "x"}],
                "stopReason": "aborted",
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "y"}],
                "stopReason": "error",
            },
            user("again"),
        ]
    )
    assert [(m["role"], m.get("toolCallId")) for m in sent] == [
        ("user", None),
        ("assistant", None),
        ("toolResult", "c2"),
        ("toolResult", "c1"),
        ("user", None),
    ]
    assert sent[3]["content"] == [{"type": "text", "text": "No result provided"}]
    assert sent[3]["isError"] is True


def test_appending_to_a_long_resumed_session_reads_nothing_back(tmp_path, monkeypatch):
    records = [msg("m0", None, user("0"))]
    records += [msg(f"m{n}", f"m{n - 1}", user(str(n))) for n in range(1, 3000)]
    path = write_file(tmp_path / "s.jsonl", records)
    writer = SessionWriter.resume(path)

    def no_reading(*args, **kwargs):
        raise AssertionError("an append read the file back")

    monkeypatch.setattr(session_file.os, "pread", no_reading)
    monkeypatch.setattr(session_file.os, "read", no_reading)
    monkeypatch.setattr(session_file.Path, "read_bytes", no_reading)
    for n in range(10):
        writer.append_message(user(f"new {n}"))
    writer.close()
    assert len(lines(path)) == 1 + 3000 + 10


def test_a_complete_last_line_that_does_not_parse_is_an_error_and_is_kept(tmp_path):
    """Red-team finding: a newline-terminated last line that is not JSON (or not UTF-8)
    was cut off the file on resume. Only a line without its newline can be torn; a
    complete one is damage: one error naming file and line, and nothing is removed."""
    path = write_file(tmp_path / "s.jsonl", [msg("u1", None, user("a"))])
    with open(path, "ab") as handle:
        handle.write(b'{"type":"message","id":"u2", "IMPORTANT ANSWER \xff"\n')
    before = path.read_bytes()
    with pytest.raises(SessionFileError, match=r"s\.jsonl:3: "):
        SessionWriter.resume(path)
    assert path.read_bytes() == before
    # Control: the same text without its newline is a torn write, dropped on resume.
    path.write_bytes(before[:-1])
    writer = SessionWriter.resume(path)
    writer.append_message(user("b"))
    writer.close()
    reread = SessionWriter.resume(path)
    reread.close()
    assert [m["content"][0]["text"] for m in reread.messages()] == ["a", "b"]
