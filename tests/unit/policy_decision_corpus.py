"""A recorded corpus of tool calls, parses and gate decisions (issue 20 target 4).

The policy gate was made faster (issue 20); its decisions must not change. This
module holds what the differential test (``test_policy_decision_corpus.py``)
compares against: ~7,300 varied tool calls (the generator of
``bench/run_benchmarks.py`` section (h) with several seeds, every string constant
of the shell-grammar and policy test files used as a ``bash`` command, the
adversarial ones included, and 2,500 combinations of wrappers, ``xargs``/``find
-exec``, dangerous assignments and aliases, `_combinations`), and, recorded with
the gate as it was before the speed-up (main at e409192, by running this script
with ``PYTHONPATH`` pointing at that tree's ``src``), for each call and each
policy of ``data/policy_decisions/`` the decision
(effect, rule, reason, tier, file, unparseable flag, per-command breakdown), and
for each distinct command the ``parse_command`` result (or its
``UnparseableCommand`` reason).

Record again (only when a change of decisions is intended, and say so in the
commit)::

    .venv/bin/python tests/unit/policy_decision_corpus.py --record

Decisions depend on the workspace's files (symlinks, hard links) and on ``$HOME``
(``~`` in globs): `build_workspace` plants the same tree every time, and the
recording and the test both run with ``HOME`` = `CORPUS_HOME` and the workspace
as the working directory. Absolute paths in reasons are written as ``<WS>`` and
``<ROOT>``.
"""

from __future__ import annotations

import ast
import json
import lzma
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "policy_decisions"
CORPUS_FILE = DATA / "corpus.json.xz"
CORPUS_HOME = "/home/corpus-user"

# Test files whose string constants become bash commands of the corpus.
_STRING_SOURCES = (
    "test_shell_grammar.py",
    "test_shell_bypass_classes.py",
    "test_policy_cases.py",
    "test_redirect_targets.py",
    "test_option_grammar.py",
    "test_path_alias_matching.py",
)
_SEEDS = (4, 11, 23)
_CALLS_PER_SEED = 1000


def policy_files() -> list[Path]:
    """The corpus's policies: the 200-rule benchmark policy and the shipped presets
    (copies, so that later edits to ``policies/`` do not change the corpus)."""
    return sorted(DATA.glob("*.yaml"))


def build_workspace(root: Path) -> Path:
    """Plant the corpus workspace under ``root`` (an empty directory); return it.

    Secrets, a symlink to one, a symlinked directory, a hard link, and ordinary
    sources, so that path resolution (issue 13 §5) takes part in the decisions.
    """
    ws = root / "ws"
    for name, text in {
        ".env": "SECRET=1\n",
        "config/.env.production": "SECRET=2\n",
        "secrets/key.txt": "k\n",
        "certs/server.pem": "pem\n",
        "src/app/main.py": "print()\n",
        "src/lib/util.ts": "export {}\n",
        "tests/test_main.py": "def test(): pass\n",
        "docs/index.md": "# x\n",
        ".git/config": "[core]\n",
        "package.json": "{}\n",
        "Makefile": "all:\n",
        "README.md": "readme\n",
    }.items():
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (ws / "link-to-env").symlink_to(".env")
    (ws / "vault").symlink_to("secrets")
    (ws / "outside").symlink_to("/etc")
    os.link(ws / "secrets" / "key.txt", ws / "src" / "hardlinked.txt")
    return ws


