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
        "terminate": False,
    }


def test_tool_result_error_stops_the_chain_fail_closed():
    # issue 13 §1: the caller withholds the result; no later handler sees it.
    payload = {"content": [{"type": "text", "text": "a"}], "details": {}, "is_error": False}
    state, calls = fold("tool_result", payload, [{"content": "b"}, RuntimeError("x"), None])
    assert state["content"] == [{"type": "text", "text": "b"}] and calls == 2
    assert hk.ON_FAILURE["tool_result"] == hk.WITHHOLD


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


def test_collect_unions_paths_in_order_without_duplicates():
    state, calls = fold(
        "resources_discover",
        {},
        [
            {"skill_paths": ["a", "b"]},
            None,
            {"skillPaths": ["b", "c"], "promptPaths": ["p"], "theme_paths": ["t", "t"]},
            RuntimeError("x"),
            {"prompt_paths": ["p", "q"], "themePaths": ["u"]},
        ],
    )
    assert calls == 5
    assert state == {
        "skill_paths": ["a", "b", "c"],
        "prompt_paths": ["p", "q"],
        "theme_paths": ["t", "u"],
    }


@pytest.mark.parametrize(
    "result", [["a"], "a", {"skill_paths": "a"}, {"promptPaths": [1]}, {"theme_paths": [None]}]
)
def test_collect_rejects_malformed_results(result):
    state = hk.initial_state("resources_discover", {})
    with pytest.raises(hk.HandlerResultError):
        hk.apply_result("resources_discover", state, {}, result)


def test_handler_view_is_a_copy_so_handlers_cannot_corrupt_state_by_aliasing():
    payload = {"content": [{"type": "text", "text": "a"}], "details": {"k": [1]}, "is_error": False}
    state = hk.initial_state("tool_result", payload)
    view = hk.handler_view("tool_result", payload, state)
    view["details"]["k"].append(2)
    assert state["details"] == {"k": [1]}


def apply_one(event, payload, result, state=None):
    state = state if state is not None else hk.initial_state(event, payload)
    return hk.apply_result(event, state, hk.handler_view(event, payload, state), result)


# --- the event table ---------------------------------------------------------------


def test_known_events_cover_every_kind():
    assert frozenset(hk.EVENT_KINDS) == hk.KNOWN_EVENTS
    for name in (
        "after_provider_response",
        "session_switch",
        "session_fork",
        "session_compact",
        "session_tree",
        "message_update",
        "tool_execution_update",
    ):
        assert hk.kind_of(name) == hk.NOTIFICATION and name in hk.KNOWN_EVENTS
    assert hk.kind_of("input") == hk.CHAINED
    assert hk.kind_of("user_bash") == hk.SHORT_CIRCUIT
    assert hk.kind_of("session_before_tree") == hk.TRANSACTION
    assert "something_new" not in hk.KNOWN_EVENTS


@pytest.mark.parametrize("event", sorted(hk.KNOWN_EVENTS | {"something_new"}))
def test_initial_state_of_every_event_passes_check_state(event):
    hk.check_state(event, hk.initial_state(event, {}))


# --- tool_call ------------------------------------------------------------------------


def test_tool_call_input_patches_merge_shallowly_across_handlers():
    state, calls = fold(
        "tool_call",
        {"input": {"command": "ls", "timeout": 5, "cwd": "/w"}},
        [{"input": {"command": "ls -la"}}, None, {"input": {"timeout": 10}}],
    )
    assert calls == 3 and state["block"] is False
    assert state["input"] == {"command": "ls -la", "timeout": 10, "cwd": "/w"}


def test_tool_call_patch_is_seen_by_the_next_handler_and_combines_with_mutation():
    seen = []

    def mutate_and_patch(view):
        view["input"]["a"] = 1
        return {"input": {"b": 2}}

    def observe(view):
        seen.append(dict(view["input"]))

    state, _ = fold("tool_call", {"input": {}}, [mutate_and_patch, observe])
    assert seen == [{"a": 1, "b": 2}] and state["input"] == {"a": 1, "b": 2}


def test_tool_call_block_with_terminate():
    state, calls = fold(
        "tool_call", {"input": {}}, [{"block": True, "reason": "stop", "terminate": True}, None]
    )
    assert state == {"input": {}, "block": True, "reason": "stop", "terminate": True}
    assert calls == 1 and hk.is_decisive("tool_call", state)


