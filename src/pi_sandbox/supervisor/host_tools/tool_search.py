"""``tool_search``: find tools that are not declared yet and declare the best matches
for the following turns (issue 19; pi docs cli.md "Tool search", mcp.md).

The ranking is `ToolExposure.search` (BM25 over name, description and parameter
names). Activations are recorded by the session host as a ``system`` message with
``toolsAdded`` after the tool batch (pi docs session-format.md), so they stay declared
on that branch across ``/reload`` and resume.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pi_sandbox.protocol.messages import ToolDefinitionWire
from pi_sandbox.supervisor.agent.tool_exposure import ToolExposure
from pi_sandbox.supervisor.agent.tool_pipeline import HostTool
from pi_sandbox.supervisor.providers.base import ToolCall

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "TOOL_SEARCH", "ToolSearchTool"]

TOOL_SEARCH = "tool_search"
DEFAULT_LIMIT = 5
MAX_LIMIT = 20

_DEFINITION = ToolDefinitionWire(
    name=TOOL_SEARCH,
    label="Tool search",
    description=(
        "Search tools that are not declared yet (deferred tools, such as MCP tools) by "
        "what they do. The best matches are returned with their parameter schemas and "
        "declared for your next step, so you can call them directly."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
                "description": "Words describing the capability or task, or a tool name",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": f"How many tools to load at most (default {DEFAULT_LIMIT})",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    prompt_snippet="Search for and load tools that are not declared yet",
    prompt_guidelines=[
        "Use tool_search when a task needs a capability none of your tools offers; "
        "the tools it loads can be called from your next step on.",
    ],
)


class ToolSearchTool:
    """The ``tool_search`` host tool.

    Args:
        exposure: the session's registry.
        on_activate: called with the names newly activated by one call (the session
            host records them in the session file after the tool batch).
    """

    def __init__(self, exposure: ToolExposure, on_activate: Callable[[list[str]], None]) -> None:
        self.exposure = exposure
        self.on_activate = on_activate

    def host_tool(self) -> HostTool:
        """The pipeline's view of this tool."""
        return HostTool(_DEFINITION, self.execute)

    async def execute(
        self, call: ToolCall, arguments: dict[str, Any], session: Any
    ) -> dict[str, Any]:
        """Rank, activate and describe; the result text lists each match as JSON
        ``{"name", "description", "parameters"}``. ``details``: ``matches`` (names)
        and ``added`` (the newly declared ones)."""
        query = str(arguments.get("query", ""))
        limit = int(arguments.get("limit") or DEFAULT_LIMIT)
        matches = self.exposure.search(query, limit)
        names = [m.definition.name for m in matches]
        added = self.exposure.activate(names)
        if added:
            self.on_activate(added)
        if not matches:
            text = f"No tools found for: {query}"
        else:
            described = [self.exposure.describe(name) for name in names]
            head = (
                f"Loaded tools: {', '.join(added)}"
                if added
                else f"Matching tools already loaded: {', '.join(names)}"
            )
            text = head + "\n" + json.dumps(described, ensure_ascii=False, indent=1)
        return {
            "content": [{"type": "text", "text": text}],
            "details": {"matches": names, "added": added},
            "is_error": False,
        }
