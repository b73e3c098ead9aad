"""An MCP server's arguments cannot hand it a file the sandbox hides (red-team
finding of 0.7: `args: ["~/.ssh/id_rsa"]` was bound read-only over the credential
mask)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox.program_profile import program_profile


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    home, workspace, agent = tmp_path / "home", tmp_path / "ws", tmp_path / "home" / "agent"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SSH-SENTINEL")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("AWS-SENTINEL")
    agent.mkdir(parents=True)
    (agent / "auth.json").write_text("{}")
    workspace.mkdir()
    (workspace / "server.py").write_text("print('hi')\n")
    return {"home": home, "workspace": workspace, "agent": agent}


def _profile(dirs: dict[str, Path], *args: str):
    return program_profile(
        program=sys.executable,
        args=args,
        workspace=dirs["workspace"],
        home=dirs["home"],
        agent_dir=dirs["agent"],
        env={},
        filesystem="none",
        cwd=None,
    )


@pytest.mark.parametrize(
    "secret",
    [".ssh/id_rsa", ".aws/credentials", "agent/auth.json"],
)
def test_an_argument_naming_a_hidden_credential_is_refused(dirs, secret):
    with pytest.raises(SandboxError, match="hides"):
        _profile(dirs, str(dirs["home"] / secret))


def test_an_argument_naming_a_system_secret_is_refused(dirs):
    if not Path("/etc/shadow").is_file():
        pytest.skip("no /etc/shadow here")
    with pytest.raises(SandboxError, match="hides"):
        _profile(dirs, "/etc/shadow")


def test_control_the_servers_own_script_is_bound(dirs):
    profile = _profile(dirs, str(dirs["workspace"] / "server.py"))
    assert str((dirs["workspace"] / "server.py").resolve()) in profile.ro_binds
