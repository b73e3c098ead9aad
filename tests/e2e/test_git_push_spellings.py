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
    # Review finding F3: git's dashed forms, subcommands that push without being
    # called `push`, and wrappers the table did not know.
    "/usr/lib/git-core/git-push origin HEAD:main",
    "git-push origin main",
    "./git-push origin main",
    "/usr/libexec/git-core/git-push",
    "nohup /usr/lib/git-core/git-push origin",
    "git-send-pack origin main",
    "/usr/lib/git-core/git-send-pack ../r main",
    "git send-pack origin main",
    "git -C . send-pack origin main",
    "git http-push https://x.example/r.git main",
    "/usr/lib/git-core/git-http-push https://x.example/r.git main",
    "git subtree push --prefix=lib origin main",
    "git subtree -P lib push origin main",
    "git-subtree push -P lib origin main",
    "git lfs push --all origin",
    "git-lfs push origin main",
    "git svn dcommit",
    "git p4 submit",
    "git remote-https origin https://x.example/r.git",
    "/usr/lib/git-core/git-remote-https origin https://x.example/r.git",
    "git remote-ext origin 'ssh host git-receive-pack r'",
    "git remote-fd 3",
    "git -c alias.x=push x",
    "git -c alias.x=send-pack x origin main",
    "tsp git push",
    "tsp -n -L job git push",
    "entr git push",
    "entr -rs 'git push'",
    "scl enable x -- git push",
    "scl enable x y 'git push'",
    "nq git push",
    "chronic git push",
    "ionice -c3 git push",
    "taskset 1 git push",
    "stdbuf -oL git push",
    "busybox git push",
    "toybox git push",
    "dbus-launch --exit-with-session git push",
    "su -c 'git push'",
    "xterm -e git push",
    "tmux new-session 'git push'",
    "screen -dm git push",
    "expect -c 'spawn git push'",
    "/lib64/ld-linux-x86-64.so.2 /usr/bin/git push",
    "hyperfine 'git push'",
    "echo 'git push' | at now",
    "echo 'git push' | batch",
    "numactl -N0 git push",
    "cgexec -g cpu:x git push",
    "systemd-run --user git push",
    "runuser -u u -- git push",
    "setpriv --reuid=1 git push",
    "prlimit --nofile=1 git push",
    "catchsegv git push",
    "faketime 2020-01-01 git push",
    "torsocks git push",
    "proxychains git push",
    "eatmydata git push",
    "unbuffer git push",
    "rlwrap git push",
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


GIT_CORE_PUSH = Path("/usr/lib/git-core/git-push")


@pytest.mark.skipif(not GIT_CORE_PUSH.exists(), reason="no /usr/lib/git-core/git-push")
def test_git_dashed_push_really_pushes_and_the_preset_denies_it(tmp_path):
    # Review finding F3: the dashed form is a real push (the control: run
    # without the gate it moves the remote's branch), and the gate denies it.
    def git(*args, cwd=tmp_path):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)

    remote, work = tmp_path / "remote.git", tmp_path / "work"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    git("init", "-q", "-b", "main", str(work))
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@x",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
        cwd=work,
    )
    git("remote", "add", "origin", str(remote), cwd=work)
    command = f"{GIT_CORE_PUSH} origin HEAD:main"

    report = explain(command, work)
    assert (report["decision"], report["rule"]) == ("deny", "git-push"), report

    pushed = subprocess.run(
        [str(GIT_CORE_PUSH), "origin", "HEAD:main"], cwd=work, capture_output=True, timeout=60
    )
    assert pushed.returncode == 0, pushed.stderr
    heads = subprocess.run(
        ["git", "--git-dir", str(remote), "rev-parse", "main"], capture_output=True, text=True
    )
    assert heads.returncode == 0 and len(heads.stdout.strip()) == 40
