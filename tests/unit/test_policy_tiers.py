"""Policy tiers (issue 4 "Tiers and precedence"): managed, user and project files
combined so that a lower tier only tightens, with provenance for ``pi policy show``
and a reload that never falls back to "no policy" (case 8).

Every test builds its files under ``tmp_path`` and loads them with
`PolicyLocations` (never ``/etc/pi/policy.d``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from policy_tier_files import Files, write_dedented

from pi_sandbox.errors import PolicyFileError
from pi_sandbox.policies import (
    AUDIT_RECORDS,
    LoadedPolicyFile,
    Policy,
    PolicyLocations,
    PolicyStore,
    ValueOrigin,
    build_policy,
    load_effective_policy,
    load_policy_file,
)
from pi_sandbox.sandbox.settings import SandboxLimits
from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, discover_extensions

DEFAULT_LIMITS = SandboxLimits()


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


RM_RF_RULES = """
tool_call:
  rules:
    - id: no-rm-rf
      tool: bash
      command: [rm, -rf]
      decision: deny
      reason: Recursive deletes are not allowed.
"""
DENY_RM_RF = "\nversion: 1\n" + RM_RF_RULES.lstrip("\n")

ALLOW_EVERYTHING_BASH = """
version: 1
tool_call:
  default: allow
  rules:
    - id: user-allows-bash
      tool: bash
      decision: allow
      reason: I trust my shell.
