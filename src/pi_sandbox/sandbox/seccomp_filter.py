"""The seccomp filter every sandboxed worker runs under (DESIGN §6, issue 3).

bubblewrap installs it with ``--seccomp FD`` right before it executes the worker,
so it covers the worker and everything the worker starts (``bash`` and its
commands), and it cannot be removed from inside. It is a deny-list on top of the
namespaces and the dropped capabilities, for kernel attack surface that the
namespaces do not take away:

- every name in `DENIED_SYSCALLS` fails with ``EPERM``: debugging and reading
  other processes' memory (``ptrace``, ``process_vm_*``), ``io_uring``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, the kernel keyring, mounts and namespaces,
  ``personality``, and administrative calls (modules, kexec, swap, reboot, ...);
- ``ioctl`` fails with ``EPERM`` when the low 32 bits of its request (argument 1)
  are ``TIOCSTI`` (push a keystroke into a terminal's input) or ``TIOCLINUX``
  (the virtual console's selection/paste). The kernel reads the request as an
  ``unsigned int``, so the rule masks with ``0xFFFFFFFF``: setting high bits does
  not get past it;
- a system call made for another architecture than the native one (on x86_64:
  32-bit ``int 0x80`` and x32 calls) kills the whole process (``KILL_PROCESS``),
  so none of the rules can be bypassed through a second syscall table;
- everything else is allowed.

The filter is generated with libseccomp (``libseccomp.so.2``) through the
``pyseccomp`` ctypes wrapper, imported on first use only: the supervisor imports
this module, and both cost several milliseconds to load. A name libseccomp does
not know on the running architecture (``vm86`` on x86_64, say) is left out and
reported by `skipped_syscalls`.

If pyseccomp is not installed, libseccomp cannot be loaded or the filter cannot
be built, the functions raise `pi_sandbox.errors.SandboxUnavailableError` with the
cause and the fix; `seccomp_status` returns that message instead.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import NamedTuple

from pi_sandbox.errors import SandboxUnavailableError
from pi_sandbox.shared_libraries import known_sonames

__all__ = [
    "ALLOWED_SOCKET_FAMILIES",
    "DENIED_IOCTLS",
    "DENIED_SYSCALLS",
    "IOCTL_REQUEST_MASK",
    "MODE_ARGUMENTS",
    "SETID_BITS",
    "TIOCLINUX",
    "TIOCSTI",
    "UNFILTERABLE_SYSCALLS",
    "seccomp_memfd",
    "seccomp_program",
    "seccomp_status",
    "skipped_syscalls",
]

DENIED_SYSCALLS: tuple[str, ...] = (
    # Other processes: debugging, and reading or writing their memory or file
    # descriptors (the PID namespace limits the targets; this removes the tool).
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    # Large, often-exploited kernel interfaces no worker needs.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    # The kernel keyring is not namespaced by bwrap.
    "keyctl",
    "add_key",
    "request_key",
    # Mounts and namespaces: the sandbox's shape is fixed by bwrap.
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # Execution domain: READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE and friends.
    "personality",
    # Administration of the machine (capabilities are dropped anyway; the
    # filter makes it independent of that).
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "iopl",
    "ioperm",
    # File handles bypass the mount namespace's view of the file system.
    "name_to_handle_at",
    "open_by_handle_at",
    # Obsolete calls with a history of bugs.
    "lookup_dcookie",
    "uselib",
    "vm86",
    "vm86old",
    # Revoking a terminal from under its other users.
    "vhangup",
)
"""System calls that fail with ``EPERM`` under the filter, whatever their arguments.

Names libseccomp doesn't know on the running architecture are skipped; see
`skipped_syscalls`.
"""

TIOCSTI = 0x5412
"""``ioctl`` request: insert a byte into a terminal's input queue."""

TIOCLINUX = 0x541C
"""``ioctl`` request: Linux virtual console operations (selection, paste)."""

DENIED_IOCTLS: tuple[int, ...] = (TIOCSTI, TIOCLINUX)
"""``ioctl`` requests (argument 1) that fail with ``EPERM`` under the filter."""

IOCTL_REQUEST_MASK = 0xFFFFFFFF
"""The bits of an ``ioctl`` request the kernel reads (it is an ``unsigned int``)."""

