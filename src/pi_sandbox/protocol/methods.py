"""Method names and error codes of the supervisor ↔ worker protocol (stdlib only).

Supervisor → worker requests: ``initialize``, ``event/dispatch``, ``tool/execute``,
``shutdown``; notification ``$/cancel``. Worker → supervisor notifications:
``log``, ``tool/update``.
"""

from __future__ import annotations

__all__ = [
    "CANCEL",
    "ERROR_EXTENSION_LOAD",
    "ERROR_HANDLER",
    "ERROR_INTERNAL",
    "ERROR_INVALID_PARAMS",
    "ERROR_INVALID_REQUEST",
    "ERROR_METHOD_NOT_FOUND",
    "EVENT_DISPATCH",
    "INITIALIZE",
    "LOG",
    "PROTOCOL_VERSION",
    "SHUTDOWN",
    "TOOL_EXECUTE",
    "TOOL_UPDATE",
    "WORKER_FD",
]

PROTOCOL_VERSION = 1
WORKER_FD = 3

INITIALIZE = "initialize"
EVENT_DISPATCH = "event/dispatch"
TOOL_EXECUTE = "tool/execute"
SHUTDOWN = "shutdown"
CANCEL = "$/cancel"

LOG = "log"
TOOL_UPDATE = "tool/update"

# JSON-RPC 2.0 reserved codes, then ours (-32000 to -32099 are implementation-defined).
ERROR_INVALID_REQUEST = -32600
ERROR_METHOD_NOT_FOUND = -32601
ERROR_INVALID_PARAMS = -32602
ERROR_INTERNAL = -32603
ERROR_EXTENSION_LOAD = -32001
ERROR_HANDLER = -32002
