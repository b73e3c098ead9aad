"""Extension discovery: files, packages and ``[tool.pi] extensions`` in pyproject.toml
(issue 5 Discovery; seed 004), with trust resolved before any project file is read."""

from __future__ import annotations

from pathlib import Path

from pi_sandbox.supervisor.worker_pool import discover_extensions


def _user_dir(tmp_path: Path) -> Path:
    extensions = tmp_path / "agent" / "extensions"
    extensions.mkdir(parents=True)
    return extensions


def _discover(tmp_path: Path, trust: str | None = None):
    cwd = tmp_path / "ws"
    cwd.mkdir(exist_ok=True)
    return discover_extensions(
        cwd=cwd,
        agent_dir=tmp_path / "agent",
        cli_paths=[],
        no_extensions=False,
        project_trust=trust,
    )


def test_a_pyproject_declares_its_entry_files_and_packages(tmp_path):
    extensions = _user_dir(tmp_path)
    package = extensions / "toolkit"
    (package / "src" / "pkg").mkdir(parents=True)
    (package / "src" / "one.py").write_text("def extension(pi): pass\n")
    (package / "src" / "pkg" / "__init__.py").write_text("def extension(pi): pass\n")
    (package / "pyproject.toml").write_text(
        '[project]\nname = "toolkit"\n[tool.pi]\nextensions = ["src/one.py", "src/pkg"]\n'
    )
    sources, notices = _discover(tmp_path)
    assert [s.path.relative_to(extensions.resolve()) for s in sources] == [
        Path("toolkit/src/one.py"),
        Path("toolkit/src/pkg"),
    ]
    assert notices == []


def test_bad_declarations_are_named_and_skipped(tmp_path):
    extensions = _user_dir(tmp_path)
    (tmp_path / "outside.py").write_text("def extension(pi): pass\n")
    escaping = extensions / "escaping"
    escaping.mkdir()
    (escaping / "pyproject.toml").write_text(
        '[tool.pi]\nextensions = ["../../../outside.py", "missing.py"]\n'
    )
    broken = extensions / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[tool.pi\n")
    plain = extensions / "not_an_extension"
    plain.mkdir()
    (plain / "pyproject.toml").write_text('[project]\nname = "x"\n')
    sources, notices = _discover(tmp_path)
    assert sources == []
    assert any("outside" in n and str(escaping / "pyproject.toml") in n for n in notices)
    assert any("'missing.py'" in n for n in notices)
    assert any("cannot read" in n and "broken" in n for n in notices)
    assert not any("not_an_extension" in n for n in notices)


def test_an_untrusted_projects_pyproject_is_not_read(tmp_path):
    project = tmp_path / "ws" / ".pi" / "extensions" / "kit"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text("[tool.pi\n")  # would be a parse error
    _user_dir(tmp_path)
    sources, notices = _discover(tmp_path, trust=None)
    assert sources == []
    assert len(notices) == 1 and "not trusted" in notices[0] and "kit" in notices[0]
    assert "cannot read" not in notices[0]
    sources, notices = _discover(tmp_path, trust="sandboxed")
    assert any("cannot read" in n for n in notices)
