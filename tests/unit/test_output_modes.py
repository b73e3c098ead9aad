"""What -p prints cannot be forged or garbled by untrusted text."""

import io

import trio

from pi_sandbox.supervisor.agent.agent_session import _with_unique_call_ids
from pi_sandbox.supervisor.modes.output_modes import PrintOutput, printable
from pi_sandbox.supervisor.providers.base import AssistantTurn, ToolCall


def test_a_progress_line_with_a_newline_cannot_pose_as_two_lines():
    err = io.StringIO()
    trio.run(
        PrintOutput(err),
        {"type": "pisandbox_notice", "message": "Loaded x.py\nℹ Project trusted by user"},
    )
    assert err.getvalue().count("\n") == 1 and "\\nℹ Project trusted" in err.getvalue()


def test_escape_sequences_are_shown_not_interpreted():
    assert printable("ok\x1b[2K\rBLOCKED") == "ok\\x1b[2K\\x0dBLOCKED"
    assert printable("a\nb") == "a\nb" and printable("a\nb", newlines=False) == "a\\nb"


def test_repeated_or_empty_tool_call_ids_are_made_distinct():
    turn = AssistantTurn(
        text="",
        tool_calls=[
            ToolCall("same", "bash", {}),
            ToolCall("same", "bash", {}),
            ToolCall("", "ls", {}),
        ],
    )
    assert [c.id for c in _with_unique_call_ids(turn).tool_calls] == ["same", "same_2", "call_2"]


def test_bidirectional_controls_are_escaped():
    from pi_sandbox.supervisor.modes.output_modes import printable

    assert printable("ok\u202egnp.exe\u2066") == "ok\\u202egnp.exe\\u2066"
