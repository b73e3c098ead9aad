"""The tool call pipeline (DESIGN §5): validate, gate, hook, execute, transform, persist.

For one assistant message's sibling tool calls:

1. Unknown tool or arguments that fail the tool's JSON Schema → error result, no hooks.
2. Policy gate: ``deny`` → error result with the rule's reason; ``ask`` → put to the
   user through the ``approvals`` broker (issue 18), or allowed by a session grant that
   covers it; denied when there is no UI to ask (print and json modes, ``--ci``).
3. Extension ``tool_call`` hooks, fail-closed (error, timeout or crash blocks the call).
4. If a hook changed the input: schema validation and the policy gate again.
5. Execute in the owning worker. Preflight runs in source order, execution is
   concurrent, writes to the same path are serialised, and results come back in
   source order.
6. ``tool_result`` hooks (chained patches), fail-closed: when one fails the result is
   withheld (issue 13 §1).

The gate decides, the sandbox enforces: nothing here checks paths for safety.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import trio

from pi_sandbox.errors import (
    HookFailedError,
    PiSandboxError,
    RemoteError,
    WorkerCrashedError,
    WorkerError,
    WorkerTimeoutError,
)
from pi_sandbox.policies import READ_LIKE_TOOLS, Policy, evaluate_tool_call, path_exclusions
from pi_sandbox.protocol import methods
from pi_sandbox.protocol.framing import MAX_NESTING, nests_deeper_than
from pi_sandbox.protocol.messages import ToolDefinitionWire, ToolResultWire
from pi_sandbox.supervisor.agent.schema_validation import validator_for
from pi_sandbox.supervisor.audit_log import redact_secrets
from pi_sandbox.supervisor.json_lines import has_non_finite
from pi_sandbox.supervisor.providers.base import ToolCall
from pi_sandbox.supervisor.sessions.session_file import now_ms
from pi_sandbox.supervisor.workers.worker_pool import RegisteredTool, WorkerPool
from pi_sandbox.supervisor.workers.worker_process import WorkerProcess

__all__ = [
    "EmitFn",
    "HostTool",
    "ToolOutcome",
    "ToolPipeline",
    "pi_result",
    "report_extension_errors",
]

EmitFn = Callable[[dict[str, Any]], Awaitable[None]]

# Tools whose `path` argument names a file they write; same-path calls are serialised.
_WRITING_TOOLS = {"write", "edit"}


def _error_result(text: str, **details: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": details, "is_error": True}


def quarantine_event(finding: Any) -> dict[str, Any]:
    """The ``warning`` event (stderr notice, JSON event) for one persistence-guard
    `Finding` (issue 14 §1): what appeared, why it is protected, where it went."""
    if finding.moved_to is not None:
        what = f"pi moved it to {finding.moved_to}: review it there before you use it"
    else:
        what = finding.error or "it could not be moved"
    return {
        "type": "pisandbox_warning",
        "message": f"a sandboxed tool created {finding.path} ({finding.rule}), which a "
        f"later git, editor or agent run would act on; {what}",
        "quarantine": {
            "path": finding.path,
            "rule": finding.rule,
            "moved_to": finding.moved_to,
            "error": finding.error,
        },
    }


async def report_extension_errors(emit: EmitFn, errors: list[dict[str, str]], event: str) -> None:
    """Emit one ``extension_error`` event per failure.

    Args:
        errors: dicts with ``message`` and optionally ``path`` and ``traceback``.
        event: the event the handler failed in, or ``"load"``.
    """
    for error in errors:
        record = {
            "type": "extension_error",
            "extensionPath": error.get("path"),
            "event": event,
            "error": error["message"],
        }
        if error.get("traceback"):
            record["traceback"] = error["traceback"]
        await emit(record)


@dataclass
class ToolOutcome:
    """One tool call's final result, ready to become a ``toolResult`` message."""

    call: ToolCall
    arguments: dict[str, Any]
    result: dict[str, Any]
    blocked: bool = False
    terminate: bool = False
    duration_ms: int | None = None  # how long the tool ran; None when it did not run

    def message(self) -> dict[str, Any]:
        """The ``toolResult`` message in pi's shape (camelCase; ``durationMs`` as pi
        1.6.0 records it)."""
        message = {
            "role": "toolResult",
            "toolCallId": self.call.id,
            "toolName": self.call.name,
            "content": self.result["content"],
        }
        if (details := pi_result(self.call.name, self.result).get("details")) is not None:
            message["details"] = details
        message["isError"] = bool(self.result.get("is_error"))
        if self.duration_ms is not None:
            message["durationMs"] = self.duration_ms
        message["timestamp"] = now_ms()
        return message


