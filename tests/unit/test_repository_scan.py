"""find_repositories: what git would treat as a repository below a root."""

from __future__ import annotations

import os
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
    # layouts git accepts that a strict check would miss: HEAD as a symlink,
    # objects as a symlink, commondir instead of objects/refs
    (tmp_path / "g" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / "g" / "HEAD").symlink_to("refs/heads/main")
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "h" / "objects").symlink_to("/usr")
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "i" / "commondir").write_text("../g\n")
    # not repositories: HEAD as a directory, a lone HEAD file, a file named .gitx
    (tmp_path / "d" / "HEAD").mkdir(parents=True)
    (tmp_path / "d" / "objects").mkdir()
    (tmp_path / "d" / "refs").mkdir()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "HEAD").write_text("x")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / ".gitx").write_text("")

    scan = find_repositories(str(tmp_path))
    assert scan.complete
    assert scan.found == {str(tmp_path / name) for name in ("a", "b", "g", "h", "i")} | {str(bare)}


def test_symlinks_are_not_followed_and_the_scan_is_bounded(tmp_path: Path):
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    assert find_repositories(str(root)).found == set()
    for i in range(10):
        (root / f"d{i}" / ".git").mkdir(parents=True)
    partial = find_repositories(str(root), max_directories=3)
    assert len(partial.found) < 10
    assert not partial.complete  # and says so


def test_a_directory_that_cannot_be_listed_makes_the_scan_incomplete(tmp_path: Path, monkeypatch):
    (tmp_path / "hide" / "repo" / ".git").mkdir(parents=True)
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("hide"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    scan = find_repositories(str(tmp_path))
    assert not scan.complete
    assert scan.unreadable == [str(tmp_path / "hide")]
