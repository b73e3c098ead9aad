"""Saving a trust decision (the trust prompt and ``/trust --save`` share one path):
pi's ``trust.json`` and our fingerprinted record are written, and a store that cannot be
written is an error naming the caller's action and the reason (issue 14 §4)."""

from __future__ import annotations

import json

import pytest
import trio

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.modes.run import RunOptions, _save_trust_decision


@pytest.fixture
def options(tmp_path):
    project = tmp_path / "proj"
    (project / ".pi" / "skills" / "deploy").mkdir(parents=True)
    (project / ".pi" / "skills" / "deploy" / "SKILL.md").write_text(
        "---\nname: deploy\ndescription: d\n---\nbody\n"
    )
    (tmp_path / "agent").mkdir()
    return RunOptions(message="", cwd=project, agent_dir=tmp_path / "agent", home=tmp_path / "home")


def test_a_saved_yes_is_stored_with_the_fingerprint_of_what_it_approves(options):
    trio.run(lambda: _save_trust_decision(options, "yes", failure="saving"))
    assert json.loads((options.agent_dir / "trust.json").read_text()) == {str(options.cwd): True}
    records = json.loads((options.agent_dir / "pi-sandbox-trust.json").read_text())
    record = records["decisions"][str(options.cwd)]
    assert record["decision"] == "yes" and record["fingerprint"]["resources"]


def test_a_saved_no_has_no_fingerprint(options):
    trio.run(lambda: _save_trust_decision(options, "no", failure="saving"))
    records = json.loads((options.agent_dir / "pi-sandbox-trust.json").read_text())
    assert records["decisions"][str(options.cwd)]["decision"] == "no"
    assert not records["decisions"][str(options.cwd)].get("fingerprint")


def test_a_store_that_cannot_be_written_names_the_action_and_the_reason(options):
    (options.agent_dir / "trust.json").mkdir()  # not a file: neither read nor replaced
    with pytest.raises(UsageError, match=r"^/trust --save: cannot update the trust store: "):
        trio.run(
            lambda: _save_trust_decision(
                options, "yes", failure="/trust --save: cannot update the trust store"
            )
        )
