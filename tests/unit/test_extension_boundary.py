"""Issue 13 §4: values an extension hands the supervisor are checked against pi's
message schemas and bounded (``pi_sandbox.supervisor.boundary``), and the
``extensions.limits`` policy keys combine so a lower tier only tightens its own."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest

from pi_sandbox.policies import LoadedPolicyFile, PolicyFile, build_policy
from pi_sandbox.policies._extension_limits import (
    LIMIT_DEFAULTS,
    ExtensionLimits,
    ExtensionLimitsSection,
    LimitRules,
)
from pi_sandbox.protocol.hook_kinds import HandlerResultError
from pi_sandbox.supervisor.boundary import (
    ExtensionBudgets,
    LimitExceededError,
    MessageRefusedError,
    check_agent_message,
    check_bus_message,
    check_entry,
    check_handler_state,
    check_ui_call,
    custom_message_from,
    user_message_from,
)
from pi_sandbox.supervisor.boundary.extension_values import check_handler_result

LIMITS = ExtensionLimits()


# --- pi's message schema --------------------------------------------------------------------

VALID_MESSAGES = [
    {"role": "user", "content": "hi", "timestamp": 1},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "user", "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "ok", "textSignature": "sig"},
            {"type": "thinking", "thinking": "hm"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}},
        ],
        "provider": "scripted",
        "model": "scripted",
        "usage": {},
        "stopReason": "toolUse",
        "timestamp": 2,
    },
    {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "read",
        "content": [{"type": "text", "text": "x"}],
        "isError": False,
        "details": {"anything": [1, 2]},
    },
    {"role": "custom", "customType": "x", "content": "note", "display": False, "details": None},
    {"role": "bashExecution", "command": "ls", "output": "", "exitCode": None, "cancelled": False},
    {"role": "compactionSummary", "summary": "s", "tokensBefore": 3, "timestamp": "2026-01-01"},
    {"role": "branchSummary", "summary": "s", "fromId": None},
    {"role": "system", "content": "be brief"},
]


@pytest.mark.parametrize("message", VALID_MESSAGES, ids=lambda m: m["role"])
def test_every_pi_message_role_in_its_documented_shape_is_accepted(message):
    check_agent_message(message, where="m")


INVALID_MESSAGES = [
    ({"role": "custom", "customType": "x", "content": 5}, "m.content: expected a string"),
    ({"role": "user", "content": [{"type": "text", "text": 1}]}, "m.content[0].text"),
    ({"role": "user", "content": [{"type": "image", "data": "x"}]}, "m.content[0].mimeType"),
    ({"role": "user", "content": [{"type": "video"}]}, "m.content[0]"),
    ({"role": "user", "content": None}, "m.content"),
    ({"role": "assistant", "content": "text"}, "m.content"),
    (
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "a", "name": "b", "arguments": []}],
        },
        "m.content[0].arguments",
    ),
    ({"role": "toolResult", "toolName": "x", "content": []}, "m.toolCallId"),
    (
        {"role": "toolResult", "toolCallId": "c", "toolName": "x", "content": [], "isError": 1},
        "isError",
    ),
    ({"role": "custom", "customType": "x", "content": "", "display": "yes"}, "m.display"),
    ({"role": "bashExecution", "command": "ls", "output": 3}, "m.output"),
    ({"role": "compactionSummary", "summary": ["s"]}, "m.summary"),
    ({"role": "hacker", "content": "x"}, "unknown role"),
    ({"content": "x"}, "string role"),
    ("a string", "must be an object"),
    (5, "must be an object"),
]


@pytest.mark.parametrize(("message", "names"), INVALID_MESSAGES)
def test_a_message_off_the_pi_schema_is_refused_naming_the_field(message, names):
    with pytest.raises(MessageRefusedError, match=None) as caught:
        check_agent_message(message, where="m")
    assert names in str(caught.value)


def test_a_session_file_may_keep_a_role_an_augmented_pi_added():
    check_agent_message({"role": "artifact", "body": 1}, where="m", allow_unknown_role=True)
    with pytest.raises(MessageRefusedError):
        check_agent_message({"role": 5}, where="m", allow_unknown_role=True)


# --- send_message, send_user_message, append_entry, bus, ui --------------------------------


def test_send_message_with_a_numeric_content_is_refused_before_anything_is_built():
    with pytest.raises(MessageRefusedError, match=r"message\.content: expected a string"):
        custom_message_from(
            {"custom_type": "x", "content": 5}, LIMITS, where="message", timestamp=1
        )


def test_a_well_formed_send_message_becomes_pis_custom_message():
    built = custom_message_from(
        {"custom_type": "note", "content": "hello", "details": {"k": 1}},
        LIMITS,
        where="message",
        timestamp=7,
    )
    assert built == {
        "role": "custom",
        "customType": "note",
        "content": [{"type": "text", "text": "hello"}],
        "display": True,
        "details": {"k": 1},
        "timestamp": 7,
    }


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ({"content": "x", "colour": "red"}, "unknown key 'colour'"),
        ({"custom_type": 5, "content": "x"}, "custom_type: expected a string"),
        ({"custom_type": "x" * 129, "content": "x"}, "custom_type: 129 characters"),
        ({"content": "x", "display": 1}, "display: expected a boolean"),
        ({"content": "x", "role": "user"}, "role 'custom'"),
        ({"content": [{"type": "text"}]}, "content[0].text"),
        ([1, 2], "expected an object"),
    ],
)
def test_send_message_refuses_each_malformed_field(message, names):
    with pytest.raises(MessageRefusedError) as caught:
        custom_message_from(message, LIMITS, where="message", timestamp=1)
    assert names in str(caught.value)


def test_a_message_over_message_bytes_is_refused_naming_the_policy_key():
    small = ExtensionLimits(message_bytes=1024)
    custom_message_from({"content": "x" * 800}, small, where="message", timestamp=1)
    with pytest.raises(MessageRefusedError, match=r"extensions\.limits\.message_bytes"):
        custom_message_from({"content": "x" * 2000}, small, where="message", timestamp=1)
    with pytest.raises(MessageRefusedError, match=r"extensions\.limits\.message_bytes"):
        user_message_from("x" * 2000, small, where="message", timestamp=1)
    with pytest.raises(MessageRefusedError, match="expected a string"):
        user_message_from(5, small, where="message", timestamp=1)


def test_append_entry_data_over_entry_bytes_is_refused_and_its_size_is_returned_below():
    small = ExtensionLimits(entry_bytes=1024)
    assert check_entry("state", {"n": 1}, small) == len(b'{"n": 1}')
    with pytest.raises(MessageRefusedError, match=r"extensions\.limits\.entry_bytes"):
        check_entry("state", "A" * 2000, small)
    with pytest.raises(MessageRefusedError, match="custom_type: expected a string"):
        check_entry(["x"], None, small)
    with pytest.raises(MessageRefusedError, match="must not be empty"):
        check_entry("", None, small)


def test_a_bus_message_over_bus_bytes_is_refused():
    check_bus_message({"ok": True}, LIMITS)
    with pytest.raises(MessageRefusedError, match=r"extensions\.limits\.bus_bytes"):
        check_bus_message("A" * (LIMITS.bus_bytes + 1), LIMITS)


@pytest.mark.parametrize(
    ("kind", "args", "names"),
    [
        ("notify", {"message": "x", "level": "fatal"}, "info, warning or error"),
        ("notify", {"message": "x" * 5000, "level": "info"}, "extensions.limits.text_chars"),
        ("notify", {"message": "x", "level": "info", "html": "<b>"}, "unknown argument 'html'"),
        ("set_status", {"key": 3, "text": "x"}, "key: expected a string"),
        ("set_status", {"key": "k", "text": 3}, "text: expected a string or null"),
        ("set_widget", {"key": "k", "lines": ["x"] * 201}, "extensions.limits.widget_lines"),
        ("set_widget", {"key": "k", "lines": "one"}, "expected a list of strings"),
        ("set_widget", {"key": "k", "lines": [1]}, "lines[0]: expected a string"),
        ("select", {"title": "t", "options": None}, "expected a list of strings"),
        ("explode", {}, "unknown dialog"),
    ],
)
def test_ui_calls_are_checked_field_by_field(kind, args, names):
    with pytest.raises(MessageRefusedError) as caught:
        check_ui_call(kind, args, LIMITS)
    assert names in str(caught.value)


def test_well_formed_ui_calls_pass_unchanged():
    for kind, args in [
        ("notify", {"message": "hi", "level": "warning"}),
        ("set_status", {"key": "k", "text": None}),
        ("set_widget", {"key": "k", "lines": ["a", "b"]}),
        ("select", {"title": "t", "options": ["a"]}),
        ("confirm", {"title": "t", "message": "m"}),
        ("input", {"title": "t", "placeholder": ""}),
        ("editor", {"title": "t", "prefill": "p"}),
    ]:
        assert check_ui_call(kind, args, LIMITS) == args


# --- chained handler results ------------------------------------------------------------


BAD_STATES = [
    (
        "context",
        {
            "messages": [
                {"role": "user", "content": "ok"},
                {"role": "custom", "customType": "x", "content": 5},
            ]
        },
        "context: messages[1].content",
    ),
    ("context", {"messages": [{"role": "toolResult", "content": []}]}, "messages[0].toolCallId"),
    (
        "before_provider_request",
        {"payload": {"messages": [{"role": "user", "content": {}}]}},
        "payload.messages[0].content",
    ),
    (
        "message_end",
        {"message": {"role": "assistant", "content": 5}},
        "message_end: message.content",
    ),
    (
        "before_agent_start",
        {"messages": [{"content": 5}], "system_prompt": None},
        "before_agent_start: messages[0].content",
    ),
    (
        "before_agent_start",
        {"messages": [{"content": "x"}] * 101, "system_prompt": None},
        "more than 100",
    ),
    (
        "input",
        {"text": "x", "images": [{"type": "text", "text": "x"}], "action": "transform"},
        "must be an image block",
    ),
    (
        "input",
        {"text": "x", "images": [{"type": "image"}], "action": "transform"},
        "input: images[0].data",
    ),
    (
        "tool_result",
        {
            "content": [{"type": "text", "text": 5}],
            "details": {},
            "is_error": False,
            "terminate": False,
        },
        "tool_result: content[0].text",
    ),
]


@pytest.mark.parametrize(
    ("event", "state", "names"),
    BAD_STATES,
    ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(BAD_STATES)],
)
def test_a_chained_handler_state_off_the_schema_is_refused(event, state, names):
    with pytest.raises(MessageRefusedError) as caught:
        check_handler_state(event, state, LIMITS)
    assert names in str(caught.value)


def test_well_formed_chained_states_pass():
    check_handler_state("context", {"messages": VALID_MESSAGES}, LIMITS)
    check_handler_state("message_end", {"message": VALID_MESSAGES[3]}, LIMITS)
    check_handler_state(
        "before_agent_start",
        {"messages": [{"custom_type": "a", "content": "b"}], "system_prompt": None},
        LIMITS,
    )
    check_handler_state(
        "tool_result", {"content": [], "details": {}, "is_error": False, "terminate": False}, LIMITS
    )
    check_handler_state("turn_end", {"anything": 5}, LIMITS)  # notifications: nothing to check


def test_a_refused_handler_result_is_audited_and_raised_as_a_handler_failure():
    records: list[dict[str, Any]] = []
    pool = SimpleNamespace(config=SimpleNamespace(extension_rules=None), audit=records.append)
    source = SimpleNamespace(path=Path("/p/.pi/extensions/bad.py"), origin="project")
    with pytest.raises(HandlerResultError, match=r"refused: context: messages\[0\]\.content"):
        check_handler_result(
            pool,
            source,
            "context",
            {"messages": [{"role": "custom", "customType": "x", "content": 5}]},
        )
    assert records == [
        {
            "event": "extension",
            "action": "value_refused",
            "extension": "/p/.pi/extensions/bad.py",
            "op": "context",
            "reason": records[0]["reason"],
        }
    ]
    check_handler_result(pool, source, "context", {"messages": []})  # control
    assert len(records) == 1


# --- rates, session budgets, strikes ------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_rate_allows_its_burst_then_refuses_until_tokens_come_back():
    clock = FakeClock()
    rules = LimitRules(shared=ExtensionLimits(writes_per_s=2, writes_burst=3))
    budgets = ExtensionBudgets(rules, clock=clock)
    path = Path("/x.py")
    for _ in range(3):
        budgets.take(path, "user", "writes")
    with pytest.raises(LimitExceededError, match=r"extensions\.limits\.writes_per_s"):
        budgets.take(path, "user", "writes")
    clock.now += 0.5  # one token at 2 a second
    budgets.take(path, "user", "writes")
    with pytest.raises(LimitExceededError):
        budgets.take(path, "user", "writes")
    budgets.take(Path("/other.py"), "user", "writes")  # each extension has its own bucket


def test_session_budgets_refuse_past_entries_and_bytes_without_charging():
    rules = LimitRules(shared=ExtensionLimits(session_entries=3, session_bytes=2048))
    budgets = ExtensionBudgets(rules)
    path = Path("/x.py")
    budgets.charge(path, "user", 1000)
    budgets.charge(path, "user", 1000)
    with pytest.raises(LimitExceededError, match=r"extensions\.limits\.session_bytes"):
        budgets.charge(path, "user", 100)
    budgets.charge(path, "user", 48)  # the refused write was not charged
    with pytest.raises(LimitExceededError, match=r"extensions\.limits\.session_entries"):
        budgets.charge(path, "user", 0)
    budgets.begin_session("s1")  # a new session: the budget starts over
    budgets.charge(path, "user", 2000)


def test_the_shared_session_total_refuses_without_a_strike():
    rules = LimitRules(shared=ExtensionLimits(session_bytes_total=2048))
    budgets = ExtensionBudgets(rules)
    budgets.charge(Path("/flooder.py"), "project", 2000)
    with pytest.raises(LimitExceededError) as caught:
        budgets.charge(Path("/guard.py"), "user", 100)
    assert caught.value.strike is False
    assert "session_bytes_total" in str(caught.value)


def test_strikes_reach_the_limit_and_start_over_with_the_session():
    rules = LimitRules(shared=ExtensionLimits(strikes=3))
    budgets = ExtensionBudgets(rules)
    path = Path("/x.py")
    budgets.begin_session("a")
    assert [budgets.strike(path, "user") for _ in range(3)] == [False, False, True]
    budgets.begin_session("a")  # the same session (a reload): strikes stay
    assert budgets.strikes(path) == 3
    budgets.begin_session("b")
    assert budgets.strikes(path) == 0


# --- policy: extensions.limits --------------------------------------------------------------


def policy(*files: tuple[str, dict[str, Any]]):
    loaded = [
        LoadedPolicyFile(
            tier=tier,  # type: ignore[arg-type]
            path=Path(f"/{tier}-{index}.yaml"),
            file=PolicyFile.model_validate({"version": 1, "extensions": {"limits": limits}}),
        )
        for index, (tier, limits) in enumerate(files)
    ]
    return build_policy(loaded)


def test_without_a_policy_every_limit_has_its_documented_default():
    rules = policy().extensions.limits
    assert rules.shared == rules.project == ExtensionLimits()
    assert LIMIT_DEFAULTS["session_bytes"] == 32 * 1024 * 1024
    assert set(LIMIT_DEFAULTS) == set(ExtensionLimitsSection.model_fields)


def test_managed_and_user_limits_apply_to_everyone_and_the_smallest_wins():
    built = policy(
        ("managed", {"entry_bytes": 4096, "strikes": 5}),
        ("user", {"entry_bytes": 8192, "strikes": 2}),
    )
    limits = built.extensions.limits
    assert limits.shared.entry_bytes == 4096  # the user cannot raise the organisation's ceiling
    assert limits.shared.strikes == 2  # ...but may lower it
    assert limits.for_origin("user") == limits.for_origin("cli") == limits.shared
    assert limits.project.entry_bytes == 4096
    keys = {o.key: o.tier for o in built.provenance if o.key.startswith("extensions.limits")}
    assert keys == {"extensions.limits.entry_bytes": "managed", "extensions.limits.strikes": "user"}


def test_a_managed_file_may_raise_a_default():
    limits = policy(("managed", {"entry_bytes": 4 * 1024 * 1024})).extensions.limits
    assert limits.shared.entry_bytes == 4 * 1024 * 1024


def test_a_project_policy_only_lowers_limits_and_only_for_project_extensions():
    built = policy(
        ("user", {"strikes": 10}),
        (
            "project",
            {"strikes": 1, "entry_bytes": 64 * 1024 * 1024 // 16, "session_bytes_total": 2048},
        ),
    )
    limits = built.extensions.limits
    assert limits.shared.strikes == 10  # the user's own extensions keep the user's value
    assert limits.project.strikes == 1
    assert limits.project.entry_bytes == ExtensionLimits().entry_bytes  # raising: ignored
    assert (
        limits.shared.session_bytes_total
        == limits.project.session_bytes_total
        == ExtensionLimits().session_bytes_total
    )
    assert any(
        "entry_bytes: 4194304 ignored: a project policy can only lower" in d
        for d in built.diagnostics
    )
    assert any(
        "session_bytes_total ignored: it governs every extension" in d for d in built.diagnostics
    )


@pytest.mark.parametrize(
    "limits",
    [
        {"entry_bytes": True},
        {"entry_bytes": "1"},
        {"entry_bytes": 1},
        {"strikes": 0},
        {"burst": 3},
        {"writes_per_s": 1.5},
    ],
)
def test_a_malformed_limit_is_a_policy_error(limits):
    with pytest.raises(pydantic.ValidationError):
        PolicyFile.model_validate({"version": 1, "extensions": {"limits": limits}})
