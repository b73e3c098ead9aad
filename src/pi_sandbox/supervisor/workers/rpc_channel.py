"""The supervisor's end of one worker channel: requests with deadlines, strict validation.

One ``RpcChannel`` wraps a trio socket stream. ``run()`` reads frames, validates each
against ``protocol.messages`` and wakes the request waiting for it; anything
malformed raises ``ProtocolError`` out of ``run()`` and the owner kills the worker.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
import trio

from pi_sandbox.errors import ProtocolError, RemoteError, WorkerCrashedError, WorkerTimeoutError
from pi_sandbox.protocol import methods
from pi_sandbox.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    encode_frame,
)
from pi_sandbox.protocol.messages import (
    WORKER_MESSAGE,
    NotificationMessage,
    RequestMessage,
    ResponseMessage,
)

__all__ = ["NotificationHandler", "RequestHandler", "RpcChannel"]

NotificationHandler = Callable[[NotificationMessage], Awaitable[None]]
RequestHandler = Callable[[RequestMessage], None]
"""Called (synchronously) for each valid worker request; it must schedule the work
and answer later with `RpcChannel.respond`, never block the reader."""

_ANSWERED_KEPT = 1024

_FAIR_READS = 16
"""Frames read in a row without waiting before the reader yields to other tasks
(the direct reads of `RpcChannel.run` skip trio's per-call yield; issue 20)."""


class _Pending:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: ResponseMessage | BaseException | None = None


class RpcChannel:
    """JSON-RPC over one stream. ``name`` appears in every error message.

    Args:
        stream: the connected trio stream (supervisor end of the socketpair).
        name: human-readable worker name for errors, e.g. ``"extension guard.py"``.
        on_notification: awaited for each valid notification, in arrival order.
        on_request: called for each valid worker request (``host/call``); without
            it a request is a protocol error.
        max_frame_bytes: frame size limit in both directions (DESIGN §3: 8 MiB).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        name: str,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.name = name
        self._stream = stream
        self._on_notification = on_notification
        self._on_request = on_request
        # Ids answered recently: a second answer to one of them is a protocol error
        # (a late answer to a request that timed out is not: it is dropped).
        self._answered: dict[int, None] = {}
        # Cancelled requests whose handler has not reported its end ($/cancelled).
        self._cancelling: dict[int, trio.Event] = {}
        self._max_frame_bytes = max_frame_bytes
        self._send_lock = trio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._closed_reason: BaseException | None = None
        # A socket stream is written and read on its descriptor directly (non-blocking,
        # as trio set it): trio's own send/receive yield to the scheduler around each
        # call, several run-loop passes per hook round trip (issue 20 target 2).
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None

    @property
    def closed(self) -> bool:
        """True once the channel broke or was closed; every later request fails at once."""
        return self._closed_reason is not None

    async def run(self) -> None:
        """Read until EOF; fail all pending requests when the channel ends.

        Raises:
            ProtocolError: the worker sent an invalid frame or message.
        """
        decoder = FrameDecoder(max_frame_bytes=self._max_frame_bytes)
        try:
            in_a_row = 0
            while True:
                try:
                    if self._socket is None:
                        data = await self._stream.receive_some(65536)
                    else:
                        data = await self._receive_direct(in_a_row)
                        if data is None:
                            in_a_row = 0
                            continue
                        in_a_row += 1
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._close(WorkerCrashedError(f"{self.name}: channel broke ({exc})"))
                    return
                if not data:
                    self._close(WorkerCrashedError(f"{self.name}: worker closed its channel"))
                    return
                try:
                    frames = decoder.feed(data)
                except FrameError as exc:
                    raise ProtocolError(f"{self.name}: {exc}") from exc
                for frame in frames:
                    await self._dispatch(frame)
        except BaseException as exc:
            self._close(
                exc
                if isinstance(exc, ProtocolError)
                else WorkerCrashedError(
                    f"{self.name}: channel reader stopped ({type(exc).__name__})"
                )
            )
            raise

    async def _receive_direct(self, in_a_row: int) -> bytes | None:
        """Read what the socket has (``b""`` at EOF), or wait until it is readable and
        return None; yields to other tasks after `_FAIR_READS` reads in a row.

        Raises:
            trio.BrokenResourceError: the read failed (reset, bad descriptor).
            trio.ClosedResourceError: the channel was closed while waiting.
        """
        assert self._socket is not None
        if in_a_row >= _FAIR_READS:
            await trio.lowlevel.checkpoint()
        try:
            return os.read(self._socket.fileno(), 65536)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(self._socket)
            return None
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        try:
            message = WORKER_MESSAGE.validate_python(frame)
        except pydantic.ValidationError as exc:
            summary = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<message>'}: {err['msg']}"
                for err in exc.errors()[:5]
            )
            raise ProtocolError(f"{self.name}: invalid message: {summary}") from exc
        if isinstance(message, ResponseMessage):
            pending = self._pending.get(message.id)
            if pending is None or pending.response is not None:
                if message.id in self._answered or (
                    pending is not None and pending.response is not None
                ):
                    raise ProtocolError(
                        f"{self.name}: answered request {message.id} more than once"
                    )
                return  # the request timed out or was cancelled; a late answer is dropped
            pending.response = message
            pending.done.set()
            self._answered[message.id] = None
            while len(self._answered) > _ANSWERED_KEPT:
                del self._answered[next(iter(self._answered))]
            return
        if isinstance(message, RequestMessage):
            if self._on_request is None:
                raise ProtocolError(f"{self.name}: sent a request ({message.method})")
            self._on_request(message)
            return
        if self._on_notification is not None:
            await self._on_notification(message)

    def _close(self, reason: BaseException) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for event in self._cancelling.values():
            event.set()
        self._cancelling.clear()
        for pending in self._pending.values():
            if pending.response is None:
                pending.response = self._closed_reason
            pending.done.set()

    async def send(self, message: dict[str, Any]) -> None:
        """Send one frame.

        Raises:
            WorkerCrashedError: the channel is closed or broke.
            ProtocolError: the message is larger than the frame limit.
        """
        if self._closed_reason is not None:
            raise WorkerCrashedError(f"{self.name}: channel is closed") from self._closed_reason
        try:
            frame = encode_frame(message, max_frame_bytes=self._max_frame_bytes)
        except FrameError as exc:
            raise ProtocolError(f"{self.name}: outgoing {exc}") from exc
        if self._socket is not None and not self._send_lock.locked():
            # Direct write, no yield: taking the lock without waiting keeps frames whole
            # (nothing else writes until it is released); what the socket does not take
            # at once is sent the ordinary way, still under the lock.
            self._send_lock.acquire_nowait()
            try:
                try:
                    written = os.write(self._socket.fileno(), frame)
                except BlockingIOError:
                    written = 0
                if written < len(frame):
                    await self._stream.send_all(memoryview(frame)[written:])
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._close(WorkerCrashedError(f"{self.name}: channel broke while sending ({exc})"))
                raise WorkerCrashedError(f"{self.name}: channel broke while sending") from exc
            finally:
                self._send_lock.release()
            return
        async with self._send_lock:
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._close(WorkerCrashedError(f"{self.name}: channel broke while sending ({exc})"))
                raise WorkerCrashedError(f"{self.name}: channel broke while sending") from exc

    async def respond(
        self, request_id: int, *, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        """Answer a worker request: ``result``, or ``error`` (``{"code", "message"}``).
        A worker that is gone is not an error here (its request dies with it)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        try:
            await self.send(message)
        except WorkerCrashedError:
            pass
        except ProtocolError as exc:
            # The result does not fit in a frame: the worker gets an error instead.
            with contextlib.suppress(WorkerCrashedError, ProtocolError):
                await self.send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {"code": methods.ERROR_HOST, "message": str(exc)[:500]},
                    }
                )

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification; a closed channel is ignored."""
        with contextlib.suppress(WorkerCrashedError, ProtocolError):
            await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> Any:
        """Send a request and wait for its result.

        If the deadline passes or the caller is cancelled, ``$/cancel`` is sent and the
        late answer, if any, is dropped.

        Raises:
            WorkerTimeoutError: no answer within ``timeout_s`` seconds.
            WorkerCrashedError: the channel closed before the answer came.
            RemoteError: the worker answered with an error (``remote_traceback`` set).
        """
        request_id = next(self._ids)
        pending = _Pending()
        self._pending[request_id] = pending
        try:
            await self.send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
            with trio.move_on_after(timeout_s):
                await pending.done.wait()
            if not pending.done.is_set():
                await self._send_cancel(request_id)
                raise WorkerTimeoutError(
                    f"{self.name}: {method} got no answer within {timeout_s:g} s"
                )
        except trio.Cancelled:
            await self._send_cancel(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)
        response = pending.response
        if isinstance(response, BaseException):
            raise response
        assert response is not None
        if response.error is not None:
            data = response.error.data or {}
            raise RemoteError(
                f"{self.name}: {response.error.message}",
                code=response.error.code,
                remote_traceback=str(data.get("traceback", "")),
            )
        return response.result

    def cancel_finished(self, request_id: int) -> None:
        """The worker reported (``$/cancelled``) that a cancelled request's handler returned."""
        event = self._cancelling.pop(request_id, None)
        if event is not None:
            event.set()

    async def wait_cancels(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` seconds for every cancelled request's handler to
        return; True when they all did (or the channel closed), False otherwise."""
        with trio.move_on_after(grace_s):
            for event in list(self._cancelling.values()):
                await event.wait()
            return True
        return self.closed

    async def _send_cancel(self, request_id: int) -> None:
        if self.closed:
            return
        self._cancelling[request_id] = trio.Event()
        while len(self._cancelling) > _ANSWERED_KEPT:
            del self._cancelling[next(iter(self._cancelling))]
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                await self.send(
                    {"jsonrpc": "2.0", "method": methods.CANCEL, "params": {"id": request_id}}
                )
            except (WorkerCrashedError, ProtocolError):
                pass

    async def aclose(self, reason: BaseException | None = None) -> None:
        """Close the stream; pending requests fail with ``reason`` (default: a
        ``WorkerCrashedError`` saying the supervisor closed the channel)."""
        self._close(reason or WorkerCrashedError(f"{self.name}: channel closed by the supervisor"))
        await self._stream.aclose()
