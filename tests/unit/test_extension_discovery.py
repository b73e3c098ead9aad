"""Extension discovery: files, packages and ``[tool.pi] extensions`` in pyproject.toml,
settings paths, ``pi_sandbox.extensions`` entry points, ``--no-extensions``, load order
and duplicates (issue 5 Discovery; seed 004), with trust resolved before any project
file is read and no extension code imported by the supervisor."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest

from pi_sandbox.policies._effective import ExtensionRules
from pi_sandbox.supervisor.extensions.extension_discovery import (
    ENTRY_POINT_GROUP,
    ExtensionSource,
    discover_extensions,
    resolve_module_path,
)

EXT = "def extension(pi): pass\n"


def _user_dir(tmp_path: Path) -> Path:
    extensions = tmp_path / "agent" / "extensions"
    extensions.mkdir(parents=True)
    return extensions


def _discover(tmp_path: Path, trust: str | None = None, **kwargs):
    cwd = tmp_path / "ws"
    cwd.mkdir(exist_ok=True)
    options = {"cli_paths": [], "no_extensions": False, "entry_points": list, **kwargs}
    return discover_extensions(
        cwd=cwd, agent_dir=tmp_path / "agent", project_trust=trust, **options
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


# -- settings paths ---------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path):
    """``(root, ws, agent)``: canonical tmp root, a workspace and an agent dir."""
    root = Path(os.path.realpath(tmp_path))
    ws = root / "ws"
    ws.mkdir()
    agent = root / "agent"
    agent.mkdir()
    return root, ws, agent


def _write(path: Path, text: str = EXT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _settings(path: Path, extensions) -> Path:
    return _write(path, json.dumps({"model": "x", "extensions": extensions}))


def _run(root: Path, trust: str | None = "yes", **kwargs):
    options = {"cli_paths": [], "no_extensions": False, "entry_points": list, **kwargs}
    return discover_extensions(
        cwd=root / "ws", agent_dir=root / "agent", project_trust=trust, **options
    )


def test_user_settings_paths_are_relative_to_the_file_expand_home_and_search_dirs(
    tree, monkeypatch
):
    root, _, agent = tree
    home = root / "home"
    monkeypatch.setenv("HOME", str(home))
    single = _write(agent / "mine" / "single.py")
    package = _write(root / "libs" / "pkg" / "__init__.py").parent
    from_home = _write(home / "ext" / "homed.py")
    many = root / "many"
    _write(many / "a.py")
    _write(many / "b" / "__init__.py")
    _write(many / "notes.txt", "not an extension\n")
    _settings(
        agent / "settings.json", ["mine/single.py", str(package), "~/ext/homed.py", str(many)]
    )
    sources, notices = _run(root)
    assert notices == []
    assert [(s.path, s.origin) for s in sources] == [
        (single, "user"),
        (package, "user"),
        (from_home, "user"),
        (many / "a.py", "user"),
        (many / "b", "user"),
    ]


def test_a_settings_directory_with_a_manifest_loads_its_declared_entries(tree):
    root, _, agent = tree
    kit = root / "kit"
    _write(kit / "src" / "one.py")
    _write(kit / "stray.py")  # not declared: not loaded
    _write(kit / "pyproject.toml", '[tool.pi]\nextensions = ["src/one.py"]\n')
    _settings(agent / "settings.json", [str(kit)])
    sources, notices = _run(root)
    assert [s.path for s in sources] == [kit / "src" / "one.py"]
    assert notices == []


def test_project_settings_paths_load_as_project_extensions_when_trusted(tree):
    root, ws, _ = tree
    local = _write(ws / "tools" / "local.py")
    _settings(ws / ".pi" / "settings.json", ["../tools/local.py"])
    for trust in ("yes", "sandboxed"):
        sources, notices = _run(root, trust)
        assert [(s.path, s.origin) for s in sources] == [(local, "project")]
        assert notices == []


@pytest.mark.parametrize("trust", [None, "no"])
def test_an_untrusted_projects_settings_file_is_not_read(tree, trust):
    root, ws, _ = tree
    _write(ws / "tools" / "local.py")
    _write(ws / ".pi" / "settings.json", '{"extensions": ["../tools/local.py"]')  # broken
    sources, notices = _run(root, trust)
    assert sources == []
    assert notices == []  # not even the parse error: the file was never opened


def test_project_settings_paths_outside_the_project_are_refused(tree, monkeypatch):
    root, ws, agent = tree
    monkeypatch.setenv("HOME", str(root / "home"))
    secret = _write(root / "home" / "private" / "secret.py")
    _write(root / "elsewhere" / "other.py")
    (ws / "link.py").symlink_to(secret)  # inside as written, outside once resolved
    (ws / "linkdir").symlink_to(root / "elsewhere")
    mixed = ws / "mixed"
    _write(mixed / "ok.py")
    (mixed / "leak.py").symlink_to(secret)  # found one level deep, resolves outside
    settings = _settings(
        ws / ".pi" / "settings.json",
        [
            "../../elsewhere/other.py",
            str(secret),
            "~/private/secret.py",
            "../link.py",
            "../linkdir",
            "../mixed",
        ],
    )
    sources, notices = _run(root, "yes")
    assert [(s.path, s.origin) for s in sources] == [(mixed / "ok.py", "project")]
    refusals = [n for n in notices if n.startswith(f"Refused {settings}: extensions[")]
    assert len(refusals) == 6, notices
    assert all("outside the project" in n for n in refusals)
    assert any("extensions[5]" in n and "leak.py" in n for n in refusals)
    # The same paths from the user's own settings are the user's choice.
    _settings(agent / "settings.json", [str(secret)])
    sources, _ = _run(root, "yes")
    assert (secret, "user") in [(s.path, s.origin) for s in sources]


def test_malformed_settings_are_notices_naming_the_file_and_field(tree):
    root, ws, agent = tree
    user = _settings(agent / "settings.json", ["ok.py", 3, None, "", "missing.py"])
    _write(agent / "ok.py")
    sources, notices = _run(root)
    assert [s.path.name for s in sources] == ["ok.py"]
    assert notices == [
        f"{user}: extensions[1]: expected a path string",
        f"{user}: extensions[2]: expected a path string",
        f"{user}: extensions[3]: expected a path string",
        f"{user}: extensions[4]: {agent / 'missing.py'} does not exist",
    ]
    _write(user, '{"extensions": "ok.py"}')
    assert _run(root) == ([], [f"{user}: extensions: expected a list of path strings, got str"])
    _write(user, "{not json")
    sources, notices = _run(root)
    assert sources == [] and len(notices) == 1
    assert notices[0].startswith(f"{user}: invalid JSON")
    _write(user, "[1, 2]")
    sources, notices = _run(root)
    assert sources == [] and notices[0].startswith(f"{user}: expected a JSON object")
    _write(user, '{"theme": "dark"}')  # no extensions key: nothing to say
    assert _run(root) == ([], [])
    project = _settings(ws / ".pi" / "settings.json", {"a": 1})
    _, notices = _run(root, "yes")
    assert notices == [f"{project}: extensions: expected a list of path strings, got dict"]


def test_a_user_settings_path_into_an_untrusted_projects_extensions_is_skipped_unread(tree):
    root, ws, agent = tree
    kit = ws / ".pi" / "extensions" / "kit"
    _write(kit / "pyproject.toml", "[tool.pi\n")  # would be a parse error if read
    _settings(agent / "settings.json", [str(kit)])
    sources, notices = _run(root, None)
    assert sources == []
    assert any("not trusted" in n and "extensions[0]" in n for n in notices)
    assert not any("cannot read" in n for n in notices)


# -- entry points -----------------------------------------------------------------------


def _site(root: Path, marker: Path) -> Path:
    """A site directory with two distributions: ``acme-tools`` providing a package
    and a submodule, and ``broken-dist`` whose entry point names a missing module.
    Every module's top level writes ``marker`` and raises: importing any fails."""
    site = root / "site"
    boom = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit('imported')\n"
    _write(site / "acme_ext" / "__init__.py", boom)
    _write(site / "acme_ext" / "hooks.py", boom)
    _write(site / "acme_single.py", boom)
    _write(site / "acme_tools-1.0.dist-info" / "METADATA", "Name: acme-tools\nVersion: 1.0\n")
    _write(
        site / "acme_tools-1.0.dist-info" / "entry_points.txt",
        f"[{ENTRY_POINT_GROUP}]\n"
        "pkg = acme_ext\n"
        "hooks = acme_ext.hooks:extension\n"
        "single = acme_single\n"
        "[console_scripts]\n"
        "acme = acme_ext:main\n",
    )
    _write(site / "broken_dist-2.0.dist-info" / "METADATA", "Name: broken-dist\nVersion: 2.0\n")
    _write(
        site / "broken_dist-2.0.dist-info" / "entry_points.txt",
        f"[{ENTRY_POINT_GROUP}]\ngone = no_such_module.sub\nnotpkg = acme_single.sub\n",
    )
    return site