def test_tool_call_error_blocks_without_terminate():
    state, _ = fold("tool_call", {"input": {"x": 1}}, [RuntimeError("boom")])
    assert state == {"input": {"x": 1}, "block": True, "reason": "boom", "terminate": False}


@pytest.mark.parametrize(
    "result", [{"input": "rm -rf /"}, {"input": ["x"]}, {"block": True, "terminate": "yes"}]
)
def test_tool_call_malformed_results_are_errors(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("tool_call", {"input": {"command": "ls"}}, result)


def test_tool_call_malformed_result_keeps_the_state_unchanged():
    state = hk.initial_state("tool_call", {"input": {"command": "ls"}})
    before = {**state, "input": dict(state["input"])}
    with pytest.raises(hk.HandlerResultError):
        apply_one("tool_call", {"input": {"command": "ls"}}, {"input": 3}, state)
    assert state == before


# --- tool_result ----------------------------------------------------------------------


def test_tool_result_terminate_patch_and_none_fields_are_absent():
    payload = {"content": [{"type": "text", "text": "a"}], "details": {"k": 1}, "is_error": False}
    state, _ = fold(
        "tool_result", payload, [{"terminate": True}, {"content": None, "details": None}]
    )
    assert state == {
        "content": [{"type": "text", "text": "a"}],
        "details": {"k": 1},
        "is_error": False,
        "terminate": True,
    }


@pytest.mark.parametrize("result", [{"terminate": 1}, "text", ["x"]])
def test_tool_result_rejects_bad_terminate_and_non_mappings(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("tool_result", {"content": []}, result)


# --- input ----------------------------------------------------------------------------


def test_input_transform_chains_and_keeps_images_unless_replaced():
    seen = []

    def upper(view):
        seen.append((view["text"], view["images"]))
        return {"action": "transform", "text": view["text"].upper()}

    def observe(view):
        seen.append((view["text"], view["images"]))
        return {"action": "transform", "text": view["text"] + "!", "images": []}

    img = {"type": "image", "data": "AA==", "mime_type": "image/png"}
    state, calls = fold(
        "input",
        {"text": "hi", "images": [img]},
        [None, {"action": "continue"}, upper, observe, None],
    )
    assert calls == 5
    assert seen == [("hi", [img]), ("HI", [img])]
    assert state == {"text": "HI!", "images": [], "action": "transform"}
    assert not hk.is_decisive("input", state)


def test_input_handled_is_decisive_and_stops():
    state, calls = fold(
        "input",
        {"text": "hi"},
        [{"action": "transform", "text": "x"}, {"action": "handled"}, {"action": "continue"}],
    )
    assert calls == 2 and state["action"] == "handled" and hk.is_decisive("input", state)


@pytest.mark.parametrize(
    "result",
    [
        {},
        {"action": "eat"},
        {"action": "transform"},
        {"action": "transform", "text": 3},
        {"action": "transform", "text": "x", "images": "img"},
        {"action": "transform", "text": "x", "images": ["img"]},
        "handled",
    ],
)
def test_input_bad_shapes_are_errors(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("input", {"text": "hi"}, result)


def test_input_error_stops_the_chain_fail_closed():
    state, calls = fold(
        "input", {"text": "a"}, [{"action": "transform", "text": "b"}, RuntimeError("x"), None]
    )
    assert state["text"] == "b" and calls == 2
    assert hk.ON_FAILURE["input"] == hk.STOP


# --- before_agent_start ---------------------------------------------------------------


def test_before_agent_start_accumulates_messages_and_replaces_the_prompt():
    seen = []

    def first(view):
        seen.append(view["system_prompt"])
        return {"message": {"custom_type": "a"}, "system_prompt": "P1"}

    def second(view):
        seen.append(view["system_prompt"])
        return {"messages": [{"custom_type": "b"}, {"custom_type": "c"}], "systemPrompt": "P2"}

    def third(view):
        seen.append(view["system_prompt"])
        return {"message": {"custom_type": "d"}, "messages": [{"custom_type": "e"}]}

    state, _ = fold(
        "before_agent_start", {"prompt": "hi", "system_prompt": "base"}, [first, second, third]
    )
    assert seen == ["base", "P1", "P2"]
    assert state["system_prompt"] == "P2"
    assert [m["custom_type"] for m in state["messages"]] == ["a", "b", "c", "d", "e"]


def test_before_agent_start_without_a_payload_prompt_starts_at_none():
    assert hk.initial_state("before_agent_start", {"prompt": "x"}) == {
        "messages": [],
        "system_prompt": None,
    }


@pytest.mark.parametrize(
    "result",
    [
        {"message": "hi"},
        {"messages": {"role": "user"}},
        {"messages": ["x"]},
        {"system_prompt": 3},
        3,
    ],
)
def test_before_agent_start_bad_shapes_are_errors(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("before_agent_start", {"system_prompt": "base"}, result)


# --- context --------------------------------------------------------------------------


def test_context_replaces_the_list_and_the_next_handler_sees_it():
    seen = []
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    def drop_last(view):
        return {"messages": view["messages"][:-1]}

    def observe(view):
        seen.append(view["messages"])

    state, _ = fold("context", {"messages": messages}, [drop_last, observe, {}])
    assert seen == [[{"role": "user", "content": "a"}]]
    assert state == {"messages": [{"role": "user", "content": "a"}]}
    assert len(messages) == 2  # the payload is not touched


@pytest.mark.parametrize(
    "result",
    [{"messages": "x"}, {"messages": [{"content": "no role"}]}, {"messages": [{"role": 1}]}, []],
)
def test_context_bad_shapes_are_errors(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("context", {"messages": []}, result)


# --- before_provider_request ----------------------------------------------------------


def test_before_provider_request_replaces_the_payload():
    seen = []

    def add(view):
        return {"payload": {**view["payload"], "temperature": 0}}

    def observe(view):
        seen.append(view["payload"])

    state, _ = fold("before_provider_request", {"payload": {"model": "m"}}, [add, observe])
    assert seen == [{"model": "m", "temperature": 0}]
    assert state == {"payload": {"model": "m", "temperature": 0}}


@pytest.mark.parametrize("result", [{"payload": []}, {"model": "raw payload"}, "x"])
def test_before_provider_request_bad_shapes_are_errors(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("before_provider_request", {"payload": {}}, result)


# --- message_end ----------------------------------------------------------------------


def test_message_end_replacement_with_the_same_role():
    payload = {"message": {"role": "assistant", "content": "a"}}
    state, _ = fold(
        "message_end", payload, [{"message": {"role": "assistant", "content": "b"}}, {}]
    )
    assert state == {"message": {"role": "assistant", "content": "b"}}


def test_message_end_role_change_is_rejected_and_the_previous_value_kept():
    payload = {"message": {"role": "assistant", "content": "a"}}
    state = hk.initial_state("message_end", payload)
    with pytest.raises(hk.HandlerResultError):
        apply_one("message_end", payload, {"message": {"role": "user", "content": "b"}}, state)
    with pytest.raises(hk.HandlerResultError):
        apply_one("message_end", payload, {"message": {"content": "b"}}, state)
    with pytest.raises(hk.HandlerResultError):
        apply_one("message_end", payload, {"message": "b"}, state)
    assert state == {"message": {"role": "assistant", "content": "a"}}


# --- short circuits -------------------------------------------------------------------


def test_user_bash_first_mapping_wins():
    state, calls = fold(
        "user_bash",
        {"command": "ls"},
        [None, {"result": {"output": "hi"}}, {"x": 1}],
    )
    assert state == {"result": {"result": {"output": "hi"}}} and calls == 2
    assert hk.is_decisive("user_bash", state)


def test_user_bash_error_stops_the_chain_fail_closed():
    state, calls = fold("user_bash", {"command": "ls"}, [None, RuntimeError("x"), {"x": 1}])
    assert state == {"result": None} and calls == 2
    assert hk.ON_FAILURE["user_bash"] == hk.BLOCK


@pytest.mark.parametrize(
    "result",
    [
        {"x": 1},
        {"result": "x"},
        {"result": {"output": 3}},
        {"result": {"output": "a", "exit_code": "0"}},
        {"result": {"output": "a", "exit_code": 999}},
        {"result": {"output": "a", "exit_code": True}},
        {"output": "a", "cancelled": "no"},
    ],
)
def test_user_bash_a_mapping_that_is_not_a_result_is_an_error(result):
    # issue 13 §1: a malformed answer is a failed handler, and user_bash fails closed.
    with pytest.raises(hk.HandlerResultError):
        apply_one("user_bash", {"command": "ls"}, result)
    with pytest.raises(hk.HandlerResultError):
        hk.check_state("user_bash", {"result": result})


def test_user_bash_accepts_the_inner_result_alone():
    state, _ = fold("user_bash", {}, [{"output": "hi", "exit_code": None}])
    assert state == {"result": {"output": "hi", "exit_code": None}}


def test_user_bash_non_mapping_is_an_error():
    with pytest.raises(hk.HandlerResultError):
        apply_one("user_bash", {}, "output")


@pytest.mark.parametrize(
    ("result", "decision"),
    [
        ("yes", "yes"),
        ("no", "no"),
        ({"trust": "sandboxed"}, "sandboxed"),
        ({"decision": "no"}, "no"),
    ],
)
def test_project_trust_first_decision_wins(result, decision):
    state, calls = fold("project_trust", {}, [None, "undecided", result, "yes"])
    assert state == {"result": decision} and calls == 3
    assert hk.is_decisive("project_trust", state)


@pytest.mark.parametrize("result", ["maybe", True, {"trust": "always"}, {"other": "yes"}, ["yes"]])
def test_project_trust_anything_else_is_an_error(result):
    with pytest.raises(hk.HandlerResultError):
        apply_one("project_trust", {}, result)


# --- transactions ---------------------------------------------------------------------

TRANSACTIONS = [
    "session_before_switch",
    "session_before_fork",
    "session_before_tree",
    "session_before_compact",
]


@pytest.mark.parametrize("event", TRANSACTIONS)
def test_transaction_keeps_the_last_result_without_cancel(event):
    state, calls = fold(event, {}, [{"compaction": {"a": 1}}, {"cancel": False}, None])
    assert state == {"result": {"cancel": False}} and calls == 3
    assert not hk.is_decisive(event, state)


@pytest.mark.parametrize("event", TRANSACTIONS)
def test_transaction_handler_error_cancels_the_operation(event):
    state, calls = fold(event, {}, [{"cancel": False}, RuntimeError("boom"), None])
    assert state == {"result": {"cancel": True, "reason": "boom"}} and calls == 2
    assert hk.is_decisive(event, state)
    hk.check_state(event, state)


def test_project_trust_handler_error_means_no_for_this_run():
    state, calls = fold("project_trust", {}, [None, RuntimeError("boom"), "yes"])
    assert state == {"result": "no"} and calls == 2
    hk.check_state("project_trust", state)


def test_every_known_event_has_a_failure_rule_and_only_notifications_fail_open():
    assert set(hk.ON_FAILURE) == set(hk.KNOWN_EVENTS)
    for event in hk.KNOWN_EVENTS:
        opens = not hk.fails_closed(event)
        assert opens == (hk.kind_of(event) in (hk.NOTIFICATION, hk.COLLECT)), event


def test_transaction_non_mapping_is_an_error():
    with pytest.raises(hk.HandlerResultError):
        apply_one("session_before_fork", {}, "cancel")


# --- check_state ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "state"),
    [
        ("session_start", {"x": 1}),
        ("session_start", []),
        ("tool_call", {"input": {}, "block": False, "reason": None}),
        ("tool_call", {"input": [], "block": False, "reason": None, "terminate": False}),
        ("tool_call", {"input": {}, "block": 1, "reason": "r", "terminate": False}),
        ("tool_call", {"input": {}, "block": True, "reason": None, "terminate": False}),
        ("tool_call", {"input": {}, "block": False, "reason": None, "terminate": True}),
        ("tool_call", {"input": {}, "block": False, "reason": "r", "terminate": False}),
        ("tool_result", {"content": [], "details": {}, "is_error": False}),
        ("tool_result", {"content": "a", "details": {}, "is_error": False, "terminate": False}),
        ("tool_result", {"content": [], "details": None, "is_error": False, "terminate": False}),
        ("tool_result", {"content": [], "details": {}, "is_error": 0, "terminate": False}),
        ("tool_result", {"content": [], "details": {}, "is_error": False, "terminate": "no"}),
        ("input", {"text": "a", "images": []}),
        ("input", {"text": 1, "images": [], "action": "continue"}),
        ("input", {"text": "a", "images": ["x"], "action": "continue"}),
        ("input", {"text": "a", "images": [], "action": "eat"}),
        ("before_agent_start", {"messages": [], "system_prompt": 3}),
        ("before_agent_start", {"messages": ["x"], "system_prompt": None}),
        ("before_agent_start", {"messages": []}),
        ("context", {"messages": [{"content": "x"}]}),
        ("context", {"messages": {}}),
        ("before_provider_request", {"payload": []}),
        ("before_provider_request", {"value": {}}),
        ("message_end", {"message": "x"}),
        ("message_end", {"message": {"role": 2}}),
        ("message_end", {"value": {}}),
        ("user_bash", {"result": "x"}),
        ("project_trust", {"result": "maybe"}),
        ("project_trust", {"result": {"trust": "yes"}}),
        ("session_before_switch", {"result": "x"}),
        ("session_before_switch", {"result": None, "extra": 1}),
        ("resources_discover", {"paths": []}),
        ("resources_discover", {"skill_paths": [1], "prompt_paths": [], "theme_paths": []}),
        ("resources_discover", {"skill_paths": ["a", "a"], "prompt_paths": [], "theme_paths": []}),
        ("resources_discover", {"skill_paths": "a", "prompt_paths": [], "theme_paths": []}),
    ],
)
def test_check_state_rejects_wrong_shapes(event, state):
    with pytest.raises(hk.HandlerResultError):
        hk.check_state(event, state)


@pytest.mark.parametrize(
    ("event", "payload", "results"),
    [
        (
            "tool_call",
            {"input": {"a": 1}},
            [{"input": {"b": 2}}, {"block": True, "terminate": True}],
        ),
        ("tool_call", {"input": {}}, [RuntimeError("x")]),
        ("tool_result", {"content": []}, [{"content": "x", "terminate": True}]),
        ("input", {"text": "a"}, [{"action": "transform", "text": "b"}, {"action": "handled"}]),
        ("before_agent_start", {}, [{"message": {"x": 1}, "system_prompt": "s"}]),
        ("context", {"messages": [{"role": "user"}]}, [{"messages": []}]),
        ("before_provider_request", {"payload": {"a": 1}}, [{"payload": {"b": 2}}]),
        ("message_end", {"message": {"role": "user"}}, [{"message": {"role": "user", "x": 1}}]),
        ("user_bash", {}, [{"result": {"output": ""}}]),
        ("project_trust", {}, ["sandboxed"]),
        ("session_before_compact", {}, [{"cancel": True}]),
        ("resources_discover", {}, [{"skillPaths": ["a"]}]),
    ],
)
def test_check_state_accepts_folded_states(event, payload, results):
    state, _ = fold(event, payload, results)
    hk.check_state(event, state)


# --- check_transition -----------------------------------------------------------------


def test_check_transition_rejects_rewriting_earlier_workers_results():
    before = {"message": {"role": "assistant"}}
    hk.check_transition("message_end", before, {"message": {"role": "assistant", "x": 1}})
    with pytest.raises(hk.HandlerResultError):
        hk.check_transition("message_end", before, {"message": {"role": "user"}})

    before = {"messages": [{"a": 1}], "system_prompt": None}
    hk.check_transition(
        "before_agent_start", before, {"messages": [{"a": 1}, {"b": 2}], "system_prompt": "s"}
    )
    with pytest.raises(hk.HandlerResultError):
        hk.check_transition(
            "before_agent_start", before, {"messages": [{"b": 2}], "system_prompt": None}
        )

    before = {"skill_paths": ["a"], "prompt_paths": [], "theme_paths": []}
    with pytest.raises(hk.HandlerResultError):
        hk.check_transition("resources_discover", before, {**before, "skill_paths": ["b"]})

    before = {"text": "b", "images": [], "action": "transform"}
    with pytest.raises(hk.HandlerResultError):
        hk.check_transition("input", before, {**before, "action": "continue"})

    with pytest.raises(hk.HandlerResultError):
        hk.check_transition("context", {"messages": []}, {"messages": "x"})
