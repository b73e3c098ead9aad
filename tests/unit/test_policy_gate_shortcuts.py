"""What the policy gate keeps between calls, and its shortcuts (issue 20 target 4).

``parse_command`` keeps recent parses; a kept parse must be what a fresh parse
gives, an unparseable text must stay unparseable, and a parse that ran out of time
(the machine's load, not the text) must not be kept. The literal shortcuts in front
of its regexes, and the plain-command shortcut of the walk, must give what the
general path gives. The gate looks up the supervisor's own directory only for a
``/proc/self/cwd`` path, and still finds it there.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from policy_decision_corpus import commands_of, load_corpus

from pi_sandbox.policies import _shell_grammar as grammar
from pi_sandbox.policies import evaluate_tool_call, load_policies
from pi_sandbox.policies._path_glob import ToolCwds, tool_cwds
from pi_sandbox.policies._shell_grammar import UnparseableCommand, parse_command


def test_a_kept_parse_is_the_fresh_parse_of_the_same_text() -> None:
    text = "git add . && sudo -u bob env X=1 git push origin main | tee log"
    first = parse_command(text)
    assert text in grammar._cache
    assert parse_command(text) is first
    assert grammar._parse_uncached(text) == first


def test_an_unparseable_text_raises_every_time_with_the_same_reason() -> None:
    text = 'bash -c "$SCRIPT"'
    with pytest.raises(UnparseableCommand) as first:
        parse_command(text)
    with pytest.raises(UnparseableCommand) as second:
        parse_command(text)
    assert first.value.reason == second.value.reason
    assert first.value is not second.value


def test_a_parse_that_ran_out_of_time_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def slow_once(text: str) -> tuple[grammar.SimpleCommand, ...]:
        calls.append(text)
        if len(calls) == 1:
            raise grammar._ParseTimeout("parsing took longer than 0.25 s")
        return grammar.__dict__["_real_parse"](text)

    monkeypatch.setitem(grammar.__dict__, "_real_parse", grammar._parse_uncached)
    monkeypatch.setattr(grammar, "_parse_uncached", slow_once)
    with pytest.raises(UnparseableCommand, match="took longer"):
        parse_command("ls -la")
    assert "ls -la" not in grammar._cache
    assert [c.argv for c in parse_command("ls -la")] == [("ls", "-la")]
    assert len(calls) == 2


def test_the_cache_stays_within_its_bounds() -> None:
    for i in range(grammar.PARSE_CACHE_ENTRIES + 50):
        parse_command(f"echo {i}")
    assert len(grammar._cache) == grammar.PARSE_CACHE_ENTRIES
    assert "echo 0" not in grammar._cache  # the least recently used went first
    long_text = "echo " + "x" * grammar.PARSE_CACHE_TEXT_CHARS
    parse_command(long_text)
    assert long_text not in grammar._cache
    many = "; ".join(["true"] * (grammar.PARSE_CACHE_COMMANDS + 1))
    assert len(parse_command(many)) == grammar.PARSE_CACHE_COMMANDS + 1
    assert many not in grammar._cache


def _fuzz_texts(count: int) -> list[str]:
    """Random texts made of the pieces the re-evaluation regex looks for."""
    pieces = [
        "$((", "((", "$[", "${!", "[[", "let", "let x", "read", "mapfile", "readarray",
        "getopts", "unset", " a[", "\\x5b", "\\133", "printf", " -v ", "wait", " -p",
        "-v ", "-R ", "[", "]", "]=", "]+=", "declare", "typeset", "local", "readonly",
        "export", " -n", " -a", "${x", "${#x[", "${1:", "${@:", "x", " ", ";", "|", "\n",
        "@P}", "for", "select", " i ", "é", "_", "=",
    ]  # fmt: skip
    rng = random.Random(20)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(count)]


def test_the_literal_shortcuts_answer_as_the_regexes_do() -> None:
    texts = commands_of(load_corpus()["calls"]) + _fuzz_texts(20000)
    for text in texts:
        assert grammar._reevaluates(text) == bool(grammar._REEVALUATION.search(text)), text
        assert grammar._code_marked(text) == bool(grammar._CODE_MARKERS.search(text)), text


def _random_commands(count: int) -> list[str]:
    """Random command lines over words of every shape `_Walker._plain_command` meets."""
    words = [
        "ls", "git", "push", "-n", "20", "0", "2", "1.5", "-9", "'a b'", "''", '"x"', '""',
        '"a $b"', '"$(id)"', '"a\\"b"', "--format='%an'", "a'b'c", "'*.py'", "*.py", "{a,b}",
        "x=1", "PATH=/x", "$HOME", "~/x", "a\\ b", "\\rm", "2>/dev/null", ">", "f", "<", "0<",
        "1>&2", "&&", "||", "|", ";", "&", "(", ")", "{", "}", "!", "#c", "$'\\x41'", '$"t"',
        "`id`", "$(id)", "<(ls)", "if", "then", "fi", "env", "sudo", "xargs", "bash", "-c",
        "find", "-exec", "{}", "+", "\\;", "é", "a\\\nb", "\n", "2", "3<", "'$(x)'", '"`x`"',
    ]  # fmt: skip
    rng = random.Random(4)
    glue = ["", " ", " ", " ", "  "]
    out = []
    for _ in range(count):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 9))]
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(glue) + part
        out.append(text)
    return out


def _parse_or_reason(text: str) -> object:
    try:
        return parse_command(text)
    except UnparseableCommand as exc:
        return exc.reason


def test_the_plain_command_shortcut_gives_what_the_general_path_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = commands_of(load_corpus()["calls"]) + _random_commands(15000)
    fast = [_parse_or_reason(text) for text in texts]
    monkeypatch.setattr(grammar._Walker, "_plain_command", lambda self, item: None)
    grammar._cache.clear()
    slow = [_parse_or_reason(text) for text in texts]
    differences = [(t, f, s) for t, f, s in zip(texts, fast, slow, strict=True) if f != s]
    assert not differences, differences[:3]


def test_the_lazy_tool_directories_are_those_of_tool_cwds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    elsewhere = tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to("ws")
    for cwd in (ws, elsewhere):
        monkeypatch.chdir(cwd)
        lazy = ToolCwds(str(tmp_path / "link"))
        assert lazy[0] == str(ws)
        assert tuple(lazy) == tool_cwds(str(tmp_path / "link"))
        assert len(lazy) == (1 if cwd == ws else 2)


POLICY = """
version: 1
tool_call:
  default: allow
  rules:
    - id: env-files
      tool: [read]
      path: ["**/.env"]
      decision: deny
      reason: secrets
"""


def test_the_supervisors_directory_is_looked_up_only_for_proc_self_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    policy = load_policies([policy_file])
    ws = tmp_path / "ws"
    ws.mkdir()
    supervisor = tmp_path / "supervisor"
    supervisor.mkdir()
    (supervisor / ".env").write_text("SECRET=1\n")
    monkeypatch.chdir(supervisor)
    looked_up = []
    real_getcwd = os.getcwd
    monkeypatch.setattr(os, "getcwd", lambda: looked_up.append(1) or real_getcwd())
    assert evaluate_tool_call(policy, "read", {"path": "src/a.py"}, workspace=ws).decision == (
        "allow"
    )
    assert not looked_up
    # An unsandboxed tool's /proc/self/cwd is the supervisor's directory: still found.
    decision = evaluate_tool_call(policy, "read", {"path": "/proc/self/cwd/.env"}, workspace=ws)
    assert (decision.decision, decision.rule) == ("deny", "env-files")
    assert looked_up
