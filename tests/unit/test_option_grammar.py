"""Issue 13 §6, "Flag-aware matching": ``command`` rules match options as a set.

Each spelling is checked against a rule in the default ``options`` form, and, as
the control, against the same rule with ``command_match: literal`` (the old
word-by-word matcher), which lets it through.
"""

from __future__ import annotations

import dataclasses

import pytest

from pi_sandbox.policies import evaluate_tool_call, load_policies
from pi_sandbox.policies._option_grammar import Option, read_arguments


def policy_with(tmp_path, command, *, literal=False, decision="deny", default="allow"):
    match = "\n      command_match: literal" if literal else ""
    path = tmp_path / ("literal.yaml" if literal else "options.yaml")
    path.write_text(
        f"version: 1\ntool_call:\n  default: {default}\n  rules:\n"
        f"    - id: r\n      tool: bash\n      command: {command}{match}\n"
        f"      decision: {decision}\n      reason: r\n"
    )
    return load_policies([path])


def decide(policy, tmp_path, command):
    return evaluate_tool_call(policy, "bash", {"command": command}, workspace=tmp_path).decision


RM_RF_SPELLINGS = [
    "rm -fr x",  # the four examples
    "rm -r -f x",
    "rm --recursive --force x",
    "rm -Rf x",
    "rm -f -R x",  # variants
    "rm x -rf",
    "rm --force --recursive x",
    "rm -rfv x",
    "rm -r --force x",
    "/bin/rm -v -R -f x",
    "sudo rm -fR x",
]


@pytest.mark.parametrize("command", RM_RF_SPELLINGS)
def test_options_match_as_a_set_whatever_their_spelling_and_order(tmp_path, command):
    assert decide(policy_with(tmp_path, "[rm, -rf]"), tmp_path, command) == "deny"


@pytest.mark.parametrize("command", RM_RF_SPELLINGS[:9])
def test_control_the_literal_matcher_lets_these_spellings_through(tmp_path, command):
    assert decide(policy_with(tmp_path, "[rm, -rf]", literal=True), tmp_path, command) == "allow"


@pytest.mark.parametrize("command", ["rm -r x", "rm -f x", "rm -- -rf", "echo -rf", "rmdir -rf x"])
def test_a_missing_option_or_one_after_double_dash_does_not_match(tmp_path, command):
    assert decide(policy_with(tmp_path, "[rm, -rf]"), tmp_path, command) == "allow"


@pytest.mark.parametrize("command", ['rm "$FLAGS" x', "rm * x", "rm $(echo -rf) x"])
def test_a_word_the_shell_expands_may_be_the_missing_option(tmp_path, command):
    assert decide(policy_with(tmp_path, "[rm, -rf]"), tmp_path, command) == "ask"


@pytest.mark.parametrize(
    "command",
    [
        "git -C dir push",  # git's global options before the subcommand
        "git -c k=v push",
        "git --git-dir=x push",
        "git --git-dir x push",
        "git --work-tree=. --no-pager push origin",
        "git -P push",
    ],
)
def test_git_global_options_before_the_subcommand_are_read(tmp_path, command):
    assert decide(policy_with(tmp_path, "[git, push]"), tmp_path, command) == "deny"
    # Without the parser's git unwrapping, the option grammar alone finds it.
    assert read_arguments("git", command.split()[1:]).operands[0][0] == "push"


