"""What the terminal UI prints of untrusted text (issue 18): model text, tool output
and arguments reach the terminal with their control characters escaped, so they
cannot retitle the window, clear the screen or move the cursor over a "BLOCKED"
line."""

from __future__ import annotations

import re

from pi_sandbox.supervisor.tui import render

ATTACK = "ok\x1b]0;pwned\x07\x1b[2J\x1b[1A\rBLOCKED? no: allowed\u202e"
# Any escape sequence other than SGR (colour/style: ESC [ … m), which rich emits itself.
NOT_SGR = re.compile(r"\x1b(?!\[[0-9;]*m)")


def test_markdown_of_model_text_keeps_no_escape_sequence_of_its_own():
    out = render.markdown_ansi(f"# Title\n\n{ATTACK}", 80)
    assert not NOT_SGR.search(out)
    assert "\\x1b]0;pwned" in out and "\\u202e" in out


def test_styled_tool_output_keeps_no_escape_sequence_of_its_own():
    out = render.styled("  │ " + ATTACK, "dim", 80)
    assert not NOT_SGR.search(out)
    assert "\\x07" in out


def test_control_the_attack_text_itself_holds_the_sequences():
    """Control: without the escaping the sequences are there to be caught."""
    assert NOT_SGR.search(ATTACK)


def test_arguments_and_decisions_are_one_escaped_line_each():
    summary = render.args_summary("bash", {"command": "echo hi\nrm -rf /\x1b[2K"})
    assert "\n" not in summary and "\x1b" not in summary
    lines = render.decision_lines(
        {
            "rule": "r\x1b[31m",
            "tier": "project",
            "source": "/p/.pi/policy.yaml",
            "reason": "line one\nline two",
            "commands": [{"argv": ["rm", "-rf", "/"], "decision": "deny", "rule": "r"}],
        }
    )
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert lines[0].startswith("rule: r\\x1b[31m") and "[project, /p/.pi/policy.yaml]" in lines[0]
    assert lines[-1].split() == ["deny", "rm", "-rf", "/", "(rule", "r)"]


def test_markdown_links_show_their_target():
    out = render.markdown_ansi("see [the docs](https://evil.example/steal) here", 80)
    assert "https://evil.example/steal" in re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink hiding the address


def test_no_color_drops_colours_and_keeps_emphasis(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    out = render.styled("x", "bold red", 40) + render.markdown_ansi("**b** `c`\n\n# H", 40)
    colours = re.findall(r"\x1b\[([0-9;]*)m", out)
    assert colours and not any(
        int(code) in range(30, 50) or int(code) in range(90, 108)
        for group in colours
        for code in group.split(";")
        if code
    )


def test_the_tui_package_exports_an_explicit_importable_all():
    """STYLE rule 2, for the new sub-package (kept here: test_public_surface.py is shared)."""
    import pi_sandbox.supervisor.tui as tui

    assert set(tui.__all__) == {"TerminalFrontend"}
    assert all(hasattr(tui, name) for name in tui.__all__)
