"""Path rules match the canonical target, seen through aliases (issue 13 §5).

The gate runs in the supervisor: ``/proc/self`` there is the supervisor, not the
tool. These tests call `evaluate_tool_call` on a real directory under
``tmp_path`` (the real-process attack is tests/security/test_path_aliases.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox.policies import evaluate_tool_call, load_policies
from pi_sandbox.policies._path_resolution import (
    MAX_SYMLINKS,
    UnresolvablePath,
    canonical_targets,
)

DENY_ENV = """\
version: 1
tool_call:
  rules:
    - id: no-server-env
      tool: "*"
      path: [server/.env]
      decision: deny
      reason: secret
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = Path(os.path.realpath(tmp_path))
    workspace = root / "ws"
    (workspace / "server").mkdir(parents=True)
    (workspace / "server" / ".env").write_text("S\n")
    (workspace / "srv").symlink_to("server")
    (workspace / "cwd-link").symlink_to("/proc/self/cwd")
    (workspace / "fd-link").symlink_to("/dev/fd")
    os.link(workspace / "server" / ".env", workspace / "notes.txt")
    return workspace


@pytest.fixture
def policy(tmp_path: Path):
    path = tmp_path / "deny.yaml"
    path.write_text(DENY_ENV)
    return load_policies([path])


def decide(policy, ws: Path, tool: str, **arguments):
    return evaluate_tool_call(policy, tool, arguments, workspace=ws)


@pytest.mark.parametrize("tool", ["read", "write", "edit", "ls"])
@pytest.mark.parametrize(
    "spelling",
    [
        "server/.env",
        "/proc/self/cwd/server/.env",  # the example
        "/proc/thread-self/cwd/server/.env",
        "/proc/self/task/1/cwd/server/.env",
        "/proc/self/root{ws}/server/.env",
        "/proc/self/cwd/../ws/server/.env",
        "{ws}//server//.env",
        "./server/./.env",
        "srv/.env",
        "srv/../server/.env",
        "cwd-link/server/.env",
        "notes.txt",
    ],
)
def test_every_alias_of_a_denied_path_is_denied(policy, ws, tool, spelling):
    # /proc/self/cwd/../ws needs the workspace's name: the fixture calls it "ws".
    decision = decide(policy, ws, tool, path=spelling.format(ws=ws))
    assert (decision.decision, decision.rule) == ("deny", "no-server-env")


@pytest.mark.parametrize(
    "spelling",
    [
        "/proc/self/fd/3",
        "/dev/fd/3",
        "/dev/stdin",
        "/proc/1/cwd/server/.env",
        "/proc/1/root/etc/passwd",
        "/proc/self/map_files/1-2",
        "/proc/self/exe",
        "fd-link/4",
    ],
)
def test_a_path_the_gate_cannot_resolve_gets_the_unparseable_decision(policy, ws, spelling):
    decision = decide(policy, ws, "read", path=spelling)
    assert decision.decision == "ask"  # the policy's unparseable (default ask)
    assert "cannot be resolved safely" in decision.reason
    assert "unparseable: ask decides" in decision.reason
    assert "parsed" not in decision.reason  # no blame on shell parsing


def test_an_unresolvable_path_is_denied_when_the_policy_says_unparseable_deny(tmp_path, ws):
    path = tmp_path / "strict.yaml"
    path.write_text(DENY_ENV + "  unparseable: deny\n")
    decision = decide(load_policies([path]), ws, "read", path="/dev/fd/3")
    assert decision.decision == "deny"


@pytest.mark.parametrize(
    "spelling",
    ["/proc/self/status", "/proc/self/fd", "/dev/null", "other.txt", "srv", "/etc/hostname"],
)
def test_control_paths_that_are_not_aliases_of_the_secret_are_allowed(policy, ws, spelling):
    assert decide(policy, ws, "read", path=spelling).decision == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "cat /proc/self/cwd/server/.env",
        "cat /proc/thread-self/root{ws}/server/.env",
        "cat srv/.env",
        "cat cwd-link/server/.env",
        "head -n1 notes.txt",
        "cp --target-directory=/tmp /proc/self/cwd/server/.env",
    ],
)
def test_paths_in_shell_commands_see_through_aliases(policy, ws, command):
    decision = decide(policy, ws, "bash", command=command.format(ws=ws))
    assert decision.decision == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "cat /proc/$$/cwd/server/.env",
        "cat /dev/fd/3 3<other.txt",  # 3<server/.env: denied by the target (test_redirect_targets)
        "cat ${D}/x",
        "cat $PWD/server/.env",
        "cat ./$F/.env",
    ],
)
def test_a_shell_path_that_cannot_be_resolved_gets_the_unparseable_decision(policy, ws, command):
    decision = decide(policy, ws, "bash", command=command)
    assert decision.decision == "ask"
    assert "path rule 'no-server-env' cannot be checked" in decision.reason


@pytest.mark.parametrize(
    "command", ["echo $HOME", "sed 's/a$/b/' other.txt", "awk '{print $1}' a/b", "cat srv/$F"]
)
def test_control_a_shell_word_with_an_expansion_that_does_not_spell_a_path(policy, ws, command):
    # A literal "$" (sed, awk) looks like an expansion here: only words that start
    # like a path are unresolvable; the sandbox's deny_read covers the rest.
    assert decide(policy, ws, "bash", command=command).decision == "allow"


def test_a_symlink_loop_is_unresolvable(tmp_path):
    loop = Path(os.path.realpath(tmp_path)) / "loop"
    loop.symlink_to("loop")
    with pytest.raises(UnresolvablePath, match=f"more than {MAX_SYMLINKS} symbolic links"):
        canonical_targets(str(loop / "x"), cwds=["/"])


def test_proc_self_cwd_resolves_to_every_possible_tool_cwd(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert canonical_targets("/proc/self/cwd/x", cwds=[a, b]) == (f"{a}/x", f"{b}/x")


def test_a_missing_component_ends_resolution_lexically(tmp_path):
    base = os.path.realpath(tmp_path)
    assert canonical_targets(f"{base}/missing/../x//y", cwds=["/"]) == (f"{base}/x/y",)


def test_rule_examples_stay_lexical_and_machine_independent(tmp_path):
    path = tmp_path / "examples.yaml"
    path.write_text(
        DENY_ENV
        + "      examples:\n"
        + "        match: [server/.env]\n"
        + "        not_match: [/proc/self/cwd/other]\n"
    )
    load_policies([path])  # raises if an example fails
