"""pi 1.6.0's own RPC clients against our ``pi --mode rpc`` (issue 17 §2, §3).

- pi's ``RpcClient`` (imported from the installed npm package by
  ``pi16_rpc_driver.mjs``, run with Node 22) calls every method in turn; each
  method gets a verdict against what the same drive gets from pi 1.6.0 itself.
- The minimal Python client printed in pi's docs/rpc.md prints the model's answer.
- At the wire (`run_wire_probe`): no ``session`` record at start, the ``parse``
  error response, ``bash_execution_update`` streaming, and the extension UI
  sub-protocol (rpc-extension-ui.md) with a probe extension answered as pi's docs say.

Against pi 1.6.0 both must work (the controls: they show the drivers themselves are
right). Against ours every command and the messages its results carry have pi's
shape (issue 17 §1–§3): no test here is an expected failure any more.
Skipped with the reason when pi 1.6.0 (and so Node 22) is not installed and npm
cannot install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pi16_conformance import (
    RPC_COMMANDS,
    UI_ANSWERS,
    Pi16,
    Pi16Unavailable,
    compare_rpc,
    compare_wire,
    ensure_pi16,
    in_message_object,
    run_minimal_client,
    run_rpc_driver,
    run_wire_probe,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pi16() -> Pi16:
    try:
        return ensure_pi16()
    except Pi16Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def pi16_drive(pi16: Pi16, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_rpc_driver(pi16, "pi16", tmp_path_factory.mktemp("rpc-pi16"))


def _table(lines: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{line['method']:<28} {'ok' if line['ok'] else 'FAILED: ' + str(line.get('error'))}"
        for line in lines
    )


def test_pi16s_rpc_client_drives_pi16_through_every_command(
    pi16_drive: list[dict[str, Any]],
) -> None:
    # Control: the driver is right if pi 1.6.0 itself passes it.
    print(_table(pi16_drive))
    assert pi16_drive[-1]["method"] == "(done)", pi16_drive[-1]
    assert {line["command"] for line in pi16_drive if line["command"]} == set(RPC_COMMANDS)
    for line in pi16_drive:
        refused = [r for r in line.get("responses", ()) if not r["success"]]
        if line["command"] == "compact":
            # A two-prompt session is too small for pi to compact: a domain refusal.
            assert "Nothing to compact" in str(line.get("error")), line
            continue
        assert line["ok"] and not refused, line
    verdicts = compare_rpc(pi16_drive, pi16_drive)
    assert all(v.ok for v in verdicts), [v for v in verdicts if not v.ok]
    prompt = next(line for line in pi16_drive if line["method"] == "prompt")
    assert prompt["result"] == "started" and "agent_settled" in prompt["events"]


def test_the_rpc_verdicts_tell_unknown_commands_ignored_failures_and_missing_fields_apart() -> None:
    pi = [
        {
            "method": "getState",
            "command": "get_state",
            "ok": True,
            "result": {"isStreaming": False},
        },
        {"method": "setThinkingLevel", "command": "set_thinking_level", "ok": True},
        {"method": "getTree", "command": "get_tree", "ok": True, "result": {"tree": []}},
        {"method": "compact", "command": "compact", "ok": False, "error": "Nothing to compact"},
    ]
    ours = [
        {"method": "getState", "command": "get_state", "ok": True, "result": {"is_idle": True}},
        # RpcClient's void methods resolve although the response failed.
        {
            "method": "setThinkingLevel",
            "command": "set_thinking_level",
            "ok": True,
            "responses": [{"success": False, "error": "unknown command type 'set_thinking_level'"}],
        },
        {"method": "getTree", "command": "get_tree", "ok": False, "error": "boom"},
        {"method": "compact", "command": "compact", "ok": False, "error": "too small"},
    ]
    verdicts = {v.method: v for v in compare_rpc(pi, ours)}
    assert verdicts["getState"].verdict == "wrong shape"
    assert "`data.isStreaming`" in verdicts["getState"].detail
    assert "`data.is_idle`" in verdicts["getState"].detail
    assert verdicts["setThinkingLevel"].verdict == "unknown command"
    assert verdicts["getTree"].verdict == "fails"
    assert verdicts["compact"].verdict == "same refusal" and verdicts["compact"].ok
    assert [v.verdict for v in compare_rpc(pi, pi)] == ["works"] * 3 + ["same refusal"]


@pytest.fixture(scope="module")
def our_drive(pi16: Pi16, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_rpc_driver(pi16, "ours", tmp_path_factory.mktemp("rpc-ours"))


def test_pi16s_rpc_client_gets_pi16s_command_shapes_from_ours(
    pi16_drive: list[dict[str, Any]], our_drive: list[dict[str, Any]]
) -> None:
    # Every method resolves (no unknown command, no failed response) with every field
    # pi 1.6.0's result has, outside the messages and session entries it carries
    # (their fields are the JSON stream's and the session file's: protocol-gaps 1–8).
    verdicts = compare_rpc(pi16_drive, our_drive, ignore=in_message_object)
    print("\n".join(f"{v.method:<28} {v.verdict:<16} {v.detail}" for v in verdicts))
    assert our_drive[-1]["method"] == "(done)", our_drive[-1]
    assert [v for v in verdicts if not v.ok] == []
    by_method = {line["method"]: line for line in our_drive}
    assert by_method["prompt"]["result"] == "started"
    assert "agent_settled" in by_method["prompt"]["events"]
    assert "agent_settled" in by_method["promptAndWait"]["result"]
    # Idle steer/follow_up are queued (pi), not run: clear_queue hands them back.
    assert by_method["steer"]["result"] == "queued"
    assert by_method["followUp"]["result"] == "queued"
    assert "agent_start" not in by_method["steer"]["events"] + by_method["followUp"]["events"]
    assert by_method["clearQueue"]["result"] == {
        "steering": ["steer text"],
        "followUp": ["follow-up text"],
    }
    assert "queue_update" in by_method["clearQueue"]["events"]
    assert "session_info_changed" in by_method["setSessionName"]["events"]
    assert "bash_execution_update" in by_method["bash"]["events"]


def test_pi16s_rpc_client_works_unchanged_against_ours(
    pi16_drive: list[dict[str, Any]], our_drive: list[dict[str, Any]]
) -> None:
    verdicts = compare_rpc(pi16_drive, our_drive)
    print("\n".join(f"{v.method:<28} {v.verdict:<16} {v.detail}" for v in verdicts))
    assert our_drive[-1]["method"] == "(done)", our_drive[-1]
    assert [v for v in verdicts if not v.ok] == []


def test_the_docs_minimal_python_client_prints_pi16s_answer(pi16: Pi16, tmp_path: Path) -> None:
    # Control: pi's docs/rpc.md client, unchanged but for the command, against pi 1.6.0.
    proc = run_minimal_client(pi16, "pi16", tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "Hello there.\n"), proc.stderr[-2000:]


def test_the_docs_minimal_python_client_prints_our_answer(pi16: Pi16, tmp_path: Path) -> None:
    proc = run_minimal_client(pi16, "ours", tmp_path)
    print(proc.stderr[-2000:])
    assert (proc.returncode, proc.stdout) == (0, "Hello there.\n")


@pytest.fixture(scope="module")
def pi16_wire(pi16: Pi16, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Dialogs wait up to 60 s: answered at once, the wait only matters on a stalled machine.
    return run_wire_probe(pi16, "pi16", tmp_path_factory.mktemp("wire-pi16"), 60_000)


def test_pi16_speaks_the_documented_wire_protocol_to_the_probe(pi16_wire: dict[str, Any]) -> None:
    # Control: what the probe expects is what pi 1.6.0 does.
    print(pi16_wire["stderr"])
    assert pi16_wire["before_first_response"] is not None
    assert "session" not in pi16_wire["before_first_response"]
    assert pi16_wire["parse"]["command"] == "parse" and "id" not in pi16_wire["parse"]
    assert pi16_wire["bash_updates"]
    assert all(r["id"] == "bash-1" for r in pi16_wire["bash_updates"])
    methods = {r["method"] for r in pi16_wire["ui_records"]}
    assert {"notify", "setStatus", "setWidget", "setTitle", "set_editor_text"} <= methods
    assert {"confirm", "select", "input", "editor"} <= methods
    assert pi16_wire["answers"] == UI_ANSWERS
    assert pi16_wire["ui_replies"] == []
    assert compare_wire(pi16_wire, pi16_wire) == []


def test_ours_speaks_pi16s_wire_protocol_to_the_probe(
    pi16: Pi16, pi16_wire: dict[str, Any], tmp_path: Path
) -> None:
    # Short dialog timeouts: an answer that does not reach ours costs 5 s per dialog.
    ours = run_wire_probe(pi16, "ours", tmp_path, 5_000)
    diff = compare_wire(pi16_wire, ours)
    print("\n".join(diff))
    assert diff == []
