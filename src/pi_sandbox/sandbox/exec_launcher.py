"""Start an arbitrary program inside a sandbox with the worker's limits (issue 19 §2).

An MCP server is not our worker: it cannot apply rlimits to itself or start the egress
relay. This launcher runs first, inside the bwrap sandbox, as
``python -I -B exec_launcher.py CONFIG_JSON -- PROGRAM ARGS…``:

1. applies the rlimits of ``CONFIG_JSON`` (``{"rlimits": {"RLIMIT_AS": n, …}}``, the
   shape of `SandboxLimits.rlimits`) — inherited by the program and all it starts;
2. with ``"proxy_socket"`` set, starts the loopback relay to the egress proxy
   (`pi_sandbox.worker.proxy_relay`, loaded by file path) and forks: the child
   runs the program with ``HTTP_PROXY``… pointing at the relay, the parent keeps the
   relay's threads alive until the child exits and exits with its status;
   without it, ``exec``\\s the program directly (no extra process).

Stdlib only and run by path, never imported by the supervisor: nothing of the
package's ``__init__`` (pydantic…) is loaded inside the sandbox.
"""

from __future__ import annotations

import json
import os
import resource
import sys


def _apply_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        if not name.startswith("RLIMIT_") or not hasattr(resource, name):
            raise SystemExit(f"pi exec launcher: unknown limit {name!r}")
        number = getattr(resource, name)
        _, hard = resource.getrlimit(number)
        target = int(value)
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard)
        resource.setrlimit(number, (target, target))


def _load_relay() -> object:
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "worker", "proxy_relay.py")
    spec = importlib.util.spec_from_file_location("pi_proxy_relay", path)
    if spec is None or spec.loader is None:
        raise SystemExit("pi exec launcher: cannot load the egress relay")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 1024)
    except (OSError, ValueError):
        return 65536


def main(argv: list[str]) -> int:
    """Run the launcher; returns the exit status (only when the program was forked)."""
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: exec_launcher.py CONFIG_JSON -- PROGRAM [ARGS…]\n")
        return 2
    config = json.loads(argv[0])
    program = argv[2:]
    _apply_rlimits(config.get("rlimits") or {})
    # Only 0-2 go on to the program (DESIGN §6), like a worker's own start: whatever
    # else bwrap let through (its status pipe, a descriptor the supervisor inherited)
    # is closed before the program runs.
    os.closerange(3, _max_fd())
    socket_path = config.get("proxy_socket")
    if not socket_path:
        try:
            os.execvp(program[0], program)
        except OSError as exc:
            sys.stderr.write(f"pi exec launcher: cannot run {program[0]}: {exc}\n")
            return 127
    relay = _load_relay()
    port = relay.start_relay(socket_path)  # type: ignore[attr-defined]
    env = dict(os.environ)
    env.update(relay.proxy_environment(port, tuple(config.get("proxy_direct") or ())))  # type: ignore[attr-defined]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvpe(program[0], program, env)
        except OSError as exc:
            sys.stderr.write(f"pi exec launcher: cannot run {program[0]}: {exc}\n")
            os._exit(127)
    # Only the program holds the MCP pipes: its exit must close them for the client.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