def _entry_points_of(site: Path):
    """The fake distribution list: real metadata of ``site`` only."""

    def entry_points():
        return [
            ep
            for dist in importlib.metadata.distributions(path=[str(site)])
            for ep in dist.entry_points
            if ep.group == ENTRY_POINT_GROUP
        ]

    return entry_points


def test_entry_points_resolve_to_files_without_importing_them(tree, monkeypatch):
    root, _, _ = tree
    marker = root / "imported.txt"
    site = _site(root, marker)
    monkeypatch.syspath_prepend(str(site))
    sources, notices = _run(root, entry_points=_entry_points_of(site))
    assert [(s.path, s.origin) for s in sources] == [
        (site / "acme_ext" / "hooks.py", "user"),
        (site / "acme_ext", "user"),
        (site / "acme_single.py", "user"),
    ]
    assert len(notices) == 2
    assert any("'gone'" in n and "broken-dist" in n and "no_such_module" in n for n in notices), (
        notices
    )
    assert any("'notpkg'" in n and "not a package" in n for n in notices), notices
    assert not marker.exists()
    assert not {"acme_ext", "acme_ext.hooks", "acme_single"} & set(sys.modules)


def test_resolve_module_path_refuses_what_is_not_python_source(tmp_path):
    _write(tmp_path / "nspkg" / "mod.py")  # a namespace package: no __init__.py
    _write(tmp_path / "compiled.cpython-311-x86_64-linux-gnu.so", "")
    path = [str(tmp_path)]
    assert resolve_module_path("nspkg.mod", path) == tmp_path / "nspkg" / "mod.py"
    for bad, why in [
        ("nspkg", "namespace"),
        ("compiled", "not Python source"),
        ("not-a-name", "not a module name"),
        ("absent", "not found"),
    ]:
        with pytest.raises(LookupError, match=why):
            resolve_module_path(bad, path)


