"""bwrap argv for a sandbox that joins a prepared user namespace (issue 14 §3):
root on a workspace another uid owns runs the sandbox as that owner."""

from __future__ import annotations

from pi_sandbox.sandbox import build_bwrap_argv
from pi_sandbox.sandbox.bwrap_args import BASELINE_FLAGS
from pi_sandbox.sandbox.profile import SandboxProfile

BWRAP = "/usr/bin/bwrap"


def profile() -> SandboxProfile:
    return SandboxProfile(
        ro_binds=("/usr",), env=(("PATH", "/usr/bin"),), cwd="/usr", seccomp=False
    )


def test_joining_a_namespace_replaces_the_namespace_flags_and_keeps_the_rest_of_the_baseline():
    argv = build_bwrap_argv(profile(), ["true"], bwrap=BWRAP, userns=(6, 1001, 1002))
    head = argv[1 : argv.index("--proc")]
    assert head == [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--userns",
        "6",
        "--uid",
        "1001",
        "--gid",
        "1002",
        "--assert-userns-disabled",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    # bwrap refuses --userns beside these: none may appear.
    for flag in ("--unshare-all", "--unshare-user", "--unshare-user-try", "--disable-userns"):
        assert flag not in argv


def test_everything_after_the_namespace_flags_is_the_same_as_without_a_joined_namespace():
    own = build_bwrap_argv(profile(), ["true"], bwrap=BWRAP)
    joined = build_bwrap_argv(profile(), ["true"], bwrap=BWRAP, userns=(6, 1001, 1001))
    assert own[1 : len(BASELINE_FLAGS) + 1] == list(BASELINE_FLAGS)
    assert own[len(BASELINE_FLAGS) + 1 :] == joined[joined.index("--proc") :]
