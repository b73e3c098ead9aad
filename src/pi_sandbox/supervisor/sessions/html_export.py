"""RPC ``export_html`` (issue 17 §2; pi docs rpc-commands.md): the current branch of a
session as one self-contained HTML page.

Simpler than pi's export (which embeds its themed single-page viewer and the whole
entry tree): one static page, no script, no external resource, that shows the
session's header and each message of the current branch in order — user and
assistant text, thinking, tool calls with their arguments, tool results, the
user's own bash commands, compaction and branch summaries. Every text is
HTML-escaped: a model's or a tool's output cannot inject markup into the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

__all__ = ["default_export_path", "export_html", "render_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       background: #fafafa; color: #222; }
.msg { border-left: 4px solid #999; background: #fff; margin: 1rem 0; padding: .5rem 1rem; }
.user { border-color: #2b6cb0; } .assistant { border-color: #2f855a; }
.toolResult { border-color: #b7791f; } .error { border-color: #c53030; }
.bashExecution { border-color: #6b46c1; } .summary { border-color: #718096; }
.role { font-size: .8rem; text-transform: uppercase; color: #555; }
pre { white-space: pre-wrap; word-break: break-word; background: #f0f0f0; padding: .5rem; }
.thinking { color: #666; font-style: italic; }
"""


def default_export_path(session_file: Path | None, session_id: str, cwd: Path) -> Path:
    """pi's default: ``pi-session-<session file name>.html`` in the working directory
    (``pi-session-<id>.html`` for a session without a file)."""
    stem = session_file.stem if session_file is not None else session_id
    return cwd / f"pi-session-{stem}.html"


def _text(value: str) -> str:
    return html.escape(value, quote=True)


def _blocks(content: Any) -> list[str]:
    if isinstance(content, str):
        return [f"<pre>{_text(content)}</pre>"]
    out: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(f"<pre>{_text(str(block.get('text', '')))}</pre>")
        elif kind == "thinking":
            out.append(f'<pre class="thinking">{_text(str(block.get("thinking", "")))}</pre>')
        elif kind == "toolCall":
            arguments = json.dumps(block.get("arguments"), indent=2, ensure_ascii=False)
            out.append(
                f"<div>tool call <b>{_text(str(block.get('name', '')))}</b></div>"
                f"<pre>{_text(arguments)}</pre>"
            )
        elif kind == "image":
            out.append(f"<div>[image {_text(str(block.get('mimeType', '')))}]</div>")
    return out


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role", ""))
    parts: list[str] = []
    label = role
    css = role
    if role == "toolResult":
        label = f"tool result: {message.get('toolName', '')}"
        if message.get("isError"):
            css += " error"
        parts = _blocks(message.get("content"))
    elif role == "bashExecution":
        label = f"bash (exit {message.get('exitCode')})"
        parts = [
            f"<pre>$ {_text(str(message.get('command', '')))}</pre>",
            f"<pre>{_text(str(message.get('output', '')))}</pre>",
        ]
    elif role in ("compactionSummary", "branchSummary"):
        css = "summary"
        parts = [f"<pre>{_text(str(message.get('summary', '')))}</pre>"]
    else:
        parts = _blocks(message.get("content"))
        if role == "assistant" and message.get("model"):
            label = f"assistant ({message.get('provider', '')}/{message.get('model')})"
    return (
        f'<div class="msg {_text(css)}"><div class="role">{_text(label)}</div>'
        + "".join(parts)
        + "</div>"
    )


def render_html(writer: Any) -> str:
    """The page for ``writer``'s session (a `SessionWriter`): its current branch."""
    header = writer.header
    title = writer.name or f"Session {header.id}"
    body = "\n".join(_message(m) for m in writer.messages() if isinstance(m, dict))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_text(title)}</h1>"
        f"<p>session {_text(str(header.id))} · {_text(str(header.timestamp))} · "
        f"{_text(str(header.cwd))}</p>\n{body}\n</body></html>\n"
    )


def export_html(writer: Any, output_path: Path | None, cwd: Path) -> Path:
    """Write `render_html` to ``output_path`` (relative: to ``cwd``; None:
    `default_export_path`) and return the path written.

    Raises:
        OSError: the file cannot be written.
    """
    if output_path is None:
        path = default_export_path(writer.path, str(writer.header.id), cwd)
    else:
        path = output_path if output_path.is_absolute() else cwd / output_path
    path.write_text(render_html(writer), encoding="utf-8")
    return path
