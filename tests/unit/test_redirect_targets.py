"""Path rules see the files shell redirections open (issue 13 §5, §6).

``cat < server/.env`` names the secret only as a redirection target, which the
gate once dropped with the redirection. The parser now reports each target with
its access (`Redirect`), and the gate matches ``path`` rules against it through
the same alias resolution as file words. Each control turns the redirection
targets off in the gate (the old behaviour) and shows the call was allowed. The
real-process attack is tests/security/test_path_aliases.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox.policies import _tool_gate, evaluate_tool_call, load_policies
from pi_sandbox.policies._shell_grammar import Redirect, UnparseableCommand, parse_command

POLICY = """\
version: 1
tool_call:
  rules:
    - id: no-server-env
      tool: "*"
      path: [server/.env]
      decision: deny
      reason: secret
    - id: no-hooks
      tool: "*"
      path: [".git/hooks/**"]
      decision: deny
      reason: persistence
    - id: no-push
      tool: bash
      command: [git, push]
      decision: deny
      reason: no push
"""

READS = [
    "cat < server/.env",
    "exec 3< server/.env; cat <&3",
    "cat 0< server/.env",
    "while read l; do echo $l; done < server/.env",
    "grep x < server/.env",
    "< server/.env cat",
    "cat<server/.env",
    "cat < srv/.env",  # a symlinked directory
    "cat < /proc/self/cwd/server/.env",
    "cat < './server/.env'",
    "{ cat; } < server/.env",
    "(cat) < server/.env",
    "sudo cat < server/.env",
    "bash -c cat < server/.env",
    "x=$(cat < server/.env); echo $x",
    "f() { cat; } < server/.env; f",
    "cat <<EOF < server/.env\nEOF",
]

WRITES = [
    "echo x > .git/hooks/pre-commit",
    "echo x >> .git/hooks/pre-commit",
    "echo x &> .git/hooks/pre-commit",
    "echo x &>> .git/hooks/pre-commit",
    "echo x 2> .git/hooks/pre-commit",
    "echo x >| .git/hooks/pre-commit",
    "echo x >& .git/hooks/pre-commit",
    "> .git/hooks/pre-commit",
    "cat <<EOF > .git/hooks/pre-commit\nrm -rf ~\nEOF",
    "echo a | tee /dev/null > .git/hooks/pre-commit",
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = Path(os.path.realpath(tmp_path)) / "ws"
    (workspace / "server").mkdir(parents=True)
    (workspace / "server" / ".env").write_text("S\n")
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / "srv").symlink_to("server")
    return workspace


@pytest.fixture
def policy(tmp_path: Path):
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return load_policies([path])


def decide(policy, ws: Path, command: str):
    return evaluate_tool_call(policy, "bash", {"command": command}, workspace=ws)


@pytest.fixture
def without_redirect_targets(monkeypatch):
    """The gate as it was: redirection targets are not matched."""
    monkeypatch.setattr(_tool_gate, "_redirect_targets", lambda commands: [])


@pytest.mark.parametrize("command", READS)
def test_a_path_rule_denies_a_file_read_through_an_input_redirection(policy, ws, command):
    decision = decide(policy, ws, command)
    assert (decision.decision, decision.rule) == ("deny", "no-server-env")


@pytest.mark.parametrize("command", READS)
def test_control_without_redirection_targets_the_read_was_allowed(
    policy, ws, command, without_redirect_targets
):
    assert decide(policy, ws, command).decision == "allow"


@pytest.mark.parametrize("command", ["cat /dev/fd/3 3<server/.env", "cat /dev/stdin < server/.env"])
def test_an_open_file_alias_fed_by_a_redirection_of_the_secret_is_denied(policy, ws, command):
    # Before, only /dev/fd/3 was seen: unresolvable, so `unparseable: ask`.
    decision = decide(policy, ws, command)
    assert (decision.decision, decision.rule) == ("deny", "no-server-env")


@pytest.mark.parametrize("command", WRITES)
def test_a_path_rule_denies_a_file_written_through_an_output_redirection(policy, ws, command):
    decision = decide(policy, ws, command)
    assert (decision.decision, decision.rule) == ("deny", "no-hooks")


@pytest.mark.parametrize("command", WRITES)
def test_control_without_redirection_targets_the_write_was_allowed(
    policy, ws, command, without_redirect_targets
):
    assert decide(policy, ws, command).decision == "allow"


def test_a_read_write_redirection_is_never_allowed(policy, ws):
    # tree-sitter-bash does not read `<>`: the command is unparseable.
    decision = decide(policy, ws, "cat <> server/.env")
    assert decision.decision == "ask"
    assert decision.unparseable


@pytest.mark.parametrize(
    "command",
    [
        'cat < "$D/.env"',
        "cat < $F",
        "cat < $(cat name.txt)",
        "cat < `cat name.txt`",
        "cat < server/.en*",
        "cat < server/.en?",
        "cat < server/.{env,x}",
        "exec 3< $F; cat <&3",
    ],
)
def test_a_redirection_target_named_at_run_time_gets_the_unparseable_decision(policy, ws, command):
    decision = decide(policy, ws, command)
    assert decision.decision == "ask"  # the policy's unparseable (default ask)
    assert decision.unparseable
    assert "redirection target" in decision.reason


def test_a_run_time_redirection_target_that_matches_as_written_is_denied(policy, ws):
    decision = decide(policy, ws, "echo x > .git/hooks/pre-{commit,push}")
    assert (decision.decision, decision.rule) == ("deny", "no-hooks")


def test_a_run_time_redirection_target_is_allowed_without_a_path_rule(tmp_path, ws):
    path = tmp_path / "commands.yaml"
    path.write_text(POLICY.split("    - id: no-push")[0].split("  rules:")[0] + "  rules: []\n")
    assert decide(load_policies([path]), ws, "cat < $F").decision == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "ls 2>/dev/null",
        "echo x >&2",
        "echo x 1>&2 2>&1",
        "cat <&0",
        "exec 3<&-",
        "echo x > out.txt",
        "cat < README.md",
        "sort < <(ls)",
        "cat <<< server/.env",  # a here-string is text, not a file
        "echo x > /dev/stderr",
    ],
)
def test_control_redirections_to_other_files_or_streams_stay_allowed(policy, ws, command):
    assert decide(policy, ws, command).decision == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "git 2>/dev/null push origin",
        "git >/dev/null push",
        "git 0</dev/null push",
        "echo a | git 2>/dev/null push",
    ],
)
def test_words_after_a_redirection_belong_to_the_command(policy, ws, command):
    decision = decide(policy, ws, command)
    assert (decision.decision, decision.rule) == ("deny", "no-push")


@pytest.mark.parametrize(
    "command",
    [
        "cat 2>/dev/null server/.env",
        "cat <README.md server/.env",
        "cat <<EOF server/.env\nhi\nEOF",
        "2>/dev/null cat server/.env",
    ],
)
def test_a_file_named_after_a_redirection_is_a_file_word(policy, ws, command):
    decision = decide(policy, ws, command)
    assert (decision.decision, decision.rule) == ("deny", "no-server-env")


def test_words_after_the_redirection_of_a_compound_command_are_unparseable(policy, ws):
    decision = decide(policy, ws, "{ cat; } < README.md server/.env")
    assert decision.decision == "ask"
    assert decision.unparseable


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cat < f", [(("cat",), (Redirect("f", "read"),))]),
        ("cat 0< f", [(("cat",), (Redirect("f", "read"),))]),
        ("< f cat x", [(("cat", "x"), (Redirect("f", "read"),))]),
        ("echo x >> f", [(("echo", "x"), (Redirect("f", "write"),))]),
        ("echo x &> f", [(("echo", "x"), (Redirect("f", "write"),))]),
        ("echo x >| f 2>&1", [(("echo", "x"), (Redirect("f", "write"),))]),
        ("> f", [((":",), (Redirect("f", "write"),))]),
        ('cat < "$D/f"', [(("cat",), (Redirect("$D/f", "read", known=False),))]),
        ("cat < 'a b'", [(("cat",), (Redirect("a b", "read"),))]),
        ("git 2>/dev/null push", [(("git", "push"), (Redirect("/dev/null", "write"),))]),
        (
            "echo $(cat a) > b",
            [(("echo", "$(cat a)"), (Redirect("b", "write"),)), (("cat", "a"), ())],
        ),
    ],
)
def test_simple_commands_carry_their_redirection_targets(text, expected):
    assert [(c.argv, c.redirects) for c in parse_command(text)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # tree-sitter-bash reads `cat <a | cat <b` as `(cat <a | cat) <b`; bash
        # gives `<b` to the second cat only.
        (
            "cat <a | cat <b | cat <c",
            [
                (("cat",), (Redirect("a", "read"),)),
                (("cat",), (Redirect("b", "read"),)),
                (("cat",), (Redirect("c", "read"),)),
            ],
        ),
        ("a && b > f", [(("a",), ()), (("b",), (Redirect("f", "write"),))]),
        ("a | b > f x", [(("a",), ()), (("b", "x"), (Redirect("f", "write"),))]),
        (
            "cat <<EOF > f && rm q\nEOF",
            [(("cat",), (Redirect("f", "write"),)), (("rm", "q"), ())],
        ),
        (
            "while read l; do echo $l; done < f",
            [(("read", "l"), (Redirect("f", "read"),)), (("echo", "$l"), (Redirect("f", "read"),))],
        ),
    ],
)
def test_a_redirection_belongs_to_the_commands_bash_gives_it_to(text, expected):
    assert [(c.argv, c.redirects) for c in parse_command(text)] == expected


def test_deeply_nested_redirected_statements_are_unparseable_not_slow():
    # Each level visits every command within it: 1000 levels of 3000 commands
    # would be 3 million steps; the walk gives up after 100 000.
    text = "{ " * 1000 + "a;" * 3000 + " } <f;" * 1000
    with pytest.raises(UnparseableCommand, match="too many commands within redirected"):
        parse_command(text)
