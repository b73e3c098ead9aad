"""``read_only``/``writable_roots`` bind only regular files and directories, and
``sandbox.sockets`` is the one explicit way to bind a socket (issue 13 §5).

Sockets, FIFOs and symlinks to them are made under ``tmp_path``; the device node
is the host's ``/dev/null``. Policy files are loaded for real; profiles are built
with `worker_profile` (no bwrap: tests/security/test_socket_binds.py runs it).
"""

from __future__ import annotations

import os
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_sandbox.errors import PolicyFileError, SandboxError
from pi_sandbox.policies import PolicyLocations, load_effective_policy, load_policy_file
from pi_sandbox.sandbox import build_bwrap_argv, worker_profile
from pi_sandbox.sandbox.settings import SandboxSettings


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Path(os.path.realpath(tmp_path))


@pytest.fixture
def sock(root: Path) -> Iterator[Path]:
    path = root / "run" / "daemon.sock"
    path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    yield path
    server.close()


def policy(root: Path, text: str, name: str = "p.yaml") -> Path:
    path = root / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load_error(path: Path) -> str:
    with pytest.raises(PolicyFileError) as info:
        load_policy_file(path)
    return str(info.value)


# -- load errors naming the file and the key ---------------------------------------------------


def test_a_read_only_unix_socket_is_a_load_error_naming_the_file_and_key(root, sock):
    # The example: read_only: [/run/docker.sock].
    path = policy(root, f"version: 1\nsandbox:\n  filesystem:\n    read_only: [{sock}]\n")
    message = load_error(path)
    assert str(path) in message
    assert "sandbox.filesystem.read_only[0]" in message
    assert "is a Unix socket" in message
    assert "sandbox.sockets" in message


def test_a_read_only_symlink_to_a_socket_is_a_load_error(root, sock):
    link = root / "agent.sock"
    link.symlink_to(sock)
    path = policy(root, f"version: 1\nsandbox:\n  filesystem:\n    read_only: [{link}]\n")
    assert "is a Unix socket" in load_error(path)


def test_a_read_only_fifo_is_a_load_error(root):
    fifo = root / "pipe"
    os.mkfifo(fifo)
    path = policy(root, f"version: 1\nsandbox:\n  filesystem:\n    read_only: [{fifo}]\n")
    assert "is a FIFO" in load_error(path)


def test_a_read_only_device_node_is_a_load_error(root):
    path = policy(root, "version: 1\nsandbox:\n  filesystem:\n    read_only: [/dev/null]\n")
    assert "is a device node" in load_error(path)


def test_a_read_only_directory_holding_a_socket_is_a_load_error(root, sock):
    path = policy(root, f"version: 1\nsandbox:\n  filesystem:\n    read_only: [{sock.parent}]\n")
    message = load_error(path)
    assert f"contains a Unix socket, {sock}" in message


def test_a_writable_root_that_is_a_socket_is_a_load_error(root, sock):
    path = policy(root, f"version: 1\nsandbox:\n  filesystem:\n    writable_roots: [{sock}]\n")
    message = load_error(path)
    assert "sandbox.filesystem.writable_roots[0]" in message and "Unix socket" in message


def test_control_regular_files_and_directories_load(root):
    (root / "tools").mkdir()
    (root / "tools" / "bin").write_text("x")
    path = policy(
        root,
        f"version: 1\nsandbox:\n  filesystem:\n    read_only: [{root / 'tools'}, "
        f"{root / 'tools' / 'bin'}, /does/not/exist]\n",
    )
    load_policy_file(path)


def test_a_sockets_entry_that_is_not_a_socket_is_a_load_error(root):
    (root / "file").write_text("x")
    path = policy(root, f"version: 1\nsandbox:\n  sockets: [{root / 'file'}]\n")
    message = load_error(path)
    assert "sandbox.sockets[0]" in message and "is not a Unix socket" in message


def test_a_relative_sockets_entry_is_a_load_error(root):
    path = policy(root, "version: 1\nsandbox:\n  sockets: [run/x.sock]\n")
    assert "must be absolute or start with ~/" in load_error(path)


# -- tiers --------------------------------------------------------------------------------------


def test_only_managed_and_user_files_may_bind_sockets(root, sock):
    ws = root / "ws"
    (ws / ".pi").mkdir(parents=True)
    user = policy(root, f"version: 1\nsandbox:\n  sockets: [{sock}]\n", "user.yaml")
    project = ws / ".pi" / "policy.yaml"
    project.write_text("version: 1\nsandbox:\n  sockets: [/run/other.sock]\n")
    loaded = load_effective_policy(
        PolicyLocations(policy_files=(), managed_dirs=(), user_file=user, project_file=project)
    )
    assert loaded.sandbox.sockets == (str(sock),)
    assert any("sandbox.sockets" in line and "ignored" in line for line in loaded.diagnostics)
    assert ("sandbox.sockets", str(sock), "user") in {
        (o.key, o.value, o.tier) for o in loaded.provenance
    }


# -- the profile, when a worker starts ----------------------------------------------------------


@pytest.fixture
def layout(root: Path) -> dict[str, Path]:
    home, ws = root / "home", root / "ws"
    agent = home / ".pi" / "agent"
    for directory in (ws, agent):
        directory.mkdir(parents=True)
    return {"home": home, "ws": ws, "agent": agent}


def profile(layout, role="tool", **settings):
    return worker_profile(
        role,
        workspace=layout["ws"],
        home=layout["home"],
        agent_dir=layout["agent"],
        settings=SandboxSettings(**settings),
    )


def test_a_relative_read_only_socket_is_refused_when_the_worker_starts(layout):
    # Relative entries are known only with the workspace: the profile checks them.
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(layout["ws"] / "app.sock"))
    try:
        with pytest.raises(SandboxError, match=r"sandbox\.filesystem\.read_only: 'app.sock'"):
            profile(layout, read_only=("app.sock",))
    finally:
        server.close()


def test_a_socket_grant_is_bound_read_only_after_the_masks(layout, sock):
    built = profile(layout, sockets=(str(sock),))
    assert built.sockets == ((str(sock), str(sock)),)
    argv = build_bwrap_argv(built, ["true"], bwrap="bwrap", seccomp_fd=3)
    at = argv.index(str(sock))
    assert argv[at - 1 : at + 2] == ["--ro-bind", str(sock), str(sock)]
    root_ro = next(i for i in range(len(argv)) if argv[i : i + 2] == ["--remount-ro", "/"])
    assert at < root_ro  # bwrap creates its mount point in the root before that


def test_a_sandboxed_trust_extension_never_gets_a_socket(layout, sock):
    assert profile(layout, "sandboxed-extension", sockets=(str(sock),)).sockets == ()


def test_a_missing_socket_is_skipped(layout, root):
    assert profile(layout, sockets=(str(root / "no-daemon.sock"),)).sockets == ()


def test_a_socket_grant_inside_a_deny_read_path_is_refused(layout, sock):
    with pytest.raises(SandboxError, match="inside a deny_read path"):
        profile(layout, sockets=(str(sock),), deny_read=(str(sock.parent),))


def test_a_socket_grant_that_is_a_directory_is_refused_at_start(layout, root):
    with pytest.raises(SandboxError, match="is a directory, not a Unix socket"):
        profile(layout, sockets=(str(root),))