"""


def origins(policy: Policy, key: str) -> list[ValueOrigin]:
    return [origin for origin in policy.provenance if origin.key == key]


def one_origin(policy: Policy, key: str) -> ValueOrigin:
    [origin] = origins(policy, key)
    return origin


# -- tool_call: a lower tier only tightens ----------------------------------------


def test_a_user_allow_rule_cannot_lift_a_managed_deny(files):
    managed = files.managed(DENY_RM_RF)
    files.set_user(ALLOW_EVERYTHING_BASH)
    decision = files.decide(files.load(), "rm -rf build")
    assert (decision.decision, decision.rule, decision.tier) == ("deny", "no-rm-rf", "managed")
    assert str(decision.source) == str(managed)


def test_a_user_allow_rule_cannot_lift_a_managed_default_ask(files):
    managed = files.managed("version: 1\ntool_call: {default: ask}\n")
    files.set_user(ALLOW_EVERYTHING_BASH)
    decision = files.decide(files.load(), "echo hi")
    assert (decision.decision, decision.rule, decision.tier) == ("ask", None, "managed")
    assert str(decision.source) == str(managed)


def test_a_project_allow_rule_cannot_lift_a_managed_or_user_deny(files):
    files.managed(DENY_RM_RF)
    files.set_user(
        """
        version: 1
        tool_call:
          rules:
            - {id: no-curl, tool: bash, command: [curl], decision: deny, reason: no net}
        """
    )
    files.set_project(ALLOW_EVERYTHING_BASH)
    policy = files.load()
    assert files.decide(policy, "rm -rf x").decision == "deny"
    decision = files.decide(policy, "curl example.com")
    assert (decision.decision, decision.rule, decision.tier) == ("deny", "no-curl", "user")


@pytest.mark.parametrize("tier", ["user", "project"])
def test_a_lower_tier_deny_rule_tightens(files, tier):
    files.managed("version: 1\ntool_call: {default: allow}\n")
    text = """
    version: 1
    tool_call:
      rules:
        - {id: no-curl, tool: bash, command: [curl], decision: deny, reason: no downloads}
    """
    path = files.set_user(text) if tier == "user" else files.set_project(text)
    policy = files.load()
    decision = files.decide(policy, "echo ok && curl example.com")
    assert (decision.decision, decision.rule, decision.tier) == ("deny", "no-curl", tier)
    assert str(decision.source) == str(path)
    assert files.decide(policy, "echo ok").decision == "allow"


@pytest.mark.parametrize("tier", ["user", "project"])
def test_a_lower_tier_default_deny_tightens_the_managed_default(files, tier):
    files.managed("version: 1\ntool_call: {default: allow}\n")
    text = "version: 1\ntool_call: {default: deny}\n"
    path = files.set_user(text) if tier == "user" else files.set_project(text)
    decision = files.decide(files.load(), "ls")
    assert (decision.decision, decision.tier, str(decision.source)) == ("deny", tier, str(path))


def test_a_managed_allow_rule_does_not_lift_a_user_default_deny(files):
    files.managed(ALLOW_EVERYTHING_BASH)
    files.set_user("version: 1\ntool_call: {default: deny}\n")
    decision = files.decide(files.load(), "ls")
    assert (decision.decision, decision.tier) == ("deny", "user")


def test_the_project_tier_is_not_read_when_the_project_is_untrusted(files):
    files.set_project(DENY_RM_RF)
    policy = files.load(trusted=False)
    assert files.project not in policy.sources
    assert files.decide(policy, "rm -rf x").decision == "allow"
    assert files.decide(files.load(trusted=True), "rm -rf x").decision == "deny"


# -- lock -----------------------------------------------------------------------


@pytest.mark.parametrize("tier", ["user", "project"])
def test_a_managed_tool_call_lock_ignores_lower_tier_rules_with_a_diagnostic(files, tier):
    managed = files.managed("version: 1\nlock: [tool_call]\ntool_call: {default: allow}\n")
    lower = (files.set_user if tier == "user" else files.set_project)(DENY_RM_RF)
    policy = files.load()
    assert files.decide(policy, "rm -rf x").decision == "allow"
    assert [t.tier for t in policy.tiers] == ["managed"]
    [diagnostic] = policy.diagnostics
    assert str(lower) in diagnostic and str(managed) in diagnostic
    assert "'tool_call'" in diagnostic and "locked" in diagnostic
    assert one_origin(policy, "lock.tool_call") == ValueOrigin(
        "lock.tool_call", True, "managed", (str(managed),)
    )


def test_a_lock_written_as_a_single_word_is_a_list_of_one(files):
    files.managed("version: 1\nlock: tool_call\n")
    files.set_user(DENY_RM_RF)
    policy = files.load()
    assert files.decide(policy, "rm -rf x").decision == "allow"
    assert len(policy.diagnostics) == 1


def test_managed_directory_peers_are_not_locked_by_each_other(files):
    files.managed("version: 1\nlock: [tool_call, sandbox]\n", name="10-lock.yaml")
    peer = files.managed(
        DENY_RM_RF + "sandbox:\n  filesystem: {deny_read: [/srv/secret]}\n", name="20-peer.yaml"
    )
    policy = files.load()
    assert policy.diagnostics == ()
    decision = files.decide(policy, "rm -rf x")
    assert (decision.decision, str(decision.source)) == ("deny", str(peer))
    assert policy.sandbox.deny_read == ("/srv/secret",)


def test_a_managed_directory_lock_binds_policy_options(files):
    # --policy files (and $PI_MANAGED_POLICY_DIR) are chosen by whoever starts pi:
    # a lock in /etc/pi/policy.d must bind them, or a user could pass around it.
    locker = files.managed("version: 1\nlock: [tool_call, sandbox]\n", name="10-lock.yaml")
    cli = files.cli(
        "version: 1\ntool_call: {default: ask}\nsandbox:\n  filesystem: {writable_roots: [build]}\n"
    )
    policy = files.load()
    assert policy.sandbox.writable_roots == ()
    assert files.decide(policy, "ls").decision == "allow"
    assert policy.diagnostics == (
        f"{cli}: section 'sandbox' ignored: locked by {locker} (managed tier)",
        f"{cli}: section 'tool_call' ignored: locked by {locker} (managed tier)",
    ) or sorted(policy.diagnostics) == sorted(
        [
            f"{cli}: section 'sandbox' ignored: locked by {locker} (managed tier)",
            f"{cli}: section 'tool_call' ignored: locked by {locker} (managed tier)",
        ]
    )


def test_a_managed_sandbox_lock_ignores_user_and_project_sandbox_sections(files):
    managed = files.managed(
        """
        version: 1
        lock: [sandbox]
        sandbox:
          filesystem: {writable_roots: [/opt/cache]}
          limits: {processes: 256}
        """
    )
    user = files.set_user(
        """
        version: 1
        sandbox:
          filesystem: {deny_read: [/home/me/.aws], writable_roots: [/opt/cache]}
          limits: {processes: 64}
        """
    )
    project = files.set_project(
        "version: 1\nsandbox:\n  filesystem: {deny_read: [secrets]}\n" + RM_RF_RULES.lstrip("\n")
    )
    policy = files.load()
    assert policy.sandbox.deny_read == ()
    assert policy.sandbox.writable_roots == ("/opt/cache",)
    assert policy.sandbox.limits.processes == 256
    assert len(policy.diagnostics) == 2
    for lower, diagnostic in zip((user, project), policy.diagnostics, strict=True):
        assert diagnostic.startswith(f"{lower}: section 'sandbox' ignored")
        assert str(managed) in diagnostic
    # Only the locked section is ignored: the project's tool_call rules still apply.
    assert files.decide(policy, "rm -rf x").decision == "deny"


def test_a_user_lock_binds_the_project_but_not_the_user_tier_itself(files):
    user = files.set_user("version: 1\nlock: [tool_call]\n" + RM_RF_RULES.lstrip("\n"))
    project = files.set_project(
        """
        version: 1
        tool_call:
          rules:
            - {id: no-curl, tool: bash, command: [curl], decision: deny, reason: nope}
        """
    )
    policy = files.load()
    assert files.decide(policy, "rm -rf x").decision == "deny"
    assert files.decide(policy, "curl x").decision == "allow"
    [diagnostic] = policy.diagnostics
    assert str(project) in diagnostic and str(user) in diagnostic and "(user tier)" in diagnostic


# -- sandbox ---------------------------------------------------------------------


def test_a_user_cannot_add_writable_roots_when_managed_grants_none(files):
    files.managed("version: 1\nsandbox:\n  filesystem: {writable_roots: []}\n")
    files.set_user("version: 1\nsandbox:\n  filesystem: {writable_roots: [/tmp/extra]}\n")
    policy = files.load()
    assert policy.sandbox.writable_roots == ()
    assert origins(policy, "sandbox.filesystem.writable_roots") == []


def test_writable_roots_intersect_across_tiers(files):
    managed = files.managed(
        "version: 1\nsandbox:\n  filesystem: {writable_roots: [/opt/a, /opt/b]}\n"
    )
    user = files.set_user(
        "version: 1\nsandbox:\n  filesystem: {writable_roots: [/opt/b, /opt/c]}\n"
    )
    policy = files.load()
    assert policy.sandbox.writable_roots == ("/opt/b",)
    assert one_origin(policy, "sandbox.filesystem.writable_roots") == ValueOrigin(
        "sandbox.filesystem.writable_roots", "/opt/b", "managed", (str(managed), str(user))
    )


def test_the_user_may_grant_what_no_managed_file_constrained(files):
    files.managed("version: 1\ntool_call: {default: allow}\n")
    user = files.set_user("version: 1\nsandbox:\n  filesystem: {writable_roots: [/opt/cache]}\n")
    policy = files.load()
    assert policy.sandbox.writable_roots == ("/opt/cache",)
    assert one_origin(policy, "sandbox.filesystem.writable_roots").files == (str(user),)


@pytest.mark.parametrize(
    ("section", "attribute", "needle"),
    [
        (
            "filesystem: {writable_roots: [/opt/cache]}",
            "writable_roots",
            "filesystem.writable_roots",
        ),
        ("network: {mode: allowlist, allow: [example.com]}", "network_allow", "network.allow"),
        ("environment: {allow: [LANG]}", "environment_allow", "environment.allow"),
    ],
)
def test_a_project_cannot_grant_what_no_higher_tier_granted(files, section, attribute, needle):
    files.managed("version: 1\ntool_call: {default: allow}\n")
    project = files.set_project(f"version: 1\nsandbox:\n  {section}\n")
    policy = files.load()
    assert getattr(policy.sandbox, attribute) == ()
    assert not policy.sandbox.network_enabled
    [diagnostic] = policy.diagnostics
    assert diagnostic.startswith(f"{project}: sandbox.{needle}")
    assert "ignored" in diagnostic and "project" in diagnostic


def test_a_project_can_only_narrow_grants_a_higher_tier_made(files):
    files.managed(
        """
        version: 1
        sandbox:
          network: {mode: allowlist, allow: [example.com, pypi.org]}
          environment: {allow: [LANG, TERM]}
        """
    )
    project = files.set_project(
        """
        version: 1
        sandbox:
          network: {mode: allowlist, allow: [example.com, evil.example]}
          environment: {allow: [LANG, EDITOR]}
        """
    )
    policy = files.load()
    assert policy.sandbox.network == "allowlist"
    assert policy.sandbox.network_allow == ("example.com",)
    assert policy.sandbox.environment_allow == ("LANG",)
    assert len(policy.diagnostics) == 2
    assert all(line.startswith(str(project)) for line in policy.diagnostics)
    assert "evil.example" in policy.diagnostics[0] and "EDITOR" in policy.diagnostics[1]


def test_a_lower_tier_network_none_turns_the_network_off(files):
    files.managed("version: 1\nsandbox:\n  network: {mode: allowlist, allow: [example.com]}\n")
    project = files.set_project("version: 1\nsandbox:\n  network: {mode: none}\n")
    policy = files.load()
    assert policy.sandbox.network == "none" and policy.sandbox.network_allow == ()
    assert one_origin(policy, "sandbox.network.mode") == ValueOrigin(
        "sandbox.network.mode", "none", "project", (str(project),)
    )


def test_a_project_can_add_deny_read_and_deny_write_but_not_read_only(files):
    managed = files.managed("version: 1\nsandbox:\n  filesystem: {deny_read: [/srv/keys]}\n")
    project = files.set_project(
        """
        version: 1
        sandbox:
          filesystem: {deny_read: [secrets, /srv/keys], deny_write: [build], read_only: [/etc/shadow]}
        """
    )
    policy = files.load()
    assert policy.sandbox.deny_read == ("/srv/keys", "secrets")
    assert policy.sandbox.deny_write == ("build",)
    # read_only binds host paths into the sandbox: a grant a repository cannot make.
    assert policy.sandbox.read_only == ()
    assert any("read_only" in line and str(project) in line for line in policy.diagnostics)
    rows = {o.value: o for o in origins(policy, "sandbox.filesystem.deny_read")}
    assert rows["/srv/keys"] == ValueOrigin(
        "sandbox.filesystem.deny_read", "/srv/keys", "managed", (str(managed), str(project))
    )
    assert rows["secrets"].tier == "project" and rows["secrets"].files == (str(project),)


@pytest.mark.parametrize("tier", ["user", "project"])
def test_workspace_read_in_a_lower_tier_beatswrite_dedented(files, tier):
    files.managed("version: 1\nsandbox:\n  filesystem: {workspace: write}\n")
    text = "version: 1\nsandbox:\n  filesystem: {workspace: read}\n"
    path = files.set_user(text) if tier == "user" else files.set_project(text)
    policy = files.load()
    assert policy.sandbox.workspace_writable is False
    assert one_origin(policy, "sandbox.filesystem.workspace") == ValueOrigin(
        "sandbox.filesystem.workspace", "read", tier, (str(path),)
    )


def test_only_a_managed_or_user_file_grants_workspace_write_explicitly(files):
    files.set_project("version: 1\nsandbox:\n  filesystem: {workspace: write}\n")
    assert files.load().workspace_write_granted is False
    files.set_user("version: 1\nsandbox:\n  filesystem: {workspace: write}\n")
    assert files.load().workspace_write_granted is True
    files.set_user("version: 1\nsandbox:\n  filesystem: {deny_read: [/x]}\n")
    assert files.load().workspace_write_granted is False  # the default is not a grant


def test_limits_take_the_smallest_value_across_tiers(files):
    managed = files.managed(
        "version: 1\nsandbox:\n  limits: {processes: 256, open_files: 1024, memory_mb: 2048}\n"
    )
    user = files.set_user(
        "version: 1\nsandbox:\n  limits: {processes: 128, open_files: 8192, cpu_seconds: 60}\n"
    )
    policy = files.load()
    limits = policy.sandbox.limits
    assert (limits.processes, limits.open_files, limits.memory_mb) == (128, 1024, 2048)
    assert limits.cpu_seconds == 60
    assert limits.tool_timeout_s == DEFAULT_LIMITS.tool_timeout_s
    assert one_origin(policy, "sandbox.limits.processes") == ValueOrigin(
        "sandbox.limits.processes", 128, "user", (str(user),)
    )
    assert one_origin(policy, "sandbox.limits.open_files") == ValueOrigin(
        "sandbox.limits.open_files", 1024, "managed", (str(managed),)
    )
    assert one_origin(policy, "sandbox.limits.tool_timeout_s") == ValueOrigin(
        "sandbox.limits.tool_timeout_s", DEFAULT_LIMITS.tool_timeout_s, "default", ()
    )


def test_a_project_cannot_raise_a_limit_above_the_default(files):
    files.set_project(
        "version: 1\nsandbox:\n  limits: {processes: 4096, tool_timeout_s: 60, cpu_seconds: 99999}\n"
    )
    limits = files.load().sandbox.limits
    assert limits.processes == DEFAULT_LIMITS.processes
    assert limits.cpu_seconds == DEFAULT_LIMITS.cpu_seconds
    assert limits.tool_timeout_s == 60  # lowering is fine


def test_a_project_cannot_raise_a_limit_a_higher_tier_set(files):
    files.managed("version: 1\nsandbox:\n  limits: {processes: 100}\n")
    files.set_project("version: 1\nsandbox:\n  limits: {processes: 200}\n")
    assert files.load().sandbox.limits.processes == 100


# -- extensions --------------------------------------------------------------------


def test_extensions_denied_by_name_name_the_policy_file(files):
    managed = files.managed("version: 1\nextensions: {deny: [evil, 'bad-*']}\n")
    rules = files.load().extensions
    why = rules.refusal("evil", Path("/anywhere/evil.py"), "user")
    assert why == f"denied by pattern 'evil' in policy {managed}"
    assert "bad-*" in rules.refusal("bad-one", Path("/x/bad-one"), "cli")
    assert rules.refusal("good", Path("/anywhere/good.py"), "project") is None


def test_extensions_denied_by_path_glob(files):
    user = files.set_user("version: 1\nextensions: {deny: ['/opt/untrusted/*']}\n")
    rules = files.load().extensions
    why = rules.refusal("tool", Path("/opt/untrusted/tool.py"), "cli")
    assert why is not None and str(user) in why
    # A pattern with '/' matches paths only: not an extension merely named like it.
    assert rules.refusal("tool", Path("/home/me/tool.py"), "cli") is None


@pytest.mark.parametrize("tier", ["user", "project"])
def test_a_lower_tier_deny_accumulates(files, tier):
    files.managed("version: 1\nextensions: {deny: [a]}\n")
    text = "version: 1\nextensions: {deny: [b]}\n"
    path = files.set_user(text) if tier == "user" else files.set_project(text)
    rules = files.load().extensions
    assert rules.refusal("a", Path("/e/a.py"), "cli") is not None
    origin = "cli" if tier == "user" else "project"
    assert str(path) in rules.refusal("b", Path("/e/b.py"), origin)
    if tier == "project":
        # A repository's policy governs its own extensions, never the user's.
        assert rules.refusal("b", Path("/e/b.py"), "cli") is None


def test_allow_lists_intersect(files):
    managed = files.managed("version: 1\nextensions: {allow: [a, b]}\n")
    user = files.set_user("version: 1\nextensions: {allow: [b, c]}\n")
    rules = files.load().extensions
    assert rules.refusal("b", Path("/e/b.py"), "cli") is None
    assert rules.refusal("a", Path("/e/a.py"), "cli") == (
        f"not in the extensions.allow list of policy {user}"
    )
    assert rules.refusal("c", Path("/e/c.py"), "cli") == (
        f"not in the extensions.allow list of policy {managed}"
    )


def test_a_project_allow_list_cannot_admit_what_a_higher_allow_list_excludes(files):
    # Path patterns: a bare name cannot admit a project extension (name spoofing).
    files.managed("version: 1\nextensions: {allow: ['*/e/a.py']}\n")
    files.set_project("version: 1\nextensions: {allow: ['*/e/a.py', '*/e/z.py']}\n")
    rules = files.load().extensions
    assert rules.refusal("a", Path("/e/a.py"), "project") is None
    assert rules.refusal("z", Path("/e/z.py"), "project") is not None


def test_project_deny_refuses_every_project_extension_only(files):
    user = files.set_user("version: 1\nextensions: {project: deny}\n")
    policy = files.load()
    why = policy.extensions.refusal("helper", Path("/ws/.pi/extensions/helper.py"), "project")
    assert why == f"project extensions are not allowed by policy {user}"
    assert policy.extensions.refusal("helper", Path("/e/helper.py"), "user") is None
    assert one_origin(policy, "extensions.project") == ValueOrigin(
        "extensions.project", "deny", "user", (str(user),)
    )


def test_a_project_cannot_re_allow_project_extensions(files):
    files.managed("version: 1\nextensions: {project: deny}\n")
    files.set_project("version: 1\nextensions: {project: allow}\n")
    assert files.load().extensions.project_allowed is False


def test_capability_false_wins_across_tiers_and_entries(files):
    files.managed(
        """
        version: 1
        extensions:
          capabilities:
            "*": {exec: true, network: true, override_builtin_tools: true}
            quiet: {network: false}
        """
    )
    files.set_user(
        """
        version: 1
        extensions:
          capabilities:
            quiet: {exec: false}
        """
    )
    rules = files.load().extensions
    quiet = rules.capabilities_for("quiet", Path("/e/quiet.py"), "user")
    other = rules.capabilities_for("other", Path("/e/other.py"), "user")
    assert (quiet["exec"], quiet["network"], quiet["override_builtin_tools"]) == (
        False,
        False,
        True,
    )
    assert (other["exec"], other["network"], other["override_builtin_tools"]) == (True, True, True)


def test_capability_defaults_without_any_entry(files):
    rules = files.load().extensions
    assert rules.capabilities_for("x", Path("/e/x.py")) == {
        "override_builtin_tools": False,
        "send_user_messages": True,
        "ui": True,
        "exec": True,
        "network": False,
        "set_model": True,
        "register_providers": True,
    }


def test_the_handler_deadline_is_the_smallest_any_tier_sets(files):
    assert files.load().extensions.handler_timeout_s == 30.0
    files.managed("version: 1\nextensions:\n  handler_timeout_s: 12\n")
    assert files.load().extensions.handler_timeout_s == 12.0


def test_a_project_can_withhold_capabilities_but_its_true_is_ignored(files):
    files.managed('version: 1\nextensions:\n  capabilities:\n    "*": {ui: true}\n')
    project = files.set_project(
        """
        version: 1
        extensions:
          capabilities:
            "*": {override_builtin_tools: true, network: true, ui: false}
        """
    )
    policy = files.load()
    caps = policy.extensions.capabilities_for("x", Path("/ws/.pi/extensions/x.py"))
    assert (caps["override_builtin_tools"], caps["network"], caps["ui"]) == (False, False, False)
    assert len(policy.diagnostics) == 2
    for capability, line in zip(
        ("override_builtin_tools", "network"), policy.diagnostics, strict=True
    ):
        assert line.startswith(f"{project}: extensions.capabilities['*'].{capability}: true ")
        assert "ignored" in line


def test_discovery_refuses_extensions_by_policy_and_reports_each(files, tmp_path):
    managed = files.managed(
        "version: 1\nextensions: {deny: [evil], project: deny}\n", name="10-ext.yaml"
    )
    agent_dir = tmp_path / "agent"
    (agent_dir / "extensions").mkdir()
    (agent_dir / "extensions" / "evil.py").write_text("def extension(pi): pass\n")
    (agent_dir / "extensions" / "fine.py").write_text("def extension(pi): pass\n")
    (files.workspace / ".pi" / "extensions").mkdir()
    (files.workspace / ".pi" / "extensions" / "proj.py").write_text("def extension(pi): pass\n")
    refused: list[tuple[ExtensionSource, str]] = []
    sources, notices = discover_extensions(
        cwd=files.workspace,
        agent_dir=agent_dir,
        cli_paths=[],
        no_extensions=False,
        project_trust="yes",
        rules=files.load().extensions,
        refused=refused,
    )
    assert [(s.path.name, s.origin) for s in sources] == [("fine.py", "user")]
    assert sorted((s.path.name, s.origin) for s, _ in refused) == [
        ("evil.py", "user"),
        ("proj.py", "project"),
    ]
    assert len(notices) == 2
    assert all(n.startswith("Refused ") and str(managed) in n for n in notices)


# -- trust ----------------------------------------------------------------------------

TRUST_ORDER = ["yes", "sandboxed", "ask", "no"]


@pytest.mark.parametrize("managed_default", TRUST_ORDER)
@pytest.mark.parametrize("user_default", TRUST_ORDER)
def test_the_strictest_trust_default_wins(files, managed_default, user_default):
    managed = files.managed(f"version: 1\ntrust: {{default: '{managed_default}'}}\n")
    user = files.set_user(f"version: 1\ntrust: {{default: '{user_default}'}}\n")
    trust = files.load().trust
    expected = max(managed_default, user_default, key=TRUST_ORDER.index)
    assert trust.default == expected
    # The first file with the strictest value is named.
    source = managed if managed_default == expected else user
    assert trust.default_source == str(source)


USERS_MAY_TRUST_ORDER = ["yes", "sandboxed", "no"]


@pytest.mark.parametrize("managed_value", USERS_MAY_TRUST_ORDER)
@pytest.mark.parametrize("user_value", USERS_MAY_TRUST_ORDER)
def test_the_strictest_users_may_trust_wins(files, managed_value, user_value):
    files.managed(f"version: 1\ntrust: {{users_may_trust: '{managed_value}'}}\n")
    files.set_user(f"version: 1\ntrust: {{users_may_trust: '{user_value}'}}\n")
    trust = files.load().trust
    assert trust.users_may_trust == max(managed_value, user_value, key=USERS_MAY_TRUST_ORDER.index)


def test_trust_refusals_name_the_policy_file(files):
    managed = files.managed("version: 1\ntrust: {users_may_trust: sandboxed}\n")
    trust = files.load().trust
    assert trust.refusal("yes") == f"policy {managed} allows only 'sandboxed' or 'no'"
    assert trust.refusal("sandboxed") is None
    assert trust.refusal("no") is None

    files.set_user("version: 1\ntrust: {users_may_trust: 'no'}\n")
    trust = files.load().trust
    assert trust.refusal("yes") == f"policy {files.user} allows only 'no'"
    assert trust.refusal("sandboxed") == f"policy {files.user} forbids trusting projects"
    assert trust.refusal("no") is None


def test_no_trust_section_allows_every_decision_and_defaults_to_ask(files):
    trust = files.load().trust
    assert (trust.default, trust.users_may_trust) == ("ask", "yes")
    assert all(trust.refusal(d) is None for d in ("yes", "sandboxed", "no"))


@pytest.mark.parametrize(
    ("text", "default", "users"),
    [
        ("trust: {default: yes, users_may_trust: no}", "yes", "no"),
        ("trust: {default: no, users_may_trust: yes}", "no", "yes"),
        ("trust: {default: 'no', users_may_trust: 'yes'}", "no", "yes"),
        ("trust:\n  default: No\n  users_may_trust: YES\n", "no", "yes"),
    ],
)
def test_yaml_yes_and_no_booleans_are_accepted_in_trust_fields(files, text, default, users):
    path = files.managed(f"version: 1\n{text}\n")
    loaded = load_policy_file(path)
    assert (loaded.trust.default, loaded.trust.users_may_trust) == (default, users)
    trust = files.load().trust
    assert (trust.default, trust.users_may_trust) == (default, users)


def test_a_bad_trust_word_is_a_load_error_with_file_and_line(files):
    path = files.managed("version: 1\ntrust:\n  default: maybe\n")
    with pytest.raises(PolicyFileError) as info:
        load_policy_file(path)
    assert f"{path}:3: trust.default: must be one of" in str(info.value)


def test_a_project_trust_section_is_ignored_with_a_diagnostic(files):
    files.set_user("version: 1\ntrust: {default: sandboxed}\n")
    project = files.set_project("version: 1\ntrust: {default: 'no', users_may_trust: 'no'}\n")
    policy = files.load()
    assert (policy.trust.default, policy.trust.users_may_trust) == ("sandboxed", "yes")
    assert policy.trust.default_source == str(files.user)
    [diagnostic] = policy.diagnostics
    assert diagnostic.startswith(f"{project}: section 'trust' ignored")


# -- audit ------------------------------------------------------------------------------


def test_a_project_cannot_choose_the_audit_file(files):
    managed = files.managed("version: 1\naudit: {file: /var/log/pi/org.jsonl}\n")
    user = files.set_user("version: 1\naudit: {file: ~/pi-audit.jsonl}\n")
    project = files.set_project("version: 1\naudit: {file: /tmp/attacker.jsonl}\n")
    policy = files.load()
    assert policy.audit.files == (
        ("/var/log/pi/org.jsonl", str(managed)),
        ("~/pi-audit.jsonl", str(user)),
    )
    [diagnostic] = policy.diagnostics
    assert diagnostic.startswith(f"{project}: audit.file ignored")
    assert [(o.value, o.tier) for o in origins(policy, "audit.file")] == [
        ("/var/log/pi/org.jsonl", "managed"),
        ("~/pi-audit.jsonl", "user"),
    ]


def test_audit_include_is_the_union_in_record_order(files):
    managed = files.managed("version: 1\naudit: {include: [trust, tool_call]}\n")
    user = files.set_user("version: 1\naudit: {include: [extension, tool_call]}\n")
    policy = files.load()
    assert policy.audit.include == ("tool_call", "trust", "extension")
    rows = {o.value: o for o in origins(policy, "audit.include")}
    assert rows["tool_call"] == ValueOrigin(
        "audit.include", "tool_call", "managed", (str(managed), str(user))
    )
    assert rows["extension"].tier == "user"


def test_audit_include_defaults_to_every_record(files):
    files.managed("version: 1\naudit: {arguments: false}\n")
    policy = files.load()
    assert policy.audit.include == AUDIT_RECORDS
    assert policy.audit.arguments is False


def test_audit_arguments_come_from_the_highest_tier_that_sets_them(files):
    managed = files.managed("version: 1\naudit: {arguments: true}\n")
    files.set_user("version: 1\naudit: {arguments: false}\n")
    policy = files.load()
    assert policy.audit.arguments is True
    assert one_origin(policy, "audit.arguments") == ValueOrigin(
        "audit.arguments", True, "managed", (str(managed),)
    )


@pytest.mark.parametrize("value", ["audit.jsonl", "./logs/audit.jsonl", "logs/../a.jsonl"])
def test_a_relative_audit_file_is_rejected_with_file_and_line(files, value):
    path = files.managed(f"version: 1\ntool_call: {{default: allow}}\naudit:\n  file: {value}\n")
    with pytest.raises(PolicyFileError) as info:
        files.load()
    message = str(info.value)
    assert message.startswith(f"{path}:4: audit.file: ")
    assert "absolute" in message


# -- provenance (pi policy show) ---------------------------------------------------------


def test_every_value_names_its_file_and_tier(files):
    managed = files.managed(
        """
        version: 1
        tool_call:
          default: ask
          rules:
            - {id: no-rm, tool: [bash], command: [rm], decision: deny, reason: nope}
        sandbox:
          network: {mode: allowlist, allow: [pypi.org]}
        trust: {users_may_trust: sandboxed}
        """
    )
    user = files.set_user(
        """
        version: 1
        tool_call:
          rules:
            - {id: ok-ls, tool: bash, command: [ls], decision: allow, reason: fine}
        trust: {default: 'no'}
        extensions: {deny: [evil]}
        """
    )
    policy = files.load()
    assert one_origin(policy, "tool_call.default[managed]") == ValueOrigin(
        "tool_call.default[managed]", "ask", "managed", (str(managed),)
    )
    assert one_origin(policy, "tool_call.default[user]").files == (str(user),)
    rules = {o.value["id"]: o for o in origins(policy, "tool_call.rules")}
    assert rules["no-rm"] == ValueOrigin(
        "tool_call.rules",
        {"id": "no-rm", "tool": ["bash"], "decision": "deny"},
        "managed",
        (str(managed),),
    )
    assert (rules["ok-ls"].tier, rules["ok-ls"].files) == ("user", (str(user),))
    assert one_origin(policy, "sandbox.network.allow") == ValueOrigin(
        "sandbox.network.allow", "pypi.org", "managed", (str(managed),)
    )
    assert one_origin(policy, "trust.default") == ValueOrigin(
        "trust.default", "no", "user", (str(user),)
    )
    assert one_origin(policy, "trust.users_may_trust").tier == "managed"
    assert one_origin(policy, "extensions.deny") == ValueOrigin(
        "extensions.deny", "evil", "user", (str(user),)
    )
    # Values nobody set are the built-in default, with no file.
    assert one_origin(policy, "extensions.project") == ValueOrigin(
        "extensions.project", "allow", "default", ()
    )
    assert one_origin(policy, "sandbox.limits.processes").tier == "default"
    # The rows are JSON-ready (pi policy show --json).
    assert one_origin(policy, "trust.default").as_dict() == {
        "key": "trust.default",
        "value": "no",
        "tier": "user",
        "files": [str(user)],
    }


def test_a_policy_without_files_shows_only_defaults(files):
    policy = files.load()
    assert policy.files == () and policy.tiers == ()
    assert policy.provenance
    assert all(o.tier == "default" and o.files == () for o in policy.provenance)
    assert files.decide(policy, "rm -rf /").decision == "allow"


# -- where files come from -----------------------------------------------------------------


def test_managed_directory_files_load_in_name_order_and_only_yaml(files):
    b = files.managed("version: 1\n", name="20-b.yaml")
    a = files.managed("version: 1\n", name="10-a.yaml")
    files.managed("this is not: [policy", name="README")
    files.managed("this is not: [policy", name="30-c.yml")
    files.managed("this is not: [policy", name="40-d.yaml.bak")
    files.managed("this is not: [policy", name="50-e.txt")
    cli = files.cli("version: 1\n")
    files.set_user("version: 1\n")
    files.set_project("version: 1\n")
    policy = files.load()
    assert [(f.tier, f.path) for f in policy.files] == [
        ("managed", a),
        ("managed", b),
        ("managed", cli),
        ("user", files.user),
        ("project", files.project),
    ]


def test_several_managed_directories_load_in_the_order_given(files, tmp_path):
    second = tmp_path / "second.d"
    second.mkdir()
    first_file = files.managed("version: 1\n", name="90-z.yaml")
    second_file = write_dedented(second / "00-a.yaml", "version: 1\n")
    locations = PolicyLocations(managed_dirs=(files.managed_dir, second, tmp_path / "missing"))
    policy = load_effective_policy(locations)
    assert policy.sources == (first_file, second_file)


def test_a_managed_file_wins_the_tie_between_strictest_defaults_in_name_order(files):
    first = files.managed("version: 1\ntool_call: {default: deny}\n", name="10-a.yaml")
    files.managed("version: 1\ntool_call: {default: deny}\n", name="20-b.yaml")
    assert str(files.load().default_source) == str(first)


def test_a_file_reachable_twice_loads_once_in_its_highest_tier(files):
    user = files.set_user(DENY_RM_RF)
    files.policy_files.append(user)
    policy = files.load()
    assert [(f.tier, f.path) for f in policy.files] == [("managed", user)]
    assert files.decide(policy, "rm -rf x").tier == "managed"


def test_a_missing_user_or_project_file_is_not_an_error(files):
    policy = files.load()
    assert policy.files == ()


def test_build_policy_refuses_files_out_of_tier_order(files):
    path = files.managed("version: 1\n")
    loaded = load_policy_file(path)
    with pytest.raises(ValueError, match="highest tier first"):
        build_policy(
            [LoadedPolicyFile("user", path, loaded), LoadedPolicyFile("managed", path, loaded)]
        )


# -- malformed files are fatal in every tier --------------------------------------------------

MALFORMED = {
    "bad value": ("version: 1\ntool_call:\n  default: maybe\n", 3, "tool_call.default"),
    "unknown key": ("version: 1\nsandbox:\n  filesytem: {}\n", 3, "sandbox.filesytem"),
    "bad yaml": ("version: 1\ntool_call: {default: allow\n", 3, "invalid YAML"),
    "bad lock": ("version: 1\nlock: [everything]\n", 2, "lock"),
}


@pytest.mark.parametrize("tier", ["managed", "cli", "user", "project"])
@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_file_in_any_tier_names_file_and_line(files, tier, kind):
    text, line, what = MALFORMED[kind]
    files.managed("version: 1\ntool_call: {default: allow}\n", name="00-good.yaml")
    writer = {
        "managed": files.managed,
        "cli": files.cli,
        "user": files.set_user,
        "project": files.set_project,
    }[tier]
    path = writer(text)
    with pytest.raises(PolicyFileError) as info:
        files.load()
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ")
    assert what in message


def test_a_managed_directory_entry_that_is_not_a_file_is_an_error(files):
    (files.managed_dir / "10-dir.yaml").mkdir()
    with pytest.raises(PolicyFileError, match=r"10-dir\.yaml"):
        files.load()


# -- reload (case 8) ------------------------------------------------------------------------------


@pytest.fixture
def store(files) -> PolicyStore:
    files.set_user(DENY_RM_RF)
    locations = files.locations()
    return PolicyStore(locations, load_effective_policy(locations))


def _still_denies_rm(files: Files, store: PolicyStore) -> None:
    decision = files.decide(store.current, "rm -rf x")
    assert (decision.decision, decision.rule) == ("deny", "no-rm-rf")


@pytest.mark.parametrize(
    "garbage",
    [
        "version: 1\ntool_call:\n  rules: [oops\n",
        "version: 2\n",
        "",
        "- just\n- a list\n",
        "version: 1\ntool_call: {default: perhaps}\n",
    ],
)
def test_a_corrupt_file_on_reload_keeps_the_last_valid_policy(files, store, garbage):
    before = store.current
    files.user.write_text(garbage)
    result = store.reload()
    assert result.ok is False
    assert result.error and str(files.user) in result.error
    assert store.current is before
    assert store.reloads == 0
    _still_denies_rm(files, store)


@pytest.mark.parametrize("tier", ["managed", "user", "project"])
def test_a_file_with_a_control_character_is_a_policy_file_error(files, tier):
    writer = {"managed": files.managed, "user": files.set_user, "project": files.set_project}
    path = writer[tier]("version: 1\n\x00\x01binary\n")
    with pytest.raises(PolicyFileError) as info:
        files.load()
    assert str(info.value).startswith(f"{path}:2: ")


def test_a_control_character_on_reload_keeps_the_last_valid_policy(files, store):
    files.user.write_text("version: 1\n\x00\x01binary\n")
    result = store.reload()
    assert result.ok is False and str(files.user) in result.error
    _still_denies_rm(files, store)


def test_a_non_utf8_file_on_reload_keeps_the_last_valid_policy(files, store):
    files.user.write_bytes(b"version: 1\n\xff\xfe\n")
    result = store.reload()
    assert result.ok is False and str(files.user) in result.error
    _still_denies_rm(files, store)


def test_an_unreadable_file_on_reload_keeps_the_last_valid_policy(files, store):
    files.user.unlink()
    files.user.mkdir()  # readable by nobody as a file, whoever runs the test
    result = store.reload()
    assert result.ok is False and str(files.user) in result.error
    _still_denies_rm(files, store)


def test_a_deleted_file_on_reload_keeps_the_last_valid_policy(files, store):
    files.user.unlink()
    result = store.reload()
    assert result.ok is False
    assert str(files.user) in result.error
    _still_denies_rm(files, store)


def test_a_deleted_managed_file_on_reload_keeps_the_last_valid_policy(files):
    managed = files.managed(DENY_RM_RF)
    locations = files.locations()
    store = PolicyStore(locations, load_effective_policy(locations))
    managed.unlink()
    result = store.reload()
    assert result.ok is False and str(managed) in result.error
    _still_denies_rm(files, store)


def test_a_valid_change_on_reload_applies_the_new_rules(files, store):
    files.user.write_text(
        DENY_RM_RF.lstrip("\n")
        + "    - {id: no-curl, tool: bash, command: [curl], decision: deny, reason: nope}\n"
    )
    result = store.reload()
    assert (result.ok, result.error, result.sandbox_changed) == (True, None, False)
    assert store.reloads == 1
    _still_denies_rm(files, store)
    assert files.decide(store.current, "curl example.com").rule == "no-curl"


def test_a_reload_after_a_failed_one_recovers(files, store):
    files.user.write_text("garbage: [")
    assert store.reload().ok is False
    files.user.write_text("version: 1\ntool_call: {default: deny}\n")
    result = store.reload()
    assert result.ok is True
    assert files.decide(store.current, "ls").decision == "deny"


def test_a_sandbox_change_on_reload_is_reported(files, store):
    files.user.write_text(DENY_RM_RF.lstrip("\n") + "sandbox:\n  limits: {processes: 64}\n")
    result = store.reload()
    assert (result.ok, result.sandbox_changed) == (True, True)
    assert store.current.sandbox.limits.processes == 64


def test_a_new_file_on_reload_is_picked_up(files, store):
    files.managed("version: 1\ntool_call: {default: ask}\n")
    result = store.reload()
    assert result.ok is True
    assert files.decide(store.current, "ls").decision == "ask"


def test_a_corrupt_managed_file_on_reload_keeps_the_last_valid_policy(files, store):
    files.managed("version: 1\ntool_call: {default: allow}\n", name="10-x.yaml")
    assert store.reload().ok is True
    (files.managed_dir / "10-x.yaml").write_text("version: 1\ntool_call: [\n")
    result = store.reload()
    assert result.ok is False and "10-x.yaml" in result.error
    _still_denies_rm(files, store)


def test_an_unlistable_managed_directory_on_reload_keeps_the_last_valid_policy(files, store):
    files.managed_dir.rmdir()
    files.managed_dir.write_text("not a directory")
    result = store.reload()
    assert result.ok is False
    assert str(files.managed_dir) in result.error
    _still_denies_rm(files, store)


def test_the_project_file_is_reloaded_only_when_it_was_trusted(files):
    files.set_project(DENY_RM_RF)
    locations = files.locations(trusted=False)
    store = PolicyStore(locations, load_effective_policy(locations))
    assert store.reload().ok is True
    assert files.decide(store.current, "rm -rf x").decision == "allow"
    assert os.path.exists(files.project)


# -- the run's start: trust decision, project tier, audit paths (supervisor.run) -------------


def _start(files: Files, **options):
    from pi_sandbox.supervisor.modes.run import RunOptions, _load_policy

    home = files.root / "home"
    home.mkdir(exist_ok=True)
    return _load_policy(
        RunOptions(
            message="go",
            cwd=files.workspace,
            agent_dir=files.user.parent,
            home=home,
            managed_policy_dirs=(files.managed_dir,),
            **options,
        )
    )


@pytest.mark.parametrize(
    ("default", "users_may_trust", "trust"),
    [
        ("yes", "yes", "yes"),
        ("yes", "sandboxed", "sandboxed"),
        ("yes", "no", "no"),
        ("sandboxed", "no", "no"),
        ("ask", "yes", None),
        ("no", "yes", "no"),
    ],
)
def test_the_policy_trust_default_is_limited_by_users_may_trust(
    files, default, users_may_trust, trust
):
    managed = files.managed(f"version: 1\ntrust: {{users_may_trust: '{users_may_trust}'}}\n")
    user = files.set_user(f"version: 1\ntrust: {{default: '{default}'}}\n")
    files.set_project(DENY_RM_RF)
    start = _start(files)
    assert start.trust == trust
    if default != "ask":
        assert start.trust_source.startswith(f"policy {user}")
    if trust != default and default != "ask":
        assert start.trust_source.endswith(f"(limited by policy {managed})")
    project_read = files.project in start.policy.sources
    assert project_read == (trust in ("yes", "sandboxed"))
    assert (start.store.locations.project_file is not None) == project_read


def test_an_explicit_trust_forbidden_by_policy_is_a_usage_error(files):
    from pi_sandbox.errors import UsageError

    managed = files.managed("version: 1\ntrust: {users_may_trust: sandboxed}\n")
    with pytest.raises(UsageError, match="not allowed") as info:
        _start(files, trust="yes")
    assert str(managed) in str(info.value)
    assert _start(files, trust="sandboxed").trust_source == "--trust"


def test_the_audit_paths_of_a_run(files):
    files.managed("version: 1\naudit: {file: ~/org-audit.jsonl}\n")
    start = _start(files, audit_log=files.root / "cli.jsonl")
    assert start.audit_paths == [files.root / "cli.jsonl", files.root / "home" / "org-audit.jsonl"]
    assert not (files.workspace / "pi-output").exists()
    ci = _start(files, ci=True)
    assert ci.audit_paths[0] == files.workspace / "pi-output" / "audit.jsonl"
    assert (files.workspace / "pi-output").is_dir()


def test_a_project_audit_file_is_not_among_the_audit_paths(files):
    files.set_project("version: 1\naudit: {file: /tmp/attacker-chosen.jsonl}\n")
    start = _start(files, trust="yes")
    assert files.project in start.policy.sources
    assert start.audit_paths == []


def test_managed_policy_dirs_always_include_etc_and_add_the_environment_ones(monkeypatch):
    from pi_sandbox.cli import managed_policy_dirs
    from pi_sandbox.policies import MANAGED_POLICY_DIR

    monkeypatch.delenv("PI_MANAGED_POLICY_DIR", raising=False)
    assert managed_policy_dirs() == (MANAGED_POLICY_DIR,)
    monkeypatch.setenv("PI_MANAGED_POLICY_DIR", "/a::/b")
    assert managed_policy_dirs() == (MANAGED_POLICY_DIR, Path("/a"), Path("/b"))


# -- hostile policy files (adversarial review) ------------------------------------------


def test_a_fifo_policy_file_is_refused_without_blocking(files):
    import os

    os.mkfifo(files.user)
    with pytest.raises(PolicyFileError, match="not a regular file"):
        files.load()


def test_an_alias_bomb_is_refused_before_it_is_expanded(files):
    lines = ["version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    files.user.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyFileError, match="YAML nodes"):
        files.load()


def test_deep_nesting_is_a_policy_error_not_a_crash(files):
    files.user.write_text("version: 1\nx: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(PolicyFileError, match="nested"):
        files.load()


def test_a_file_that_is_not_a_policy_is_never_quoted(files):
    files.user.write_text("ghp_abcdefghijklmnopqrstuvwxyz0123456789\n")
    with pytest.raises(PolicyFileError) as info:
        files.load()
    assert "ghp_" not in str(info.value) and "a string of 40 characters" in str(info.value)


def test_a_project_cannot_narrow_what_the_audit_log_records(files):
    project = files.set_project("version: 1\naudit: {include: [policy]}\n")
    policy = files.load()
    assert "tool_call" in policy.audit.include and "trust" in policy.audit.include
    assert any("audit.include" in line and str(project) in line for line in policy.diagnostics)


# -- sandbox.filesystem.git (issue 14 §2) ---------------------------------------------


def test_git_defaults_to_commit(files):
    policy = files.load()
    assert policy.sandbox.git == "commit"
    assert one_origin(policy, "sandbox.filesystem.git").tier == "default"


@pytest.mark.parametrize("tier", ["managed", "user", "project"])
def test_any_tier_saying_git_read_wins(files, tier):
    files.managed("version: 1\nsandbox:\n  filesystem: {git: commit}\n", name="10-a.yaml")
    text = "version: 1\nsandbox:\n  filesystem: {git: read}\n"
    setter = {"managed": files.managed, "user": files.set_user, "project": files.set_project}
    path = setter[tier](text)
    policy = files.load()
    assert policy.sandbox.git == "read"
    assert one_origin(policy, "sandbox.filesystem.git") == ValueOrigin(
        "sandbox.filesystem.git", "read", tier, (str(path),)
    )


def test_git_takes_only_read_or_commit(files):
    path = write_dedented(
        files.root / "bad.yaml", "version: 1\nsandbox:\n  filesystem: {git: write}\n"
    )
    with pytest.raises(PolicyFileError, match="git"):
        load_policy_file(path)


def test_the_ci_readonly_preset_keeps_git_read_only():
    from pi_sandbox.policies import load_policies

    preset = Path(__file__).parents[2] / "policies" / "ci-readonly.yaml"
    assert load_policies([preset]).sandbox.git == "read"
