"""Root on a workspace another uid owns: the sandbox runs as the owner (issue 14 §3).

Real bwrap, run by root, over a workspace owned by uid/gid 4242 (no such user
needs to exist). The workspace lives in a directory uid 4242 can search (pytest's
own temporary base is private to root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pi_sandbox.sandbox import build_bwrap_argv
from pi_sandbox.sandbox.identity import (
    SandboxIdentity,
    UserNamespace,
    unreachable_sources,
    workspace_identity,
)
from pi_sandbox.sandbox.profile import SandboxProfile

pytestmark = [
    pytest.mark.usefixtures("require_bwrap"),
    pytest.mark.skipif(os.geteuid() != 0, reason="only root can run a sandbox as another uid"),
]

OWNER = SandboxIdentity(4242, 4242)


@pytest.fixture
def owned_workspace():
    """A workspace owned by uid/gid 4242 holding ``notes.txt`` (mode 0600)."""
    base = Path(tempfile.mkdtemp(prefix="pi-identity-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        workspace = base / "ws"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("hello\n")
        os.chmod(workspace / "notes.txt", 0o600)
        for path in (workspace, workspace / "notes.txt"):
            os.chown(path, OWNER.uid, OWNER.gid)
        yield workspace
    finally:
        shutil.rmtree(base, ignore_errors=True)


def minimal_profile(workspace: Path) -> SandboxProfile:
    """/usr and the workspace: enough for /bin/sh, and reachable by uid 4242."""
    links = tuple(
        (os.readlink(f"/{name}"), f"/{name}")
        for name in ("bin", "lib", "lib64", "sbin")
        if os.path.islink(f"/{name}")
    )
    return SandboxProfile(
        ro_binds=("/usr",),
        rw_binds=(str(workspace),),
        symlinks=links,
        env=(("PATH", "/usr/bin:/bin"),),
        cwd=str(workspace),
        seccomp=False,
    )


SCRIPT = (
    "id -u; id -g; cat notes.txt; echo edited > notes.txt; echo new > made.txt; "
    "unshare -U true 2>/dev/null && echo nested-userns-allowed || echo nested-userns-refused"
)


def run_in(workspace: Path, bwrap: str, userns: UserNamespace | None):
    argv = build_bwrap_argv(
        minimal_profile(workspace),
        ["/bin/sh", "-c", SCRIPT],
        bwrap=bwrap,
        userns=None if userns is None else (userns.fd, OWNER.uid, OWNER.gid),
    )
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        pass_fds=() if userns is None else (userns.fd,),
    )


def test_the_workspace_owner_is_the_identity_only_for_root_and_a_foreign_owner(
    owned_workspace: Path, tmp_path: Path
):
    assert workspace_identity(str(owned_workspace)) == OWNER
    assert workspace_identity(str(tmp_path)) is None  # root's own directory


def test_a_sandbox_in_the_owners_namespace_runs_as_the_owner_and_its_files_are_the_owners(
    owned_workspace: Path, require_bwrap: str
):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    userns = UserNamespace.open(OWNER, workspace=str(owned_workspace))
    try:
        result = run_in(owned_workspace, require_bwrap, userns)
    finally:
        userns.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["4242", "4242", "hello", "nested-userns-refused"]
    assert (owned_workspace / "notes.txt").read_text() == "edited\n"
    made = (owned_workspace / "made.txt").stat()
    assert (made.st_uid, made.st_gid) == (OWNER.uid, OWNER.gid)  # not root's


def test_control_bwraps_own_namespace_maps_only_root_and_cannot_touch_the_owners_files(
    owned_workspace: Path, require_bwrap: str
):
    """Why the namespace is needed: as root, bwrap's default mapping leaves the
    owner's files unmapped, and root's capabilities do not reach them."""
    result = run_in(owned_workspace, require_bwrap, None)
    assert "hello" not in result.stdout
    assert (owned_workspace / "notes.txt").read_text() == "hello\n"
    assert not (owned_workspace / "made.txt").exists()


def test_directories_the_owner_cannot_search_are_named_as_unreachable(tmp_path: Path):
    private = tmp_path / "private"
    (private / "inner").mkdir(parents=True)
    os.chmod(private, 0o700)
    open_dir = Path(tempfile.mkdtemp(prefix="pi-identity-open-", dir="/tmp"))
    try:
        os.chmod(open_dir, 0o755)
        blocked = unreachable_sources([str(private / "inner"), str(open_dir), "/usr"], OWNER)
    finally:
        shutil.rmtree(open_dir)
    # pytest's base directory is already private to root: the first directory on the
    # way that uid 4242 cannot search is named, once.
    assert len(blocked) == 1
    assert str(private / "inner").startswith(blocked[0])
    assert sys.prefix  # the interpreter's own reachability is checked by the pool
