"""Method names and error codes of the supervisor ↔ worker protocol (stdlib only).

Supervisor → worker requests: ``initialize``, ``event/dispatch``, ``tool/execute``,
``command/execute``, ``session/callback``, ``provider/stream`` (one model request to
an extension's provider, issue 16), ``shutdown``; notifications ``$/cancel``,
``bus/deliver``, ``generation/end``.

Worker → supervisor request: ``host/call`` (an action of the extension API, e.g.
``send_message``, ``set_active_tools``, ``ui``; answered with a result or an error
``ERROR_STALE``/``ERROR_CAPABILITY``/``ERROR_HOST``). Worker → supervisor
notifications: ``log``, ``tool/update``, ``provider/delta`` (text of a
``provider/stream`` answer as it is produced, issue 16), ``registrations/update`` (a bound
extension registered or unsubscribed something), ``bus/emit``, ``$/cancelled``
(a cancelled request's handler has returned, issue 5: a worker that does not send
it within the grace period is killed).
"""

from __future__ import annotations

__all__ = [
    "BUS_DELIVER",
    "BUS_EMIT",
    "CANCEL",
    "CANCELLED",
    "CODEMODE_RUN",
    "COMMAND_EXECUTE",
    "ERROR_CAPABILITY",
    "ERROR_EXTENSION_LOAD",
    "ERROR_HANDLER",
    "ERROR_HOST",
    "ERROR_INTERNAL",
    "ERROR_INVALID_PARAMS",
    "ERROR_INVALID_REQUEST",
    "ERROR_METHOD_NOT_FOUND",
    "ERROR_STALE",
    "EVENT_DISPATCH",
    "GENERATION_END",
    "HOST_CALL",
    "INITIALIZE",
    "LOG",
    "PROTOCOL_VERSION",
    "PROVIDER_DELTA",
    "PROVIDER_STREAM",
    "REGISTRATIONS_UPDATE",
    "SESSION_CALLBACK",
    "SHUTDOWN",
    "TOOL_EXECUTE",
    "TOOL_UPDATE",
    "WORKER_FD",
]

PROTOCOL_VERSION = 2
WORKER_FD = 3

INITIALIZE = "initialize"
EVENT_DISPATCH = "event/dispatch"
TOOL_EXECUTE = "tool/execute"
SHUTDOWN = "shutdown"
COMMAND_EXECUTE = "command/execute"
SESSION_CALLBACK = "session/callback"
CANCEL = "$/cancel"
BUS_DELIVER = "bus/deliver"
GENERATION_END = "generation/end"
PROVIDER_STREAM = "provider/stream"
# issue 19: run one codemode script in a ``codemode`` worker (worker/codemode_runner.py).
CODEMODE_RUN = "codemode/run"

HOST_CALL = "host/call"
LOG = "log"
TOOL_UPDATE = "tool/update"
REGISTRATIONS_UPDATE = "registrations/update"
BUS_EMIT = "bus/emit"
CANCELLED = "$/cancelled"
PROVIDER_DELTA = "provider/delta"

# JSON-RPC 2.0 reserved codes, then ours (-32000 to -32099 are implementation-defined).
ERROR_INVALID_REQUEST = -32600
ERROR_METHOD_NOT_FOUND = -32601
ERROR_INVALID_PARAMS = -32602
ERROR_INTERNAL = -32603
ERROR_EXTENSION_LOAD = -32001
ERROR_HANDLER = -32002
ERROR_STALE = -32003
ERROR_CAPABILITY = -32004
ERROR_HOST = -32005
