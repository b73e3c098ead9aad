"""What a sandboxed worker does to itself before any extension or tool code runs.

The supervisor sends ``initialize`` params ``sandbox = {"rlimits": {...},
"cpu_seconds": n, "tool_timeout_s": n, "proxy_socket": path | None,
"proxy_direct": [names]}`` (DESIGN §6, issue 3 "Limits" and
"Network"). `apply` sets every rlimit with soft = hard, so nothing in the worker
can raise it again (raising a hard limit needs ``CAP_SYS_RESOURCE``, which bwrap
dropped), and, when the policy grants network, starts the loopback relay to the
supervisor's egress proxy and exports the proxy variables for child processes.

Standard library only: this runs on the worker's start-up path.
"""

from __future__ import annotations

import os
import resource

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~2 ms at every sandboxed worker's start (issue 20 §5)
    from typing import Any

__all__ = ["apply", "command_cpu_seconds", "process_limit_nearly_reached", "tool_timeout_s"]

_cpu_seconds: int | None = None
_tool_timeout_s: int | None = None
_applied: dict[str, int] = {}


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def apply(params: dict[str, Any] | None) -> None:
    """Apply the ``sandbox`` part of ``initialize`` params (no-op for ``None``).

    Raises:
        ValueError: an unknown rlimit name or a value that is not a positive int.
        OSError: the kernel refused a limit, or the relay could not start.
    """
    global _cpu_seconds, _tool_timeout_s
    if not params:
        return
    for name, value in (params.get("rlimits") or {}).items():
        if not name.startswith("RLIMIT_") or not hasattr(resource, name):
            raise ValueError(f"unknown rlimit {name!r}")
        if name == "RLIMIT_CORE" and value == 0:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            continue
        resource.setrlimit(getattr(resource, name), (_positive(name, value),) * 2)
        _applied[name] = value
    if params.get("cpu_seconds") is not None:
        _cpu_seconds = _positive("cpu_seconds", params["cpu_seconds"])
    if params.get("tool_timeout_s") is not None:
        _tool_timeout_s = _positive("tool_timeout_s", params["tool_timeout_s"])
    socket_path = params.get("proxy_socket")
    if socket_path:
        from pi_sandbox.worker.proxy_relay import proxy_environment, start_relay

        port = start_relay(str(socket_path))
        direct = params.get("proxy_direct")
        if isinstance(direct, list) and all(isinstance(name, str) for name in direct):
            os.environ.update(proxy_environment(port, tuple(direct)))
        else:
            os.environ.update(proxy_environment(port))


def command_cpu_seconds() -> int | None:
    """The ``RLIMIT_CPU`` (seconds) each command the bash tool starts gets, or None."""
    return _cpu_seconds


def tool_timeout_s() -> int | None:
    """The policy's wall-clock ceiling (seconds) on a ``bash`` call's timeout, or None."""
    return _tool_timeout_s


def process_limit_nearly_reached() -> bool:
    """True when the sandbox's processes come within 8 of ``RLIMIT_NPROC``.

    Inside the sandbox's PID namespace ``/proc`` lists only the sandbox's own
    processes, which is what ``RLIMIT_NPROC`` counts there. Always False outside a
    sandbox (no limit was applied).
    """
    limit = _applied.get("RLIMIT_NPROC")
    if limit is None:
        return False
    try:
        count = sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return False
    return count >= limit - 8
