"""Files a repository's git config makes git run or read on the host stay read-only
in a writable workspace: ``core.hooksPath``, ``include.path``/``includeIf.*.path``
(and what the included files name in turn) and the programs of ``core.fsmonitor``,
``core.sshCommand``, ``core.editor`` and ``core.pager``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox import build_bwrap_argv, worker_profile
from pi_sandbox.sandbox import profile as profile_module
from pi_sandbox.sandbox.settings import SandboxSettings

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(workspace: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=workspace, check=True, capture_output=True, env=GIT_ENV)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = Path(os.path.realpath(tmp_path))
    home = root / "home"
    workspace = root / "proj"
    agent = home / ".pi" / "agent"
    for directory in (workspace, agent):
        directory.mkdir(parents=True)
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n\tbare = false\n")
    return {"root": root, "home": home, "ws": workspace, "agent": agent}


def profile_for(layout, **settings):
    return worker_profile(
        "tool",
        workspace=layout["ws"],
        home=layout["home"],
        agent_dir=layout["agent"],
        settings=SandboxSettings(**settings),
    )


def add_config(layout, text: str) -> None:
    config = layout["ws"] / ".git" / "config"
    config.write_text(config.read_text() + text)


def mounts(profile) -> dict[str, str]:
    return dict(profile.protect_mounts)


def test_hooks_path_and_included_files_are_protected(layout):
    ws = layout["ws"]
    (ws / ".githooks").mkdir()
    (ws / ".githooks" / "pre-commit").write_text("#!/bin/sh\n")
    (ws / ".gitconfig").write_text("[user]\n\tname = x\n")
    add_config(
        layout,
        "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig\n"
        '[includeIf "gitdir:~/work/"]\n\tpath = ../conf/extra.inc\n',
    )
    profile = profile_for(layout)
    found = mounts(profile)
    assert found[str(ws / ".githooks")] == "bind"
    assert found[str(ws / ".gitconfig")] == "bind"
    # missing: not mounted (no entry on the host), watched by the persistence guard
    assert str(ws / "conf" / "extra.inc") in profile.missing_protected
    assert str(ws / "conf") not in found
    argv = build_bwrap_argv(profile, ["true"], bwrap="bwrap", seccomp_fd=3)
    at = argv.index(str(ws / ".githooks"))
    assert argv[at - 1] == "--ro-bind"


def test_missing_hooks_dir_and_included_file_are_left_to_the_guard(layout):
    ws = layout["ws"]
    add_config(layout, "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig\n")
    profile = profile_for(layout)
    assert str(ws / ".githooks") not in mounts(profile)
    assert {str(ws / ".githooks"), str(ws / ".gitconfig")} <= set(profile.missing_protected)


def test_the_worktree_root_is_the_base_of_hooks_path_and_git_dir_of_include(layout):
    ws = layout["ws"]
    add_config(layout, "[core]\n\thooksPath = tools/hooks\n[include]\n\tpath = local.inc\n")
    profile = profile_for(layout)
    assert str(ws / "tools" / "hooks") in profile.protected
    # git "commit" leaves .git writable: an included file in it is protected itself
    assert str(ws / ".git" / "local.inc") in profile.protected
    # git "read": already covered by .git itself, not added again
    read = profile_for(layout, git="read")
    assert str(ws / ".git" / "local.inc") not in read.protected


def test_includes_are_followed_into_what_they_name(layout):
    ws = layout["ws"]
    (ws / "a.inc").write_text("[include]\n\tpath = b.inc\n")
    (ws / "b.inc").write_text("[core]\n\thooksPath = deep-hooks\n[include]\n\tpath = c.inc\n")
    (ws / "c.inc").write_text("[include]\n\tpath = d.inc\n")
    (ws / "d.inc").write_text("[include]\n\tpath = e.inc\n")  # beyond depth 3: not read
    add_config(layout, "[include]\n\tpath = ../a.inc\n")
    profile = profile_for(layout)
    for name in ("a.inc", "b.inc", "c.inc", "d.inc", "deep-hooks"):
        assert str(ws / name) in profile.protected, name
    assert str(ws / "e.inc") not in profile.protected


def test_include_cycles_end(layout):
    ws = layout["ws"]
    (ws / "a.inc").write_text("[include]\n\tpath = a.inc\n")
    add_config(layout, "[include]\n\tpath = ../a.inc\n")
    assert str(ws / "a.inc") in profile_for(layout).protected


def test_home_relative_paths_are_expanded_against_home(layout):
    ws = layout["ws"]
    home = layout["home"]
    (home / "work.inc").write_text(f"[core]\n\thooksPath = {ws}/from-home-include\n")
    add_config(layout, "[include]\n\tpath = ~/work.inc\n")
    profile = profile_for(layout)
    assert str(ws / "from-home-include") in profile.protected
    assert str(home / "work.inc") not in profile.protected  # outside every writable root


@pytest.mark.parametrize("key", ["fsmonitor", "sshCommand", "editor", "pager"])
def test_commands_named_by_a_path_in_the_workspace_are_protected(layout, key):
    ws = layout["ws"]
    (ws / "tools").mkdir()
    (ws / "tools" / "run.sh").write_text("#!/bin/sh\n")
    add_config(layout, f"[core]\n\t{key} = tools/run.sh --flag\n")
    assert str(ws / "tools" / "run.sh") in profile_for(layout).protected


def test_a_script_passed_to_an_interpreter_is_protected_when_it_exists(layout):
    ws = layout["ws"]
    (ws / "pager.sh").write_text("less\n")
    add_config(layout, '[core]\n\tpager = "sh ./pager.sh -R"\n')
    profile = profile_for(layout)
    assert str(ws / "pager.sh") in profile.protected


def test_plain_commands_and_builtin_fsmonitor_add_nothing(layout):
    add_config(layout, "[core]\n\tfsmonitor = true\n\tpager = less -R\n\teditor = vim\n")
    baseline = profile_for(layout).protected
    (layout["ws"] / ".git" / "config").write_text("[core]\n\tbare = false\n")
    assert profile_for(layout).protected == baseline


def test_paths_outside_the_writable_roots_are_ignored(layout):
    outside = layout["root"] / "elsewhere"
    add_config(layout, f"[core]\n\thooksPath = {outside}\n[include]\n\tpath = {outside}/x\n")
    profile = profile_for(layout)
    assert not [p for p in profile.protected if p.startswith(str(outside))]


def test_a_symlink_on_the_way_is_refused(layout):
    ws = layout["ws"]
    (ws / "real-hooks").mkdir()
    (ws / ".githooks").symlink_to("real-hooks")
    add_config(layout, "[core]\n\thooksPath = .githooks/\n")
    with pytest.raises(SandboxError, match="symlink"):
        profile_for(layout)


def test_hooks_path_at_the_workspace_itself_is_refused(layout):
    add_config(layout, "[core]\n\thooksPath = .\n")
    with pytest.raises(SandboxError, match="hooksPath"):
        profile_for(layout)


def test_a_hard_linked_included_file_is_refused(layout):
    ws = layout["ws"]
    (ws / ".gitconfig").write_text("")
    os.link(ws / ".gitconfig", ws / "other")
    add_config(layout, "[include]\n\tpath = ../.gitconfig\n")
    with pytest.raises(SandboxError, match="hard links"):
        profile_for(layout)


def test_a_read_only_workspace_config_pointing_into_a_writable_root(layout):
    ws = layout["ws"]
    (ws / "build").mkdir()
    add_config(layout, "[core]\n\thooksPath = build/hooks\n")
    profile = profile_for(layout, workspace_writable=False, writable_roots=("build",))
    assert str(ws / "build" / "hooks") in profile.protected
    assert str(ws / ".git") not in profile.protected


def test_a_linked_worktree_reads_the_common_config(layout):
    main = layout["root"] / "main-repo"
    main.mkdir()
    git(main, "init", "-q", ".")
    git(
        main,
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    ws = layout["ws"]
    shutil.rmtree(ws)
    git(main, "worktree", "add", "-q", "--detach", str(ws))
    git(main, "config", "core.hooksPath", ".githooks")
    git(main, "config", "include.path", f"{ws}/.gitconfig")
    assert (ws / ".git").is_file()
    profile = profile_for(layout)
    assert str(ws / ".githooks") in profile.protected
    assert str(ws / ".gitconfig") in profile.protected
    assert str(ws / ".git") in profile.protected


def test_without_git_a_small_parser_reads_the_config(layout, monkeypatch):
    ws = layout["ws"]
    monkeypatch.setattr(profile_module.shutil, "which", lambda name: None)
    add_config(
        layout,
        '[Core]\n\tHooksPath = ".githooks" ; comment\n[includeIf "onbranch:main"]\n'
        "\tpath = ../.gitconfig\n[core]\n\tfsmonitor = ./tools/fsmon\n",
    )
    profile = profile_for(layout)
    for name in (".githooks", ".gitconfig", "tools"):
        assert any(
            p == str(ws / name) or p.startswith(str(ws / name) + "/") for p in profile.protected
        ), name


def test_an_unparsable_config_does_not_crash(layout):
    (layout["ws"] / ".git" / "config").write_bytes(b'[core\n\x00\xff garbage = "\n')
    profile_for(layout)


def test_no_git_directory_no_git_paths(layout):
    shutil.rmtree(layout["ws"] / ".git")
    profile_for(layout)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_itself_parses_the_config_when_installed(layout, monkeypatch):
    def no_fallback(config):
        raise AssertionError(f"fallback parser used for {config}")

    monkeypatch.setattr(profile_module, "_parse_git_config", no_fallback)
    add_config(layout, "[core]\n\thooksPath = .githooks\n")
    assert str(layout["ws"] / ".githooks") in profile_for(layout).protected
