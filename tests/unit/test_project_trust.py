"""Trust-requiring project resources and the trust store (issue 6 groundwork, case 7)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pi_sandbox.resources.project_trust import (
    TrustStore,
    TrustStoreError,
    has_trust_requiring_resources,
    trust_requiring_resources,
)


def test_a_project_without_resources_needs_no_decision(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text("hi")
    (tmp_path / ".pi").mkdir()  # an empty .pi is nothing to trust
    assert not has_trust_requiring_resources(tmp_path)


@pytest.mark.parametrize(
    "relative",
    [
        ".pi/settings.json",
        ".pi/extensions/evil.py",
        ".pi/skills/x/SKILL.md",
        ".pi/prompts/p.md",
        ".pi/SYSTEM.md",
        ".pi/APPEND_SYSTEM.md",
        ".pi/policy.yaml",
        ".pi/mcp.json",
        ".mcp.json",
        ".claude/settings.json",
    ],
)
def test_each_project_resource_needs_a_decision(tmp_path, relative):
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    assert has_trust_requiring_resources(tmp_path)


def test_a_dangling_symlink_counts_as_present(tmp_path):
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "extensions").symlink_to(tmp_path / "nowhere")
    assert trust_requiring_resources(tmp_path) == [tmp_path / ".pi" / "extensions"]


def test_ancestor_agents_skills_count_up_to_the_git_root_but_not_the_users_own(tmp_path):
    home = tmp_path / "home"
    repo = home / "work" / "repo"
    cwd = repo / "packages" / "app"
    cwd.mkdir(parents=True)
    (repo / ".git").mkdir()
    for directory in (repo, home / "work", home):
        (directory / ".agents" / "skills").mkdir(parents=True)
    found = trust_requiring_resources(cwd, home=home)
    # The repository's own counts; above the git root (and the user's own) do not.
    assert found == [repo / ".agents" / "skills"]
    (cwd / ".agents" / "skills").mkdir(parents=True)
    assert trust_requiring_resources(cwd, home=home) == [
        cwd / ".agents" / "skills",
        repo / ".agents" / "skills",
    ]


def test_outside_a_repository_only_the_working_directory_is_looked_at(tmp_path, monkeypatch):
    # (This machine's /tmp may itself be inside a repository: pretend there is none.)
    from pi_sandbox.resources import project_trust

    monkeypatch.setattr(project_trust, "_git_root", lambda start: None)
    (tmp_path / ".agents" / "skills").mkdir(parents=True)
    cwd = tmp_path / "project"
    cwd.mkdir()
    assert not has_trust_requiring_resources(cwd)


def test_case_7_a_decision_applies_below_and_the_nearest_one_wins(tmp_path):
    store = TrustStore(tmp_path / "agent" / "trust.json")
    store.set(Path("/a"), "yes")
    assert store.decision_for(Path("/a/b/c")) == ("yes", Path("/a"))
    store.set(Path("/a/b"), "no")
    assert store.decision_for(Path("/a/b/c")) == ("no", Path("/a/b"))
    assert store.decision_for(Path("/a/x")) == ("yes", Path("/a"))
    assert store.decision_for(Path("/elsewhere")) is None
    assert store.forget(Path("/a/b")) and not store.forget(Path("/a/b"))
    assert store.decision_for(Path("/a/b/c")) == ("yes", Path("/a"))


def test_the_store_is_written_atomically_and_privately_and_read_back(tmp_path):
    path = tmp_path / "agent" / "trust.json"
    store = TrustStore(path)
    store.set(Path("/p/q"), "sandboxed")
    store.save()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"version": 1, "decisions": {"/p/q": "sandboxed"}}
    assert TrustStore.load(path).decision_for(Path("/p/q/r")) == ("sandboxed", Path("/p/q"))
    assert [p.name for p in path.parent.iterdir()] == ["trust.json"]  # no temporary left


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"decisions": []}', "decisions"),
        ('{"decisions": {"relative/path": "yes"}}', "absolute path"),
        ('{"decisions": {"/a": "maybe"}}', "yes, no, sandboxed"),
    ],
)
def test_a_malformed_store_is_an_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "trust.json"
    path.write_text(content)
    with pytest.raises(TrustStoreError, match=message) as error:
        TrustStore.load(path)
    assert str(path) in str(error.value)


def test_a_store_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trust.json"
    os.mkfifo(fifo)
    with pytest.raises(TrustStoreError, match="regular file"):
        TrustStore.load(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(TrustStoreError):
        TrustStore.load(link)
    assert TrustStore.load(tmp_path / "missing.json").decisions == {}
