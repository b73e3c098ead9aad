"""The spawn path workers and MCP servers share (`sandboxed_spawn`): descriptors reach
the child exactly where asked, also when the supervisor started with 0–2 closed; a
failed spawn leaks nothing; the output log is capped, marked and reported once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from pi_sandbox.supervisor.workers.sandboxed_spawn import (
    drain_into_capped_log,
    log_tail,
    spawn_in_sandbox,
)

# Run in a fresh interpreter whose stdin is closed, so that the socket it makes next
# is descriptor 0: the child's fd 0 action (/dev/null) would overwrite it before it is
# moved to fd 3, unless the spawn moves it out of the way first.
CLOSED_STDIN_PROBE = textwrap.dedent(
    """
    import os, socket, sys
    from pi_sandbox.supervisor.workers import sandboxed_spawn
    if sys.argv[1] == "control":  # the relocation switched off
        class NoMove:
            F_DUPFD_CLOEXEC = sandboxed_spawn.fcntl.F_DUPFD_CLOEXEC
            @staticmethod
            def fcntl(fd, cmd, arg):
                return fd
        sandboxed_spawn.fcntl = NoMove
    os.close(0)
    ours, theirs = socket.socketpair()
    assert theirs.fileno() == 0 or ours.fileno() == 0, (ours.fileno(), theirs.fileno())
    if ours.fileno() == 0:
        ours, theirs = theirs, ours
    spawned = sandboxed_spawn.spawn_in_sandbox(
        [sys.executable, "-c", "import os; os.write(3, b'through fd 3')"],
        dict(os.environ),
        stdio=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
        passed={3: theirs.fileno()},
        ours=[],
        sandbox=None, bwrap=None, userns=None, cgroups=None,
    )
    os.waitpid(spawned.pid, 0)
    ours.settimeout(30)
    try:
        print(ours.recv(100).decode() or "nothing")
    except OSError as exc:
        print(f"nothing ({exc})")
    """
)


def _probe(mode: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", CLOSED_STDIN_PROBE, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_passed_descriptor_that_is_0_reaches_the_child_on_its_target():
    assert _probe("relocated") == "through fd 3"


def test_control_without_moving_it_the_stdin_action_overwrites_it():
    assert _probe("control") != "through fd 3"


def _open_fds() -> dict[int, str]:
    """This process's descriptors and what they are, without the listing's own."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory listing's descriptor, closed by now
    return {fd: what for fd, what in found.items() if not what.endswith("/fd")}


def test_a_program_that_cannot_start_raises_and_leaks_no_descriptor(tmp_path):
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    before = _open_fds()
    with pytest.raises(OSError):
        spawn_in_sandbox(
            [str(tmp_path / "missing-program")],
            {},
            stdio=[(os.POSIX_SPAWN_DUP2, write_fd, 1)],
            passed={},
            ours=[write_fd],
            sandbox=None,
            bwrap=None,
            userns=None,
            cgroups=None,
        )
    # `ours` was closed, and nothing else was left open.
    del before[write_fd]
    assert _open_fds() == before
    os.close(read_fd)


def test_a_profile_without_bwrap_is_refused_before_anything_starts(tmp_path):
    from pi_sandbox.sandbox import worker_profile

    profile = worker_profile(
        "extension", workspace=tmp_path, home=tmp_path / "home", agent_dir=tmp_path / "agent"
    )
    write_fd = os.pipe2(os.O_CLOEXEC)[1]
    with pytest.raises(OSError, match="needs a bwrap binary"):
        spawn_in_sandbox(
            [sys.executable, "-c", "pass"],
            {},
            stdio=[],
            passed={},
            ours=[write_fd],
            sandbox=profile,
            bwrap=None,
            userns=None,
            cgroups=None,
        )
    with pytest.raises(OSError):
        os.fstat(write_fd)


def test_the_log_is_capped_marked_and_the_cap_reported_once(tmp_path):
    log = tmp_path / "logs" / "w.log"
    reports: list[str] = []

    async def main() -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)

        async def report() -> None:
            reports.append("over")

        async def write() -> None:
            with open(write_fd, "wb", buffering=0) as pipe:
                for _ in range(50):
                    await trio.to_thread.run_sync(pipe.write, b"x" * 1000)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await drain_into_capped_log(read_fd, log, 10_000, on_truncated=report)

    trio.run(main)
    text = log.read_bytes()
    assert text.startswith(b"x" * 10_000)
    assert text[10_000:] == b"\n[pi: log truncated at 10000 bytes; further output discarded]\n"
    assert reports == ["over"]
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert log_tail(log, 30).endswith("further output discarded]\n")
    assert log_tail(tmp_path / "absent.log", 30) == ""


def test_a_respawned_writer_appends_and_the_cap_counts_what_the_file_holds(tmp_path):
    log = tmp_path / "w.log"
    log.write_bytes(b"y" * 90)

    async def main() -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.write(write_fd, b"z" * 50)
        os.close(write_fd)
        await drain_into_capped_log(read_fd, log, 100)

    trio.run(main)
    assert log.read_bytes().startswith(b"y" * 90 + b"z" * 10 + b"\n[pi: log truncated")


def test_a_log_path_that_is_a_symlink_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    log = tmp_path / "w.log"
    log.symlink_to(target)

    async def main() -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.close(write_fd)
        await drain_into_capped_log(read_fd, log, 100)

    with pytest.raises(OSError):
        trio.run(main)
    assert target.read_text() == "keep"
    assert Path(os.readlink(log)) == target
