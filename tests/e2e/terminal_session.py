"""Drive a program in a real terminal: tmux on a private socket (issue 18 tests).

`TerminalSession` starts one command in a detached tmux session of a given size,
sends keys, captures the screen (``capture-pane``) and waits on screen conditions
with generous deadlines — never a guessed sleep. Each session has its own tmux
server socket (``tmux -L NAME``), so tests never touch another tmux server, and
`close` kills only that server.

Example::

    with TerminalSession(["pi", "--model", "scripted", ...], cwd=ws, env=env) as term:
        term.wait_for("> ")
        term.send_text("hello")
        term.send_keys("Enter")
        term.wait_for(lambda screen: "answer" in screen)
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["DEADLINE_S", "TerminalSession", "tmux_available"]

DEADLINE_S = 60.0
"""Default wait for a screen condition: generous for a busy 2-core machine."""

TMUX = shutil.which("tmux") or "/usr/bin/tmux"


def tmux_available() -> bool:
    """Whether tmux can be run here."""
    return os.access(TMUX, os.X_OK)


class TerminalSession:
    """One command in a tmux pane of ``width`` × ``height`` cells.

    Args:
        argv: the command and its arguments.
        cwd: its working directory.
        env: its whole environment (``TERM`` defaults to ``xterm-256color``).
        width, height: the terminal's size in cells.

    The command's exit status is written to ``exit_file`` when it ends (the pane
    then stays open showing ``[exited N]``).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        width: int = 80,
        height: int = 24,
    ) -> None:
        self.socket = f"pi-test-{uuid.uuid4().hex[:12]}"
        self.exit_file = Path(cwd).parent / f".{self.socket}.exit"
        environment = {"TERM": "xterm-256color", **env}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment.items())
        command = (
            f"cd {shlex.quote(str(cwd))} && env -i {exports} {shlex.join(argv)}; "
            f"echo $? > {shlex.quote(str(self.exit_file))}; echo '[exited]'; sleep 3600"
        )
        self._tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            str(width),
            "-y",
            str(height),
            "sh",
            "-c",
            command,
        )
        # A pane of exactly this size, whatever the server's defaults.
        self._tmux("set-option", "-t", "t", "status", "off")
        self.resize(width, height)

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TMUX, "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def resize(self, width: int, height: int) -> None:
        """Resize the terminal (the program gets the new size as from a real resize)."""
        self._tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height), check=False)

    def screen(self, *, escapes: bool = False) -> str:
        """The visible screen as text (with ``escapes``: with its colour and style
        escape sequences, ``capture-pane -e``)."""
        args = ["capture-pane", "-p", "-t", "t"]
        if escapes:
            args.append("-e")
        return self._tmux(*args).stdout

    def history(self) -> str:
        """The scrollback and the screen, as text."""
        return self._tmux("capture-pane", "-p", "-S", "-3000", "-t", "t").stdout

    def send_keys(self, *keys: str) -> None:
        """Send tmux key names (``Enter``, ``Escape``, ``C-c``, ``M-Enter``, ``Tab``…)."""
        self._tmux("send-keys", "-t", "t", *keys)

    def send_text(self, text: str) -> None:
        """Type ``text`` literally."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def wait_for(
        self,
        condition: str | Callable[[str], bool],
        *,
        timeout: float = DEADLINE_S,
        scrollback: bool = True,
    ) -> str:
        """Wait until ``condition`` (text on screen, or a predicate of the screen's
        text) holds; returns that text. With ``scrollback`` the scrollback counts too.

        Raises:
            AssertionError: not within ``timeout`` seconds (the message shows the screen).
        """
        check = condition if callable(condition) else (lambda text: condition in text)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.history() if scrollback else self.screen()
            if check(text):
                return text
            time.sleep(0.05)  # polling interval, not a guessed wait for an outcome
        raise AssertionError(f"timed out waiting for {condition!r}; the screen was:\n{text}")

    def exit_status(self, *, timeout: float = DEADLINE_S) -> int:
        """Wait for the command to end; its exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exit_file.exists():
                text = self.exit_file.read_text().strip()
                if text:
                    return int(text)
            time.sleep(0.05)
        raise AssertionError(f"the command did not end; the screen was:\n{self.history()}")

    def close(self) -> None:
        """Kill this session's tmux server (and the command with it)."""
        self._tmux("kill-server", check=False)
        self.exit_file.unlink(missing_ok=True)

    def __enter__(self) -> TerminalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
