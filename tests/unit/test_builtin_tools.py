"""The built-in tools of the tool worker, run on real files and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from pi_sandbox.worker import builtin_tools
from pi_sandbox.worker.builtin_tools import TOOL_DEFINITIONS, execute_tool


def run(name: str, params: dict, cwd: Path, **kwargs) -> dict:
    kwargs.setdefault("cancel", threading.Event())
    return execute_tool(name, params, cwd=str(cwd), **kwargs)


def text_of(result: dict) -> str:
    [item] = result["content"]
    assert item["type"] == "text"
    return item["text"]


def process_is_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


# --- definitions and dispatch ---------------------------------------------------------


def test_tool_definitions_are_closed_draft_2020_12_schemas_keyed_by_name():
    assert sorted(TOOL_DEFINITIONS) == ["bash", "edit", "find", "grep", "ls", "read", "write"]
    for name, definition in TOOL_DEFINITIONS.items():
        assert {"name", "label", "description", "parameters"} <= set(definition)
        assert set(definition) <= {
            "name",
            "label",
            "description",
            "parameters",
            "prompt_snippet",
            "prompt_guidelines",
        }
        assert definition["name"] == name
        assert definition["description"]
        schema = definition["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["additionalProperties"] is False


def test_tool_schemas_use_pi_parameter_names():
    props = {name: set(d["parameters"]["properties"]) for name, d in TOOL_DEFINITIONS.items()}
    assert props == {
        "read": {"path", "offset", "limit"},
        "write": {"path", "content"},
        "edit": {"path", "edits"},
        "bash": {"command", "timeout"},
        "ls": {"path", "limit"},
        "grep": {"pattern", "path", "glob", "ignoreCase", "literal", "context", "limit"},
        "find": {"pattern", "path", "limit"},
    }
    edit_item = TOOL_DEFINITIONS["edit"]["parameters"]["properties"]["edits"]["items"]
    assert set(edit_item["properties"]) == {"oldText", "newText"}


def test_unknown_tool_name_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="grep"):
        run("nosuchtool", {}, tmp_path)


def test_odd_parameter_values_give_error_results_not_exceptions(tmp_path):
    assert run("read", {}, tmp_path)["is_error"]
    assert run("read", {"path": 3}, tmp_path)["is_error"]
    assert run("read", {"path": "x", "offset": "two"}, tmp_path)["is_error"]
    assert run("read", {"path": "x", "limit": True}, tmp_path)["is_error"]
    assert run("write", {"path": "x"}, tmp_path)["is_error"]
    assert run("bash", {"command": "true", "timeout": -1}, tmp_path)["is_error"]
    assert run("ls", {"limit": 0}, tmp_path)["is_error"]
    assert run("ls", [], tmp_path)["is_error"]


def test_file_tools_do_nothing_once_cancel_is_set(tmp_path):
    cancel = threading.Event()
    cancel.set()
    result = run("write", {"path": "f.txt", "content": "x"}, tmp_path, cancel=cancel)
    assert result["is_error"]
    assert "aborted" in text_of(result)
    assert not (tmp_path / "f.txt").exists()


# --- read -----------------------------------------------------------------------------


def test_read_returns_a_small_file_whole_with_line_counts(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    result = run("read", {"path": "a.txt"}, tmp_path)
    assert not result["is_error"]
    assert text_of(result) == "one\ntwo\nthree"
    assert result["details"] == {
        "path": str(tmp_path / "a.txt"),
        "lines": 3,
        "total_lines": 3,
        "truncated": False,
    }


def test_read_counts_a_last_line_without_newline(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo")
    result = run("read", {"path": "a.txt"}, tmp_path)
    assert text_of(result) == "one\ntwo"
    assert result["details"]["total_lines"] == 2


def test_read_expands_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "h.txt").write_text("home\n")
    result = run("read", {"path": "~/h.txt"}, Path("/"))
    assert text_of(result) == "home"
    assert result["details"]["path"] == str(tmp_path / "h.txt")


def test_read_truncates_at_max_lines_with_a_notice_giving_the_next_offset(tmp_path):
    (tmp_path / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 5124)))
    result = run("read", {"path": "big.txt"}, tmp_path)
    text = text_of(result)
    assert text.startswith("line 1\nline 2\n")
    assert "line 2000\n\n" in text
    assert "line 2001" not in text
    assert text.endswith("[Showing lines 1-2000 of 5123. Use offset=2001 to continue.]")
    assert result["details"]["lines"] == 2000
    assert result["details"]["total_lines"] == 5123
    assert result["details"]["truncated"] is True


def test_read_truncates_at_max_bytes_when_that_comes_first(tmp_path):
    (tmp_path / "wide.txt").write_text("".join(f"{i:099d}\n" for i in range(1, 1001)))
    result = run("read", {"path": "wide.txt"}, tmp_path, max_output_bytes=1000)
    text = text_of(result)
    # 10 lines of 99 bytes plus 9 joining newlines is 999 bytes; an 11th would not fit.
    assert text.endswith("[Showing lines 1-10 of 1000 (1000B limit). Use offset=11 to continue.]")
    assert result["details"]["lines"] == 10
    assert result["details"]["truncated"] is True


def test_read_offset_and_limit_select_a_window_and_say_what_remains(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"L{i}\n" for i in range(1, 11)))
    result = run("read", {"path": "a.txt", "offset": 3, "limit": 2}, tmp_path)
    assert text_of(result) == "L3\nL4\n\n[6 more lines in file. Use offset=5 to continue.]"
    assert result["details"]["lines"] == 2
    assert result["details"]["truncated"] is False


def test_read_offset_to_the_last_line_has_no_notice(tmp_path):
    (tmp_path / "a.txt").write_text("L1\nL2\nL3\n")
    assert text_of(run("read", {"path": "a.txt", "offset": 3}, tmp_path)) == "L3"


def test_read_offset_beyond_end_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "a.txt").write_text("L1\nL2\n")
    result = run("read", {"path": "a.txt", "offset": 3}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == (
        f"Offset 3 is beyond end of file {tmp_path / 'a.txt'} (2 lines total)"
    )


def test_read_of_an_empty_file_says_so(tmp_path):
    (tmp_path / "e.txt").write_text("")
    result = run("read", {"path": "e.txt"}, tmp_path)
    assert not result["is_error"]
    assert text_of(result) == "(empty file)"
    assert result["details"]["total_lines"] == 0


def test_read_of_a_binary_file_is_an_error_giving_its_size(tmp_path):
    (tmp_path / "b.bin").write_bytes(b"\x89PNG\r\n\x00\x00" + bytes(range(256)) * 4)
    result = run("read", {"path": "b.bin"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"Cannot read {tmp_path / 'b.bin'}: binary file (1032 bytes)"


def test_read_of_a_directory_is_an_error_suggesting_ls(tmp_path):
    result = run("read", {"path": "."}, tmp_path)
    assert result["is_error"]
    assert str(tmp_path) in text_of(result)
    assert "ls" in text_of(result)


def test_read_of_a_fifo_is_an_error_instead_of_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    result = run("read", {"path": "pipe"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"{tmp_path / 'pipe'} is not a regular file"


def test_read_of_a_missing_file_is_an_error_naming_the_path(tmp_path):
    result = run("read", {"path": "nope.txt"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"File not found: {tmp_path / 'nope.txt'}"


def test_read_shows_crlf_files_with_plain_newlines_and_drops_the_bom(tmp_path):
    (tmp_path / "w.txt").write_bytes(b"\xef\xbb\xbfalpha\r\nbeta\r\n")
    assert text_of(run("read", {"path": "w.txt"}, tmp_path)) == "alpha\nbeta"


def test_read_cuts_a_single_line_over_the_byte_cap_at_a_character_boundary(tmp_path):
    (tmp_path / "min.js").write_text("é" * 1000 + "\nnext\n")
    result = run("read", {"path": "min.js"}, tmp_path, max_output_bytes=101)
    head, notice = text_of(result).split("\n\n", 1)
    assert head == "é" * 50
    assert notice.startswith("[Line 1 is 2000 bytes; showing its first 101 bytes")
    assert "offset=2" in notice
    assert result["details"]["truncated"] is True
    assert result["details"]["total_lines"] == 2


# --- write ----------------------------------------------------------------------------


def test_write_creates_parent_directories_and_reports_bytes(tmp_path):
    result = run("write", {"path": "a/b/c.txt", "content": "héllo\n"}, tmp_path)
    target = tmp_path / "a" / "b" / "c.txt"
    assert not result["is_error"]
    assert text_of(result) == f"Wrote 7 bytes to {target}"
    assert target.read_bytes() == "héllo\n".encode()
    assert result["details"] == {"path": str(target), "bytes": 7, "created": True}


def test_write_overwrites_an_existing_file(tmp_path):
    (tmp_path / "f.txt").write_text("old content that is longer")
    result = run("write", {"path": "f.txt", "content": "new"}, tmp_path)
    assert (tmp_path / "f.txt").read_text() == "new"
    assert result["details"]["created"] is False


def test_write_under_a_regular_file_is_an_error_quoting_the_os_error(tmp_path):
    (tmp_path / "file").write_text("x")
    result = run("write", {"path": "file/child.txt", "content": "y"}, tmp_path)
    assert result["is_error"]
    assert str(tmp_path / "file") in text_of(result)
    assert "[EEXIST]" in text_of(result) or "[ENOTDIR]" in text_of(result)


def test_write_to_a_directory_is_an_error(tmp_path):
    (tmp_path / "d").mkdir()
    result = run("write", {"path": "d", "content": "y"}, tmp_path)
    assert result["is_error"]
    assert "is a directory" in text_of(result)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_write_without_permission_is_an_error_quoting_the_os_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = run("write", {"path": "locked/f.txt", "content": "y"}, tmp_path)
    assert result["is_error"]
    assert "Permission denied [EACCES]" in text_of(result)


# --- edit -----------------------------------------------------------------------------


def test_edit_replaces_the_unique_text_and_reports_a_diff(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    return 1\n\nprint(f())\n")
    result = run("edit", {"path": "m.py", "oldText": "return 1", "newText": "return 2"}, tmp_path)
    assert not result["is_error"]
    assert text_of(result) == "Successfully replaced 1 block(s) in m.py."
    assert (tmp_path / "m.py").read_text() == "def f():\n    return 2\n\nprint(f())\n"
    assert result["details"]["first_changed_line"] == 2
    assert "-    return 1\n+    return 2" in result["details"]["diff"]
    assert "@@ -1,4 +1,4 @@" in result["details"]["diff"]


def test_edit_diff_hunk_headers_give_file_line_numbers(tmp_path):
    (tmp_path / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    result = run(
        "edit", {"path": "long.txt", "oldText": "line 50\n", "newText": "LINE 50\n"}, tmp_path
    )
    assert result["details"]["first_changed_line"] == 50
    assert "@@ -47,7 +47,7 @@" in result["details"]["diff"]


def test_edit_first_changed_line_skips_lines_that_new_text_keeps(tmp_path):
    (tmp_path / "f.txt").write_text("a\nb\nc\n")
    result = run("edit", {"path": "f.txt", "oldText": "a\nb", "newText": "a\nb\nB"}, tmp_path)
    assert (tmp_path / "f.txt").read_text() == "a\nb\nB\nc\n"
    assert result["details"]["first_changed_line"] == 3


def test_edit_matches_lf_old_text_in_a_crlf_file_and_keeps_crlf(tmp_path):
    (tmp_path / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = run(
        "edit", {"path": "w.txt", "oldText": "two\nthree", "newText": "2\n3\n3.5"}, tmp_path
    )
    assert not result["is_error"], text_of(result)
    assert (tmp_path / "w.txt").read_bytes() == b"one\r\n2\r\n3\r\n3.5\r\n"
    assert "\r" not in result["details"]["diff"]


def test_edit_leaves_other_lines_of_a_mixed_line_ending_file_alone(tmp_path):
    (tmp_path / "mix.txt").write_bytes(b"lf\ncrlf\r\nlast\n")
    run("edit", {"path": "mix.txt", "oldText": "crlf\n", "newText": "x\ny\n"}, tmp_path)
    assert (tmp_path / "mix.txt").read_bytes() == b"lf\nx\r\ny\r\nlast\n"


def test_edit_keeps_a_utf8_bom(tmp_path):
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfname = 1\n")
    run("edit", {"path": "b.txt", "oldText": "name = 1", "newText": "name = 2"}, tmp_path)
    assert (tmp_path / "b.txt").read_bytes() == b"\xef\xbb\xbfname = 2\n"


def test_edit_that_cannot_find_the_text_is_an_error_and_leaves_the_file(tmp_path):
    (tmp_path / "f.txt").write_text("alpha\nbeta\n")
    result = run("edit", {"path": "f.txt", "oldText": "gamma", "newText": "x"}, tmp_path)
    assert result["is_error"]
    assert text_of(result).startswith(f"Could not find the exact text in {tmp_path / 'f.txt'}.")
    assert (tmp_path / "f.txt").read_text() == "alpha\nbeta\n"


def test_edit_of_ambiguous_text_is_an_error_naming_the_count(tmp_path):
    (tmp_path / "f.txt").write_text("x = 1\ny = 1\nz = 1\n")
    result = run("edit", {"path": "f.txt", "oldText": "= 1", "newText": "= 2"}, tmp_path)
    assert result["is_error"]
    assert "Found 3 occurrences" in text_of(result)
    assert "Please provide more context to make it unique." in text_of(result)
    assert (tmp_path / "f.txt").read_text() == "x = 1\ny = 1\nz = 1\n"


def test_edit_with_empty_old_text_is_an_error(tmp_path):
    (tmp_path / "f.txt").write_text("abc")
    result = run("edit", {"path": "f.txt", "oldText": "", "newText": "x"}, tmp_path)
    assert result["is_error"]
    assert "oldText must not be empty" in text_of(result)


def test_edit_that_changes_nothing_is_an_error(tmp_path):
    (tmp_path / "f.txt").write_text("abc")
    result = run("edit", {"path": "f.txt", "oldText": "b", "newText": "b"}, tmp_path)
    assert result["is_error"]
    assert "No changes made" in text_of(result)


def test_edit_of_a_missing_file_is_an_error_naming_the_path(tmp_path):
    result = run("edit", {"path": "gone.txt", "oldText": "a", "newText": "b"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"File not found: {tmp_path / 'gone.txt'}"


def test_edit_of_a_non_utf8_file_is_an_error_and_leaves_the_file(tmp_path):
    (tmp_path / "l1.txt").write_bytes(b"caf\xe9\n")
    result = run("edit", {"path": "l1.txt", "oldText": "caf", "newText": "x"}, tmp_path)
    assert result["is_error"]
    assert "not valid UTF-8" in text_of(result)
    assert (tmp_path / "l1.txt").read_bytes() == b"caf\xe9\n"


def test_edit_that_fails_mid_write_puts_the_original_bytes_back(tmp_path):
    original = "keep\n" * 10 + "MARK\n"
    (tmp_path / "f.txt").write_text(original)
    # RLIMIT_FSIZE (which the sandbox sets) makes the grown file fail with EFBIG after a
    # partial write; a child process keeps the limit away from pytest itself.
    script = (
        "import json, resource, sys, threading\n"
        "from pi_sandbox.worker.builtin_tools import execute_tool\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "params = {'path': 'f.txt', 'oldText': 'MARK', 'newText': 'z' * 5000}\n"
        "r = execute_tool('edit', params, cwd=sys.argv[1], cancel=threading.Event())\n"
        "print(json.dumps(r))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True
    )
    result = json.loads(proc.stdout)
    assert result["is_error"]
    assert "[EFBIG]" in text_of(result)
    assert (tmp_path / "f.txt").read_text() == original


# --- bash -----------------------------------------------------------------------------


def test_bash_returns_the_output_of_a_successful_command(tmp_path):
    result = run("bash", {"command": "echo hello; pwd"}, tmp_path)
    assert not result["is_error"]
    assert text_of(result) == f"hello\n{tmp_path}"
    assert result["details"] == {
        "exit_code": 0,
        "timed_out": False,
        "aborted": False,
        "truncated": False,
    }


def test_bash_merges_stderr_into_the_output_in_order(tmp_path):
    result = run("bash", {"command": "echo out; echo err >&2; echo out2"}, tmp_path)
    assert text_of(result) == "out\nerr\nout2"


def test_bash_non_zero_exit_is_an_error_giving_the_code(tmp_path):
    result = run("bash", {"command": "echo partial; exit 3"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == "partial\n\nCommand exited with code 3"
    assert result["details"]["exit_code"] == 3


def test_bash_gives_the_command_an_empty_stdin(tmp_path):
    result = run("bash", {"command": "cat; echo done"}, tmp_path)
    assert text_of(result) == "done"


def test_bash_with_no_output_says_so(tmp_path):
    assert text_of(run("bash", {"command": "true"}, tmp_path)) == "(no output)"


def test_bash_streams_output_chunks_to_on_update(tmp_path):
    updates: list[dict] = []
    result = run("bash", {"command": "echo a; echo b"}, tmp_path, on_update=updates.append)
    assert "".join(u["text"] for u in updates) == "a\nb\n"
    assert all(set(u) == {"text"} for u in updates)
    assert text_of(result) == "a\nb"


# A bash timeout long enough for bash to start and print the background pid even on a
# saturated machine (issue 13 §7: 0.5 s was not always enough); the test waits it out.
PRINTED_PID_TIMEOUT_S = 5


def test_bash_timeout_kills_the_whole_process_group(tmp_path):
    result = run(
        "bash",
        {"command": "sleep 300 & echo $!; sleep 300", "timeout": PRINTED_PID_TIMEOUT_S},
        tmp_path,
    )
    text = text_of(result)
    background_pid = int(text.split()[0])
    try:
        assert result["is_error"]
        assert text.endswith(f"Command timed out after {PRINTED_PID_TIMEOUT_S} seconds")
        assert result["details"]["timed_out"] is True
        assert result["details"]["exit_code"] is None
        assert process_is_gone(background_pid)
    finally:
        kill_quietly(background_pid)


def test_bash_timeout_sigkills_children_that_ignore_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(builtin_tools, "_KILL_GRACE_S", 0.2)
    # An ignored signal stays ignored across fork and exec, so every sleep ignores TERM.
    command = "trap '' TERM; sleep 300 & echo $!; sleep 300"
    result = run("bash", {"command": command, "timeout": PRINTED_PID_TIMEOUT_S}, tmp_path)
    background_pid = int(text_of(result).split()[0])
    try:
        assert result["details"]["timed_out"] is True
        assert process_is_gone(background_pid)
    finally:
        kill_quietly(background_pid)


def test_bash_cancel_from_another_thread_kills_the_process_group(tmp_path):
    cancel = threading.Event()
    pid_printed = threading.Event()
    seen: list[str] = []

    def on_update(update: dict) -> None:
        seen.append(update["text"])
        if "\n" in "".join(seen):
            pid_printed.set()

    def cancel_once_running() -> None:
        pid_printed.wait(timeout=120)  # generous: it ends when bash printed the pid
        cancel.set()

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    result = run(
        "bash",
        {"command": "sleep 300 & echo $!; sleep 300", "timeout": 600},
        tmp_path,
        cancel=cancel,
        on_update=on_update,
    )
    canceller.join()
    background_pid = int(text_of(result).split()[0])
    try:
        assert result["is_error"]
        assert text_of(result).endswith("Command aborted")
        assert result["details"]["aborted"] is True
        assert process_is_gone(background_pid)
    finally:
        kill_quietly(background_pid)


def test_bash_does_not_start_once_cancel_is_set(tmp_path):
    cancel = threading.Event()
    cancel.set()
    result = run("bash", {"command": "touch ran"}, tmp_path, cancel=cancel)
    assert result["is_error"]
    assert text_of(result) == "Command aborted"
    assert not (tmp_path / "ran").exists()


def test_bash_kills_the_process_group_when_on_update_raises(tmp_path):
    pids: list[int] = []

    def on_update(update: dict) -> None:
        pids.append(int(update["text"].split()[0]))
        raise RuntimeError("supervisor went away")

    with pytest.raises(RuntimeError, match="supervisor went away"):
        run("bash", {"command": "sleep 30 & echo $!; sleep 30"}, tmp_path, on_update=on_update)
    try:
        assert process_is_gone(pids[0])
    finally:
        kill_quietly(pids[0])


def test_bash_returns_when_a_background_child_keeps_the_output_open(tmp_path):
    # 300 s: the child must outlive the call however slowly a busy machine runs it.
    result = run("bash", {"command": "sleep 300 & echo $!"}, tmp_path)
    background_pid = int(text_of(result).split()[0])
    try:
        assert not result["is_error"]
        assert result["details"]["exit_code"] == 0
        assert "their later output was not captured" in text_of(result)
        # A normal exit kills nothing: only timeout and abort end the process group.
        assert not process_is_gone(background_pid)
    finally:
        kill_quietly(background_pid)


def test_bash_keeps_the_tail_of_long_output_with_a_notice(tmp_path):
    result = run("bash", {"command": "seq 1 5000"}, tmp_path)
    output, notice = text_of(result).rsplit("\n\n", 1)
    assert output.splitlines()[0] == "3001"
    assert output.splitlines()[-1] == "5000"
    assert notice == "[Output truncated: showing last 2000 lines of 5000]"
    assert result["details"]["truncated"] is True
    assert not result["is_error"]


def test_bash_tail_is_cut_by_bytes_when_that_comes_first(tmp_path):
    command = "for i in $(seq 1 100); do printf '%099d\\n' $i; done; exit 1"
    result = run("bash", {"command": command}, tmp_path, max_output_bytes=1000)
    output, notice, status = text_of(result).split("\n\n")
    assert output.splitlines() == [f"{i:099d}" for i in range(91, 101)]
    assert notice == "[Output truncated: showing last 10 lines of 100 (1000-byte limit)]"
    assert status == "Command exited with code 1"


def test_bash_output_memory_stays_bounded_for_huge_output(tmp_path):
    result = run(
        "bash", {"command": "yes abcdefghij | head -n 300000"}, tmp_path, max_output_bytes=5000
    )
    output, notice = text_of(result).rsplit("\n\n", 1)
    assert len(output.encode()) <= 5000
    assert notice == "[Output truncated: showing last 454 lines of 300000 (5000-byte limit)]"


def test_bash_in_a_missing_directory_is_an_error_naming_it(tmp_path):
    result = run("bash", {"command": "true"}, tmp_path / "missing")
    assert result["is_error"]
    assert str(tmp_path / "missing") in text_of(result)


# --- ls -------------------------------------------------------------------------------


def test_ls_sorts_entries_marks_directories_and_includes_dotfiles(tmp_path):
    (tmp_path / "b.txt").write_text("")
    (tmp_path / "A.txt").write_text("")
    (tmp_path / ".hidden").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "sub")
    result = run("ls", {}, tmp_path)
    assert text_of(result) == ".hidden\nA.txt\nb.txt\nlink/\nsub/"
    assert result["details"] == {
        "path": str(tmp_path),
        "entries": 5,
        "total_entries": 5,
        "truncated": False,
    }


def test_ls_past_the_limit_says_how_to_see_more(tmp_path):
    for i in range(7):
        (tmp_path / f"f{i}").write_text("")
    result = run("ls", {"path": str(tmp_path), "limit": 3}, tmp_path)
    assert text_of(result) == ("f0\nf1\nf2\n\n[3 entries limit reached. Use limit=6 for more]")
    assert result["details"]["truncated"] is True


def test_ls_of_an_empty_directory_says_so(tmp_path):
    assert text_of(run("ls", {"path": "."}, tmp_path)) == "(empty directory)"


def test_ls_of_a_missing_path_is_an_error_naming_it(tmp_path):
    result = run("ls", {"path": "nope"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"Path not found: {tmp_path / 'nope'}"


def test_ls_of_a_file_is_an_error(tmp_path):
    (tmp_path / "f").write_text("")
    result = run("ls", {"path": "f"}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == f"Not a directory: {tmp_path / 'f'}"


# --- import weight --------------------------------------------------------------------


def test_importing_and_running_the_tools_pulls_in_only_the_standard_library(tmp_path):
    # Baseline first: site start-up may load non-stdlib helpers (editable-install finders).
    script = (
        "import sys, threading\n"
        "before = set(sys.modules)\n"
        "from pi_sandbox.worker.builtin_tools import execute_tool\n"
        "cancel = threading.Event()\n"
        "execute_tool('write', {'path': 'f', 'content': 'a\\n'}, cwd=sys.argv[1], cancel=cancel)\n"
        "execute_tool('edit', {'path': 'f', 'oldText': 'a', 'newText': 'b'},"
        " cwd=sys.argv[1], cancel=cancel)\n"
        "execute_tool('bash', {'command': 'true'}, cwd=sys.argv[1], cancel=cancel)\n"
        "new = set(sys.modules) - before\n"
        "print('\\n'.join(sorted(new)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = proc.stdout.split()
    assert "pi_sandbox.worker.builtin_tools" in loaded
    foreign = [
        name
        for name in loaded
        if name.partition(".")[0] not in sys.stdlib_module_names
        and name != "pi_sandbox"
        and not name.startswith("pi_sandbox.")
    ]
    assert foreign == []