def _test_strings() -> list[str]:
    """String constants of the `_STRING_SOURCES` (each once, in file order)."""
    found: dict[str, None] = {}
    here = Path(__file__).parent
    for name in _STRING_SOURCES:
        tree = ast.parse((here / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if text and len(text) < 4000 and "\0" not in text:
                    found[text] = None
    return list(found)


def _combinations(count: int, seed: int = 20) -> list[str]:
    """Commands built from the pieces the gate's indexes and shortcuts care about:
    wrappers, ``xargs``/``find -exec`` (words filled in at run time), dangerous
    assignments, aliases, path-qualified and expandable programs, globs."""
    import random

    rng = random.Random(seed)
    prefixes = [
        "", "", "PATH=/x ", "LD_PRELOAD=a ", "GIT_DIR=x ", "sudo ", "env X=1 ", "timeout 5 ",
        "nice -n 5 ", "xargs ", "xargs -n1 ", "xargs -I{} ", "find . -exec ", "find . -execdir ",
        "alias g=git; ", "export PATH=/y; ", "command ", "exec ", "bash -c ", "echo x | ",
    ]  # fmt: skip
    programs = [
        "git", "git", "rm", "curl", "npm", "docker", "pip", "/usr/bin/git", "./git", "g", "$X",
        "gi*", "git-push", "kubectl", "sh", "cat", "ls", "echo",
    ]  # fmt: skip
    arguments = [
        "", "push", "push --force", "push origin main", "-C x push", "status", "-rf /", "{}",
        "install x", "i x", "run --privileged x", "config set x y", "-- push", "pu{s,}h",
        "$ARG", "{} push", "push {}", "-c core.pager=x log", ".env", "~/.ssh/id_rsa",
        "*.py", "-v '^#'",
    ]  # fmt: skip
    suffixes = ["", "", "", " {} +", " \\;", " | sh", " > out", " < .env", " &", " 2>/dev/null"]
    joins = [" | ", " && ", "; ", " || ", "\n"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 3)):
            part = rng.choice(prefixes) + rng.choice(programs)
            argument = rng.choice(arguments)
            part += (" " + argument if argument else "") + rng.choice(suffixes)
            if "bash -c " in part:
                part = part.replace("bash -c ", "bash -c '") + "'"
            parts.append(part)
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(joins).replace("\\n", "\n") + part
        out.append(text)
    return out


def generate_calls() -> list[list[Any]]:
    """The corpus's calls as ``[tool, arguments]`` (needs the bench generator)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import run_benchmarks

    calls: list[list[Any]] = []
    for seed in _SEEDS:
        calls.extend([t, a] for t, a in run_benchmarks._CallGen(seed).calls(_CALLS_PER_SEED))
    for text in _test_strings():
        calls.append(["bash", {"command": text}])
    for text in _combinations(2500):
        calls.append(["bash", {"command": text}])
    # The same strings as file paths of the file tools, and a few odd arguments.
    for text in _test_strings()[:400]:
        calls.append(["read", {"path": text}])
    for path in (
        "link-to-env",
        "vault/key.txt",
        "src/hardlinked.txt",
        "outside/passwd",
        "/proc/self/cwd/.env",
        "/proc/1/cwd/.env",
        "/dev/fd/3",
        "./src/../.env",
        "src//app/main.py",
        "~/.ssh/id_rsa",
        "",
    ):
        for tool in ("read", "write", "edit", "ls", "grep", "find"):
            calls.append([tool, {"path": path}])
    calls.append(["bash", {"command": 42}])
    calls.append(["bash", {}])
    calls.append(["mcp_x_query", {"sql": None}])
    return calls


def normalise(text: str | None, ws: Path) -> str | None:
    """``text`` with the workspace and its parent spelled ``<WS>`` and ``<ROOT>``."""
    if text is None:
        return None
    real = os.path.realpath(ws)
    for path, mark in ((real, "<WS>"), (str(ws), "<WS>")):
        text = text.replace(path, mark)
    for path, mark in ((os.path.dirname(real), "<ROOT>"), (str(ws.parent), "<ROOT>")):
        text = text.replace(path, mark)
    return text


def decision_record(decision: Any, ws: Path) -> list[Any]:
    """What is compared of a `ToolCallDecision`: every field, paths normalised."""
    return [
        decision.decision,
        decision.rule,
        normalise(decision.reason, ws),
        decision.tier,
        Path(decision.source).name if decision.source else None,
        decision.unparseable,
        json.loads(normalise(json.dumps(decision.commands, sort_keys=True), ws) or "[]"),
    ]


def parse_record(text: str) -> str:
    """``repr`` of ``parse_command(text)``, or ``"UNPARSEABLE: <reason>"``."""
    from pi_sandbox.policies._shell_grammar import UnparseableCommand, parse_command

    try:
        return repr(parse_command(text))
    except UnparseableCommand as exc:
        return f"UNPARSEABLE: {exc.reason}"


def commands_of(calls: Iterable[Sequence[Any]]) -> list[str]:
    """The distinct string ``command`` arguments of ``calls``, in order."""
    found: dict[str, None] = {}
    for _, arguments in calls:
        command = arguments.get("command")
        if isinstance(command, str):
            found[command] = None
    return list(found)


def decide_all(calls: Sequence[Sequence[Any]], ws: Path) -> dict[str, list[list[Any]]]:
    """Per policy file name, the decision record of every call."""
    from pi_sandbox.policies import evaluate_tool_call, load_policies

    out: dict[str, list[list[Any]]] = {}
    for path in policy_files():
        policy = load_policies([path])
        out[path.name] = [
            decision_record(evaluate_tool_call(policy, tool, args, workspace=ws), ws)
            for tool, args in calls
        ]
    return out


def load_corpus() -> dict[str, Any]:
    with lzma.open(CORPUS_FILE, "rt", encoding="utf-8") as stream:
        return json.load(stream)


def _record() -> None:
    import tempfile

    os.environ["HOME"] = CORPUS_HOME
    calls = generate_calls()
    with tempfile.TemporaryDirectory() as tmp:
        ws = build_workspace(Path(tmp))
        os.chdir(ws)
        corpus = {
            "calls": calls,
            "parses": {text: parse_record(text) for text in commands_of(calls)},
            "decisions": decide_all(calls, ws),
        }
    with lzma.open(CORPUS_FILE, "wt", encoding="utf-8", preset=9) as stream:
        json.dump(corpus, stream, ensure_ascii=False, separators=(",", ":"))
    print(f"recorded {len(calls)} calls, {len(corpus['parses'])} commands -> {CORPUS_FILE}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: policy_decision_corpus.py --record")
    _record()
