"""The session tree helpers and the session catalog, on real files (issue 15)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.sessions.catalog import (
    SessionLookupError,
    fork_session_file,
    list_sessions,
    most_recent_session,
    resolve_session,
    summarise,
)
from pi_sandbox.supervisor.sessions.session_file import SessionWriter, session_dir_for
from pi_sandbox.supervisor.sessions.startup import choose_session
from pi_sandbox.supervisor.sessions.tree import (
    branch_path_records,
    branch_summary_settings,
    collect_for_branch_summary,
    entries_since,
    labels_of,
    navigate,
    target_leaf,
    tree_json,
)


def _entry(entry_id: str, parent: str | None, stamp: int, **extra: object) -> dict[str, object]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": f"2026-01-01T00:00:{stamp:02d}.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": entry_id}]},
        **extra,
    }


def test_tree_json_has_pis_shape_with_labels_and_children_by_time():
    entries = [
        _entry("a", None, 1),
        _entry("c", "a", 3),
        _entry("b", "a", 2),
        _entry("orphan", "missing", 4),
        {
            "type": "label",
            "id": "l1",
            "parentId": "c",
            "timestamp": "t",
            "targetId": "b",
            "label": "x",
        },
    ]
    data = json.loads(tree_json(entries, "c"))
    assert data["leafId"] == "c"
    roots = data["tree"]
    assert [r["entry"]["id"] for r in roots] == ["a", "orphan"]
    kids = roots[0]["children"]
    assert [k["entry"]["id"] for k in kids] == ["b", "c"]
    assert kids[0]["label"] == "x" and kids[0]["labelTimestamp"] == "t"
    assert "label" not in kids[1]


def test_tree_json_serialises_a_branch_deeper_than_json_dumps_goes():
    entries = [_entry(f"e{i}", f"e{i - 1}" if i else None, i % 60) for i in range(20_000)]
    text = tree_json(entries, "e19999")
    assert text.count('"entry": ') == 20_000
    assert text.endswith('"leafId": "e19999"}')
    # Balanced: every opened node closed.
    assert text.count("[") == text.count("]") and text.count("{") == text.count("}")


def test_labels_of_takes_the_latest_and_null_clears():
    entries = [
        {"type": "label", "id": "1", "targetId": "a", "label": "one", "timestamp": "t1"},
        {"type": "label", "id": "2", "targetId": "a", "label": "two", "timestamp": "t2"},
        {"type": "label", "id": "3", "targetId": "b", "label": "gone", "timestamp": "t3"},
        {"type": "label", "id": "4", "targetId": "b", "label": None, "timestamp": "t4"},
    ]
    assert labels_of(entries) == {"a": ("two", "t2")}


def test_entries_since_is_strictly_after_and_refuses_an_unknown_cursor():
    entries = [_entry("a", None, 1), _entry("b", "a", 2), _entry("c", "b", 3)]
    assert [e["id"] for e in entries_since(entries, "a")] == ["b", "c"]
    assert entries_since(entries, "c") == []
    with pytest.raises(KeyError):
        entries_since(entries, "zzz")


def test_branch_summary_collects_from_the_old_leaf_to_the_common_ancestor():
    entries = [
        _entry("a", None, 1),
        _entry("b", "a", 2),
        _entry("c", "b", 3),
        _entry("e", "a", 4),
    ]
    by_id = {e["id"]: e for e in entries}
    abandoned, common = collect_for_branch_summary(by_id, "c", "e")
    assert [e["id"] for e in abandoned] == ["b", "c"] and common == "a"
    assert collect_for_branch_summary(by_id, None, "e") == ([], None)


def test_navigating_to_a_user_message_leaves_its_parent_as_leaf_and_returns_its_text():
    assert target_leaf(_entry("b", "a", 1)) == ("a", "b")
    assistant = {"type": "message", "id": "x", "parentId": "b", "message": {"role": "assistant"}}
    assert target_leaf(assistant) == ("x", None)


def test_branch_copy_drops_label_entries_and_rechains_then_appends_current_labels():
    entries = [
        _entry("a", None, 1),
        {
            "type": "label",
            "id": "l",
            "parentId": "a",
            "timestamp": "t",
            "targetId": "a",
            "label": "L",
        },
        _entry("b", "l", 2),
    ]
    records = branch_path_records({e["id"]: e for e in entries}, "b")
    assert [(r["type"], r["parentId"]) for r in records] == [
        ("message", None),
        ("message", "a"),
        ("label", "b"),
    ]
    assert records[-1]["targetId"] == "a" and records[-1]["label"] == "L"


def test_branch_summary_settings_read_the_project_only_when_trusted(tmp_path):
    agent, project = tmp_path / "agent", tmp_path / "proj"
    (project / ".pi").mkdir(parents=True)
    agent.mkdir()
    (agent / "settings.json").write_text(json.dumps({"branchSummary": {"reserveTokens": 100}}))
    (project / ".pi" / "settings.json").write_text(
        json.dumps({"branchSummary": {"skipPrompt": True}})
    )
    assert branch_summary_settings(agent, project, False)["skipPrompt"] is False
    trusted = branch_summary_settings(agent, project, True)
    assert trusted["skipPrompt"] is True and trusted["reserveTokens"] == 100
    (agent / "settings.json").write_text('{"branchSummary": {"skipPrompt": "yes"}}')
    problems = branch_summary_settings(agent, project, False)["problems"]
    assert problems and "branchSummary.skipPrompt" in problems[0]


class _Outcome:
    def __init__(self, result: object = None, errors: list[dict[str, str]] | None = None) -> None:
        self.state = {"result": result}
        self.errors = errors or []


def _writer_with_branch(tmp_path: Path) -> tuple[SessionWriter, dict[str, str]]:
    writer = SessionWriter.create(tmp_path / "agent", tmp_path)
    ids = {}
    for name, role in (("q1", "user"), ("a1", "assistant"), ("q2", "user"), ("a2", "assistant")):
        message = {"role": role, "content": [{"type": "text", "text": name}], "timestamp": 1}
        ids[name] = writer.append_message(message).id
    return writer, ids


def test_navigate_with_an_extension_summary_writes_it_without_asking_the_model(tmp_path):
    writer, ids = _writer_with_branch(tmp_path)
    notified: list[tuple[str, dict[str, object]]] = []

    async def dispatch(kind, payload):
        assert payload["preparation"]["entries_to_summarize"][0]["id"] == ids["q2"]
        return _Outcome({"summary": {"summary": "from the extension", "details": {"k": 1}}})

    async def report(errors, kind):
        pass

    async def notify(kind, payload):
        notified.append((kind, payload))

    async def summarise(transcript, ask):
        raise AssertionError("the model is not asked")

    result = trio.run(
        lambda: navigate(
            writer=writer,
            target_id=ids["a1"],
            summarize=True,
            custom_instructions=None,
            replace_instructions=False,
            label="here",
            dispatch=dispatch,
            report=report,
            notify=notify,
            summarise=summarise,
            max_supplied_chars=1000,
        )
    )
    entry = result["summaryEntry"]
    assert entry["summary"] == "from the extension" and entry["fromHook"] is True
    assert entry["parentId"] == ids["a1"] and entry["fromId"] == ids["a2"]
    assert notified[0][0] == "session_tree"
    assert writer.entries[-1]["type"] == "label" and writer.entries[-1]["targetId"] == entry["id"]
    texts = [m.get("summary") or m["content"][0]["text"] for m in writer.messages()]
    assert texts == ["q1", "a1", "from the extension"]
    writer.close()


def test_navigate_is_cancelled_by_a_handler_and_moves_nothing(tmp_path):
    writer, ids = _writer_with_branch(tmp_path)
    before = (writer.last_id, len(writer.entries))

    async def dispatch(kind, payload):
        return _Outcome({"cancel": True})

    async def noop(*args):
        return None

    result = trio.run(
        lambda: navigate(
            writer=writer,
            target_id=ids["a1"],
            summarize=True,
            custom_instructions=None,
            replace_instructions=False,
            label=None,
            dispatch=dispatch,
            report=noop,
            notify=noop,
            summarise=noop,
            max_supplied_chars=1000,
        )
    )
    assert result == {"cancelled": True}
    assert (writer.last_id, len(writer.entries)) == before
    writer.close()


# --- catalog ------------------------------------------------------------------------------------


def _session(agent: Path, cwd: Path, session_id: str, prompt: str) -> Path:
    writer = SessionWriter.create(agent, cwd, session_id)
    writer.append_message(
        {"role": "user", "content": [{"type": "text", "text": prompt}], "timestamp": 5}
    )
    writer.close()
    assert writer.path is not None
    return writer.path


def test_summarise_streams_a_huge_line_without_decoding_it(tmp_path):
    path = _session(tmp_path / "agent", tmp_path, "big-1", "x" * (6 * 1024 * 1024))
    with path.open("a") as stream:
        stream.write(
            json.dumps({"type": "session_info", "id": "n", "parentId": None, "name": " Big "})
            + "\n"
        )
    row = summarise(path)
    assert row is not None
    assert row.message_count == 1 and row.first_prompt is None and row.name == "Big"


def test_listing_skips_non_sessions_and_orders_newest_first(tmp_path):
    agent = tmp_path / "agent"
    old = _session(agent, tmp_path, "old-1", "old")
    new = _session(agent, tmp_path, "new-1", "new")
    os.utime(old, (1, 1))
    (old.parent / "junk.jsonl").write_text("{not json\n")
    rows = list_sessions(agent, tmp_path)
    assert {r.id for r in rows} == {"old-1", "new-1"}
    assert most_recent_session(agent, tmp_path) == new


def test_an_ambiguous_prefix_lists_the_candidates(tmp_path):
    agent = tmp_path / "agent"
    _session(agent, tmp_path, "dup-a", "first")
    _session(agent, tmp_path, "dup-b", "second")
    with pytest.raises(SessionLookupError) as caught:
        resolve_session("dup", agent_dir=agent, cwd=tmp_path)
    assert "dup-a" in str(caught.value) and "dup-b" in str(caught.value)
    assert resolve_session("dup-a", agent_dir=agent, cwd=tmp_path).kind == "local"


def test_fork_copies_entries_and_names_the_parent(tmp_path):
    agent = tmp_path / "agent"
    source = _session(agent, tmp_path, "src-1", "hello")
    with source.open("ab") as stream:
        stream.write(b'{"type": "message", "id": "torn"')  # a torn last line
    target = tmp_path / "elsewhere"
    copy = fork_session_file(source, target, session_dir_for(agent, target), session_id="new-1")
    lines = [json.loads(line) for line in copy.read_text().splitlines()]
    assert lines[0]["parentSession"] == str(source) and lines[0]["cwd"] == str(target)
    assert [r["type"] for r in lines[1:]] == ["message"]


def test_fork_refuses_a_damaged_source_naming_file_and_line(tmp_path):
    agent = tmp_path / "agent"
    source = _session(agent, tmp_path, "src-2", "hello")
    text = source.read_text().splitlines()
    source.write_text("\n".join([text[0], "{broken", text[1]]) + "\n")
    with pytest.raises(ValueError, match=f"{source}:2"):
        fork_session_file(source, tmp_path, tmp_path / "out")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"fork": "x", "continue_": True}, "--fork: cannot be combined with --continue"),
        ({"session_id": "x", "session": "y"}, "--session-id: cannot be combined with --session"),
        ({"session_id": "-x"}, "not a session id"),
        ({"continue_": True, "resume": True}, "--continue"),
        ({"name": " \n "}, "--name"),
    ],
)
def test_conflicting_or_bad_session_options_are_refused_naming_the_argument(
    tmp_path, flags, message
):
    with pytest.raises(UsageError, match=message):
        choose_session(agent_dir=tmp_path / "agent", cwd=tmp_path, env={}, **flags)
