"""Path rules see through aliases (issue 13 §5), through the real tool pipeline.

The attack: a sentinel is planted in ``server/.env`` and a managed policy denies
``server/.env`` to every tool. The scripted model then asks for it under other
names: ``/proc/self/cwd/…``, ``/proc/thread-self/…``, ``/proc/self/root/…``,
double slashes, ``..``, a symlinked parent directory, a symlink, a hard link, a
bind mount, ``/dev/fd/N`` and ``/proc/$$/…`` in bash. Each spelling is its own
``pi -p --mode json`` run (``--model scripted``, with a session file): the
sentinel must appear nowhere — stdout (the JSON events), stderr, the session
files. The control runs the same spellings without the deny rule and shows that
the sentinel does come back, so the assertions are able to fail.

The policy has no ``deny_read``: the gate is the layer under test (the sandbox's
``deny_read`` is a separate boundary). The runs use ``--sandbox`` so that every
tool's working directory is the workspace, while ``pi`` itself starts elsewhere
(``-C ws``): the supervisor's ``/proc/self/cwd`` is not the tool's — the gap the
issue's example went through. The bind-mount run is unsandboxed (the alias lies
outside the workspace, where the sandbox would not show it anyway).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from pi_runs import pi_env, run_pi, scripted_argv

pytestmark = pytest.mark.security

SENTINEL = "SENTINEL-5e0c1d-alias-do-not-leak"

DENY_ENV = """\
version: 1
tool_call:
  rules:
    - id: no-server-env
      tool: "*"
      path: [server/.env]
      decision: deny
      reason: The server's secrets are off limits.
