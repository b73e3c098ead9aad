"""MCP tool names and results in pi's shapes (pi-mcp ``naming.js``, ``tools.js``).

- `mcp_tool_name`: ``mcp__<server>__<tool>``, every character other than letters,
  digits and ``_`` replaced by ``_``; at most 64 characters; a name that is taken (or
  that two tools of one server would share) gets an 8-hex-digit hash suffix.
- `to_tool_result`: an MCP ``CallToolResult`` as our tool result (text and image
  blocks; other blocks described in text; text over `MAX_TEXT_CHARS` loses its
  middle, pi mcp.md "Text results over 20 KB …").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_TEXT_CHARS", "mcp_tool_name", "normalise_schema", "to_tool_result"]

_MAX_NAME = 64
MAX_TEXT_CHARS = 20_000
"""Text of one result passed to the model whole (characters); longer text loses its middle."""


def mcp_tool_name(server: str, tool: str, is_taken: Callable[[str], bool] = lambda _: False) -> str:
    """The pi tool name of ``tool`` of ``server`` (pi-mcp ``createMcpToolName``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", f"mcp__{server}__{tool}")
    if len(name) <= _MAX_NAME and not is_taken(name):
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - len(digest) - 1]}_{digest}"


def normalise_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """An input schema the providers accept: ``type: object`` and ``properties``
    present (pi-mcp ``normalizeMcpInputSchema``)."""
    schema = dict(schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    half = MAX_TEXT_CHARS // 2
    return f"{text[:half]}…{len(text) - 2 * half} chars truncated…{text[-half:]}"


def to_tool_result(result: Any, *, server: str) -> dict[str, Any]:
    """Convert an ``mcp.types.CallToolResult`` to ``{"content", "details", "is_error"}``.

    ``details`` keeps the server name and the ``structuredContent`` (bounded) for
    hooks and codemode scripts.
    """
    content: list[dict[str, Any]] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            content.append({"type": "text", "text": _clip(str(block.text))})
        elif kind == "image":
            content.append(
                {"type": "image", "data": str(block.data), "mimeType": str(block.mime_type)}
            )
        elif kind == "resource_link":
            content.append(
                {
                    "type": "text",
                    "text": f"[resource {block.uri} of server {server}: read it with "
                    f"read_mcp_resource]",
                }
            )
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            body = _clip(text) if isinstance(text, str) else "(binary content)"
            content.append({"type": "text", "text": f"[resource {inner.uri}]\n{body}"})
        else:
            content.append({"type": "text", "text": f"[{kind} content omitted]"})
    details: dict[str, Any] = {"mcp_server": server}
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        encoded = json.dumps(structured, default=str)
        if len(encoded) <= MAX_TEXT_CHARS:
            details["structured_content"] = structured
        if not content:
            content.append({"type": "text", "text": _clip(encoded)})
    if not content:
        content.append({"type": "text", "text": "(no content)"})
    return {
        "content": content,
        "details": details,
        "is_error": bool(getattr(result, "is_error", False)),
    }
