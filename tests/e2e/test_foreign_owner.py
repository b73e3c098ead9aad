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


def run_pi(base: Path, workspace: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    script = base / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    env = {**os.environ, "HOME": str(base / "home"), "PI_CODING_AGENT_DIR": str(base / "agent")}
    argv = [sys.executable, "-m", "pi_sandbox.cli", "--sandbox", "-p", "--model", "scripted"]
    argv += ["--script", str(script), "--no-session", "-C", str(workspace), *flags, "go"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def interpreter_reachable() -> bool:
    import pi_sandbox
    from pi_sandbox.sandbox.identity import SandboxIdentity, unreachable_sources

    paths = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)]
    paths.append(str(Path(pi_sandbox.__file__).parent))
    return not unreachable_sources(paths, SandboxIdentity(UID, GID))


def test_a_source_the_owner_cannot_reach_is_refused_in_one_line_naming_owner_and_fix(
    base: Path,
):
    workspace = owned_workspace(base)
    private = Path(tempfile.mkdtemp(prefix="pi-foreign-private-", dir="/tmp"))  # 0700, root's
    try:
        extension = private / "guard.py"
        extension.write_text("def extension(pi):\n    pass\n")
        result = run_pi(base, workspace, "-e", str(extension))
    finally:
        shutil.rmtree(private)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"owned by uid {UID}" in lines[0] and "cannot reach" in lines[0]
    assert "setpriv --reuid=4242" in lines[0] and "chown" in lines[0]
    assert "handshake failed" not in result.stderr
    assert sorted(os.listdir(workspace)) == ["app.py"]


@pytest.mark.skipif(
    not interpreter_reachable(),
    reason="this Python or pi lies where uid 4242 cannot reach it (e.g. under /root): "
    "such runs are refused (the test above)",
)
def test_a_sandboxed_run_reads_writes_and_edits_as_the_workspace_owner(base: Path):
    workspace = owned_workspace(base)
    result = run_pi(base, workspace)
    assert result.returncode == 0, result.stderr
    assert "handshake failed" not in result.stderr
    assert (workspace / "app.py").read_text() == "print('bye')\n"
    for name in ("app.py", "NOTES.md"):
        info = (workspace / name).stat()
        assert (info.st_uid, info.st_gid) == (UID, GID), name
    assert f"{UID}" in result.stderr  # `id -u` inside the sandbox
