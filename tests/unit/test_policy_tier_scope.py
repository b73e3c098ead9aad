"""A lower tier can only tighten — including timing (issue 13 §3).

A value that governs the user's or the organisation's extensions can be set only
by their own tier or a higher one; a project file governs only the project's own
code (its extensions, and the tool worker that runs its commands). Every test
loads real files from ``tmp_path`` with `PolicyLocations`; the worker pool is
built without starting a process (its deadline and profile choices are pure).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from policy_tier_files import Files

from pi_sandbox.policies import Policy
from pi_sandbox.policies._extension_limits import LIMIT_DEFAULTS
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings
from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, PoolConfig, WorkerPool

DEFAULT_LIMITS = SandboxLimits()


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def _pool(policy: Policy, workspace: Path) -> WorkerPool:
    """A pool configured the way ``pi`` configures it (supervisor/modes/run.py), unstarted."""
    pool = WorkerPool(
        PoolConfig(
            cwd=workspace,
            agent_dir=workspace.parent / "agent",
            home=workspace.parent,
            sandbox=False,
            settings=policy.sandbox,
            extension_rules=policy.extensions,
            hook_timeout_s=policy.extensions.handler_timeout_s,
            extension_settings=policy.higher_tier_sandbox,
        )
    )
    shutil.rmtree(pool._log_dir, ignore_errors=True)  # no worker starts: no logs
    return pool


USER_EXTENSION = ExtensionSource(Path("/home/u/.pi/agent/extensions/redact.py"), "user")
CLI_EXTENSION = ExtensionSource(Path("/opt/guards/guard.py"), "cli")


def _project_extension(files: Files) -> ExtensionSource:
    return ExtensionSource(files.workspace / ".pi" / "extensions" / "helper.py", "project")


# -- extensions.handler_timeout_s ------------------------------------------------------------


def test_a_project_handler_timeout_does_not_shorten_the_user_extensions_deadline(files):
    # The example: a repository's 0.1 s must not make the user's redaction
    # hook time out on every call.
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 0.1\n")
    policy = files.load()
    assert policy.extensions.handler_timeout_s == 30.0
    assert policy.extensions.handler_timeout_for("user") == 30.0
    assert _pool(policy, files.workspace)._deadline(USER_EXTENSION, None) == 30.0


def test_control_a_project_handler_timeout_binds_the_projects_own_extensions(files):
    # Control: the 0.1 s is real — under the old merge every extension got it, and
    # the project's own extensions still do.
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 0.1\n")
    policy = files.load()
    assert policy.extensions.project_handler_timeout_s == 0.1
    pool = _pool(policy, files.workspace)
    assert pool._deadline(_project_extension(files), None) == 0.1
    origins = [o for o in policy.provenance if o.key.startswith("extensions.handler_timeout_s")]
    assert [(o.key, o.value, o.tier) for o in origins] == [
        ("extensions.handler_timeout_s[project extensions]", 0.1, "project")
    ]


def test_a_project_handler_timeout_does_not_shorten_command_line_extensions(files):
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 0.5\n")
    policy = files.load()
    assert _pool(policy, files.workspace)._deadline(CLI_EXTENSION, None) == 30.0


def test_the_user_tier_sets_its_own_extensions_deadline_and_the_project_only_its_own(files):
    files.set_user("version: 1\nextensions:\n  handler_timeout_s: 5\n")
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 0.2\n")
    policy = files.load()
    assert policy.extensions.handler_timeout_for("user") == 5.0
    assert policy.extensions.handler_timeout_for("project") == 0.2


def test_a_project_cannot_lengthen_the_deadline_of_its_own_extensions(files):
    files.managed("version: 1\nextensions:\n  handler_timeout_s: 2\n")
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 60\n")
    policy = files.load()
    assert policy.extensions.handler_timeout_for("project") == 2.0
    assert policy.extensions.handler_timeout_for("user") == 2.0


def test_a_managed_handler_timeout_binds_every_extension(files):
    files.managed("version: 1\nextensions:\n  handler_timeout_s: 3\n")
    policy = files.load()
    pool = _pool(policy, files.workspace)
    assert pool._deadline(USER_EXTENSION, None) == 3.0
    assert pool._deadline(_project_extension(files), None) == 3.0


def test_a_callers_shorter_deadline_still_applies_to_every_extension(files):
    # session_shutdown passes its own bound: it may only shorten the policy's.
    files.set_project("version: 1\nextensions:\n  handler_timeout_s: 0.1\n")
    pool = _pool(files.load(), files.workspace)
    assert pool._deadline(USER_EXTENSION, 5.0) == 5.0
    assert pool._deadline(_project_extension(files), 5.0) == 0.1


# -- sandbox.* for the workers of non-project extensions ---------------------------------------


@pytest.mark.parametrize(
    ("limit", "value"),
    [
        ("memory_mb", 128),
        ("processes", 16),
        ("open_files", 64),
        ("cpu_seconds", 1),
        ("address_space_mb", 512),
        ("file_size_mb", 1),
        ("tmp_size_mb", 1),
    ],
)
def test_a_project_limit_does_not_starve_the_user_extensions_worker(files, limit, value):
    files.set_project(f"version: 1\nsandbox:\n  limits: {{{limit}: {value}}}\n")
    policy = files.load()
    # Control: the project's own code (the tool worker, project extensions) gets it.
    assert getattr(policy.sandbox.limits, limit) == value
    assert policy.higher_tier_sandbox is not None
    assert getattr(policy.higher_tier_sandbox.limits, limit) == getattr(DEFAULT_LIMITS, limit)


def test_a_user_limit_binds_the_user_extensions_worker(files):
    files.set_user("version: 1\nsandbox:\n  limits: {memory_mb: 1024}\n")
    files.set_project("version: 1\nsandbox:\n  limits: {memory_mb: 256}\n")
    policy = files.load()
    assert policy.sandbox.limits.memory_mb == 256
    assert policy.higher_tier_sandbox.limits.memory_mb == 1024


def test_project_filesystem_rules_do_not_reach_the_user_extensions_worker(files):
    files.set_project(
        """
        version: 1
        sandbox:
          filesystem: {workspace: read, deny_read: [/home], deny_write: [/tmp]}
          environment: {allow: []}
        """
    )
    files.set_user("version: 1\nsandbox:\n  environment: {allow: [LANG_EXTRA]}\n")
    policy = files.load()
    assert not policy.sandbox.workspace_writable
    assert "/home" in policy.sandbox.deny_read
    assert policy.sandbox.environment_allow == ()
    higher = policy.higher_tier_sandbox
    assert higher.workspace_writable
    assert "/home" not in higher.deny_read and "/tmp" not in higher.deny_write
    assert higher.environment_allow == ("LANG_EXTRA",)


def test_the_network_stays_run_wide_for_every_worker(files):
    # One egress proxy serves a run: a project's narrower allowlist applies to all.
    files.set_user(
        "version: 1\nsandbox:\n  network: {mode: allowlist, allow: [a.example, b.example]}\n"
    )
    files.set_project("version: 1\nsandbox:\n  network: {mode: allowlist, allow: [a.example]}\n")
    policy = files.load()
    assert policy.sandbox.network_allow == ("a.example",)
    assert policy.higher_tier_sandbox.network_allow == ("a.example",)


def test_without_a_project_file_every_worker_has_the_same_settings(files):
    files.set_user("version: 1\nsandbox:\n  limits: {memory_mb: 512}\n")
    policy = files.load()
    assert policy.higher_tier_sandbox is None
    assert policy.sandbox.limits.memory_mb == 512


def test_the_pool_gives_user_extensions_the_higher_tier_settings_and_project_ones_the_full(
    files, monkeypatch
):
    files.set_project("version: 1\nsandbox:\n  limits: {memory_mb: 128}\n")
    policy = files.load()
    pool = _pool(policy, files.workspace)
    seen: list[SandboxSettings] = []

    def fake_profile(role, **kwargs):
        seen.append(kwargs["settings"])
        raise _Stop

    import pi_sandbox.supervisor.workers.worker_pool as worker_pool

    monkeypatch.setattr(worker_pool, "worker_profile", fake_profile)
    for settings in (pool.config.extension_settings, None):
        with pytest.raises(_Stop):
            pool._spec("x", {}, role="extension", sandboxed=True, settings=settings)
    assert [s.limits.memory_mb for s in seen] == [DEFAULT_LIMITS.memory_mb, 128]


class _Stop(Exception):
    pass


# -- extensions.required, on_load_error, limits; sandbox.sockets, filesystem.git ------------


def test_a_project_cannot_set_required_extensions_or_the_load_error_rule(files):
    files.set_user("version: 1\nextensions:\n  required: [redact]\n  on_load_error: stop\n")
    files.set_project(
        "version: 1\nextensions:\n  required: ['*/.pi/extensions/*']\n  on_load_error: continue\n"
    )
    policy = files.load()
    assert [pattern for pattern, _ in policy.extensions.required] == ["redact"]
    assert policy.extensions.on_load_error == "stop"
    for key in ("required", "on_load_error"):
        assert any(f"extensions.{key} ignored" in line for line in policy.diagnostics), key


def test_control_the_user_tier_sets_required_extensions_and_the_load_error_rule(files):
    files.set_user("version: 1\nextensions:\n  required: [redact]\n  on_load_error: continue\n")
    policy = files.load()
    assert [pattern for pattern, _ in policy.extensions.required] == ["redact"]
    assert policy.extensions.on_load_error == "continue"


# The schema's lower bounds (`ExtensionLimitsSection`): half a default may be below.
_LIMIT_FLOOR = {"entry_bytes": 1024, "message_bytes": 1024, "bus_bytes": 1024, "text_chars": 64}
PROJECT_LIMITS = [key for key in LIMIT_DEFAULTS if key != "session_bytes_total"]


@pytest.mark.parametrize("key", PROJECT_LIMITS)
def test_a_project_limit_binds_only_the_projects_own_extensions(files, key):
    lowered = max(LIMIT_DEFAULTS[key] // 2, _LIMIT_FLOOR.get(key, 1))
    files.set_project(f"version: 1\nextensions:\n  limits: {{{key}: {lowered}}}\n")
    limits = files.load().extensions.limits
    for origin in ("user", "cli"):
        assert getattr(limits.for_origin(origin), key) == LIMIT_DEFAULTS[key], origin
    assert getattr(limits.for_origin("project"), key) == lowered


@pytest.mark.parametrize("key", PROJECT_LIMITS)
def test_a_project_cannot_raise_a_limit_even_for_its_own_extensions(files, key):
    files.set_user(f"version: 1\nextensions:\n  limits: {{{key}: {LIMIT_DEFAULTS[key]}}}\n")
    files.set_project(f"version: 1\nextensions:\n  limits: {{{key}: {LIMIT_DEFAULTS[key] + 1}}}\n")
    policy = files.load()
    assert getattr(policy.extensions.limits.for_origin("project"), key) == LIMIT_DEFAULTS[key]
    assert any(f"extensions.limits.{key}: " in line for line in policy.diagnostics)


def test_a_project_cannot_set_the_limit_shared_by_every_extension(files):
    files.set_project("version: 1\nextensions:\n  limits: {session_bytes_total: 2048}\n")
    policy = files.load()
    total = LIMIT_DEFAULTS["session_bytes_total"]
    assert policy.extensions.limits.shared.session_bytes_total == total
    assert policy.extensions.limits.for_origin("project").session_bytes_total == total
    assert any("session_bytes_total ignored" in line for line in policy.diagnostics)


def test_a_user_limit_binds_every_extension_and_the_managed_one_is_a_ceiling(files):
    files.managed("version: 1\nextensions:\n  limits: {strikes: 10}\n")
    files.set_user("version: 1\nextensions:\n  limits: {strikes: 20, ui_per_s: 5}\n")
    limits = files.load().extensions.limits
    for origin in ("user", "cli", "project"):
        assert limits.for_origin(origin).strikes == 10
        assert limits.for_origin(origin).ui_per_s == 5


def test_a_project_cannot_bind_host_sockets(files):
    files.set_project("version: 1\nsandbox:\n  sockets: [/run/h10-no-such.sock]\n")
    policy = files.load()
    assert policy.sandbox.sockets == ()
    assert any("sandbox.sockets" in line for line in policy.diagnostics)


def test_control_the_user_tier_binds_host_sockets_for_every_worker(files):
    files.set_user("version: 1\nsandbox:\n  sockets: [/run/h10-no-such.sock]\n")
    files.set_project("version: 1\nsandbox:\n  limits: {memory_mb: 128}\n")
    policy = files.load()
    assert policy.sandbox.sockets == ("/run/h10-no-such.sock",)
    assert policy.higher_tier_sandbox.sockets == ("/run/h10-no-such.sock",)


def test_a_project_git_read_binds_the_tool_worker_not_the_user_extensions(files):
    files.set_project("version: 1\nsandbox:\n  filesystem: {git: read}\n")
    policy = files.load()
    assert policy.sandbox.git == "read"
    assert policy.higher_tier_sandbox.git == "commit"


def test_a_project_cannot_undo_a_user_git_read(files):
    files.set_user("version: 1\nsandbox:\n  filesystem: {git: read}\n")
    files.set_project("version: 1\nsandbox:\n  filesystem: {git: commit}\n")
    policy = files.load()
    assert policy.sandbox.git == "read"
    assert policy.higher_tier_sandbox.git == "read"
