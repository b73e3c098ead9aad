"""Session and JSON-mode lines stay strict JSON whatever untrusted data holds."""

import json

from pi_sandbox.supervisor.json_lines import dumps_line, has_non_finite


def test_non_finite_numbers_are_written_as_null():
    line = dumps_line({"a": [1.0, float("inf"), float("nan")], "b": 2})
    assert json.loads(line) == {"a": [1.0, None, None], "b": 2}
    assert "Infinity" not in line and "NaN" not in line


def test_a_lone_surrogate_becomes_an_escape_and_the_line_encodes_as_utf8():
    line = dumps_line({"text": "x\ud800y", "ok": "é"})
    line.encode("utf-8")  # must not raise
    assert json.loads(line) == {"text": "x\ud800y", "ok": "é"}


def test_has_non_finite_looks_inside_nested_structures():
    assert has_non_finite({"a": [{"b": float("-inf")}]})
    assert not has_non_finite({"a": [1, 2.5, "inf"]})
