"""Fingerprints of trust-requiring resources (issue 14 §4): what they cover, what
changes them, and their bounds (no symlink followed out, no FIFO read, budgets)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from pi_sandbox.resources import trust_fingerprint
from pi_sandbox.resources.trust_fingerprint import (
    MAX_ENTRIES_PER_RESOURCE,
    Fingerprint,
    ResourceChanges,
    candidate_resources,
    compare,
    decision_fingerprint,
    digest_resource,
    resources_below,
    run_fingerprint,
    snapshot_changes,
    workspace_snapshot,
)


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    write(root / ".pi/extensions/ok.py", "def extension(pi):\n    pass\n")
    write(root / ".pi/skills/deploy/SKILL.md", "---\nname: deploy\ndescription: d\n---\n")
    write(root / ".pi/settings.json", '{"extensions": ["../tools/ext.py"]}')
    write(root / "tools/ext.py", "def extension(pi):\n    pass\n")
    (root / "pkg/app").mkdir(parents=True)
    return root


def test_the_entry_budget_is_the_skill_loaders_per_source_scan_budget():
    from pi_sandbox.resources.skills import DEFAULT_MAX_ENTRIES

    assert MAX_ENTRIES_PER_RESOURCE == DEFAULT_MAX_ENTRIES


def test_candidates_are_what_a_run_would_load_including_settings_paths_inside_the_project(
    tmp_path, repo
):
    home = tmp_path / "home"
    write(repo / ".pi/settings.json", '{"extensions": ["../tools/ext.py", "/etc/passwd"]}')
    cwd = repo / "pkg" / "app"
    candidates = candidate_resources(cwd, home=home)
    assert cwd / ".pi" / "extensions" in candidates
    assert cwd / ".agents" / "skills" in candidates
    assert repo / "pkg" / ".agents" / "skills" in candidates  # ancestors to the git root
    assert repo / ".pi" / "extensions" in candidates  # the root's own resources
    assert repo / "tools" / "ext.py" in candidates  # named by the root's settings
    assert Path("/etc/passwd") not in candidates  # outside the project: the loaders refuse it
    assert tmp_path / ".agents" / "skills" not in candidates  # above the git root


def test_the_same_content_gives_the_same_digest_and_any_change_another(repo):
    extensions = repo / ".pi" / "extensions"
    first = digest_resource(extensions, confine=repo)
    assert first is not None and first.complete
    assert digest_resource(extensions, confine=repo) == first
    write(extensions / "ok.py", "def extension(pi):\n    import os\n")
    modified = digest_resource(extensions, confine=repo)
    assert modified.digest != first.digest
    write(extensions / "ok.py", "def extension(pi):\n    pass\n")
    assert digest_resource(extensions, confine=repo).digest == first.digest
    write(extensions / "helper.py")
    assert digest_resource(extensions, confine=repo).digest != first.digest


def test_an_absent_resource_or_an_empty_directory_has_no_digest(tmp_path):
    assert digest_resource(tmp_path / "missing", confine=tmp_path) is None
    (tmp_path / "empty").mkdir()
    assert digest_resource(tmp_path / "empty", confine=tmp_path) is None


def test_a_symlink_inside_the_project_is_followed_and_one_leading_out_is_not(tmp_path, repo):
    outside = write(tmp_path / "outside" / "secret.md", "secret one")
    inside = write(repo / "docs" / "skill.md", "v1")
    skills = repo / ".agents" / "skills"
    skills.mkdir(parents=True)
    (skills / "in.md").symlink_to(inside)
    (skills / "out.md").symlink_to(outside)
    before = digest_resource(skills, confine=repo)
    outside.write_text("secret two")  # content out of the project is not ours to hash
    assert digest_resource(skills, confine=repo) == before
    inside.write_text("v2")  # content the loaders follow to is covered
    assert digest_resource(skills, confine=repo).digest != before.digest
    (skills / "out.md").unlink()
    (skills / "out.md").symlink_to(tmp_path / "elsewhere.md")  # the link itself is covered
    assert digest_resource(skills, confine=repo).digest != before.digest


def test_a_symlink_loop_is_recorded_once_and_ends(repo):
    skills = repo / ".pi" / "skills"
    (skills / "loop").symlink_to(skills)
    digest = digest_resource(skills, confine=repo)
    assert digest is not None and digest.complete


def test_a_fifo_is_recorded_without_being_opened_so_nothing_blocks(repo):
    os.mkfifo(repo / ".pi" / "skills" / "pipe.md")

    async def measure():
        with trio.fail_after(10):  # a blocked open would never return
            return await trio.to_thread.run_sync(
                lambda: digest_resource(repo / ".pi" / "skills", confine=repo),
                abandon_on_cancel=True,
            )

    digest = trio.run(measure)
    assert digest is not None and digest.complete
    assert "pipe.md" in digest.files


def test_too_many_entries_make_a_resource_unverifiable(repo):
    skills = repo / ".pi" / "skills"
    for i in range(30):
        write(skills / f"s{i}.md")
    digest = digest_resource(skills, confine=repo, max_entries=10)
    assert digest is not None and not digest.complete and "more than 10 entries" in digest.problem
    saved = Fingerprint({str(skills): digest})
    changes = compare(saved, saved, [skills])
    assert changes.unverifiable == (str(skills),)  # never matches, even itself


def test_a_file_past_the_byte_bound_is_not_read_and_makes_it_unverifiable(repo, monkeypatch):
    monkeypatch.setattr(trust_fingerprint, "MAX_FILE_BYTES", 100)
    write(repo / ".pi" / "extensions" / "big.py", "x" * 1000)
    digest = digest_resource(repo / ".pi" / "extensions", confine=repo)
    assert not digest.complete and "big.py" in digest.problem


def test_compare_reports_added_removed_and_modified_files(tmp_path, repo):
    home = tmp_path / "home"
    saved = decision_fingerprint(repo, home=home)
    write(repo / ".pi/extensions/helper.py")
    write(repo / ".pi/extensions/ok.py", "changed")
    (repo / ".pi/skills/deploy/SKILL.md").unlink()
    write(repo / ".pi/skills/deploy/other.md")
    current, candidates = run_fingerprint(repo, home=home)
    changes = compare(saved, current, candidates)
    assert changes.added == (
        str(repo / ".pi/extensions/helper.py"),
        str(repo / ".pi/skills/deploy/other.md"),
    )
    assert changes.removed == (str(repo / ".pi/skills/deploy/SKILL.md"),)
    assert changes.modified == (str(repo / ".pi/extensions/ok.py"),)
    assert "added: " in changes.summary() and "modified: " in changes.summary()


def test_a_file_named_by_project_settings_is_covered(tmp_path, repo):
    home = tmp_path / "home"
    saved = decision_fingerprint(repo, home=home)
    write(repo / "tools/ext.py", "import os\n")
    current, candidates = run_fingerprint(repo, home=home)
    assert compare(saved, current, candidates).modified == (str(repo / "tools/ext.py"),)


def test_a_decision_covers_resources_below_it_and_nothing_new(tmp_path, repo):
    home = tmp_path / "home"
    write(repo / "pkg/lib/.pi/skills/x.md")
    saved = decision_fingerprint(repo, home=home)
    assert str(repo / "pkg/lib/.pi/skills") in saved.resources
    # A run in pkg/lib: its resources were approved.
    current, candidates = run_fingerprint(repo / "pkg/lib", home=home)
    assert not compare(saved, current, candidates)
    # A run in pkg/app after a .pi/ and an .agents/skills appeared there: new resources.
    write(repo / "pkg/app/.pi/extensions/helper.py")
    write(repo / "pkg/app/.agents/skills/s/SKILL.md")
    current, candidates = run_fingerprint(repo / "pkg/app", home=home)
    changes = compare(saved, current, candidates)
    assert changes.added == (
        str(repo / "pkg/app/.agents/skills"),
        str(repo / "pkg/app/.pi/extensions"),
    )


def test_an_empty_placeholder_directory_changes_nothing(tmp_path, repo):
    home = tmp_path / "home"
    saved = decision_fingerprint(repo, home=home)
    (repo / ".claude").mkdir()
    (repo / ".pi" / "prompts").mkdir()
    current, candidates = run_fingerprint(repo, home=home)
    assert not compare(saved, current, candidates)


def test_the_walk_below_a_decision_is_bounded_and_says_so(tmp_path, repo):
    for i in range(20):
        (repo / f"d{i}").mkdir()
    write(repo / "d9/deep/.pi/skills/x.md")
    found, note = resources_below(repo, max_directories=5)
    assert note is not None and "stopped after 5 directories" in note
    assert repo / "d9/deep/.pi/skills" not in found
    saved = decision_fingerprint(repo, home=tmp_path / "home", max_directories=5)
    assert not saved.complete
    # Not covered means new to a run there: fail-closed.
    current, candidates = run_fingerprint(repo / "d9/deep", home=tmp_path / "home")
    assert compare(saved, current, candidates).added == (str(repo / "d9/deep/.pi/skills"),)


def test_the_walk_skips_git_and_does_not_follow_directory_symlinks(tmp_path, repo):
    write(repo / ".git/x/.pi/extensions/e.py")
    write(tmp_path / "elsewhere/.pi/extensions/e.py")
    (repo / "link").symlink_to(tmp_path / "elsewhere")
    found, note = resources_below(repo)
    assert note is None
    assert not any(".git" in p.parts or "link" in p.parts for p in found)


def test_the_users_own_agents_skills_are_never_a_project_resource(tmp_path):
    home = tmp_path / "home"
    write(home / ".agents/skills/s/SKILL.md")
    found, _ = resources_below(home, home=home)
    assert found == []


def test_fingerprints_survive_a_json_round_trip(tmp_path, repo):
    saved = decision_fingerprint(repo, home=tmp_path / "home")
    assert Fingerprint.from_json(saved.to_json()) == saved
    with pytest.raises(ValueError, match="absolute"):
        Fingerprint.from_json({"format": 1, "resources": {"rel": {"digest": "x"}}})


# --- the cheap snapshot ------------------------------------------------------------------------


def test_a_snapshot_sees_a_planted_extension_anywhere_below_the_root(tmp_path, repo):
    before = workspace_snapshot([repo], home=tmp_path / "home")
    write(repo / "pkg/app/.pi/extensions/helper.py")
    after = workspace_snapshot([repo], home=tmp_path / "home")
    changes = snapshot_changes(before, after)
    assert changes.added == (str(repo / "pkg/app/.pi/extensions"),)
    assert not snapshot_changes(after, workspace_snapshot([repo], home=tmp_path / "home"))


def test_a_snapshot_sees_a_rewrite_even_with_size_and_mtime_restored(tmp_path, repo):
    path = repo / ".pi/extensions/ok.py"
    info = path.stat()
    before = workspace_snapshot([repo])
    # The kernel's clock is coarse: wait until a change would get a later ctime.
    probe = repo / "probe"
    deadline = time.monotonic() + 30
    while True:
        probe.write_text("")
        if probe.stat().st_ctime_ns > info.st_ctime_ns or time.monotonic() > deadline:
            break
    path.write_text("def extension(pi):\n    passs\n"[: info.st_size])
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    changes = snapshot_changes(before, workspace_snapshot([repo]))
    assert changes.modified == (str(path),)


def test_a_snapshot_reports_removed_files_and_ignores_empty_placeholders(tmp_path, repo):
    before = workspace_snapshot([repo])
    (repo / ".pi/skills/deploy/SKILL.md").unlink()
    (repo / ".claude").mkdir()  # an empty placeholder loads nothing
    changes = snapshot_changes(before, workspace_snapshot([repo]))
    assert changes.removed == (str(repo / ".pi/skills/deploy/SKILL.md"),)
    assert not changes.added


def test_an_incomplete_snapshot_says_so(tmp_path, repo):
    for i in range(10):
        (repo / f"d{i}").mkdir()
    snapshot = workspace_snapshot([repo], max_directories=3)
    assert snapshot.incomplete and "stopped after 3 directories" in snapshot.incomplete
    changes = snapshot_changes(snapshot, snapshot)
    assert not changes and changes.incomplete


def test_changes_render_as_a_line_and_a_dict():
    changes = ResourceChanges(added=tuple(f"/a{i}" for i in range(10)), modified=("/m",))
    assert changes.summary(limit=2) == "added: /a0, /a1 (and 8 more); modified: /m"
    assert changes.as_dict()["modified"] == ["/m"]
    assert not ResourceChanges()


def test_binding_at_first_use_covers_the_binding_runs_resources_beyond_the_walk(tmp_path, repo):
    home = tmp_path / "home"
    for i in range(20):
        (repo / f"d{i}").mkdir()
    deep = repo / "d9" / "deep"
    write(deep / ".pi/skills/x.md")
    saved = decision_fingerprint(repo, home=home, max_directories=5, also_for=(deep,))
    current, candidates = run_fingerprint(deep, home=home)
    assert not compare(saved, current, candidates)


def test_a_snapshot_covers_code_that_project_settings_name_outside_pi(tmp_path, repo):
    before = workspace_snapshot([repo])
    write(repo / "tools/ext.py", "import os\n")
    changes = snapshot_changes(before, workspace_snapshot([repo]))
    assert changes.modified == (str(repo / "tools/ext.py"),)
