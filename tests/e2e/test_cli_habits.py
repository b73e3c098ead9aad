"""pi's command-line habits with the real ``pi`` CLI (issue 17 §5, pi docs cli.md):
piped stdin prepended, ``@file`` attachments, several messages in turn, option typos,
pi's subcommands we lack, ``--help``, ``--verbose``, tool selection options."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pi_runs import json_events, pi_env

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def pi(
    tmp_path: Path,
    ws: Path,
    turns: list,
    *args: str,
    stdin: str | None = None,
    command: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(turns))
    return subprocess.run(
        [
            *(sys.executable, "-m", "pi_sandbox.cli", *command),
            *("--model", "scripted", "--script", str(script), "-C", str(ws), "--no-session"),
            *args,
        ],
        env=pi_env(tmp_path),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def user_messages(stdout: str) -> list[dict]:
    return [
        e["message"]
        for e in json_events(stdout)
        if e["type"] == "message_end" and e["message"]["role"] == "user"
    ]


def test_piped_stdin_is_prepended_to_the_message_as_pi_does(tmp_path, ws):
    proc = pi(tmp_path, ws, [{"text": "ok"}], "--mode", "json", "Review this", stdin="diff\n")
    assert proc.returncode == 0, proc.stderr
    [user] = user_messages(proc.stdout)
    assert user["content"][0]["text"] == "diff\nReview this"


def test_file_arguments_attach_text_inline_and_images_as_image_content(tmp_path, ws):
    (ws / "notes.txt").write_text("the notes")
    (ws / "shot.png").write_bytes(PNG)
    proc = pi(tmp_path, ws, [{"text": "ok"}], "--mode", "json", "@notes.txt", "@shot.png", "Look")
    assert proc.returncode == 0, proc.stderr
    [user] = user_messages(proc.stdout)
    texts = "".join(b.get("text", "") for b in user["content"] if b["type"] == "text")
    assert f'<file name="{ws / "notes.txt"}">\nthe notes\n</file>\n' in texts
    assert texts.endswith("Look")
    images = [b for b in user["content"] if b["type"] == "image"]
    assert images == [
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    ]


def test_a_missing_file_argument_exits_2_naming_it_before_any_model_call(tmp_path, ws):
    proc = pi(tmp_path, ws, [{"text": "never"}], "-p", "@missing.md", "hi")
    assert proc.returncode == 2
    assert "argument @missing.md: no such file" in proc.stderr
    assert "never" not in proc.stdout


def test_several_messages_are_sent_in_turn_and_print_mode_prints_the_last_answer(tmp_path, ws):
    turns = [{"text": "first answer"}, {"text": "second answer"}]
    proc = pi(tmp_path, ws, turns, "--mode", "json", "one", "two")
    assert proc.returncode == 0, proc.stderr
    assert [m["content"][0]["text"] for m in user_messages(proc.stdout)] == ["one", "two"]
    printed = pi(tmp_path, ws, turns, "-p", "one", "two")
    assert printed.stdout == "second answer\n"


def test_a_mistyped_option_is_refused_with_the_option_it_is_close_to(tmp_path, ws):
    proc = pi(tmp_path, ws, [{"text": "never"}], "-p", "--modle", "x", "hi")
    assert proc.returncode == 2
    assert "unknown option --modle (did you mean --model?)" in proc.stderr
    assert "never" not in proc.stdout
    # Control: an unknown option far from every pi option waits for extensions'
    # flags and is refused once none registered it — it is not sent as a prompt.
    other = pi(tmp_path, ws, [{"text": "never"}], "-p", "--frobnicate", "hi")
    assert other.returncode == 2 and "--frobnicate" in other.stderr


@pytest.mark.parametrize("command", ["install", "remove", "update", "list", "config"])
def test_pi_subcommands_we_lack_exit_2_instead_of_reaching_the_model(tmp_path, ws, command):
    proc = pi(tmp_path, ws, [{"text": "never"}], "npm:foo", command=(command,))
    assert proc.returncode == 2
    assert f"`pi {command}` is not available in pi-sandbox yet" in proc.stderr


def test_an_unknown_first_word_is_still_a_prompt(tmp_path, ws):
    proc = pi(tmp_path, ws, [{"text": "answered"}], "-p", "frobnicate")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "answered\n"


def test_help_lists_the_subcommands(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pi_sandbox.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    for command in ("pi sandbox doctor", "pi policy", "pi trust", "pi resources", "install"):
        assert command in proc.stdout


def test_verbose_shows_text_between_tool_calls_and_whole_tool_results(tmp_path, ws):
    lines = "\n".join(f"line {i}" for i in range(12))
    (ws / "long.txt").write_text(lines)
    turns = [
        {
            "text": "Let me look at the file.",
            "tool_calls": [{"name": "read", "arguments": {"path": "long.txt"}}],
        },
        {"text": "done"},
    ]
    quiet = pi(tmp_path, ws, turns, "-p", "go")
    verbose = pi(tmp_path, ws, turns, "-p", "--verbose", "go")
    assert quiet.returncode == verbose.returncode == 0, verbose.stderr
    assert "line 11" not in quiet.stderr and "Let me look" not in quiet.stderr
    assert "line 11" in verbose.stderr and "Let me look at the file." in verbose.stderr
    assert verbose.stdout == "done\n"


def _ls_turns() -> list:
    return [{"tool_calls": [{"name": "ls", "arguments": {}}]}, {"text": "done"}]


def test_ls_is_off_by_default_and_plus_ls_turns_it_on(tmp_path, ws):
    (ws / "visible.txt").write_text("x")
    default = pi(tmp_path, ws, _ls_turns(), "--mode", "json", "go")
    added = pi(tmp_path, ws, _ls_turns(), "--mode", "json", "--tools", "+ls", "go")
    [off] = [e for e in json_events(default.stdout) if e["type"] == "tool_execution_end"]
    [on] = [e for e in json_events(added.stdout) if e["type"] == "tool_execution_end"]
    assert off["isError"] and "visible.txt" not in off["result"]["content"][0]["text"]
    assert not on["isError"] and "visible.txt" in on["result"]["content"][0]["text"]


def test_exclude_tools_patterns_disable_tools_last(tmp_path, ws):
    turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]}]
    turns.append({"text": "done"})
    proc = pi(tmp_path, ws, turns, "--mode", "json", "-t", "*", "-xt", "b*", "go")
    [end] = [e for e in json_events(proc.stdout) if e["type"] == "tool_execution_end"]
    assert end["isError"]
    assert "hi" not in end["result"]["content"][0]["text"]


def test_mixing_plain_and_signed_tool_entries_is_a_usage_error(tmp_path, ws):
    proc = pi(tmp_path, ws, [{"text": "never"}], "-p", "--tools", "read,+ls", "go")
    assert proc.returncode == 2
    assert "cannot be mixed" in proc.stderr


def test_approve_and_no_approve_are_pi_s_spellings_of_trust_yes_and_no(tmp_path, ws):
    (ws / ".pi" / "prompts").mkdir(parents=True)
    (ws / ".pi" / "prompts" / "hello.md").write_text("EXPANDED PROJECT TEMPLATE\n")

    def first_user_text(*flags: str) -> str:
        proc = pi(tmp_path, ws, [{"text": "ok"}], "--mode", "json", *flags, "/hello")
        assert proc.returncode == 0, proc.stderr
        return user_messages(proc.stdout)[0]["content"][0]["text"]

    assert "EXPANDED PROJECT TEMPLATE" in first_user_text("-a")
    assert "EXPANDED PROJECT TEMPLATE" not in first_user_text("-na")


def test_a_run_in_a_subdirectory_warns_that_the_repositorys_policy_is_not_in_force(tmp_path, ws):
    import subprocess as sp

    sp.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".pi").mkdir()
    (ws / ".pi" / "policy.yaml").write_text("version: 1\n")
    sub = ws / "sub"
    sub.mkdir()
    below = pi(tmp_path, sub, [{"text": "ok"}], "-p", "go")
    assert below.returncode == 0, below.stderr
    assert f"{ws / '.pi' / 'policy.yaml'} is not in force for this run" in below.stderr
    # Control: from the repository's root no such warning.
    at_root = pi(tmp_path, ws, [{"text": "ok"}], "-p", "go")
    assert "is not in force" not in at_root.stderr
