"""SandboxProfile validation, worker_profile and the exact bwrap argv (DESIGN §6)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pydantic
import pytest

import pi_sandbox
import pi_sandbox.sandbox
from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox import SandboxProfile, build_bwrap_argv, worker_profile
from pi_sandbox.sandbox.bwrap_args import BASELINE_FLAGS
from pi_sandbox.sandbox.profile import GIT_READ_ONLY, PROTECTED_IN_WORKSPACE, is_within
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings

BWRAP = "/opt/bwrap/bwrap"

# A top-level directory that does not exist, so realpath leaves these paths alone.
FAKE = "/x-pi-sandbox-test"


def test_sandbox_package_exports_exactly_its_public_api():
    assert sorted(pi_sandbox.sandbox.__all__) == [
        "SandboxProfile",
        "build_bwrap_argv",
        "find_bwrap",
        "probe_bwrap",
        "worker_profile",
    ]


def proc_args(profile: SandboxProfile) -> list[str]:
    """The /proc restrictions for the entries this host has (PROC_READ_ONLY and
    PROC_MASKED; which exist differs between kernels)."""
    args: list[str] = []
    for path, kind in profile.proc_covers:
        if kind == "ro":
            args += ["--ro-bind", path, path]
        elif kind == "dir":
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    return args


def test_proc_sys_and_friends_are_covered_when_the_host_has_them():
    profile = SandboxProfile(cwd="/", seccomp=False)
    covered = dict(profile.proc_covers)
    assert covered.get("/proc/sys") == "ro"  # every Linux host has /proc/sys
    argv = build_bwrap_argv(profile, ["true"], bwrap=BWRAP)
    at = argv.index("/proc/sys")
    assert argv[at - 1 : at + 2] == ["--ro-bind", "/proc/sys", "/proc/sys"]
    assert argv.index("--proc") < at < argv.index("--dev")


def test_baseline_flags_are_pinned():
    assert BASELINE_FLAGS == (
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    )


def test_minimal_profile_builds_exact_argv():
    profile = SandboxProfile(
        ro_binds=("/usr",),
        rw_binds=(f"{FAKE}/work space",),
        env=(("PATH", "/usr/bin"),),
        cwd=f"{FAKE}/work space",
    )

    assert build_bwrap_argv(profile, ["true"], bwrap=BWRAP, seccomp_fd=5, status_fd=4) == [
        BWRAP,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--proc",
        "/proc",
        "--tmpfs",
        "/proc/1",
        "--remount-ro",
        "/proc/1",
        *proc_args(profile),
        "--dev",
        "/dev",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/usr",
        "/usr",
        "--bind",
        f"{FAKE}/work space",
        f"{FAKE}/work space",
        "--remount-ro",
        "/",
        "--seccomp",
        "5",
        "--json-status-fd",
        "4",
        "--setenv",
        "PATH",
        "/usr/bin",
        "--chdir",
        f"{FAKE}/work space",
        "--",
        "true",
    ]


def test_full_profile_orders_mounts_so_protected_and_masks_win(tmp_path: Path):
    root = os.path.realpath(tmp_path)
    ws = f"{root}/work space"
    for directory in (
        f"{ws}/.git/hooks",
        f"{ws}/.pi",
        f"{ws}/.ssh",
        f"{ws}/.venv",
        f"{root}/-data",
    ):
        os.makedirs(directory)
    Path(ws, ".netrc").write_text("machine x password y")
    Path(ws, ".ssh", "id_rsa").write_text("key")

    profile = SandboxProfile(
        ro_binds=("/usr", f"{root}/-data", f"{ws}/.venv"),
        rw_binds=(ws,),
        protected=(f"{ws}/.pi", f"{ws}/.git/hooks"),
        deny_read=(f"{ws}/.ssh", f"{ws}/.netrc", f"{ws}/.ssh/id_rsa", f"{ws}/missing"),
        env=(("PATH", "/usr/bin"), ("X", "-v value with space")),
        cwd=ws,
        tmp_size_bytes=1048576,
        symlinks=(("usr/bin", "/bin"),),
    )

    argv = build_bwrap_argv(profile, ["-weird", "arg with space"], bwrap=BWRAP, seccomp_fd=9)

    assert argv == [
        BWRAP,
        *BASELINE_FLAGS,
        "--proc",
        "/proc",
        "--tmpfs",
        "/proc/1",
        "--remount-ro",
        "/proc/1",
        *proc_args(profile),
        "--dev",
        "/dev",
        "--size",
        "1048576",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        "1048576",
        "--tmpfs",
        "/tmp",
        "--symlink",
        "usr/bin",
        "/bin",
        # binds: parents first, the ro .venv nested in the writable root after it
        "--ro-bind",
        f"{root}/-data",
        f"{root}/-data",
        "--bind",
        ws,
        ws,
        "--ro-bind",
        f"{ws}/.venv",
        f"{ws}/.venv",
        "--ro-bind",
        "/usr",
        "/usr",
        # pins: the directories between the root and a protected path, bound onto
        # themselves (mount points cannot be renamed away)
        "--bind",
        f"{ws}/.git",
        f"{ws}/.git",
        # protected after every bind
        "--ro-bind",
        f"{ws}/.git/hooks",
        f"{ws}/.git/hooks",
        "--ro-bind",
        f"{ws}/.pi",
        f"{ws}/.pi",
        # masks last: file by /dev/null, directory by a read-only tmpfs; the file
        # under the masked directory and the missing path are skipped
        "--ro-bind",
        "/dev/null",
        f"{ws}/.netrc",
        "--tmpfs",
        f"{ws}/.ssh",
        "--remount-ro",
        f"{ws}/.ssh",
        "--remount-ro",
        "/",
        "--seccomp",
        "9",
        "--setenv",
        "PATH",
        "/usr/bin",
        "--setenv",
        "X",
        "-v value with space",
        "--chdir",
        ws,
        "--",
        "-weird",
        "arg with space",
    ]


def test_redundant_binds_and_masks_of_unexposed_paths_are_dropped(tmp_path: Path):
    root = os.path.realpath(tmp_path)
    for directory in ("ws/.venv/lib", "ws/.venv/.git", "outside"):
        os.makedirs(f"{root}/{directory}")
    Path(root, "outside", "secret").write_text("s")

    profile = SandboxProfile(
        ro_binds=("/usr", "/usr/lib", f"{root}/ws/.venv", f"{root}/ws/.venv/lib"),
        rw_binds=(f"{root}/ws", f"{root}/ws/.venv/lib/cache"),
        # already read-only: inside the ro .venv
        protected=(f"{root}/ws/.venv/.git",),
        deny_read=(f"{root}/outside/secret",),
        cwd=f"{root}/ws",
    )

    argv = build_bwrap_argv(profile, ["true"], bwrap=BWRAP, seccomp_fd=3)

    mounts = argv[argv.index("/tmp", argv.index("--dev")) + 1 : argv.index("--seccomp")]
    assert mounts == [
        "--bind",
        f"{root}/ws",
        f"{root}/ws",
        "--ro-bind",
        f"{root}/ws/.venv",
        f"{root}/ws/.venv",
        "--bind",
        f"{root}/ws/.venv/lib/cache",
        f"{root}/ws/.venv/lib/cache",
        "--ro-bind",
        "/usr",
        "/usr",
        "--remount-ro",
        "/",
    ]


def test_deny_read_records_kind_at_validation(tmp_path: Path):
    root = os.path.realpath(tmp_path)
    Path(root, "d").mkdir()
    Path(root, "f").write_text("x")
    profile = SandboxProfile(deny_read=(f"{root}/f", f"{root}/d", f"{root}/gone"))

    assert profile.deny_read == (f"{root}/d", f"{root}/f", f"{root}/gone")
    assert profile.deny_masks == ((f"{root}/d", "dir"), (f"{root}/f", "file"))


def test_paths_are_canonicalised_through_symlinks(tmp_path: Path):
    root = os.path.realpath(tmp_path)
    Path(root, "real", "sub").mkdir(parents=True)
    Path(root, "link").symlink_to(f"{root}/real")

    profile = SandboxProfile(ro_binds=(f"{root}/link/sub", f"{root}/real/sub"), cwd=f"{root}/link")

    assert profile.ro_binds == (f"{root}/real/sub",)
    assert profile.cwd == f"{root}/real"


def test_empty_command_is_refused():
    with pytest.raises(ValueError, match="command"):
        build_bwrap_argv(SandboxProfile(), [], bwrap=BWRAP)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ro_binds": ("usr",)}, "must be absolute"),
        ({"rw_binds": ("-rf",)}, "must be absolute"),
        ({"deny_read": ("~/.ssh",)}, "must be absolute"),
        ({"cwd": "work"}, "must be absolute"),
        ({"ro_binds": ("/a\0b",)}, "NUL"),
        ({"symlinks": (("usr/bin", "bin"),)}, "must be absolute"),
        ({"symlinks": (("", "/bin"),)}, "symlink target"),
        ({"ro_binds": (f"{FAKE}/w",), "rw_binds": (f"{FAKE}/w",)}, "both read-only and read-write"),
        ({"rw_binds": (f"{FAKE}/w",), "protected": (f"{FAKE}/elsewhere",)}, "not inside any"),
        ({"env": (("A=B", "1"),)}, "invalid environment variable name"),
        ({"env": (("", "1"),)}, "invalid environment variable name"),
        ({"env": (("A", "1"), ("A", "2"))}, "given twice"),
        ({"env": (("A", "x\0y"),)}, "NUL"),
        ({"tmp_size_bytes": 0}, "positive"),
        ({"network": "host"}, "none"),
        ({"share_net": True}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_profiles_are_rejected(fields, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        SandboxProfile(**fields)


def test_writable_root_that_is_a_symlink_is_refused(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")

    with pytest.raises(SandboxError, match="is a symlink"):
        SandboxProfile(rw_binds=(str(tmp_path / "link"),))


def test_profile_is_frozen():
    profile = SandboxProfile()
    with pytest.raises(pydantic.ValidationError):
        profile.cwd = "/tmp"  # type: ignore[misc]


# --- worker_profile -------------------------------------------------------------


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = Path(os.path.realpath(tmp_path))
    home = root / "home"
    workspace = home / "project"
    agent_dir = home / ".pi" / "agent"
    for directory in (workspace / ".git" / "hooks", home / ".ssh", agent_dir / "sessions"):
        directory.mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (agent_dir / "auth.json").write_text("{}")
    return {"root": root, "home": home, "workspace": workspace, "agent_dir": agent_dir}


def test_tool_worker_profile_writes_the_workspace_and_protects_persistence_paths(layout):
    ws = layout["workspace"]
    profile = worker_profile(
        "tool", workspace=ws, home=layout["home"], agent_dir=layout["agent_dir"]
    )

    assert profile.rw_binds == (str(ws),)
    assert str(ws) not in profile.ro_binds
    # every persistence path, whether it exists or not; in .git (git: commit) only
    # what makes git run code or change where it points (issue 14 §2)
    expected = {str(ws / rel) for rel in PROTECTED_IN_WORKSPACE if rel != ".git"}
    expected |= {str(ws / ".git" / rel) for rel in GIT_READ_ONLY}
    assert set(profile.protected) == expected
    # existing ones are re-bound; missing ones are not mounted at all (issue 14 §1)
    assert (str(ws / ".git" / "hooks"), "bind") in profile.protect_mounts
    assert (str(ws / ".git" / "config"), "bind") in profile.protect_mounts
    assert str(ws / ".pi") in profile.missing_protected
    assert all(kind == "bind" for _, kind in profile.protect_mounts)
    # .git itself is writable but pinned: `mv .git x` fails with EBUSY
    assert str(ws / ".git") in profile.pins
    assert profile.cwd == str(ws)
    assert profile.network == "none"
    assert profile.seccomp is True
    assert profile.tmp_size_bytes == SandboxLimits().tmp_size_mb * 1024 * 1024


def test_git_read_keeps_the_whole_git_directory_read_only(layout):
    ws = layout["workspace"]
    profile = worker_profile(
        "tool",
        workspace=ws,
        home=layout["home"],
        agent_dir=layout["agent_dir"],
        settings=SandboxSettings(git="read"),
    )

    assert (str(ws / ".git"), "bind") in profile.protect_mounts
    assert not any(
        is_within(p, str(ws / ".git")) and p != str(ws / ".git") for p in profile.protected
    )


def test_extension_worker_profile_sees_the_workspace_read_only(layout):
    ws = layout["workspace"]
    profile = worker_profile(
        "extension", workspace=ws, home=layout["home"], agent_dir=layout["agent_dir"]
    )

    assert profile.rw_binds == ()
    assert str(ws) in profile.ro_binds
    assert profile.protected == ()


def test_worker_profile_masks_credentials_and_agent_state(layout):
    home, agent_dir = layout["home"], layout["agent_dir"]
    profile = worker_profile(
        "tool", workspace=home, home=home, agent_dir=agent_dir, tmp_size_bytes=None
    )

    for rel in (
        ".ssh",
        ".aws",
        ".gnupg",
        ".config/gcloud",
        ".docker",
        ".netrc",
        ".git-credentials",
    ):
        assert str(home / rel) in profile.deny_read
    for rel in ("auth.json", "trust.json", "sessions"):
        assert str(agent_dir / rel) in profile.deny_read
    assert profile.deny_masks == (
        (str(home / ".pi/agent/auth.json"), "file"),
        (str(home / ".pi/agent/sessions"), "dir"),
        (str(home / ".ssh"), "dir"),
    )
    assert profile.tmp_size_bytes is None


def test_worker_profile_binds_python_and_package_but_not_home(layout):
    profile = worker_profile(
        "tool",
        workspace=layout["workspace"],
        home=Path("/root"),
        agent_dir=layout["agent_dir"],
    )
    package_root = os.path.dirname(os.path.dirname(os.path.realpath(pi_sandbox.__file__)))

    for path in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        assert os.path.realpath(path) in profile.ro_binds
    assert package_root in profile.ro_binds
    assert "/usr" in profile.ro_binds
    assert "/root" not in profile.ro_binds
    assert "/etc" not in profile.ro_binds
    assert "/etc/shadow" not in profile.ro_binds
    for top in ("/bin", "/lib"):
        if os.path.islink(top):
            assert (os.readlink(top), top) in profile.symlinks


def test_worker_profile_default_env_is_an_allowlist(layout, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sentinel")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)

    profile = worker_profile(
        "tool", workspace=layout["workspace"], home=layout["home"], agent_dir=layout["agent_dir"]
    )

    assert dict(profile.env) == {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(layout["home"]),
        "LANG": "de_DE.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": "/tmp",
    }


def test_worker_profile_uses_an_explicit_env_verbatim(layout):
    profile = worker_profile(
        "extension",
        workspace=layout["workspace"],
        home=layout["home"],
        agent_dir=layout["agent_dir"],
        env={"PATH": "/usr/bin"},
    )

    assert profile.env == (("PATH", "/usr/bin"),)


def test_worker_profile_refuses_a_symlinked_persistence_path_in_a_writable_root(layout):
    # The link itself would stay replaceable (`rm .pi; mkdir .pi`): refuse, whether
    # it leads out of the workspace or not.
    ws, root = layout["workspace"], layout["root"]
    (root / "elsewhere").mkdir()
    (ws / ".pi").symlink_to(root / "elsewhere")

    with pytest.raises(SandboxError, match=r"\.pi is a symlink"):
        worker_profile("tool", workspace=ws, home=layout["home"], agent_dir=layout["agent_dir"])
    # read-only, the link is harmless
    profile = worker_profile(
        "extension", workspace=ws, home=layout["home"], agent_dir=layout["agent_dir"]
    )
    assert str(root / "elsewhere") not in profile.ro_binds


def test_an_rc_file_symlinked_out_of_the_workspace_is_not_protected(layout):
    ws, root = layout["workspace"], layout["root"]
    (root / "rc").write_text("# rc\n")
    (ws / ".bashrc").symlink_to(root / "rc")
    profile = worker_profile(
        "tool", workspace=ws, home=layout["home"], agent_dir=layout["agent_dir"]
    )
    assert str(root / "rc") not in profile.protected


def test_worker_profile_refuses_a_symlinked_workspace_for_the_tool_role(layout):
    link = layout["root"] / "ws-link"
    link.symlink_to(layout["workspace"])

    with pytest.raises(SandboxError, match="is a symlink"):
        worker_profile("tool", workspace=link, home=layout["home"], agent_dir=layout["agent_dir"])


def test_worker_profile_recreates_symlinks_on_the_way_to_exposed_paths(layout):
    root = layout["root"]
    (root / "real" / "tools").mkdir(parents=True)
    (root / "alias").symlink_to("real")

    profile = worker_profile(
        "extension",
        workspace=layout["workspace"],
        home=layout["home"],
        agent_dir=layout["agent_dir"],
        extra_ro=[root / "alias" / "tools", root / "does-not-exist"],
    )

    assert ("real", str(root / "alias")) in profile.symlinks
    assert str(root / "real" / "tools") in profile.ro_binds
    assert not any("does-not-exist" in path for path in profile.ro_binds)


def test_a_workspace_that_contains_home_protects_the_shell_and_git_start_up_files(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    for name in (".bashrc", ".profile", ".gitconfig"):
        (home / name).write_text("# rc\n")
    profile = worker_profile("tool", workspace=home, home=home, agent_dir=home / ".pi" / "agent")
    for rel in (".bashrc", ".profile", ".gitconfig", ".config/git"):
        assert str(home / rel) in profile.protected
    assert str(home / ".zshrc") not in profile.protected  # absent: nothing to bind


def test_a_workspace_inside_home_does_not_protect_home_files_it_cannot_reach(layout):
    profile = worker_profile(
        "tool", workspace=layout["workspace"], home=layout["home"], agent_dir=layout["agent_dir"]
    )
    assert all(p.startswith(str(layout["workspace"])) for p in profile.protected)


def test_tool_profile_with_protected_paths_proxy_and_seccomp_builds_exact_argv(tmp_path: Path):
    root = os.path.realpath(tmp_path)
    ws = f"{root}/-proj x"  # a leading dash and a space: still one argv element each
    os.makedirs(f"{ws}/.git")
    profile = SandboxProfile(
        ro_binds=("/usr",),
        rw_binds=(ws,),
        protected=(f"{ws}/.git", f"{ws}/.pi", f"{ws}/.vscode/tasks.json"),
        cwd=ws,
        network="proxy",
        proxy_socket=f"{root}/egress.sock",
        tmp_size_bytes=4096,
    )

    argv = build_bwrap_argv(profile, ["python3", "-I"], bwrap=BWRAP, seccomp_fd=5, status_fd=4)

    assert argv[len(BASELINE_FLAGS) + 1 :] == [
        "--proc",
        "/proc",
        "--tmpfs",
        "/proc/1",
        "--remount-ro",
        "/proc/1",
        *proc_args(profile),
        "--dev",
        "/dev",
        "--size",
        "4096",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        "4096",
        "--tmpfs",
        "/tmp",
        # binds sorted by path components (/tmp/... before /usr)
        "--bind",
        ws,
        ws,
        "--ro-bind",
        "/usr",
        "/usr",
        # existing: re-bound read-only; missing (.pi, .vscode/tasks.json): no
        # mount at all, so bwrap creates nothing on the host (issue 14 §1)
        "--ro-bind",
        f"{ws}/.git",
        f"{ws}/.git",
        "--ro-bind",
        f"{root}/egress.sock",
        "/run/pi-sandbox/egress.sock",
        "--remount-ro",
        "/",
        "--seccomp",
        "5",
        "--json-status-fd",
        "4",
        "--chdir",
        ws,
        "--",
        "python3",
        "-I",
    ]
