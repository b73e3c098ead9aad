"""The agent loop (DESIGN §1, §9): user message → model → tool calls → results → next turn.

``AgentSession`` owns the conversation of one run and drives the provider and the
tool pipeline, dispatching the run's events to extensions (issue 5, seed 000 §10):
``before_agent_start`` → ``agent_start`` → per turn ``turn_start``, ``context``,
``before_provider_request``, ``message_start``/``message_update``/``message_end``,
``after_provider_response``, the tool pipeline's events, ``turn_end`` → ``agent_end``.
Steering messages are taken after each tool batch, follow-ups when the model stops.
``abort()`` cancels whatever the run is waiting for (a provider request, a handler,
a tool) and the run ends at once.

It holds no secrets beyond the provider object and never imports extension code:
extensions and tools are reached through the ``WorkerPool``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.errors import HookFailedError, ProviderError
from pi_sandbox.supervisor.agent.tool_pipeline import EmitFn, ToolPipeline, report_extension_errors
from pi_sandbox.supervisor.providers.base import (
    AssistantTurn,
    Provider,
    ToolCall,
    ToolDefinition,
    normalise_usage,
)
from pi_sandbox.supervisor.providers.catalogue import usage_with_cost
from pi_sandbox.supervisor.providers.retry import AutoRetry
from pi_sandbox.supervisor.sessions.compaction_runner import Compactor
from pi_sandbox.supervisor.sessions.session_file import SessionWriter, now_ms
from pi_sandbox.supervisor.workers.worker_pool import WorkerPool

__all__ = [
    "MAX_EXTENSION_TURNS",
    "AgentSession",
    "LlmContext",
    "build_system_prompt",
    "llm_messages",
    "withheld_message",
]

SYSTEM_PROMPT_SECTION = "pi-sandbox"
"""The one section our ``system`` messages record the system prompt in."""

MAX_EXTENSION_TURNS = 10
"""Turns per run that only extensions' steering or follow-up messages may cause."""


def _with_unique_call_ids(turn: AssistantTurn) -> AssistantTurn:
    """Give every tool call of a turn a distinct, non-empty id.

    Results, progress and hook decisions are addressed by id; a provider that repeats
    one (or sends none) would make them ambiguous. Repeats become ``<id>_2``, ``<id>_3``.
    """
    seen: set[str] = set()
    calls = []
    for index, call in enumerate(turn.tool_calls):
        base = call.id or f"call_{index}"
        candidate, n = base, 1
        while candidate in seen:
            n += 1
            candidate = f"{base}_{n}"
        seen.add(candidate)
        calls.append(
            call if candidate == call.id else ToolCall(candidate, call.name, call.arguments)
        )
    turn.tool_calls = calls
    return turn


def build_system_prompt(
    cwd: Path,
    tools: list[ToolDefinition],
    *,
    snippets: dict[str, str] | None = None,
    guidelines: list[str] | None = None,
    sandboxed: bool = True,
) -> str:
    """A compact coding-agent system prompt naming the active tools and the working
    directory. ``snippets`` (tool name → one line) replace a tool's description line;
    ``guidelines`` are the active tools' ``prompt_guidelines``; ``sandboxed`` says
    whether the tools run in a sandbox (the prompt must not claim one that isn't)."""
    snippets = snippets or {}
    lines = [
        "You are an expert coding assistant working in a software repository.",
        "You help by reading files, running commands, editing code and writing new files.",
        "",
        "Available tools:",
        *[
            f"- {tool.name}: "
            + (
                snippets.get(tool.name)
                or (tool.description.splitlines()[0] if tool.description else "")
            )
            for tool in tools
        ],
        "",
        "Guidelines:",
        "- Use read to examine files before editing; use edit for precise changes, write for new files.",
        (
            "- Every tool runs in a sandbox; a blocked call returns an error result that "
            "explains why."
            if sandboxed
            else "- A blocked call returns an error result that explains why."
        ),
        *[f"- {line}" for line in guidelines or []],
        "- Be concise in your final answer.",
        "",
        f"Current working directory: {cwd}",
    ]
    return "\n".join(lines)


COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following "
    "summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"
# pi 1.6.0's wording, byte for byte (its core/messages.js): a session continued by
# either program shows the model the same text.


def bash_execution_text(message: dict[str, Any]) -> str:
    """A ``bashExecution`` message as the user text the model sees (pi 1.6.0's
    ``bashExecutionToText``)."""
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def _as_user(text: str, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "timestamp": message.get("timestamp"),
    }


