"""The worker's main loop: serve JSON-RPC requests from the supervisor on fd 3.

Stdlib only (DESIGN §2): a worker is started for every extension and for the
built-in tools, so its import graph is a start-up cost paid many times. Concurrency
is one thread per request; an ``async`` factory, handler or tool runs on a private
``asyncio`` loop in its request's thread (asyncio is imported only then).

The worker trusts the supervisor's messages (the supervisor built them), but frames
are still bounded and a framing error ends the worker: the supervisor sees the
channel close and reports the crash.

Exactly one place turns a handler exception into a wire error: ``_run_request``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from pi_sandbox.protocol import hook_kinds, methods
from pi_sandbox.protocol.framing import FrameDecoder, FrameError, encode_frame
from pi_sandbox.worker.api import Context, Event, ExtensionAPI

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from collections.abc import Callable
    from typing import Any

__all__ = ["WorkerRuntime", "main"]

_RECV_BYTES = 65536


class _RequestError(Exception):
    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


def _resolve(value: Any) -> Any:
    """Run an awaitable to completion on a private event loop; pass other values through."""
    if hasattr(value, "__await__"):
        import asyncio

        async def _await() -> Any:
            return await value

        return asyncio.run(_await())
    return value


def _format_exception(exc: BaseException) -> str:
    import traceback  # ~9 ms: paid on the first failure, not at every worker start

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _normalise_tool_result(value: Any) -> dict[str, Any]:
    """Turn what an extension's ``execute`` returned into the wire tool result shape."""
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "details": {}, "is_error": False}
    if not isinstance(value, dict):
        raise TypeError(
            f"tool execute returned {type(value).__name__}; expected a dict or a string"
        )
    content = value.get("content", [])
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TypeError("tool result 'content' must be a list of content blocks or a string")
    details = value.get("details") or {}
    if not isinstance(details, dict):
        raise TypeError("tool result 'details' must be a dict")
    is_error = value.get("is_error", value.get("isError", False))
    return {"content": content, "details": details, "is_error": bool(is_error)}


