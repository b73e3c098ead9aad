"""``pi --sandbox`` run by root over a checkout another uid owns — the CI container
case (issue 14 §3): the sandbox runs as the owner, or the run is refused in one
line naming the owner and the fix (exit 2); never "handshake failed"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.usefixtures("require_bwrap"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the case is root on another uid's checkout"),
]

UID = GID = 4242


@pytest.fixture
def base():
    """A directory uid 4242 can search (pytest's temporary base is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="pi-foreign-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def owned_workspace(base: Path) -> Path:
    workspace = base / "checkout"
    workspace.mkdir()
    (workspace / "app.py").write_text("print('hello')\n")
    for path in (workspace, workspace / "app.py"):
        os.chown(path, UID, GID)
    return workspace


SCRIPT = [
    {
        "tool_calls": [
            {"id": "r", "name": "read", "arguments": {"path": "app.py"}},
            {"id": "b", "name": "bash", "arguments": {"command": "id -u; echo notes > NOTES.md"}},
        ]
    },
    {
        "tool_calls": [
            {
                "id": "e",
                "name": "edit",
                "arguments": {"path": "app.py", "oldText": "hello", "newText": "bye"},
            }
        ]
    },
    {"text": "done"},
]


def run_pi(
    base: Path, workspace: Path, *flags: str, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    script = base / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    env = {**os.environ, "HOME": str(base / "home"), "PI_CODING_AGENT_DIR": str(base / "agent")}
    argv = [python, "-m", "pi_sandbox.cli", "--sandbox", "-p", "--model", "scripted"]
    argv += ["--script", str(script), "--no-session", "-C", str(workspace), *flags, "go"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def unreachable_for_owner(python: str) -> list[str]:
    """What of ``python``'s installation and of pi uid 4242 could not reach."""
    from pi_sandbox.sandbox.identity import SandboxIdentity, unreachable_sources

    code = (
        "import sys, os, pi_sandbox; print(sys.prefix); print(sys.base_prefix); "
        "print(os.path.realpath(sys.executable)); print(os.path.dirname(pi_sandbox.__file__))"
    )
    paths = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    return unreachable_sources(paths, SandboxIdentity(UID, GID))


@pytest.fixture(scope="module")
def owner_reachable_python():
    """A Python with pi that uid 4242 can reach: this one, or — where this one lives
    under a private /root — a virtual environment in /tmp made from the system's
    Python of the same version, holding a copy of this environment's packages."""
    if not unreachable_for_owner(sys.executable):
        yield sys.executable
        return
    system = next(
        (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), None
    )
    if system is None:
        pytest.skip(
            "this Python lies where uid 4242 cannot reach it, and there is no system Python"
        )
    version = subprocess.run(
        [system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"the system Python is {version}, not {sys.version_info[:2]}")
    base = Path(tempfile.mkdtemp(prefix="pi-foreign-python-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        venv = base / "venv"
        subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
        target = (
            venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        )
        shutil.copytree(site, target, symlinks=True, dirs_exist_ok=True)
        python = str(venv / "bin" / "python")
        blocked = unreachable_for_owner(python)
        if blocked:
            pytest.skip(f"uid 4242 cannot reach {blocked} even from a system Python")
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_source_the_owner_cannot_reach_is_refused_in_one_line_naming_owner_and_fix(
    base: Path, owner_reachable_python: str
):
    workspace = owned_workspace(base)
    private = Path(tempfile.mkdtemp(prefix="pi-foreign-private-", dir="/tmp"))  # 0700, root's
    try:
        extension = private / "guard.py"
        extension.write_text("def extension(pi):\n    pass\n")
        result = run_pi(base, workspace, "-e", str(extension), python=owner_reachable_python)
    finally:
        shutil.rmtree(private)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"owned by uid {UID}" in lines[0] and f"cannot reach {private}" in lines[0]
    assert "setpriv --reuid=4242" in lines[0] and "chown" in lines[0]
    assert "handshake failed" not in result.stderr
    assert sorted(os.listdir(workspace)) == ["app.py"]


def test_a_sandboxed_run_reads_writes_and_edits_as_the_workspace_owner(
    base: Path, owner_reachable_python: str
):
    workspace = owned_workspace(base)
    result = run_pi(base, workspace, python=owner_reachable_python)
    assert result.returncode == 0, result.stderr
    assert "handshake failed" not in result.stderr
    assert (workspace / "app.py").read_text() == "print('bye')\n"
    for name in ("app.py", "NOTES.md"):
        info = (workspace / name).stat()
        assert (info.st_uid, info.st_gid) == (UID, GID), name
    assert f"{UID}" in result.stderr  # `id -u` inside the sandbox


def test_a_python_installation_the_owner_cannot_reach_is_refused_before_any_worker_starts(
    base: Path,
):
    blocked = unreachable_for_owner(sys.executable)
    if not blocked:
        pytest.skip("this Python is reachable by uid 4242")
    workspace = owned_workspace(base)
    result = run_pi(base, workspace)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"owned by uid {UID}" in result.stderr and f"cannot reach {blocked[0]}" in result.stderr
    assert sorted(os.listdir(workspace)) == ["app.py"]