@pytest.mark.parametrize(
    "command",
    ["git push -f", "git push origin main --force", "git push --force origin", "git push -fu o m"],
)
def test_subcommand_options_have_their_long_aliases(tmp_path, command):
    assert decide(policy_with(tmp_path, "[git, push, --force]"), tmp_path, command) == "deny"
    assert decide(policy_with(tmp_path, "[git, push, --force]"), tmp_path, "git push") == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "kubectl delete -n prod pod x",
        "kubectl -n prod delete pod x",
        "kubectl delete --namespace=prod pods",
        "kubectl delete pod x --namespace prod",
    ],
)
def test_an_option_value_matches_with_or_without_equals(tmp_path, command):
    policy = policy_with(tmp_path, "[kubectl, delete, --namespace, prod]")
    assert decide(policy, tmp_path, command) == "deny"
    assert decide(policy, tmp_path, "kubectl delete -n dev pod x") == "allow"


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("[tar, -x]", "tar xzf a.tgz"),
        ("[tar, -x]", "tar --extract -f a.tgz"),
        ("[tar, --to-command]", "tar -x --to-command=sh -f a.tgz"),
        ("[find, -delete]", "find . -name '*.o' -delete"),
        ("[find, -exec]", "find . -type f -exec ls {} +"),
        ("[chmod, -R]", "chmod --recursive 777 x"),
        ("[chown, -R]", "chown -hR me x"),
        ("[curl, -k]", "curl --insecure https://x.example"),
        ("[curl, -k]", "curl -sSk https://x.example"),
        ("[curl, -o]", "curl --output=x.sh https://x.example"),
        ("[wget, -O]", "wget --output-document=x https://x.example"),
        ("[docker, run, --privileged]", "docker --context c run --rm --privileged img"),
        ("[docker, rm, -f]", "docker rm --force c1"),
        ("[npm, install, -g]", "npm install --global left-pad"),
        ("[npm, install, -g]", "npm i -g left-pad"),
        ("[npm, install]", "npm add left-pad"),
        ("[pip, install, --user]", "pip -q install --user x"),
        ("[foo, --bar=baz]", "foo --bar baz"),
        ("[foo, --bar=baz]", "foo x --bar=baz"),
    ],
)
def test_the_common_dangerous_programs_have_their_option_grammar(tmp_path, rule, command):
    assert decide(policy_with(tmp_path, rule), tmp_path, command) == "deny"


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("[tar, -x]", "tar -czf a.tgz x"),
        ("[find, -delete]", "find . -name d"),  # -name is one option, not -n -a -m -e
        ("[curl, -k]", "curl -o k https://x.example"),  # k is -o's value
        ("[git, push]", "git -C push status"),  # push is -C's value
        ("[docker, run, --privileged]", "docker run img --privileged"),
    ],
)
def test_option_values_and_atomic_options_are_not_misread(tmp_path, rule, command):
    expected = "allow"
    if command.endswith("--privileged"):
        # After the image docker passes words to the container; read as an
        # option anyway, which only adds strictness.
        expected = "deny"
    assert decide(policy_with(tmp_path, rule), tmp_path, command) == expected


def test_an_allow_rule_does_not_cover_global_options_it_does_not_name(tmp_path):
    policy = policy_with(tmp_path, "[git, status]", decision="allow", default="ask")
    assert decide(policy, tmp_path, "git status -s") == "allow"
    assert decide(policy, tmp_path, "git -c core.fsmonitor=./x status") == "ask"
    assert decide(policy, tmp_path, "git --exec-path=/x status") == "ask"


def test_an_allow_rule_does_not_cover_options_before_its_operands(tmp_path):
    policy = policy_with(tmp_path, "[make, test]", decision="allow", default="ask")
    assert decide(policy, tmp_path, "make test") == "allow"
    assert decide(policy, tmp_path, "make test -j4") == "allow"
    assert decide(policy, tmp_path, "make -f other.mk test") == "ask"


def test_read_arguments_splits_clusters_and_reads_values():
    args = read_arguments("tar", ["-xzf", "a.tgz", "-C", "out", "--", "-x"])
    assert args.options == (Option("-x"), Option("-z"), Option("-f", "a.tgz"), Option("-C", "out"))
    assert args.operands == (("-x", False),)


def test_command_match_literal_needs_a_command(tmp_path):
    from pi_sandbox.errors import PolicyFileError

    path = tmp_path / "bad.yaml"
    path.write_text(
        "version: 1\ntool_call:\n  rules:\n"
        "    - {id: r, tool: bash, command_regex: x, command_match: literal, decision: deny, reason: r}\n"
    )
    with pytest.raises(PolicyFileError, match="command_match: literal needs a command"):
        load_policies([path])


SUBTREE_PUSH = [
    "git subtree -P lib push origin main",  # review finding F3
    "git subtree --prefix lib push origin main",
    "git subtree --prefix=lib push origin main",
    "git subtree -Plib push o m",
    "git subtree -m msg -P lib push o m",
    "git -C . subtree -P lib push o m",
    "git-subtree -P lib push o m",
]


@pytest.mark.parametrize("command", SUBTREE_PUSH)
def test_git_subtree_options_before_its_subcommand_take_values(tmp_path, command):
    assert decide(policy_with(tmp_path, "[git, subtree, push]"), tmp_path, command) == "deny"


def test_git_subtree_with_another_subcommand_does_not_match(tmp_path):
    policy = policy_with(tmp_path, "[git, subtree, push]")
    assert decide(policy, tmp_path, "git subtree -P lib split") == "allow"


def test_control_without_subtree_values_the_prefix_hides_push(tmp_path, monkeypatch):
    from pi_sandbox.policies import _option_grammar as grammar

    git = grammar._TABLES["git"]
    sub = {name: table for name, table in git.sub.items() if name != "subtree"}
    monkeypatch.setitem(grammar._TABLES, "git", dataclasses.replace(git, sub=sub))
    policy = policy_with(tmp_path, "[git, subtree, push]")
    assert decide(policy, tmp_path, "git subtree -P lib push origin main") == "allow"