def pi_result(
    tool_name: str, result: dict[str, Any], duration_ms: int | None = None
) -> dict[str, Any]:
    """A tool's result as pi 1.6.0 shows it in ``tool_execution_end`` (pi docs json.md
    "Tool execution events"): ``{content, details?, structuredContent?}``.

    The built-in ``bash`` gets pi's ``structuredContent`` (``output``: the result
    text, ``truncated``, ``exit_code``, ``wall_time_seconds`` from ``duration_ms``,
    and ours: ``timed_out``, ``aborted``) and, as pi's bash, no ``details`` (ours stay
    on the result hooks see). A call blocked before it ran keeps its ``details``
    (``blocked_by``: ``policy``, ``extension``, ``validation``, ``abort``)."""
    details = result.get("details") or {}
    out: dict[str, Any] = {"content": result["content"]}
    if tool_name == "bash" and "exit_code" in details and "blocked_by" not in details:
        text = "".join(b.get("text", "") for b in result["content"] if b.get("type") == "text")
        out["structuredContent"] = {
            "output": text,
            "truncated": bool(details.get("truncated")),
            "exit_code": details.get("exit_code"),
            "wall_time_seconds": round((duration_ms or 0) / 1000, 1),
            "timed_out": bool(details.get("timed_out")),
            "aborted": bool(details.get("aborted")),
        }
        return out
    out["details"] = details
    if isinstance(result.get("structuredContent"), dict):
        out["structuredContent"] = result["structuredContent"]
    return out


@dataclass(frozen=True)
class HostTool:
    """A tool the supervisor itself executes (issue 19: ``tool_search``, ``codemode``):
    it passes validation, the policy gate and every hook like a worker's tool; only
    step 5 (execution) differs.

    Attributes:
        definition: its declaration.
        execute: ``await execute(call, arguments, session)`` → a tool result dict
            (``content``, ``details``, ``is_error``); ``session`` is the
            ``AgentSession`` or None.
        source: ``"host"``.
    """

    definition: ToolDefinitionWire
    execute: Callable[[ToolCall, dict[str, Any], Any], Awaitable[dict[str, Any]]]
    source: str = "host"


@dataclass
class _Prepared:
    call: ToolCall
    arguments: dict[str, Any]
    tool: RegisteredTool | HostTool | None = None
    early: dict[str, Any] | None = None
    blocked: bool = False
    original: dict[str, Any] | None = None  # the model's input, when a hook changed it
    terminate: bool = False  # a tool_call hook blocked it with terminate: true
    parent: str | None = None  # the codemode call this nested call belongs to (issue 19)


VALIDATION_TIMEOUT_S = 5.0
"""Deadline for checking one call's arguments against its tool's JSON Schema (seconds)."""


