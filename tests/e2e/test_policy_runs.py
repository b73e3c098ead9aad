"""Policy tiers, CI mode, the audit log and policy reload (issue 4), as a user runs ``pi``.

Every run is a real ``pi`` subprocess driven by the scripted model, with ``HOME``
and ``PI_CODING_AGENT_DIR`` under ``tmp_path`` (the user tier is
``$PI_CODING_AGENT_DIR/policy.yaml``) and ``PI_MANAGED_POLICY_DIR`` pointing at a
temporary managed directory. ``--ci`` runs need bubblewrap: they use the
``require_bwrap`` fixture, which skips where bwrap cannot create namespaces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from pi_runs import scripted_argv

pytestmark = pytest.mark.e2e

DENY_RM_RF = """
version: 1
tool_call:
  rules:
    - id: no-rm-rf
      tool: bash
      command: [rm, -rf]
      decision: deny
      reason: Recursive deletes are not allowed.
"""

TRIVIAL_EXTENSION = '''
"""Registers nothing; only its loading matters."""


def extension(pi):
    pass
'''


class Setup:
    """A workspace, a home, an agent directory and a managed policy directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = Path(os.path.realpath(tmp_path))
        self.workspace = self.root / "ws"
        self.workspace.mkdir()
        self.home = self.root / "home"
        self.home.mkdir()
        self.agent = self.root / "agent"
        self.agent.mkdir()
        self.managed_dir = self.root / "managed.d"
        self.managed_dir.mkdir()
        self.user_file = self.agent / "policy.yaml"
        self.project_file = self.workspace / ".pi" / "policy.yaml"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "PI_CODING_AGENT_DIR": str(self.agent),
            "PI_MANAGED_POLICY_DIR": str(self.managed_dir),
        }

    def managed(self, text: str, name: str = "50-org.yaml") -> Path:
        return _write(self.managed_dir / name, text)

    def user(self, text: str) -> Path:
        return _write(self.user_file, text)

    def project(self, text: str) -> Path:
        self.project_file.parent.mkdir(exist_ok=True)
        return _write(self.project_file, text)

    def script(self, *turns: str | list[str] | dict[str, Any], name: str = "script.yaml") -> Path:
        """One assistant turn per item (a bash command, a list of them run in one
        turn, or a raw turn mapping), then ``done``."""
        items: list[dict[str, Any]] = []
        for number, turn in enumerate(turns, 1):
            if isinstance(turn, dict):
                items.append(turn)
                continue
            commands = [turn] if isinstance(turn, str) else turn
            items.append(
                {
                    "tool_calls": [
                        {"id": f"c{number}-{i}", "name": "bash", "arguments": {"command": c}}
                        for i, c in enumerate(commands, 1)
                    ]
                }
            )
        path = self.root / name
        path.write_text(yaml.safe_dump([*items, {"text": "done"}]))
        return path

    def pi(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pi_sandbox.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )

    def argv(self, script: Path, *flags: str, session: bool = False) -> list[str]:
        """The ``pi`` command line of a scripted run over the workspace."""
        return scripted_argv(
            script, self.workspace, *(() if session else ("--no-session",)), *flags
        )

    def run(
        self, script: Path, *flags: str, session: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``pi -p`` over ``script`` in the workspace (no session file by default)."""
        return self.pi(*self.argv(script, "-p", *flags, session=session)[3:])


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    from pi_sandbox.policies import MANAGED_POLICY_DIR

    if any(MANAGED_POLICY_DIR.glob("*.yaml")):
        pytest.skip(f"this host has managed policy files in {MANAGED_POLICY_DIR}")
    return Setup(tmp_path)


# -- pi policy show -----------------------------------------------------------------------


def _tiered_files(setup: Setup) -> tuple[Path, Path]:
    managed = setup.managed(
        DENY_RM_RF + "trust: {users_may_trust: sandboxed}\nsandbox:\n  limits: {processes: 256}\n"
    )
    user = setup.user(
        """
        version: 1
        tool_call:
          rules:
            - {id: user-no-curl, tool: bash, command: [curl], decision: deny, reason: No downloads.}
        sandbox:
          limits: {processes: 128}
        extensions: {deny: [evil]}
        """
    )
    return managed, user


def test_policy_show_json_lists_each_value_with_its_tier_and_file(setup):
    managed, user = _tiered_files(setup)
    result = setup.pi("policy", "show", "--json", "-C", str(setup.workspace))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"] == [
        {"tier": "managed", "file": str(managed)},
        {"tier": "user", "file": str(user)},
    ]
    rows = report["values"]
    rules = {row["value"]["id"]: row for row in rows if row["key"] == "tool_call.rules"}
    assert (rules["no-rm-rf"]["tier"], rules["no-rm-rf"]["files"]) == ("managed", [str(managed)])
    assert (rules["user-no-curl"]["tier"], rules["user-no-curl"]["files"]) == ("user", [str(user)])
    by_key = {row["key"]: row for row in rows}
    assert by_key["sandbox.limits.processes"] == {
        "key": "sandbox.limits.processes",
        "value": 128,
        "tier": "user",
        "files": [str(user)],
    }
    assert by_key["trust.users_may_trust"] == {
        "key": "trust.users_may_trust",
        "value": "sandboxed",
        "tier": "managed",
        "files": [str(managed)],
    }
    assert by_key["extensions.deny"]["files"] == [str(user)]
    assert by_key["sandbox.limits.open_files"]["tier"] == "default"
    assert by_key["sandbox.limits.open_files"]["files"] == []
    assert report["ignored"] == []


def test_policy_show_includes_the_project_file_only_when_trusted(setup):
    setup.managed("version: 1\nlock: [sandbox]\n")
    project = setup.project(
        "version: 1\ntrust: {default: 'yes'}\nsandbox:\n  limits: {processes: 64}\n"
    )
    untrusted = json.loads(setup.pi("policy", "show", "--json", "-C", str(setup.workspace)).stdout)
    assert [f["tier"] for f in untrusted["files"]] == ["managed"]
    result = setup.pi("policy", "show", "--json", "--trust", "yes", "-C", str(setup.workspace))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"][-1] == {"tier": "project", "file": str(project)}
    assert len(report["ignored"]) == 2
    assert all(line.startswith(f"{project}: section ") for line in report["ignored"])


def test_policy_show_text_names_tier_and_file_of_every_value(setup):
    managed, user = _tiered_files(setup)
    result = setup.pi("policy", "show", "-C", str(setup.workspace))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["managed", str(managed)]
    assert lines[1].split() == ["user", str(user)]
    text = result.stdout
    assert f"[managed: {managed}]" in text and f"[user: {user}]" in text
    [processes] = [line for line in lines if line.startswith("sandbox.limits.processes ")]
    assert processes.split()[1] == "128" and processes.endswith(f"[user: {user}]")
    [open_files] = [line for line in lines if line.startswith("sandbox.limits.open_files ")]
    assert open_files.endswith("[default: built-in default]")


def test_policy_show_without_files_says_everything_is_allowed(setup):
    result = setup.pi("policy", "show", "-C", str(setup.workspace))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no policy files: every tool call is allowed")


def test_policy_show_with_a_malformed_managed_file_exits_2_naming_file_and_line(setup):
    bad = setup.managed("version: 1\ntool_call:\n  default: sometimes\n", name="20-bad.yaml")
    result = setup.pi("policy", "show", "-C", str(setup.workspace))
    assert result.returncode == 2
    assert f"{bad}:3: tool_call.default" in result.stderr


# -- startup errors: exit 2, naming the file ----------------------------------------------


def test_a_malformed_user_policy_is_fatal_naming_file_and_line(setup):
    setup.user(
        "version: 1\ntool_call:\n  rules:\n    - id: r\n      tool: bash\n      decison: deny\n"
    )
    result = setup.run(setup.script("echo hi"))
    assert result.returncode == 2
    assert f"{setup.user_file}:6: tool_call.rules[0].decison: unknown key" in result.stderr
    assert "hi" not in result.stdout


def test_a_malformed_managed_policy_is_fatal_naming_file_and_line(setup):
    bad = setup.managed("version: 1\nsandbox: {filesystem: {writable_roots: /tmp}\n")
    result = setup.run(setup.script("echo hi"))
    assert result.returncode == 2
    assert f"{bad}:" in result.stderr and "invalid YAML" in result.stderr


def test_a_user_policy_with_a_control_character_is_fatal_naming_the_file(setup):
    setup.user_file.write_text("version: 1\n\x01\n")
    result = setup.run(setup.script("echo hi"))
    assert result.returncode == 2
    assert str(setup.user_file) in result.stderr
    assert "Traceback" not in result.stderr


def test_trust_yes_is_refused_when_a_managed_policy_allows_only_sandboxed(setup):
    managed = setup.managed("version: 1\ntrust: {users_may_trust: sandboxed}\n")
    result = setup.run(setup.script("echo hi"), "--trust", "yes")
    assert result.returncode == 2
    assert "--trust" in result.stderr
    assert f"policy {managed} allows only 'sandboxed' or 'no'" in result.stderr


def test_trust_sandboxed_is_refused_when_the_user_policy_forbids_trust(setup):
    setup.user("version: 1\ntrust: {users_may_trust: no}\n")
    result = setup.run(setup.script("echo hi"), "--trust", "sandboxed")
    assert result.returncode == 2
    assert f"policy {setup.user_file} forbids trusting projects" in result.stderr


# -- the project tier needs trust -----------------------------------------------------------


def test_a_project_policy_is_not_read_without_trust(setup):
    setup.project(
        """
        version: 1
        tool_call:
          rules:
            - {id: project-no-touch, tool: bash, command: [touch], decision: deny, reason: Project says no.}
        """
    )
    script = setup.script("touch marker")
    untrusted = setup.run(script, "--mode", "json")
    assert untrusted.returncode == 0, untrusted.stderr
    assert (setup.workspace / "marker").exists()
    [decision] = [e for e in events(untrusted.stdout) if e["type"] == "policy_decision"]
    assert decision["decision"] == "allow"

    (setup.workspace / "marker").unlink()
    trusted = setup.run(script, "--mode", "json", "--trust", "yes")
    assert trusted.returncode == 0, trusted.stderr
    assert not (setup.workspace / "marker").exists()
    [decision] = [e for e in events(trusted.stdout) if e["type"] == "policy_decision"]
    assert (decision["decision"], decision["rule"], decision["tier"]) == (
        "deny",
        "project-no-touch",
        "project",
    )
    assert decision["source"] == str(setup.project_file)


def test_a_trust_default_of_no_in_the_user_policy_keeps_the_project_policy_unread(setup):
    setup.user("version: 1\ntrust: {default: no}\n")
    setup.project(DENY_RM_RF)
    (setup.workspace / "victim").mkdir()
    result = setup.run(setup.script("rm -rf victim"), "--audit-log", str(setup.root / "a.jsonl"))
    assert result.returncode == 0, result.stderr
    assert not (setup.workspace / "victim").exists()
    [trust] = [r for r in records(setup.root / "a.jsonl") if r["event"] == "trust"]
    assert (trust["decision"], trust["source"]) == ("no", f"policy {setup.user_file}")


# -- extensions refused by policy ------------------------------------------------------------


def test_an_extension_denied_by_policy_is_refused_with_a_notice_and_an_audit_record(setup):
    managed = setup.managed("version: 1\nextensions: {deny: [sneaky]}\n")
    extension = setup.root / "exts" / "sneaky.py"
    extension.parent.mkdir()
    extension.write_text(TRIVIAL_EXTENSION)
    log = setup.root / "audit.jsonl"
    result = setup.run(
        setup.script({"text": "hello"}), "-e", str(extension), "--audit-log", str(log)
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"Refused cli extension {extension}: denied by pattern 'sneaky' in policy {managed}"
        in result.stderr
    )
    [refused] = [r for r in records(log) if r["event"] == "extension"]
    assert refused["action"] == "refused"
    assert refused["extension"] == str(extension)
    assert refused["origin"] == "cli"
    assert str(managed) in refused["reason"]


def test_project_extensions_denied_by_policy_are_refused_even_when_trusted(setup):
    user_policy = setup.user("version: 1\nextensions: {project: deny}\n")
    (setup.workspace / ".pi" / "extensions").mkdir(parents=True)
    planted = setup.workspace / ".pi" / "extensions" / "planted.py"
    planted.write_text(TRIVIAL_EXTENSION)
    log = setup.root / "audit.jsonl"
    result = setup.run(setup.script({"text": "hello"}), "--trust", "yes", "--audit-log", str(log))
    assert result.returncode == 0, result.stderr
    assert f"Refused project extension {planted}" in result.stderr
    assert f"not allowed by policy {user_policy}" in result.stderr
    extension_records = [r for r in records(log) if r["event"] == "extension"]
    assert [(r["action"], r["origin"]) for r in extension_records] == [("refused", "project")]


def test_an_allowed_extension_is_loaded_and_audited(setup):
    setup.managed("version: 1\nextensions: {deny: [other]}\n")
    extension = setup.root / "exts" / "fine.py"
    extension.parent.mkdir()
    extension.write_text(TRIVIAL_EXTENSION)
    log = setup.root / "audit.jsonl"
    result = setup.run(
        setup.script({"text": "hello"}), "-e", str(extension), "--audit-log", str(log)
    )
    assert result.returncode == 0, result.stderr
    [loaded] = [r for r in records(log) if r["event"] == "extension"]
    assert (loaded["action"], loaded["extension"]) == ("loaded", str(extension))
    assert loaded["capabilities"]["override_builtin_tools"] is False


# -- the audit log ---------------------------------------------------------------------------


def test_audit_files_from_the_policy_receive_only_the_included_records(setup):
    org_log = setup.root / "org-audit.jsonl"
    setup.managed(
        DENY_RM_RF + f"audit:\n  file: {org_log}\n  include: [tool_call]\n  arguments: false\n"
    )
    cli_log = setup.root / "cli-audit.jsonl"
    result = setup.run(setup.script("rm -rf x"), "--audit-log", str(cli_log))
    assert result.returncode == 0, result.stderr
    org = records(org_log)
    assert {r["event"] for r in org} == {"tool_call"}
    assert [(r["decision"], r["rule"]) for r in org] == [("deny", "no-rm-rf")]
    assert "arguments" not in org[0]
    # The policy's include applies to every log of the run (--audit-log too).
    assert {r["event"] for r in records(cli_log)} == {"tool_call"}


def test_a_failing_audit_log_outside_ci_mode_is_reported_but_not_fatal(setup):
    result = setup.run(setup.script("echo hi"), "--audit-log", "/dev/full")
    assert result.returncode == 0, result.stderr
    assert "audit log /dev/full: write failed" in result.stderr


def test_a_policy_audit_file_in_a_missing_directory_is_a_usage_error(setup):
    managed = setup.managed(f"version: 1\naudit: {{file: {setup.root}/nope/audit.jsonl}}\n")
    result = setup.run(setup.script("echo hi"))
    assert result.returncode == 2
    assert f"policy {managed}: audit.file" in result.stderr and "does not exist" in result.stderr


# -- CI mode -------------------------------------------------------------------------------


def test_ci_refuses_no_sandbox_with_exit_2(setup):
    result = setup.run(setup.script("echo hi"), "--ci", "--no-sandbox")
    assert result.returncode == 2
    assert "--ci" in result.stderr
    assert not (setup.workspace / "pi-output").exists()


@pytest.mark.usefixtures("require_bwrap")
def test_ci_exits_3_when_a_call_was_denied_and_writes_the_default_audit_log(setup):
    managed = setup.managed(DENY_RM_RF)
    (setup.workspace / "victim").mkdir()
    result = setup.run(setup.script("rm -rf victim", "echo still-here"), "--ci")
    assert result.returncode == 3, result.stderr
    assert (setup.workspace / "victim").is_dir()
    assert "BLOCKED" in result.stderr and "no-rm-rf" in result.stderr
    assert result.stdout == "done\n"
    log = setup.workspace / "pi-output" / "audit.jsonl"
    assert log.is_file()
    assert log.stat().st_mode & 0o777 == 0o600
    entries = records(log)
    kinds = [r["event"] for r in entries]
    assert kinds[:2] == ["policy", "trust"]
    policy_record, trust_record = entries[:2]
    assert policy_record["action"] == "loaded"
    assert policy_record["files"] == [{"tier": "managed", "file": str(managed)}]
    assert trust_record["project"] == str(setup.workspace)
    calls = [r for r in entries if r["event"] == "tool_call"]
    assert [(c["decision"], c["rule"], c["tier"], c["policy_file"]) for c in calls] == [
        ("deny", "no-rm-rf", "managed", str(managed)),
        ("allow", None, "managed", str(managed)),
    ]
    outcomes = [r for r in entries if r["event"] == "tool_call_outcome"]
    assert [o["blocked_by"] for o in outcomes] == ["policy", None]
    assert "sandbox_profile" in kinds


@pytest.mark.usefixtures("require_bwrap")
def test_ci_tool_call_records_carry_the_session_id(setup):
    result = setup.run(setup.script("echo hi"), "--ci", session=True)
    assert result.returncode == 0, result.stderr
    [session_file] = setup.agent.glob("sessions/*/*.jsonl")
    session_id = json.loads(session_file.read_text().splitlines()[0])["id"]
    entries = records(setup.workspace / "pi-output" / "audit.jsonl")
    calls = [r for r in entries if r["event"].startswith("tool_call")]
    assert calls and all(r["session"] == session_id for r in calls)


@pytest.mark.usefixtures("require_bwrap")
def test_ci_every_audit_record_carries_the_session_id(setup):
    result = setup.run(setup.script("echo hi"), "--ci", session=True)
    assert result.returncode == 0, result.stderr
    entries = records(setup.workspace / "pi-output" / "audit.jsonl")
    assert {r["event"] for r in entries} >= {"policy", "trust", "sandbox_profile", "tool_call"}
    assert [r["event"] for r in entries if not r["session"]] == []


@pytest.mark.usefixtures("require_bwrap")
def test_ci_exits_0_when_every_call_was_allowed(setup):
    setup.managed(DENY_RM_RF)
    result = setup.run(setup.script("echo fine", ["ls", "true"]), "--ci")
    assert result.returncode == 0, result.stderr
    assert "BLOCKED" not in result.stderr
    entries = records(setup.workspace / "pi-output" / "audit.jsonl")
    assert [r["decision"] for r in entries if r["event"] == "tool_call"] == ["allow"] * 3


@pytest.mark.usefixtures("require_bwrap")
def test_ci_denies_an_ask_with_exit_3(setup):
    setup.managed("version: 1\ntool_call: {default: ask}\n")
    result = setup.run(setup.script("echo hi"), "--ci")
    assert result.returncode == 3, result.stderr
    assert "ask rule in a non-interactive run" in result.stderr
    [call] = [
        r
        for r in records(setup.workspace / "pi-output" / "audit.jsonl")
        if r["event"] == "tool_call"
    ]
    assert (call["decision"], call["effective"]) == ("ask", "deny")


@pytest.mark.usefixtures("require_bwrap")
def test_ci_with_audit_log_writes_there_and_not_to_the_default(setup):
    log = setup.root / "elsewhere.jsonl"
    result = setup.run(setup.script("echo hi"), "--ci", "--audit-log", str(log))
    assert result.returncode == 0, result.stderr
    assert not (setup.workspace / "pi-output").exists()
    assert {"policy", "trust", "tool_call"} <= {r["event"] for r in records(log)}


@pytest.mark.usefixtures("require_bwrap")
def test_ci_makes_the_workspace_read_only(setup):
    (setup.workspace / "existing.txt").write_text("original\n")
    result = setup.run(
        setup.script("touch newfile", "echo changed > existing.txt"), "--ci", "--mode", "json"
    )
    # A failing command is not a denial: the run itself succeeds.
    assert result.returncode == 0, result.stderr
    assert not (setup.workspace / "newfile").exists()
    assert (setup.workspace / "existing.txt").read_text() == "original\n"
    ends = [e for e in events(result.stdout) if e["type"] == "tool_execution_end"]
    assert [e["isError"] for e in ends] == [True, True]
    assert "Read-only file system" in ends[0]["result"]["content"][0]["text"]


@pytest.mark.usefixtures("require_bwrap")
@pytest.mark.parametrize("tier", ["managed", "user"])
def test_ci_workspace_is_writable_when_a_managed_or_user_policy_grants_it(setup, tier):
    text = "version: 1\nsandbox: {filesystem: {workspace: write}}\n"
    if tier == "managed":
        setup.managed(text)
    else:
        setup.user(text)
    result = setup.run(setup.script("touch newfile"), "--ci")
    assert result.returncode == 0, result.stderr
    assert (setup.workspace / "newfile").exists()


@pytest.mark.usefixtures("require_bwrap")
def test_ci_workspace_stays_read_only_when_only_the_project_asks_for_write(setup):
    setup.project("version: 1\nsandbox: {filesystem: {workspace: write}}\n")
    result = setup.run(setup.script("touch newfile"), "--ci", "--trust", "yes")
    assert result.returncode == 0, result.stderr
    assert not (setup.workspace / "newfile").exists()


@pytest.mark.usefixtures("require_bwrap")
def test_ci_with_an_unwritable_audit_log_fails_loudly(setup):
    result = setup.run(setup.script("echo hi"), "--ci", "--audit-log", "/dev/full")
    assert result.returncode != 0
    assert "audit log" in result.stderr and "/dev/full" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("require_bwrap")
def test_ci_tools_cannot_tamper_with_the_default_audit_log_in_a_writable_workspace(setup):
    setup.managed("version: 1\nsandbox: {filesystem: {workspace: write}}\n")
    result = setup.run(
        setup.script(
            """echo '{"forged": true}' >> pi-output/audit.jsonl""",
            "rm -f pi-output/audit.jsonl",
            "mv pi-output moved-output",
            "rm -rf pi-output",
            "touch proof-of-write",
        ),
        "--ci",
    )
    assert result.returncode == 0, result.stderr
    assert (setup.workspace / "proof-of-write").exists()  # the workspace was writable
    assert not (setup.workspace / "moved-output").exists()
    entries = records(setup.workspace / "pi-output" / "audit.jsonl")
    assert all("event" in entry for entry in entries)  # nothing forged
    assert len([e for e in entries if e["event"] == "tool_call"]) == 5


def test_an_audit_log_that_cannot_be_opened_is_a_usage_error(setup):
    missing = setup.root / "no-such-dir" / "audit.jsonl"
    result = setup.run(setup.script("echo hi"), "--audit-log", str(missing))
    assert result.returncode == 2
    assert f"cannot open audit log {missing}" in result.stderr


@pytest.mark.usefixtures("require_bwrap")
def test_ci_does_not_follow_a_repository_symlink_for_the_output_directory(setup):
    outside = setup.root / "outside"
    outside.mkdir()
    (setup.workspace / "pi-output").symlink_to(outside)
    setup.run(setup.script("echo hi"), "--ci")
    assert list(outside.iterdir()) == []


@pytest.mark.usefixtures("require_bwrap")
def test_ci_does_not_follow_a_repository_symlink_for_the_audit_log(setup):
    precious = setup.root / "precious.txt"
    precious.write_text("precious\n")
    (setup.workspace / "pi-output").mkdir()
    (setup.workspace / "pi-output" / "audit.jsonl").symlink_to(precious)
    setup.run(setup.script("echo hi"), "--ci")
    assert precious.read_text() == "precious\n"


@pytest.mark.usefixtures("require_bwrap")
def test_ci_an_audit_log_that_fills_up_mid_run_stops_the_run_with_a_clear_message(setup):
    import resource

    log = setup.root / "audit.jsonl"
    log.write_text("#" * 100_000 + "\n")
    limit = log.stat().st_size + 3000  # the start-up records fit, the tool calls do not

    def small_files() -> None:
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    script = setup.script(*[f"echo call-{n}" for n in range(40)])
    result = subprocess.run(
        setup.argv(script, "--ci", "--audit-log", str(log)),
        env=setup.env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,  # the test process is single-threaded
    )
    assert "call-0" in result.stderr  # the run got as far as the tool calls
    assert "call-39" not in result.stderr  # and stopped there
    assert result.returncode == 1
    assert "audit records must not be lost" in result.stderr
    assert "Traceback" not in result.stderr


# -- case 8: a policy file corrupted mid-session ---------------------------------------------


def _corrupt_and_signal(policy_file: Path, marker: Path, garbage: str, log: Path) -> str:
    """A bash command that overwrites ``policy_file`` with ``garbage`` and sends SIGHUP
    to the pi supervisor: the parent of the tool worker, which is the shell's parent
    (field 4 of ``/proc/$PPID/stat``; no ``ps`` needed). The pid it signals is written
    to ``marker`` so the test can check it is the supervisor's.

    It then waits until the reload is in the audit log ``log`` (up to 120 s): the
    next tool call must come after the reload, and a fixed sleep was a guess that a
    busy machine could lose (issue 13 §7)."""
    return (
        f"printf '{garbage}' > '{policy_file}' && "
        "read -r _ _ _ target _ < /proc/$PPID/stat && "
        f"echo $target > '{marker}' && kill -HUP $target && "
        "for _ in $(seq 1200); do "
        f"""grep -qE '"action": "(reloaded|reload_failed)"' '{log}' && break; sleep 0.1; """
        "done"
    )


def _run_case_8(setup: Setup, garbage: str) -> tuple[subprocess.Popen[str], str, str, Path]:
    setup.user(
        """
        version: 1
        tool_call:
          rules:
            - {id: no-rm, tool: bash, command: [rm], decision: deny, reason: Deletes are not allowed.}
        """
    )
    victim = setup.workspace / "victim"
    victim.mkdir()
    marker = setup.root / "signalled-pid"
    log = setup.root / "audit.jsonl"
    script = setup.script(
        _corrupt_and_signal(setup.user_file, marker, garbage, log), "rm -rf victim"
    )
    proc = subprocess.Popen(
        setup.argv(script, "--no-sandbox", "--mode", "json", "--audit-log", str(log)),
        env=setup.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert int(marker.read_text()) == proc.pid, "the bash call signalled another process"
    return proc, stdout, stderr, log


def test_case_8_a_policy_corrupted_mid_session_keeps_the_last_valid_policy(setup):
    proc, stdout, stderr, log = _run_case_8(setup, "version: [garbage")
    assert proc.returncode == 0, stderr
    assert setup.user_file.read_text() == "version: [garbage"  # the corruption happened
    assert (setup.workspace / "victim").is_dir()
    stream = events(stdout)
    decisions = [e for e in stream if e["type"] == "policy_decision"]
    assert [d["decision"] for d in decisions] == ["allow", "deny"]
    assert decisions[1]["rule"] == "no-rm"
    errors = [e["error"] for e in stream if e["type"] == "pisandbox_error"]
    assert len(errors) == 1
    assert errors[0].startswith("policy reload failed; the last valid policy stays in force")
    assert f"{setup.user_file}:1: invalid YAML" in errors[0]
    assert "policy reload failed" in stderr
    reloads = [r for r in records(log) if r["event"] == "policy" and r["action"] != "loaded"]
    assert [r["action"] for r in reloads] == ["reload_failed"]
    assert str(setup.user_file) in reloads[0]["error"]


def test_case_8_a_valid_change_on_sighup_takes_effect(setup):
    proc, stdout, stderr, log = _run_case_8(setup, "version: 1\\n")
    assert proc.returncode == 0, stderr
    assert not (setup.workspace / "victim").exists()  # the new policy allows rm
    stream = events(stdout)
    assert [e["decision"] for e in stream if e["type"] == "policy_decision"] == ["allow", "allow"]
    notices = [e.get("message") or "" for e in stream if e["type"] == "pisandbox_notice"]
    assert any(n.startswith("policy reloaded") for n in notices), notices
    reloads = [r for r in records(log) if r["event"] == "policy" and r["action"] != "loaded"]
    assert [r["action"] for r in reloads] == ["reloaded"]


def test_case_8_a_policy_corrupted_with_a_control_character_keeps_the_run_going(setup):
    proc, stdout, stderr, _ = _run_case_8(setup, "version: 1\\n\\001\\n")
    assert proc.returncode == 0, stderr
    assert (setup.workspace / "victim").is_dir()
    assert "policy reload failed" in stderr
    assert [e["decision"] for e in events(stdout) if e["type"] == "policy_decision"] == [
        "allow",
        "deny",
    ]


@pytest.mark.usefixtures("require_bwrap")
def test_ci_refuses_to_continue_an_audit_log_the_repository_ships(setup):
    (setup.workspace / "pi-output").mkdir()
    forged = '{"event": "tool_call", "decision": "allow", "forged": true}\n'
    (setup.workspace / "pi-output" / "audit.jsonl").write_text(forged)
    result = setup.run(setup.script("echo hi"), "--ci")
    assert result.returncode == 2
    assert "already exists" in result.stderr and "--audit-log" in result.stderr
    assert (setup.workspace / "pi-output" / "audit.jsonl").read_text() == forged


def test_progress_lines_redact_credentials(setup):
    result = setup.run(setup.script("echo DB_PASSWORD=hunter2xyz >/dev/null"))
    assert result.returncode == 0, result.stderr
    assert "hunter2xyz" not in result.stderr
    assert "[REDACTED]" in result.stderr


def test_a_limit_above_the_machines_hard_limit_is_a_policy_error_naming_the_key(setup):
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard >= 1_048_576:
        pytest.skip("this machine's hard RLIMIT_NOFILE is not below the schema's maximum")
    policy = setup.root / "limits.yaml"
    policy.write_text("version: 1\nsandbox: {limits: {open_files: 1048576}}\n")
    result = setup.run(setup.script("echo hi"), "--policy", str(policy))
    assert result.returncode == 2
    assert f"policy {policy}: sandbox.limits.open_files: 1048576" in result.stderr


BROKEN_SCHEMA_EXTENSION = """
def extension(pi):
    pi.register_tool(
        name="broken",
        description="A tool whose schema points nowhere.",
        parameters={"type": "object", "properties": {"x": {"$ref": "#/nope"}}},
        execute=lambda params, ctx: "ran",
    )
"""


def test_a_tool_schema_that_points_nowhere_fails_the_call_not_the_session(setup):
    extension = setup.root / "broken_schema.py"
    extension.write_text(BROKEN_SCHEMA_EXTENSION)
    script = setup.root / "broken.yaml"
    script.write_text(
        "- tool_calls:\n"
        "    - {id: c1, name: broken, arguments: {x: 1}}\n"
        "    - {id: c2, name: bash, arguments: {command: echo still-alive}}\n"
        "- text: done\n"
    )
    result = setup.run(script, "-e", str(extension))
    assert result.returncode == 0, result.stderr
    assert "invalid parameter schema" in result.stderr
    assert "still-alive" in result.stderr and "internal error" not in result.stderr


@pytest.mark.usefixtures("require_bwrap")
def test_a_policy_can_require_the_sandbox(setup):
    outside = setup.root / "outside-marker"
    policy = setup.root / "required.yaml"
    policy.write_text("version: 1\nsandbox: {required: true}\n")
    result = setup.run(setup.script(f"touch {outside}; echo rc=$?"), "--policy", str(policy))
    assert result.returncode == 0, result.stderr
    assert f"policy {policy} requires the sandbox" in result.stderr
    assert not outside.exists()  # outside the workspace: read-only in the sandbox


def test_a_sandbox_section_without_a_sandbox_says_it_does_not_apply(setup):
    policy = setup.root / "section.yaml"
    policy.write_text("version: 1\nsandbox: {network: {mode: none}}\n")
    result = setup.run(setup.script("echo hi"), "--policy", str(policy))
    assert result.returncode == 0, result.stderr
    assert "applies only to sandboxed runs" in result.stderr
