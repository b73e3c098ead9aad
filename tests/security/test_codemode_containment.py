"""A codemode script is contained (issue 19): it cannot write or read the workspace,
reach the network, run forever or flood the output, whatever it tries.

Each attack runs as a real ``pi --sandbox`` session (scripted model, real bwrap) and
the sentinel it goes for never appears; each has a control that runs the same script
with the same runner in this process, without the sandbox, and shows the attack
works there — so the test proves the sandbox, not a broken script.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from pi_sandbox.worker.codemode_runner import run_script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from pi_runs import pi_env, scripted_argv

pytestmark = pytest.mark.security

SENTINEL = "SENTINEL-codemode-5b1d"


def run_codemode(
    tmp_path: Path, *scripts: str, extra: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """One sandboxed run with one codemode call per script; their end events."""
    workspace = tmp_path / "ws"
    script = tmp_path / "script.yaml"
    turns = [{"tool_calls": [{"name": "codemode", "arguments": {"script": s}}]} for s in scripts]
    script.write_text(yaml.safe_dump([*turns, {"text": "done"}]))
    argv = scripted_argv(
        script, workspace, "--sandbox", "--tools", "+codemode", "--mode", "json", *extra
    )
    proc = subprocess.run(argv, env=pi_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    found = [
        e
        for e in events
        if e.get("type") == "tool_execution_end"
        and e["toolName"] == "codemode"
        and "parentToolCallId" not in e
    ]
    assert len(found) == len(scripts)
    return found


def text_of(event: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in event["result"]["content"])


class _NoHost:
    def call(self, op: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        raise AssertionError("the control scripts call no tools")


def run_unsandboxed(script: str) -> dict[str, Any]:
    """The control: the same runner, in this process, without any sandbox."""
    return run_script(_NoHost(), {"script": script}, threading.Event())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sentinel.txt").write_text(SENTINEL)
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_text(SENTINEL)
    return ws


def _file_attack(ws: Path, home: Path) -> str:
    return (
        "import os\n"
        "for path in [{!r}, {!r}, 'sentinel.txt']:\n"
        "    try:\n"
        "        print('read', open(path).read())\n"
        "    except Exception as exc:\n"
        "        print('read failed', type(exc).__name__)\n"
        "for path in [{!r}, 'pwned.txt']:\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "        print('wrote', path)\n"
        "    except Exception as exc:\n"
        "        print('write failed', type(exc).__name__)\n"
    ).format(str(ws / "sentinel.txt"), str(home / ".ssh" / "id_ed25519"), str(ws / "pwned.txt"))


def test_a_script_can_neither_read_nor_write_the_workspace_or_home(
    tmp_path, workspace, require_bwrap
):
    home = tmp_path / "home"
    (result,) = run_codemode(tmp_path, _file_attack(workspace, home))
    text = text_of(result)
    assert text.startswith("Script completed"), text
    assert SENTINEL not in text
    assert "wrote" not in text
    assert text.count("read failed") == 3 and text.count("write failed") == 2
    assert not (workspace / "pwned.txt").exists()
    assert (workspace / "sentinel.txt").read_text() == SENTINEL


def test_control_the_file_attack_works_without_the_sandbox(tmp_path, workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    outcome = run_unsandboxed(_file_attack(workspace, tmp_path / "home"))
    assert SENTINEL in outcome["output"]
    assert (workspace / "pwned.txt").read_text() == "pwned"


@pytest.fixture
def listener():
    """A TCP server on loopback that counts the connections it accepts."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=5)
    server.close()


def _socket_attack(port: int) -> str:
    return (
        "import socket\n"
        "for host in ['127.0.0.1', 'example.com']:\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=3).close()\n"
        "        print('connected', host)\n"
        "    except Exception as exc:\n"
        "        print('refused', host, type(exc).__name__)\n"
    )


def test_a_script_cannot_open_a_socket(tmp_path, workspace, listener, require_bwrap):
    port, accepted = listener
    (result,) = run_codemode(tmp_path, _socket_attack(port))
    text = text_of(result)
    assert "connected" not in text, text
    assert text.count("refused") == 2
    assert accepted == []


def test_control_the_socket_attack_works_without_the_sandbox(listener):
    port, accepted = listener
    outcome = run_unsandboxed(_socket_attack(port))
    assert "connected 127.0.0.1" in outcome["output"]
    assert accepted == [1]


def test_a_script_that_runs_forever_is_stopped_at_its_deadline(tmp_path, workspace, require_bwrap):
    (result,) = run_codemode(tmp_path, '# @options: {"timeout_s": 3}\nwhile True:\n    pass\n')
    assert result["isError"]
    assert "ran longer than 3 s and was stopped" in text_of(result)


def test_a_script_printing_gigabytes_is_stopped_and_its_output_bounded(
    tmp_path, workspace, require_bwrap
):
    flood = "while True:\n    print('x' * 1_000_000)\n"
    # An `except Exception` in the script does not keep the flood going.
    stubborn = (
        "while True:\n"
        "    try:\n"
        "        print('y' * 1_000_000)\n"
        "    except Exception:\n"
        "        pass\n"
    )
    results = run_codemode(tmp_path, flood, stubborn)
    for result in results:
        text = text_of(result)
        assert result["isError"]
        assert "OutputLimitExceeded" in text
        assert len(text) < 200_000
        assert "chars truncated" in text


def test_a_script_allocating_too_much_memory_fails_and_the_session_goes_on(
    tmp_path, workspace, require_bwrap
):
    hog = "data = bytearray(64 * 1024 ** 3)\nprint('allocated')\n"
    results = run_codemode(tmp_path, hog, "print('next script runs')")
    assert results[0]["isError"]
    assert "allocated" not in text_of(results[0]).split("\n", 1)[1]
    assert "MemoryError" in text_of(results[0]) or "memory" in text_of(results[0])
    assert "next script runs" in text_of(results[1])
