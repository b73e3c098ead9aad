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

from pi_sandbox.supervisor.json_lines import dumps_line

__all__ = ["JsonOutput", "PrintOutput", "printable", "silence_stdout"]

# C0 controls except tab and newline, DEL, and C1 controls: the bytes that make a
# terminal clear the screen, move the cursor, set the title or the clipboard (OSC 52).
_CONTROL = {
    c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
}
# Unicode bidirectional controls reorder what a terminal shows ("Trojan Source"):
# tool output could make a line read as something it is not.
_CONTROL.update(
    {
        c: f"\\u{c:04x}"
        for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
    }
)


_CONTROL_AND_NEWLINES = {**_CONTROL, 0x0A: "\\n"}


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with terminal control characters shown as ``\\xNN`` escapes, and
    Unicode bidirectional controls (U+202A–U+202E, U+2066–U+2069, …) as ``\\uNNNN``.

    Tool output, block reasons, file names and model text are untrusted: printed raw,
    an escape sequence could overwrite the line that says a call was blocked. With
    ``newlines=False`` a newline is escaped too, so one line of progress cannot pose
    as two (an extension file name with a newline in it, say).
    """
    return text.translate(_CONTROL if newlines else _CONTROL_AND_NEWLINES)


_PREVIEW_CHARS = 200
_PREVIEW_LINES = 4


def _first_text(content: list[dict[str, Any]]) -> str:
    return "\n".join(block.get("text", "") for block in content if block.get("type") == "text")


def _one_line(text: str, limit: int = _PREVIEW_CHARS) -> str:
    text = " ⏎ ".join(line for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def silence_stdout() -> None:
    """Point fd 1 at /dev/null, so later writes and the interpreter's final flush
    cannot fail again after stdout broke (best effort)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _preview_lines(
    text: str, max_lines: int = _PREVIEW_LINES, width: int = _PREVIEW_CHARS
) -> list[str]:
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    shown = [line if len(line) <= width else line[: width - 1] + "…" for line in lines[:max_lines]]
    if len(lines) > max_lines:
        shown.append(f"… ({len(lines) - max_lines} more lines)")
    return shown


