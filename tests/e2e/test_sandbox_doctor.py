"""``pi sandbox doctor`` tells the truth, including on a machine without user namespaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NO_USERNS = (
    "#!/bin/sh\n"
    'echo "bwrap: No permissions to create new namespace, likely because the kernel '
    'does not allow non-privileged user namespaces." >&2\n'
    "exit 1\n"
)


def pi(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "pi_sandbox.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture
def no_userns_bwrap(tmp_path: Path) -> str:
    """A bwrap that fails the way bwrap fails when user namespaces are off."""
    fake = tmp_path / "bwrap"
    fake.write_text(NO_USERNS)
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.usefixtures("require_bwrap")
def test_doctor_reports_a_working_sandbox_with_every_check():
    result = pi("sandbox", "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("bwrap", "user namespaces", "seccomp", "cgroups", "worker sandbox"):
        assert name in result.stdout
    assert "CapEff 0000000000000000" in result.stdout
    assert "Seccomp 2" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(("verdict: ok:", "verdict: degraded:"))


@pytest.mark.usefixtures("require_bwrap")
def test_doctor_json_is_one_object_with_a_verdict():
    result = pi("sandbox", "doctor", "--json")
    report = json.loads(result.stdout)
    assert report["verdict"] in ("ok", "degraded")
    names = {check["name"]: check for check in report["checks"]}
    assert names["seccomp"]["ok"] is True
    assert names["worker sandbox"]["ok"] is True


def test_doctor_says_unavailable_and_exits_3_without_user_namespaces(no_userns_bwrap):
    result = pi("sandbox", "doctor", env={"PI_SANDBOX_BWRAP": no_userns_bwrap})
    assert result.returncode == 3
    assert "FAIL user namespaces" in result.stdout
    assert "kernel.unprivileged_userns_clone" in result.stdout  # what to check
    # not attempted: it cannot work
    assert not any(row[5:].startswith("worker sandbox") for row in result.stdout.splitlines())
    assert result.stdout.strip().splitlines()[-1].startswith("verdict: unavailable:")
    report = json.loads(
        pi("sandbox", "doctor", "--json", env={"PI_SANDBOX_BWRAP": no_userns_bwrap}).stdout
    )
    assert report["verdict"] == "unavailable"


def test_a_sandboxed_run_fails_closed_where_doctor_says_unavailable(no_userns_bwrap, tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- text: hi\n")
    result = pi(
        "--sandbox",
        "--model",
        "scripted",
        "--script",
        str(script),
        "--no-session",
        "-C",
        str(tmp_path),
        "hi",
        env={"PI_SANDBOX_BWRAP": no_userns_bwrap},
    )
    assert result.returncode == 3
    assert "No permissions to create new namespace" in result.stderr


def test_a_non_executable_bwrap_override_is_named(tmp_path):
    result = pi("sandbox", "doctor", env={"PI_SANDBOX_BWRAP": str(tmp_path / "nope")})
    assert result.returncode == 3
    assert "PI_SANDBOX_BWRAP=" in result.stdout


def test_sandbox_subcommand_usage_errors_exit_2():
    assert pi("sandbox").returncode == 2
    assert pi("sandbox", "cure").returncode == 2


@pytest.fixture
def weak_bwrap(tmp_path: Path, require_bwrap: str) -> str:
    """A bwrap that quietly leaves out the PID and network namespaces."""
    wrapper = tmp_path / "weak-bwrap"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = [a for a in sys.argv[1:]]\n"
        "args = ['--unshare-ipc' if a == '--unshare-all' else a for a in args]\n"
        f"os.execv({require_bwrap!r}, [{require_bwrap!r}, *args])\n"
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def test_doctor_does_not_call_a_bwrap_without_pid_and_network_namespaces_ok(weak_bwrap):
    result = pi("sandbox", "doctor", env={"PI_SANDBOX_BWRAP": weak_bwrap})
    assert result.returncode == 3, result.stdout
    line = next(row for row in result.stdout.splitlines() if row[5:].startswith("worker sandbox"))
    assert line.startswith("FAIL")
    assert "not a private PID namespace" in line
    assert "not a private network" in line
