"""MCP client support (issue 19): configuration, sandboxed servers, tools.

- `config`: pi's ``mcp.json`` files (user; project only when trusted).
- `stdio_process`: a server process (bwrap-sandboxed) and the transport the ``mcp``
  SDK's client runs on.
- `connection`: one server's client, states, respawn budget.
- `manager`: every server of a session, their tools in the pipeline, exposure, the
  ``mcp_servers`` system prompt section.
- `commands`: ``pi mcp list|get|add|remove``.
"""

from pi_sandbox.supervisor.mcp.config import McpConfig, McpServerConfig, load_mcp_config
from pi_sandbox.supervisor.mcp.manager import McpManager

__all__ = ["McpConfig", "McpManager", "McpServerConfig", "load_mcp_config"]
