"""Running the real ``pi`` CLI with the scripted model, for end-to-end and security tests.

The pieces every such test repeats: the script (one ``bash`` call per turn), the
command line, the environment (a private HOME and agent directory), the run itself
and the JSON events it prints::

    script = bash_script(tmp_path / "script.yaml", ["ls -A", "echo x > made.txt"])
    proc = run_pi(scripted_argv(script, workspace, "--mode", "json"), env=pi_env(tmp_path))
    assert tool_texts(proc.stdout)[0] == ...

Security tests import it like `fake_openai` (``tests/e2e`` put on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "bash_script",
    "fake_provider_env",
    "json_events",
    "pi_env",
    "run_pi",
    "scripted_argv",
    "tool_texts",
]


def bash_script(path: Path, commands: Iterable[str]) -> Path:
    """Write to ``path`` a scripted-model script that makes one ``bash`` call per
    turn, one turn per command, then answers ``done``; returns ``path``."""
    turns = [{"tool_calls": [{"name": "bash", "arguments": {"command": c}}]} for c in commands]
    path.write_text(yaml.safe_dump([*turns, {"text": "done"}]))
    return path


def scripted_argv(script: Path, workspace: Path, *flags: str) -> list[str]:
    """``pi --model scripted --script SCRIPT -C WORKSPACE FLAGS… go`` as an argv
    list (this interpreter, ``-m pi_sandbox.cli``)."""
    return [
        sys.executable,
        "-m",
        "pi_sandbox.cli",
        "--model",
        "scripted",
        "--script",
        str(script),
        "-C",
        str(workspace),
        *flags,
        "go",
    ]


def pi_env(
    root: Path,
    *,
    home: Path | None = None,
    agent: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """This process's environment with ``extra`` over it, HOME at ``home`` (default
    ``root/home``, created) and ``PI_CODING_AGENT_DIR`` at ``agent`` (default
    ``root/agent``): a run that touches neither the user's home nor their pi."""
    home = home or root / "home"
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        **(extra or {}),
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(agent or root / "agent"),
    }


def fake_provider_env(root: Path) -> dict[str, str]:
    """This process's environment with HOME at ``root/home`` and ``PI_CODING_AGENT_DIR``
    at ``root/agent`` (neither created) and without the developer's ``OPENAI_API_KEY``:
    for runs against `fake_openai`, which needs no key, so none is sent."""
    env = {
        **os.environ,
        "HOME": str(root / "home"),
        "PI_CODING_AGENT_DIR": str(root / "agent"),
    }
    env.pop("OPENAI_API_KEY", None)
    return env


def run_pi(
    argv: list[str], *, env: Mapping[str, str], timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end (``timeout`` seconds at most) with text output captured."""
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def json_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON events of a ``--mode json`` run's stdout (lines that are objects)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def tool_texts(stdout: str) -> list[str]:
    """The text of each tool result of a ``--mode json`` run, in order (the text
    blocks of each ``tool_execution_end``, joined)."""
    return [
        "".join(block.get("text", "") for block in e["result"]["content"])
        for e in json_events(stdout)
        if e["type"] == "tool_execution_end"
    ]


def pi_cli(
    root: Path, *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``pi ARGS…`` (this checkout's CLI) with HOME and the agent directory under
    ``root`` (`fake_provider_env`; ``root/home`` is created)."""
    (root / "home").mkdir(exist_ok=True)
    return run_pi(
        [sys.executable, "-m", "pi_sandbox.cli", *args],
        env=fake_provider_env(root),
        cwd=cwd,
        timeout=timeout,
    )


def plain_run(root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``cd CWD && pi -p hello`` without a sandbox and without a session file, the
    scripted model answering ``done``: which project code a plain run loads."""
    script = root / "plain.yaml"
    script.write_text("- text: done\n")
    return pi_cli(
        root,
        "--no-sandbox",
        "--no-session",
        "--model",
        "scripted",
        "--script",
        str(script),
        "-p",
        "hello",
        cwd=cwd,
    )
