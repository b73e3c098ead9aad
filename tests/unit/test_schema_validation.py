"""Tool-argument validation cannot be frozen by a backtracking schema pattern."""

import time

from pi_sandbox.supervisor.agent.schema_validation import validator_for

EVIL = "^(a|a)+$"


def messages(schema, instance):
    return [e.message for e in validator_for(schema).iter_errors(instance)]


def test_a_backtracking_pattern_times_out_into_a_validation_error():
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": EVIL}}}
    # CPU seconds of this process, not the wall clock: the regex module's timeout
    # counts CPU time too, and a saturated machine stretches the wall clock several
    # times over (issue 13 §7). Unbounded, this search would not end for years.
    start = time.process_time()
    errors = messages(schema, {"x": "a" * 40 + "!"})
    assert time.process_time() - start < 3
    assert errors and "in time" in errors[0]


def test_patterns_still_match_and_fail_as_usual():
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^[a-z]+$"}}}
    assert messages(schema, {"x": "abc"}) == []
    assert "does not match" in messages(schema, {"x": "ABC"})[0]


def test_pattern_properties_and_additional_properties_are_bounded_too():
    schema = {
        "type": "object",
        "patternProperties": {EVIL: {"type": "integer"}},
        "additionalProperties": False,
    }
    start = time.process_time()  # CPU seconds: see the test above
    errors = messages(schema, {"a" * 40 + "!": 1})
    assert time.process_time() - start < 3
    assert any("in time" in e for e in errors)
    ok = {
        "type": "object",
        "patternProperties": {"^n_": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert messages(ok, {"n_1": 1}) == []
    assert messages(ok, {"n_1": "x"})  # wrong type under a matching pattern
    assert "not allowed" in messages(ok, {"other": 1})[0]
