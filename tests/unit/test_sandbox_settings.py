"""The policy's ``sandbox`` section: schema, merging, and how profiles follow it (issue 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox.errors import PolicyFileError, SandboxError
from pi_sandbox.policies import load_policies
from pi_sandbox.sandbox import SandboxProfile, build_bwrap_argv, worker_profile
from pi_sandbox.sandbox.profile import PROXY_SOCKET_IN_SANDBOX, is_within
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings


def write_policy(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("version: 1\n" + body)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(PolicyFileError) as info:
        load_policies([path])
    return str(info.value)


# --- schema -----------------------------------------------------------------------


def test_a_full_sandbox_section_loads(tmp_path):
    path = write_policy(
        tmp_path,
        "p.yaml",
        """sandbox:
  filesystem:
    workspace: read
    writable_roots: [build]
    read_only: [/opt/tools]
    deny_read: [secrets]
    deny_write: [Makefile]
  network:
    mode: allowlist
    allow: [pypi.org, "*.pythonhosted.org", "localhost:8080"]
    deny: [evil.pypi.org]
  limits: {processes: 64, tmp_size_mb: 32, cpu_seconds: 5, tool_timeout_s: 30}
  environment: {allow: [CI, LANGUAGE]}
""",
    )
    settings = load_policies([path]).sandbox
    assert settings.workspace_writable is False
    assert settings.writable_roots == ("build",)
    assert settings.deny_read == ("secrets",)
    assert settings.deny_write == ("Makefile",)
    assert settings.network == "allowlist"
    assert settings.network_allow == ("pypi.org", "*.pythonhosted.org", "localhost:8080")
    assert settings.network_deny == ("evil.pypi.org",)
    assert settings.network_enabled
    assert settings.limits.processes == 64
    assert settings.limits.tmp_size_mb == 32
    assert settings.limits.open_files == SandboxLimits().open_files  # default kept
    assert settings.environment_allow == ("CI", "LANGUAGE")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("sandbox:\n  filesystem: {workspace: rw}\n", "sandbox.filesystem.workspace"),
        ("sandbox:\n  filesystem: {writable_roots: ['src/*']}\n", "not globs"),
        ("sandbox:\n  filesystem: {deny_read: null}\n", "expected a value, got null"),
        ("sandbox:\n  network: {mode: allowlist, allow: ['*']}\n", "sandbox.network.allow[0]"),
        ("sandbox:\n  network: {mode: allowlist, allow: ['*.com']}\n", "sandbox.network.allow[0]"),
        ("sandbox:\n  network: {mode: allowlist, allow: [com]}\n", "sandbox.network.allow[0]"),
        ("sandbox:\n  network: {mode: allowlist, allow: ['https://x.org']}\n", "allow[0]"),
        ("sandbox:\n  network: {allow: [pypi.org]}\n", "mode is none"),
        ("sandbox:\n  network: {mode: open}\n", "sandbox.network.mode"),
        ("sandbox:\n  limits: {processes: 0}\n", "sandbox.limits.processes"),
        ("sandbox:\n  limits: {processes: 99999999999999}\n", "less than or equal to 4194304"),
        ("sandbox:\n  limits: {open_files: 2}\n", "greater than or equal to 64"),
        ("sandbox:\n  limits: {address_space_mb: 1}\n", "sandbox.limits.address_space_mb"),
        ("sandbox:\n  limits: {file_size_mb: 99999999999999}\n", "sandbox.limits.file_size_mb"),
        ("sandbox:\n  environment: {allow: [MYSQL_PWD]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [DB_PASS]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [GITHUB_PAT]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [NPM_AUTH]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [DATABASE_URL]}\n", "looks like a credential"),
        ("sandbox:\n  limits: {cpu_seconds: '5'}\n", "sandbox.limits.cpu_seconds"),
        ("sandbox:\n  limits: {threads: 5}\n", "sandbox.limits.threads: unknown key"),
        ("sandbox:\n  environment: {allow: [GITHUB_TOKEN]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [OPENAI_API_KEY]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: [SSH_AUTH_SOCK]}\n", "looks like a credential"),
        ("sandbox:\n  environment: {allow: ['A-B']}\n", "not an environment variable name"),
        ("sandbox: null\n", "expected a value, got null"),
    ],
)
def test_bad_sandbox_sections_name_the_file_line_and_key(tmp_path, body, expected):
    path = write_policy(tmp_path, "bad.yaml", body)
    message = load_error(path)
    assert str(path) in message
    assert expected in message


# --- merging: no file can loosen another -------------------------------------------


def test_merging_takes_the_strictest_of_every_field(tmp_path):
    a = write_policy(
        tmp_path,
        "a.yaml",
        """sandbox:
  filesystem: {writable_roots: [build, dist], deny_read: [a]}
  network: {mode: allowlist, allow: [pypi.org, github.com]}
  limits: {processes: 100, cpu_seconds: 10}
  environment: {allow: [CI, TZ]}