"""


class Workspace:
    """A workspace with the sentinel, aliases of it, and a managed policy dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        (self.ws / "server").mkdir(parents=True)
        self.secret = self.ws / "server" / ".env"
        self.secret.write_text(f"DB_PASSWORD={SENTINEL}\n")
        (self.ws / "srv").symlink_to("server")  # a symlinked parent directory
        (self.ws / "settings.txt").symlink_to(self.secret)  # a symlink to the file
        os.link(self.secret, self.ws / "notes.txt")  # a hard link
        (self.root / "home").mkdir()
        self.agent = root / "agent"
        self.agent.mkdir()
        self.managed = root / "managed.d"
        self.managed.mkdir()

    def deny(self) -> None:
        (self.managed / "50-env.yaml").write_text(DENY_ENV)

    def run(self, *calls: dict[str, Any], sandbox: bool = True) -> str:
        """One ``pi -p --mode json`` run whose model makes ``calls`` in one turn;
        returns everything it wrote (stdout, stderr, session files).

        ``pi`` starts in another directory with ``-C ws``, as a user would: its own
        ``/proc/self/cwd`` is not the workspace, the tools' is (under ``--sandbox``
        every tool runs in the workspace)."""
        shutil.rmtree(self.agent / "sessions", ignore_errors=True)  # this run's files only
        script = self.root / "script.yaml"
        turn = {"tool_calls": [{"id": f"c{i}", **call} for i, call in enumerate(calls)]}
        script.write_text(yaml.safe_dump([turn, {"text": "done"}]))
        proc = run_pi(
            scripted_argv(
                script,
                self.ws,
                "--sandbox" if sandbox else "--no-sandbox",
                "--tools",
                "read,bash",
                "-p",
                "--mode",
                "json",
            ),
            env=pi_env(
                self.root, agent=self.agent, extra={"PI_MANAGED_POLICY_DIR": str(self.managed)}
            ),
            cwd=self.root,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr
        sessions = [
            path.read_text(errors="replace")
            for path in (self.agent / "sessions").rglob("*")
            if path.is_file()
        ]
        assert sessions, "the run wrote no session file"
        return "\n".join([proc.stdout, proc.stderr, *sessions])


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    from pi_sandbox.policies import MANAGED_POLICY_DIR

    if any(MANAGED_POLICY_DIR.glob("*.yaml")):
        pytest.skip(f"this host has managed policy files in {MANAGED_POLICY_DIR}")
    return Workspace(Path(os.path.realpath(tmp_path)))


def read(path: str) -> dict[str, Any]:
    return {"name": "read", "arguments": {"path": path}}


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def spellings(ws: Path) -> dict[str, dict[str, Any]]:
    """Each alias of ``server/.env`` as one tool call (the issue's example first)."""
    return {
        "read /proc/self/cwd": read("/proc/self/cwd/server/.env"),
        "read /proc/thread-self/cwd": read("/proc/thread-self/cwd/server/.env"),
        "read /proc/self/root": read(f"/proc/self/root{ws}/server/.env"),
        "read double slashes": read(f"{ws}//server///.env"),
        "read dot-dot": read("srv/../server/./.env"),
        "read symlinked parent": read("srv/.env"),
        "read symlink": read("settings.txt"),
        "read hard link": read("notes.txt"),
        "bash cat /proc/self/cwd": bash("cat /proc/self/cwd/server/.env"),
        "bash cat /proc/thread-self/root": bash(f"cat /proc/thread-self/root{ws}/server/.env"),
        "bash cat symlinked parent": bash("cat srv/.env"),
        "bash cat /proc/$$": bash("cat /proc/$$/cwd/server/.env"),
        "bash cat /dev/fd/3": bash("cat /dev/fd/3 3<server/.env"),
        "bash cat /dev/stdin": bash("cat /dev/stdin <server/.env"),
    }


@pytest.mark.parametrize(
    "name",
    list(spellings(Path("/ws"))),
)
def test_no_alias_of_a_denied_path_returns_the_sentinel(workspace, name):
    workspace.deny()
    output = workspace.run(spellings(workspace.ws)[name])
    assert SENTINEL not in output, name
    # Blocked by the rule, or (an alias the gate cannot see through) by `unparseable`.
    assert any(
        why in output
        for why in ("secrets are off limits", "cannot be resolved safely", "run-time expansion")
    ), output


def test_control_without_the_deny_rule_every_alias_returns_the_sentinel(workspace):
    for name, call in spellings(workspace.ws).items():
        output = workspace.run(call)
        assert SENTINEL in output, f"control: {name} does not reach the file"


def test_an_unresolvable_alias_says_so_and_gets_the_unparseable_decision(workspace):
    workspace.deny()
    output = workspace.run(read("/dev/fd/3"))
    assert "path cannot be resolved safely" in output
    assert "unparseable: ask decides" in output


# Redirections of the secret (the gate once dropped redirection targets).
REDIRECTIONS = [
    "cat < server/.env",
    "exec 3< server/.env; cat <&3",
    "cat 0< server/.env",
    "while read l; do echo $l; done < server/.env",
    "grep PASSWORD < server/.env",
    "< server/.env cat",
    "cat < srv/.env",
]


def test_no_redirection_of_a_denied_file_returns_the_sentinel(workspace):
    workspace.deny()
    output = workspace.run(*[bash(command) for command in REDIRECTIONS])
    assert SENTINEL not in output
    assert "secrets are off limits" in output


def test_control_without_the_deny_rule_every_redirection_returns_the_sentinel(workspace):
    output = workspace.run(*[bash(f"echo OUT-{i}-; {c}") for i, c in enumerate(REDIRECTIONS)])
    for i, command in enumerate(REDIRECTIONS):
        # The call's output (a JSON string: "\\n" escaped) is its marker, then the secret.
        assert f"OUT-{i}-\\nDB_PASSWORD={SENTINEL}" in output, (command, output[:4000])


def _can_bind_mount(tmp: Path) -> bool:
    source, target = tmp / "probe-src", tmp / "probe-dst"
    source.mkdir()
    target.mkdir()
    done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if done.returncode != 0:
        return False
    subprocess.run(["umount", str(target)], check=True)
    return True


def test_a_bind_mount_of_the_secret_directory_is_denied_and_is_a_real_alias(workspace):
    if os.geteuid() != 0 or not _can_bind_mount(workspace.root):
        pytest.skip("needs root and mount --bind")
    alias = workspace.root / "alias"
    alias.mkdir()
    subprocess.run(["mount", "--bind", str(workspace.ws / "server"), str(alias)], check=True)
    try:
        # Control first: without the rule the bind mount reaches the sentinel.
        assert SENTINEL in workspace.run(read(f"{alias}/.env"), sandbox=False)
        workspace.deny()
        output = workspace.run(read(f"{alias}/.env"), bash(f"cat {alias}/.env"), sandbox=False)
        assert SENTINEL not in output
    finally:
        subprocess.run(["umount", str(alias)], check=True)


# -- the sandbox's deny_read and hard links -------------------------------------------------------


@pytest.mark.usefixtures("require_bwrap")
def test_a_deny_read_file_with_a_second_hard_link_is_refused_and_the_link_is_a_real_escape(
    tmp_path, require_bwrap
):
    from pi_sandbox.errors import SandboxError
    from pi_sandbox.sandbox import build_bwrap_argv, worker_profile
    from pi_sandbox.sandbox.seccomp_filter import seccomp_memfd
    from pi_sandbox.sandbox.settings import SandboxSettings

    root = Path(os.path.realpath(tmp_path))
    ws, home = root / "ws", root / "home"
    (ws / "server").mkdir(parents=True)
    (home / ".pi" / "agent").mkdir(parents=True)
    secret = ws / "server" / ".env"
    secret.write_text(SENTINEL)
    settings = SandboxSettings(deny_read=("server/.env",))

    def build():
        return worker_profile(
            "tool", workspace=ws, home=home, agent_dir=home / ".pi" / "agent", settings=settings
        )

    # Control: a profile built while the file had one name, then a second name.
    built = build()
    os.link(secret, ws / "notes.txt")
    fd = seccomp_memfd()
    try:
        argv = build_bwrap_argv(
            built, ["cat", str(ws / "notes.txt"), str(secret)], bwrap=require_bwrap, seccomp_fd=fd
        )
        done = subprocess.run(argv, pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert done.stdout.count(SENTINEL) == 1  # the mask hid .env, the hard link did not
    # The protection: with the second name present the profile is refused.
    with pytest.raises(SandboxError, match=r"deny_read: 'server/.env' has 2 hard links"):
        build()