SETID_BITS: tuple[int, ...] = (0o4000, 0o2000)
"""``S_ISUID`` and ``S_ISGID``. A sandbox running as host root that creates a
setuid-root file in the writable workspace hands every local user root once the
run is over (``nosuid`` only applies to the sandbox's own mount), so a mode with
either bit fails with ``EPERM`` in every call that sets a mode."""

MODE_ARGUMENTS: tuple[tuple[str, int], ...] = (
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mkdir", 1),
    ("mkdirat", 2),
    ("mknod", 1),
    ("mknodat", 2),
)
"""``(system call, index of its mode argument)`` checked for `SETID_BITS`."""

UNFILTERABLE_SYSCALLS: tuple[str, ...] = ("openat2",)
"""Calls whose mode is inside a struct the filter cannot read: they fail with
``ENOSYS``, as on a kernel that lacks them, so callers fall back to ``openat``."""

ALLOWED_SOCKET_FAMILIES: tuple[int, ...] = (1, 2, 10, 16)
"""``AF_UNIX``, ``AF_INET``, ``AF_INET6``, ``AF_NETLINK``. Every other address
family fails with ``EAFNOSUPPORT`` in ``socket`` and ``socketpair``: some are not
confined by the network namespace at all (``AF_VSOCK`` reaches the hypervisor and
the host), the rest are kernel attack surface no worker needs."""

_MAX_SOCKET_FAMILY = 45  # AF_MCTP; families above this do not exist (yet)

BPF_INSTRUCTION_BYTES = 8
"""Size of one classic-BPF instruction (``struct sock_filter``)."""

_INSTALL_PYSECCOMP = (
    "install it: pip install 'pyseccomp>=0.1.2' (a dependency of pi-sandbox; "
    "reinstall pi-sandbox to get it)"
)
_INSTALL_LIBSECCOMP = (
    "install libseccomp: apt install libseccomp2 (Debian/Ubuntu), "
    "dnf install libseccomp (Fedora), apk add libseccomp (Alpine)"
)


class _Built(NamedTuple):
    program: bytes
    skipped: tuple[str, ...]


def seccomp_program() -> bytes:
    """Return the filter as a classic-BPF program, as bwrap's ``--seccomp FD`` reads it.

    Built once per process and cached: later calls return the same ``bytes``
    object without touching libseccomp.

    Returns:
        The program in native byte order: ``len(result) // 8`` instructions of 8
        bytes each (``struct sock_filter``), never empty.

    Raises:
        SandboxUnavailableError: pyseccomp isn't installed, ``libseccomp.so.2``
            can't be loaded, or libseccomp refused to build the filter. The
            message names the cause and the fix. Failures are not cached: a later
            call tries again.
    """
    return _build().program


def skipped_syscalls() -> tuple[str, ...]:
    """Names in `DENIED_SYSCALLS` that libseccomp doesn't know on this architecture.

    They are not in the filter (``vm86``, ``vm86old`` and ``umount`` on x86_64,
    where those calls don't exist).

    Raises:
        SandboxUnavailableError: as `seccomp_program`.
    """
    return _build().skipped


def seccomp_memfd() -> int:
    """Return a new file descriptor holding `seccomp_program`, for ``bwrap --seccomp FD``.

    The descriptor is an anonymous memory file (memfd), close-on-exec, positioned
    at offset 0 and sealed against writes, resizing and further seals. The caller
    owns it: ``dup2`` it to the number given to ``--seccomp`` in the child (or pass
    it with ``pass_fds``) and close it afterwards. Use one per bwrap launch: bwrap
    reads it to the end, and the file offset is shared by every copy of the
    descriptor, so a second bwrap given the same one would read nothing and fail.

    Returns:
        The file descriptor (an ``int``).

    Raises:
        SandboxUnavailableError: the filter can't be built (see `seccomp_program`),
            or the memfd can't be created or written.
    """
    import fcntl

    program = seccomp_program()
    try:
        fd = os.memfd_create("pi-sandbox-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise SandboxUnavailableError(
            f"cannot create a memfd for the seccomp filter: {exc}; "
            "memfd_create needs Linux 3.17 or newer"
        ) from exc
    try:
        _write_all(fd, program)
        fcntl.fcntl(
            fd,
            fcntl.F_ADD_SEALS,
            fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL,
        )
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as exc:
        os.close(fd)
        raise SandboxUnavailableError(f"cannot write the seccomp filter to a memfd: {exc}") from exc
    return fd


