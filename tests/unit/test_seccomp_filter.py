"""`pi_sandbox.sandbox.seccomp_filter`: the BPF program, its cache, the memfd, failures."""

from __future__ import annotations

import builtins
import errno
import os
import platform
import struct
import subprocess
import sys
import textwrap
import time
import types

import pytest

from pi_sandbox.errors import SandboxUnavailableError
from pi_sandbox.sandbox import seccomp_filter
from pi_sandbox.sandbox.seccomp_filter import (
    DENIED_SYSCALLS,
    seccomp_memfd,
    seccomp_program,
    seccomp_status,
    skipped_syscalls,
)

BPF_RET_K = 0x06
BPF_JGE_K = 0x35
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_EPERM = 0x00050000 | errno.EPERM


def _instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]


@pytest.fixture
def fresh_cache():
    """Forget the cached program before and after the test."""
    seccomp_filter._build.cache_clear()
    yield
    seccomp_filter._build.cache_clear()


def test_program_is_bpf_instructions():
    program = seccomp_program()
    assert isinstance(program, bytes)
    assert program
    assert len(program) % 8 == 0


def test_program_returns_the_rule_actions():
    returns = {k for code, _, _, k in _instructions(seccomp_program()) if code == BPF_RET_K}
    assert {SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW, SECCOMP_RET_EPERM} <= returns


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 exists on x86_64 only")
def test_program_rejects_x32_syscall_numbers():
    assert any(
        code == BPF_JGE_K and k == 0x40000000 for code, _, _, k in _instructions(seccomp_program())
    )


def test_program_is_cached():
    first = seccomp_program()
    assert seccomp_program() is first
    calls = 1000
    # CPU time of this process: a preemption on a saturated machine would add
    # wall-clock time to the loop without the cache being any slower (issue 13 §7).
    start = time.process_time()
    for _ in range(calls):
        seccomp_program()
    per_call = (time.process_time() - start) / calls
    assert per_call < 50e-6, f"cached seccomp_program() took {per_call * 1e6:.1f} µs"


def test_skipped_syscalls_are_denied_names():
    skipped = skipped_syscalls()
    assert set(skipped) <= set(DENIED_SYSCALLS)
    assert "ptrace" not in skipped
    if platform.machine() == "x86_64":
        assert skipped == ("umount", "vm86", "vm86old")


def test_memfd_holds_the_program():
    fd = seccomp_memfd()
    try:
        assert not os.get_inheritable(fd)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
        data = b""
        while chunk := os.read(fd, 4096):
            data += chunk
        assert data == seccomp_program()
        with pytest.raises(OSError) as excinfo:
            os.pwrite(fd, b"\0" * 8, 0)
        assert excinfo.value.errno == errno.EPERM  # sealed
    finally:
        os.close(fd)


def test_each_memfd_is_new():
    first, second = seccomp_memfd(), seccomp_memfd()
    try:
        assert first != second
        assert os.read(second, 1 << 20) == seccomp_program()
    finally:
        os.close(first)
        os.close(second)


def test_status_is_none_when_available():
    assert seccomp_status() is None


def test_module_import_does_not_load_pyseccomp():
    code = "import sys, pi_sandbox.sandbox.seccomp_filter; sys.exit('pyseccomp' in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_pyseccomp_raises(monkeypatch, fresh_cache):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # `import pyseccomp` -> ImportError
    with pytest.raises(SandboxUnavailableError, match=r"pyseccomp.*pip install") as excinfo:
        seccomp_program()
    assert isinstance(excinfo.value.__cause__, ImportError)
    with pytest.raises(SandboxUnavailableError):
        seccomp_memfd()
    status = seccomp_status()
    assert status is not None
    assert "pyseccomp" in status


def test_missing_libseccomp_raises(monkeypatch, fresh_cache):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "pyseccomp":
            raise RuntimeError("Unable to find libseccomp")  # what pyseccomp raises
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pyseccomp", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(SandboxUnavailableError) as excinfo:
        seccomp_program()
    message = str(excinfo.value)
    assert "libseccomp.so.2" in message
    assert "Unable to find libseccomp" in message
    assert "apt install libseccomp2" in message


def test_build_failure_raises(monkeypatch, fresh_cache):
    def refuse(defaction):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    fake = types.ModuleType("pyseccomp")
    fake.SyscallFilter = refuse
    fake.ALLOW = 0x7FFF0000
    monkeypatch.setitem(sys.modules, "pyseccomp", fake)
    with pytest.raises(SandboxUnavailableError, match=r"could not build.*creating the filter"):
        seccomp_program()


def test_failure_is_not_cached(monkeypatch, fresh_cache):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)
    with pytest.raises(SandboxUnavailableError):
        seccomp_program()
    monkeypatch.undo()
    assert seccomp_program()


LOAD_AND_PROBE = textwrap.dedent(
    """
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    program = os.read(int(sys.argv[1]), 1 << 20)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    prog = Prog(len(program) // 8, program)
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit("prctl(PR_SET_SECCOMP) failed: " + os.strerror(ctypes.get_errno()))

    def call(nr, *args):
        ctypes.set_errno(0)
        args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
        return 0 if libc.syscall(ctypes.c_long(nr), *args) != -1 else ctypes.get_errno()

    fd = os.open("/dev/null", os.O_RDONLY)
    c = ctypes.c_char(b"#")
    nrs = {"x86_64": (135, 16, 39), "aarch64": (92, 29, 172)}[os.uname().machine]
    print(json.dumps({
        "personality": call(nrs[0], 0xFFFFFFFF),
        "tiocsti_hi": call(nrs[1], fd, 0x5412 | (1 << 32), ctypes.byref(c)),
        "tioclinux": call(nrs[1], fd, 0x541C, ctypes.byref(c)),
        "fionread": call(nrs[1], fd, 0x541B, ctypes.byref(ctypes.c_int())),
        "getpid": call(nrs[2]),
    }))
    """
)


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="syscall numbers for x86_64/aarch64"
)
def test_program_loads_and_denies_in_a_child():
    """The exported program is accepted by the kernel and denies as specified (no bwrap)."""
    import json

    fd = seccomp_memfd()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", LOAD_AND_PROBE, str(fd)],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "personality": errno.EPERM,
        "tiocsti_hi": errno.EPERM,
        "tioclinux": errno.EPERM,
        "fionread": errno.ENOTTY,  # reaches the driver: /dev/null is no tty
        "getpid": 0,
    }
