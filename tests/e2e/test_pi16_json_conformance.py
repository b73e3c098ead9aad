"""Our ``--mode json`` stream against pi 1.6.0's, same scripted conversation (issue 17 §1, §3).

pi 1.6.0 runs with pi-ai's faux provider, ours with ``--model scripted``; the harness
(`pi16_conformance`) compares record types in order and field names per record type.

- The conformance tests (one per scenario) pass since issue 17 §1: same record
  types, same order, same field names as pi 1.6.0 (our own, namespaced records are
  left out: docs/json.md).
- The harness tests show the comparison can both pass and fail: two independent
  pi 1.6.0 runs of the same conversation compare equal (chunking, ids, timestamps,
  concurrent tool order differ), and a deliberately altered copy yields exactly the
  expected differences. A synthetic-stream test checks the comparison's rules
  without pi 1.6.0 (it runs even where pi cannot be installed).

Skipped with the reason when pi 1.6.0 is not installed and npm cannot install it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pi16_conformance import (
    SCENARIOS,
    Pi16,
    Pi16Unavailable,
    StreamRun,
    canonical_sequence,
    compare_runs,
    compare_streams,
    ensure_pi16,
    run_ours_json,
    run_pi16_json,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pi16() -> Pi16:
    try:
        return ensure_pi16()
    except Pi16Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def pi16_runs(pi16: Pi16, tmp_path_factory: pytest.TempPathFactory) -> dict[str, StreamRun]:
    """pi 1.6.0's run of each scenario, made once for the module."""
    root = tmp_path_factory.mktemp("pi16-json")
    return {name: run_pi16_json(pi16, s, root / name) for name, s in SCENARIOS.items()}


def test_pi16_runs_every_scenario_to_agent_settled(pi16_runs: dict[str, StreamRun]) -> None:
    # The reference itself must be sound, or every comparison below is meaningless.
    for name, run in pi16_runs.items():
        assert run.returncode == 0, (name, run.stderr)
        assert not run.bad_lines, (name, run.bad_lines)
        types = [r["type"] for r in run.records]
        assert types[0] == "session" and types[-1] == "agent_settled", (name, types)
    thinking = canonical_sequence(pi16_runs["thinking_block"].records)
    assert "message_update[thinking_delta]" in thinking
    assert "tool_execution_end[isError]" in canonical_sequence(pi16_runs["tool_error"].records)


