"""``su`` spellings that hid the command it runs (red team of issue 20, F3): a ``-c``
inside an option cluster, a script given at run time (``xargs su -c``), a shell
that is any program (``su -s /bin/rm``). Each is denied by a deny-``rm`` policy (or
unparseable, which that policy denies); the control puts back the old reading of
su's words, which allowed them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_sandbox.policies import _shell_grammar as grammar
from pi_sandbox.policies import evaluate_tool_call, load_policies

HIDDEN = [
    "su -lc 'rm -rf victim'",
    "su -mc 'rm -rf victim'",
    "printf 'rm -rf victim' | xargs -0 su -c",
    "su -s /bin/rm root -- -rf victim",
    "su -s/bin/rm",
    "su root 'rm -rf victim'",
]
PLAIN = ["su", "su -", "su - root", "su -l root", "su root -c 'ls -l'", "su --help"]


@pytest.fixture
def deny_rm(tmp_path: Path):
    policy = tmp_path / "no-rm.yaml"
    policy.write_text(
        "version: 1\ntool_call:\n  default: allow\n  unparseable: deny\n  rules:\n"
        "    - {id: no-rm, tool: bash, command: [rm], decision: deny, reason: no rm}\n"
    )
    return load_policies([policy])


def decide(policy, workspace: Path, command: str) -> str:
    grammar._cache.clear()
    return evaluate_tool_call(policy, "bash", {"command": command}, workspace=workspace).decision


@pytest.mark.parametrize("command", HIDDEN)
def test_a_hidden_command_of_su_is_not_allowed(deny_rm, tmp_path: Path, command: str) -> None:
    assert decide(deny_rm, tmp_path, command) == "deny"


@pytest.mark.parametrize("command", PLAIN)
def test_plain_uses_of_su_are_still_decided_by_the_rules(deny_rm, tmp_path, command) -> None:
    assert decide(deny_rm, tmp_path, command) == "allow"


def test_control_the_old_reading_of_su_allowed_them(deny_rm, tmp_path: Path, monkeypatch) -> None:
    def old_su_script(argv):
        for i, word in enumerate(argv[1:], start=1):
            if word.text in ("-c", "--command") and i + 1 < len(argv):
                return argv[i + 1]
        return None

    monkeypatch.setattr(grammar, "_su_script", old_su_script)
    allowed = [c for c in HIDDEN if decide(deny_rm, tmp_path, c) == "allow"]
    assert allowed == HIDDEN
    grammar._cache.clear()