class WorkerRuntime:
    """Serves one channel. ``kind`` is fixed by ``initialize``: an extension or the tools."""

    def __init__(self, sock: socket.socket, *, max_frame_bytes: int | None = None) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._decoder = (
            FrameDecoder()
            if max_frame_bytes is None
            else FrameDecoder(max_frame_bytes=max_frame_bytes)
        )
        self._cancels: dict[Any, threading.Event] = {}
        self._cancelled: set[Any] = set()
        self._state_lock = threading.Lock()
        self._api: ExtensionAPI | None = None
        self._kind: str | None = None
        self._extension_path = ""
        self._stopping = False

    # --- channel -------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Send one frame; a broken channel is ignored (the supervisor is gone or killed us)."""
        try:
            frame = encode_frame(message)
        except (FrameError, TypeError, ValueError) as exc:
            if "id" in message and "method" not in message:
                frame = encode_frame(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {
                            "code": methods.ERROR_INTERNAL,
                            "message": f"response not sendable: {exc}",
                        },
                    }
                )
            else:
                return
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError:
                # The channel is gone (the supervisor died, or extension code closed or
                # broke fd 3). A worker that cannot answer must not linger: exiting is
                # what lets the supervisor see the crash instead of waiting on a deadline.
                _kill_commands()
                os._exit(3)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (no reply expected)."""
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def serve(self) -> int:
        """Read requests until EOF or ``shutdown``; returns the process exit status."""
        while not self._stopping:
            try:
                data = self._sock.recv(_RECV_BYTES)
            except OSError:
                return 1
            if not data:
                return 0
            try:
                messages = self._decoder.feed(data)
            except FrameError as exc:
                print(f"pi worker: protocol error from supervisor: {exc}", file=sys.stderr)
                return 2
            for message in messages:
                self._handle(message)
        return 0

    def _handle(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if method == methods.CANCEL:
            target = params.get("id")
            with self._state_lock:
                self._cancelled.add(target)
                event = self._cancels.get(target)
            if event is not None:
                event.set()
            return
        if method is None or request_id is None:
            return  # responses and unknown notifications: nothing in this worker waits for them
        if method in (methods.INITIALIZE, methods.SHUTDOWN):
            # In order, on the reading thread: nothing else may run before initialize finishes.
            self._run_request(request_id, method, params)
            if method == methods.SHUTDOWN:
                self._stopping = True
            return
        cancel = threading.Event()
        with self._state_lock:
            self._cancels[request_id] = cancel
        thread = threading.Thread(
            target=self._run_request, args=(request_id, method, params, cancel), daemon=True
        )
        thread.start()

    def _run_request(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any],
        cancel: threading.Event | None = None,
    ) -> None:
        try:
            result = self._dispatch(method, params, cancel or threading.Event(), request_id)
            response: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
        except _RequestError as exc:
            error: dict[str, Any] = {"code": exc.code, "message": str(exc)}
            if exc.data is not None:
                error["data"] = exc.data
            response = {"jsonrpc": "2.0", "id": request_id, "error": error}
        except BaseException as exc:
            # SystemExit and KeyboardInterrupt raised by extension code in a request
            # thread would end the thread silently and leave the request unanswered.
            response = {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {
                    "code": methods.ERROR_INTERNAL,
                    "message": f"{type(exc).__name__}: {exc}",
                    "data": {"traceback": _format_exception(exc)},
                },
            }
        with self._state_lock:
            self._cancels.pop(request_id, None)
            cancelled = request_id in self._cancelled
            self._cancelled.discard(request_id)
        if not cancelled:  # DESIGN §3: a request the peer cancelled is never answered
            self.send(response)

    def _dispatch(
        self, method: str, params: dict[str, Any], cancel: threading.Event, request_id: Any
    ) -> Any:
        if method == methods.INITIALIZE:
            return self._initialize(params)
        if method == methods.SHUTDOWN:
            return {}
        if self._kind is None:
            raise _RequestError(methods.ERROR_INVALID_REQUEST, f"{method} before initialize")
        if method == methods.EVENT_DISPATCH:
            return self._dispatch_event(params, cancel)
        if method == methods.TOOL_EXECUTE:
            return self._execute_tool(params, cancel)
        raise _RequestError(methods.ERROR_METHOD_NOT_FOUND, f"unknown method {method!r}")

    # --- requests ------------------------------------------------------------------------

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._kind is not None:
            raise _RequestError(methods.ERROR_INVALID_REQUEST, "initialize was already called")
        kind = params.get("kind")
        try:
            from pi_sandbox.worker import confinement

            confinement.apply(params.get("sandbox"))
        except (ValueError, OSError) as exc:
            raise _RequestError(
                methods.ERROR_INVALID_PARAMS, f"cannot confine the worker: {exc}"
            ) from exc
        if kind == "tools":
            from pi_sandbox.worker.builtin_tools import TOOL_DEFINITIONS

            self._kind = "tools"
            return {
                "protocol_version": methods.PROTOCOL_VERSION,
                "generation": params.get("generation"),
                "pid": os.getpid(),
                "tools": [dict(d) for d in TOOL_DEFINITIONS.values()],
                "events": [],
            }
        if kind != "extension":
            raise _RequestError(methods.ERROR_INVALID_PARAMS, f"unknown worker kind {kind!r}")
        path = str(params.get("path") or "")
        self._extension_path = path
        try:
            ctx = params.get("ctx") or {}
            if ctx.get("cwd") and os.path.isdir(ctx["cwd"]):
                # posix_spawn has no chdir action on 3.11: extension code sees the session's cwd.
                os.chdir(ctx["cwd"])
            api = _load_extension(path)
        except Exception as exc:
            raise _RequestError(
                methods.ERROR_EXTENSION_LOAD,
                f"{type(exc).__name__}: {exc}",
                {"traceback": _format_exception(exc), "path": path},
            ) from exc
        self._api = api
        self._kind = "extension"
        return {
            "protocol_version": methods.PROTOCOL_VERSION,
            "generation": params.get("generation"),
            "pid": os.getpid(),
            **api._registrations(),
        }

    def _context(self, ctx: dict[str, Any], cancel: threading.Event) -> Context:
        return Context(
            cwd=str(ctx.get("cwd") or os.getcwd()),
            has_ui=bool(ctx.get("has_ui", False)),
            mode=str(ctx.get("mode") or "print"),
            signal=cancel,
        )

    def _dispatch_event(self, params: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        event = str(params.get("event") or "")
        payload = params.get("payload") or {}
        state = params.get("state") or hook_kinds.initial_state(event, payload)
        ctx = self._context(params.get("ctx") or {}, cancel)
        handlers: list[Callable[..., Any]] = (
            list(self._api._handlers.get(event, [])) if self._api else []
        )
        errors: list[dict[str, str]] = []
        stopped = False
        for index, handler in enumerate(handlers):
            view = Event(hook_kinds.handler_view(event, payload, state))
            try:
                result = _resolve(handler(view, ctx))
                state, stopped = hook_kinds.apply_result(event, state, view, result)
            except BaseException as exc:
                name = getattr(handler, "__qualname__", f"handler #{index + 1}")
                message = f"{event} handler {name} in {self._extension_path} failed: {type(exc).__name__}: {exc}"
                errors.append({"message": message, "traceback": _format_exception(exc)})
                state, stopped = hook_kinds.apply_error(event, state, message)
            if stopped:
                break
        return {"state": state, "stopped": stopped, "errors": errors}

    def _execute_tool(self, params: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        name = str(params.get("name") or "")
        arguments = params.get("params") or {}
        ctx = self._context(params.get("ctx") or {}, cancel)
        call_id = params.get("tool_call_id")
        if self._kind == "tools":
            from pi_sandbox.worker.builtin_tools import execute_tool

            def on_update(update: dict[str, Any]) -> None:
                self.notify(methods.TOOL_UPDATE, {"tool_call_id": call_id, "update": update})

            limits = params.get("limits") or {}
            return execute_tool(
                name,
                arguments,
                cwd=ctx.cwd,
                cancel=cancel,
                on_update=on_update,
                **{
                    k: v
                    for k, v in limits.items()
                    if k in ("default_timeout_s", "max_output_bytes", "max_output_lines")
                },
            )
        tool = self._api._tools.get(name) if self._api else None
        if tool is None:
            raise _RequestError(
                methods.ERROR_METHOD_NOT_FOUND, f"this extension has no tool {name!r}"
            )
        try:
            return _normalise_tool_result(_resolve(tool.execute(arguments, ctx)))
        except BaseException as exc:
            # The contract: an exception becomes an error result carrying the message.
            return {
                "content": [{"type": "text", "text": f"{type(exc).__name__}: {exc}"}],
                "details": {"traceback": _format_exception(exc)},
                "is_error": True,
            }


def _load_extension(path: str) -> ExtensionAPI:
    """Import the extension at ``path`` and run its factory ``extension(pi)``.

    Raises whatever the import or the factory raised; ``ImportError`` when ``path`` is
    neither a ``.py`` file nor a package directory, ``TypeError`` when the module has no
    callable ``extension``.
    """
    import importlib.util  # extension workers only; the tool worker never pays for it

    target = path
    search: list[str] | None = None
    if os.path.isdir(path):
        target = os.path.join(path, "__init__.py")
        search = [path]
        if not os.path.isfile(target):
            raise ImportError(f"{path} is a directory without __init__.py")
    elif not os.path.isfile(path):
        raise ImportError(f"no extension file at {path}")
    stem = os.path.basename(os.path.normpath(path)).removesuffix(".py")
    module_name = "pi_extension_" + "".join(c if c.isalnum() else "_" for c in stem)
    spec = importlib.util.spec_from_file_location(
        module_name, target, submodule_search_locations=search
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    factory = getattr(module, "extension", None)
    if not callable(factory):
        raise TypeError(f"{path} defines no extension(pi) function")
    api = ExtensionAPI()
    _resolve(factory(api))
    return api


def main() -> int:
    """Serve the channel on fd 3 until EOF or ``shutdown``; returns the exit status."""
    try:
        sock = socket.socket(fileno=methods.WORKER_FD)
    except OSError as exc:
        print(f"pi worker: no channel on fd {methods.WORKER_FD}: {exc}", file=sys.stderr)
        return 2
    # Only 0-2 and the channel may be open (DESIGN §6): whatever else a launcher or
    # bwrap let through (a descriptor the supervisor's process had inheritable, the
    # status or seccomp fds) is closed before any extension or tool code runs.
    os.closerange(methods.WORKER_FD + 1, _max_fd())
    import signal

    def on_sigterm(signum: int, frame: object) -> None:
        _kill_commands()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return WorkerRuntime(sock).serve()
    finally:
        _kill_commands()


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 1024)
    except (OSError, ValueError):
        return 65536


def _kill_commands() -> None:
    """Take running bash commands down with the worker (they run in their own sessions)."""
    tools = sys.modules.get("pi_sandbox.worker.builtin_tools")
    if tools is not None:
        tools.kill_running_commands()
