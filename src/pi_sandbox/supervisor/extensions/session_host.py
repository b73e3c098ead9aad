"""The extension runtime's supervisor side (issue 5, DESIGN §3–§5).

``SessionHost`` sits between the agent loop, the worker pool and the user:

- answers every ``host/call`` an extension makes (``send_message``,
  ``set_active_tools``, ``ctx.ui.*``, ``ctx.session_manager.*``, ``ctx.new_session``
  …), checking the caller's generation (stale callers get ``ERROR_STALE`` and the
  drop is reported) and the policy's capabilities (refusals are audited);
- routes the inter-extension event bus (``pi.events``) to the current generation;
- runs prompts one at a time (``submit``): ``/commands`` first (duplicates as
  ``name:1``/``name:2``), then the ``input`` event, then the agent loop; queued
  follow-ups and triggered turns after it; a deferred ``request_reload`` once the
  agent settles, then ``agent_settled``;
- replaces the generation: reload, new session, fork, switch (``session_shutdown``
  with a bounded wait, ``generation/end`` to the old workers, which are stopped once
  the command that asked has returned, new workers, ``session_start``,
  ``resources_discover``, ``with_session`` in the new worker);
- keeps the active tool set (``--tools``/``--no-tools`` filter everything, also
  tools registered later) and builds the system prompt from the active tools'
  snippets and guidelines for every request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.errors import (
    HostCallError,
    PiSandboxError,
    PolicyError,
    ProviderError,
    UsageError,
    WorkerError,
)
from pi_sandbox.policies._extension_limits import LimitRules
from pi_sandbox.protocol import methods
from pi_sandbox.supervisor.agent.agent_session import (
    AgentSession,
    build_system_prompt,
)
from pi_sandbox.supervisor.agent.tool_exposure import ToolExposure, replay_activations
from pi_sandbox.supervisor.agent.tool_pipeline import EmitFn, HostTool, report_extension_errors
from pi_sandbox.supervisor.agent.tool_selection import ToolSelection
from pi_sandbox.supervisor.boundary import (
    DELIVERY_MODES,
    ExtensionBudgets,
    LimitExceededError,
    MessageRefusedError,
    check_bus_message,
    check_entry,
    check_text,
    check_ui_call,
    custom_message_from,
    json_size,
    user_message_from,
)
from pi_sandbox.supervisor.extensions.extension_discovery import ExtensionSource
from pi_sandbox.supervisor.host_tools import (
    CODEMODE,
    HOST_TOOL_NAMES,
    TOOL_SEARCH,
    CodemodeTool,
    ToolSearchTool,
)
from pi_sandbox.supervisor.providers.base import ToolDefinition
from pi_sandbox.supervisor.sessions.session_file import SessionWriter, now_ms
from pi_sandbox.supervisor.workers.worker_pool import RegisteredCommand, WorkerPool
from pi_sandbox.supervisor.workers.worker_process import WorkerProcess

__all__ = ["BUILTIN_COMMANDS", "DEFAULT_OFF_BUILTIN_TOOLS", "SessionHost", "unknown_option_message"]

# Built-in tools that are off unless the tool selection or set_active_tools names them:
# pi 1.6.0 enables read, bash, edit and write by default (cli.md "Tools"), not grep,
# find and ls. The CLI's `ToolSelection` applies the same default; this covers hosts
# built without one.
DEFAULT_OFF_BUILTIN_TOOLS = frozenset({"grep", "find", "ls"})

BUILTIN_COMMANDS = {
    "reload": "Reload extensions, settings and resources",
    "new": "Start a new session",
    "trust": "Show or change the project's trust: /trust [yes|no|sandboxed] [--save]",
    "compact": "Compact the session's context now: /compact [instructions]",
}

SHUTDOWN_WAIT_S = 5.0
"""Bounded wait for ``session_shutdown`` handlers before a generation is replaced."""

STALE_GRACE_S = 2.0
# How long an ended generation's worker has to answer its shutdown request: it first
# waits up to 2 s (worker runtime STALE_THREAD_GRACE_S) for the extension's own
# threads, so that one using its stale ctx reports its StaleContextError (case 3).
STALE_RETIRE_GRACE_S = 5.0
"""How long an ended generation's worker may finish the command that replaced it."""

MAX_SUPPLIED_CHARS = 200_000
"""Longest text an extension may supply for a user_bash output."""

MAX_SETTLE_RUNS = 10
"""Runs that follow-ups and triggered turns may start after one prompt before the
rest is dropped (an extension that answers every ``agent_end`` with a follow-up)."""

COMMAND_TIMEOUT_S = 3600.0
"""Deadline of one command handler (they may wait for the agent or a dialog)."""

_UI_DEFAULTS = {"select": None, "confirm": False, "input": None, "editor": None}


def _refuse(message: str, code: int = methods.ERROR_HOST) -> HostCallError:
    return HostCallError(message, code=code)


