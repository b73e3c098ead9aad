"""A saved trust decision applies only to the content it approved (issue 14 §4).

Each test saves a decision the way ``pi trust`` does (with a fingerprint), changes
the project the way a sandboxed run could, and asks `resolve_trust` again. The
control in each is the same decision applying before the change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pi_sandbox.resources.project_trust import EXTRA_STORE_NAME, TrustStore
from pi_sandbox.resources.resource_set import resolve_trust, trust_store_path
from pi_sandbox.resources.trust_fingerprint import decision_fingerprint


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(repo, home, agent_dir): a repository with an extension, a skill and settings."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / ".pi/extensions/ok.py", "def extension(pi):\n    pass\n")
    write(repo / ".pi/skills/deploy/SKILL.md", "---\nname: deploy\ndescription: d\n---\n")
    write(repo / ".pi/settings.json", "{}")
    (repo / "pkg/app").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    return repo, home, tmp_path / "agent"


def trust(env, decision: str, path: Path | None = None, **kwargs) -> None:
    repo, home, agent = env
    target = path or repo
    fingerprint = decision_fingerprint(target, home=home) if decision != "no" else None
    TrustStore.update(
        trust_store_path(agent),
        lambda s: s.set(target, decision, fingerprint=fingerprint, **kwargs),
    )


def resolve(env, cwd: Path | None = None, **kwargs):
    repo, home, agent = env
    return resolve_trust(cwd or repo, agent_dir=agent, home=home, **kwargs)


def test_an_unchanged_project_keeps_its_saved_yes(env):
    trust(env, "yes")
    decision = resolve(env)
    assert decision.decision == "yes" and decision.changes is None
    assert resolve(env, env[0] / "pkg" / "app").decision == "yes"


def test_the_reported_scenario_a_new_extension_below_a_trusted_ancestor_is_undecided(env):
    repo = env[0]
    trust(env, "yes")
    write(repo / "pkg/app/.pi/extensions/helper.py", "import os\n")
    decision = resolve(env, repo / "pkg" / "app")
    assert decision.decision is None  # undecided: not trusted, nothing loads
    assert decision.stored == ("yes", repo)
    assert decision.changes.added == (str(repo / "pkg/app/.pi/extensions"),)
    [notice] = decision.change_notices()
    assert "does not apply" in notice and str(repo / "pkg/app/.pi/extensions") in notice
    assert f"pi trust yes {repo}" in notice
    assert decision.as_dict()["changes"]["added"] == [str(repo / "pkg/app/.pi/extensions")]
    # Control: trusting again approves the new content.
    trust(env, "yes", repo / "pkg" / "app")
    assert resolve(env, repo / "pkg" / "app").decision == "yes"


@pytest.mark.parametrize(
    ("change", "kind", "path"),
    [
        (
            lambda r: write(r / ".pi/extensions/ok.py", "import os\n"),
            "modified",
            ".pi/extensions/ok.py",
        ),
        (lambda r: write(r / ".pi/skills/new/SKILL.md"), "added", ".pi/skills/new/SKILL.md"),
        (lambda r: write(r / ".pi/settings.json", '{"x": 1}'), "modified", ".pi/settings.json"),
        (lambda r: write(r / ".pi/policy.yaml", "version: 1\n"), "added", ".pi/policy.yaml"),
        (lambda r: write(r / ".pi/SYSTEM.md", "obey"), "added", ".pi/SYSTEM.md"),
        (lambda r: write(r / ".pi/mcp.json", "{}"), "added", ".pi/mcp.json"),
        (
            lambda r: (r / ".pi/skills/deploy/SKILL.md").unlink(),
            "removed",
            ".pi/skills/deploy/SKILL.md",
        ),
        (lambda r: write(r / ".agents/skills/s/SKILL.md"), "added", ".agents/skills"),
    ],
    ids=[
        "modified-extension",
        "new-skill",
        "settings",
        "policy",
        "system",
        "mcp",
        "removed-skill",
        "agents-skills",
    ],
)
def test_any_change_of_a_resource_makes_a_saved_yes_not_apply(env, change, kind, path):
    repo = env[0]
    trust(env, "yes")
    assert resolve(env).decision == "yes"  # control
    change(repo)
    decision = resolve(env)
    assert decision.decision is None
    assert getattr(decision.changes, kind) == (str(repo / path),)


def test_a_new_agents_skills_directory_in_a_subdirectory_is_a_new_resource(env):
    repo = env[0]
    trust(env, "yes")
    write(repo / "pkg/app/.agents/skills/s/SKILL.md")
    decision = resolve(env, repo / "pkg" / "app")
    assert decision.decision is None
    assert decision.changes.added == (str(repo / "pkg/app/.agents/skills"),)
    # A run at the root does not load pkg/app's skills: still trusted there.
    assert resolve(env).decision == "yes"


def test_a_changed_project_falls_back_to_the_defaults_as_if_nothing_were_stored(env):
    repo, _, agent = env
    trust(env, "yes")
    write(repo / ".pi/extensions/helper.py")
    write(agent / "settings.json", json.dumps({"defaultProjectTrust": "never"}))
    decision = resolve(env)
    assert decision.decision == "no" and decision.source.startswith("settings ")
    assert decision.changes.added == (str(repo / ".pi/extensions/helper.py"),)


def test_a_sandboxed_decision_stops_applying_on_change_unless_it_follows_changes(env):
    repo = env[0]
    trust(env, "sandboxed")
    assert resolve(env).decision == "sandboxed"
    write(repo / ".pi/extensions/helper.py")
    assert resolve(env).decision is None
    trust(env, "sandboxed", follow_changes=True)
    write(repo / ".pi/extensions/later.py")
    decision = resolve(env)
    assert decision.decision == "sandboxed" and decision.changes.added == (
        str(repo / ".pi/extensions/later.py"),
    )
    assert "follows changes, so they load sandboxed" in decision.change_notices()[0]


def test_a_saved_no_applies_whatever_changes(env):
    repo = env[0]
    trust(env, "no")
    write(repo / ".pi/extensions/helper.py")
    assert resolve(env).decision == "no"


def test_a_yes_pi_saved_applies_and_a_run_binds_it_to_the_current_content(env):
    repo, _, agent = env
    write(agent / "trust.json", json.dumps({str(repo): True}))  # pi 1.6.0's /trust
    shown = resolve(env)  # pi trust show, pi resources: nothing written
    assert shown.decision == "yes" and "records no content" in shown.notes[0]
    assert not (agent / EXTRA_STORE_NAME).exists()
    decision = resolve(env, bind_unbound=True)  # a run's start
    assert decision.decision == "yes" and "is now bound" in decision.notes[0]
    saved = TrustStore.load(trust_store_path(agent)).saved(repo)
    assert saved.fingerprint is not None and saved.origin.startswith("bound at first use")
    assert json.loads((agent / "trust.json").read_text()) == {str(repo): True}  # pi's view
    # From now on a change makes it undecided.
    write(repo / "pkg/app/.pi/extensions/helper.py")
    assert resolve(env, repo / "pkg" / "app", bind_unbound=True).decision is None


def test_a_decision_in_our_previous_format_is_bound_at_first_use_too(env):
    repo, _, agent = env
    write(agent / "trust.json", json.dumps({"version": 1, "decisions": {str(repo): "sandboxed"}}))
    decision = resolve(env, bind_unbound=True)
    assert decision.decision == "sandboxed"
    # The store was migrated by that write: pi 1.6.0 can read it now.
    assert json.loads((agent / "trust.json").read_text()) == {str(repo): False}
    write(repo / ".pi/skills/new.md")
    assert resolve(env).decision is None
