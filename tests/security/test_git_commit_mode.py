"""Git that works, safely (issue 14 §2), with real ``pi --sandbox`` runs.

With ``sandbox.filesystem.git: commit`` (the default) the sandboxed tools can
commit, stash, branch, rebase and add worktrees; every way of making the host's
next git run code fails inside the sandbox or is quarantined right after the call,
and the host's next ``git status``/``git commit`` creates no sentinel. The control
runs the same attack without the sandbox and shows that host git then runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from pi_runs import bash_script, json_events, pi_env, scripted_argv
from pi_runs import run_pi as run_argv

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
}


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**GIT_ENV, "HOME": str(cwd)}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (
        ("init", "-q", "-b", "main"),
        ("config", "user.name", "Test"),
        ("config", "user.email", "test@example.com"),
    ):
        assert git(path, *args).returncode == 0
    (path / "app.py").write_text("print(1)\n")
    assert git(path, "add", "app.py").returncode == 0
    assert git(path, "commit", "-q", "-m", "init").returncode == 0
    return path


def run_pi(tmp_path: Path, workspace: Path, commands: list[str], *flags: str):
    script = bash_script(tmp_path / "script.yaml", commands)
    proc = run_argv(
        scripted_argv(script, workspace, "--mode", "json", "--no-session", *flags),
        env=pi_env(tmp_path, extra=GIT_ENV),
        timeout=180,
    )
    events = json_events(proc.stdout)
    results = [
        (
            "".join(b.get("text", "") for b in e["result"]["content"]),
            e["isError"],
        )
        for e in events
        if e["type"] == "tool_execution_end"
    ]
    quarantined = [e["quarantine"]["path"] for e in events if "quarantine" in e]
    return proc, results, quarantined


def test_commit_stash_branch_rebase_and_worktree_add_work_inside_the_sandbox(tmp_path):
    repo = make_repo(Path(os.path.realpath(tmp_path)) / "repo")
    commands = [
        "echo 2 >> app.py && git add app.py && git commit -qm second",
        "echo 3 >> app.py && git stash -q && git stash list | grep -c stash",
        "git checkout -qb feature && echo f > f.txt && git add f.txt && git commit -qm feat",
        "git checkout -q main && echo m > m.txt && git add m.txt && git commit -qm main2"
        " && git checkout -q feature && git rebase -q main && git log --format=%s | head -3",
        "git worktree add -q wt main~1 2>&1 || git worktree add -q --detach wt main~1;"
        " cd wt && echo w > w.txt && git add w.txt && git commit -qm in-worktree",
    ]
    proc, results, quarantined = run_pi(tmp_path, repo, commands, "--sandbox")
    assert proc.returncode == 0, proc.stderr
    for (text, is_error), command in zip(results, commands, strict=True):
        assert not is_error, f"{command}: {text}"
    assert quarantined == []
    log = git(repo, "log", "--all", "--format=%s").stdout.split()
    for subject in ("second", "feat", "main2", "in-worktree"):
        assert subject in log
    assert git(repo, "stash", "list").stdout.count("stash@") == 1
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip() == "feature"
    assert (repo / "wt" / ".git").is_file()
    assert git(repo / "wt", "status", "--short").returncode == 0


def attacks(sentinels: Path) -> dict[str, str]:
    """One bash command per code-execution vector; each touches its own sentinel
    when the host's git runs it."""
    s = {
        name: sentinels / name
        for name in (
            "hook",
            "fsmonitor",
            "hookspath",
            "pager",
            "filter",
            "worktree",
            "commondir",
            "include",
        )
    }
    return {
        "hook": f"printf '#!/bin/sh\\ntouch {s['hook']}\\n' > .git/hooks/pre-commit"
        " && chmod +x .git/hooks/pre-commit",
        "fsmonitor": f"git config core.fsmonitor 'touch {s['fsmonitor']} #'",
        "hookspath": f"mkdir -p h && printf '#!/bin/sh\\ntouch {s['hookspath']}\\n' > h/pre-commit"
        " && chmod +x h/pre-commit && git config core.hooksPath h",
        "pager": f"git config core.pager 'touch {s['pager']}; cat'",
        "filter": "echo '*.py filter=evil' > .git/info/attributes"
        f" && git config filter.evil.clean 'touch {s['filter']}; cat'",
        "worktree": "git worktree add -q --detach wt2 HEAD && git config extensions.worktreeConfig"
        f" true; printf '[core]\\n\\tfsmonitor = \"touch {s['worktree']} #\"\\n'"
        " > .git/worktrees/wt2/config.worktree",
        "commondir": "mkdir -p evil && git init -q --bare evil/g &&"
        f" git -C evil/g config core.fsmonitor 'touch {s['commondir']} #' &&"
        " cp -r .git/refs .git/HEAD evil/g/ 2>/dev/null; echo ../evil/g > .git/commondir",
        "include": f"printf '[core]\\n\\tfsmonitor = \"touch {s['include']} #\"\\n' > inc.cfg"
        " && git config include.path ../inc.cfg",
    }


