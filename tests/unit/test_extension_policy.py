"""The policy's ``extensions`` section against symlinked, name-spoofing and ``-e``
project extensions (ExtensionRules and discover_extensions with real files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox.policies._effective import ExtensionRules
from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, discover_extensions

POLICY = "/etc/pi/policy.yaml"
PROJECT_POLICY = "/ws/.pi/policy.yaml"
EXT = "def extension(pi):\n    pass\n"


@pytest.fixture
def tree(tmp_path: Path):
    """A workspace with ``.pi/extensions``, a ``lib`` outside it, and an agent dir."""
    root = Path(os.path.realpath(tmp_path))
    ws = root / "ws"
    (ws / ".pi" / "extensions").mkdir(parents=True)
    (ws / "lib").mkdir()
    agent = root / "agent"
    (agent / "extensions").mkdir(parents=True)
    return root, ws, agent


def discover(ws: Path, agent: Path, rules: ExtensionRules | None = None, **kwargs):
    refused: list[tuple[ExtensionSource, str]] = []
    options = {"cli_paths": (), "no_extensions": False, "project_trust": "yes", **kwargs}
    sources, notices = discover_extensions(
        cwd=ws, agent_dir=agent, rules=rules, refused=refused, **options
    )
    return sources, notices, refused


def symlinked_helper(ws: Path) -> Path:
    target = ws / "lib" / "helper.py"
    target.write_text(EXT)
    link = ws / ".pi" / "extensions" / "linked.py"
    link.symlink_to(Path("..") / ".." / "lib" / "helper.py")
    return link


# -- 1. symlinks: patterns see the discovered path and the canonical one ---------------


def test_a_symlinked_project_extension_is_denied_by_a_pattern_on_its_discovered_path(tree):
    _, ws, agent = tree
    link = symlinked_helper(ws)
    rules = ExtensionRules(deny=(("*/.pi/extensions/*", POLICY),))
    sources, notices, refused = discover(ws, agent, rules)
    assert sources == []
    [(source, why)] = refused
    assert source.path == ws / "lib" / "helper.py"  # loading uses the canonical path
    assert source.discovered == link
    assert source.origin == "project"
    assert "*/.pi/extensions/*" in why and POLICY in why
    assert any("Refused project extension" in n for n in notices)


def test_a_deny_matching_only_the_canonical_path_or_either_name_still_refuses(tree):
    _, ws, agent = tree
    symlinked_helper(ws)
    for pattern in ("*/lib/helper.py", "helper", "linked"):
        rules = ExtensionRules(deny=((pattern, POLICY),))
        sources, _, refused = discover(ws, agent, rules)
        assert sources == [] and len(refused) == 1, pattern


def test_an_allow_list_may_be_satisfied_by_either_path(tree):
    _, ws, agent = tree
    link = symlinked_helper(ws)
    for pattern in ("*/.pi/extensions/linked.py", "*/lib/helper.py"):
        rules = ExtensionRules(allow_lists=(((pattern,), POLICY),))
        sources, _, refused = discover(ws, agent, rules)
        assert [(s.path, s.discovered) for s in sources] == [(ws / "lib" / "helper.py", link)]
        assert refused == []
    rules = ExtensionRules(allow_lists=((("*/elsewhere/*",), POLICY),))
    assert discover(ws, agent, rules)[0] == []


def test_capabilities_false_on_the_discovered_path_wins_over_true_on_the_canonical_one():
    canonical, link = Path("/ws/lib/helper.py"), Path("/ws/.pi/extensions/linked.py")
    rules = ExtensionRules(
        capabilities=(
            ("*/lib/*", "network", True, POLICY),
            ("*/.pi/extensions/*", "network", False, POLICY),
            ("*/.pi/extensions/*", "exec", False, POLICY),
        )
    )
    caps = rules.capabilities_for("helper", canonical, "user", discovered=link)
    assert caps["network"] is False and caps["exec"] is False
    # Without the discovered path the link's pattern cannot be seen (the old escape).
    assert rules.capabilities_for("helper", canonical, "user")["network"] is True
    # A bare-name false on the link's own name withholds too.
    by_name = ExtensionRules(capabilities=(("linked", "exec", False, POLICY),))
    assert by_name.capabilities_for("helper", canonical, "user", discovered=link)["exec"] is False


def test_a_true_capability_needs_a_matching_entry_on_some_form():
    canonical, link = Path("/ws/lib/helper.py"), Path("/ws/.pi/extensions/linked.py")
    rules = ExtensionRules(capabilities=(("*/.pi/extensions/*", "network", True, POLICY),))
    assert rules.capabilities_for("helper", canonical, "project", discovered=link)["network"]
    assert not rules.capabilities_for("helper", Path("/ws/other/x.py"), "project")["network"]


def test_the_pool_passes_the_discovered_path_to_the_capabilities(tree, tmp_path):
    from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool

    _, ws, agent = tree
    symlinked_helper(ws)
    rules = ExtensionRules(capabilities=(("*/.pi/extensions/*", "exec", False, POLICY),))
    [source], _, _ = discover(ws, agent, rules)
    pool = WorkerPool(
        PoolConfig(cwd=ws, agent_dir=agent, home=tmp_path, sandbox=False, extension_rules=rules)
    )
    try:
        assert pool.capabilities(source)["exec"] is False
    finally:
        import shutil

        shutil.rmtree(pool.log_dir, ignore_errors=True)


def test_user_extensions_keep_their_discovered_path_too(tree):
    root, ws, agent = tree
    (root / "shared").mkdir()
    (root / "shared" / "tool.py").write_text(EXT)
    (agent / "extensions" / "tool.py").symlink_to(root / "shared" / "tool.py")
    [source], _, _ = discover(ws, agent)
    assert source.origin == "user"
    assert source.path == root / "shared" / "tool.py"
    assert source.discovered == agent / "extensions" / "tool.py"


# -- 2. a project extension cannot borrow a name the policy trusts ---------------------


def test_a_bare_name_in_an_allow_list_does_not_admit_a_project_extension():
    rules = ExtensionRules(allow_lists=((("guard",), POLICY),))
    path = Path("/ws/.pi/extensions/guard.py")
    why = rules.refusal("guard", path, "project")
    assert why is not None and POLICY in why and "path pattern" in why
    # The same name still admits the user's own extension.
    assert rules.refusal("guard", Path("/home/me/.pi/agent/extensions/guard.py"), "user") is None
    assert rules.refusal("guard", Path("/opt/guard.py"), "cli") is None


def test_a_path_pattern_in_an_allow_list_admits_a_project_extension():
    rules = ExtensionRules(allow_lists=((("guard", "*/.pi/extensions/guard.py"), POLICY),))
    assert rules.refusal("guard", Path("/ws/.pi/extensions/guard.py"), "project") is None


def test_a_bare_name_still_denies_a_project_extension():
    rules = ExtensionRules(deny=(("guard", POLICY),))
    why = rules.refusal("guard", Path("/ws/.pi/extensions/guard.py"), "project")
    assert why == f"denied by pattern 'guard' in policy {POLICY}"


def test_a_bare_name_capability_true_is_not_granted_to_a_project_extension():
    rules = ExtensionRules(
        capabilities=(
            ("guard", "override_builtin_tools", True, POLICY),
            ("guard", "network", True, POLICY),
            ("*", "exec", True, POLICY),
            ("guard", "ui", False, POLICY),
        )
    )
    user = rules.capabilities_for("guard", Path("/home/me/guard.py"), "user")
    assert user["override_builtin_tools"] and user["network"] and not user["ui"]
    spoof = rules.capabilities_for("guard", Path("/ws/.pi/extensions/guard.py"), "project")
    assert spoof == {
        "override_builtin_tools": False,
        "send_user_messages": True,
        "ui": False,  # a bare-name false still withholds
        "exec": True,  # the default, not the bare "*" grant
        "network": False,
        "set_model": True,
        "register_providers": True,
    }


def test_a_path_pattern_capability_true_is_granted_to_a_project_extension():
    rules = ExtensionRules(capabilities=(("*/.pi/extensions/guard.py", "network", True, POLICY),))
    caps = rules.capabilities_for("guard", Path("/ws/.pi/extensions/guard.py"), "project")
    assert caps["network"] is True


def test_discovery_refuses_a_project_guard_admitted_only_by_the_users_name(tree):
    _, ws, agent = tree
    (ws / ".pi" / "extensions" / "guard.py").write_text(EXT)
    (agent / "extensions" / "guard.py").write_text(EXT)
    rules = ExtensionRules(allow_lists=((("guard",), POLICY),))
    sources, _, refused = discover(ws, agent, rules)
    assert [(s.origin, s.path) for s in sources] == [("user", agent / "extensions" / "guard.py")]
    assert [(s.origin, s.path) for s, _ in refused] == [
        ("project", ws / ".pi" / "extensions" / "guard.py")
    ]


def test_a_project_policy_still_governs_only_project_extensions():
    rules = ExtensionRules(
        deny=(("guard", PROJECT_POLICY),), project_files=frozenset({PROJECT_POLICY})
    )
    assert rules.refusal("guard", Path("/home/me/guard.py"), "user") is None
    assert rules.refusal("guard", Path("/ws/.pi/extensions/guard.py"), "project") is not None


def test_a_project_link_to_a_user_extension_does_not_make_it_a_project_extension(tree):
    # Otherwise a project policy (which governs project extensions only) could deny
    # the user's own guard by linking it into .pi/extensions.
    _, ws, agent = tree
    guard = agent / "extensions" / "guard.py"
    guard.write_text(EXT)
    (ws / ".pi" / "extensions" / "guard.py").symlink_to(guard)
    rules = ExtensionRules(
        deny=(("guard", PROJECT_POLICY),), project_files=frozenset({PROJECT_POLICY})
    )
    sources, _, refused = discover(ws, agent, rules)
    assert [(s.origin, s.path) for s in sources] == [("user", guard)]
    assert refused == []


# -- 4. -e inside <cwd>/.pi/extensions is a project extension ------------------------------


@pytest.mark.parametrize("relative", [False, True])
def test_dash_e_inside_the_project_extensions_is_a_project_extension(tree, monkeypatch, relative):
    _, ws, agent = tree
    path = ws / ".pi" / "extensions" / "helper.py"
    path.write_text(EXT)
    if relative:
        monkeypatch.chdir(ws)
        given = Path(".pi/extensions/helper.py")
    else:
        given = path
    sources, _, _ = discover(ws, agent, cli_paths=[given], no_extensions=True)
    assert [(s.origin, s.path) for s in sources] == [("project", path)]


def test_dash_e_inside_the_project_extensions_needs_trust(tree):
    _, ws, agent = tree
    path = ws / ".pi" / "extensions" / "helper.py"
    path.write_text(EXT)
    for trust in (None, "no"):
        sources, notices, _ = discover(
            ws, agent, cli_paths=[path], no_extensions=True, project_trust=trust
        )
        assert sources == []
        assert any("not trusted" in n and "helper.py" in n for n in notices)


def test_dash_e_inside_the_project_extensions_meets_project_refusals(tree):
    _, ws, agent = tree
    path = ws / ".pi" / "extensions" / "helper.py"
    path.write_text(EXT)
    denied = ExtensionRules(project_allowed=False, project_denied_by=POLICY)
    sources, _, refused = discover(ws, agent, denied, cli_paths=[path])
    assert sources == []
    assert [(s.origin, why) for s, why in refused] == [
        ("project", f"project extensions are not allowed by policy {POLICY}")
    ]
    by_project_policy = ExtensionRules(
        deny=(("helper", PROJECT_POLICY),), project_files=frozenset({PROJECT_POLICY})
    )
    assert discover(ws, agent, by_project_policy, cli_paths=[path])[0] == []


def test_dash_e_through_a_link_into_the_project_extensions_is_a_project_extension(tree):
    root, ws, agent = tree
    path = ws / ".pi" / "extensions" / "helper.py"
    path.write_text(EXT)
    outside = root / "outside.py"
    outside.symlink_to(path)
    sources, _, _ = discover(ws, agent, cli_paths=[outside], no_extensions=True)
    assert [(s.origin, s.path, s.discovered) for s in sources] == [("project", path, outside)]


def test_dash_e_of_a_project_link_out_of_the_workspace_is_a_project_extension(tree):
    _, ws, agent = tree
    link = symlinked_helper(ws)
    sources, _, _ = discover(ws, agent, cli_paths=[link], no_extensions=True)
    assert [(s.origin, s.discovered) for s in sources] == [("project", link)]


def test_dash_e_elsewhere_stays_a_cli_extension(tree):
    root, ws, agent = tree
    path = root / "mine.py"
    path.write_text(EXT)
    (ws / "tools.py").write_text(EXT)
    sources, _, _ = discover(
        ws, agent, cli_paths=[path, ws / "tools.py"], no_extensions=True, project_trust=None
    )
    assert [s.origin for s in sources] == ["cli", "cli"]
