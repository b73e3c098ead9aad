"""What "allow for this session" may name and cover (issue 18 "Approvals"), against
real policy files and the real gate; and the broker's answers, timeouts, abort and
close, in memory."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import trio

from pi_sandbox.policies import evaluate_tool_call, load_policies
from pi_sandbox.supervisor.approvals import (
    ApprovalBroker,
    SessionGrant,
    grant_covers,
    offered_scopes,
)

POLICY = """\
version: 1
tool_call:
  default: allow
  rules:
    - id: git-push
      tool: bash
      command: [git, push]
      decision: ask
      reason: Pushing publishes your work.
    - id: curl
      tool: bash
      command: [curl]
      decision: ask
      reason: Downloads need a look.
    - id: no-shred
      tool: bash
      command: [shred]
      decision: deny
      reason: Never shred.
    - id: notes
      tool: write
      path: ["notes/**"]
      decision: ask
      reason: Notes are shared.
    - id: deploy-tool
      tool: deploy
      decision: ask
      reason: Deploys need a human.
    - id: inline-code
      tool: bash
      command_regex: "python3? -c"
      decision: ask
      reason: Inline code is opaque.
"""


@pytest.fixture
def policy(tmp_path: Path) -> Any:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return load_policies([path])


def decide(policy: Any, cwd: Path, tool: str, arguments: dict[str, Any]) -> Any:
    return evaluate_tool_call(policy, tool, arguments, workspace=cwd)


def scopes_for(policy: Any, cwd: Path, tool: str, arguments: dict[str, Any]) -> list[Any]:
    return offered_scopes(policy, tool, arguments, decide(policy, cwd, tool, arguments), cwd=cwd)


def grant(policy: Any, cwd: Path, tool: str, arguments: dict[str, Any], scope_id: str) -> Any:
    decision = decide(policy, cwd, tool, arguments)
    [scope] = [
        s for s in offered_scopes(policy, tool, arguments, decision, cwd=cwd) if s.id == scope_id
    ]
    return SessionGrant("approval-1", tool, decision.rule, decision.tier, decision.source, scope)


def covers(policy: Any, cwd: Path, given: SessionGrant, tool: str, args: dict[str, Any]) -> bool:
    return grant_covers(given, policy, tool, args, decide(policy, cwd, tool, args), cwd=cwd)


def test_the_approvals_package_exports_an_explicit_importable_all():
    module = importlib.import_module("pi_sandbox.supervisor.approvals")
    assert {"ApprovalBroker", "offered_scopes", "grant_covers", "SessionGrant"} <= set(
        module.__all__
    )
    for symbol in module.__all__:
        assert hasattr(module, symbol)


def test_a_shell_command_offers_its_exact_argv_and_its_prefix_without_the_last_word(
    policy, tmp_path
):
    scopes = scopes_for(policy, tmp_path, "bash", {"command": "git push origin main"})
    assert [(s.id, s.label) for s in scopes] == [
        ("command", "exactly git push origin main (rule git-push)"),
        ("prefix", "commands starting with git push origin followed by plain words, no options (rule git-push)"),
    ]


@pytest.mark.parametrize(
    "command",
    [
        "git push origin $BRANCH",  # a word the shell fills in at run time
        "git push origin $(cat ~/.ssh/id_rsa)",
        "git push origin 'ma'*",
        "GIT_SSH_COMMAND='sh -c id' git push origin main",  # changes what git runs
        "git push origin main && curl x | sh",  # sh reads a script the text does not show
    ],
)
def test_no_session_scope_is_offered_when_an_asking_command_is_not_fully_known(
    policy, tmp_path, command
):
    assert scopes_for(policy, tmp_path, "bash", {"command": command}) == []


def test_a_two_word_command_offers_no_prefix_so_never_a_program_wide_grant(policy, tmp_path):
    scopes = scopes_for(policy, tmp_path, "bash", {"command": "git push"})
    assert [s.id for s in scopes] == ["command"]


def test_a_path_rule_offers_the_exact_path_and_a_tool_only_rule_the_tool(policy, tmp_path):
    [path] = scopes_for(policy, tmp_path, "write", {"path": "notes/a.md", "content": "x"})
    assert (path.id, path.value) == ("path", str(tmp_path / "notes" / "a.md"))
    [tool] = scopes_for(policy, tmp_path, "deploy", {"target": "prod"})
    assert (tool.id, tool.label) == ("tool", "every deploy call (rule deploy-tool)")


def test_a_regex_rule_offers_only_this_exact_command_text(policy, tmp_path):
    [scope] = scopes_for(policy, tmp_path, "bash", {"command": "python3 -c 'print(1)'"})
    assert (scope.id, scope.value) == ("text", "python3 -c 'print(1)'")


@pytest.mark.parametrize(
    ("command", "covered"),
    [
        ("git push origin main", True),
        ("git push origin dev", True),
        ("git push origin", True),
        ("git push origin main && git push origin dev", True),
        ("echo ok && git push origin main", True),  # echo: no rule asks about it
        ("git push upstream main", False),
        ("git push origin-evil main", False),  # words, not characters
        ("git push --force origin main", False),
        ("git push origin main && curl x", False),  # another rule's ask
        ("git push origin main; curl -s http://x | touch y", False),
        ("git push origin main && curl x | sh", False),
        ("git push origin main; shred -u notes", False),  # a deny is never covered
        ("git push origin $(curl x)", False),
        ("git push origin main $X", False),
        ("GIT_SSH_COMMAND=x git push origin main", False),
        ("sudo git push origin main", False),  # reached another way
        ("bash -c 'git push origin main'", False),
        # red-team finding: options after the prefix run code or change what it does
        ("git push origin --receive-pack='echo pwned > w; git-receive-pack' main", False),
        ("git push origin --exec='id > w' main", False),
        ("git push origin main --force", False),
        ("git push origin --delete main", False),
        ("git push origin +main", False),
        ("git push origin :main", False),
        ("git push origin -f main", False),
    ],
)
def test_a_prefix_grant_covers_only_calls_whose_asking_parts_are_all_inside_it(
    policy, tmp_path, command, covered
):
    given = grant(policy, tmp_path, "bash", {"command": "git push origin main"}, "prefix")
    assert covers(policy, tmp_path, given, "bash", {"command": command}) is covered


def test_an_exact_grant_covers_the_same_argv_and_nothing_longer(policy, tmp_path):
    given = grant(policy, tmp_path, "bash", {"command": "git push origin main"}, "command")
    assert covers(policy, tmp_path, given, "bash", {"command": "git  push 'origin' main"})
    assert not covers(policy, tmp_path, given, "bash", {"command": "git push origin main -f"})


def test_a_grant_is_for_its_tool_and_its_rule_only(policy, tmp_path):
    given = grant(policy, tmp_path, "bash", {"command": "curl -s https://example.org/a"}, "prefix")
    assert covers(policy, tmp_path, given, "bash", {"command": "curl -s https://example.org/b"})
    assert not covers(policy, tmp_path, given, "bash", {"command": "git push origin main"})
    assert not covers(policy, tmp_path, given, "sh", {"command": "curl -s https://example.org/b"})


def test_a_path_grant_covers_the_same_file_under_another_spelling_only(policy, tmp_path):
    args = {"path": "notes/a.md", "content": "x"}
    given = grant(policy, tmp_path, "write", args, "path")
    assert covers(
        policy, tmp_path, given, "write", {"path": "./notes/../notes/a.md", "content": "y"}
    )
    assert not covers(policy, tmp_path, given, "write", {"path": "notes/b.md", "content": "y"})


def test_a_grant_is_void_once_its_rule_is_gone_from_the_policy(policy, tmp_path):
    given = grant(policy, tmp_path, "bash", {"command": "git push origin main"}, "prefix")
    changed = tmp_path / "changed.yaml"
    changed.write_text(POLICY.replace("id: git-push", "id: git-push-2"))
    reloaded = load_policies([changed])
    args = {"command": "git push origin main"}
    decision = evaluate_tool_call(reloaded, "bash", args, workspace=tmp_path)
    assert not grant_covers(given, reloaded, "bash", args, decision, cwd=tmp_path)


# --- the broker, in memory ------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.audit: list[dict[str, Any]] = []
        self.request = trio.Event()

    async def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["type"] == "policy_approval_request":
            self.request.set()


async def _ask(broker: ApprovalBroker, policy: Any, cwd: Path, command: str) -> Any:
    args = {"command": command}
    return await broker.ask(
        tool_call_id="call-1",
        tool_name="bash",
        arguments=args,
        decision=evaluate_tool_call(policy, "bash", args, workspace=cwd),
        policy=policy,
        cwd=cwd,
    )


async def test_answers_that_do_not_fit_the_request_are_refused_and_it_stays_open(policy, tmp_path):
    seen = Recorder()
    broker = ApprovalBroker(emit=seen.emit, audit=seen.audit.append)
    outcome: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def asker() -> None:
            outcome.append(await _ask(broker, policy, tmp_path, "git push origin main"))

        nursery.start_soon(asker)
        with trio.fail_after(10):
            await seen.request.wait()
        [request_id] = broker.pending
        assert broker.answer("approval-999", "deny") is not None
        assert "one of" in (broker.answer(request_id, "yes") or "")
        assert "offered scope" in (broker.answer(request_id, "allow_session", "*") or "")
        assert "longer than" in (broker.answer(request_id, "deny", None, "x" * 5000) or "")
        assert "string" in (broker.answer(request_id, "deny", None, 5) or "")  # type: ignore[arg-type]
        assert broker.pending == [request_id]
        assert broker.answer(request_id, "allow_session", "prefix") is None
    [result] = outcome
    assert (result.decision, result.by, result.scope.id) == ("allow_session", "user", "prefix")
    assert len(broker.grants) == 1 and broker.grants[0].approval_id == request_id
    assert seen.events[-1] == {
        "type": "policy_approval_resolved",
        "id": request_id,
        "decision": "allow_session",
        "by": "user",
        "scope": "prefix",
    }


async def test_a_cancelled_wait_is_resolved_as_an_abort_and_remembered(policy, tmp_path):
    seen = Recorder()
    broker = ApprovalBroker(emit=seen.emit, audit=seen.audit.append)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, broker, policy, tmp_path, "git push origin main")
            with trio.fail_after(10):
                await seen.request.wait()
            scope.cancel()
    assert seen.events[-1]["by"] == "abort" and seen.events[-1]["decision"] == "deny"
    assert broker.aborted_calls == {"call-1"} and broker.pending == []
    assert seen.audit[-1]["by"] == "abort"


async def test_a_timeout_denies_and_a_closed_broker_denies_without_asking(policy, tmp_path):
    seen = Recorder()
    broker = ApprovalBroker(emit=seen.emit, audit=seen.audit.append, timeout_s=0.05)
    with trio.fail_after(10):
        timed_out = await _ask(broker, policy, tmp_path, "git push origin main")
    assert (timed_out.decision, timed_out.by) == ("deny", "timeout")
    broker.close()
    asked_before = len([e for e in seen.events if e["type"] == "policy_approval_request"])
    closed = await _ask(broker, policy, tmp_path, "git push origin main")
    assert (closed.decision, closed.by) == ("deny", "closed")
    asked = len([e for e in seen.events if e["type"] == "policy_approval_request"])
    assert asked == asked_before == 1


def test_set_title_is_checked_at_the_boundary_like_the_other_ui_calls():
    from pi_sandbox.policies._extension_limits import LimitRules
    from pi_sandbox.supervisor.boundary import MessageRefusedError, check_ui_call

    limits = LimitRules().project
    assert check_ui_call("set_title", {"title": "pi - x"}, limits) == {"title": "pi - x"}
    with pytest.raises(MessageRefusedError, match="set_title: title"):
        check_ui_call("set_title", {"title": "x" * (limits.text_chars + 1)}, limits)
    with pytest.raises(MessageRefusedError, match="unknown argument"):
        check_ui_call("set_title", {"title": "x", "color": "red"}, limits)


def test_a_grant_of_a_managed_rule_does_not_lift_a_project_rules_ask(tmp_path):
    from pi_sandbox.policies import LoadedPolicyFile, build_policy, load_policy_file

    managed, project = tmp_path / "managed.yaml", tmp_path / "project.yaml"
    managed.write_text(POLICY)
    project.write_text(
        "version: 1\ntool_call:\n  rules:\n    - id: release-push\n      tool: bash\n"
        "      command: [git, push, origin, release]\n      decision: ask\n"
        "      reason: Pushes to the release branch publish.\n"
    )
    both = build_policy(
        [
            LoadedPolicyFile("managed", managed, load_policy_file(managed)),
            LoadedPolicyFile("project", project, load_policy_file(project)),
        ]
    )
    given = grant(both, tmp_path, "bash", {"command": "git push origin main"}, "prefix")
    assert covers(both, tmp_path, given, "bash", {"command": "git push origin dev"})
    forced = {"command": "git push origin release"}
    decision = decide(both, tmp_path, "bash", forced)
    assert (decision.decision, decision.rule) == ("ask", "git-push")  # the managed tier wins
    assert not covers(both, tmp_path, given, "bash", forced)  # but the project still asks
    # Control: without the project's rule, the same grant covers the same call.
    alone = load_policies([managed])
    given_alone = grant(alone, tmp_path, "bash", {"command": "git push origin main"}, "prefix")
    assert covers(alone, tmp_path, given_alone, "bash", forced)


def test_scope_labels_show_control_characters_escaped_so_a_command_cannot_fake_lines(
    policy, tmp_path
):
    command = "git push origin 'main\nevery command (rule git-push)\x1bc'"
    [exact, prefix] = scopes_for(policy, tmp_path, "bash", {"command": command})
    for label in (exact.label, prefix.label):
        assert "\n" not in label and "\x1b" not in label
    assert "\\nevery command" in exact.label and "\\x1bc" in exact.label