@dataclass
class ToolPipeline:
    """Runs tool calls for one session.

    Attributes:
        pool: the session's workers and tool registry.
        policy: the effective policy (``None``: allow everything, sandbox still applies).
        cwd: the workspace; policy path globs are relative to it.
        emit: receives JSON-mode events (``policy_decision``, ``tool_execution_*``,
            ``extension_error``).
        has_ui: whether an ``ask`` decision can be put to a user.
        tool_timeout_s: wall-clock deadline of one tool call, seconds (the policy's
            ``limits.tool_timeout_s``). An extension worker past it is killed (it is
            respawned for the next call); the tool worker enforces it on ``bash``
            itself (capping the call's ``timeout``) and gets 30 s grace here.
        denied: how many tool calls the policy denied (``ask`` without a UI
            included); CI mode exits 3 when it is not zero.
        approvals: the session's ``ApprovalBroker`` (``supervisor.approvals``), which
            puts ``ask`` decisions to the user; None (``--ci``, no UI): ask = deny.
    """

    pool: WorkerPool
    policy: Policy | None
    cwd: Path
    emit: EmitFn
    has_ui: bool = False
    tool_timeout_s: float = 600.0
    denied: int = 0
    # Whether a tool is active (``--tools``, ``set_active_tools``); None: all are.
    tool_filter: Callable[[str], bool] | None = None
    # Calls running in a worker: id → (tool name, arguments), for the toolName and
    # args of their tool_execution_update events (pi docs json.md).
    running: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    # issue 19: tools the supervisor executes (``tool_search``, ``codemode``), and
    # whether a codemode script may call a tool (None: none may).
    host_tools: dict[str, HostTool] = field(default_factory=dict)
    nested_filter: Callable[[str], bool] | None = None
    approvals: Any = None
    _validators: dict[str, Any] = field(default_factory=dict)
    _path_locks: dict[str, trio.Lock] = field(default_factory=dict)

    async def run(self, calls: list[ToolCall], session: Any = None) -> list[ToolOutcome]:
        """Run sibling tool calls; returns their outcomes in source order.

        Preflight (validation, gate, ``tool_call`` hooks) is sequential in source
        order; execution is concurrent unless a tool of the batch is
        ``execution_mode: sequential``. With a ``session`` (`AgentSession`), its
        ``abort()`` stops the batch: a call aborted in preflight gets an error result
        and later calls get none (issue 5 case 6); running calls are cancelled and get
        an error result. ``tool_result`` hooks still see every result.
        """
        prepared: list[_Prepared] = []
        for call in calls:
            if session is not None and session.aborted:
                break
            item = None
            if session is None:
                item = await self._preflight(call)
            else:
                async with session.abortable():
                    item = await self._preflight(call)
                if item is None or session.aborted:
                    item = _Prepared(call, copy.deepcopy(call.arguments))
                    item.tool = self.lookup(call.name)
                    asked = self.approvals is not None and call.id in self.approvals.aborted_calls
                    if asked:
                        self.approvals.aborted_calls.discard(call.id)
                    # issue 18: aborted while its approval was being asked: denied.
                    text = "Operation aborted" if asked else "Aborted by the user or an extension"
                    item.early, item.blocked = _error_result(text, blocked_by="abort"), True
                    prepared.append(item)
                    break
            prepared.append(item)
        outcomes: list[ToolOutcome | None] = [None] * len(prepared)
        sequential = any(
            item.tool is not None and item.tool.definition.execution_mode == "sequential"
            for item in prepared
        )

        async def execute(index: int, item: _Prepared) -> None:
            outcomes[index] = await self._execute(item, session)

        if sequential:
            for index, item in enumerate(prepared):
                await execute(index, item)
        else:
            try:
                async with trio.open_nursery() as nursery:
                    for index, item in enumerate(prepared):
                        nursery.start_soon(execute, index, item)
            except BaseExceptionGroup as group:
                # A stop of ours in a concurrent call (a disabled tool_result
                # extension: HookFailedError) surfaces as itself, so the run reports
                # it in one line like any fail-closed stop (REDTEAM F7), not as an
                # internal error; anything else stays grouped.
                matched, rest = group.split(PiSandboxError)
                if matched is None or rest is not None:
                    raise
                first: BaseException = matched
                while isinstance(first, BaseExceptionGroup):
                    first = first.exceptions[0]
                raise first from None
        # Before anything else on the host acts on what the calls wrote (issue 14 §1).
        for finding in await self.pool.check_persistence():
            await self.emit(quarantine_event(finding))
        if self.pool.guard_failure is not None:
            raise WorkerError(self.pool.guard_failure)
        for path in self.pool.repair_host_devices():
            self.pool.repaired_devices.append(path)
            await self.emit(
                {
                    "type": "pisandbox_warning",
                    "message": f"a sandboxed tool changed the mode of the host's {path}; "
                    "pi put it back",
                }
            )
        return [o for o in outcomes if o is not None]

    def lookup(self, name: str) -> RegisteredTool | HostTool | None:
        """The tool ``name``: a host tool first (an extension cannot shadow
        ``codemode`` or ``tool_search``), else the worker registry's."""
        return self.host_tools.get(name) or self.pool.tools.get(name)

    async def run_nested(self, call: ToolCall, parent: str, session: Any = None) -> ToolOutcome:
        """Run one call a codemode script made (issue 19): the same steps as a model's
        call — validation, policy gate, ``tool_call`` hooks, execution,
        ``tool_result`` hooks — with `nested_filter` deciding which tools exist, and
        ``parent`` (the codemode call's id) in its audit records and events
        (``parentToolCallId``). Nothing is written to the session file.
        """
        item = await self._preflight(call, parent=parent)
        outcome = await self._execute(item, session)
        for finding in await self.pool.check_persistence():
            await self.emit(quarantine_event(finding))
        return outcome

    # --- preflight (steps 1-4) -------------------------------------------------------------

    async def _validate(self, tool: RegisteredTool, arguments: Any) -> str | None:
        """Check ``arguments`` against the tool's JSON Schema; the problem text, or None.

        Runs in a worker thread with a deadline (`VALIDATION_TIMEOUT_S`): a tool's
        schema comes from an extension, and ``pattern``/``uniqueItems`` on crafted
        input can take minutes; the supervisor's event loop must not wait for it.
        Any failure of the schema itself (a ``$ref`` to nowhere, a recursive
        ``$defs``) is the tool's error, never the session's.
        """
        name = tool.definition.name
        validator = self._validators.get(name)
        if validator is None:
            schema = tool.definition.parameters
            try:
                validator = self._validators[name] = validator_for(schema)
            except jsonschema.SchemaError as exc:
                return f"Tool {name} has an invalid parameter schema: {exc.message}"
            except Exception as exc:  # RecursionError, referencing errors, ...
                return f"Tool {name} has an invalid parameter schema: {type(exc).__name__}"
        if not isinstance(arguments, dict):
            return f"Invalid arguments for tool {name}: expected an object"

        def collect() -> list[Any]:
            return sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))

        errors: list[Any] | None = None
        try:
            if _quick_to_validate(tool.definition.parameters, arguments):
                # No keyword that can run long on crafted input and a small input:
                # checked here, saving the thread hop (issue 19: MCP round trips).
                errors = collect()
            else:
                with trio.move_on_after(VALIDATION_TIMEOUT_S):
                    errors = await trio.to_thread.run_sync(collect, abandon_on_cancel=True)
        except RecursionError:
            return f"Tool {name} has an invalid parameter schema: it refers to itself endlessly"
        except Exception as exc:  # a $ref to nowhere surfaces only while validating
            return f"Tool {name} has an invalid parameter schema: {type(exc).__name__}: {exc}"[:500]
        if errors is None:
            return (
                f"Invalid arguments for tool {name}: checking them against the tool's schema "
                f"took longer than {VALIDATION_TIMEOUT_S:g} s"
            )
        if not errors:
            return None
        lines = [
            f"  {'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in errors[:10]
        ]
        return f"Invalid arguments for tool {name}:\n" + "\n".join(lines)

    async def _gate(
        self, call: ToolCall, arguments: dict[str, Any], parent: str | None = None
    ) -> str | None:
        """Evaluate the policy; returns the denial text, or None when allowed."""
        decision = evaluate_tool_call(self.policy, call.name, arguments, workspace=self.cwd)
        effective = decision.decision
        approvals = self.approvals if self.has_ui else None
        grant = None
        if effective == "ask":
            if approvals is None:
                effective = "deny"  # no one to ask: ask means deny (DESIGN §5)
            else:
                # issue 18: an earlier "allow for this session" of the same rule whose
                # scope covers every part of this call that asks.
                grant = approvals.find_grant(
                    self.policy, call.name, arguments, decision, cwd=self.cwd
                )
                if grant is not None:
                    effective = "allow"
        record: dict[str, Any] = {
            "event": "tool_call",
            "tool_call_id": call.id,
            **({"parent_tool_call_id": parent} if parent is not None else {}),
            "tool": call.name,
            "arguments": redact_secrets(arguments),
            "decision": decision.decision,
            "effective": effective,
            "rule": decision.rule,
            "tier": decision.tier,
            "policy_file": str(decision.source) if decision.source else None,
            "reason": redact_secrets(decision.reason),
        }
        event: dict[str, Any] = {
            "type": "policy_decision",
            "toolCallId": call.id,
            **({"parentToolCallId": parent} if parent is not None else {}),
            "toolName": call.name,
            "decision": decision.decision,
            "effective": effective,
            "rule": decision.rule,
            "reason": redact_secrets(decision.reason),
            "tier": decision.tier,
            "source": str(decision.source) if decision.source else None,
            "commands": decision.commands,
        }
        if grant is not None:
            record["approval"] = f"granted by session approval {grant.approval_id}"
            event["grantedBy"] = grant.approval_id
        self.pool.audit(record)
        await self.emit(event)
        if effective == "allow":
            return None
        rule = f" rule {decision.rule}" if decision.rule else ""
        if effective == "ask":
            outcome = await approvals.ask(
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=arguments,
                decision=decision,
                policy=self.policy,
                cwd=self.cwd,
            )
            if outcome.allowed:
                return None
            self.denied += 1
            why = {
                "user": "denied by the user",
                "timeout": "no answer to the approval prompt in time",
                "closed": "the approval prompt was closed without an answer",
                "abort": "Operation aborted",
            }[outcome.by]
            text = f"Blocked by policy{rule}: {decision.reason} ({why})"
            if outcome.message:
                text += f"\nMessage from the user: {outcome.message}"
            return text
        self.denied += 1
        suffix = " (ask rule in a non-interactive run)" if decision.decision == "ask" else ""
        return f"Blocked by policy{rule}: {decision.reason}{suffix}"

    async def _preflight(self, call: ToolCall, parent: str | None = None) -> _Prepared:
        item = _Prepared(call, copy.deepcopy(call.arguments), parent=parent)
        if required := self.pool.required_failure():
            # issue 13 §2: without a required guard no tool call runs, and the run
            # ends after this batch (the caller turns it into exit status 1).
            item.tool = self.lookup(call.name)
            item.early = _error_result(f"Blocked: {required}", blocked_by="extension")
            item.blocked = item.terminate = True
            return item
        item.tool = self.lookup(call.name)
        if parent is not None:
            # A codemode script reaches what its exposure allows (issue 19), never
            # more: no filter means no tool at all.
            present = self.nested_filter is not None and self.nested_filter(call.name)
        else:
            present = self.tool_filter is None or self.tool_filter(call.name)
        if item.tool is None or not present:
            item.tool = None
            item.early = _error_result(f"Tool {call.name} not found")
            return item
        if nests_deeper_than(item.arguments, MAX_NESTING):
            item.early = _error_result(
                f"Invalid arguments for tool {call.name}: nested deeper than {MAX_NESTING} levels"
            )
            return item
        if has_non_finite(item.arguments):
            item.early = _error_result(
                f"Invalid arguments for tool {call.name}: NaN or an infinite number"
            )
            return item
        if item.tool.source == "builtin" and call.name == "edit":
            # pi's prepareArguments: the single oldText/newText form (and edits sent as
            # a JSON string or one object) become edits[] before validation (issue 17 §6).
            from pi_sandbox.protocol.edit_arguments import prepare_edit_arguments

            item.arguments = prepare_edit_arguments(item.arguments)
        if problem := await self._validate(item.tool, item.arguments):
            item.early = _error_result(problem)
            return item
        if denial := await self._gate(call, item.arguments, parent):
            item.early, item.blocked = _error_result(denial, blocked_by="policy"), True
            return item
        outcome = await self.pool.dispatch(
            "tool_call", {"tool_name": call.name, "tool_call_id": call.id, "input": item.arguments}
        )
        await self._report(outcome.errors, "tool_call")
        if outcome.fatal:
            raise WorkerCrashedError(f"cannot run tool_call hooks: {outcome.fatal}")
        if outcome.state.get("block"):
            item.early = _error_result(
                str(outcome.state.get("reason") or "Blocked"), blocked_by="extension"
            )
            item.blocked = True
            item.terminate = bool(outcome.state.get("terminate"))
            return item
        new_input = outcome.state["input"]
        if new_input != item.arguments:
            # Unlike pi, a mutated input is re-validated and re-gated (DESIGN §4).
            changed = f"A tool_call hook changed the input to {json.dumps(new_input, ensure_ascii=False)[:500]}"
            if problem := await self._validate(item.tool, new_input):
                item.early = _error_result(f"{changed}; {problem}", blocked_by="validation")
                item.blocked = True
                return item
            if denial := await self._gate(call, new_input, parent):
                item.early = _error_result(
                    f"{changed}; {denial}", blocked_by="policy", changed_input=new_input
                )
                item.blocked = True
                return item
            item.original, item.arguments = item.arguments, new_input
        return item

    async def _report(self, errors: list[dict[str, str]], event: str) -> None:
        await report_extension_errors(self.emit, errors, event)

    # --- execution (steps 5-6) -------------------------------------------------------------

    async def _notify(self, event: str, payload: dict[str, Any]) -> None:
        if self.pool.subscribed(event):
            outcome = await self.pool.dispatch(event, payload)
            await self._report(outcome.errors, event)

    async def _execute(self, item: _Prepared, session: Any = None) -> ToolOutcome:
        call = item.call
        duration_ms: int | None = None
        start: dict[str, Any] = {
            "type": "tool_execution_start",
            "toolCallId": call.id,
            "toolName": call.name,
            "args": item.arguments,
        }
        if item.parent is not None:
            start["parentToolCallId"] = item.parent  # a codemode script's call (issue 19)
        if item.original is not None:
            start["originalArgs"] = item.original  # a tool_call hook changed the input
        await self.emit(start)
        await self._notify(
            "tool_execution_start",
            {"tool_call_id": call.id, "tool_name": call.name, "args": item.arguments},
        )
        terminate = item.terminate
        if item.early is not None:
            result = item.early
            if item.blocked and (result.get("details") or {}).get("blocked_by") == "abort":
                # Aborted in preflight: tool_result hooks still see the error result.
                result, terminate = await self._transform(item, result)
        else:
            assert item.tool is not None
            result = None
            lock = self._lock_for(call.name, item.arguments)
            scope = session.abortable() if session is not None else contextlib.nullcontext()
            started = time.monotonic()
            async with scope:
                if lock is None:
                    result = await self._call_worker(item, session)
                else:
                    async with lock:
                        result = await self._call_worker(item, session)
            # pi's durationMs: how long the tool ran (monotonic), not the hooks around it.
            duration_ms = int((time.monotonic() - started) * 1000)
            if result is None:
                result = _error_result("Aborted by the user or an extension", blocked_by="abort")
            terminate = bool(result.pop("terminate", False))
            with trio.CancelScope(shield=bool(session is not None and session.aborted)):
                result, terminate = await self._transform(item, result, terminate)
        self.pool.audit(
            {
                "event": "tool_call_outcome",
                "tool_call_id": call.id,
                **({"parent_tool_call_id": item.parent} if item.parent is not None else {}),
                "tool": call.name,
                "is_error": bool(result.get("is_error")),
                "blocked_by": (result.get("details") or {}).get("blocked_by")
                if item.blocked
                else None,
            }
        )
        end: dict[str, Any] = {
            "type": "tool_execution_end",
            "toolCallId": call.id,
            "toolName": call.name,
            "result": pi_result(call.name, result, duration_ms),
            "isError": bool(result.get("is_error")),
        }
        if duration_ms is not None:
            end["durationMs"] = duration_ms
        if item.parent is not None:
            end["parentToolCallId"] = item.parent  # ours: a codemode script's call
        await self.emit(end)
        await self._notify(
            "tool_execution_end",
            {
                "tool_call_id": call.id,
                "tool_name": call.name,
                "result": {"content": result["content"], "details": result.get("details") or {}},
                "is_error": bool(result.get("is_error")),
            },
        )
        return ToolOutcome(
            call,
            item.arguments,
            result,
            item.blocked,
            terminate,
            duration_ms=duration_ms,
        )

    def _lock_for(self, name: str, arguments: dict[str, Any]) -> trio.Lock | None:
        if name not in _WRITING_TOOLS or not isinstance(arguments.get("path"), str):
            return None
        key = os.path.normpath(os.path.join(self.cwd, os.path.expanduser(arguments["path"])))
        return self._path_locks.setdefault(key, trio.Lock())

    async def _call_worker(self, item: _Prepared, session: Any = None) -> dict[str, Any]:
        assert item.tool is not None
        if isinstance(item.tool, HostTool):
            return await self._call_host(item, session)
        if item.tool.executor is not None:
            return await self._call_executor(item)
        timeout = self.tool_timeout_s
        if item.tool.source == "builtin":
            # The tool worker enforces the deadline itself (it kills the command and
            # reports its output); ours is the backstop for a wedged worker.
            asked = item.arguments.get("timeout")
            if isinstance(asked, int | float):
                timeout = min(float(asked), timeout)
            timeout += 30.0
        params = {
            "tool_call_id": item.call.id,
            "name": item.call.name,
            "params": item.arguments,
            "ctx": {"cwd": str(self.cwd), "has_ui": self.has_ui, "mode": self.pool.config.mode},
        }
        if item.tool.source == "builtin" and item.call.name in READ_LIKE_TOOLS:
            # The gate saw only the search root; what a policy path rule covers below
            # it is skipped by the tool itself (issue 17 §6).
            params["exclusions"] = list(path_exclusions(self.policy, item.call.name))
        worker = item.tool.worker
        before: dict[str, int] = {}
        try:
            if not worker.alive:
                worker = await self._revive(item.tool)
            self.pool.running_calls[item.call.id] = worker
            self.running[item.call.id] = (item.call.name, item.arguments)
            before = worker.limit_events()
            try:
                raw = await worker.request(methods.TOOL_EXECUTE, params, timeout_s=timeout)
            finally:
                self.pool.running_calls.pop(item.call.id, None)
                self.running.pop(item.call.id, None)
            result = ToolResultWire.model_validate(raw).model_dump()
            if problem := _forwarding_problem(result):
                # Passed on as it is, the result would be refused by every worker a
                # tool_result event carries it to (its frame limits), killing them.
                return _error_result(f"Tool {item.call.name} returned {problem}")
            bitten = _limits_reached(before, worker)
            if bitten:
                # What hit the limit (a fork bomb's processes, a runaway allocation)
                # may still hold the sandbox; stop all of it, the next call respawns.
                worker.kill()
                result["content"] = [
                    *result.get("content", []),
                    {
                        "type": "text",
                        "text": f"[pi: {bitten}; every process of this sandbox was stopped]",
                    },
                ]
                result["is_error"] = True
            return result
        except WorkerTimeoutError:
            # The worker may still be spinning in the call (an infinite loop ignores
            # $/cancel): kill it; the next call respawns it (WorkerPool budget).
            worker.kill()
            return _error_result(f"Tool {item.call.name} timed out after {timeout:g} s")
        except RemoteError as exc:
            return _error_result(f"Tool {item.call.name} failed: {exc}")
        except PiSandboxError as exc:
            if bitten := _limits_reached(before, worker):
                # The kernel killed the worker for its cgroup limit (an OOM kill).
                worker.kill()
                return _error_result(
                    f"Tool {item.call.name} failed: {bitten}; every process of this sandbox "
                    "was stopped"
                )
            tail = worker.log_tail(1500).strip()
            detail = f"\n--- worker log ---\n{tail}" if tail else ""
            return _error_result(f"Tool {item.call.name} failed: {exc}{detail}")
        except pydantic.ValidationError as exc:
            return _error_result(
                f"Tool {item.call.name} returned an invalid result: {exc.error_count()} error(s)"
            )

    async def _call_host(self, item: _Prepared, session: Any) -> dict[str, Any]:
        """Step 5 for a `HostTool`: its own ``execute``, which may run nested calls
        (`run_nested`); a bug in it is the call's error, never the session's."""
        assert isinstance(item.tool, HostTool)
        try:
            raw = await item.tool.execute(item.call, item.arguments, session)
            result = ToolResultWire.model_validate(raw).model_dump()
            if problem := _forwarding_problem(result):
                # The same bound as a worker's result: hooks and scripts receive it.
                return _error_result(f"Tool {item.call.name} returned {problem}")
            return result
        except PiSandboxError as exc:
            return _error_result(f"Tool {item.call.name} failed: {exc}")
        except pydantic.ValidationError as exc:
            return _error_result(
                f"Tool {item.call.name} returned an invalid result: {exc.error_count()} error(s)"
            )

    async def _call_executor(self, item: _Prepared) -> dict[str, Any]:
        """Run a tool without a worker (an MCP server's, issue 19): the executor
        answers errors as results; this is the backstop for a deadline or a bug."""
        assert item.tool is not None and item.tool.executor is not None
        try:
            with trio.fail_after(self.tool_timeout_s + 30.0):
                raw = await item.tool.executor(item.call.id, item.arguments)
            result = ToolResultWire.model_validate(raw).model_dump()
        except trio.TooSlowError:
            return _error_result(f"Tool {item.call.name} timed out")
        except pydantic.ValidationError as exc:
            return _error_result(
                f"Tool {item.call.name} returned an invalid result: {exc.error_count()} error(s)"
            )
        except Exception as exc:  # never a reason to end the session
            return _error_result(f"Tool {item.call.name} failed: {type(exc).__name__}: {exc}")
        if problem := _forwarding_problem(result):
            return _error_result(f"Tool {item.call.name} returned {problem}")
        return result

    async def _revive(self, tool: RegisteredTool) -> WorkerProcess:
        """The live worker for ``tool``: respawned if it died (see ``WorkerPool``)."""
        if tool.source == "builtin":
            return await self.pool.ensure_tool_worker()
        # The registry entry may already point at a replacement (a tool_call dispatch
        # or a sibling call respawned the extension since this call was prepared).
        current = self.pool.tools.get(tool.definition.name)
        if current is not None and current.worker.alive:
            return current.worker
        for index, (source, _) in enumerate(self.pool.extensions):
            if str(source.path) == tool.source:
                revived = await self.pool.ensure_extension_worker(index)
                if revived is not None:
                    return revived
                break
        reason = self.pool.disabled.get(Path(tool.source), "it stopped")
        raise WorkerCrashedError(
            f"the extension {tool.source} that provides {tool.definition.name} is not running: {reason}"
        )

    async def _transform(
        self, item: _Prepared, result: dict[str, Any], terminate: bool = False
    ) -> tuple[dict[str, Any], bool]:
        """``tool_result`` hooks: field patches (content, details, is_error, terminate);
        returns the result and whether it asks to end the run.

        Fail-closed (issue 13 §1): when a handler fails (raises, returns a malformed
        patch, times out, its worker crashes) or the combined patch is not a valid
        result, the result is *withheld*: the model, the output and the session file
        get an error result naming the extension and the failure, never the original.

        Raises:
            HookFailedError: an extension with a ``tool_result`` handler is disabled
                (it crashed past its restart budget): every later result would be
                withheld too, so the run ends (the result is not passed on); the
                message names the extension and why it is disabled.
        """
        if not self.pool.subscribed("tool_result"):
            return result, terminate
        payload = {
            "tool_name": item.call.name,
            "tool_call_id": item.call.id,
            "input": item.arguments,
            "content": result["content"],
            "details": result.get("details") or {},
            "is_error": bool(result.get("is_error")),
            "terminate": terminate,
        }
        outcome = await self.pool.dispatch("tool_result", payload)
        await self._report(outcome.errors, "tool_result")
        if outcome.fatal:
            raise HookFailedError(
                f"the result of {item.call.name} was withheld and the run stopped "
                f"(tool_result hooks fail closed): {outcome.fatal}"
            )
        if outcome.failure is not None:
            return _withheld(item.call.name, outcome.failure), terminate
        state = outcome.state
        try:
            # A patch is untrusted worker output: it must still be a valid tool result.
            patched = ToolResultWire.model_validate(
                {
                    "content": state["content"],
                    "details": state["details"],
                    "is_error": state["is_error"],
                }
            ).model_dump()
            patched.pop("terminate", None)
            return patched, bool(state.get("terminate", terminate))
        except (pydantic.ValidationError, KeyError) as exc:
            problem = f"the combined tool_result patch is not a valid result: {exc}"
            await self._report([{"message": problem}], "tool_result")
            return _withheld(item.call.name, problem), terminate


