"""Tools the supervisor executes itself (issue 19): ``tool_search`` and ``codemode``.

Both are `HostTool`s of the tool pipeline: the model's call passes validation, the
policy gate and every hook like any tool's, and only the execution step runs here.
Both are off by default, like pi's built-in extensions of the same names (pi docs
cli.md "Tools"): ``--tools +tool_search,+codemode`` or ``defaultTools`` enables them,
and they turn on by themselves while tools with ``deferred`` (``tool_search``) or
``codemode`` (``codemode``) exposure are registered.
"""

from pi_sandbox.supervisor.host_tools.codemode import CODEMODE, CodemodeTool
from pi_sandbox.supervisor.host_tools.tool_search import TOOL_SEARCH, ToolSearchTool

HOST_TOOL_NAMES = (TOOL_SEARCH, CODEMODE)
"""Names of the supervisor's own tools; scripts can call neither."""

__all__ = ["CODEMODE", "HOST_TOOL_NAMES", "TOOL_SEARCH", "CodemodeTool", "ToolSearchTool"]
