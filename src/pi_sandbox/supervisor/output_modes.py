"""How a non-interactive run shows itself: ``-p`` (print) and ``--mode json``.

Print mode writes progress — tool calls, their outcomes, which were blocked and why,
extension errors — to stderr and only the final assistant text to stdout, so
``pi -p … > answer.txt`` captures the answer. JSON mode writes one JSON object per
event to stdout (pi's event names and camelCase fields).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

__all__ = ["JsonOutput", "PrintOutput"]

_PREVIEW_CHARS = 200


def _first_text(content: list[dict[str, Any]]) -> str:
    return "\n".join(block.get("text", "") for block in content if block.get("type") == "text")


def _one_line(text: str, limit: int = _PREVIEW_CHARS) -> str:
    text = " ⏎ ".join(line for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _silence_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class PrintOutput:
    """Human-readable progress on stderr for ``-p``."""

    def __init__(self, stderr: TextIO | None = None) -> None:
        self.stderr = stderr or sys.stderr
        self._denied: dict[str, str] = {}

    def line(self, text: str) -> None:
        """Write one progress line."""
        print(text, file=self.stderr, flush=True)

    async def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "tool_execution_start":
            args = json.dumps(event.get("args", {}), ensure_ascii=False)
            self.line(f"→ {event['toolName']} {_one_line(args)}")
        elif kind == "policy_decision" and event.get("effective") != "allow":
            rule = event.get("rule") or "-"
            self.line(f"  ⛔ policy {event.get('decision')} (rule {rule}): {event.get('reason')}")
        elif kind == "tool_execution_end":
            text = _one_line(_first_text(event["result"]["content"]))
            if event.get("blocked"):
                self.line(f"  ✗ {event['toolName']} blocked: {text}")
            elif event.get("isError"):
                self.line(f"  ✗ {event['toolName']} error: {text}")
            else:
                self.line(f"  ✓ {event['toolName']}: {text}")
        elif kind == "extension_error":
            self.line(f"⚠ extension error ({event.get('event')}): {_one_line(event.get('error', ''), 500)}")
        elif kind == "notice":
            self.line(f"ℹ {event.get('message')}")


class JsonOutput:
    """One JSON object per line on stdout for every event (``--mode json``)."""

    def __init__(self, stdout: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.closed = False

    async def __call__(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.stdout.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
            self.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`pi --mode json | head`): the run goes on, and its
            # session file is still written; only the stream stops.
            self.closed = True
            _silence_stdout()