def test_an_empty_sys_path_entry_does_not_let_the_workspace_shadow_an_entry_point(
    tree, monkeypatch
):
    root, ws, _ = tree
    site = root / "site"
    real = _write(site / "acme_single.py")
    _write(ws / "acme_single.py")  # a repository's file with the same name
    monkeypatch.chdir(ws)
    monkeypatch.setattr(sys, "path", ["", ".", str(site), *sys.path])
    assert resolve_module_path("acme_single") == real


def test_the_policy_refuses_entry_point_extensions_like_any_other(tree, monkeypatch):
    root, _, _ = tree
    site = _site(root, root / "imported.txt")
    monkeypatch.syspath_prepend(str(site))
    refused: list[tuple[ExtensionSource, str]] = []
    rules = ExtensionRules(deny=(("acme_single", "/etc/pi/policy.yaml"),))
    sources, _ = _run(root, entry_points=_entry_points_of(site), rules=rules, refused=refused)
    assert [s.path.name for s in sources] == ["hooks.py", "acme_ext"]
    assert [(s.path.name, s.origin) for s, _ in refused] == [("acme_single.py", "user")]


def test_a_failing_entry_point_listing_is_a_notice(tree):
    root, _, _ = tree

    def broken():
        raise ValueError("bad metadata")

    sources, notices = _run(root, entry_points=broken)
    assert sources == [] and len(notices) == 1 and "bad metadata" in notices[0]


# -- --no-extensions, load order, duplicates ----------------------------------------------


