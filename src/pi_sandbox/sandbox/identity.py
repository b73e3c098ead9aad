"""Running the sandbox as the workspace's owner when ``pi`` runs as root (issue 14 §3).

The usual CI container runs ``pi`` as root over a checkout owned by another uid
(1000, 1001…). bwrap, run by root without setuid, maps only root into the
sandbox's user namespace; root's capabilities do not reach files whose owner is
unmapped there, so the sandbox could neither create anything in the checkout nor
edit its files (they show as uid 65534), and bwrap itself failed to create mount
points in it.

Instead the supervisor makes one user namespace per run whose only mapping is
the owner's uid and gid onto themselves (`UserNamespace.open`; root in the
initial namespace may write any mapping) and lets bwrap join it
(``--userns FD --uid U --gid G``): every sandboxed process runs as the owner, so
files it creates belong to the owner on the host and it edits what the owner
may edit — never more (it holds no capability, and root's files stay root's).
bwrap's ``--disable-userns`` cannot be combined with ``--userns``; the namespace's
``user.max_user_namespaces`` is set to 0 instead (nothing inside may create
another user namespace; bwrap's ``--assert-userns-disabled`` checks it, and the
seccomp filter denies ``unshare``/``setns`` anyway).

bwrap joins the namespace and switches to the owner's uid *before* it mounts, so
every bind source must be reachable by that uid: a Python installed under a
private ``/root`` is not. `unreachable_sources` finds such paths up front, and
the run refuses with one line naming the path and the fixes rather than failing
inside bwrap.

Imports only the stdlib (DESIGN §2).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from pi_sandbox.errors import SandboxError

__all__ = [
    "SandboxIdentity",
    "UserNamespace",
    "foreign_owner_hint",
    "refuse_unreachable",
    "unreachable_sources",
    "workspace_identity",
]


@dataclass(frozen=True)
class SandboxIdentity:
    """The uid and gid every sandboxed process of a run runs as (host ids, which are
    also the ids inside: the mapping is the identity)."""

    uid: int
    gid: int


def workspace_identity(workspace: str) -> SandboxIdentity | None:
    """The identity to run the sandbox as, or None for bwrap's default (the caller's).

    Only root has a choice: root running over a workspace another uid owns gets
    that owner's uid and gid (issue 14 §3). Anyone else runs the sandbox as
    themselves; a workspace they do not own is governed by its ordinary modes.

    Raises:
        OSError: the workspace cannot be examined.
    """
    if os.geteuid() != 0:
        return None
    info = os.stat(workspace)
    if info.st_uid == 0:
        return None
    return SandboxIdentity(info.st_uid, info.st_gid)


def foreign_owner_hint(workspace: str, identity: SandboxIdentity) -> str:
    """The shared start of every refusal: who owns the workspace, and whom the
    sandbox therefore runs as."""
    return (
        f"the workspace {workspace} is owned by uid {identity.uid}, not by root who runs pi, "
        f"so the sandbox runs as uid {identity.uid}"
    )


_FIXES = (
    "run pi as the workspace's owner (e.g. `setpriv --reuid={uid} --regid={gid} "
    "--init-groups pi …`), or chown the workspace to root"
)


def _searchable(info: os.stat_result, identity: SandboxIdentity, groups: set[int]) -> bool:
    mode = info.st_mode
    if info.st_uid == identity.uid:
        return bool(mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def unreachable_sources(paths: Iterable[str], identity: SandboxIdentity) -> list[str]:
    """The directories, among the ancestors of ``paths``, that ``identity`` cannot
    search — bwrap, running as that uid, could not find a bind source below them.

    The uid holds no capability; its groups are its gid and the supervisor's
    supplementary groups (bwrap keeps those). Paths that do not exist are skipped
    (bwrap reports a missing source itself). Returns the first blocking directory
    per path, de-duplicated, in order.
    """
    groups = {identity.gid, *os.getgroups()}
    blocked: list[str] = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        current = "/"
        # Each directory a name is looked up in must be searchable; the source
        # itself need not be (mounting it reads nothing).
        for part in [p for p in path.split("/") if p]:
            try:
                info = os.stat(current)
            except OSError:
                break
            if not _searchable(info, identity, groups):
                if current not in blocked:
                    blocked.append(current)
                break
            current = os.path.join(current, part)
    return blocked


def refuse_unreachable(
    workspace: str, identity: SandboxIdentity, blocked: list[str]
) -> SandboxError:
    """The one-line refusal for `unreachable_sources` results (exit 2)."""
    shown = ", ".join(blocked[:3]) + (f" and {len(blocked) - 3} more" if len(blocked) > 3 else "")
    return SandboxError(
        f"--sandbox: {foreign_owner_hint(workspace, identity)}, which cannot reach {shown} "
        f"(needed inside the sandbox: the Python installation, pi, an extension, a policy "
        f"file); {_FIXES.format(uid=identity.uid, gid=identity.gid)}, or make those "
        f"directories searchable by uid {identity.uid}"
    )


# Run in a fresh interpreter: unshare(CLONE_NEWUSER) needs a single-threaded
# caller, which the supervisor (trio, worker threads) is not.
_HELPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.stdout.write("error %s\\n" % os.strerror(ctypes.get_errno())); sys.stdout.flush()
    sys.exit(1)
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
try:
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
except OSError as exc:
    sys.stdout.write("error %s\\n" % exc.strerror); sys.stdout.flush()
    sys.exit(1)
sys.stdout.write("limited\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


class UserNamespace:
    """A user namespace mapping exactly one uid and one gid onto themselves, held
    open by a descriptor (close-on-exec; the spawner passes it to bwrap's
    ``--userns``). Nothing inside it may create a further user namespace."""

    def __init__(self, fd: int, identity: SandboxIdentity) -> None:
        self.fd = fd
        self.identity = identity

    @classmethod
    def open(cls, identity: SandboxIdentity, *, workspace: str = "") -> UserNamespace:
        """Create the namespace (blocking, about one interpreter start-up).

        A helper process unshares a user namespace; this process (root in the
        initial namespace) writes ``"U U 1"`` into its ``uid_map`` and
        ``"G G 1"`` into its ``gid_map`` (``setgroups`` denied), the helper caps
        ``user.max_user_namespaces`` at 0 inside it, and the namespace is kept by
        opening ``/proc/PID/ns/user``; the helper then exits.

        Raises:
            SandboxError: the kernel or the container refused (one line naming the
                owner mismatch and the fixes).
        """

        def refuse(why: str) -> SandboxError:
            return SandboxError(
                f"--sandbox: {foreign_owner_hint(workspace, identity)}, but its user "
                f"namespace cannot be made: {why}; "
                + _FIXES.format(uid=identity.uid, gid=identity.gid)
            )

        try:
            helper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HELPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError as exc:
            raise refuse(f"cannot start a helper: {exc.strerror or exc}") from exc
        assert helper.stdin is not None and helper.stdout is not None
        fd = -1
        try:
            line = helper.stdout.readline().strip()
            if line != "ready":
                raise refuse(line.removeprefix("error ") or "unshare failed")
            pid = helper.pid
            try:
                with open(f"/proc/{pid}/uid_map", "w") as handle:
                    handle.write(f"{identity.uid} {identity.uid} 1\n")
                with open(f"/proc/{pid}/setgroups", "w") as handle:
                    handle.write("deny\n")
                with open(f"/proc/{pid}/gid_map", "w") as handle:
                    handle.write(f"{identity.gid} {identity.gid} 1\n")
            except OSError as exc:
                raise refuse(f"writing its id maps failed: {exc.strerror or exc}") from exc
            helper.stdin.write("\n")
            helper.stdin.flush()
            line = helper.stdout.readline().strip()
            if line != "limited":
                raise refuse(
                    "capping user.max_user_namespaces in it failed: "
                    + (line.removeprefix("error ") or "the helper stopped")
                )
            fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            helper.stdin.close()
            try:
                helper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()
            helper.stdout.close()
        return cls(fd, identity)

    def close(self) -> None:
        """Close the descriptor (the namespace goes with its last process)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