def test_two_independent_pi16_runs_of_one_conversation_compare_equal(
    pi16: Pi16, pi16_runs: dict[str, StreamRun], tmp_path: Path
) -> None:
    # Two concurrent tool calls: ids, timestamps, chunking into deltas and the
    # interleaving of the two calls' tool_execution_* records all differ between runs.
    again = run_pi16_json(pi16, SCENARIOS["two_tool_calls"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert compare_runs(pi16_runs["two_tool_calls"], again) == []


def test_a_stream_compares_equal_to_itself_with_values_and_tool_order_changed(
    pi16_runs: dict[str, StreamRun],
) -> None:
    records = pi16_runs["two_tool_calls"].records
    changed = copy.deepcopy(records)
    for record in changed:
        if "toolCallId" in record:
            record["toolCallId"] = "other-" + record["toolCallId"]
        if isinstance(record.get("message"), dict):
            record["message"]["timestamp"] = 0
    # Swap the first two tool_execution_start records (concurrent calls start in any order).
    starts = [i for i, r in enumerate(changed) if r["type"] == "tool_execution_start"]
    assert len(starts) == 2
    first, second = starts
    if second == first + 1:
        changed[first], changed[second] = changed[second], changed[first]
    assert compare_streams(records, records) == []
    assert compare_streams(records, changed) == []


def _altered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pi's stream with four known faults: no agent_settled, tool_execution_end
    without durationMs, message_update with our old {delta} shape, and turn_start
    moved after the user message."""
    out: list[dict[str, Any]] = []
    for record in copy.deepcopy(records):
        kind = record["type"]
        if kind == "agent_settled":
            continue
        if kind == "tool_execution_end":
            record.pop("durationMs", None)
        if kind == "message_update":
            record = {"type": "message_update", "delta": "x"}
        out.append(record)
    turn = next(i for i, r in enumerate(out) if r["type"] == "turn_start")
    user_end = next(
        i
        for i, r in enumerate(out)
        if r["type"] == "message_end" and r["message"]["role"] == "user"
    )
    out.insert(user_end, out.pop(turn))
    return out


def test_a_deliberately_altered_copy_of_pi16s_stream_yields_the_expected_differences(
    pi16_runs: dict[str, StreamRun],
) -> None:
    records = pi16_runs["bash_call"].records
    diff = compare_streams(records, _altered(records))
    print("\n".join(diff))
    assert "record type `agent_settled`: pi emits it, ours never does" in diff
    assert "fields of `tool_execution_end`: ours lacks `durationMs`" in diff
    assert any(
        line.startswith("fields of `message_update`: ours lacks `assistantMessageEvent`")
        for line in diff
    )
    assert "fields of `message_update`: ours adds `delta`" in diff
    assert any(line.startswith("order: ") and "`turn_start`" in line for line in diff)
    assert any(
        line.startswith("order: missing in ours") and "agent_settled" in line for line in diff
    )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_our_json_stream_has_pi16s_records_order_and_field_names(
    scenario: str, pi16_runs: dict[str, StreamRun], tmp_path: Path
) -> None:
    ours = run_ours_json(SCENARIOS[scenario], tmp_path)
    diff = compare_runs(pi16_runs[scenario], ours)
    print(f"{len(diff)} differences from pi 1.6.0 ({scenario}):")
    print("\n".join(diff))
    assert diff == []


def test_the_comparison_works_on_synthetic_streams_without_pi16() -> None:
    # Runs where pi 1.6.0 cannot be installed: the comparison's own rules.
    def tool(kind: str, call: str, **extra: Any) -> dict[str, Any]:
        return {"type": f"tool_execution_{kind}", "toolCallId": call, **extra}

    reference = [
        {"type": "agent_start"},
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "a"}},
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "b"}},
        tool("start", "1"),
        tool("start", "2"),
        tool("end", "2", isError=False, durationMs=1),
        tool("end", "1", isError=True, durationMs=2),
        {"type": "agent_settled", "aborted": False},
    ]
    assert canonical_sequence(reference) == [
        "agent_start",
        "message_update[text_delta]",
        "tool_execution_start",
        "tool_execution_end[isError]",
        "tool_execution_start",
        "tool_execution_end",
        "agent_settled",
    ]
    # One delta instead of two, the calls in another interleaving, other values: equal.
    same = [
        reference[0],
        reference[1],
        tool("start", "1"),
        tool("end", "1", isError=True, durationMs=9),
        tool("start", "2"),
        tool("end", "2", isError=False, durationMs=8),
        {"type": "agent_settled", "aborted": True},
    ]
    assert compare_streams(reference, same) == []
    # Our own records are left out by default, reported when not.
    ours = [*same[:2], {"type": "policy_decision", "toolCallId": "1"}, *same[2:]]
    assert compare_streams(reference, ours) == []
    assert compare_streams(reference, ours, ignore_types=()) == [
        "record type `policy_decision`: ours emits it, pi never does",
        "order: extra in ours (pi record 3, after `message_update[text_delta]`): `policy_decision`",
    ]
    broken = [r for r in same if r["type"] != "agent_settled"]
    broken[-1] = {k: v for k, v in broken[-1].items() if k != "durationMs"}
    assert compare_streams(reference, broken) == [
        "record type `agent_settled`: pi emits it, ours never does",
        "order: missing in ours (pi record 7, after `tool_execution_end`): `agent_settled`",
    ]
    # A field no record of its type has any more is reported (field names are per type).
    broken = [*same[:3], {k: v for k, v in same[3].items() if k != "durationMs"}, *same[4:]]
    broken[5] = {k: v for k, v in same[5].items() if k != "durationMs"}
    assert compare_streams(reference, broken) == [
        "fields of `tool_execution_end`: ours lacks `durationMs`"
    ]