def _every_source(root: Path, monkeypatch) -> dict[str, Path]:
    """One extension of each source; returns them by source."""
    ws, agent = root / "ws", root / "agent"
    site = root / "site"
    found = {
        "cli": _write(root / "cli" / "c.py"),
        "project": _write(ws / ".pi" / "extensions" / "p.py"),
        "user": _write(agent / "extensions" / "u.py"),
        "user settings": _write(root / "us" / "us.py"),
        "project settings": _write(ws / "ps" / "ps.py"),
        "entry point": _write(site / "ep_mod.py"),
    }
    _settings(agent / "settings.json", [str(found["user settings"])])
    _settings(ws / ".pi" / "settings.json", ["../ps/ps.py"])
    _write(site / "ep-1.0.dist-info" / "METADATA", "Name: ep\nVersion: 1.0\n")
    _write(site / "ep-1.0.dist-info" / "entry_points.txt", f"[{ENTRY_POINT_GROUP}]\ne = ep_mod\n")
    monkeypatch.syspath_prepend(str(site))
    return found


def test_load_order_is_cli_project_user_settings_then_entry_points(tree, monkeypatch):
    root, _, _ = tree
    found = _every_source(root, monkeypatch)
    sources, notices = _run(
        root, cli_paths=[found["cli"]], entry_points=_entry_points_of(root / "site")
    )
    assert notices == []
    assert [(s.path, s.origin) for s in sources] == [
        (found["cli"], "cli"),
        (found["project"], "project"),
        (found["user"], "user"),
        (found["user settings"], "user"),
        (found["project settings"], "project"),
        (found["entry point"], "user"),
    ]


def test_no_extensions_disables_every_discovered_source_but_not_e_paths(tree, monkeypatch):
    root, _, agent = tree
    found = _every_source(root, monkeypatch)
    _write(agent / "settings.json", "{broken")  # not even read
    called = []
    sources, notices = _run(
        root,
        cli_paths=[found["cli"]],
        no_extensions=True,
        entry_points=lambda: called.append(1) or [],
    )
    assert [(s.path, s.origin) for s in sources] == [(found["cli"], "cli")]
    assert notices == [] and called == []


def test_a_path_found_by_several_sources_loads_once_at_its_first_position(tree, monkeypatch):
    root, _, agent = tree
    site = root / "site"
    shared = _write(agent / "extensions" / "shared.py")
    other = _write(agent / "extensions" / "other.py")
    (root / "alias.py").symlink_to(shared)
    _settings(agent / "settings.json", [str(shared), "../alias.py", "extensions"])
    _write(site / "ep-1.0.dist-info" / "METADATA", "Name: ep\nVersion: 1.0\n")
    _write(site / "ep-1.0.dist-info" / "entry_points.txt", f"[{ENTRY_POINT_GROUP}]\ne = shared\n")
    monkeypatch.syspath_prepend(str(agent / "extensions"))
    sources, notices = _run(root, cli_paths=[other], entry_points=_entry_points_of(site))
    assert notices == []
    assert [(s.path, s.origin) for s in sources] == [(other, "cli"), (shared, "user")]


# -- F4: a project extension must be the project's own files --------------------------------


def _project_with_outside(tmp_path: Path) -> tuple[Path, Path]:
    """``ws`` (the project, with ``.pi/extensions``) and ``elsewhere`` (outside it)."""
    project_extensions = tmp_path / "ws" / ".pi" / "extensions"
    project_extensions.mkdir(parents=True)
    (tmp_path / "agent").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return project_extensions, elsewhere


