"""The combiners shared by worker and supervisor (DESIGN §4)."""

import pytest

from pi_sandbox.protocol import hook_kinds as hk


def fold(event, payload, results):
    """Run the combiner over handler results; an Exception instance means the handler raised."""
    state = hk.initial_state(event, payload)
    calls = 0
    for result in results:
        calls += 1
        view = hk.handler_view(event, payload, state)
        if isinstance(result, Exception):
            state, stop = hk.apply_error(event, state, str(result))
        elif callable(result):
            state, stop = hk.apply_result(event, state, view, result(view))
        else:
            state, stop = hk.apply_result(event, state, view, result)
        if stop:
            break
    return state, calls


def test_tool_call_block_stops_later_handlers():
    state, calls = fold(
        "tool_call", {"input": {"command": "ls"}}, [None, {"block": True, "reason": "no"}, None]
    )
    assert state["block"] is True and state["reason"] == "no" and calls == 2


def test_tool_call_block_without_reason_gets_a_default_reason():
    state, _ = fold("tool_call", {"input": {}}, [{"block": True}])
    assert state["reason"]


def test_tool_call_input_mutation_is_seen_by_the_next_handler():
    seen = []

    def mutate(view):
        view["input"]["command"] = "ls -la"

    def observe(view):
        seen.append(view["input"]["command"])

    state, _ = fold("tool_call", {"input": {"command": "ls"}}, [mutate, observe])
    assert seen == ["ls -la"] and state["input"] == {"command": "ls -la"}


def test_tool_call_handler_error_blocks_fail_closed():
    state, calls = fold("tool_call", {"input": {}}, [RuntimeError("boom"), None])
    assert state["block"] is True and "boom" in state["reason"] and calls == 1


def test_tool_call_handler_returning_garbage_is_a_handler_result_error():
    state = hk.initial_state("tool_call", {"input": {}})
    view = hk.handler_view("tool_call", {"input": {}}, state)
    with pytest.raises(hk.HandlerResultError):
        hk.apply_result("tool_call", state, view, "yes please")


def test_tool_result_patches_chain_across_handlers():
    payload = {"content": [{"type": "text", "text": "a"}], "details": {}, "is_error": False}
    state, _ = fold(
        "tool_result",
        payload,
        [{"content": "b"}, {"details": {"x": 1}}, {"isError": True}],
    )
    assert state == {
        "content": [{"type": "text", "text": "b"}],
        "details": {"x": 1},
        "is_error": True,
    }


def test_tool_result_error_keeps_the_previous_value():
    payload = {"content": [{"type": "text", "text": "a"}], "details": {}, "is_error": False}
    state, calls = fold("tool_result", payload, [{"content": "b"}, RuntimeError("x"), None])
    assert state["content"] == [{"type": "text", "text": "b"}] and calls == 3


@pytest.mark.parametrize(
    "patch", [{"is_error": "yes"}, {"content": 3}, {"details": []}, {"content": [{"text": 1}]}]
)
def test_tool_result_malformed_patch_is_rejected(patch):
    payload = {"content": [], "details": {}, "is_error": False}
    state = hk.initial_state("tool_result", payload)
    with pytest.raises(hk.HandlerResultError):
        hk.apply_result("tool_result", state, hk.handler_view("tool_result", payload, state), patch)


def test_notification_results_are_ignored_and_errors_continue():
    state, calls = fold("session_start", {}, [{"block": True}, RuntimeError("x"), None])
    assert state == {} and calls == 3


def test_unknown_events_are_notifications():
    assert hk.kind_of("something_new") == hk.NOTIFICATION


def test_transaction_cancel_returns_at_once():
    state, calls = fold("session_before_switch", {}, [{"x": 1}, {"cancel": True}, {"y": 2}])
    assert state["result"] == {"cancel": True} and calls == 2


def test_collect_unions_paths():
    state, _ = fold("resources_discover", {}, [{"paths": ["a"]}, None, ["b", "c"]])
    assert state["paths"] == ["a", "b", "c"]


def test_handler_view_is_a_copy_so_handlers_cannot_corrupt_state_by_aliasing():
    payload = {"content": [{"type": "text", "text": "a"}], "details": {"k": [1]}, "is_error": False}
    state = hk.initial_state("tool_result", payload)
    view = hk.handler_view("tool_result", payload, state)
    view["details"]["k"].append(2)
    assert state["details"] == {"k": [1]}