_SLOW_KEYWORDS = frozenset(
    {
        "pattern",
        "patternProperties",
        "uniqueItems",
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "format",
    }
)
_QUICK_ARGUMENT_BYTES = 16 * 1024
_QUICK_SCHEMA_NODES = 200


def _quick_to_validate(schema: Any, arguments: Any) -> bool:
    """Whether validating ``arguments`` against ``schema`` is bounded and small: no
    regular expressions, ``uniqueItems`` (quadratic) or references (recursion), a
    schema of at most `_QUICK_SCHEMA_NODES` nodes and arguments of at most
    `_QUICK_ARGUMENT_BYTES` as JSON. Anything else goes to the thread with a deadline."""
    try:
        if len(json.dumps(arguments)) > _QUICK_ARGUMENT_BYTES:
            return False
    except (TypeError, ValueError):
        return False
    stack, nodes = [schema], 0
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > _QUICK_SCHEMA_NODES:
            return False
        if isinstance(node, dict):
            if _SLOW_KEYWORDS & node.keys():
                return False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True


def _withheld(tool: str, failure: str) -> dict[str, Any]:
    """The error result that replaces a tool result a failed ``tool_result`` handler
    was to transform (issue 13 §1): the original reaches neither the model nor the
    session file."""
    return _error_result(
        f"The result of {tool} was withheld because a tool_result hook failed: {failure}",
        blocked_by="extension",
        withheld=True,
    )