class PrintOutput:
    """Human-readable progress on stderr for ``-p``.

    With ``verbose`` (``--verbose``, issue 17 §5) the model's text between tool calls
    and every tool result in full are shown too (still on stderr: stdout keeps only
    the final answer).
    """

    def __init__(self, stderr: TextIO | None = None, *, verbose: bool = False) -> None:
        self.stderr = stderr or sys.stderr
        self.verbose = verbose
        self._denied: dict[str, str] = {}

    def line(self, text: str) -> None:
        """Write one progress line (control characters and newlines escaped,
        credentials redacted: progress lines end up in CI job logs)."""
        from pi_sandbox.supervisor.audit_log import redact_secrets

        try:
            print(printable(redact_secrets(text), newlines=False), file=self.stderr, flush=True)
        except OSError:
            pass  # stderr is gone or full: progress is lost, the run and its session go on

    async def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "tool_execution_start":
            args = json.dumps(event.get("args", {}), ensure_ascii=False)
            self.line(f"→ {event['toolName']} {_one_line(args)}")
            if "originalArgs" in event:
                original = json.dumps(event["originalArgs"], ensure_ascii=False)
                self.line(
                    f"  ⚠ input changed by a tool_call hook; the model asked for {_one_line(original)}"
                )
        elif kind == "tool_execution_end":
            # Denials are shown here, with the call they belong to (the result text names
            # the rule or hook and the reason); policy_decision events are json-mode only.
            # A call stopped before it ran has no durationMs and says by whom in its
            # details (pi's stream has no field for it; tool_pipeline.pi_result).
            details = event.get("result", {}).get("details")
            blocked = (
                "durationMs" not in event
                and isinstance(details, dict)
                and details.get("blocked_by") is not None
            )
            width = 2 * _PREVIEW_CHARS if blocked else _PREVIEW_CHARS
            text = _first_text(event["result"]["content"])
            lines = (
                [line.rstrip() for line in text.strip().splitlines()]
                if self.verbose
                else _preview_lines(text, width=width)
            )
            if blocked:
                mark, label = "✗", f"{event['toolName']} BLOCKED"
            elif event.get("isError"):
                mark, label = "✗", f"{event['toolName']} error"
            else:
                mark, label = "✓", event["toolName"]
            self.line(f"  {mark} {label}: {lines[0] if lines else ''}")
            for extra in lines[1:]:
                self.line(f"      {extra}")
        elif kind == "message_end" and self.verbose:
            message = event.get("message") or {}
            if message.get("role") == "assistant" and any(
                block.get("type") == "toolCall" for block in message.get("content", [])
            ):
                # The answer's own text goes to stdout at the end; text that came with
                # tool calls would otherwise never be seen.
                for line in _first_text(message.get("content", [])).strip().splitlines():
                    self.line(f"💬 {line}")
        elif kind == "extension_error":
            self.line(
                f"⚠ extension error ({event.get('event')}): {_one_line(event.get('error', ''), 500)}"
            )
        elif kind == "pisandbox_notice":
            self.line(f"ℹ {event.get('message')}")
        elif kind == "ui_notify":
            mark = {"warning": "⚠", "error": "✗"}.get(str(event.get("level")), "ℹ")
            self.line(f"{mark} {_one_line(str(event.get('message', '')), 500)}")
        elif kind == "pisandbox_warning":
            self.line(f"⚠ {event.get('message')}")
        elif kind == "auto_retry_start":
            # issue 16: a retry is never silent, in print mode either.
            self.line(
                f"↻ retrying in {event.get('delayMs', 0) / 1000:.1f} s (attempt "
                f"{event.get('attempt')}/{event.get('maxAttempts')}): "
                f"{_one_line(str(event.get('errorMessage', '')), 500)}"
            )
        elif kind == "auto_retry_end" and event.get("success"):
            self.line(f"↻ retry {event.get('attempt')} succeeded")
        elif kind == "resource_diagnostic":
            mark = "ℹ" if event.get("diagnostic") == "collision" else "⚠"
            self.line(
                f"{mark} {event.get('diagnostic')}: {_one_line(str(event.get('message')), 500)}"
            )
        elif kind == "compaction_start":
            self.line(f"ℹ compacting the context ({event.get('reason')})")
        elif kind == "compaction_end":
            result = event.get("result")
            if isinstance(result, dict):
                self.line(
                    f"ℹ context compacted: ~{result.get('tokensBefore')} → "
                    f"~{result.get('estimatedTokensAfter')} tokens"
                )
            elif event.get("aborted"):
                self.line("⚠ compaction cancelled")
            else:
                self.line(f"⚠ compaction failed: {_one_line(str(event.get('errorMessage')), 500)}")
        elif kind == "trust_changed":
            saved = " (saved)" if event.get("saved") else ""
            self.line(f"ℹ project trust is now {event.get('decision')}{saved}")


class JsonOutput:
    """One JSON object per line on stdout for every event (``--mode json``)."""

    def __init__(self, stdout: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.closed = False
        self.failed = False  # a write failed for a reason other than the reader leaving

    async def __call__(self, event: dict[str, Any]) -> None:
        await self.write_line(dumps_line(event))

    async def write_line(self, line: str) -> None:
        """Write one line of JSON text already serialised (RPC ``get_tree``, whose
        nesting ``json.dumps`` cannot follow, issue 15)."""
        if self.closed:
            return
        try:
            self.stdout.write(line + "\n")
            self.stdout.flush()
        except OSError as exc:
            # The reader went away (`pi --mode json | head`) or the disk is full: the
            # run goes on, and its session file is still written; only the stream stops.
            self.closed = True
            silence_stdout()
            if not isinstance(exc, BrokenPipeError):
                self.failed = True
                try:
                    print(
                        f"pi: cannot write output: {exc.strerror or exc}",
                        file=sys.stderr,
                        flush=True,
                    )
                except OSError:
                    pass