def test_a_project_extension_linking_out_of_the_project_is_refused_with_the_rule(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    _write(elsewhere / "helper.py")
    (project_extensions / "helper.py").symlink_to("../../../elsewhere/helper.py")
    refused: list = []
    sources, notices = _discover(tmp_path, "yes", refused=refused)
    assert sources == []
    assert len(notices) == 1
    assert str(project_extensions / "helper.py") in notices[0]
    assert str((elsewhere / "helper.py").resolve()) in notices[0]
    assert "outside the project" in notices[0] and "must be its own" in notices[0]
    assert [(s.origin, s.discovered) for s, _ in refused] == [
        ("project", project_extensions / "helper.py")
    ]


def test_a_project_package_linking_out_is_refused_whole(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    _write(elsewhere / "pkg" / "__init__.py")
    (project_extensions / "pkg").symlink_to(elsewhere / "pkg")
    sources, notices = _discover(tmp_path, "sandboxed")
    assert sources == [] and "outside the project" in notices[0]


def test_a_file_inside_a_project_package_linking_out_refuses_the_package(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    package = project_extensions / "pkg"
    _write(package / "__init__.py", "from . import sibling\ndef extension(pi): pass\n")
    _write(elsewhere / "sibling.py", "")
    (package / "sibling.py").symlink_to(elsewhere / "sibling.py")
    sources, notices = _discover(tmp_path, "yes")
    assert sources == []
    assert str(package / "sibling.py") in notices[0] and "outside the project" in notices[0]


def test_a_link_out_deep_in_a_package_through_a_linked_inner_directory_is_found(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    package = project_extensions / "pkg"
    _write(package / "__init__.py")
    inner = tmp_path / "ws" / "lib" / "inner"
    _write(inner / "__init__.py", "")
    (inner / "deep.py").symlink_to(_write(elsewhere / "deep.py"))
    (package / "inner").symlink_to(inner)  # inside the project, followed
    sources, notices = _discover(tmp_path, "yes")
    assert sources == []
    assert str(package / "inner" / "deep.py") in notices[0]


def test_extensions_reached_through_a_linked_extensions_directory_or_pi_are_refused(tmp_path):
    for linked in (".pi/extensions", ".pi"):
        base = tmp_path / linked.replace("/", "-")
        base.mkdir()
        project_extensions, elsewhere = _project_with_outside(base)
        outside = elsewhere / linked
        _write(outside / "extensions" / "helper.py" if linked == ".pi" else outside / "helper.py")
        target = project_extensions if linked == ".pi/extensions" else project_extensions.parent
        target.rename(base / "unused")
        target.symlink_to(outside)
        sources, notices = _discover(base, "yes")
        assert sources == [], linked
        assert "outside the project" in notices[0], linked


def test_a_user_extension_linked_into_the_project_stays_a_user_extension(tmp_path):
    project_extensions, _ = _project_with_outside(tmp_path)
    user = _write(tmp_path / "agent" / "extensions" / "mine.py")
    (project_extensions / "mine.py").symlink_to(user)
    sources, notices = _discover(tmp_path, "yes")
    assert [(s.path, s.origin) for s in sources] == [(user.resolve(), "user")]
    assert notices == []


def test_control_project_extensions_inside_the_project_load_links_included(tmp_path):
    project_extensions, _ = _project_with_outside(tmp_path)
    own = _write(project_extensions / "own.py")
    package = project_extensions / "pkg"
    _write(package / "__init__.py")
    shared = _write(tmp_path / "ws" / "lib" / "shared.py")
    (package / "shared.py").symlink_to(shared)  # inside the project: fingerprinted
    (project_extensions / "alias.py").symlink_to(_write(tmp_path / "ws" / "tools" / "a.py"))
    sources, notices = _discover(tmp_path, "yes")
    assert notices == []
    assert sorted(s.path.name for s in sources) == ["a.py", own.name, "pkg"]


def test_a_project_settings_file_linking_out_names_no_extension(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    _write(tmp_path / "ws" / "tools" / "t.py")
    _settings(elsewhere / "settings.json", ["../tools/t.py"])
    (project_extensions.parent / "settings.json").symlink_to(elsewhere / "settings.json")
    sources, notices = _discover(tmp_path, "yes")
    assert sources == []
    assert "settings.json" in notices[0] and "outside the project" in notices[0]


def test_a_package_too_large_to_check_is_refused(tmp_path):
    from pi_sandbox.supervisor.extensions.extension_discovery import path_leading_out

    project_extensions, _ = _project_with_outside(tmp_path)
    package = project_extensions / "pkg"
    _write(package / "__init__.py")
    for index in range(5):
        _write(package / f"m{index}.py", "")
    out = path_leading_out(package, tmp_path / "ws", max_entries=3)
    assert out is not None and "more than 3 entries" in out[1]
    assert path_leading_out(package, tmp_path / "ws") is None


def test_the_real_location_of_a_refused_link_loads_with_e_but_the_link_does_not(tmp_path):
    project_extensions, elsewhere = _project_with_outside(tmp_path)
    real = _write(elsewhere / "helper.py")
    link = project_extensions / "helper.py"
    link.symlink_to(real)
    sources, notices = _discover(tmp_path, "yes", cli_paths=[real], no_extensions=True)
    assert [(s.path, s.origin) for s in sources] == [(real.resolve(), "cli")]
    assert notices == []
    sources, notices = _discover(tmp_path, "yes", cli_paths=[link], no_extensions=True)
    assert sources == [] and f"Refused project extension {link}" in notices[0]
