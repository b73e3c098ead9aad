"""Issue 13 §6: spellings of a denied ``git push`` through the real CLI gate.

Each spelling is given to ``pi policy explain`` with the shipped
``policies/untrusted-repo.yaml``, as a user would; none may be allowed. The
first eleven are the classes the outside review found allowed in 0.5.0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNTRUSTED = REPO / "policies" / "untrusted-repo.yaml"

SPELLINGS = [
    "alias p='git push'; p",
    "hash -p /usr/bin/git g; g push",
    "echo push | xargs git",
    "echo 'git push' > s.sh; sh < s.sh",
    "echo 'git push' > s.sh; source s.sh",
    "echo 'git push' > s.sh; bash s.sh",
    "ssh-agent git push",
    "capsh -- -c 'git push'",
    "gdb --args git push",
    "perf record -- git push",
    "uv run git push",
    "npx git push",
    "pipx run git push",
    "poetry run git push",
    "echo 'git push' | sh",
    "find push -maxdepth 0 -exec git {} \\;",
    "env -S 'git push'",
    "make --eval='x:; git push' x",
    "git -C . push",
    "enable -f ./x.so ls; ls",
    "watch git push",
    "strace -f git push",
    # Words after a redirection belong to the command (tree-sitter-bash reads them
    # as more redirection targets): allowed before, as a bare `git`.
    "git 2>/dev/null push origin",
    "git >/dev/null push",
    "git 0</dev/null push",
]


def explain(command: str, cwd: Path) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "policy",
            "explain",
            "--policy",
            str(UNTRUSTED),
            "--tool",
            "bash",
            "--input",
            json.dumps({"command": command}),
            "--json",
            "-C",
            str(cwd),
        ],
        capture_output=True,
        text=True,
        timeout=120,  # a cold interpreter start on a saturated 2-core machine
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", SPELLINGS)
def test_no_spelling_of_git_push_is_allowed_by_the_untrusted_preset(tmp_path, command):
    report = explain(command, tmp_path)
    assert report["decision"] in ("ask", "deny"), report


def test_explain_says_the_unparseable_setting_decided_and_blames_no_rule(tmp_path):
    report = explain("LD_PRELOAD=/x.so ls", tmp_path)
    assert (report["decision"], report["rule"], report["unparseable"]) == ("ask", None, True)
    assert report["reason"] == (
        "the command could not be parsed: LD_PRELOAD changes what 'ls' runs → policy "
        "`unparseable: ask` (managed)"
    )
