"""The interactive mode in a real terminal (issue 18): ``pi`` in tmux with the
scripted model, checked on the captured screen (text, not pixels)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from terminal_session import TerminalSession, tmux_available

pytestmark = pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")

FIXTURES = Path(__file__).parent.parent / "fixtures"
FOOTER_READY = "NOT sandboxed"


def _env(root: Path, **extra: str) -> dict[str, str]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(root / "agent"),
        "LANG": "C.UTF-8",
        **extra,
    }
    for name in ("VIRTUAL_ENV", "PYTHONPATH"):  # the same pi_sandbox as the tests
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _script(path: Path, turns: list[dict]) -> Path:
    path.write_text(yaml.safe_dump(turns))
    return path


def _pi(script: Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pi_sandbox.cli",
        "--model",
        "scripted",
        "--script",
        str(script),
        *flags,
    ]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def _ready(term: TerminalSession) -> None:
    # The editor's line starts with ">" (capture-pane drops trailing blanks).
    term.wait_for(
        lambda s: FOOTER_READY in s and any(line.startswith(">") for line in s.splitlines()),
        scrollback=False,
    )


def test_a_prompt_gets_its_answer_streamed_and_rendered_as_markdown(tmp_path, ws):
    script = _script(
        tmp_path / "s.yaml", [{"text": "# Result heading\n\nThe answer is **forty-two**."}]
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("what is the answer?")
        term.send_keys("Enter")
        screen = term.wait_for("The answer is forty-two.")
        assert "› what is the answer?" in screen
        # Markdown: the heading's # and the ** markers are rendered, not shown.
        assert "Result heading" in screen
        assert "# Result heading" not in screen
        assert "**forty-two**" not in screen
        assert "scripted/scripted" in screen
        term.send_keys("C-d")
        assert term.exit_status() == 0


def test_esc_during_a_long_bash_call_kills_its_process_group_and_the_session_goes_on(tmp_path, ws):
    command = (
        "echo progress-marker-1; echo $$ > shell.pid; sleep 300 & echo $! > child.pid; "
        "wait; echo never > never.txt"
    )
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "second answer after the abort"},
        ],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("run the long command")
        term.send_keys("Enter")
        # Live progress (tool_execution_update) while the call runs.
        term.wait_for(
            lambda s: _has_line(ws / "child.pid") and "working" in s and "progress-marker-1" in s,
            scrollback=False,
        )
        pids = [int((ws / name).read_text()) for name in ("shell.pid", "child.pid")]
        term.send_keys("Escape")
        screen = term.wait_for("aborted")
        assert "bash" in screen
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids), "the bash call's processes survived Esc"
        assert not (ws / "never.txt").exists()
        # The session is consistent: the next prompt runs the next turn.
        term.send_text("and now?")
        term.send_keys("Enter")
        term.wait_for("second answer after the abort")
        term.send_keys("C-d")
        assert term.exit_status() == 0
    session_files = list((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    assert len(session_files) == 1
    records = [json.loads(line) for line in session_files[0].read_text().splitlines()]
    roles = [r["message"]["role"] for r in records if r.get("type") == "message"]
    assert roles[0] == "system"  # pi's leading system message: the prompt and tools
    roles = roles[1:]
    # Every tool call got its result (aborted), before the next user message.
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"]
    result = next(
        r["message"]
        for r in records
        if r.get("type") == "message" and r["message"]["role"] == "toolResult"
    )
    assert result["isError"] and result["details"].get("blocked_by") == "abort"


def _has_line(path: Path) -> bool:
    """Whether ``path`` holds a whole line: a file exists before its writer has written."""
    try:
        return path.read_text().endswith("\n")
    except FileNotFoundError:
        return False


def _wait_for_line(path: Path, timeout: float = 60) -> None:
    """Poll until ``path`` holds a whole line (CI once read it between create and write)."""
    deadline = time.monotonic() + timeout
    while not _has_line(path):
        assert time.monotonic() < deadline, f"{path} got no line"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for this purpose
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_extension_confirm_dialog_is_answered_by_keys(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    extension = FIXTURES / "extensions" / "runtime" / "rpc_dialogs.py"
    with TerminalSession(_pi(script, "-e", str(extension)), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("/ask")
        term.send_keys("Enter")
        term.wait_for("Deploy?", scrollback=False)
        term.send_keys("y")
        term.wait_for(lambda s: "Pick" in s and "green" in s, scrollback=False)
        term.send_keys("Down")
        term.send_keys("Enter")
        answers = ws / "answers.jsonl"
        _wait_for_line(answers)
        assert json.loads(answers.read_text().splitlines()[0]) == {
            "confirm": True,
            "select": "green",
        }
        term.send_keys("C-d")
        assert term.exit_status() == 0


def test_esc_dismisses_an_extension_dialog_with_its_default(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    extension = FIXTURES / "extensions" / "runtime" / "rpc_dialogs.py"
    with TerminalSession(_pi(script, "-e", str(extension)), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("/ask")
        term.send_keys("Enter")
        term.wait_for("Deploy?", scrollback=False)
        term.send_keys("Escape")
        term.wait_for("Pick", scrollback=False)
        term.send_keys("Escape")
        answers = ws / "answers.jsonl"
        _wait_for_line(answers)
        assert json.loads(answers.read_text().splitlines()[0]) == {
            "confirm": False,
            "select": None,
        }


def _untrusted_project(ws: Path) -> None:
    skills = ws / ".pi" / "skills" / "probe"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: probe\ndescription: a probe skill\n---\nbody\n")


def test_an_undecided_project_asks_for_trust_at_start_and_can_save_the_answer(tmp_path, ws):
    _untrusted_project(ws)
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        screen = term.wait_for("Trust this project?", scrollback=False)
        assert "SKILL.md" in screen or ".pi" in screen
        term.send_keys("Down")  # "Trust sandboxed"
        term.send_keys("Down")  # "Do not trust"
        term.send_keys("Enter")
        term.wait_for("Remember `no`", scrollback=False)
        term.send_keys("Enter")  # yes, save it
        screen = term.wait_for("trust: no", scrollback=False)
        term.send_keys("C-d")
        assert term.exit_status() == 0
    stores = list((tmp_path / "agent").glob("*trust*.json"))
    assert stores, "the answer was not saved in the trust store"
    assert any(str(ws) in store.read_text() for store in stores)
    # Saved: the next start does not ask again.
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        screen = term.wait_for("trust: no", scrollback=False)
        assert "Trust this project?" not in term.history()


def test_the_trust_answer_for_this_session_only_is_not_saved(tmp_path, ws):
    _untrusted_project(ws)
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        term.wait_for("Trust this project?", scrollback=False)
        term.send_keys("Enter")  # "Trust"
        term.wait_for("Remember `yes`", scrollback=False)
        term.send_keys("Down")
        term.send_keys("Enter")  # only for this session
        term.wait_for("trust: yes", scrollback=False)
        term.send_text("/sk")
        term.send_keys("Tab")
        term.wait_for("/skill:probe", scrollback=False)
    stores = list((tmp_path / "agent").glob("*trust*.json"))
    assert not any(str(ws) in store.read_text() for store in stores)


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _colours(screen: str) -> list[str]:
    """The SGR codes in ``screen`` that set a colour (39/49, back to the default
    colours, do not)."""
    codes = [c for group in _SGR.findall(screen) for c in group.split(";") if c]
    colour = {*range(30, 39), *range(40, 49), *range(90, 98), *range(100, 108)}
    return [c for c in codes if int(c) in colour]


def test_no_color_shows_no_colour_escapes(tmp_path, ws):
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
            {"text": "# Heading\n\n`code` and **bold**"},
        ],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path, NO_COLOR="1")) as term:
        _ready(term)
        term.send_text("go")
        term.send_keys("Enter")
        term.wait_for("Heading", scrollback=False)
        screen = term.screen(escapes=True)
        assert "✓ bash" in screen
        assert not _colours(screen), repr(screen)
        assert "\x1b[1m" in screen  # emphasis stays


def test_control_shows_colour_escapes_without_no_color(tmp_path, ws):
    """Control for the NO_COLOR test: the same run without it is coloured."""
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
            {"text": "# Heading\n\n`code` and **bold**"},
        ],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("go")
        term.send_keys("Enter")
        term.wait_for("Heading", scrollback=False)
        assert _colours(term.screen(escapes=True))


def test_a_40_column_terminal_wraps_the_answer_and_keeps_the_footer(tmp_path, ws):
    words = " ".join(f"word{i}" for i in range(40))
    script = _script(tmp_path / "s.yaml", [{"text": words}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path), width=40, height=24) as term:
        _ready(term)
        term.send_text("go")
        term.send_keys("Enter")
        screen = term.wait_for("word39")
        assert all(len(line) <= 40 for line in screen.splitlines())
        assert "word0" in screen
        term.resize(60, 20)
        term.resize(40, 24)
        term.send_text("/hotkeys")
        term.send_keys("Enter")
        term.wait_for("Alt-Enter")
        # After the resizes the footer is whole again (no stale lines left over).
        screen = term.wait_for(
            lambda s: "NOT sandboxed" in s and "trust: yes" in s, scrollback=False
        )
        assert all(len(line) <= 40 for line in screen.splitlines())


def test_tab_completes_slash_commands(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("/hotk")
        term.send_keys("Tab")
        term.wait_for("> /hotkeys", scrollback=False)
        term.send_keys("Enter")  # accepts the completion
        term.send_keys("Enter")  # runs it
        term.wait_for("Ctrl-D")


def test_bang_runs_a_user_command_and_double_bang_keeps_it_from_the_model(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("!echo visible-$((6*7))")
        term.send_keys("Enter")
        term.wait_for("visible-42")
        term.send_text("!!echo hidden-$((6*7))")
        term.send_keys("Enter")
        screen = term.wait_for("hidden-42")
        assert "not sent to the model" in screen
        term.send_keys("C-d")
        assert term.exit_status() == 0
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    messages = [
        json.loads(line)["message"]
        for line in session.read_text().splitlines()
        if json.loads(line).get("type") == "message"
    ]
    assert [m.get("excludeFromContext") for m in messages] == [None, True]


def test_ctrl_c_twice_quits(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("draft")
        term.send_keys("C-c")
        term.wait_for("Press Ctrl-C again", scrollback=False)
        term.send_keys("C-c")
        assert term.exit_status() == 0


def test_stdout_not_a_terminal_falls_back_to_print_mode_with_a_notice(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "printed answer"}])
    out = tmp_path / "out.txt"
    argv = ["sh", "-c", f'"$@" > {out}', "sh", *_pi(script), "hello"]
    with TerminalSession(argv, cwd=ws, env=_env(tmp_path)) as term:
        assert term.exit_status() == 0
        assert "stdout is not a terminal: running in print mode" in term.history()
    assert out.read_text().strip() == "printed answer"


def test_a_blocked_call_shows_the_rule_and_the_reason(tmp_path, ws):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\ntool_call:\n  rules:\n    - id: no-rm-rf\n      tool: bash\n"
        "      command: [rm, -rf]\n      decision: deny\n"
        "      reason: Recursive deletes are not allowed.\n"
    )
    (ws / "keep").mkdir()
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "rm -rf keep"}}]},
            {"text": "could not delete"},
        ],
    )
    with TerminalSession(_pi(script, "--policy", str(policy)), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("clean up")
        term.send_keys("Enter")
        screen = term.wait_for("could not delete")
        assert "bash BLOCKED" in screen
        assert "no-rm-rf" in screen
        assert "Recursive deletes are not allowed." in screen
    assert (ws / "keep").is_dir()


def test_tree_goes_back_before_an_earlier_message_and_the_session_continues_there(tmp_path, ws):
    script = _script(
        tmp_path / "s.yaml",
        [{"text": "first answer"}, {"text": "second answer"}, {"text": "branched answer"}],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        for prompt, answer in (("one", "first answer"), ("two", "second answer")):
            term.send_text(prompt)
            term.send_keys("Enter")
            term.wait_for(answer)
        term.send_text("/tree")
        term.send_keys("Enter")
        term.wait_for("/tree N goes back")
        term.send_text("/tree 2")
        term.send_keys("Enter")
        term.wait_for("the next prompt starts a new branch")
        # pi puts the message's text back in the editor.
        term.wait_for(lambda s: any(line.startswith("> two") for line in s.splitlines()))
        term.send_keys("C-c")  # clears the editor
        term.send_text("three")
        term.send_keys("Enter")
        term.wait_for("branched answer")
        term.send_keys("C-d")
        assert term.exit_status() == 0
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    records = [json.loads(line) for line in session.read_text().splitlines()]
    by_id = {r["id"]: r for r in records if "id" in r}
    last = records[-1]
    chain = []
    while last is not None:
        if last.get("type") == "message" and last["message"]["role"] != "system":
            chain.append(last["message"])
        last = by_id.get(last.get("parentId"))
    texts = [
        " ".join(b.get("text", "") for b in m["content"] if isinstance(b, dict))
        for m in reversed(chain)
    ]
    # The new branch: one, first answer, three, branched answer (two is off-branch).
    assert texts == ["one", "first answer", "three", "branched answer"]


def test_resume_switches_to_an_earlier_session_of_the_directory(tmp_path, ws):
    first = _script(tmp_path / "a.yaml", [{"text": "answer in the old session"}])
    with TerminalSession(_pi(first), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("remember the marker-77")
        term.send_keys("Enter")
        term.wait_for("answer in the old session")
        term.send_keys("C-d")
        assert term.exit_status() == 0
    second = _script(tmp_path / "b.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(second), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("/resume")
        term.send_keys("Enter")
        term.wait_for("remember the marker-77")
        term.send_text("/resume 1")
        term.send_keys("Enter")
        screen = term.wait_for("resumed ")
        assert "answer in the old session" in term.wait_for("answer in the old session")
        assert "2 messages" in screen or "messages)" in screen


def test_alt_enter_while_the_agent_works_queues_a_follow_up_sent_when_it_is_done(tmp_path, ws):
    wait = "while [ ! -f go ]; do sleep 0.05; done; echo released"
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": wait}}]},
            {"text": "first run done"},
            {"text": "follow-up handled"},
        ],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("start")
        term.send_keys("Enter")
        term.wait_for("working", scrollback=False)
        term.send_text("then summarise")
        term.send_keys("M-Enter")
        term.wait_for("queued as a follow-up")
        (ws / "go").write_text("")
        screen = term.wait_for("follow-up handled")
        assert screen.index("first run done") < screen.index("follow-up handled")
        term.send_keys("C-d")
        assert term.exit_status() == 0
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    users = [
        json.loads(line)["message"]["content"][0]["text"]
        for line in session.read_text().splitlines()
        if json.loads(line).get("type") == "message"
        and json.loads(line)["message"]["role"] == "user"
    ]
    assert users == ["start", "then summarise"]


def test_fork_starts_a_new_session_before_the_chosen_message(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "answer one"}, {"text": "answer two"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        for prompt, answer in (("one", "answer one"), ("two", "answer two")):
            term.send_text(prompt)
            term.send_keys("Enter")
            term.wait_for(answer)
        term.send_text("/fork 2")
        term.send_keys("Enter")
        term.wait_for(lambda s: any(line.startswith("> two") for line in s.splitlines()))
        term.send_keys("C-c")
        term.send_text("/session")
        term.send_keys("Enter")
        term.wait_for("messages: 1 user, 1 assistant")
    assert len(list((tmp_path / "agent" / "sessions").rglob("*.jsonl"))) == 2


def test_tab_completes_at_file_paths_under_the_working_directory(tmp_path, ws):
    (ws / "notes-alpha.txt").write_text("x")
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("look at @notes")
        term.send_keys("Tab")
        term.wait_for("> look at @notes-alpha.txt", scrollback=False)


def test_words_on_the_command_line_are_the_first_prompt_of_the_session(tmp_path, ws):
    script = _script(
        tmp_path / "s.yaml",
        [{"text": "answered the argument"}, {"text": "answered the second"}, {"text": "later"}],
    )
    argv = _pi(script, "explain this", "and that")
    with TerminalSession(argv, cwd=ws, env=_env(tmp_path)) as term:
        screen = term.wait_for("answered the second")
        assert screen.index("› explain this") < screen.index("answered the argument")
        assert screen.index("› and that") < screen.index("answered the second")
        _ready(term)  # still interactive afterwards
        term.send_text("more")
        term.send_keys("Enter")
        term.wait_for("later")


def test_ci_mode_at_a_terminal_stays_non_interactive(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "ci answer"}])
    audit = tmp_path / "audit.jsonl"
    argv = _pi(script, "--ci", "--audit-log", str(audit), "hello")
    with TerminalSession(argv, cwd=ws, env=_env(tmp_path)) as term:
        assert term.exit_status() == 0
        screen = term.history()
    assert "ci answer" in screen
    assert "NOT sandboxed" not in screen and "sandboxed: bwrap" not in screen  # no footer


def test_quitting_at_the_trust_prompt_ends_the_run_without_trusting(tmp_path, ws):
    _untrusted_project(ws)
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        term.wait_for("Trust this project?", scrollback=False)
        term.send_keys("C-c")
        term.send_keys("C-c")
        assert term.exit_status() == 0
    stores = list((tmp_path / "agent").glob("*trust*.json"))
    assert not any(str(ws) in store.read_text() for store in stores)


def test_enter_while_the_agent_works_steers_it(tmp_path, ws):
    wait = "while [ ! -f go ]; do sleep 0.05; done; echo released"
    script = _script(
        tmp_path / "s.yaml",
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": wait}}]},
            {"text": "steered answer"},
        ],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("start")
        term.send_keys("Enter")
        term.wait_for("working", scrollback=False)
        term.send_text("use the other file")
        term.send_keys("Enter")
        term.wait_for("queued as a steering message")
        (ws / "go").write_text("")
        term.wait_for("steered answer")
        term.send_keys("C-d")
        assert term.exit_status() == 0
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    roles_and_text = [
        (m["role"], (m.get("content") or [{}])[0].get("text"))
        for m in (
            json.loads(line)["message"]
            for line in session.read_text().splitlines()
            if json.loads(line).get("type") == "message"
        )
        if m["role"] != "system"  # pi's leading system message: the prompt and tools
    ]
    # The steering message went in after the tool result, before the next answer.
    assert [r for r, _ in roles_and_text] == [
        "user",
        "assistant",
        "toolResult",
        "user",
        "assistant",
    ]
    assert roles_and_text[3][1] == "use the other file"


# --- approvals of policy `ask` decisions in the terminal (issue 18, with the real backend) ---

_ASK_TOUCH = (
    "version: 1\ntool_call:\n  rules:\n    - id: ask-touch\n      tool: bash\n"
    "      command: [touch]\n      decision: ask\n"
    "      reason: Creating files needs a human.\n"
)


def _touch_turns(*names: str) -> list[dict]:
    turns: list[dict] = []
    for index, name in enumerate(names, 1):
        turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": f"touch {name}"}}]})
        turns.append({"text": f"turn {index} done"})
    return turns


def _approval_records(audit: Path) -> list[dict]:
    import json

    records = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("event") == "policy_approval"]


def test_an_ask_approved_once_runs_and_the_same_call_is_asked_again_then_denied_with_a_message(
    tmp_path, ws
):
    policy = tmp_path / "policy.yaml"
    policy.write_text(_ASK_TOUCH)
    audit = tmp_path / "audit.jsonl"
    script = _script(tmp_path / "s.yaml", _touch_turns("made.txt", "made.txt"))
    argv = _pi(script, "--policy", str(policy), "--audit-log", str(audit))
    with TerminalSession(argv, cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("make it")
        term.send_keys("Enter")
        screen = term.wait_for("Allow once")
        assert "ask-touch" in screen and "Creating files needs a human." in screen
        term.send_keys("o")
        term.wait_for("turn 1 done")
        assert (ws / "made.txt").is_file()
        (ws / "made.txt").unlink()
        term.send_text("again")
        term.send_keys("Enter")
        # The same call is asked again: "allow once" granted nothing for later.
        term.wait_for(lambda s: "Allow once" in s and "turn 2 done" not in s)
        term.send_keys("d")
        term.send_text("use the existing file")
        term.send_keys("Enter")
        term.wait_for("turn 2 done")
    assert not (ws / "made.txt").exists()
    decisions = [r.get("decision") for r in _approval_records(audit)]
    assert decisions == ["allow_once", "deny"]
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl")).read_text()
    # The model receives the user's message with the denial.
    assert "Message from the user: use the existing file" in session


def test_allow_for_this_session_runs_the_same_command_later_without_a_prompt(tmp_path, ws):
    policy = tmp_path / "policy.yaml"
    policy.write_text(_ASK_TOUCH)
    audit = tmp_path / "audit.jsonl"
    script = _script(tmp_path / "s.yaml", _touch_turns("granted.txt", "granted.txt"))
    argv = _pi(script, "--policy", str(policy), "--audit-log", str(audit))
    with TerminalSession(argv, cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("make it")
        term.send_keys("Enter")
        term.wait_for("Allow once")
        term.send_keys("s")
        # The scope is shown before it is confirmed: the exact command.
        term.wait_for("touch granted.txt")
        term.send_keys("Enter")
        term.wait_for("turn 1 done")
        (ws / "granted.txt").unlink()
        term.send_text("again")
        term.send_keys("Enter")
        term.wait_for("turn 2 done")
    assert (ws / "granted.txt").is_file()  # ran the second time without a prompt
    records = _approval_records(audit)
    assert [r.get("decision") for r in records] == ["allow_session"]
    import json

    calls = [
        json.loads(line)
        for line in audit.read_text().splitlines()
        if '"event": "tool_call"' in line or '"event":"tool_call"' in line
    ]
    assert any(str(c.get("approval", "")).startswith("granted by session approval") for c in calls)


def test_tree_continues_from_any_entry_by_id_and_labels_show_in_the_tree(tmp_path, ws):
    import json

    script = _script(
        tmp_path / "s.yaml",
        [{"text": "first answer"}, {"text": "second answer"}, {"text": "branched answer"}],
    )
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        for prompt, answer in (("one", "first answer"), ("two", "second answer")):
            term.send_text(prompt)
            term.send_keys("Enter")
            term.wait_for(answer)
        session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
        records = [json.loads(line) for line in session.read_text().splitlines()]
        first = next(
            r
            for r in records
            if r.get("type") == "message" and "first answer" in json.dumps(r.get("message"))
        )
        term.send_text("/tree")
        term.send_keys("Enter")
        term.wait_for(f"{first['id'][:8]} assistant: first answer")
        term.send_text(f"/label {first['id'][:8]} milestone")
        term.send_keys("Enter")
        term.wait_for("label of")
        term.send_text(f"/tree {first['id'][:8]}")
        term.send_keys("Enter")
        term.wait_for("starts a new branch")
        term.send_text("three")
        term.send_keys("Enter")
        term.wait_for("branched answer")
        term.send_text("/tree")
        term.send_keys("Enter")
        term.wait_for("[milestone]")
    records = [json.loads(line) for line in session.read_text().splitlines()]
    three = next(
        r
        for r in records
        if r.get("type") == "message"
        and r["message"].get("role") == "user"
        and "three" in json.dumps(r["message"])
    )
    # The new prompt continues from the chosen assistant entry: "two" is on another branch.
    assert three["parentId"] == first["id"]
    assert not any(r.get("type") == "branch_summary" for r in records)  # none asked for


def test_resume_flag_at_a_terminal_picks_a_session_and_continues_it(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "first answer"}, {"text": "resumed answer"}])
    first = subprocess.run(
        [*_pi(script, "-p", "remember the word kumquat")],
        cwd=ws,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    second = _script(tmp_path / "s2.yaml", [{"text": "resumed answer"}])
    with TerminalSession(_pi(second, "-r"), cwd=ws, env=_env(tmp_path)) as term:
        term.wait_for("Resume which?")
        screen = term.screen()
        assert "remember the word kumquat" in screen
        term.send_text("1")
        term.send_keys("Enter")
        _ready(term)
        term.send_text("what was the word?")
        term.send_keys("Enter")
        term.wait_for("resumed answer")
    sessions = list((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    assert len(sessions) == 1  # continued, not a new session
    text = sessions[0].read_text()
    assert "kumquat" in text and "what was the word?" in text


def test_resume_picker_quits_without_starting_a_session(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "never"}])
    with TerminalSession(_pi(script, "-r"), cwd=ws, env=_env(tmp_path)) as term:
        term.wait_for("Resume which?")
        term.send_text("q")
        term.send_keys("Enter")
        assert term.exit_status() == 0
    assert not list((tmp_path / "agent").rglob("*.jsonl"))


def test_a_second_label_of_the_current_entry_labels_the_message_not_the_first_label(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "labelled answer"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("hi")
        term.send_keys("Enter")
        term.wait_for("labelled answer")
        for text in ("first", "second"):
            term.send_text(f"/label {text}")
            term.send_keys("Enter")
            term.wait_for(f": {text}")
    session = next((tmp_path / "agent" / "sessions").rglob("*.jsonl"))
    records = [json.loads(line) for line in session.read_text().splitlines()]
    answer = next(
        r for r in records if r.get("type") == "message" and r["message"]["role"] == "assistant"
    )
    labels = [r for r in records if r.get("type") == "label"]
    assert [(r["targetId"], r["label"]) for r in labels] == [
        (answer["id"], "first"),
        (answer["id"], "second"),
    ]


def test_ctrl_d_on_an_empty_editor_quits_and_deletes_otherwise(tmp_path, ws):
    script = _script(tmp_path / "s.yaml", [{"text": "unused"}])
    with TerminalSession(_pi(script), cwd=ws, env=_env(tmp_path)) as term:
        _ready(term)
        term.send_text("ab")
        term.send_keys("Home")
        term.send_keys("C-d")  # not empty: deletes the character under the cursor
        term.wait_for(lambda s: any(line.startswith("> b") for line in s.splitlines()))
        term.send_keys("C-d")
        term.wait_for(lambda s: any(line.rstrip() == ">" for line in s.splitlines()))
        term.send_keys("C-d")  # empty: quits
        assert term.exit_status() == 0