def host_uses_git(repo: Path) -> None:
    """What the user does next on the host."""
    for cwd in (repo, repo / "wt2"):
        if cwd.is_dir():
            git(cwd, "status")
            (cwd / "app.py").touch()
            git(cwd, "add", "-A")
            git(cwd, "-c", "core.pager=cat", "diff", "--cached")
            git(cwd, "commit", "-q", "--allow-empty", "-m", "next")
            git(cwd, "log", "-1")


def test_every_code_execution_vector_fails_or_is_quarantined_and_host_git_runs_nothing(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    repo = make_repo(root / "repo")
    sentinels = root / "sentinels"
    sentinels.mkdir()
    config_before = (repo / ".git" / "config").read_bytes()
    vectors = attacks(sentinels)
    proc, results, quarantined = run_pi(tmp_path, repo, list(vectors.values()), "--sandbox")
    assert proc.returncode == 0, proc.stderr
    outcome = dict(zip(vectors, results, strict=True))
    for name in ("hook", "fsmonitor", "hookspath", "pager", "filter", "include"):
        text, is_error = outcome[name]
        assert is_error, f"{name} succeeded inside the sandbox: {text}"
    # created where nothing could be mounted: quarantined right after the call
    assert str(repo / ".git" / "worktrees" / "wt2" / "config.worktree") in quarantined
    assert str(repo / ".git" / "commondir") in quarantined
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not (repo / ".git" / "commondir").exists()
    host_uses_git(repo)
    assert sorted(p.name for p in sentinels.iterdir()) == []


def test_control_without_the_sandbox_host_git_runs_the_planted_code(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    repo = make_repo(root / "repo")
    sentinels = root / "sentinels"
    sentinels.mkdir()
    vectors = attacks(sentinels)
    del vectors["commondir"]  # would make the repository unusable for the others
    proc, _, _ = run_pi(tmp_path, repo, list(vectors.values()), "--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    host_uses_git(repo)
    ran = {p.name for p in sentinels.iterdir()}
    # (the pre-commit hook is shadowed by the planted core.hooksPath; the pager
    # only runs on a terminal)
    assert {"fsmonitor", "hookspath", "filter", "include", "worktree"} <= ran, ran


def test_a_worktree_workspace_can_commit_and_its_main_repositorys_hooks_stay_read_only(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    main = make_repo(root / "main")
    assert git(main, "worktree", "add", "-q", "-b", "side", str(root / "wt")).returncode == 0
    sentinel = root / "hook-ran"
    commands = [
        "echo b > b.txt && git add b.txt && git commit -qm from-worktree",
        f"printf '#!/bin/sh\\ntouch {sentinel}\\n' > {main}/.git/hooks/post-commit",
        f"git config core.fsmonitor 'touch {sentinel} #'",
        f"echo 'gitdir: {root}/elsewhere' > .git",
    ]
    proc, results, quarantined = run_pi(tmp_path, root / "wt", commands, "--sandbox")
    assert proc.returncode == 0, proc.stderr
    assert not results[0][1], results[0][0]
    assert all(is_error for _, is_error in results[1:]), results
    assert quarantined == []
    assert "from-worktree" in git(main, "log", "--all", "--format=%s").stdout
    assert (root / "wt" / ".git").read_text().startswith(f"gitdir: {main}/.git/worktrees/")
    git(root / "wt", "commit", "-q", "--allow-empty", "-m", "host")
    git(main, "status")
    assert not sentinel.exists()


def test_git_read_keeps_the_repository_read_only(tmp_path):
    repo = make_repo(Path(os.path.realpath(tmp_path)) / "repo")
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nsandbox:\n  filesystem:\n    git: read\n")
    head = git(repo, "rev-parse", "HEAD").stdout
    proc, results, _ = run_pi(
        tmp_path,
        repo,
        ["echo 2 >> app.py && git commit -qam second", "git log -1 --format=%s"],
        "--sandbox",
        "--policy",
        str(policy),
    )
    assert proc.returncode == 0, proc.stderr
    assert results[0][1] and "Read-only file system" in results[0][0]
    assert results[1][0].strip() == "init"  # reading still works
    assert git(repo, "rev-parse", "HEAD").stdout == head


def test_a_submodule_checkout_workspace_can_commit_and_its_config_stays_read_only(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    make_repo(root / "lib")
    sup = make_repo(root / "sup")
    added = git(sup, "-c", "protocol.file.allow=always", "submodule", "add", "-q", "../lib", "sub")
    assert added.returncode == 0, added.stderr
    assert git(sup, "commit", "-qm", "add sub").returncode == 0
    sub = sup / "sub"
    assert (sub / ".git").read_text().startswith("gitdir: ../.git/modules/sub")
    for args in (("config", "user.name", "Test"), ("config", "user.email", "t@example.com")):
        assert git(sub, *args).returncode == 0
    sentinel = root / "fsmonitor-ran"
    config = sup / ".git" / "modules" / "sub" / "config"
    before = config.read_bytes()
    proc, results, _ = run_pi(
        tmp_path,
        sub,
        [
            "echo b > b.txt && git add b.txt && git commit -qm in-submodule",
            f"git config core.fsmonitor 'touch {sentinel} #'",
        ],
        "--sandbox",
    )
    assert proc.returncode == 0, proc.stderr
    assert not results[0][1], results[0][0]
    assert results[1][1] and "Device or resource busy" in results[1][0]
    assert "in-submodule" in git(sub, "log", "--format=%s").stdout
    assert config.read_bytes() == before
    git(sub, "status")
    assert not sentinel.exists()


# Red-team F1: a repository planted where git would find it again, and a linked
# worktree of it; the index's gitlink makes the host's `git status` look inside.
PLANTED_REPOSITORIES = {
    "inside .git": (".git/x", "vendor"),
    "at the top": ("b", "w2"),
}


def plant_repository(repo_dir: str, worktree: str, sentinel: Path) -> str:
    return (
        f"git clone -q --bare . {repo_dir}"
        f" && printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = true\\n"
        f'\\tfsmonitor = "touch {sentinel}; false"\\n\' > {repo_dir}/config'
        f' && git --git-dir={repo_dir} worktree add -q "$PWD/{worktree}"'
        f" && git add {worktree} && git commit -qm vendor; true"
    )


@pytest.mark.parametrize("where", list(PLANTED_REPOSITORIES))
def test_a_planted_repository_and_its_worktree_are_quarantined_and_host_git_runs_nothing(
    tmp_path, where
):
    root = Path(os.path.realpath(tmp_path))
    repo = make_repo(root / "repo")
    sentinel = root / "PWNED"
    repo_dir, worktree = PLANTED_REPOSITORIES[where]
    proc, _, quarantined = run_pi(
        tmp_path, repo, [plant_repository(repo_dir, worktree, sentinel)], "--sandbox"
    )
    assert proc.returncode == 0, proc.stderr
    assert quarantined, proc.stdout
    assert not (repo / worktree / ".git").exists()
    for cwd in (repo, repo / worktree):
        if cwd.is_dir():
            git(cwd, "status")
    assert not sentinel.exists()


def test_control_a_planted_repository_and_its_worktree_run_code_without_the_sandbox(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    repo = make_repo(root / "repo")
    sentinel = root / "PWNED"
    proc, _, _ = run_pi(
        tmp_path, repo, [plant_repository(".git/x", "vendor", sentinel)], "--no-sandbox"
    )
    assert proc.returncode == 0, proc.stderr
    git(repo / "vendor", "status")
    assert sentinel.exists()
