"""One MCP server's connection: its process (or HTTP session), the SDK client, its
state, respawns and the notices a misbehaving server earns (issue 19 §2).

States: ``connecting`` → ``connected``; a failed start or a lost connection makes it
``disconnected`` (the next call reconnects); after `MAX_SERVER_RESTARTS` failures
the server is ``disabled`` for the rest of the session, with one notice — the same
rule as extension workers (`worker_pool.MAX_EXTENSION_RESTARTS`). A call that runs
past the server's timeout kills the process (a hung server would otherwise hold its
sandbox) and counts as a failure. Nothing a server does raises into the session:
every failure becomes an error result or a notice.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import trio

from pi_sandbox.supervisor.mcp.config import McpServerConfig
from pi_sandbox.supervisor.mcp.stdio_process import StdioLaunch, StdioServerProcess

__all__ = ["MAX_SERVER_RESTARTS", "McpConnection", "ServerTool"]

MAX_SERVER_RESTARTS = 3
"""Failed starts or lost connections of one server per session before it is disabled."""

CONNECT_TIMEOUT_S = 30.0
"""Deadline for a server to answer ``initialize`` and its first listings (seconds)."""

_MAX_TOOLS = 1000
_MAX_PAGES = 20


@dataclass(frozen=True)
class ServerTool:
    """A tool a server offers (from ``tools/list``), as we keep it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)


Notify = Callable[[str, str], Awaitable[None]]  # (level, message)