def _limits_reached(before: dict[str, int], worker: WorkerProcess) -> str | None:
    """Which cgroup limit bit during a call, as text for the result, or None."""
    after = worker.limit_events()
    limits = worker.spec.sandbox.limits if worker.spec.sandbox is not None else None
    if limits is None:
        return None
    if after.get("pids", 0) > before.get("pids", 0):
        return f"the sandbox's process limit ({limits.processes}) was reached"
    if after.get("oom_kill", 0) > before.get("oom_kill", 0):
        return f"the sandbox's memory limit ({limits.memory_mb} MiB) was reached"
    return None


MAX_RESULT_BYTES = 2 * 1024 * 1024
"""Largest tool result (as JSON) passed on: an event carrying it to another worker
must stay within the frame limit (8 MiB), with room for escaping and the event."""

_RESULT_NESTING = MAX_NESTING - 10  # room for the event that wraps the result


def _forwarding_problem(result: dict[str, Any]) -> str | None:
    """Why a worker's tool result cannot be passed on to other workers, or None."""
    if nests_deeper_than(result, _RESULT_NESTING):
        return f"a result nested deeper than {_RESULT_NESTING} levels"
    size = len(json.dumps(result, ensure_ascii=False).encode("utf-8", "backslashreplace"))
    if size > MAX_RESULT_BYTES:
        return f"a result of {size} bytes; the limit is {MAX_RESULT_BYTES}"
    return None
