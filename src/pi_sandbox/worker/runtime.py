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
import sys
import threading
import time

from pi_sandbox.protocol import hook_kinds, methods
from pi_sandbox.protocol.framing import FrameDecoder, FrameError, encode_frame
from pi_sandbox.worker.api import (
    CapabilityError,
    CommandContext,
    Context,
    Event,
    ExtensionAPI,
    Generation,
    HostError,
    ObserveOnly,
    StaleContextError,
    _check_json,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    import socket
    from collections.abc import Callable
    from typing import Any

__all__ = ["WorkerRuntime", "main"]

_RECV_BYTES = 65536
_BUS_QUEUE = 1000
# How long an ended generation's worker waits at shutdown for the extension's own
# threads to end (seconds; below the supervisor's retire grace, `STALE_RETIRE_GRACE_S`).
STALE_THREAD_GRACE_S = 2.0
_BUS_BYTES = 32 * 2**20


def _bus_size(data: Any) -> int:
    """Roughly the bytes ``data`` holds (its JSON length; strings by length)."""
    if isinstance(data, str):
        return len(data) + 64
    import json

    try:
        return len(json.dumps(data)) + 64
    except (TypeError, ValueError):
        return 64


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


def _check_observed(event: str, state: dict[str, Any], view: Event, result: Any) -> None:
    """Raise when an ``observe_only`` handler did more than look (issue 20 target 2):
    it returned a value, or (``tool_call``) changed ``event.input``. The supervisor
    checks the same on the worker's combined result; this names the handler."""
    if result is not None:
        raise hook_kinds.HandlerResultError(
            f"an observe_only {event} handler returned {type(result).__name__} (must be None)"
        )
    if event == "tool_call" and view.get("input") != state["input"]:
        raise hook_kinds.HandlerResultError("an observe_only tool_call handler changed event.input")


def _format_exception(exc: BaseException) -> str:
    import traceback  # ~9 ms: paid on the first failure, not at every worker start

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _normalise_tool_result(value: Any) -> dict[str, Any]:
    """Turn what an extension's ``execute`` returned into the wire tool result shape."""
    if isinstance(value, str):
        return {
            "content": [{"type": "text", "text": value}],
            "details": {},
            "is_error": False,
            "terminate": False,
        }
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
    return {
        "content": content,
        "details": details,
        "is_error": bool(is_error),
        "terminate": bool(value.get("terminate", False)),
    }


class _ThreadPool:
    """Runs each request on a thread of its own, reusing idle threads: starting a
    thread per request cost ~0.1 ms of every hook round trip. A hung handler keeps
    its thread; the next request then gets a new one (never a queue behind it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[threading.Event, list[Any]]] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            slot = self._idle.pop() if self._idle else None
        if slot is not None:
            slot[1][:] = [fn, args]
            slot[0].set()
            return
        threading.Thread(
            target=self._loop, args=(fn, args), name="pi-worker-request", daemon=True
        ).start()

    def _loop(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        wake = threading.Event()
        work: list[Any] = []
        while True:
            fn(*args)
            wake.clear()
            with self._lock:
                if len(self._idle) >= 8:
                    return  # enough idle threads already
                self._idle.append((wake, work))
            wake.wait()
            fn, args = work


class _Host:
    """The extension API's way to the supervisor: ``host/call`` requests from any
    thread (each waits for its own answer), notifications, the current generation."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self._runtime = runtime
        self._ids = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, list[Any]] = {}
        self.generation = Generation()

    def call(self, op: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        """Send ``host/call`` and block this thread until the answer comes.

        Raises:
            StaleContextError / CapabilityError / HostError: the supervisor's refusal.
        """
        self.generation.check(op)
        if threading.current_thread() is threading.main_thread():
            raise HostError(f"{op}: not available while the extension is being loaded")
        with self._lock:
            self._ids += 1
            request_id = self._ids
            slot: list[Any] = [threading.Event(), None]
            self._waiting[request_id] = slot
        try:
            self._runtime.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": methods.HOST_CALL,
                    "params": {"op": op, "args": args},
                },
                strict=True,
            )
        except TypeError as exc:
            with self._lock:
                self._waiting.pop(request_id, None)
            raise TypeError(f"{op}: {exc}") from None
        slot[0].wait(timeout)
        with self._lock:
            self._waiting.pop(request_id, None)
        response = slot[1]
        if response is None:
            raise HostError(f"{op}: no answer from the supervisor")
        error = response.get("error")
        if error is None:
            return response.get("result")
        code = error.get("code")
        message = str(error.get("message") or "")
        if code == methods.ERROR_STALE:
            self.generation.end()
            raise StaleContextError(message)
        if code == methods.ERROR_CAPABILITY:
            raise CapabilityError(message)
        if code == methods.ERROR_INVALID_PARAMS:
            raise ValueError(message)
        raise HostError(message)

    def answer(self, response: dict[str, Any]) -> None:
        """Deliver a supervisor response to the thread waiting for it."""
        with self._lock:
            slot = self._waiting.get(response.get("id"))  # type: ignore[arg-type]
        if slot is not None:
            slot[1] = response
            slot[0].set()

    def wake_all(self) -> None:
        """The channel is gone: every waiting call fails."""
        with self._lock:
            slots = list(self._waiting.values())
        for slot in slots:
            slot[0].set()

    def registrations_changed(self) -> None:
        api = self._runtime._api
        if api is not None:
            self._runtime.notify(methods.REGISTRATIONS_UPDATE, api._registrations())

    def bus_emit(self, channel: str, data: Any) -> None:
        try:
            self._runtime.send(
                {
                    "jsonrpc": "2.0",
                    "method": methods.BUS_EMIT,
                    "params": {"channel": channel, "data": data},
                },
                strict=True,
            )
        except TypeError as exc:
            raise TypeError(f"pi.events.emit({channel!r}): {exc}") from None


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
        self._host = _Host(self)
        self._threads = _ThreadPool()
        self._bus_queue: Any = None
        self._bus_dropped = False
        self._bus_bytes = 0
        self._module: Any = None
        self._capabilities: dict[str, bool] = {}
        self._trust: str | None = None

    # --- channel -------------------------------------------------------------------------

    def send(self, message: dict[str, Any], *, strict: bool = False) -> None:
        """Send one frame; a broken channel is ignored (the supervisor is gone or killed us).

        Raises:
            TypeError: ``strict`` and the message is not JSON (NaN, a set, bytes) or is
                larger than a frame: an extension's own call, which must fail at once
                rather than wait for an answer to a request never sent.
        """
        try:
            frame = encode_frame(message)
        except (FrameError, TypeError, ValueError) as exc:
            if strict:
                raise TypeError(f"arguments are not sendable as JSON: {exc}") from None
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
                self._host.wake_all()
                return 0
            try:
                messages = self._decoder.feed(data)
            except FrameError as exc:
                print(f"pi worker: protocol error from supervisor: {exc}", file=sys.stderr)
                self._host.wake_all()
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
        if method is None:
            if request_id is not None:
                self._host.answer(message)  # the answer to one of our host/call requests
            return
        if method == methods.GENERATION_END:
            self._host.generation.end()
            return
        if method == methods.BUS_DELIVER:
            self._deliver_bus(params)
            return
        if request_id is None:
            return  # unknown notifications: ignored
        if method in (methods.INITIALIZE, methods.SHUTDOWN):
            # In order, on the reading thread: nothing else may run before initialize finishes.
            if method == methods.SHUTDOWN:
                self._let_stale_threads_report()
            self._run_request(request_id, method, params)
            if method == methods.SHUTDOWN:
                self._stopping = True
            return
        cancel = threading.Event()
        with self._state_lock:
            self._cancels[request_id] = cancel
        self._threads.submit(self._run_request, request_id, method, params, cancel)

    def _let_stale_threads_report(self) -> None:
        """Before an ended generation's worker exits, give the extension's own threads
        up to `STALE_THREAD_GRACE_S` to end: one that keeps using its stale ``ctx``
        dies of `StaleContextError` at its next use, and that error (a ``log`` the
        supervisor shows) is the report issue 5 case 3 promises. Without the wait the
        report depended on the thread being scheduled before the shutdown arrived
        (issue 13 §7). A thread that never touches ``ctx`` is simply outwaited.
        Only the runtime's own threads are named ``pi-worker-…``."""
        if self._host.generation.alive:
            return
        deadline = time.monotonic() + STALE_THREAD_GRACE_S
        current = threading.current_thread()
        while time.monotonic() < deadline:
            if not any(
                thread is not current
                and thread is not threading.main_thread()
                and not thread.name.startswith(("pi-worker-", "pi-egress-relay"))
                and thread.is_alive()
                for thread in threading.enumerate()
            ):
                return
            time.sleep(0.01)

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
        else:
            # ...but its end is reported: the supervisor kills a worker whose
            # cancelled handler does not return within a grace period (issue 5).
            self.notify(methods.CANCELLED, {"id": request_id})

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
        if method == methods.COMMAND_EXECUTE:
            return self._execute_command(params, cancel)
        if method == methods.SESSION_CALLBACK:
            return self._session_callback(params, cancel)
        if method == methods.PROVIDER_STREAM:
            return self._provider_stream(params, cancel, request_id)
        if method == methods.CODEMODE_RUN and self._kind == "codemode":
            from pi_sandbox.worker.codemode_runner import run_script

            return run_script(self._host, params, cancel)
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
        if kind == "codemode":
            # issue 19: a fresh worker per codemode script; it registers nothing and
            # reaches tools only through host/call (worker/codemode_runner.py).
            self._kind = "codemode"
            self._host.generation.number = int(params.get("generation") or 1)
            return {
                "protocol_version": methods.PROTOCOL_VERSION,
                "generation": params.get("generation"),
                "pid": os.getpid(),
                "tools": [],
                "events": [],
            }
        if kind != "extension":
            raise _RequestError(methods.ERROR_INVALID_PARAMS, f"unknown worker kind {kind!r}")
        path = str(params.get("path") or "")
        self._extension_path = path
        self._host.generation.number = int(params.get("generation") or 1)
        ctx = params.get("ctx") or {}
        self._capabilities = {str(k): bool(v) for k, v in (ctx.get("capabilities") or {}).items()}
        self._trust = ctx.get("trust")
        _install_thread_excepthook(self, path)
        try:
            if ctx.get("cwd") and os.path.isdir(ctx["cwd"]):
                # posix_spawn has no chdir action on 3.11: extension code sees the session's cwd.
                os.chdir(ctx["cwd"])
            api, self._module = _load_extension(path, self._host)
        except BaseException as exc:
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

    def _context(
        self, ctx: dict[str, Any], cancel: threading.Event, cls: type[Context] = Context
    ) -> Context:
        if "trust" in ctx:
            # The decision can change after load (two-phase start, /trust): every
            # event and command carries the current one (issue 6).
            self._trust = ctx.get("trust")
        return cls(
            cwd=str(ctx.get("cwd") or os.getcwd()),
            has_ui=bool(ctx.get("has_ui", False)),
            mode=str(ctx.get("mode") or "print"),
            signal=cancel,
            host=self._host,
            generation=self._host.generation,
            capabilities=self._capabilities,
            trust=self._trust,
        )

    def _execute_command(self, params: dict[str, Any], cancel: threading.Event) -> Any:
        name = str(params.get("name") or "")
        command = self._api._commands.get(name) if self._api else None
        if command is None:
            raise _RequestError(
                methods.ERROR_METHOD_NOT_FOUND, f"this extension has no command {name!r}"
            )
        ctx = self._context(params.get("ctx") or {}, cancel, CommandContext)
        try:
            _resolve(command["handler"](str(params.get("args") or ""), ctx))
        except BaseException as exc:
            raise _RequestError(
                methods.ERROR_HANDLER,
                f"/{name} in {self._extension_path} failed: {type(exc).__name__}: {exc}",
                {"traceback": _format_exception(exc)},
            ) from exc
        return {}

    def _drain_provider_stream(
        self, items: Any, request_id: Any, cancel: threading.Event
    ) -> dict[str, Any]:
        """A ``stream`` generator: each ``str`` it yields is text, sent at once as a
        ``provider/delta`` notification; each ``dict`` is merged into the answer
        (``tool_calls``, ``usage``, ``stop_reason``). The answer's text is the
        yielded text unless a dict gives ``text``."""
        text: list[str] = []
        answer: dict[str, Any] = {}
        for item in items:
            if cancel.is_set():
                items.close()
                break
            if isinstance(item, str):
                if item:
                    text.append(item)
                    self.notify(methods.PROVIDER_DELTA, {"id": request_id, "delta": item})
            elif isinstance(item, dict):
                answer.update(item)
            else:
                raise TypeError(f"yielded {type(item).__name__}; yield text (str) or a dict")
        answer.setdefault("text", "".join(text))
        answer["streamed"] = bool(text)
        return answer

    def _provider_stream(
        self, params: dict[str, Any], cancel: threading.Event, request_id: Any = None
    ) -> Any:
        """One model request to this extension's provider (issue 16): its ``stream``
        function runs here, in the extension's worker and sandbox."""
        name = str(params.get("provider") or "")
        stream = self._api._provider_streams.get(name) if self._api else None
        if stream is None:
            raise _RequestError(
                methods.ERROR_METHOD_NOT_FOUND, f"this extension has no streaming provider {name!r}"
            )
        ctx = self._context(params.get("ctx") or {}, cancel)
        request = {
            key: params.get(key)
            for key in ("model", "system_prompt", "messages", "tools", "thinking_level")
        }
        try:
            result = _resolve(stream(request, ctx))
            if hasattr(result, "__next__"):
                result = self._drain_provider_stream(result, request_id, cancel)
            if isinstance(result, str):
                result = {"text": result}
            if not isinstance(result, dict):
                raise TypeError(f"must return a string or a dict, not {type(result).__name__}")
            _check_json("the result", result)
        except BaseException as exc:
            raise _RequestError(
                methods.ERROR_HANDLER,
                f"provider {name} in {self._extension_path} failed: {type(exc).__name__}: {exc}",
                {"traceback": _format_exception(exc)},
            ) from exc
        return result

    def _session_callback(self, params: dict[str, Any], cancel: threading.Event) -> Any:
        name = str(params.get("callback") or "")
        target: Any = self._module
        for part in name.split("."):
            target = getattr(target, part, None)
        if not callable(target):
            raise _RequestError(
                methods.ERROR_METHOD_NOT_FOUND,
                f"with_session callback {name!r} is not a function of {self._extension_path}",
            )
        ctx = self._context(params.get("ctx") or {}, cancel, CommandContext)
        try:
            _resolve(target(ctx))
        except BaseException as exc:
            raise _RequestError(
                methods.ERROR_HANDLER,
                f"with_session callback {name} in {self._extension_path} failed: "
                f"{type(exc).__name__}: {exc}",
                {"traceback": _format_exception(exc)},
            ) from exc
        return {}

    def _deliver_bus(self, params: dict[str, Any]) -> None:
        """Queue an event-bus message for this extension's subscribers. One delivery
        thread per worker keeps them in order; at most `_BUS_QUEUE` wait, more are
        dropped (an emit loop between handlers must not grow the worker without
        bound), and the first drop is reported."""
        if self._api is None:
            return
        channel = str(params.get("channel") or "")
        if not self._api.events.handlers(channel):
            return
        with self._state_lock:
            if self._bus_queue is None:
                import queue

                self._bus_queue = queue.Queue(maxsize=_BUS_QUEUE)
                threading.Thread(target=self._bus_loop, name="pi-worker-bus", daemon=True).start()
        data = params.get("data")
        size = _bus_size(data)
        try:
            with self._state_lock:
                if self._bus_bytes + size > _BUS_BYTES:
                    raise OverflowError
                self._bus_queue.put_nowait((channel, data, size))
                self._bus_bytes += size
        except Exception:  # queue.Full, or the byte budget
            if not self._bus_dropped:
                self._bus_dropped = True
                self.notify(
                    methods.LOG,
                    {
                        "level": "error",
                        "message": f"pi.events: more than {_BUS_QUEUE} messages or "
                        f"{_BUS_BYTES // 2**20} MiB waiting for {self._extension_path}; "
                        "messages are being dropped",
                    },
                )

    def _bus_loop(self) -> None:
        assert self._bus_queue is not None
        while True:
            channel, data, size = self._bus_queue.get()
            with self._state_lock:
                self._bus_bytes -= size
            handlers = self._api.events.handlers(channel) if self._api else []
            for handler in handlers:
                try:
                    _resolve(handler(data))
                except BaseException as exc:
                    self.notify(
                        methods.LOG,
                        {
                            "level": "error",
                            "message": f"pi.events handler for {channel!r} in "
                            f"{self._extension_path} failed: {type(exc).__name__}: {exc}\n"
                            + _format_exception(exc)[-4000:],
                        },
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
                if isinstance(handler, ObserveOnly):
                    _check_observed(event, state, view, result)
                state, stopped = hook_kinds.apply_result(event, state, view, result)
            except BaseException as exc:
                name = (
                    handler.name
                    if isinstance(handler, ObserveOnly)
                    else getattr(handler, "__qualname__", f"handler #{index + 1}")
                )
                message = f"{event} handler {name} in {self._extension_path} failed: {type(exc).__name__}: {exc}"
                errors.append({"message": message, "traceback": _format_exception(exc)})
                if event == "tool_call":
                    # Fail-closed, but later handlers still see the call: the supervisor
                    # blocks it once every handler ran (issue 5 case 4).
                    continue
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
                exclusions=[str(p) for p in params.get("exclusions") or ()],
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


def _install_thread_excepthook(runtime: WorkerRuntime, path: str) -> None:
    """Report exceptions that end an extension's own threads (a background task using
    a stale ``ctx``) as ``log`` errors, which the supervisor shows (issue 5 case 3)."""

    def hook(args: Any) -> None:
        exc = args.exc_value
        if exc is None or isinstance(exc, SystemExit):
            return
        runtime.notify(
            methods.LOG,
            {
                "level": "error",
                "message": f"a thread of {path} died: {type(exc).__name__}: {exc}\n"
                + _format_exception(exc)[-4000:],
            },
        )

    threading.excepthook = hook


def _load_extension(path: str, host: Any = None) -> tuple[ExtensionAPI, Any]:
    """Import the extension at ``path`` and run its factory ``extension(pi)``;
    returns the bound API and the module (``with_session`` callbacks are found in it).

    Raises whatever the import or the factory raised; ``ImportError`` when ``path`` is
    neither a ``.py`` file nor a package directory, ``TypeError`` when the module has no
    callable ``extension``.
    """
    try:
        # The import system's own functions (what importlib.util re-exports), loaded
        # before any code runs: importlib.util itself would import contextlib,
        # warnings… at every extension worker's start (issue 20 §5).
        from _frozen_importlib import module_from_spec
        from _frozen_importlib_external import spec_from_file_location
    except ImportError:  # not CPython
        from importlib.util import module_from_spec, spec_from_file_location

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
    spec = spec_from_file_location(module_name, target, submodule_search_locations=search)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    factory = getattr(module, "extension", None)
    if not callable(factory):
        raise TypeError(f"{path} defines no extension(pi) function")
    api = ExtensionAPI(host, host.generation if host is not None else None)
    _resolve(factory(api))
    api._bind()
    return api, module


def main() -> int:
    """Serve the channel on fd 3 until EOF or ``shutdown``; returns the exit status."""
    try:
        # The C socket type: the same recv/sendall without socket.py and selectors
        # (part of every worker's start, issue 20 §5).
        import _socket

        sock = _socket.socket(fileno=methods.WORKER_FD)
    except OSError as exc:
        print(f"pi worker: no channel on fd {methods.WORKER_FD}: {exc}", file=sys.stderr)
        return 2
    # Only 0-2 and the channel may be open (DESIGN §6): whatever else a launcher or
    # bwrap let through (a descriptor the supervisor's process had inheritable, the
    # status or seccomp fds) is closed before any extension or tool code runs.
    os.closerange(methods.WORKER_FD + 1, _max_fd())
    import _signal as signal  # the C module: signal.py builds its enums at import

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
    """Take running bash commands and ``pi.exec`` processes down with the worker (they
    run in their own sessions)."""
    tools = sys.modules.get("pi_sandbox.worker.builtin_tools")
    if tools is not None:
        tools.kill_running_commands()
    import signal

    from pi_sandbox.worker.api import RUNNING_EXEC_GROUPS

    for group in list(RUNNING_EXEC_GROUPS):
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
