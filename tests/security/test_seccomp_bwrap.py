"""The seccomp filter under real bubblewrap (DESIGN §6, issue 3).

``tests/fixtures/seccomp_probe.py`` makes each denied system call with ctypes
``syscall()`` inside ``bwrap --seccomp FD`` and reports the errno of each. Under
the filter every one must fail with ``EPERM``, including ``ioctl(TIOCSTI)`` with
high bits set in the request, and a system call through another architecture's
table must kill the process. A control run without ``--seccomp`` shows that the
same calls don't fail with ``EPERM`` on their own (TIOCSTI reaches the tty layer,
``personality`` answers), so the assertions are able to fail. An ordinary
workload (Python starting bash with a pipe, ``git --version``) still runs.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd

pytestmark = [
    pytest.mark.security,
    pytest.mark.usefixtures("require_bwrap"),
]

PROBE = Path(__file__).parent.parent / "fixtures" / "seccomp_probe.py"

BWRAP_FLAGS = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
)

DENIED_CHECKS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "mount",
    "umount2",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "personality",
    "setns",
    "chroot",
    "name_to_handle_at",
    "open_tree",
    "fsopen",
    "syslog",
    "ioctl_tiocsti",
    "ioctl_tiocsti_hi",
    "ioctl_tioclinux",
)
"""Probe checks the filter must answer with EPERM."""

ALLOWED_CHECKS = ("getpid", "ioctl_fionread")
"""Probe checks the filter must let through (it is a deny-list, not a lockdown)."""

CONTROL_CHECKS = (
    "personality",
    "ioctl_tiocsti",
    "ioctl_tiocsti_hi",
    "process_vm_writev",
    *ALLOWED_CHECKS,
)
"""Probe checks that don't fail with EPERM without the filter, on any kernel we run on."""

BAD_ARCH_EXIT = 128 + signal.SIGSYS
"""bwrap's exit status when the sandboxed process dies of SIGSYS (KILL_PROCESS)."""

# Only a hang reaches it; generous for a saturated machine (issue 13 §7).
TIMEOUT_S = 180


@pytest.fixture
def seccomp_fd() -> Iterator[int]:
    fd = seccomp_memfd()
    try:
        yield fd
    finally:
        os.close(fd)


def _bwrap(
    bwrap: str, command: Sequence[str], *, seccomp_fd: int | None, stdin: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` under bwrap, with the filter when ``seccomp_fd`` is given."""
    argv = [bwrap, *BWRAP_FLAGS]
    pass_fds: tuple[int, ...] = ()
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
        pass_fds = (seccomp_fd,)
    argv += ["--", *command]
    return subprocess.run(
        argv,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        pass_fds=pass_fds,
        timeout=TIMEOUT_S,
        check=False,
    )


def _probe(
    bwrap: str, checks: Sequence[str], *, seccomp_fd: int | None
) -> tuple[subprocess.CompletedProcess[str], dict[str, int | None] | None]:
    """Run the probe with a fresh pty as stdin; return the process and its JSON, if any."""
    master, slave = os.openpty()
    try:
        proc = _bwrap(
            bwrap, [sys.executable, str(PROBE), *checks], seccomp_fd=seccomp_fd, stdin=slave
        )
    finally:
        os.close(slave)
        os.close(master)
    if proc.returncode == 77:
        pytest.skip(f"the probe has no syscall numbers here: {proc.stderr.strip()}")
    results = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None
    return proc, results


def _names(results: dict[str, int | None]) -> dict[str, str]:
    return {
        k: "ok" if v == 0 else (errno.errorcode.get(v, v) if v else v) for k, v in results.items()
    }


def test_probe_syscall_numbers_match_libseccomp():
    """The probe's hard-coded numbers are the ones the filter resolves."""
    pyseccomp = pytest.importorskip("pyseccomp")
    sys.path.insert(0, str(PROBE.parent))
    try:
        import seccomp_probe
    finally:
        sys.path.remove(str(PROBE.parent))
    arches = (pyseccomp.Arch.X86_64, pyseccomp.Arch.AARCH64)
    for name, numbers in seccomp_probe.NUMBERS.items():
        for arch, number in zip(arches, numbers, strict=True):
            assert pyseccomp.resolve_syscall(arch, name) == number, (name, arch)


def test_denied_syscalls_fail_with_eperm(require_bwrap: str, seccomp_fd: int):
    proc, results = _probe(require_bwrap, DENIED_CHECKS + ALLOWED_CHECKS, seccomp_fd=seccomp_fd)
    assert results is not None, (proc.returncode, proc.stderr)
    wrong = {
        name: value
        for name, value in _names(results).items()
        if name in DENIED_CHECKS and value != "EPERM"
    }
    assert not wrong, f"not denied with EPERM: {wrong}\n{proc.stderr}"
    assert {name: results[name] for name in ALLOWED_CHECKS} == dict.fromkeys(ALLOWED_CHECKS, 0), (
        _names(results),
        proc.stderr,
    )


def test_control_without_filter_is_not_eperm(require_bwrap: str):
    """Without ``--seccomp`` the same calls reach the kernel: the assertions above can fail."""
    proc, results = _probe(require_bwrap, CONTROL_CHECKS, seccomp_fd=None)
    assert results is not None, (proc.returncode, proc.stderr)
    for name in CONTROL_CHECKS:
        assert results[name] is not None, f"{name} could not be attempted: {proc.stderr}"
        assert results[name] != errno.EPERM, f"{name} failed with EPERM without the filter"


@pytest.mark.parametrize("check", ["x32_getpid", "int80_getpid"])
def test_foreign_architecture_syscall_kills_the_process(
    require_bwrap: str, seccomp_fd: int, check: str
):
    """x86_64 only: a syscall through the x32 or i386 (``int 0x80``) table is killed."""
    if platform.machine() != "x86_64":
        pytest.skip("foreign-architecture checks are written for x86_64")
    control, results = _probe(require_bwrap, [check], seccomp_fd=None)
    if results is None or results[check] is None:
        # int 0x80 without IA32 emulation dies of SIGSEGV; no executable page, etc.
        pytest.skip(
            f"{check} cannot run here without the filter: {control.returncode} {control.stderr}"
        )

    proc, results = _probe(require_bwrap, [check], seccomp_fd=seccomp_fd)
    assert results is None, f"{check} returned {results} under the filter"
    assert proc.returncode == BAD_ARCH_EXIT, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1] == f"probe: {check}", proc.stderr


def test_ordinary_workload_runs_under_the_filter(require_bwrap: str, seccomp_fd: int):
    script = (
        "import subprocess; "
        "print(subprocess.run(['bash', '-c', 'echo hi | cat'], check=True, "
        "capture_output=True, text=True).stdout, end='')"
    )
    proc = _bwrap(require_bwrap, [sys.executable, "-c", script], seccomp_fd=seccomp_fd)
    assert (proc.returncode, proc.stdout) == (0, "hi\n"), proc.stderr


def test_git_runs_under_the_filter(require_bwrap: str, seccomp_fd: int):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    proc = _bwrap(require_bwrap, [git, "--version"], seccomp_fd=seccomp_fd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("git version"), proc.stdout
