"""The agent loop (DESIGN §1, §9): user message → model → tool calls → results → next turn.

``AgentSession`` owns the conversation and drives the provider and the tool pipeline.
It holds no secrets beyond the provider object and never imports extension code:
extensions and tools are reached through the ``WorkerPool``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.base import AssistantTurn, Provider, ToolCall, ToolDefinition
from pi_sandbox.supervisor.session_file import SessionWriter, now_ms
from pi_sandbox.supervisor.tool_pipeline import EmitFn, ToolPipeline, report_extension_errors
from pi_sandbox.supervisor.worker_pool import WorkerPool

__all__ = ["AgentSession", "build_system_prompt"]


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


def build_system_prompt(cwd: Path, tools: list[ToolDefinition]) -> str:
    """A compact coding-agent system prompt naming the tools and the working directory."""
    lines = [
        "You are an expert coding assistant working in a software repository.",
        "You help by reading files, running commands, editing code and writing new files.",
        "",
        "Available tools:",
        *[
            f"- {tool.name}: {tool.description.splitlines()[0] if tool.description else ''}"
            for tool in tools
        ],
        "",
        "Guidelines:",
        "- Use read to examine files before editing; use edit for precise changes, write for new files.",
        "- Every tool runs in a sandbox; a blocked call returns an error result that explains why.",
        "- Be concise in your final answer.",
        "",
        f"Current working directory: {cwd}",
    ]
    return "\n".join(lines)


@dataclass
class AgentSession:
    """One conversation with one model, its workers and its session file.

    Attributes:
        provider: the model endpoint (supervisor side only).
        pool: started workers and the tool registry.
        pipeline: the tool call pipeline bound to ``pool``.
        emit: receives every event (json mode prints them; print mode summarises).
        writer: the session file, or ``None`` with ``--no-session``.
        max_turns: a guard against a model that never stops calling tools.
    """

    provider: Provider
    pool: WorkerPool
    pipeline: ToolPipeline
    emit: EmitFn
    cwd: Path
    writer: SessionWriter | None = None
    max_turns: int = 100
    messages: list[dict[str, Any]] = field(default_factory=list)
    system_prompt: str = ""

    def __post_init__(self) -> None:
        if not self.system_prompt:
            self.system_prompt = build_system_prompt(self.cwd, self.tool_definitions())

    def tool_definitions(self) -> list[ToolDefinition]:
        """The tools offered to the model, in registry order."""
        return [
            ToolDefinition(t.definition.name, t.definition.description, t.definition.parameters)
            for t in self.pool.tools.values()
        ]

    def _record(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if self.writer is not None:
            self.writer.append_message(message)

    async def _notify(self, event: str, payload: dict[str, Any]) -> None:
        outcome = await self.pool.dispatch(event, payload)
        await report_extension_errors(self.emit, outcome.errors, event)

    async def start(self) -> None:
        """Announce the session to extensions (``session_start``)."""
        if self.writer is not None:
            self.writer.append_model_change(self.provider.name, self.provider.model)
        await self._notify("session_start", {"reason": "startup"})

    async def shutdown(self) -> None:
        """Announce the end of the session to extensions (``session_shutdown``)."""
        await self._notify("session_shutdown", {})

    async def prompt(self, text: str) -> str:
        """Run the agent loop for one user message until the model stops calling tools.

        Returns:
            The final assistant text.

        Raises:
            ProviderError: the provider failed, or ``max_turns`` was exceeded.
        """
        user = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": now_ms()}
        self._record(user)
        await self.emit({"type": "agent_start"})
        await self.emit({"type": "message_end", "message": user})
        new_messages: list[dict[str, Any]] = [user]
        final_text = ""
        try:
            for _ in range(self.max_turns):
                await self.emit({"type": "turn_start"})
                await self._notify("turn_start", {})
                turn = _with_unique_call_ids(await self._request())
                assistant = self._assistant_message(turn)
                self._record(assistant)
                new_messages.append(assistant)
                await self.emit({"type": "message_end", "message": assistant})
                final_text = turn.text
                results: list[dict[str, Any]] = []
                if turn.tool_calls:
                    for outcome in await self.pipeline.run(turn.tool_calls):
                        message = outcome.message()
                        self._record(message)
                        new_messages.append(message)
                        results.append(message)
                        await self.emit({"type": "message_end", "message": message})
                await self.emit({"type": "turn_end", "message": assistant, "toolResults": results})
                if not turn.tool_calls:
                    return final_text
            raise ProviderError(
                f"the model kept calling tools for {self.max_turns} turns; stopping"
            )
        finally:
            await self.emit({"type": "agent_end", "messages": new_messages})

    async def _request(self) -> AssistantTurn:
        async def on_delta(delta: str) -> None:
            await self.emit({"type": "message_update", "delta": delta})

        await self.emit({"type": "message_start", "message": {"role": "assistant"}})
        return await self.provider.complete(
            system_prompt=self.system_prompt,
            messages=self.messages,
            tools=self.tool_definitions(),
            on_text_delta=on_delta,
        )

    def _assistant_message(self, turn: AssistantTurn) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if turn.text:
            content.append({"type": "text", "text": turn.text})
        content += [
            {"type": "toolCall", "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in turn.tool_calls
        ]
        return {
            "role": "assistant",
            "content": content,
            "provider": turn.provider or self.provider.name,
            "model": turn.model or self.provider.model,
            "usage": turn.usage,
            "stopReason": turn.stop_reason,
            "timestamp": now_ms(),
        }