class SessionHost:
    """One interactive session's extension runtime (see the module docstring).

    Args:
        pool: the started worker pool (its ``host`` is set to this object).
        session: the agent loop (``AgentSession``) over the session's writer.
        emit: output events (print/json/rpc).
        audit: receives JSON-ready audit records.
        discover: re-reads extension sources (reload): ``() -> (sources, notices)``.
        new_writer: a fresh session (``() -> SessionWriter``) for ``new_session``/``fork``.
        tools_filter: the ``ToolSelection`` of the command line (``--tools``,
            ``--exclude-tools``, …, ``defaultTools``), or a plain set of names; None: no
            filter.
        argv: the command line, re-parsed once extensions registered their flags.
        parse_flags: ``(argv, flags) -> (values, positional words)``; raises ``UsageError``.
        agent_dir: where session files live (``switch_session`` stays inside it).
    """

    def __init__(
        self,
        *,
        pool: WorkerPool,
        session: AgentSession,
        emit: EmitFn,
        audit: Callable[[dict[str, Any]], None],
        discover: Callable[[], tuple[list[ExtensionSource], list[str]]],
        new_writer: Callable[[], SessionWriter],
        tools_filter: ToolSelection | set[str] | None = None,
        argv: Sequence[str] = (),
        parse_flags: Callable[[Sequence[str], list[Any]], tuple[dict[str, Any], list[str]]]
        | None = None,
        agent_dir: Path | None = None,
        load_resources: Callable[[tuple[Any, ...]], Any] | None = None,
        change_trust: Callable[[str, bool], Awaitable[Any]] | None = None,
        trust_info: Callable[[], Any] | None = None,
    ) -> None:
        self.pool = pool
        # issue 6: resources (skills, templates, context files) for the current trust.
        self.load_resources = load_resources
        self.change_trust = change_trust
        self.trust_info = trust_info
        self.resource_set: Any = None
        self.session = session
        self.emit = emit
        self.audit = audit
        self.discover = discover
        self.new_writer = new_writer
        self.tools_filter = tools_filter
        self.argv = list(argv)
        self.parse_flags = parse_flags
        self.agent_dir = agent_dir
        # issue 15: session directories besides <agent_dir>/sessions (--session-dir)
        # whose files switch_session may open.
        self.session_dirs: tuple[Path, ...] = ()
        self.active: list[str] | None = None
        self.flags: dict[str, Any] = {}
        # The positional words of the command line once extension flags took their
        # values (``@files`` and messages; prompt_input assembles them).
        self.message_from_flags: list[str] | None = None
        # issue 16: RPC model/thinking commands (`model_commands.ModelControl`), set by
        # the run; the thinking level itself lives on the session (`thinking_level`).
        self.models: Any = None
        # issue 19: the session's MCP servers (`mcp.McpManager`), set by the run.
        self.mcp: Any = None
        self.reload_requested = False
        self.replacing = False
        self.keep_going = False  # rpc mode: a failed prompt does not end the session
        # Errors that end a print/json run (raised again by the caller after the run).
        self.errors: list[BaseException] = []
        self.resources: dict[str, list[str]] = {}
        self.bus_listeners: dict[str, list[Callable[[Any], Any]]] = {}
        self.pending_reports: list[dict[str, str]] = []
        # ui_id → (answered, [value], dialog kind, select options)
        self.ui_pending: dict[str, tuple[trio.Event, list[Any], str, list[str]]] = {}
        self.ui_closed = False  # the RPC client went away: dialogs get their defaults
        self._ui_ids = 0
        self._command_workers: set[WorkerProcess] = set()
        self._command_scopes: set[trio.CancelScope] = set()
        self._command_done: dict[WorkerProcess, trio.Event] = {}
        self._jobs_send, self._jobs_recv = trio.open_memory_channel[Callable[[], Awaitable[Any]]](
            1000
        )
        self._queued = 0
        self._prompt_serial = 0
        self._aborted_serial = 0
        self._prompt_started = 0
        self._quiet = trio.Event()
        self._quiet.set()
        # RPC bash (issue 17 §2): running user commands' cancel scopes (abort_bash).
        self._bash_scopes: set[trio.CancelScope] = set()
        self._nursery: trio.Nursery | None = None
        # issue 13 §4: rates, session budgets and strikes of every extension.
        rules = pool.config.extension_rules
        self.budgets = ExtensionBudgets(rules.limits if rules is not None else LimitRules())
        self._reported_refusals: set[tuple[Path, str]] = set()
        pool.host = self
        session.active_tools = self.active_definitions
        session.system_prompt = self.system_prompt
        pool_pipeline = session.pipeline
        pool_pipeline.tool_filter = self.is_active
        # issue 19: every tool's exposure, tool_search activations (replayed from the
        # session branch) and the supervisor's own tools.
        self.exposure = ToolExposure(
            selected=self._selected,
            reachable=self._reachable,
            chosen=lambda name: self.active is not None and name in self.active,
        )
        self._synced: tuple[int, int] | None = None
        self._pool_names: set[str] = set()
        self._branch_leaf: object = object()
        self._activations_mark: tuple[Any, tuple[int, int]] | None = None
        self._activations: dict[str, None] = {}
        self._unrecorded: list[str] = []
        self._host_exposure: dict[str, str] = {}
        self._warned_unreachable = False
        if isinstance(tools_filter, ToolSelection):
            # Off by default from the first request on (start() adds the tool worker's).
            tools_filter.builtins |= frozenset(HOST_TOOL_NAMES)
        pool_pipeline.host_tools = {
            TOOL_SEARCH: self._after_mcp(
                ToolSearchTool(self.exposure, self._unrecorded.extend).host_tool()
            ),
            CODEMODE: self._after_mcp(
                CodemodeTool(pool_pipeline, self.exposure, self.codemode_callable).host_tool()
            ),
        }
        pool_pipeline.nested_filter = self.codemode_callable
        session.after_tools = self.record_activations

    def _after_mcp(self, tool: HostTool) -> HostTool:
        """``tool_search`` and ``codemode`` reach every MCP server's tools: they wait
        (bounded) for the servers still connecting first (pi docs mcp.md)."""
        inner = tool.execute

        async def execute(call: Any, arguments: dict[str, Any], session: Any) -> dict[str, Any]:
            if self.mcp is not None:
                await self.mcp.wait_all()
            self.sync_exposure()
            return await inner(call, arguments, session)

        return dataclasses.replace(tool, execute=execute)

    # --- start and run -----------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Parse extension flags, announce the session (``session_start`` with reason
        ``startup``, ``resources_discover``) and start the job runner.

        Raises:
            UsageError: the command line has a flag no extension registered, or a
                string flag without a value.
        """
        self._nursery = nursery
        self._parse_flags()
        await self._flush_reports()
        if isinstance(self.tools_filter, ToolSelection):
            # codemode and tool_search are built-ins that are off by default (pi docs
            # cli.md "Tools"), like ls, grep and find.
            self.tools_filter.builtins = frozenset(
                name for name, tool in self.pool.tools.items() if tool.source == "builtin"
            ) | frozenset(HOST_TOOL_NAMES)
            unknown = self.tools_filter.unknown([*self.pool.tools, *HOST_TOOL_NAMES])
        else:
            unknown = sorted((self.tools_filter or set()) - {*self.pool.tools, *HOST_TOOL_NAMES})
        if unknown:
            await self.emit(
                {
                    "type": "pisandbox_notice",
                    "message": f"--tools names no registered tool: {', '.join(unknown)} "
                    "(a tool an extension registers later is still allowed)",
                }
            )
        await self.session.notify("session_start", {"reason": "startup"})
        await self._discover_resources("startup")
        await self.warn_unreachable_tools()
        nursery.start_soon(self._runner)

    def _parse_flags(self) -> None:
        flags = [
            flag for _, worker in self.pool.extensions for flag in _registrations(worker, "flags")
        ]
        if self.parse_flags is None:
            return
        self.flags, words = self.parse_flags(self.argv, flags)
        self.message_from_flags = words

    async def _runner(self) -> None:
        async for job in self._jobs_recv:
            try:
                await job()
            except (ProviderError, UsageError, WorkerError, PolicyError) as exc:
                if self.keep_going:  # rpc mode: report and serve the next command
                    await self.emit({"type": "pisandbox_error", "error": str(exc)})
                # In rpc mode a mistyped command does not fail the whole session.
                if not (self.keep_going and isinstance(exc, UsageError)):
                    self.errors.append(exc)
            except HostCallError as exc:
                await self.emit({"type": "pisandbox_warning", "message": str(exc)})
            finally:
                self._queued -= 1
            if self._queued == 0:
                await self._settle()
                if self._queued == 0:
                    self._quiet.set()

    def enqueue(
        self,
        job: Callable[[], Awaitable[Any]],
        *,
        prompt: bool = False,
        on_dropped: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        """Queue ``job`` (a prompt, a reload …) for the runner, one at a time.
        A ``prompt`` job is dropped if `abort` comes before it starts (then
        ``on_dropped`` is awaited: the RPC prompt's response)."""
        self._queued += 1
        self._quiet = trio.Event() if self._quiet.is_set() else self._quiet
        if prompt:
            self._prompt_serial += 1
            serial = self._prompt_serial

            async def guarded() -> None:
                if serial <= self._aborted_serial:
                    await self.emit(
                        {"type": "pisandbox_notice", "message": "a queued prompt was aborted"}
                    )
                    if on_dropped is not None:
                        await on_dropped()
                    return
                self._prompt_started = serial
                try:
                    await job()
                finally:
                    self._prompt_started = 0
                    self.session.abort_on_start = False

            self._jobs_send.send_nowait(guarded)
            return
        self._jobs_send.send_nowait(job)

    def abort(self) -> bool:
        """Abort the running prompt, or the prompts queued and not started yet (an
        RPC client's ``abort`` right after its ``prompt``). False if there was none."""
        if self.session.abort():
            return True
        if self._command_scopes:
            for scope in list(self._command_scopes):
                scope.cancel()
            return True
        if self._prompt_started:
            # Started but not running yet (input hooks, a command): the run it is
            # about to start begins aborted.
            self.session.abort_on_start = True
        if self._prompt_serial > self._aborted_serial and self._queued > 0:
            self._aborted_serial = self._prompt_serial
            return True
        return bool(self._prompt_started)

    async def wait_quiet(self) -> None:
        """Wait until every queued job ran and the agent settled."""
        while self._queued > 0 or not self._quiet.is_set():
            await self._quiet.wait()

    @property
    def idle(self) -> bool:
        """No agent run in progress."""
        return not self.session.running

    async def _settle(self) -> None:
        """After the last job: triggered turns and follow-ups left by handlers, a
        deferred reload (once), then ``agent_settled``."""
        for _ in range(MAX_SETTLE_RUNS):
            # After an aborted run the queued follow-ups stay queued (issue 5 case 6):
            # they go with the next run (a prompt, or a message that triggers a turn).
            if self.session.follow_ups and not self.session.running and not self.session.aborted:
                self.session.next_turn.append(self.session.follow_ups.pop(0))
                await self._run_guarded(lambda: self.session.run("", as_user=False))
                continue
            if self.reload_requested and not self.session.running:
                self.reload_requested = False
                try:
                    await self.replace("reload")
                except HostCallError as exc:
                    await self.emit({"type": "pisandbox_warning", "message": str(exc)})
                continue
            break
        else:
            if not self.session.follow_ups:
                return await self._settled()
            self.session.follow_ups.clear()
            await self.emit(
                {
                    "type": "pisandbox_warning",
                    "message": f"extensions kept the agent going for {MAX_SETTLE_RUNS} more runs "
                    "after the prompt; their queued follow-ups were dropped",
                }
            )
        await self._settled()

    async def _settled(self) -> None:
        """``agent_settled {aborted}`` on the output after a run (pi 1.6.0 json.md /
        rpc.md: the last record of a prompt's work; pi's ``RpcClient.waitForIdle`` and
        ``promptAndWait`` wait for it; the one place it is emitted, for json, print and
        rpc modes alike), then the extension event. Only after work that ran the agent:
        a ``bash`` or ``compact`` command alone settles nothing on the stream."""
        if self.session.ran:
            self.session.ran = False
            await self.emit({"type": "agent_settled", "aborted": bool(self.session.aborted)})
        await self.session.notify("agent_settled", {})

    async def _run_guarded(self, run: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await run()
        except ProviderError as exc:
            self.errors.append(exc)
            if self.keep_going:
                await self.emit({"type": "pisandbox_error", "error": f"provider error: {exc}"})
            return None
        except WorkerError as exc:  # a fail-closed hook stopped the run (issue 13 §1)
            self.errors.append(exc)
            if self.keep_going:
                await self.emit({"type": "pisandbox_error", "error": str(exc)})
            return None

    async def submit(
        self,
        text: str,
        images: list[dict[str, Any]] | None = None,
        *,
        on_disposition: Callable[[str], Awaitable[None]] | None = None,
    ) -> str:
        """Handle one user input: a ``/command``, else the ``input`` event, else an
        agent run. Returns the final assistant text ("" for commands/handled input).

        ``on_disposition`` (RPC ``prompt``, pi's ``preflightResult``) is awaited once
        with ``"handled"`` when a command or an ``input`` hook took the input, or
        with ``"started"`` just before the agent run starts; not at all when the
        input failed before either (the error is raised).

        Raises:
            ProviderError: the provider failed.
            UsageError: ``/name`` is ambiguous (the message lists the candidates).
            HookFailedError: a fail-closed hook (``input``, ``context`` …) failed and
                the prompt or request was not sent (issue 13 §1).
        """
        if self.mcp is not None and not text.startswith("/"):
            # pi mcp.md: the first prompt waits (≤ 10 s) for servers with direct tools.
            await self.mcp.wait_for_direct()
        if text.startswith("/"):
            name, _, args = text[1:].partition(" ")
            if name == "mcp" and self.mcp is not None and "mcp" not in self.pool.commands:
                # pi mcp.md: outside the TUI, /mcp prints server status (an
                # extension's /mcp replaces it).
                await self.mcp.wait_all()
                await self.emit({"type": "pisandbox_notice", "message": self.mcp.status_text()})
                return ""
            if name in BUILTIN_COMMANDS:
                if name == "reload":
                    await self.replace("reload")
                elif name == "trust":
                    await self.trust_command(args.strip())
                elif name == "compact":
                    outcome = await self.compact(args.strip() or None)
                    if not outcome["compacted"] and not outcome["cancelled"]:
                        await self.emit(
                            {
                                "type": "pisandbox_notice",
                                "message": "nothing to compact (the session is too small)",
                            }
                        )
                else:
                    await self.replace("new")
                if on_disposition is not None:
                    await on_disposition("handled")
                return ""
            # /skill:NAME is always a skill (an extension cannot register over it).
            command = None if name.startswith("skill:") else self.pool.commands.get(name)
            if command is not None:
                if on_disposition is not None:
                    # pi answers a command's prompt once it ran; ours answers as it
                    # starts, so that a command's dialogs can be answered meanwhile.
                    await on_disposition("handled")
                await self.run_command(command, args.strip())
                return ""
            if name in self.pool.ambiguous_commands:
                choices = ", ".join(f"/{c}" for c in self.pool.ambiguous_commands[name])
                raise UsageError(
                    f"/{name} is ambiguous: more than one extension registered it; use {choices}"
                )
        state = await self.session.chain(
            "input", {"text": text, "images": images or [], "source": "user"}
        )
        if state is not None:
            if state.get("action") == "handled":
                if on_disposition is not None:
                    await on_disposition("handled")
                return ""
            text = str(state.get("text", text))
            images = list(state.get("images") or images or [])
        text = await self.expand_input(text)
        if on_disposition is not None:
            await on_disposition("started")
        return await self.session.run(text, images)

    async def expand_input(self, text: str) -> str:
        """After the ``input`` hooks: ``/skill:name args``, else ``/template args``
        (issue 6 expansion order). An unknown skill or an unreadable skill file leaves
        the text unchanged and is reported (seed 000 §5)."""
        resources = self.resource_set
        if resources is None or not text.startswith("/"):
            return text
        from pi_sandbox.resources.prompt_templates import expand_prompt_command
        from pi_sandbox.resources.skills import expand_skill_command

        if text.startswith("/skill:"):
            expanded, error = expand_skill_command(text, resources.skills)
            if error is not None:
                await self.emit(
                    {"type": "pisandbox_warning", "message": f"{error}; the text is sent unchanged"}
                )
            return expanded
        try:
            expanded_template = expand_prompt_command(text, resources.prompts)
        except ValueError as exc:
            await self.emit(
                {"type": "pisandbox_warning", "message": f"{text.split()[0]}: not expanded: {exc}"}
            )
            return text
        # A template file's final newline is not part of the prompt.
        return text if expanded_template is None else expanded_template.strip()

    async def trust_command(self, args: str) -> None:
        """``/trust [yes|no|sandboxed] [--save]``: show the decision, or change it for
        this session (and with ``--save`` in the trust store); the project's
        extensions, skills, templates, context files and policy follow at once
        through a reload (issue 6: no restart)."""
        words = args.split()
        save = "--save" in words
        words = [w for w in words if w != "--save"]
        if not words:
            info = self.trust_info() if self.trust_info is not None else None
            text = (
                f"Project trust: {info.decision or 'undecided'} (from {info.source})"
                if info is not None
                else "Project trust: unknown"
            )
            await self.emit({"type": "pisandbox_notice", "message": text})
            return
        if len(words) != 1 or words[0] not in ("yes", "no", "sandboxed"):
            raise UsageError("/trust: expected yes, no or sandboxed, optionally with --save")
        await self.set_trust(words[0], save=save)

    async def set_trust(self, decision: str, *, save: bool = False) -> dict[str, Any]:
        """Change the project's trust for this session (``/trust``, RPC ``set_trust``).

        Raises:
            UsageError: the policy forbids ``decision``, or it cannot take effect
                without a restart (``sandboxed`` with project extensions in an
                unsandboxed run); HostCallError: the agent is running.
        """
        if self.change_trust is None:
            raise UsageError("/trust: this session cannot change trust")
        if self.session.running or self.replacing:
            raise _refuse("cannot change trust while the agent is running or reloading")
        info = await self.change_trust(decision, save)
        await self.replace("reload")
        await self.emit(
            {
                "type": "trust_changed",
                "decision": info.decision,
                "source": info.source,
                "saved": save,
            }
        )
        return info.as_dict()

    async def run_command(self, command: RegisteredCommand, args: str) -> None:
        """Execute an extension command in its worker with a `CommandContext`."""
        worker = await self.pool.ensure_extension_worker(command.index)
        if worker is None:
            raise UsageError(f"/{command.name}: its extension {command.source} is disabled")
        done = trio.Event()
        self._command_workers.add(worker)
        self._command_done[worker] = done
        scope = trio.CancelScope()
        self._command_scopes.add(scope)
        try:
            with scope:
                await worker.request(
                    methods.COMMAND_EXECUTE,
                    {"name": command.registered_name, "args": args, "ctx": self.pool._ctx()},
                    timeout_s=COMMAND_TIMEOUT_S,
                )
            if scope.cancelled_caught:
                # Aborted: the handler's ctx.signal is set ($/cancel); if it does not
                # return within the grace period its worker is killed and restarted.
                self.pool._settle(worker)
                await self.emit({"type": "pisandbox_notice", "message": f"/{command.name} aborted"})
        except PiSandboxError as exc:
            if self.pool.index_of(worker) is not None:  # an ended generation's end is no error
                await self.report(
                    [
                        {
                            "path": command.source,
                            "message": f"/{command.name} failed: {exc}",
                            "traceback": getattr(exc, "remote_traceback", ""),
                        }
                    ],
                    "command",
                )
        finally:
            self._command_scopes.discard(scope)
            self._command_workers.discard(worker)
            done.set()
            self._command_done.pop(worker, None)

    # --- reports -----------------------------------------------------------------------------

    async def report(self, errors: list[dict[str, str]], event: str) -> None:
        """Show extension failures (``extension_error`` events)."""
        await report_extension_errors(self.emit, errors, event)

    async def _flush_reports(self) -> None:
        pending, self.pending_reports = self.pending_reports, []
        await self.report(pending, "load")

    async def stale_message(self, worker: WorkerProcess, what: str) -> None:
        """A message from an ended generation's worker: dropped, and said so."""
        self.audit(
            {"event": "extension", "action": "stale_message", "worker": worker.name, "what": what}
        )
        await self.emit(
            {
                "type": "pisandbox_notice",
                "message": f"dropped {what} from {worker.name}: its generation ended "
                "(reload or session replacement)",
            }
        )

    async def registry_changed(self) -> None:
        """A bound extension registered something: tools and the system prompt are
        computed per request, so only diagnostics are left to show."""
        await self._flush_reports()

    async def worker_restarted(self, index: int, worker: WorkerProcess) -> None:
        """A crashed extension's replacement gets ``session_start`` again."""
        outcome = await self.pool.dispatch("session_start", {"reason": "restart"}, only=index)
        await self.report(outcome.errors, "session_start")

    # --- tools and the system prompt -------------------------------------------------------

    def _selected(self, name: str) -> bool:
        """Whether a ``direct`` tool is selected: ``--tools`` & co. and
        ``set_active_tools``; ``codemode``/``tool_search`` also turn on by themselves
        while tools of the exposure they serve exist (issue 19, pi docs mcp.md)."""
        if name in HOST_TOOL_NAMES:
            if self._auto_enabled(name):
                return True
            if self.tools_filter is None:
                return False  # off by default, also without a command line (SDK)
        if self.tools_filter is not None and name not in self.tools_filter:
            return False
        if self.active is not None:
            return name in self.active
        if self.tools_filter is None and name in DEFAULT_OFF_BUILTIN_TOOLS:
            tool = self.pool.tools.get(name)
            return tool is None or tool.source != "builtin"
        return True

    def _auto_enabled(self, name: str) -> bool:
        serves = "deferred" if name == TOOL_SEARCH else "codemode"
        # MCP servers still connecting count by their configuration (pi docs mcp.md:
        # "Codemode or tool_search is activated from the config").
        configured = self.mcp is not None and serves in self.mcp.configured_exposures()
        if not configured and not self.exposure.has_exposure(serves):
            return False
        if isinstance(self.tools_filter, ToolSelection):
            return self.tools_filter.enables(name)
        return self.tools_filter is None or name in self.tools_filter

    def _reachable(self, name: str) -> bool:
        if isinstance(self.tools_filter, ToolSelection):
            return self.tools_filter.reaches(name)
        return True

    def sync_exposure(self) -> None:
        """Bring the exposure registry up to date with the worker registry (rebuilt on
        registration, restart and reload) and the activations with the session branch
        (resume, ``/reload``, navigation); cheap when nothing changed."""
        key = (id(self.pool.tools), len(self.pool.tools))
        if key != self._synced:
            self._synced = key
            names = set(self.pool.tools)
            for name in self._pool_names - names:
                self.exposure.unregister(name)
            for tool in self.pool.tools.values():
                d = tool.definition
                self.exposure.register(
                    ToolDefinition(d.name, d.description, d.parameters), d.exposure, tool.source
                )
            for name, host_tool in self.session.pipeline.host_tools.items():
                d = host_tool.definition
                self.exposure.register(
                    ToolDefinition(d.name, d.description, d.parameters),
                    self._host_exposure.get(name, "direct"),
                    host_tool.source,
                )
            self._pool_names = names
        writer = self.session.writer
        leaf = (id(writer), writer.last_id)
        if leaf != self._branch_leaf:
            self._branch_leaf = leaf
            # issue 20 target 3: the leaf moves with every entry; while the branch only
            # grows, only the new entries are replayed (`SessionWriter.branch_tail`).
            known = self._activations_mark
            mark = known[1] if known is not None and known[0] is writer else None
            new_mark, entries, whole = writer.branch_tail(mark)
            if whole:
                self._activations = {}
            replay_activations(self._activations, entries)
            self._activations_mark = (writer, new_mark)
            recorded = self._activations
            self.exposure.restore([*recorded, *(n for n in self._unrecorded if n not in recorded)])

    def expose(self, tool: HostTool, exposure: str) -> None:
        """Register a supervisor-executed tool (an MCP server's tool, issue 19) with
        its exposure: the model, ``tool_search`` and codemode reach it as the
        exposure says, and every call runs through the tool pipeline like any tool's.

        Raises:
            ValueError: ``exposure`` is not one of ``direct``, ``deferred``,
                ``codemode``, ``hidden``; or the name is one of the host's own tools.
        """
        name = tool.definition.name
        if name in HOST_TOOL_NAMES:
            raise ValueError(f"tool {name!r}: the name is taken by a built-in tool")
        d = tool.definition
        self.exposure.register(
            ToolDefinition(d.name, d.description, d.parameters), exposure, tool.source
        )
        self.session.pipeline.host_tools[name] = tool
        self._host_exposure[name] = exposure

    def withdraw(self, name: str) -> None:
        """Unregister a tool `expose` registered (its server went away)."""
        if name in HOST_TOOL_NAMES:
            return
        self.session.pipeline.host_tools.pop(name, None)
        self._host_exposure.pop(name, None)
        self.exposure.unregister(name)

    async def warn_unreachable_tools(self) -> None:
        """Warn once when tools with ``deferred`` or ``codemode`` exposure exist but
        neither ``tool_search`` nor ``codemode`` is on, so the model cannot reach them
        (pi docs mcp.md). Called at start; call it again when tools register late."""
        if self._warned_unreachable:
            return
        self.sync_exposure()
        hidden = [
            t.definition.name
            for t in self.exposure.all()
            if t.exposure in ("deferred", "codemode")
            and self.exposure.callable_from_codemode(t.definition.name)
        ]
        if not hidden or any(self.exposure.is_declared(n) for n in HOST_TOOL_NAMES):
            return
        self._warned_unreachable = True
        await self.emit(
            {
                "type": "pisandbox_warning",
                "message": f"{len(hidden)} tool(s) ({', '.join(hidden[:5])}"
                f"{', …' if len(hidden) > 5 else ''}) can be reached only through codemode "
                "or tool_search, and neither is on; add --tools +codemode or +tool_search",
            }
        )

    async def record_activations(self) -> None:
        """Write the tools ``tool_search`` loaded in the last tool batch as a
        ``system`` message with ``toolsAdded`` (pi docs session-format.md), so that
        they stay declared on this branch after ``/reload`` and resume."""
        if not self._unrecorded:
            return
        added = []
        for name in dict.fromkeys(self._unrecorded):
            described = self.exposure.describe(name)
            if described is not None:
                added.append(described)
        self._unrecorded.clear()
        if added:
            self.session.writer.append_message(
                {"role": "system", "content": "", "toolsAdded": added, "timestamp": now_ms()}
            )
            await self.emit(
                {"type": "active_tools", "tools": [t.name for t in self.active_definitions()]}
            )

    def codemode_callable(self, name: str) -> bool:
        """Whether a codemode script may call ``name`` (`ToolExposure.callable_from_codemode`;
        never ``codemode`` or ``tool_search`` themselves)."""
        self.sync_exposure()
        return name not in HOST_TOOL_NAMES and self.exposure.callable_from_codemode(name)

    def is_active(self, name: str) -> bool:
        """Whether tool ``name`` is offered to the model (and may be called)."""
        self.sync_exposure()
        return self.exposure.is_declared(name)

    def active_definitions(self) -> list[ToolDefinition]:
        """The declared tools in registry order (`ToolExposure.declared`)."""
        self.sync_exposure()
        return self.exposure.declared()

    def _declared_tools(self) -> list[Any]:
        """The declared tools the pipeline runs (worker or host tools), in order."""
        pipeline = self.session.pipeline
        found = (pipeline.lookup(d.name) for d in self.active_definitions())
        return [tool for tool in found if tool is not None]

    def system_prompt(self) -> str:
        """The system prompt for the active tools (snippets and guidelines included)."""
        snippets: dict[str, str] = {}
        guidelines: list[str] = []
        for tool in self._declared_tools():
            name = tool.definition.name
            if tool.definition.prompt_snippet:
                snippets[name] = tool.definition.prompt_snippet
            for line in tool.definition.prompt_guidelines:
                if line not in guidelines:
                    guidelines.append(line)
        tool_worker = self.pool.tool_worker
        base = build_system_prompt(
            self.session.cwd,
            self.active_definitions(),
            snippets=snippets,
            guidelines=guidelines,
            sandboxed=tool_worker is not None and tool_worker.spec.sandbox is not None,
        )
        if self.mcp is not None and (section := self.mcp.servers_section()):
            base += f"\n\n<mcp_servers>\n{section}\n</mcp_servers>"
        if self.resource_set is None:
            return base
        from pi_sandbox.resources.resource_set import compose_system_prompt

        active = [d.name for d in self.active_definitions()]
        return compose_system_prompt(base, self.resource_set, active, cwd=self.session.cwd)

    # --- the event bus -----------------------------------------------------------------------

    def events_on(self, channel: str, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """A supervisor-side bus listener; it survives reloads."""
        self.bus_listeners.setdefault(channel, []).append(listener)
        return lambda: self.bus_listeners.get(channel, []).remove(listener)

    async def bus_emit(self, source: ExtensionSource | None, channel: str, data: Any) -> None:
        """Deliver ``data`` on ``channel`` to every subscriber of the current generation.

        From an extension (``source``), the message is bounded first (``bus_bytes``,
        ``bus_per_s``; issue 13 §4): a refused one is dropped and counted against it.
        """
        if source is not None:
            try:
                check_bus_message(data, self.budgets.limits(source.origin))
                self.budgets.take(source.path, source.origin, "bus")
            except MessageRefusedError as exc:
                await self.refused(source, "events.emit", exc)
                return
        for listener in list(self.bus_listeners.get(channel, [])):
            try:
                result = listener(data)
                if hasattr(result, "__await__"):
                    await result
            except Exception as exc:
                await self.emit(
                    {"type": "pisandbox_error", "error": f"event bus listener failed: {exc}"}
                )
        for _, worker in list(self.pool.extensions):
            if channel in _registrations(worker, "channels"):
                with trio.move_on_after(1):
                    await worker.notify(methods.BUS_DELIVER, {"channel": channel, "data": data})

    # --- host calls ----------------------------------------------------------------------------

    async def host_call(self, worker: WorkerProcess, request: Any) -> Any:
        """Answer one ``host/call`` (see the module docstring).

        Raises:
            HostCallError: stale caller, missing capability, bad arguments, refusal.
        """
        from pi_sandbox.protocol.messages import HostCallParams

        try:
            call = HostCallParams.model_validate(request.params)
        except Exception as exc:
            raise _refuse(f"malformed host/call: {exc}", methods.ERROR_INVALID_PARAMS) from exc
        index = self.pool.index_of(worker)
        if index is None:
            await self.stale_message(worker, f"the action {call.op!r}")
            raise _refuse(
                f"{call.op}: this extension's generation ended (reload or session replacement)",
                methods.ERROR_STALE,
            )
        source = self.pool.extensions[index][0]
        handler = getattr(self, f"_op_{call.op}", None)
        if handler is None:
            raise _refuse(f"unknown action {call.op!r}", methods.ERROR_INVALID_PARAMS)
        needed = _CAPABILITY.get(call.op)
        if needed is not None and not self.pool.capabilities(source).get(needed, False):
            self.audit(
                {
                    "event": "extension",
                    "action": "capability_refused",
                    "extension": str(source.path),
                    "capability": needed,
                    "op": call.op,
                }
            )
            raise _refuse(
                f"{call.op}: the policy does not grant extension {source.path} the "
                f"{needed!r} capability (extensions.capabilities)",
                methods.ERROR_CAPABILITY,
            )
        if call.op in _COMMAND_ONLY and worker not in self._command_workers:
            raise _refuse(f"ctx.{call.op} is only available in a command handler")
        self.budgets.begin_session(self.session.writer.header.id)
        try:
            return await handler(worker=worker, source=source, **call.args)
        except TypeError as exc:
            raise _refuse(f"{call.op}: {exc}", methods.ERROR_INVALID_PARAMS) from exc
        except MessageRefusedError as exc:
            # issue 13 §4: a bad value or a limit: refused before anything was
            # written, audited, and counted against the extension.
            await self.refused(source, call.op, exc)
            limit = isinstance(exc, LimitExceededError)
            raise _refuse(
                f"{call.op}: {exc}", methods.ERROR_HOST if limit else methods.ERROR_INVALID_PARAMS
            ) from exc

    # --- boundary refusals (issue 13 §4) -----------------------------------------------------

    async def refused(self, source: ExtensionSource, op: str, exc: MessageRefusedError) -> None:
        """An action (or a notification) of extension ``source`` was refused: audit
        it, show the first refusal of each action, count a strike, and disable the
        extension once it reaches ``extensions.limits.strikes``."""
        if source.path in self.pool.disabled:
            return  # its worker is being stopped; its last frames change nothing
        self.budgets.begin_session(self.session.writer.header.id)
        limit = isinstance(exc, LimitExceededError)
        self.audit(
            {
                "event": "extension",
                "action": "limit_exceeded" if limit else "value_refused",
                "extension": str(source.path),
                "op": op,
                "reason": str(exc)[:1000],
            }
        )
        if (source.path, op) not in self._reported_refusals:
            self._reported_refusals.add((source.path, op))
            await self.report(
                [
                    {
                        "path": str(source.path),
                        "message": f"{op} refused: {str(exc)[:1000]} (further refusals of "
                        "this action are audited, not shown)",
                    }
                ],
                "limits",
            )
        if (not limit or exc.strike) and self.budgets.strike(source.path, source.origin):
            strikes = self.budgets.limits(source.origin).strikes
            await self.disable_extension(
                source,
                f"{strikes} of its actions were refused (extensions.limits.strikes); "
                f"the last: {op}: {str(exc)[:300]}",
            )

    async def disable_extension(self, source: ExtensionSource, reason: str) -> None:
        """Disable extension ``source`` for the rest of the session: its worker is
        killed and not restarted (`WorkerPool.disabled`), with a notice and an audit
        record. A hook for ``extensions.required`` (issue 13 §2) belongs here: a
        required extension disabled this way must fail the run."""
        if source.path in self.pool.disabled:
            return
        self.pool.disabled[source.path] = reason
        self.audit(
            {
                "event": "extension",
                "action": "disabled",
                "extension": str(source.path),
                "reason": reason[:1000],
            }
        )
        await self.report(
            [
                {
                    "path": str(source.path),
                    "message": f"extension {source.path} is disabled for this session: {reason}",
                }
            ],
            "limits",
        )
        for current, worker in list(self.pool.extensions):
            if current.path == source.path:
                worker.failure = WorkerError(f"disabled for this session: {reason}")
                worker.kill()

    def admit_log(self, worker: WorkerProcess) -> bool:
        """Whether a ``log`` notification of ``worker`` is kept (``logs_per_s``);
        a refused one is dropped and counted against its extension."""
        index = self.pool.index_of(worker)
        if index is None:
            return True  # a tool worker or an ended generation's: bounded elsewhere
        source = self.pool.extensions[index][0]
        try:
            self.budgets.take(source.path, source.origin, "logs")
        except LimitExceededError as exc:
            if self._nursery is not None:
                self._nursery.start_soon(self.refused, source, "log", exc)
            return False
        return True

    # Each _op_<name>(worker, source, **args) answers one action.

    async def _op_send_message(
        self,
        *,
        worker: Any,
        source: Any,
        message: Any,
        deliver_as: Any = None,
        trigger_turn: bool = False,
    ) -> None:
        limits = self.budgets.limits(source.origin)
        entry = custom_message_from(message, limits, where="message", timestamp=now_ms())
        if deliver_as not in DELIVERY_MODES:
            raise MessageRefusedError(
                "deliver_as: expected null, 'steer', 'follow_up' or 'next_turn'"
            )
        if not isinstance(trigger_turn, bool):
            raise MessageRefusedError("trigger_turn: expected a boolean")
        turns = trigger_turn or (self.session.running and deliver_as != "next_turn")
        if turns and not self.pool.capabilities(source).get("send_user_messages", False):
            # Starting or extending a run on its own (a triggered turn, a steering or
            # follow-up message: each makes the model answer again) acts for the
            # user: the same capability as send_user_message. A message recorded
            # while idle, or kept for the user's next prompt, needs none.
            self.audit(
                {
                    "event": "extension",
                    "action": "capability_refused",
                    "extension": str(source.path),
                    "capability": "send_user_messages",
                    "op": "send_message",
                }
            )
            raise _refuse(
                "send_message: starting or extending a run (trigger_turn, or steer/"
                f"follow_up while the agent runs) needs the 'send_user_messages' "
                f"capability, which the policy does not grant extension {source.path}",
                methods.ERROR_CAPABILITY,
            )
        self._charge_write(source, json_size(entry))
        await self._deliver(entry, deliver_as, trigger_turn)

    def _charge_write(self, source: ExtensionSource, size: int) -> None:
        """One session write of ``size`` bytes: the writes rate, then the session
        budgets (issue 13 §4). Raises `LimitExceededError`."""
        self.budgets.take(source.path, source.origin, "writes")
        self.budgets.charge(source.path, source.origin, size)

    async def _op_send_user_message(
        self, *, worker: Any, source: Any, text: str, deliver_as: str = "steer"
    ) -> None:
        limits = self.budgets.limits(source.origin)
        message = user_message_from(text, limits, where="message", timestamp=now_ms())
        if deliver_as not in DELIVERY_MODES[1:]:
            raise MessageRefusedError("deliver_as: expected 'steer', 'follow_up' or 'next_turn'")
        self._charge_write(source, json_size(message))
        await self._deliver(message, deliver_as, True)

    async def _deliver(self, message: dict[str, Any], deliver_as: Any, trigger: bool) -> None:
        session = self.session
        session.extension_messages.add(id(message))
        if len(session.extension_messages) > 10_000:
            session.extension_messages.clear()  # ids of long-gone messages only
        if session.running:
            if deliver_as == "follow_up":
                session.follow_ups.append(message)
            elif deliver_as == "next_turn":
                session.next_turn.append(message)
            else:
                session.steering.append(message)
            return
        if deliver_as == "next_turn":
            session.next_turn.append(message)
            return
        if trigger:
            session.follow_ups.append(message)
            session.aborted = False  # a new turn is wanted: an earlier abort no longer holds
            if self._queued == 0:
                self.enqueue(_noop)
            return
        await session.commit(message)

    async def _op_append_entry(
        self, *, worker: Any, source: Any, custom_type: str, data: Any = None
    ) -> str:
        size = check_entry(custom_type, data, self.budgets.limits(source.origin))
        self._charge_write(source, size + len(custom_type))
        entry = self.session.writer.append_custom(custom_type, data)
        # pi docs json.md "Queue and state events": the persisted entry, as appended.
        await self.emit({"type": "entry_appended", "entry": entry})
        return entry["id"]

    async def _op_set_session_name(self, *, worker: Any, source: Any, name: str) -> None:
        limits = self.budgets.limits(source.origin)
        check_text("name", name, limits.text_chars)
        self._charge_write(source, json_size(name))
        self.session.writer.append_session_info(name)
        await self.session.notify("session_info_changed", {"name": self.session.writer.name})
        # pi docs json.md: an absent name means it was cleared.
        changed: dict[str, Any] = {"type": "session_info_changed"}
        if self.session.writer.name:
            changed["name"] = self.session.writer.name
        await self.emit(changed)

    async def _op_get_session_name(self, *, worker: Any, source: Any) -> str | None:
        return self.session.writer.name

    async def _op_set_label(
        self, *, worker: Any, source: Any, entry_id: str, label: Any = None
    ) -> None:
        limits = self.budgets.limits(source.origin)
        check_text("entry_id", entry_id, 64, key="")
        check_text("label", label, limits.text_chars, optional=True)
        if entry_id not in self.session.writer.by_id:
            raise _refuse(
                f"set_label: no entry {entry_id!r} in this session", methods.ERROR_INVALID_PARAMS
            )
        self._charge_write(source, json_size(label) + len(entry_id))
        self.session.writer.append_label(entry_id, label)

    async def _op_exec_check(self, *, worker: Any, source: Any, argv: list[str]) -> None:
        self.audit(
            {
                "event": "extension",
                "action": "exec",
                "extension": str(source.path),
                "argv": [str(a)[:200] for a in argv][:50],
            }
        )

    async def _op_get_active_tools(self, *, worker: Any, source: Any) -> list[str]:
        return [t.name for t in self.active_definitions()]

    async def _op_get_all_tools(self, *, worker: Any, source: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "description": tool.definition.description,
                "source": tool.source,
                "active": self.is_active(name),
                "exposure": self.exposure.get(name).exposure
                if self.exposure.get(name)
                else "direct",
                # issue 19: an MCP tool's hints (readOnlyHint, destructiveHint…).
                **({"annotations": tool.annotations} if getattr(tool, "annotations", None) else {}),
            }
            for name, tool in [*self.pool.tools.items(), *self.session.pipeline.host_tools.items()]
        ]

    async def _op_set_active_tools(
        self, *, worker: Any, source: Any, names: list[str] | None
    ) -> None:
        if names is not None and (
            not isinstance(names, list)
            or len(names) > 10_000  # more than any registry holds: a flood, not a choice
            or not all(isinstance(n, str) and len(n) <= 64 for n in names)
        ):
            raise _refuse(
                "set_active_tools: names must be a list of tool names or null",
                methods.ERROR_INVALID_PARAMS,
            )
        self.active = None if names is None else list(dict.fromkeys(names))
        await self.emit(
            {"type": "active_tools", "tools": [t.name for t in self.active_definitions()]}
        )

    def commands(self) -> list[dict[str, Any]]:
        """Every command: built-ins, extension commands (``name:N`` for duplicates),
        prompt templates (``source`` ``prompt``) and skills (``skill:NAME``, source
        ``skill``), as in pi's ``get_commands``."""
        commands = [
            {"name": n, "description": d, "source": "builtin"} for n, d in BUILTIN_COMMANDS.items()
        ]
        commands += [
            {"name": c.name, "description": c.description, "source": c.source}
            for c in self.pool.commands.values()
            # built-ins win when typed, and /skill:NAME is always a skill
            if c.name not in BUILTIN_COMMANDS and not c.name.startswith("skill:")
        ]
        resources = self.resource_set
        if resources is not None:
            commands += [
                {
                    "name": t.name,
                    "description": t.description,
                    "source": "prompt",
                    "path": str(t.path),
                }
                for t in resources.prompts
                if t.name not in self.pool.commands and t.name not in BUILTIN_COMMANDS
            ]
            commands += [
                {
                    "name": f"skill:{k.name}",
                    "description": k.description,
                    "source": "skill",
                    "path": str(k.path),
                }
                for k in resources.skills
            ]
        return commands

    @property
    def thinking_level(self) -> str:
        """The session's thinking level (``AgentSession.thinking_level``)."""
        return self.session.thinking_level

    @thinking_level.setter
    def thinking_level(self, level: str) -> None:
        self.session.thinking_level = level

    async def _op_get_commands(self, *, worker: Any, source: Any) -> list[dict[str, Any]]:
        return self.commands()

    async def _op_get_model(self, *, worker: Any, source: Any) -> dict[str, Any]:
        return {"provider": self.session.provider.name, "id": self.session.provider.model}

    async def _op_set_model(self, *, worker: Any, source: Any, model: str) -> bool:
        provider = self.session.provider
        check_text("model", model, self.budgets.limits(source.origin).text_chars)
        name, _, model_id = model.rpartition("/")
        if name and name != provider.name:
            raise _refuse(
                f"set_model: provider {name!r} is not available in this run (only {provider.name!r})"
            )
        if not model_id:
            raise _refuse("set_model: model id is empty", methods.ERROR_INVALID_PARAMS)
        previous = {"provider": provider.name, "id": provider.model}
        self._charge_write(source, json_size(model_id))
        provider.model = model_id
        self.session.writer.append_model_change(provider.name, model_id)
        self.audit(
            {
                "event": "extension",
                "action": "set_model",
                "extension": str(source.path),
                "model": model_id,
            }
        )
        await self.session.notify(
            "model_select",
            {
                "model": {"provider": provider.name, "id": model_id},
                "previous_model": previous,
                "source": "extension",
            },
        )
        return True

    async def _op_get_thinking_level(self, *, worker: Any, source: Any) -> str:
        return self.thinking_level

    async def _op_set_thinking_level(self, *, worker: Any, source: Any, level: str) -> None:
        if level not in ("off", "minimal", "low", "medium", "high", "xhigh"):
            raise _refuse(
                f"set_thinking_level: unknown level {level!r}", methods.ERROR_INVALID_PARAMS
            )
        if level != self.session.thinking_level:
            # pi records a level change in the session (pi docs session-format.md)
            # and says so on the stream (json.md "thinking_level_changed").
            self.session.thinking_level = level
            self.session.writer.append_thinking_level_change(level)
            await self.emit({"type": "thinking_level_changed", "level": level})

    async def _op_get_flag(self, *, worker: Any, source: Any, name: str) -> Any:
        own = {flag.name: flag for flag in _registrations(worker, "flags")}
        if name not in own:
            raise _refuse(
                f"get_flag: this extension registered no flag {name!r}",
                methods.ERROR_INVALID_PARAMS,
            )
        return self.flags.get(name, own[name].default)

    async def _op_request_reload(self, *, worker: Any, source: Any) -> dict[str, Any]:
        if self.replacing:
            return {"ignored": True}  # asked during a reload: no loops
        self.reload_requested = True
        if self.idle and self._queued == 0:
            self.enqueue(_noop)  # settles at once, which reloads
        return {"deferred": True}

    async def _op_is_idle(self, *, worker: Any, source: Any) -> bool:
        return self.idle

    async def _op_abort(self, *, worker: Any, source: Any) -> None:
        self.session.abort()

    async def _op_compact(
        self, *, worker: Any, source: Any, instructions: Any = None
    ) -> dict[str, Any]:
        limits = self.budgets.limits(source.origin)
        check_text("instructions", instructions, limits.message_bytes, optional=True)
        return await self.compact(instructions)

    async def compact(self, instructions: str | None = None) -> dict[str, Any]:
        """Compact the session now (``ctx.compact()``, RPC ``compact``, reason
        ``manual``): see `pi_sandbox.supervisor.sessions.compaction_runner`. Works
        whether automatic compaction is on or off.

        Returns:
            ``{"compacted": True, "cancelled": False, "summary", "firstKeptEntryId",
            "tokensBefore", "estimatedTokensAfter", "usage"?, "details"?}`` (pi's
            result, plus the older ``first_kept_entry_id``/``tokens_before``);
            ``{"compacted": False, "cancelled": True, "reason"?}`` when a
            ``session_before_compact`` handler cancelled it (or failed: it fails
            closed); ``{"compacted": False, "cancelled": False, "reason": "nothing to
            compact"}`` when everything fits in ``compaction.keepRecentTokens``.

        Raises:
            HostCallError: the agent is running. ProviderError: the summary request failed.
        """
        from pi_sandbox.supervisor.sessions.compaction_runner import CompactionCancelledError

        if self.session.running:
            raise _refuse("cannot compact while the agent is running; wait until it is idle")
        try:
            result = await self.session.compactor.compact(
                self.session, reason="manual", instructions=instructions
            )
        except CompactionCancelledError as exc:
            return {"compacted": False, "cancelled": True, "summary": None, "reason": str(exc)}
        if result is None:
            return {
                "compacted": False,
                "cancelled": False,
                "summary": None,
                "reason": "nothing to compact",
            }
        return {
            "compacted": True,
            "cancelled": False,
            **result,
            "first_kept_entry_id": result["firstKeptEntryId"],
            "tokens_before": result["tokensBefore"],
        }

    async def _op_get_system_prompt(self, *, worker: Any, source: Any) -> str:
        return self.session.current_system_prompt()

    async def _op_session(self, *, worker: Any, source: Any, what: str) -> Any:
        writer = self.session.writer
        if what == "entries":
            return writer.entries
        if what == "branch":
            return writer.branch()
        if what == "leaf_id":
            return writer.last_id
        if what == "session_file":
            return str(writer.path) if writer.path is not None else None
        if what == "session_id":
            return writer.header.id
        if what == "labels":  # issue 15: ctx.session_manager.get_label(s)
            from pi_sandbox.supervisor.sessions.tree import labels_of

            return {target: label for target, (label, _) in labels_of(writer.entries).items()}
        raise _refuse(f"session_manager: unknown view {what!r}", methods.ERROR_INVALID_PARAMS)

    async def _op_ui(
        self, *, worker: Any, source: Any, kind: str, timeout: Any = None, **args: Any
    ) -> Any:
        check_ui_call(kind, args, self.budgets.limits(source.origin))
        self.budgets.take(source.path, source.origin, "ui")
        if kind in ("notify", "set_status", "set_widget", "set_title", "set_editor_text"):
            await self.emit({"type": f"ui_{kind}", "extension": str(source.path), **args})
            return None
        if not self.pool.config.has_ui or self.ui_closed:
            return _UI_DEFAULTS[kind]
        self._ui_ids += 1
        request_id = f"ui-{self._ui_ids}"
        options = [str(o) for o in args.get("options") or []] if kind == "select" else []
        slot = (trio.Event(), [_UI_DEFAULTS[kind]], kind, options)
        self.ui_pending[request_id] = slot
        limit = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None
        request = {
            "type": "extension_ui_request",
            "ui_id": request_id,
            "method": kind,
            "extension": str(source.path),
            **args,
        }
        if limit is not None:
            # pi docs rpc-extension-ui.md: the dialog's timeout in milliseconds, so a
            # client can show a countdown; pi resolves it at the deadline, not the client.
            request["timeout"] = round(limit * 1000)
        await self.emit(request)
        try:
            # A dialog ends at its timeout, or when the run it belongs to is aborted.
            with trio.move_on_after(limit if limit is not None else float("inf")):
                if self.session.running:
                    async with self.session.abortable():
                        await slot[0].wait()
                else:
                    await slot[0].wait()
        finally:
            self.ui_pending.pop(request_id, None)
            if not slot[0].is_set():
                with trio.CancelScope(shield=True):
                    await self.emit({"type": "extension_ui_cancelled", "ui_id": request_id})
        return slot[1][0]

    def ui_response(self, request_id: str, value: Any) -> bool:
        """An RPC client's answer to ``extension_ui_request``; False if unknown.

        The answer must fit the dialog (``confirm``: a boolean; ``select``: one of
        the options; ``input``/``editor``: a string); anything else, or null, is
        the dialog's default (``False``/``None``): a wrong type never turns into a yes.
        """
        slot = self.ui_pending.get(request_id)
        if slot is None:
            return False
        answered, value_slot, kind, options = slot
        if kind == "confirm":
            value = value if isinstance(value, bool) else False
        elif kind == "select":
            value = value if isinstance(value, str) and value in options else None
        else:
            value = value if isinstance(value, str) else None
        value_slot[0] = value
        answered.set()
        return True

    def close_ui(self) -> None:
        """The RPC client's input ended: open dialogs resolve to their defaults and
        later ones do not wait; open approval requests, and later ones, are denied
        (issue 18)."""
        self.ui_closed = True
        for answered, _, _, _ in list(self.ui_pending.values()):
            answered.set()
        if (approvals := self.session.pipeline.approvals) is not None:
            approvals.close()

    def answer_approval(
        self, request_id: str, decision: str, scope: str | None = None, message: Any = None
    ) -> str | None:
        """Answer a ``policy_approval_request`` (issue 18); None when accepted, else
        why not (see `ApprovalBroker.answer`). The request stays open when refused."""
        approvals = self.session.pipeline.approvals
        if approvals is None:
            return "this run asks no approvals (no user interface, or --ci)"
        return approvals.answer(request_id, decision, scope, message)

    def approval_response(
        self, request_id: str, decision: str, scope: str | None = None, message: Any = None
    ) -> bool:
        """A user's answer to a ``policy_approval_request`` event (issue 18): the
        terminal UI and RPC ``policy_approval_response`` call it.

        Args:
            request_id: the request's ``id``.
            decision: ``"allow_once"``, ``"allow_session"`` or ``"deny"``.
            scope: for ``allow_session``, one of the request's ``scopes[].id``.
            message: for ``deny``, optional text the model gets with the denial.

        Returns:
            False when there is no such open request or the answer does not fit it
            (unknown decision, a scope the request did not offer, a message that is
            not a string or too long); the request then stays open.
        """
        return self.answer_approval(request_id, decision, scope, message) is None

    async def _op_wait_for_idle(self, *, worker: Any, source: Any, timeout: Any = None) -> bool:
        limit = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else float("inf")
        with trio.move_on_after(limit):
            await self.session.idle.wait()
            return True
        return False

    async def _op_new_session(
        self, *, worker: Any, source: Any, with_session: str | None = None
    ) -> dict[str, Any]:
        return await self.replace("new", requester=worker, source=source, with_session=with_session)

    async def _op_fork(
        self, *, worker: Any, source: Any, entry_id: str, with_session: str | None = None
    ) -> dict[str, Any]:
        return await self.replace(
            "fork", requester=worker, source=source, with_session=with_session, entry_id=entry_id
        )

    async def _op_switch_session(
        self, *, worker: Any, source: Any, session_file: str, with_session: str | None = None
    ) -> dict[str, Any]:
        return await self.replace(
            "switch",
            requester=worker,
            source=source,
            with_session=with_session,
            session_file=session_file,
        )

    async def _op_reload(
        self, *, worker: Any, source: Any, with_session: str | None = None
    ) -> dict[str, Any]:
        return await self.replace(
            "reload", requester=worker, source=source, with_session=with_session
        )

    async def _op_navigate_tree(
        self, *, worker: Any, source: Any, target_id: str, with_session: str | None = None
    ) -> dict[str, Any]:
        if target_id not in self.session.writer.by_id:
            raise _refuse(
                f"navigate_tree: no entry {target_id!r} in this session",
                methods.ERROR_INVALID_PARAMS,
            )
        result = await self.navigate_tree(target_id, summarize=False)
        if with_session and not result.get("cancelled"):
            await self._callback(source, with_session)
        return {"cancelled": bool(result.get("cancelled"))}

    # --- the session tree (issue 15; sessions/tree.py) -----------------------------------------

    async def navigate_tree(
        self,
        target_id: str,
        *,
        summarize: bool | None = None,
        custom_instructions: str | None = None,
        replace_instructions: bool = False,
        label: str | None = None,
    ) -> dict[str, Any]:
        """Continue the session from ``target_id`` (RPC ``navigate_tree``,
        ``ctx.navigate_tree``; `sessions.tree.navigate`). ``summarize`` None follows
        the settings: a ``branch_summary`` of the abandoned branch unless
        ``branchSummary.skipPrompt`` is true.

        Raises:
            HostCallError: the agent is running, a session change is in progress, or
                no entry has that id. ProviderError: the summary request failed.
        """
        from pi_sandbox.supervisor.sessions.tree import branch_summary_settings, navigate

        if self.session.running or self.replacing:
            raise _refuse(
                "cannot navigate the session tree while the agent is running or the session "
                "is being replaced; wait until it is idle"
            )
        writer = self.session.writer
        if target_id not in writer.by_id:
            raise _refuse(
                f"navigate_tree: no entry {target_id!r} in this session",
                methods.ERROR_INVALID_PARAMS,
            )
        if summarize is None:
            trusted = bool(self.trust_info is not None and self.trust_info().trusted)
            settings = branch_summary_settings(
                self.agent_dir or Path("/nonexistent"), self.pool.config.cwd, trusted
            )
            for problem in settings["problems"]:
                await self.emit({"type": "pisandbox_warning", "message": problem})
            summarize = not settings["skipPrompt"]
        self.replacing = True  # no prompt, reload or second navigation meanwhile
        try:
            return await navigate(
                writer=writer,
                target_id=target_id,
                summarize=summarize,
                custom_instructions=custom_instructions,
                replace_instructions=replace_instructions,
                label=label,
                dispatch=self.pool.dispatch,
                report=self.report,
                notify=self.session.notify,
                summarise=self._summarise_branch,
                max_supplied_chars=MAX_SUPPLIED_CHARS,
            )
        except KeyError as exc:
            raise _refuse(
                f"navigate_tree: no entry {target_id!r}", methods.ERROR_INVALID_PARAMS
            ) from exc
        finally:
            self.replacing = False

    async def _summarise_branch(self, transcript: str, ask: str) -> str:
        """The model's summary of an abandoned branch (like `_summarise` for
        compaction): one request, no tools."""
        turn = await self.session.provider.complete(
            system_prompt="You write summaries of coding sessions.",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"<conversation>\n{transcript}\n</conversation>\n\n{ask}",
                        }
                    ],
                    "timestamp": now_ms(),
                }
            ],
            tools=[],
        )
        return turn.text.strip() or "(the model returned an empty summary)"

    async def set_session_name(self, name: str) -> None:
        """RPC ``set_session_name``: a ``session_info`` entry (pi normalises line
        breaks to spaces and trims), then ``session_info_changed`` (``name``).

        Raises:
            HostCallError: the name is empty once normalised.
        """
        value = " ".join(name.replace("\r", "\n").split("\n")).strip()
        if not value:
            raise _refuse(
                "set_session_name: 'name' must not be empty", methods.ERROR_INVALID_PARAMS
            )
        self.session.writer.append_session_info(value[:1000])
        # pi's event on the stream (rpc.md / json.md "session_info_changed").
        await self.emit({"type": "session_info_changed", "name": self.session.writer.name})
        await self.session.notify("session_info_changed", {"name": self.session.writer.name})

    def set_label(self, entry_id: str, label: str | None) -> dict[str, Any]:
        """RPC ``set_label`` (our addition; pi has ``/label`` and ``pi.setLabel``):
        a ``label`` entry for ``entry_id``; None or "" clears it.

        Raises:
            HostCallError: no entry has that id.
        """
        writer = self.session.writer
        if entry_id not in writer.by_id:
            raise _refuse(
                f"set_label: no entry {entry_id!r} in this session", methods.ERROR_INVALID_PARAMS
            )
        value = label.strip()[:1000] if isinstance(label, str) and label.strip() else None
        return writer.append_label(entry_id, value)

    # --- generation replacement ----------------------------------------------------------------

    async def replace(
        self,
        kind: str,
        *,
        requester: WorkerProcess | None = None,
        source: ExtensionSource | None = None,
        with_session: str | None = None,
        entry_id: str | None = None,
        session_file: str | None = None,
        position: str = "at",
    ) -> dict[str, Any]:
        """Reload (``kind="reload"``) or replace the session (``new``, ``fork``,
        ``switch``): see the module docstring. Returns ``{"cancelled": bool}``.

        A fork copies the path from the root to ``entry_id`` (``position="at"``,
        ``clone``) or to its parent (``"before"``, RPC ``fork`` of a user message)
        into a new session whose header names the old file as ``parentSession``
        (pi's ``createBranchedSession``, issue 15).

        Raises:
            HostCallError: the agent is running, another replacement is in progress,
                or the fork point / session file is not valid.
        """
        if self.session.running:
            raise _refuse(
                f"cannot {'reload' if kind == 'reload' else 'replace the session'} while the "
                "agent is running; wait until it is idle (ctx.wait_for_idle) or abort it"
            )
        if self.replacing:
            raise _refuse("a reload or session change is already in progress")
        writer = self.session.writer
        new_writer: SessionWriter | None = None
        if kind == "fork" and (entry_id is None or entry_id not in writer.by_id):
            raise _refuse(
                f"fork: no entry {entry_id!r} in this session", methods.ERROR_INVALID_PARAMS
            )
        if kind == "switch":
            new_writer = self._open_session(session_file)
        before = {
            "new": ("session_before_switch", {"reason": "new"}),
            "switch": (
                "session_before_switch",
                {"reason": "resume", "target_session_file": session_file},
            ),
            "fork": ("session_before_fork", {"entry_id": entry_id, "position": position}),
        }.get(kind)
        if before is not None:
            outcome = await self.pool.dispatch(*before)
            await self.report(outcome.errors, before[0])
            if _cancelled(outcome.state):
                if new_writer is not None:
                    new_writer.close()
                return {"cancelled": True}
        self.replacing = True
        previous_file = str(writer.path) if writer.path is not None else None
        try:
            outcome = await self.pool.dispatch(
                "session_shutdown",
                {"reason": kind},
                timeout_s=min(self.pool.config.hook_timeout_s, SHUTDOWN_WAIT_S),
            )
            await self.report(outcome.errors, "session_shutdown")
            old = await self.pool.end_generation()
            self._retire(old, requester)
            if kind == "new":
                new_writer = self.new_writer()
            elif kind == "fork":
                new_writer = self._fork_writer(writer, entry_id, position)
            if new_writer is not None:
                writer.close()
                self.session.writer = new_writer
                self.session.steering.clear()
                self.session.follow_ups.clear()
                if (approvals := self.session.pipeline.approvals) is not None:
                    approvals.clear_grants()  # "for this session" ends with it
            sources, notices = self.discover()
            for notice in notices:
                await self.emit({"type": "pisandbox_notice", "message": notice})
            await self.pool.start_generation(sources)
            await self.report(self.pool.load_errors, "load")
            self.pending_reports.clear()
            reason = {"reload": "reload", "new": "new", "fork": "fork", "switch": "resume"}[kind]
            await self.session.notify(
                "session_start", {"reason": reason, "previous_session_file": previous_file}
            )
            await self._discover_resources(reason)
            after = {
                "new": "session_switch",
                "switch": "session_switch",
                "fork": "session_fork",
            }.get(kind)
            if after is not None:
                await self.session.notify(
                    after, {"reason": reason, "previous_session_file": previous_file}
                )
            self.audit({"event": "extension", "action": kind, "generation": self.pool.generation})
            if kind == "reload":
                await self._reload_compaction_settings()
            await self.emit(
                {
                    "type": "session_replaced" if kind != "reload" else "reloaded",
                    "reason": reason,
                    "generation": self.pool.generation,
                    "sessionFile": str(self.session.writer.path)
                    if self.session.writer.path
                    else None,
                }
            )
            if with_session and source is not None:
                await self._callback(source, with_session)
        finally:
            self.replacing = False
        return {"cancelled": False}

    async def _reload_compaction_settings(self) -> None:
        """``/reload`` re-reads the ``compaction`` settings (issue 15); a malformed value
        keeps the previous settings, with a warning naming the file and field."""
        from pi_sandbox.supervisor.sessions.compaction_settings import CompactionSettingsError

        try:
            notices = self.session.compactor.reload()
        except CompactionSettingsError as exc:
            await self.emit(
                {
                    "type": "pisandbox_warning",
                    "message": f"{exc}; the previous compaction settings stay",
                }
            )
            return
        for notice in notices:
            await self.emit({"type": "pisandbox_notice", "message": notice})

    def _fork_writer(
        self, writer: SessionWriter, entry_id: str | None, position: str
    ) -> SessionWriter:
        """The new session of a fork or clone (see `replace`)."""
        from pi_sandbox.supervisor.sessions.tree import branch_path_records, write_branch_file

        leaf = entry_id
        if position == "before" and entry_id is not None:
            leaf = writer.by_id[entry_id].get("parentId")
        records = branch_path_records(writer.by_id, leaf)
        if writer.path is None:
            new_writer = self.new_writer()
            for record in records:
                new_writer._remember(record)  # in memory: nothing to write
            return new_writer
        path = write_branch_file(
            records, writer.path.parent, writer.header.cwd, parent_session=str(writer.path)
        )
        return SessionWriter.resume(path)

    def _open_session(self, session_file: str | None) -> SessionWriter:
        if not session_file:
            raise _refuse("switch_session: no session file given", methods.ERROR_INVALID_PARAMS)
        path = Path(session_file).expanduser()
        sessions = (self.agent_dir / "sessions").resolve() if self.agent_dir else None
        try:
            resolved = path.resolve(strict=True)
        except OSError as exc:
            raise _refuse(
                f"switch_session: {session_file}: {exc.strerror or exc}",
                methods.ERROR_INVALID_PARAMS,
            ) from exc
        allowed = [d.resolve() for d in self.session_dirs]
        if sessions is not None:
            allowed.append(sessions)
        if not any(resolved.is_relative_to(d) for d in allowed):
            raise _refuse(
                f"switch_session: {session_file} is not a session file under "
                f"{' or '.join(map(str, allowed)) or 'the session directory'}",
                methods.ERROR_INVALID_PARAMS,
            )
        try:
            opened = SessionWriter.resume(resolved)
        except (OSError, ValueError) as exc:
            raise _refuse(f"switch_session: {exc}", methods.ERROR_INVALID_PARAMS) from exc
        # issue 15: this run's workers, sandbox, policy and trust belong to its working
        # directory; a session recorded elsewhere is resumed by a run started there.
        recorded = opened.header.cwd
        if recorded and Path(recorded).resolve() != Path(self.pool.config.cwd).resolve():
            opened.close()
            raise _refuse(
                f"switch_session: {session_file} was recorded in {recorded}, and this run "
                f"works in {self.pool.config.cwd} (its sandbox, policy and trust are for that "
                f"directory); resume it with `pi --session {resolved}`, which runs it there",
                methods.ERROR_INVALID_PARAMS,
            )
        return opened

    def _retire(self, old: list[WorkerProcess], requester: WorkerProcess | None) -> None:
        """Stop an ended generation's workers: at once, except that the worker whose
        command asked for the change may finish it (up to `STALE_GRACE_S`). The
        workers are already in ``pool.retired`` (`WorkerPool.end_generation`)."""
        assert self._nursery is not None

        async def stop() -> None:
            if requester is not None and requester in old:
                done = self._command_done.get(requester)
                if done is not None:
                    with trio.move_on_after(STALE_GRACE_S):
                        await done.wait()
            async with trio.open_nursery() as nursery:
                for worker in old:
                    # Longer than the worker's wait for its stale threads (runtime
                    # STALE_THREAD_GRACE_S), so their errors are reported (case 3).
                    nursery.start_soon(
                        functools.partial(worker.aclose, grace_s=STALE_RETIRE_GRACE_S)
                    )
            for worker in old:
                with contextlib.suppress(ValueError):
                    self.pool.retired.remove(worker)

        self._nursery.start_soon(stop)

    async def _callback(self, source: ExtensionSource, name: str) -> None:
        for index, (current, _worker) in enumerate(self.pool.extensions):
            if current.path != source.path:
                continue
            live = await self.pool.ensure_extension_worker(index)
            if live is None:
                break
            self._command_workers.add(live)
            try:
                await live.request(
                    methods.SESSION_CALLBACK,
                    {"callback": name, "ctx": self.pool._ctx()},
                    timeout_s=COMMAND_TIMEOUT_S,
                )
            except PiSandboxError as exc:
                await self.report(
                    [
                        {
                            "path": str(source.path),
                            "message": f"with_session callback failed: {exc}",
                            "traceback": getattr(exc, "remote_traceback", ""),
                        }
                    ],
                    "with_session",
                )
            finally:
                self._command_workers.discard(live)
            return
        await self.report(
            [
                {
                    "path": str(source.path),
                    "message": "with_session callback not run: the extension "
                    "did not load in the new session",
                }
            ],
            "with_session",
        )

    async def _discover_resources(self, reason: str) -> None:
        """``resources_discover`` per extension (so each path is checked against the
        extension that named it), then the resource set for the current trust: the
        supervisor reads every file itself (issue 6)."""
        from pi_sandbox.resources.resource_set import ExtensionResourcePaths

        self.resources = {}
        contributed: list[ExtensionResourcePaths] = []
        payload = {"cwd": str(self.session.cwd), "reason": reason}
        for index, (source, worker) in enumerate(list(self.pool.extensions)):
            registrations = worker.registrations
            if registrations is None or "resources_discover" not in registrations.events:
                continue
            outcome = await self.pool.dispatch("resources_discover", payload, only=index)
            await self.report(outcome.errors, "resources_discover")
            for key, values in outcome.state.items():
                merged = self.resources.setdefault(key, [])
                merged += [v for v in values if v not in merged]
            contributed.append(
                ExtensionResourcePaths(
                    source.path,
                    trusted=source.origin in ("cli", "user")
                    or self.pool.config.project_trust == "yes",
                    skill_paths=tuple(outcome.state.get("skill_paths", ())),
                    prompt_paths=tuple(outcome.state.get("prompt_paths", ())),
                )
            )
        if self.load_resources is None:
            return
        self.resource_set = await trio.to_thread.run_sync(self.load_resources, tuple(contributed))
        for diagnostic in self.resource_set.diagnostics:
            await self.emit(
                {
                    "type": "resource_diagnostic",
                    "diagnostic": diagnostic["type"],
                    "message": diagnostic["message"],
                    "path": diagnostic["path"],
                }
            )

    def abort_bash(self) -> bool:
        """RPC ``abort_bash``: cancel the user's running ``bash`` command(s) (the tool
        worker gets ``$/cancel`` and kills the command's process group). False when
        none runs."""
        for scope in list(self._bash_scopes):
            scope.cancel()
        return bool(self._bash_scopes)

    async def user_bash(
        self,
        command: str,
        *,
        exclude_from_context: bool = False,
        on_output: Callable[[str], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Run a command the user typed (RPC ``bash``; pi's ``!cmd``): ``user_bash``
        handlers may supply the result instead (first decisive wins); otherwise the
        policy gate decides and the tool worker runs it in the sandbox. The output is
        added to the session as a ``bashExecution`` message (with
        ``exclude_from_context``, pi's ``!!cmd``: kept in the session, never sent to
        the model).

        ``user_bash`` fails closed (issue 13 §1): a handler that raises, returns a
        malformed result, times out or whose worker crashes (or is disabled) blocks
        the command.

        ``on_output`` (RPC ``bash``: ``bash_execution_update``) is awaited with each
        chunk of the command's output as the tool worker streams it; an extension's
        result arrives whole, in one chunk. `abort_bash` cancels the command: the
        result then says ``cancelled`` with the output so far.

        Returns:
            ``{"output": str, "exit_code": int | None, "cancelled": bool, "by": str,
            "truncated": bool}``.

        Raises:
            HostCallError: the policy denied the command, or a ``user_bash`` handler
                failed (the message names the extension and the failure).
        """
        outcome = await self.pool.dispatch(
            "user_bash", {"command": command, "cwd": str(self.session.cwd)}
        )
        await self.report(outcome.errors, "user_bash")
        if outcome.failure is not None:
            self.audit(
                {
                    "event": "extension",
                    "action": "user_bash_blocked",
                    "reason": outcome.failure,
                }
            )
            raise _refuse(f"Blocked: a user_bash hook failed (fail-closed): {outcome.failure}")
        supplied = outcome.state.get("result")
        if isinstance(supplied, dict) and isinstance(supplied.get("result"), dict):
            supplied = supplied["result"]
        exit_code = supplied.get("exit_code") if isinstance(supplied, dict) else None
        if (
            isinstance(supplied, dict)
            and isinstance(supplied.get("output"), str)
            and (exit_code is None or (type(exit_code) is int and -255 <= exit_code <= 255))
        ):
            result = {
                "output": supplied["output"][:MAX_SUPPLIED_CHARS],
                "exit_code": exit_code,
                "cancelled": supplied.get("cancelled") is True,
                "truncated": supplied.get("truncated") is True
                or len(supplied["output"]) > MAX_SUPPLIED_CHARS,
                "by": "extension",
            }
            if on_output is not None and result["output"]:
                await on_output(result["output"])
        else:
            if supplied is not None:
                # A handler answered with something that is not a result: it is a
                # malformed return, and user_bash fails closed (issue 13 §1).
                problem = (
                    "user_bash: a result must be {'result': {'output': str, 'exit_code': int}}"
                )
                await self.report([{"message": problem}], "user_bash")
                raise _refuse(f"Blocked: a user_bash hook returned a malformed result: {problem}")
            from pi_sandbox.supervisor.providers.base import ToolCall

            pipeline = self.session.pipeline
            call = ToolCall(f"user_bash_{now_ms()}", "bash", {"command": command})
            denial: str | None = None
            # An abort (Esc, RPC abort) ends an approval prompt of the user's own
            # command too (issue 18): the command is then denied.
            with trio.CancelScope() as asking:
                self._command_scopes.add(asking)
                try:
                    denial = await pipeline._gate(call, {"command": command})
                finally:
                    self._command_scopes.discard(asking)
            if asking.cancelled_caught:
                raise _refuse("Operation aborted")
            if denial:
                raise _refuse(denial)
            worker = await self.pool.ensure_tool_worker()
            streamed: list[str] = []

            async def chunk(text: str) -> None:
                streamed.append(text)
                if on_output is not None:
                    await on_output(text)

            raw: dict[str, Any] | None = None
            # The worker's progress for this call reaches `chunk` (run.py's tool
            # update handler looks the call up in `user_bash_output`).
            self.pool.running_calls[call.id] = worker
            self.pool.user_bash_output[call.id] = chunk
            try:
                with trio.CancelScope() as scope:
                    self._bash_scopes.add(scope)
                    raw = await worker.request(
                        methods.TOOL_EXECUTE,
                        {
                            "tool_call_id": call.id,
                            "name": "bash",
                            "params": {"command": command},
                            "ctx": self.pool._ctx(),
                        },
                        timeout_s=pipeline.tool_timeout_s + 30,
                    )
            finally:
                self._bash_scopes.discard(scope)
                self.pool.running_calls.pop(call.id, None)
                self.pool.user_bash_output.pop(call.id, None)
            if raw is None:  # abort_bash: the output so far
                result = {
                    "output": "".join(streamed),
                    "exit_code": None,
                    "cancelled": True,
                    "by": "tool worker",
                    "truncated": False,
                }
            else:
                text = "".join(
                    b.get("text", "") for b in (raw.get("content") or []) if isinstance(b, dict)
                )
                details = raw.get("details") or {}
                result = {
                    "output": text,
                    "exit_code": details.get("exit_code")
                    if isinstance(details.get("exit_code"), int)
                    else None,
                    "cancelled": bool(details.get("aborted", False)),
                    "by": "tool worker",
                    "truncated": bool(details.get("truncated", False)),
                }
        message = {
            "role": "bashExecution",
            "command": command,
            "output": result["output"],
            "exitCode": result["exit_code"],
            "cancelled": result["cancelled"],
            # pi's BashExecutionMessage.truncated is required (message-types.md).
            "truncated": result["truncated"],
            "timestamp": now_ms(),
        }
        if exclude_from_context:
            message["excludeFromContext"] = True  # pi's ``!!cmd`` (issue 18)
        await self.session.commit(message)
        return result

    def state(self) -> dict[str, Any]:
        """What an RPC ``get_state`` answers."""
        writer = self.session.writer
        return {
            "model": {"provider": self.session.provider.name, "id": self.session.provider.model},
            "thinking_level": self.thinking_level,
            "is_idle": self.idle,
            "generation": self.pool.generation,
            "session_file": str(writer.path) if writer.path is not None else None,
            "session_id": writer.header.id,
            "session_name": writer.name,
            # pi's RPC get_state names (issue 15).
            "autoCompactionEnabled": self.session.compactor.auto_enabled(self.session),
            "isCompacting": self.session.compactor.compacting,
            "pending": {
                "steering": len(self.session.steering),
                "follow_up": len(self.session.follow_ups),
                "next_turn": len(self.session.next_turn),
            },
            "active_tools": [t.name for t in self.active_definitions()],
            "commands": sorted([*BUILTIN_COMMANDS, *self.pool.commands]),
            "extensions": [str(s.path) for s, _ in self.pool.extensions],
            "resources": self.resources,
            "trust": self.trust_info().as_dict() if self.trust_info is not None else None,
            "skills": [
                {"name": k.name, "source": k.source, "path": str(k.path)}
                for k in (self.resource_set.skills if self.resource_set else [])
            ],
            "prompts": [
                {"name": t.name, "source": t.source, "path": str(t.path)}
                for t in (self.resource_set.prompts if self.resource_set else [])
            ],
        }


async def _noop() -> None:
    return None


def _cancelled(state: dict[str, Any]) -> bool:
    result = state.get("result")
    return isinstance(result, dict) and result.get("cancel") is True


def _registrations(worker: WorkerProcess, field: str) -> list[Any]:
    registrations = worker.registrations
    return list(getattr(registrations, field, []) or []) if registrations is not None else []


_CAPABILITY = {
    "send_user_message": "send_user_messages",
    "ui": "ui",
    "exec_check": "exec",
    "set_model": "set_model",
}
"""Actions that need a policy capability (issue 5 "Capabilities")."""

_COMMAND_ONLY = {
    "wait_for_idle",
    "new_session",
    "fork",
    "switch_session",
    "navigate_tree",
    "reload",
}
"""Actions of the command context only."""


def parse_extension_flags(
    argv: Sequence[str], flags: list[Any], build_parser: Callable[[], Any]
) -> tuple[dict[str, Any], str]:
    """Re-parse the command line with the flags extensions registered; returns the
    flag values and the prompt text.

    Raises:
        UsageError: argparse's message (an unknown flag, a missing value).
    """
    parser = build_parser()
    seen: set[str] = set()
    for flag in flags:
        if flag.name in seen:
            continue
        seen.add(flag.name)
        try:
            if flag.type == "bool":
                parser.add_argument(
                    f"--{flag.name}",
                    dest=f"x_{flag.name}",
                    action="store_true",
                    default=flag.default or False,
                    help=flag.description,
                )
            else:
                parser.add_argument(
                    f"--{flag.name}",
                    dest=f"x_{flag.name}",
                    metavar="VALUE",
                    default=flag.default,
                    help=flag.description,
                )
        except Exception as exc:  # argparse.ArgumentError: clashes with a built-in option
            raise UsageError(
                f"extension flag --{flag.name} clashes with a pi option: {exc}"
            ) from exc
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(list(argv))
    except SystemExit as exc:
        lines = stderr.getvalue().strip().splitlines()
        text = lines[-1] if lines else "bad arguments"
        typo = unknown_option_message(parser, argv)
        raise UsageError(typo or text.removeprefix("pi: ").removeprefix("error: ")) from exc
    values = {name: getattr(args, f"x_{name}") for name in seen}
    return values, list(args.message)


def unknown_option_message(parser: Any, argv: Sequence[str]) -> str | None:
    """``unknown option --modle (did you mean --model?)`` for the first option in
    ``argv`` that ``parser`` does not know, or None when every option is known
    (issue 17 §5). Options after ``--`` are words of the prompt."""
    from pi_sandbox.supervisor.modes.option_suggestions import closest_option

    known = [o for action in parser._actions for o in action.option_strings]
    for token in argv:
        if token == "--":
            break
        if not token.startswith("-") or token == "-":
            continue
        name = token.split("=", 1)[0]
        if name in known:
            continue
        if not name.startswith("--") and len(name) > 2 and name[:2] in known:
            continue  # -C/dir style: a short option with its value attached
        close = closest_option(name, known)
        hint = f" (did you mean {close}?)" if close else ""
        return f"unknown option {name}{hint}"
    return None