def llm_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as providers take them, as pi 1.6.0's ``convertToLlm``:
    ``custom``, ``bashExecution`` (unless ``excludeFromContext``), ``branchSummary``
    and ``compactionSummary`` messages become user messages with pi's wording.

    ``system`` messages (pi 1.6.0 records its prompt and tool declarations as such)
    are left out: each program sends its own system prompt and tools. Unknown roles
    (an augmented pi's) are left out too."""
    converter = LlmContext()
    converter.feed(messages)
    return converter.result()


def _llm_message(message: dict[str, Any]) -> dict[str, Any] | None:
    """`llm_messages` of one message (None: left out)."""
    role = message.get("role")
    if role in ("user", "assistant", "toolResult"):
        return message
    if role == "custom":
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        return {"role": "user", "content": content or [], "timestamp": message.get("timestamp")}
    if role == "compactionSummary":
        text = COMPACTION_SUMMARY_PREFIX + str(message.get("summary", ""))
        return _as_user(text + COMPACTION_SUMMARY_SUFFIX, message)
    if role == "branchSummary":
        text = BRANCH_SUMMARY_PREFIX + str(message.get("summary", ""))
        return _as_user(text + BRANCH_SUMMARY_SUFFIX, message)
    if role == "bashExecution" and not message.get("excludeFromContext"):
        return _as_user(bash_execution_text(message), message)
    return None


def _no_result(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call.get("id"),
        "toolName": call.get("name"),
        "content": [{"type": "text", "text": "No result provided"}],
        "isError": True,
        "timestamp": now_ms(),
    }


class LlmContext:
    """`llm_messages`, fed a conversation in pieces: a growing context is converted
    once, not again on every request (issue 20 target 3).

    The conversion includes pi-ai's ``transformMessages`` passes that do not depend
    on the target model: an assistant turn that ended in ``error`` or ``aborted`` is
    not replayed, and a tool call left without a result (a run stopped between the
    call and its result) gets an error result ``"No result provided"`` before the
    next assistant or user message — APIs reject a tool call with no result. Those
    results are stamped when `result` is called, as when the whole list is converted
    per request.
    """

    def __init__(self) -> None:
        self.fed = 0  # how many messages `feed` has taken
        self._out: list[dict[str, Any]] = []
        self._filled: list[tuple[int, dict[str, Any]]] = []  # (index in _out, call)
        self._pending: list[dict[str, Any]] = []
        self._answered: set[Any] = set()

    def _close(self) -> None:
        for call in self._pending:
            if call.get("id") not in self._answered:
                self._filled.append((len(self._out), call))
                self._out.append(_no_result(call))
        self._pending.clear()
        self._answered.clear()

    def feed(self, messages: list[dict[str, Any]]) -> None:
        """Convert ``messages``, the ones that follow those fed so far."""
        self.fed += len(messages)
        out = self._out
        for original in messages:
            message = _llm_message(original)
            if message is None:
                continue
            role = message.get("role")
            if role == "assistant":
                self._close()
                if message.get("stopReason") in ("error", "aborted"):
                    continue
                content = message.get("content")
                self._pending.extend(
                    b for b in content or [] if isinstance(b, dict) and b.get("type") == "toolCall"
                )
                out.append(message)
            elif role == "toolResult":
                self._answered.add(message.get("toolCallId"))
                out.append(message)
            else:
                self._close()
                out.append(message)

    def result(self) -> list[dict[str, Any]]:
        """The provider messages of everything fed, a new list (calls still open at
        the end get their ``"No result provided"`` results, stamped now)."""
        out = list(self._out)
        for index, call in self._filled:
            out[index] = _no_result(call)
        out += [_no_result(c) for c in self._pending if c.get("id") not in self._answered]
        return out


def _user_message(text: str, images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += images or []
    return {"role": "user", "content": content, "timestamp": now_ms()}


def custom_message(message: dict[str, Any]) -> dict[str, Any]:
    """A ``custom`` message from an extension's ``send_message``/``before_agent_start``
    (``custom_type``/``customType``, ``content``, ``display``, ``details``)."""
    content = message.get("content", "")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {
        "role": "custom",
        "customType": str(message.get("custom_type") or message.get("customType") or "extension"),
        "content": content,
        "display": bool(message.get("display", True)),
        "details": message.get("details"),
        "timestamp": now_ms(),
    }


@dataclass
class AgentSession:
    """One conversation with one model, its workers and its session file.

    Attributes:
        provider: the model endpoint (supervisor side only).
        pool: started workers and the tool registry.
        pipeline: the tool call pipeline bound to ``pool``.
        emit: receives every event (json mode prints them; print mode summarises).
        writer: the session (file or memory); its current branch is the conversation.
        active_tools: returns the tool definitions of the next request.
        system_prompt: returns the system prompt of the next request.
        max_turns: a guard against a model that never stops calling tools.
        steering / follow_ups / next_turn: queued user or custom messages, delivered
            after the current tool batch, when the model stops, with the next prompt.
        steering_mode / follow_up_mode: ``"all"`` or ``"one-at-a-time"``: how many
            queued steering messages (follow-ups) one delivery takes (pi's RPC
            ``set_steering_mode``/``set_follow_up_mode``; RPC mode starts with pi's
            default, one at a time, for both).
        retry: retries a model request that failed before any output (issue 16,
            `providers.retry`); None sends each request once.
    """

    provider: Provider
    pool: WorkerPool
    pipeline: ToolPipeline
    emit: EmitFn
    cwd: Path
    writer: SessionWriter
    active_tools: Callable[[], list[ToolDefinition]] | None = None
    # issue 19: called once a tool batch's results are committed (the session host
    # records tool_search activations there, before the next request).
    after_tools: Callable[[], Awaitable[None]] | None = None
    system_prompt: Callable[[], str] | None = None
    max_turns: int = 100
    running: bool = False
    aborted: bool = False
    abort_on_start: bool = False  # an abort that came before the run began
    steering: list[dict[str, Any]] = field(default_factory=list)
    follow_ups: list[dict[str, Any]] = field(default_factory=list)
    next_turn: list[dict[str, Any]] = field(default_factory=list)
    prompt_override: str | None = None
    retry: AutoRetry | None = None
    # How many queued messages one delivery takes (pi's RPC set_steering_mode /
    # set_follow_up_mode): "all" or "one-at-a-time".
    steering_mode: str = "all"
    follow_up_mode: str = "one-at-a-time"
    # ids of queued messages that extensions (not the user) sent, and how many turns
    # they caused in the current run (see `_extension_turn`).
    extension_messages: set[int] = field(default_factory=set)
    extension_turns: int = 0
    dropped_extension_turns: bool = False
    _scopes: set[trio.CancelScope] = field(default_factory=set)
    idle: trio.Event = field(default_factory=trio.Event)
    # issue 15: threshold compaction before each request, overflow recovery after one.
    compactor: Compactor = field(default_factory=Compactor)
    # pi's thinking level of the next request (base.THINKING_LEVELS); recorded on
    # every assistant message as ``thinkingLevel`` (pi docs session-format.md).
    thinking_level: str = "off"
    # A run happened since the last ``agent_settled`` (SessionHost emits it).
    ran: bool = False
    # issue 20 target 3: what the branch declares (`system_message`) and the provider
    # form of its context (`_provider_messages`), kept up to date as it grows.
    _declared: _BranchDeclarations = field(default_factory=lambda: _BranchDeclarations())
    _llm: tuple[SessionWriter, int, LlmContext] | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation: the messages on the session's current branch."""
        return self.writer.messages()

    def tool_definitions(self) -> list[ToolDefinition]:
        """The tools offered to the model in the next request."""
        if self.active_tools is not None:
            return self.active_tools()
        return [
            ToolDefinition(t.definition.name, t.definition.description, t.definition.parameters)
            for t in self.pool.tools.values()
        ]

    def current_system_prompt(self) -> str:
        """The system prompt of the next request (a ``before_agent_start`` override
        holds for the rest of its prompt)."""
        if self.prompt_override is not None:
            return self.prompt_override
        if self.system_prompt is not None:
            return self.system_prompt()
        return build_system_prompt(self.cwd, self.tool_definitions())

    def system_message(self) -> dict[str, Any] | None:
        """The ``system`` message a prompt starts with when the system prompt or the
        tools differ from what the session's transcript declares, else None (pi 1.6.0
        records its prompt and tool loadout so; pi docs message-types.md
        "SystemMessage": replaying the system messages in order yields the current
        state).

        Our prompt is one section, ``SYSTEM_PROMPT_SECTION``; pi's sections (a
        session pi started) are cleared with ``null``, as pi's own diff does, and pi
        clears ours the same way when it continues one of our sessions. A prompt
        forced by ``before_agent_start`` is not recorded (pi: "a forced prompt does
        not affect the transcript"). Tools are declared ``{name, description,
        parameters}``; ``toolsRemoved`` names those no longer offered.
        """
        sections, declared = self._declared.of(self.writer)
        current = {
            SYSTEM_PROMPT_SECTION: self.system_prompt()
            if self.system_prompt
            else build_system_prompt(self.cwd, self.tool_definitions())
        }
        patch = {name: text for name, text in current.items() if sections.get(name) != text}
        patch.update(
            {
                name: None
                for name, text in sections.items()
                if text is not None and name not in current
            }
        )
        tools = {
            t.name: {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in self.tool_definitions()
        }
        added = [
            tool
            for name, tool in tools.items()
            if {k: declared.get(name, {}).get(k) for k in tool} != tool
        ]
        removed = [{"name": name} for name in declared if name not in tools]
        if not patch and not added and not removed:
            return None
        message: dict[str, Any] = {"role": "system", "content": ""}
        if patch:
            message["sections"] = patch
        if added:
            message["toolsAdded"] = added
        if removed:
            message["toolsRemoved"] = removed
        message["timestamp"] = now_ms()
        return message

    def record(self, message: dict[str, Any]) -> str:
        """Append ``message`` to the session; returns the entry id.

        An extension's ``custom`` message becomes a ``custom_message`` entry, as pi
        1.6.0 writes it (pi docs session-format.md "CustomMessageEntry")."""
        if message.get("role") == "custom":
            return self.writer.append_custom_message(
                str(message.get("customType") or "extension"),
                message.get("content", []),
                bool(message.get("display", True)),
                message.get("details"),
            )["id"]
        return self.writer.append_message(message).id

    async def commit(
        self,
        message: dict[str, Any],
        new_messages: list[dict[str, Any]] | None = None,
        *,
        started: bool = False,
    ) -> dict[str, Any]:
        """One message of the run: ``message_start`` (unless ``started``: the
        assistant's was emitted when its stream began), then ``message_end`` handlers
        may replace it (same role; `hook_kinds` enforces it), then it is recorded and
        ``message_end`` is emitted (pi 1.6.0's agent loop: every message gets both,
        pi docs json.md "Message events"). Returns it.

        Raises:
            HookFailedError: a ``message_end`` handler failed: the message is recorded
                and emitted in a withheld form (issue 13 §1), then the run ends.
        """
        if not started:
            shown = message
            if self.pool.subscribed("message_end"):
                # issue 13 §1: a message_end hook may redact it; message_end has the
                # final form, message_start only what the hook cannot change.
                shown = _start_form(message)
            await self.emit({"type": "message_start", "message": shown})
            await self.notify("message_start", {"message": message})
        try:
            state = await self.chain("message_end", {"message": message})
        except HookFailedError as exc:
            message = withheld_message(message, str(exc))
            self.record(message)
            if new_messages is not None:
                new_messages.append(message)
            await self.emit({"type": "message_end", "message": message})
            raise
        if state is not None and isinstance(state.get("message"), dict):
            message = state["message"]
        self.record(message)
        if new_messages is not None:
            new_messages.append(message)
        await self.emit({"type": "message_end", "message": message})
        return message

    # --- extension events ------------------------------------------------------------------

    async def notify(self, event: str, payload: dict[str, Any], *, abortable: bool = True) -> None:
        """Dispatch a notification event to subscribed extensions; errors reported.

        During a run the dispatch is abortable (a hung handler does not hold up
        ``abort()``), except with ``abortable=False`` (``turn_end``, ``agent_end``)."""
        if not self.pool.subscribed(event):
            return
        outcome = None
        if self.running and abortable:
            async with self.abortable():
                outcome = await self.pool.dispatch(event, payload)
        else:
            outcome = await self.pool.dispatch(event, payload)
        if outcome is not None:
            await report_extension_errors(self.emit, outcome.errors, event)

    async def chain(self, event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Dispatch a chained event; the final state, or None when nobody subscribes
        or the run was aborted meanwhile.

        Raises:
            HookFailedError: a handler failed (raised, malformed result, timeout,
                crashed or disabled worker) and the event fails closed
                (``hook_kinds.ON_FAILURE``, issue 13 §1): the untransformed value must
                not be used.
        """
        if not self.pool.subscribed(event):
            return None
        outcome = None
        if self.running:
            async with self.abortable():
                outcome = await self.pool.dispatch(event, payload)
        else:
            outcome = await self.pool.dispatch(event, payload)
        if outcome is None:
            return None
        await report_extension_errors(self.emit, outcome.errors, event)
        if outcome.failure is not None:
            raise HookFailedError(
                f"{_STOPPED.get(event, event)} ({event} hooks fail closed): {outcome.failure}"
            )
        return outcome.state

    # --- abort -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def abortable(self) -> AsyncIterator[trio.CancelScope]:
        """A cancel scope that `abort` cancels (checks ``aborted`` at entry)."""
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            if self.aborted:
                scope.cancel()
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    def abort(self) -> bool:
        """Abort the running prompt; returns at once. False when idle."""
        if not self.running:
            return False
        self.aborted = True
        for scope in list(self._scopes):
            scope.cancel()
        return True

    # --- the loop ----------------------------------------------------------------------------

    async def run(
        self, text: str, images: list[dict[str, Any]] | None = None, *, as_user: bool = True
    ) -> str:
        """Run the agent loop for one user message until the model stops calling tools
        (then follow-ups), the run is aborted, or every tool result says terminate.

        Returns:
            The final assistant text ("" when aborted before any).

        Raises:
            ProviderError: the provider failed, or ``max_turns`` was exceeded.
            HookFailedError: a fail-closed hook (``input`` excepted: the caller runs it)
                failed; nothing it protects was sent (issue 13 §1).
        """
        self.running, self.aborted, self.prompt_override = True, self.abort_on_start, None
        self.ran = True  # agent_end comes whatever happens, and agent_settled after it
        self.abort_on_start = False
        self.extension_turns, self.dropped_extension_turns = 0, False
        self.idle = trio.Event()
        new_messages: list[dict[str, Any]] = []
        final_text = ""
        try:
            state = await self.chain(
                "before_agent_start",
                {
                    "prompt": text,
                    "images": images or [],
                    "system_prompt": self.current_system_prompt(),
                },
            )
            pending: list[dict[str, Any]] = list(self.next_turn)
            self.next_turn.clear()
            if as_user:
                pending.append(_user_message(text, images))
            if state is not None:
                pending += [
                    custom_message(m) for m in state.get("messages") or [] if isinstance(m, dict)
                ]
                override = state.get("system_prompt")
                if isinstance(override, str) and override != self.current_system_prompt():
                    self.prompt_override = override
            await self.emit({"type": "agent_start"})
            await self.notify("agent_start", {})
            # pi 1.6.0 (agent-loop.js runAgentLoop): turn_start, then the prompt's
            # messages (a system message first when the prompt or tools changed).
            for _ in range(self.max_turns):
                final_text, more, pending = await self._turn(new_messages, pending)
                if not more or self.aborted:
                    break
            else:
                raise ProviderError(
                    f"the model kept calling tools for {self.max_turns} turns; stopping"
                )
            return final_text
        finally:
            with trio.CancelScope(shield=True):
                if self.dropped_extension_turns:
                    await self.emit(
                        {
                            "type": "pisandbox_warning",
                            "message": f"extensions asked the model to answer again more than "
                            f"{MAX_EXTENSION_TURNS} times in one run; the rest was dropped",
                        }
                    )
                # Retries happen inside the run (providers.retry), so an ended run is
                # never retried: willRetry is always false.
                await self.emit({"type": "agent_end", "messages": new_messages, "willRetry": False})
                await self.notify(
                    "agent_end",
                    {"messages": new_messages, "aborted": self.aborted},
                    abortable=False,
                )
            self.running = False
            self.prompt_override = None
            self.writer.sync()
            self.idle.set()

    async def _turn(
        self,
        new_messages: list[dict[str, Any]],
        pending: list[dict[str, Any]],
    ) -> tuple[str, bool, list[dict[str, Any]]]:
        """One turn: ``turn_start``, the ``pending`` messages (the prompt's, or the
        steering and follow-ups queued during the last turn), one provider request and
        its tool calls, ``turn_end``. Returns (text, whether to go on, the messages of
        the next turn)."""
        await self.emit({"type": "turn_start"})
        await self.notify("turn_start", {})
        # pi declares the prompt and tool changes before each request (agent-loop.js
        # declareToolChanges): a tool_search activation shows up on the next turn.
        if (system := self.system_message()) is not None:
            pending = [system, *pending]
        for message in pending:
            await self.commit(message, new_messages)
        if self.aborted:
            return "", False, []
        turn = await self._request()
        if turn is None:  # aborted during the request
            await self.emit({"type": "turn_end", "message": None, "toolResults": []})
            await self.notify("turn_end", {"message": None, "tool_results": []}, abortable=False)
            return "", False, []
        assistant = await self.commit(self._assistant_message(turn), new_messages, started=True)
        results: list[dict[str, Any]] = []
        terminate = False
        if turn.tool_calls:
            outcomes = await self.pipeline.run(turn.tool_calls, session=self)
            for outcome in outcomes:
                results.append(await self.commit(outcome.message(), new_messages))
            if self.after_tools is not None:
                await self.after_tools()
            # A batch stops the run only when every call in it asked to (issue 5 case 5).
            terminate = bool(outcomes) and all(o.terminate for o in outcomes)
        # A turn boundary: what it appended reaches the disk (issue 15 "Robustness"),
        # in a thread while the next turn starts (issue 20: `SessionWriter.sync_soon`).
        self.writer.sync_soon()
        await self.emit({"type": "turn_end", "message": assistant, "toolResults": results})
        await self.notify(
            "turn_end", {"message": assistant, "tool_results": results}, abortable=False
        )
        if self.aborted or terminate:
            return turn.text, False, []
        if self.steering:
            if self.steering_mode == "one-at-a-time":
                queued_now = [self.steering.pop(0)]  # the rest after the next turn
            else:
                queued_now, self.steering[:] = list(self.steering), []
            if not turn.tool_calls and not self._extension_turn(queued_now):
                return turn.text, False, []
            return turn.text, True, queued_now
        if turn.tool_calls:
            return turn.text, True, []
        if self.follow_ups:
            if self.follow_up_mode == "all":
                batch, self.follow_ups[:] = list(self.follow_ups), []
            else:
                batch = [self.follow_ups.pop(0)]
            if not self._extension_turn(batch):
                return turn.text, False, []
            return turn.text, True, batch
        return turn.text, False, []

    def _extension_turn(self, queued: list[dict[str, Any]]) -> bool:
        """Whether the model may answer again for ``queued`` messages: turns that
        only extensions asked for (steering or follow-ups they queued) are capped at
        `MAX_EXTENSION_TURNS` per run; past it they are dropped with a warning."""
        if not all(id(m) in self.extension_messages for m in queued):
            return True  # the user (or an RPC client) asked
        self.extension_turns += 1
        if self.extension_turns <= MAX_EXTENSION_TURNS:
            return True
        self.dropped_extension_turns = True
        self.follow_ups = [m for m in self.follow_ups if id(m) not in self.extension_messages]
        return False

    async def _request(self) -> AssistantTurn | None:
        """One model request: compaction first when the context passed its threshold;
        after a context-overflow error, one compaction and one retry (issue 15, pi docs
        compaction.md). A second overflow ends the run with the provider's error."""
        await self.compactor.before_request(self)
        try:
            return await self._request_once()
        except ProviderError as exc:
            if self.aborted or not await self.compactor.recover_overflow(self, exc):
                raise
        if self.aborted:
            return None
        try:
            return await self._request_once()
        except ProviderError as exc:
            from pi_sandbox.supervisor.providers.overflow import is_context_overflow

            if not is_context_overflow(exc):
                raise
            raise ProviderError(
                f"{exc} (the context still overflows after compaction; not retried again)"
            ) from exc

    async def _request_once(self) -> AssistantTurn | None:
        if (required := self.pool.required_failure()) is not None:
            # issue 13 §2: no model request without a required guard.
            raise HookFailedError(f"the request was not sent to the model: {required}")
        # The writer's own context list (`SessionWriter.context`): copied only when a
        # hook is handed it, or a 10,000-entry session pays a deep copy of its whole
        # context on every request. Unhooked, nothing can change it before it is
        # converted for the provider, which converts only what is new (`LlmContext`).
        generation, messages = self.writer.context()
        hooked = self.pool.subscribed("context") or self.pool.subscribed("before_provider_request")
        if hooked:
            messages = copy.deepcopy(messages)
        state = await self.chain("context", {"messages": messages})
        if state is not None and isinstance(state.get("messages"), list):
            messages = state["messages"]
        tools = self.tool_definitions()
        payload = {
            "model": self.provider.model,
            "system_prompt": self.current_system_prompt(),
            "messages": messages,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ],
        }
        if self.aborted:
            return None
        state = await self.chain("before_provider_request", {"payload": payload})
        if state is not None and isinstance(state.get("payload"), dict):
            payload = _checked_payload(state["payload"], payload)
            tools = [
                ToolDefinition(t["name"], t.get("description", ""), t.get("parameters", {}))
                for t in payload["tools"]
            ]

        # issue 13 §1: a message_end hook may redact the answer; streamed deltas would
        # put the unredacted text on stdout first (the message_end event has it all).
        hold_back = self.pool.subscribed("message_end")
        # pi json.md "Reconstruct streaming messages": one message_update per content
        # event, with the latest cumulative usage; text deltas keep our `delta` key.
        streamed = False
        usage = normalise_usage(None)

        async def on_event(event: dict[str, Any]) -> None:
            nonlocal streamed, usage
            streamed = True
            if hold_back:
                return
            if "usage" in event:
                event = dict(event)
                usage = normalise_usage(event.pop("usage"))
            await self.emit(
                {"type": "message_update", "usage": usage, "assistantMessageEvent": event}
            )
            if event.get("type") == "text_delta":
                await self.notify(
                    "message_update",
                    {"delta": event.get("delta", ""), "assistant_message_event": event},
                )

        async def on_delta(delta: str) -> None:
            # Only for providers that stream no events (every event comes first): the
            # text as pi's text_delta of the first block.
            if hold_back or streamed:
                return
            event = {"type": "text_delta", "contentIndex": 0, "delta": delta}
            await self.emit(
                {"type": "message_update", "usage": usage, "assistantMessageEvent": event}
            )
            await self.notify("message_update", {"delta": delta, "assistant_message_event": event})

        if self.aborted:
            return None
        # pi 1.6.0 (agent-loop.js): the assistant's message_start carries the whole
        # partial message, empty and "pending", before the first content event.
        partial = self._pending_assistant()
        await self.emit({"type": "message_start", "message": partial})
        await self.notify("message_start", {"message": partial})
        turn: AssistantTurn | None = None

        async def request() -> AssistantTurn:
            return await self.provider.complete(
                system_prompt=payload["system_prompt"],
                messages=self._provider_messages(
                    payload["messages"], None if hooked else generation
                ),
                tools=tools,
                on_text_delta=on_delta,
                on_event=on_event,
                thinking_level=self.thinking_level,
            )

        async with self.abortable():
            # issue 16: a failure before any output is sent again (auto_retry_* events);
            # the wait between attempts is inside the abortable scope (Ctrl-C, abort).
            turn = await (self.retry.run(request, self.emit) if self.retry else request())
        if turn is None:
            return None
        # issue 16: usage is priced from the catalogue before anything records it, and
        # a models.json provider (an OpenAI-compatible one) answers under its own name.
        turn.provider = getattr(self.provider, "name", None) or turn.provider
        turn.usage = usage_with_cost(self.provider, turn)
        await self.notify(
            "after_provider_response",
            {
                "model": turn.model or self.provider.model,
                "stop_reason": turn.stop_reason,
                "usage": turn.usage,
            },
        )
        return _with_unique_call_ids(turn)

    def _provider_messages(
        self, messages: list[dict[str, Any]], generation: int | None
    ) -> list[dict[str, Any]]:
        """``llm_messages(messages)``. With ``generation`` (``messages`` is the
        writer's context list of that generation, unchanged), the messages converted
        for an earlier request are not converted again (issue 20 target 3)."""
        if generation is None:
            return llm_messages(messages)
        cached = self._llm
        if (
            cached is None
            or cached[0] is not self.writer
            or cached[1] != generation
            or cached[2].fed > len(messages)
        ):
            cached = self._llm = (self.writer, generation, LlmContext())
        converter = cached[2]
        converter.feed(messages[converter.fed :])
        return converter.result()

    def _pending_assistant(self) -> dict[str, Any]:
        """The assistant message as its stream starts (pi 1.6.0's ``message_start``
        partial): no content, zero usage, ``stopReason: "pending"``."""
        return {
            "role": "assistant",
            "content": [],
            "api": getattr(self.provider, "api", None)
            or _API_OF.get(self.provider.name, self.provider.name),
            "provider": getattr(self.provider, "name", None) or "",
            "model": self.provider.model,
            "usage": normalise_usage(None),
            "stopReason": "pending",
            "timestamp": now_ms(),
        }

    def _assistant_message(self, turn: AssistantTurn) -> dict[str, Any]:
        """The assistant message of ``turn`` as pi 1.6.0 records it (pi docs
        message-types.md "AssistantMessage"): content in stream order (the provider's
        ``content`` when it kept one, else thinking blocks, text, tool calls), ``api``,
        ``provider``, ``model``, ``responseModel``/``responseId`` when reported, the
        full ``usage`` (with cost), ``stopReason``, ``errorMessage`` when set, the
        ``timestamp`` and the ``thinkingLevel`` requested."""
        if turn.content is not None:
            content = [dict(block) for block in turn.content]
            # _with_unique_call_ids may have renamed repeated call ids: keep them in step.
            calls = iter(turn.tool_calls)
            for block in content:
                if block.get("type") == "toolCall" and (call := next(calls, None)):
                    block.update(id=call.id, name=call.name, arguments=call.arguments)
        else:
            content = [dict(block) for block in turn.thinking]
            if turn.text:
                content.append({"type": "text", "text": turn.text})
            content += [
                {"type": "toolCall", "id": c.id, "name": c.name, "arguments": c.arguments}
                for c in turn.tool_calls
            ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "api": turn.api or _API_OF.get(self.provider.name, self.provider.name),
            "provider": turn.provider or self.provider.name,
            "model": turn.model or self.provider.model,
        }
        if turn.response_model is not None:
            message["responseModel"] = turn.response_model
        if turn.response_id is not None:
            message["responseId"] = turn.response_id
        message["usage"] = normalise_usage(turn.usage)
        message["stopReason"] = turn.stop_reason
        if turn.error_message is not None:
            message["errorMessage"] = turn.error_message
        message["timestamp"] = now_ms()
        message["thinkingLevel"] = self.thinking_level
        return message


class _BranchDeclarations:
    """The prompt sections and tools the ``system`` messages of a session's current
    branch declare, replayed in order (`AgentSession.system_message`), folded only
    over the entries appended since the last call while the branch only grows."""

    def __init__(self) -> None:
        self.writer: SessionWriter | None = None
        self.mark: tuple[int, int] | None = None
        self.sections: dict[str, Any] = {}
        self.declared: dict[str, dict[str, Any]] = {}

    def of(self, writer: SessionWriter) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """``(sections, declared tools by name)`` of ``writer``'s current branch (the
        caller must not change them)."""
        mark = self.mark if self.writer is writer else None
        self.mark, entries, whole = writer.branch_tail(mark)
        self.writer = writer
        if whole:
            self.sections, self.declared = {}, {}
        for record in entries:
            message = record.get("message") if record.get("type") == "message" else None
            if not isinstance(message, dict) or message.get("role") != "system":
                continue
            if isinstance(message.get("sections"), dict):
                self.sections.update(message["sections"])
            for tool in message.get("toolsRemoved") or []:
                if isinstance(tool, dict):
                    self.declared.pop(str(tool.get("name")), None)
            for tool in message.get("toolsAdded") or []:
                if isinstance(tool, dict):
                    self.declared[str(tool.get("name"))] = tool
        return self.sections, self.declared


# pi's ``api`` names, for providers that do not report ``AssistantTurn.api`` yet.
_API_OF = {
    "scripted": "scripted",
    "openai": "openai-completions",
    "anthropic": "anthropic-messages",
}

_STOPPED = {
    "input": "the prompt was not sent",
    "before_agent_start": "the prompt was not sent",
    "context": "the request was not sent to the model",
    "before_provider_request": "the request was not sent to the model",
    "message_end": "the message was withheld",
}

# Fields of a message that identify it and carry nothing a message_end hook redacts.
_IDENTITY_FIELDS = ("role", "toolCallId", "toolName", "customType", "timestamp", "command")


def withheld_message(message: dict[str, Any], why: str) -> dict[str, Any]:
    """The form of ``message`` that is recorded when a ``message_end`` hook that may
    redact it failed (issue 13 §1): same role and identity, the text replaced by a
    notice naming the failure; tool calls, details and outputs dropped."""
    notice = f"[message withheld: {why}]"
    out = {key: message[key] for key in _IDENTITY_FIELDS if key in message}
    out.setdefault("timestamp", now_ms())
    out["content"] = [{"type": "text", "text": notice}]
    if out.get("role") == "toolResult":
        out["isError"] = True
    if out.get("role") == "bashExecution":
        del out["content"]
        out.update(output=notice, exitCode=None, cancelled=False)
    if out.get("role") == "custom":
        out["display"] = False
    return out


def _start_form(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` without its content and details: what ``message_start`` shows while
    a ``message_end`` hook may still redact the message (issue 13 §1)."""
    out = {key: value for key, value in message.items() if key not in ("details", "output")}
    if "content" in out:
        out["content"] = "" if isinstance(out["content"], str) else []
    return out


def _checked_payload(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """A ``before_provider_request`` replacement, field by field: an absent field keeps
    the previous value; a field of the wrong shape fails closed (issue 13 §1).

    Raises:
        HookFailedError: ``system_prompt``, ``messages`` or ``tools`` has the wrong shape.
    """
    out = dict(old)
    problems = []
    if "system_prompt" in new:
        if isinstance(new["system_prompt"], str):
            out["system_prompt"] = new["system_prompt"]
        else:
            problems.append("system_prompt must be a string")
    if "messages" in new:
        messages = new["messages"]
        if isinstance(messages, list) and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
        ):
            out["messages"] = messages
        else:
            problems.append("messages must be a list of objects with a string role")
    if "tools" in new:
        tools = new["tools"]
        if isinstance(tools, list) and all(
            isinstance(t, dict)
            and isinstance(t.get("name"), str)
            and isinstance(t.get("parameters", {}), dict)
            for t in tools
        ):
            out["tools"] = tools
        else:
            problems.append("tools must be a list of {name, description?, parameters?}")
    if problems:
        raise HookFailedError(
            f"{_STOPPED['before_provider_request']} (before_provider_request hooks fail "
            f"closed): the payload they returned is malformed: {'; '.join(problems)}"
        )
    return out