def seccomp_status() -> str | None:
    """Return ``None`` when the filter can be built here, else why not (for ``pi sandbox doctor``).

    Returns:
        ``None``, or the `SandboxUnavailableError` message: its cause and its fix.
    """
    try:
        seccomp_program()
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


@functools.cache
def _build() -> _Built:
    """Generate the program with libseccomp. Cached on success only."""
    try:
        with known_sonames():  # no `ldconfig -p` process (issue 20 §5)
            import pyseccomp
    except ImportError as exc:
        raise SandboxUnavailableError(
            f"the seccomp filter needs the Python package pyseccomp, which cannot be "
            f"imported ({exc}); {_INSTALL_PYSECCOMP}"
        ) from exc
    except (OSError, RuntimeError, AttributeError) as exc:
        # pyseccomp loads libseccomp when imported: RuntimeError when it finds no
        # libseccomp, OSError when it can't load it, AttributeError when the
        # library lacks a function (too old).
        raise SandboxUnavailableError(
            f"the seccomp filter needs libseccomp (libseccomp.so.2, version 2.4 or "
            f"newer), which cannot be loaded ({type(exc).__name__}: {exc}); "
            f"{_INSTALL_LIBSECCOMP}"
        ) from exc

    step = "creating the filter"
    try:
        filt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        step = "setting the bad-architecture action to KILL_PROCESS"
        filt.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
        deny = pyseccomp.ERRNO(errno.EPERM)
        skipped: list[str] = []
        for name in DENIED_SYSCALLS:
            step = f"resolving {name}"
            number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
            # -1 is an unknown name; other negative numbers are libseccomp's
            # pseudo-syscalls, names that exist on some other architecture only.
            if number < 0:
                skipped.append(name)
                continue
            step = f"adding the rule for {name}"
            filt.add_rule(deny, number)
        for request in DENIED_IOCTLS:
            step = f"adding the ioctl rule for {request:#x}"
            filt.add_rule(
                deny,
                "ioctl",
                pyseccomp.Arg(1, pyseccomp.MASKED_EQ, IOCTL_REQUEST_MASK, request),
            )
        for name, index in MODE_ARGUMENTS:
            if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) < 0:
                skipped.append(name)
                continue
            for bit in SETID_BITS:
                step = f"adding the set-id mode rule for {name}"
                filt.add_rule(deny, name, pyseccomp.Arg(index, pyseccomp.MASKED_EQ, bit, bit))
        for name in UNFILTERABLE_SYSCALLS:
            if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) < 0:
                skipped.append(name)
                continue
            step = f"adding the rule for {name}"
            filt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
        no_family = pyseccomp.ERRNO(errno.EAFNOSUPPORT)
        for name in ("socket", "socketpair"):
            step = f"adding the address family rules for {name}"
            for family in range(_MAX_SOCKET_FAMILY + 1):
                if family not in ALLOWED_SOCKET_FAMILIES:
                    filt.add_rule(no_family, name, pyseccomp.Arg(0, pyseccomp.EQ, family))
            filt.add_rule(no_family, name, pyseccomp.Arg(0, pyseccomp.GT, _MAX_SOCKET_FAMILY))
        step = "exporting the BPF program"
        program = _export_bpf(filt)
    except OSError as exc:
        raise SandboxUnavailableError(
            f"libseccomp could not build the seccomp filter ({step}: {exc}); it needs "
            f"libseccomp 2.4 or newer and Linux 4.14 or newer: {_INSTALL_LIBSECCOMP}"
        ) from exc

    if not program or len(program) % BPF_INSTRUCTION_BYTES:
        raise SandboxUnavailableError(
            f"libseccomp exported a malformed seccomp program ({len(program)} bytes); "
            f"{_INSTALL_LIBSECCOMP}"
        )
    return _Built(program, tuple(skipped))


class _FdFile:
    """The file-like object ``SyscallFilter.export_bpf`` wants (it only calls ``fileno``)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _export_bpf(filt: object) -> bytes:
    fd = os.memfd_create("pi-sandbox-seccomp-export", os.MFD_CLOEXEC)
    try:
        filt.export_bpf(_FdFile(fd))  # type: ignore[attr-defined]
        os.lseek(fd, 0, os.SEEK_SET)
        chunks: list[bytes] = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
