"""Text for the terminal UI: Markdown through rich, tool blocks, policy decisions
(issue 18). Everything here returns ANSI strings (or plain lines) and never writes.

Model text, tool output, arguments and extension strings are untrusted: each passes
through `printable` before it reaches the terminal, so an escape sequence in them
cannot move the cursor, retitle the window or overwrite the line saying a call was
blocked.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from pi_sandbox.supervisor.modes.output_modes import printable

__all__ = [
    "COLLAPSED_LINES",
    "args_summary",
    "decision_lines",
    "markdown_ansi",
    "no_color",
    "result_text",
    "styled",
]

COLLAPSED_LINES = 6
"""Lines of a tool result shown before ``… N more lines (Ctrl-O)``."""


def no_color() -> bool:
    """pi docs / no-color.org: ``NO_COLOR`` set to anything non-empty turns colour off."""
    return bool(os.environ.get("NO_COLOR"))


def _console(width: int) -> Any:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        force_terminal=True,
        width=max(20, width),
        # NO_COLOR: rich drops the colours and keeps bold, dim and italic.
        color_system="standard" if no_color() else "256",
        no_color=no_color(),
        emoji=False,
        highlight=False,
        legacy_windows=False,
    )


def markdown_ansi(text: str, width: int) -> str:
    """``text`` rendered as Markdown for a terminal ``width`` columns wide (ANSI)."""
    from rich.markdown import Markdown

    console = _console(width)
    # hyperlinks=False: a link shows its target; model text cannot hide a URL
    # behind other words (OSC 8 links).
    console.print(Markdown(printable(text), code_theme="ansi_dark", hyperlinks=False))
    return console.file.getvalue().rstrip("\n")


def styled(text: str, style: str, width: int) -> str:
    """One piece of untrusted ``text`` in a rich ``style`` (``"dim"``, ``"bold red"``…),
    wrapped to ``width``; no markup is read from ``text``."""
    from rich.text import Text

    console = _console(width)
    console.print(Text(printable(text), style=style if not no_color() else _plain(style)))
    return console.file.getvalue().rstrip("\n")


def _plain(style: str) -> str:
    # NO_COLOR: keep emphasis (bold, dim, italic), drop colours.
    return " ".join(w for w in style.split() if w in ("bold", "dim", "italic", "underline"))


def args_summary(tool: str, args: Any) -> str:
    """A tool call's arguments in one line: ``$ command`` for bash, the path for
    file tools, else compact JSON (untrusted: escaped)."""
    if isinstance(args, dict):
        if tool == "bash" and isinstance(args.get("command"), str):
            return printable(f"$ {args['command']}", newlines=False)
        if isinstance(args.get("path"), str) and len(args) <= 3:
            rest = {k: v for k, v in args.items() if k not in ("path", "content", "edits")}
            extra = f" {json.dumps(rest, ensure_ascii=False)}" if rest else ""
            return printable(f"{args['path']}{extra}", newlines=False)
    return printable(json.dumps(args, ensure_ascii=False), newlines=False)


def result_text(result: Any) -> str:
    """The text blocks of a tool result (``{"content": [...]}``), joined."""
    if not isinstance(result, dict):
        return ""
    blocks = result.get("content") or []
    parts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    images = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "image")
    if images:
        parts.append(f"[{images} image(s)]")
    return printable("\n".join(parts))


def decision_lines(decision: dict[str, Any]) -> list[str]:
    """A ``policy_decision`` (or ``policy_approval_request``) as lines: the rule, its
    tier and file, the reason, and pi policy explain's per-command breakdown."""
    rule = decision.get("rule")
    where = ", ".join(str(x) for x in (decision.get("tier"), decision.get("source")) if x)
    lines = [
        printable(f"rule: {rule or '(default)'}" + (f" [{where}]" if where else ""), newlines=False)
    ]
    if decision.get("reason"):
        lines.append(printable(f"why: {decision['reason']}", newlines=False))
    for command in decision.get("commands") or []:
        if not isinstance(command, dict):
            continue
        argv = command.get("argv")
        shown = " ".join(str(a) for a in argv) if isinstance(argv, list) else str(argv)
        extra = ""
        if command.get("rule"):
            extra += f" (rule {command['rule']})"
        if command.get("via"):
            extra += f" via {' > '.join(str(v) for v in command['via'])}"
        lines.append(
            printable(f"  {command.get('decision', '?'):5} {shown}{extra}", newlines=False)
        )
    return lines
