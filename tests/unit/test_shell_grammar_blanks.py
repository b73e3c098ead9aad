"""Carriage return, vertical tab and form feed: characters of a word to bash, blanks
(and backslash-CR-LF a line continuation) to tree-sitter-bash. A command holding one
is unparseable, so the policy's ``unparseable`` decision applies instead of a decision
about commands bash would not run (red team of issue 20, F1).

The attack is shown against real bash (the denied command runs), and the control
switches the check off to show the gate would then allow it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pi_sandbox.policies import _shell_grammar as grammar
from pi_sandbox.policies import evaluate_tool_call, load_policies

REPO = Path(__file__).resolve().parents[2]
UNTRUSTED = REPO / "policies" / "untrusted-repo.yaml"

SPELLINGS = [
    "echo x\r# ; rm -rf victim",
    "echo x\v# ; rm -rf victim",
    "echo x\f# ; rm -rf victim",
    "echo hi \\\r\nrm -rf victim",
]


@pytest.fixture
def deny_rm(tmp_path: Path):
    policy = tmp_path / "no-rm.yaml"
    policy.write_text(
        "version: 1\ntool_call:\n  default: allow\n  unparseable: deny\n  rules:\n"
        "    - {id: no-rm, tool: bash, command: [rm], decision: deny, reason: no rm}\n"
    )
    return load_policies([policy])


@pytest.mark.parametrize("command", SPELLINGS)
def test_bash_runs_the_hidden_rm(tmp_path: Path, command: str) -> None:
    # What the spelling does when nothing stands in the way.
    bash = shutil.which("bash")
    assert bash is not None
    (tmp_path / "victim").mkdir()
    subprocess.run([bash, "-c", command], cwd=tmp_path, capture_output=True, timeout=30)
    assert not (tmp_path / "victim").exists()


@pytest.mark.parametrize("command", SPELLINGS)
def test_a_command_with_such_a_character_is_unparseable_and_denied(
    deny_rm, tmp_path: Path, command: str
) -> None:
    decision = evaluate_tool_call(deny_rm, "bash", {"command": command}, workspace=tmp_path)
    assert decision.decision == "deny", decision
    with pytest.raises(grammar.UnparseableCommand, match="bash reads as part of a word"):
        grammar.parse_command(command)


def test_the_shipped_policy_no_longer_lets_git_push_through(tmp_path: Path) -> None:
    policy = load_policies([UNTRUSTED])
    command = "echo x\r# ; git push origin HEAD:main"
    decision = evaluate_tool_call(policy, "bash", {"command": command}, workspace=tmp_path)
    assert decision.decision in ("ask", "deny"), decision


@pytest.mark.parametrize("command", SPELLINGS)
def test_control_without_the_check_the_gate_allows_it(
    deny_rm, tmp_path: Path, command: str, monkeypatch
) -> None:
    class Never:
        def search(self, text: str) -> None:
            return None

    monkeypatch.setattr(grammar, "_BLANKS_ONLY_TO_THE_GRAMMAR", Never())
    grammar._cache.clear()
    try:
        decision = evaluate_tool_call(deny_rm, "bash", {"command": command}, workspace=tmp_path)
        assert decision.decision == "allow", decision
    finally:
        grammar._cache.clear()