""",
    )
    b = write_policy(
        tmp_path,
        "b.yaml",
        """sandbox:
  filesystem: {workspace: read, writable_roots: [dist], deny_read: [b]}
  network: {mode: allowlist, allow: [github.com], deny: [gist.github.com]}
  limits: {processes: 200, tmp_size_mb: 16}
  environment: {allow: [TZ]}
""",
    )
    settings = load_policies([a, b]).sandbox
    assert settings.workspace_writable is False
    assert settings.writable_roots == ("dist",)
    assert settings.deny_read == ("a", "b")
    assert settings.network_allow == ("github.com",)
    assert settings.network_deny == ("gist.github.com",)
    assert settings.limits.processes == 100
    assert settings.limits.cpu_seconds == 10
    assert settings.limits.tmp_size_mb == 16
    assert settings.environment_allow == ("TZ",)


def test_an_explicit_network_none_beats_any_allowlist(tmp_path):
    a = write_policy(tmp_path, "a.yaml", "sandbox:\n  network: {mode: allowlist, allow: [x.org]}\n")
    b = write_policy(tmp_path, "b.yaml", "sandbox:\n  network: {mode: none}\n")
    c = write_policy(tmp_path, "c.yaml", "sandbox:\n  limits: {processes: 99}\n")
    assert load_policies([a, b]).sandbox.network == "none"
    assert not load_policies([a, b]).sandbox.network_enabled
    # a file that does not mention the network does not constrain it
    assert load_policies([a, c]).sandbox.network_allow == ("x.org",)


def test_an_empty_allowlist_means_no_network(tmp_path):
    path = write_policy(tmp_path, "p.yaml", "sandbox:\n  network: {mode: allowlist, allow: []}\n")
    settings = load_policies([path]).sandbox
    assert settings.network == "none"  # an allowlist with no hosts is no network
    assert not settings.network_enabled


# --- profiles from settings --------------------------------------------------------


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = Path(os.path.realpath(tmp_path))
    home = root / "home"
    workspace = root / "proj"
    agent_dir = home / ".pi" / "agent"
    for directory in (workspace / "build", workspace / "secrets", home / ".ssh", agent_dir):
        directory.mkdir(parents=True)
    (workspace / "secrets" / "key").write_text("k")
    return {"root": root, "home": home, "ws": workspace, "agent": agent_dir}


def profile_for(layout, role="tool", **settings):
    return worker_profile(
        role,
        workspace=layout["ws"],
        home=layout["home"],
        agent_dir=layout["agent"],
        settings=SandboxSettings(**settings),
        proxy_socket=str(layout["root"] / "egress.sock"),
    )


def test_a_read_only_workspace_with_a_writable_build_directory(layout):
    ws = layout["ws"]
    profile = profile_for(layout, workspace_writable=False, writable_roots=("build",))
    assert profile.rw_binds == (str(ws / "build"),)
    assert str(ws) in profile.ro_binds
    # persistence paths are protected in every writable root
    assert str(ws / "build" / ".git") in profile.protected
    assert str(ws / ".git") not in profile.protected


@pytest.mark.parametrize(
    ("make", "grant", "expected"),
    [
        (lambda r: (r / "proj" / "etc-link").symlink_to("/etc"), "etc-link", "is a symlink"),
        (lambda r: (r / "proj" / "root-link").symlink_to("/"), "root-link", "is a symlink"),
        (lambda r: None, "../..", "outside the workspace"),
        (lambda r: (r / "proj-evil").mkdir(), "../proj-evil", "outside the workspace"),
        (lambda r: None, "/etc", "outside the workspace"),
        (lambda r: None, "~", "outside the workspace"),
        (lambda r: None, "missing", "not an existing directory"),
        (lambda r: (r / "proj" / "f").write_text(""), "f", "not an existing directory"),
        (
            lambda r: (
                (r / "out" / "x").mkdir(parents=True),
                (r / "proj" / "sub").symlink_to(r / "out"),
            ),
            "sub/x",
            "outside the workspace",
        ),
    ],
)
def test_bad_writable_grants_are_refused_with_the_entry_named(layout, make, grant, expected):
    make(layout["root"])
    with pytest.raises(SandboxError, match=expected) as info:
        profile_for(layout, writable_roots=(grant,))
    assert "writable_roots" in str(info.value)


def test_prefix_checks_compare_components_not_strings():
    assert is_within("/tmp/proj/x", "/tmp/proj")
    assert is_within("/tmp/proj", "/tmp/proj")
    assert not is_within("/tmp/proj-evil/x", "/tmp/proj")
    assert not is_within("/tmp/projx", "/tmp/proj")
    assert is_within("/anything", "/")


def test_policy_deny_read_and_deny_write_land_in_the_profile(layout):
    ws = layout["ws"]
    (ws / "Makefile").write_text("all:\n")
    profile = profile_for(layout, deny_read=("secrets", "~/.kube"), deny_write=("Makefile", "/etc"))
    assert str(ws / "secrets") in profile.deny_read
    assert str(layout["home"] / ".kube") in profile.deny_read
    assert (str(ws / "secrets"), "dir") in profile.deny_masks
    assert str(ws / "Makefile") in profile.protected
    assert "/etc" not in profile.protected  # not inside a writable root: nothing to do


def test_the_agents_own_files_are_masked(layout):
    profile = profile_for(layout)
    agent = layout["agent"]
    for name in ("auth.json", "trust.json", "policy.yaml", "settings.json", "sessions"):
        assert str(agent / name) in profile.deny_read


def test_environment_allowlist_passes_named_host_variables_to_trusted_roles(layout, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    tool = dict(profile_for(layout, environment_allow=("CI", "UNSET_VAR")).env)
    assert tool["CI"] == "true"
    assert "UNSET_VAR" not in tool
    assert "OPENAI_API_KEY" not in tool
    untrusted = dict(profile_for(layout, role="sandboxed-extension", environment_allow=("CI",)).env)
    assert "CI" not in untrusted


def test_network_is_granted_only_with_entries_a_socket_and_a_trusted_role(layout):
    allow = {"network": "allowlist", "network_allow": ("pypi.org",)}
    assert profile_for(layout, **allow).network == "proxy"
    assert profile_for(layout, role="extension", **allow).network == "proxy"
    assert profile_for(layout, role="sandboxed-extension", **allow).network == "none"
    assert profile_for(layout, network="allowlist").network == "none"  # empty allowlist
    assert profile_for(layout).network == "none"


def test_a_proxy_profile_binds_the_socket_before_the_root_is_made_read_only(layout):
    profile = profile_for(layout, network="allowlist", network_allow=("pypi.org",))
    argv = build_bwrap_argv(profile, ["true"], bwrap="bwrap", seccomp_fd=5)
    at = argv.index(PROXY_SOCKET_IN_SANDBOX)
    assert argv[at - 2 : at + 1] == ["--ro-bind", profile.proxy_socket, PROXY_SOCKET_IN_SANDBOX]
    assert argv[at + 1 : at + 3] == ["--remount-ro", "/"]


def test_limits_and_tmp_size_follow_the_policy(layout):
    profile = profile_for(layout, limits=SandboxLimits(tmp_size_mb=8, processes=32))
    assert profile.tmp_size_bytes == 8 * 1024 * 1024
    assert profile.limits.rlimits()["RLIMIT_NPROC"] == 32
    assert "RLIMIT_CPU" not in profile.limits.rlimits()


def test_missing_protected_paths_are_not_mounted_and_are_left_to_the_guard(tmp_path):
    # A mount point would be a new directory on the host (issue 14 §1).
    root = os.path.realpath(tmp_path)
    os.makedirs(f"{root}/ws/.git")
    protected = (f"{root}/ws/.git/hooks", f"{root}/ws/.pi/extensions", f"{root}/ws/a/b/c")
    profile = SandboxProfile(
        rw_binds=(f"{root}/ws",), protected=protected, cwd=f"{root}/ws", seccomp=False
    )
    assert profile.protect_mounts == ()
    assert set(profile.missing_protected) == set(protected)
    assert profile.pins == ()
    argv = build_bwrap_argv(profile, ["true"], bwrap="bwrap")
    assert not any(p.startswith(f"{root}/ws/") for p in argv)


def test_a_profile_wanting_seccomp_refuses_to_build_without_the_filter(tmp_path):
    profile = SandboxProfile(cwd="/")
    with pytest.raises(ValueError, match="seccomp"):
        build_bwrap_argv(profile, ["true"], bwrap="bwrap")


@pytest.mark.parametrize("root", ["/", "/usr", "/etc"])
def test_system_directories_are_never_writable_roots(root):
    with pytest.raises(SandboxError, match="system directory"):
        SandboxProfile(rw_binds=(root,), cwd="/")


def test_policy_files_inside_a_writable_root_are_kept_read_only(layout):
    ws = layout["ws"]
    (ws / "policy.yaml").write_text("version: 1\n")
    outside = layout["root"] / "org.yaml"
    outside.write_text("version: 1\n")
    profile = worker_profile(
        "tool",
        workspace=ws,
        home=layout["home"],
        agent_dir=layout["agent"],
        protect=[ws / "policy.yaml", outside],
    )
    assert str(ws / "policy.yaml") in profile.protected
    assert str(outside) not in profile.protected


@pytest.mark.parametrize(
    ("grant", "why"),
    [
        (".git", "persistence path"),
        (".git/hooks", "persistence path"),
        (".pi/extensions", "persistence path"),
        ("state", "agent directory"),
        ("pol", "policy file"),
        ("keep", "deny_write"),
    ],
)
def test_a_writable_grant_inside_a_read_only_path_is_refused(layout, grant, why):
    ws = layout["ws"]
    for rel in (".git/hooks", ".pi/extensions", "state", "pol", "keep"):
        (ws / rel).mkdir(parents=True, exist_ok=True)
    (ws / "pol" / "p.yaml").write_text("version: 1\n")
    settings = SandboxSettings(
        workspace_writable=False, writable_roots=(grant,), deny_write=("keep",)
    )
    with pytest.raises(SandboxError, match="kept read-only"):
        worker_profile(
            "tool",
            workspace=ws,
            home=layout["home"],
            agent_dir=ws / "state",
            settings=settings,
            protect=[ws / "pol"],
        )


def test_an_agent_directory_inside_the_workspace_is_kept_read_only(layout):
    ws = layout["ws"]
    (ws / "state" / "extensions").mkdir(parents=True)
    profile = worker_profile("tool", workspace=ws, home=layout["home"], agent_dir=ws / "state")
    assert str(ws / "state") in profile.protected


def test_protected_paths_below_a_subdirectory_pin_every_directory_above_them(layout):
    ws = layout["ws"]
    (ws / "vendor" / "lib" / ".git").mkdir(parents=True)
    profile = worker_profile(
        "tool",
        workspace=ws,
        home=layout["home"],
        agent_dir=layout["agent"],
        settings=SandboxSettings(deny_write=("vendor/lib/.git",)),
    )
    assert profile.pins == (str(ws / "vendor"), str(ws / "vendor" / "lib"))
    argv = build_bwrap_argv(profile, ["true"], bwrap="bwrap", seccomp_fd=5)
    pin = argv.index(str(ws / "vendor"))
    assert argv[pin - 1 : pin + 2] == ["--bind", str(ws / "vendor"), str(ws / "vendor")]
    assert pin < argv.index(str(ws / "vendor" / "lib" / ".git"))


@pytest.mark.parametrize("which", ["deny_write", "policy"])
def test_symlinked_deny_write_entries_and_policy_files_are_refused(layout, which):
    ws = layout["ws"]
    (ws / "Makefile.real").write_text("all:\n")
    (ws / "Makefile").symlink_to("Makefile.real")
    kwargs = (
        {"settings": SandboxSettings(deny_write=("Makefile",))}
        if which == "deny_write"
        else {"protect": [ws / "Makefile"]}
    )
    with pytest.raises(SandboxError, match="is a symlink"):
        worker_profile(
            "tool", workspace=ws, home=layout["home"], agent_dir=layout["agent"], **kwargs
        )


def test_a_protected_file_with_another_hard_link_is_refused(layout):
    ws = layout["ws"]
    (ws / "p.yaml").write_text("version: 1\n")
    os.link(ws / "p.yaml", ws / ".keep")
    with pytest.raises(SandboxError, match="2 hard links"):
        worker_profile(
            "tool",
            workspace=ws,
            home=layout["home"],
            agent_dir=layout["agent"],
            protect=[ws / "p.yaml"],
        )
    with pytest.raises(SandboxError, match="2 hard links"):
        profile_for(layout, deny_write=("p.yaml",))


def test_hidden_files_are_masked(layout):
    ws = layout["ws"]
    (ws / "audit.jsonl").write_text("{}\n")
    profile = worker_profile(
        "tool",
        workspace=ws,
        home=layout["home"],
        agent_dir=layout["agent"],
        protect=[ws / "audit.jsonl"],
        hide=[ws / "audit.jsonl"],
    )
    assert str(ws / "audit.jsonl") in profile.protected
    assert (str(ws / "audit.jsonl"), "file") in profile.deny_masks


@pytest.mark.parametrize("path", ["/tmp", "/", "~", "/run", "/var/run"])
def test_read_only_paths_that_contain_shared_directories_are_refused(layout, path):
    # A read-only bind still lets a process connect to the Unix sockets below it
    # (other runs' egress proxies, docker.sock) and read other runs' logs.
    with pytest.raises(SandboxError, match=r"sandbox\.filesystem\.read_only"):
        profile_for(layout, read_only=(path,))


def test_deny_read_masks_and_nested_read_only_binds_pin_their_parents(layout):
    ws = layout["ws"]
    (ws / "config").mkdir()
    (ws / "config" / "prod.secret").write_text("s")
    profile = profile_for(layout, deny_read=("config/prod.secret",))
    assert str(ws / "config") in profile.pins
