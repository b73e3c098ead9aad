"""The faster gate decides exactly as the gate did before it (issue 20 target 4).

``policy_decision_corpus`` holds ~7,300 calls and the decisions and parses recorded
before the speed-up; every one must come out the same: effect, rule, reason, tier,
file, unparseable flag and the per-command breakdown, for the 200-rule benchmark
policy and the shipped presets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import policy_decision_corpus as corpus_module
import pytest
from policy_decision_corpus import (
    CORPUS_HOME,
    build_workspace,
    commands_of,
    decide_all,
    load_corpus,
    parse_record,
)


@pytest.fixture(scope="module")
def corpus() -> dict[str, Any]:
    return load_corpus()


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HOME", CORPUS_HOME)
    ws = build_workspace(tmp_path)
    monkeypatch.chdir(ws)
    yield ws


def _first_differences(
    recorded: list[Any], now: list[Any], calls: list[Any], limit: int = 5
) -> list[str]:
    out = []
    for index, (old, new) in enumerate(zip(recorded, now, strict=True)):
        if old != new:
            out.append(
                f"call {index} {calls[index]!r:.300}:\n  was {old!r:.600}\n  now {new!r:.600}"
            )
            if len(out) >= limit:
                break
    return out


def test_every_recorded_command_parses_to_the_same_simple_commands(
    corpus: dict[str, Any],
) -> None:
    differences = [
        f"{text!r:.200}:\n  was {old:.400}\n  now {new:.400}"
        for text, old in corpus["parses"].items()
        if (new := parse_record(text)) != old
    ]
    assert not differences, f"{len(differences)} parses changed:\n" + "\n".join(differences[:5])


def test_every_recorded_call_gets_the_same_decision_under_each_policy(
    corpus: dict[str, Any], workspace: Path
) -> None:
    calls = corpus["calls"]
    now = decide_all(calls, workspace)
    assert sorted(now) == sorted(corpus["decisions"])
    for name, recorded in corpus["decisions"].items():
        differences = _first_differences(recorded, now[name], calls)
        assert not differences, f"{name}: decisions changed:\n" + "\n".join(differences)


def test_a_second_decision_of_the_same_call_is_the_first_one(
    corpus: dict[str, Any], workspace: Path
) -> None:
    # Whatever is cached across calls (compiled plans, parses) gives what a
    # first decision gives, in any order of the calls.
    calls = list(reversed(corpus["calls"][:1500]))
    first = decide_all(calls, workspace)
    second = decide_all(calls, workspace)
    assert first == second


def test_the_corpus_covers_each_kind_of_call(corpus: dict[str, Any]) -> None:
    calls = corpus["calls"]
    tools = {tool for tool, _ in calls}
    assert {"bash", "read", "write", "edit", "ls", "grep", "find"} <= tools
    parses = corpus["parses"]
    assert len(commands_of(calls)) == len(parses) > 2500
    unparseable = sum(value.startswith("UNPARSEABLE") for value in parses.values())
    assert 100 < unparseable < len(parses) / 2
    assert len(corpus_module.policy_files()) == 4
    assert os.path.basename(corpus_module.CORPUS_FILE) == "corpus.json.xz"
