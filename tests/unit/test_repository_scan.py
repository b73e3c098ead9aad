"""find_repositories: what git would treat as a repository below a root."""

from __future__ import annotations

from pathlib import Path

from pi_sandbox.sandbox.repository_scan import find_repositories


def test_git_directories_gitfiles_and_bare_layouts_are_found(tmp_path: Path):
    (tmp_path / "a" / ".git").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".git").write_text("gitdir: ../elsewhere\n")
    bare = tmp_path / "c" / "deep"
    (bare / "objects").mkdir(parents=True)
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    # not repositories: HEAD as a directory, a partial layout, a file named .gitx
    (tmp_path / "d" / "HEAD").mkdir(parents=True)
    (tmp_path / "d" / "objects").mkdir()
    (tmp_path / "d" / "refs").mkdir()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "HEAD").write_text("x")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / ".gitx").write_text("")

    assert find_repositories(str(tmp_path)) == {
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        str(bare),
    }


def test_symlinks_are_not_followed_and_the_scan_is_bounded(tmp_path: Path):
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    assert find_repositories(str(root)) == set()
    for i in range(10):
        (root / f"d{i}" / ".git").mkdir(parents=True)
    assert len(find_repositories(str(root), max_directories=3)) < 10