class McpConnection:
    """A server of the session and its live client.

    Args:
        config: the validated entry.
        launch: builds the `StdioLaunch` for a new process (called at each start;
            None for remote servers).
        open_http: for remote servers, an async context manager factory giving the
            SDK's stream pair (through the egress proxy); None for stdio servers.
        notify: receives ``("warning" | "notice", text)`` for the user.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        launch: Callable[[], Awaitable[StdioLaunch]] | None,
        open_http: Callable[[], Any] | None = None,
        notify: Notify | None = None,
    ) -> None:
        self.config = config
        self._launch = launch
        self._open_http = open_http
        self._notify = notify
        self.state = "connecting"
        self.error: str | None = None
        self.failures = 0
        self.tools: list[ServerTool] = []
        self.instructions: str | None = None
        self.has_resources = False
        self.has_prompts = False
        self.server_name: str | None = None
        self.ready = trio.Event()  # the first attempt ended (either way)
        # Set once this connection's server was spawned (or could not be): the manager
        # imports the SDK only then, so that every server starts during the import.
        self.spawned = trio.Event()
        # Set by the manager once the SDK is imported; None: import it here.
        self.client_ready: trio.Event | None = None
        self.process: StdioServerProcess | None = None
        self._session: Any = None
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._lock = trio.Lock()
        self._bad_lines_reported = False
        self._closing = False
        self._relisting = False
        self._relisted = trio.Event()
        self._relist_again = False
        # Called (no arguments) after the tool list changed (`notifications/tools/list_changed`).
        self.on_tools_changed: Callable[[], None] | None = None
        self.calls = 0

    @property
    def name(self) -> str:
        return self.config.name

    # --- lifetime ------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Connect in the background (returns at once; `ready` is set when the first
        attempt ended)."""
        self._nursery = nursery
        nursery.start_soon(self._connect_once)

    async def _connect_once(self) -> None:
        async with self._lock:
            await self._connect_locked()
        self.ready.set()

    async def _connect_locked(self) -> None:
        assert self._nursery is not None
        if self.state == "disabled":
            return
        self.state = "connecting"
        try:
            await self._nursery.start(self._hold)
        except Exception as exc:  # a failed start is an outcome, not a crash
            if self._closing:
                return  # stopped while connecting (the session ends): nothing to report
            await self._failed(_describe(exc, self.process))
            return
        self.state = "connected"
        self.error = None

    async def _hold(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the process and the SDK session for one connection; after the
        handshake nothing it raises reaches the session's nursery."""
        started = False

        def mark() -> None:
            nonlocal started
            started = True
            task_status.started()

        try:
            await self._hold_inner(mark)
        except Exception as exc:
            self.spawned.set()  # never leave the manager's import barrier waiting
            if not started:
                raise
            if self.state == "connected":
                self.state = "disconnected"
                await self._failed(f"the connection was lost: {_describe(exc, None)[16:]}")
        finally:
            self.spawned.set()

    async def _hold_inner(self, started: Callable[[], None]) -> None:

        with trio.CancelScope() as scope:
            self._scope = scope
            if self._open_http is not None:
                self.spawned.set()
                await self._client_imported()
                from mcp import ClientSession

                async with (
                    self._open_http() as (read_stream, write_stream),
                    ClientSession(
                        read_stream,
                        write_stream,
                        logging_callback=self._on_log,
                        message_handler=self._on_message,
                    ) as session,
                ):
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        await self._handshake(session)
                    self._session = session
                    started()
                    await trio.sleep_forever()
                return
            assert self._launch is not None
            process = StdioServerProcess(await self._launch())
            self.process = process
            # A few messages of slack each way save a task switch per message; a
            # flooding server still blocks on its own pipe (bounded: 4 x 8 MiB lines).
            read_writer, read_stream = anyio.create_memory_object_stream[Any](4)
            write_stream, write_reader = anyio.create_memory_object_stream[Any](4)
            try:
                process.spawn()
            finally:
                self.spawned.set()
            try:
                # From here on the process is watched and always stopped and reaped.
                async with trio.open_nursery() as pipes:
                    pipes.start_soon(
                        lambda: process.serve(
                            read_writer,
                            write_reader,
                            on_bad_line=self._bad_line,
                            before_read=self._client_imported,
                        )
                    )
                    pipes.start_soon(self._watch_process, process, scope)
                    try:
                        # The server starts while the SDK is imported (usually it is).
                        await self._client_imported()
                        from mcp import ClientSession

                        async with ClientSession(
                            read_stream,
                            write_stream,
                            logging_callback=self._on_log,
                            message_handler=self._on_message,
                        ) as session:
                            with trio.fail_after(CONNECT_TIMEOUT_S):
                                await self._handshake(session)
                            self._session = session
                            started()
                            await trio.sleep_forever()
                    finally:
                        self._session = None
                        with contextlib.suppress(Exception):
                            await write_stream.aclose()
                        await process.aclose()
                        pipes.cancel_scope.cancel()
            finally:
                self._session = None
                if process.exited.is_set() and self.state == "connected":
                    self.state = "disconnected"

    async def _client_imported(self) -> None:
        if self.client_ready is not None:
            await self.client_ready.wait()
        else:
            import_client_now()

    async def _watch_process(self, process: StdioServerProcess, scope: trio.CancelScope) -> None:
        await process.exited.wait()
        if self.state == "connected":
            self.state = "disconnected"
            why = process.failure or _exit_text(process.returncode)
            await self._failed(f"the server stopped ({why})")
        scope.cancel()

    async def _handshake(self, session: Any) -> None:
        init = await session.initialize()
        self.instructions = init.instructions
        self.server_name = getattr(init.server_info, "name", None)
        capabilities = init.capabilities
        self.tools = await self._list_tools(session) if capabilities.tools is not None else []
        self.has_resources = capabilities.resources is not None
        self.has_prompts = capabilities.prompts is not None

    async def _list_tools(self, session: Any) -> list[ServerTool]:
        """Every page of ``tools/list`` (at most `_MAX_TOOLS` tools, `_MAX_PAGES` pages)."""
        from mcp_types import PaginatedRequestParams

        tools: list[ServerTool] = []
        cursor = None
        for _ in range(_MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listing = await session.list_tools(params=params)
            for tool in listing.tools:
                annotations = (
                    tool.annotations.model_dump(exclude_none=True) if tool.annotations else {}
                )
                tools.append(
                    ServerTool(
                        tool.name,
                        (tool.description or "")[:10_000],
                        dict(tool.input_schema or {}),
                        annotations,
                    )
                )
            cursor = listing.next_cursor
            if not cursor or len(tools) >= _MAX_TOOLS:
                break
        return tools[:_MAX_TOOLS]

    async def _failed(self, why: str) -> None:
        self.failures += 1
        self.error = why
        if self.failures > MAX_SERVER_RESTARTS:
            self.state = "disabled"
            await self._say(
                "warning",
                f"MCP server {self.name!r} disabled for this session after "
                f"{self.failures} failures: {why}",
            )
        else:
            if self.state != "disabled":
                self.state = "disconnected"
            await self._say("warning", f"MCP server {self.name!r}: {why}")

    async def _say(self, level: str, text: str) -> None:
        if self._notify is not None:
            with contextlib.suppress(Exception):
                await self._notify(level, text)

    def _bad_line(self, line: str) -> None:
        if not self._bad_lines_reported and self._nursery is not None:
            self._bad_lines_reported = True
            self._nursery.start_soon(
                self._say,
                "warning",
                f"MCP server {self.name!r} wrote output that is not MCP; it was dropped: "
                f"{line[:120]!r}",
            )

    async def _on_message(self, message: Any) -> None:
        """``notifications/tools/list_changed``: list the tools again (once at a time;
        announcements meanwhile are folded into the next listing)."""
        if type(message).__name__ != "ToolListChangedNotification" or self._nursery is None:
            return
        if self._relisting:
            self._relist_again = True
            return
        self._relisting = True
        self._relisted = trio.Event()
        self._nursery.start_soon(self._relist)

    async def _relist(self) -> None:
        try:
            while True:
                self._relist_again = False
                session = self._session
                if session is None or self.state != "connected":
                    return
                try:
                    with trio.fail_after(self.config.timeout_s):
                        self.tools = await self._list_tools(session)
                except Exception as exc:
                    await self._say(
                        "warning", f"MCP server {self.name!r}: tools/list failed: {exc}"
                    )
                    return
                if self.on_tools_changed is not None:
                    self.on_tools_changed()
                if not self._relist_again:
                    return
        finally:
            self._relisting = False
            self._relisted.set()

    async def tools_settled(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for a tool listing a ``list_changed`` announcement started:
        a call that changed the tools is answered once the new ones are registered."""
        if self._relisting:
            with trio.move_on_after(timeout_s):
                await self._relisted.wait()

    async def _on_log(self, params: Any) -> None:
        return None  # server logs are not shown (pi appends them to mcp.log)

    async def aclose(self) -> None:
        """Stop the connection (process: stdin closed, SIGTERM, SIGKILL)."""
        self._closing = True
        if self._scope is not None:
            self._scope.cancel()
        if self.process is not None:
            await self.process.aclose()
        if self.state != "disabled":
            self.state = "stopped"

    def kill(self) -> None:
        """SIGKILL the server at once (a hung call)."""
        if self.process is not None:
            self.process.kill()

    # --- requests ------------------------------------------------------------------

    async def _live_session(self) -> Any:
        async with self._lock:
            if self._session is not None and self.state == "connected":
                return self._session
            if self.state == "disabled":
                raise McpUnavailable(
                    f"MCP server {self.name!r} is disabled for this session: {self.error}"
                )
            await self._connect_locked()
            if self._session is None:
                raise McpUnavailable(f"MCP server {self.name!r} is not connected: {self.error}")
            return self._session

    async def request(self, what: str, call: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run ``call(session)`` with the server's timeout; reconnects first if needed.

        Raises:
            McpUnavailable: disabled, cannot connect, the call timed out (the server is
                killed) or the connection was lost during it.
            mcp.MCPError: the server answered with a JSON-RPC error.
        """
        from mcp import MCPError

        session = await self._live_session()
        self.calls += 1
        try:
            with trio.fail_after(self.config.timeout_s):
                return await call(session)
        except trio.TooSlowError:
            self.kill()
            await self._failed(f"{what} timed out after {self.config.timeout_s:g} s")
            raise McpUnavailable(
                f"MCP server {self.name!r}: {what} timed out after {self.config.timeout_s:g} s; "
                "the server was stopped"
            ) from None
        except MCPError as exc:
            process = self.process
            if process is None or "Connection closed" not in str(exc):
                raise
            # The server went away mid-call: say so, with how it ended.
            with trio.move_on_after(2):
                await process.exited.wait()
            how = process.failure or _exit_text(process.returncode)
            raise McpUnavailable(
                f"MCP server {self.name!r}: the server stopped during {what} ({how}); "
                "it is started again on the next call"
            ) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise McpUnavailable(
                f"MCP server {self.name!r}: the connection was lost during {what}"
                + (f" ({self.process.failure})" if self.process and self.process.failure else "")
            ) from exc
        except Exception as exc:
            if self.process is not None and (self.process.exited.is_set() or self.process.failure):
                raise McpUnavailable(
                    f"MCP server {self.name!r}: the server stopped during {what}"
                    + (f" ({self.process.failure})" if self.process.failure else "")
                ) from exc
            raise McpUnavailable(
                f"MCP server {self.name!r}: {what} failed: {type(exc).__name__}: {exc}"[:2000]
            ) from exc


def import_client_now() -> None:
    """Import the ``mcp`` SDK (a second or more of CPU) in this thread.

    Never in a worker thread: the event loop's thread goes on importing modules
    lazily, and two threads importing packages with import cycles deadlock
    (``_DeadlockError``, seen with a thread that imported ``mcp``).
    """
    importlib.import_module("mcp")


class McpUnavailable(Exception):
    """A request could not be answered by the server (never the server's own error)."""


def _exit_text(code: int | None) -> str:
    """How a server process ended; bwrap reports a signal as 128 + N."""
    if code is None:
        return "connection closed"
    if code < 0:
        return f"signal {-code}"
    if code > 128:
        return f"signal {code - 128}"
    return f"exit status {code}"


def _describe(exc: BaseException, process: StdioServerProcess | None) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, trio.TooSlowError):
        text = f"no answer to initialize within {CONNECT_TIMEOUT_S:g} s"
    elif process is not None and process.returncode is not None:
        # It ended before the handshake (a bad interpreter line, a crash at import):
        # its exit status and stderr say why, not the SDK's error about the stream.
        text = f"the server exited with status {process.returncode} before the MCP handshake"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if process is not None:
        if process.failure:
            text += f" ({process.failure})"
        tail = process.log_tail(600).strip()
        if tail:
            text += f"\n--- server stderr ---\n{tail}"
    return f"cannot connect: {text}"
