"""``pi policy check`` and ``pi policy explain`` (issue 4 CLI), as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "policies").glob("*.yaml"))


def pi(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pi_sandbox.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_the_shipped_policies_pass_check():
    result = pi("policy", "check", *map(str, PRESETS))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(PRESETS) == 3
    assert all(": ok, " in line for line in result.stdout.splitlines())


def test_check_names_the_file_line_and_key_of_a_problem_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntool_call:\n  default: maybe\n")
    result = pi("policy", "check", str(PRESETS[0]), str(bad))
    assert result.returncode == 2
    assert f"{bad}:3: tool_call.default" in result.stderr
    assert ": ok, " in result.stdout  # the good file is still reported


def test_explain_json_gives_the_decision_rule_tier_and_each_simple_command(tmp_path):
    result = pi(
        "policy",
        "explain",
        "--policy",
        str(REPO / "policies" / "untrusted-repo.yaml"),
        "--tool",
        "bash",
        "--input",
        json.dumps({"command": "echo ok && env X=1 git push origin main"}),
        "--json",
        "-C",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["decision"], report["rule"], report["tier"]) == ("deny", "git-push", "managed")
    argvs = {tuple(c["argv"]): c for c in report["commands"]}
    assert argvs[("echo", "ok")]["decision"] == "allow"
    assert argvs[("git", "push", "origin", "main")]["decision"] == "deny"
    assert argvs[("git", "push", "origin", "main")]["via"] == ["env"]


def test_explain_text_shows_why_a_call_is_denied(tmp_path):
    result = pi(
        "policy",
        "explain",
        "--policy",
        str(REPO / "policies" / "untrusted-repo.yaml"),
        "--tool",
        "read",
        "--input",
        '{"path": "config/.env"}',
        "-C",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    first, reason = result.stdout.splitlines()[:2]
    assert first.startswith("deny: env-files (managed, ")
    assert reason.startswith("  reason: ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--input", "not json"], "argument --input: not JSON"),
        (["--input", "[1]"], "must be a JSON object"),
        (["--input", "{}", "--policy", "/nonexistent.yaml"], "no such file"),
    ],
)
def test_explain_usage_errors_exit_2(extra, message):
    args = ["policy", "explain", "--policy", str(PRESETS[0]), "--tool", "bash", "--input", "{}"]
    result = pi(*args, *extra)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_run_audits_each_tool_call_decision_and_outcome_with_secrets_redacted(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(
        "- tool_calls:\n"
        "    - {id: c1, name: bash, arguments: {command: 'echo sk-proj-abcdefghijklmnopqrstuvwx'}}\n"
        "    - {id: c2, name: bash, arguments: {command: 'git push origin main'}}\n"
        "- text: done\n"
    )
    log = tmp_path / "audit.jsonl"
    env_home = tmp_path / "home"
    env_home.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "-p",
            "--model",
            "scripted",
            "--script",
            str(script),
            "--policy",
            str(REPO / "policies" / "untrusted-repo.yaml"),
            "--audit-log",
            str(log),
            "--no-session",
            "-C",
            str(tmp_path),
            "go",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(env_home),
            "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        },
    )
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in text
    records = [json.loads(line) for line in text.splitlines()]
    calls = {r["tool_call_id"]: r for r in records if r["event"] == "tool_call"}
    outcomes = {r["tool_call_id"]: r for r in records if r["event"] == "tool_call_outcome"}
    assert (
        calls["c1"]["decision"] == "allow" and "[REDACTED]" in calls["c1"]["arguments"]["command"]
    )
    assert (calls["c2"]["decision"], calls["c2"]["rule"], calls["c2"]["tier"]) == (
        "deny",
        "git-push",
        "managed",
    )
    assert calls["c2"]["policy_file"].endswith("untrusted-repo.yaml")
    assert outcomes["c1"]["is_error"] is False
    assert (outcomes["c2"]["is_error"], outcomes["c2"]["blocked_by"]) == (True, "policy")
