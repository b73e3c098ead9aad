"""``pi --mode rpc``: JSON-lines commands on stdin, events and responses on stdout.

Close to ``pi``'s RPC mode. Each stdin line is one command object with ``type`` and
an optional ``id`` echoed in its response
``{"type": "response", "id", "command", "success", "data"?, "error"?}``; every event
of the session is written as it happens (the same objects as ``--mode json``).

Commands: ``prompt {message}``, ``steer {message}``, ``follow_up {message}``,
``abort``, ``abort_retry`` (cancels the wait before an automatic retry),
``set_auto_retry {enabled}``, ``reload``, ``new_session``, ``compact
{customInstructions?}`` (pi's result as ``data``; cancelled or nothing to compact: a
failed response), ``set_auto_compaction {enabled}`` (this session only), ``bash {command}`` (the user's own command:
``user_bash`` hooks, then the policy gate and the sandboxed tool worker),
``set_trust {decision, save?}`` (the project's trust for this session, and with
``save`` in the trust store; project resources follow through a reload, issue 6),
``get_state``, ``get_commands``, the model commands of issue 16 (``get_available_models``,
``set_model {provider, modelId}``, ``cycle_model``, ``set_thinking_level {level}``,
``cycle_thinking_level``, ``get_available_thinking_levels``, ``get_session_stats``;
``model_commands``), ``get_fork_messages``, ``fork``, ``clone``, ``switch_session``,
``set_session_name``, ``navigate_tree`` and ``set_label``
(`pi_sandbox.supervisor.sessions.rpc_commands`), ``extension_ui_response {ui_id, value}``
(answers an ``extension_ui_request`` event), ``policy_approval_response {id, decision,
scope?, message?}`` (answers a ``policy_approval_request`` event, issue 18; its ``id`` is
the request's, also echoed in the response), ``quit``. ``prompt``/``reload``/``new_session`` are refused while the agent
runs (use ``steer``/``follow_up``/``abort``). End of input waits for queued work and
ends the session.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from pi_sandbox.errors import HostCallError, ProviderError, UsageError
from pi_sandbox.protocol.framing import FrameError, decode_line
from pi_sandbox.supervisor.model_commands import MODEL_COMMANDS
from pi_sandbox.supervisor.sessions.rpc_commands import SESSION_COMMANDS, handle_session_command
from pi_sandbox.supervisor.sessions.session_file import now_ms
from pi_sandbox.supervisor.tool_pipeline import EmitFn

__all__ = ["MAX_COMMAND_BYTES", "serve_rpc"]

MAX_COMMAND_BYTES = 8 * 1024 * 1024
"""Longest command line accepted on stdin; a longer one is refused and skipped."""


async def _lines(stream: trio.abc.ReceiveStream) -> Any:
    """Yield each input line (bytes); ``None`` once for a line longer than
    `MAX_COMMAND_BYTES`, whose rest is discarded without being buffered."""
    buffer = b""
    skipping = False
    while True:
        data = await stream.receive_some(65536)
        if not data:
            if buffer and not skipping:
                yield buffer
            return
        if skipping:
            if b"\n" not in data:
                continue
            data = data.split(b"\n", 1)[1]
            skipping = False
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
        if len(buffer) > MAX_COMMAND_BYTES:
            buffer = b""
            skipping = True
            yield None  # report the oversized line, once


async def serve_rpc(host: Any, emit: EmitFn, stdin_fd: int = 0) -> None:
    """Serve commands from ``stdin_fd`` until ``quit`` or end of input.

    Never raises for bad input: a malformed line gets a failed response naming the
    problem.
    """
    host.keep_going = True

    async def respond(command: dict[str, Any], success: bool, **extra: Any) -> None:
        response = {"type": "response", "command": command.get("type"), "success": success}
        if "id" in command:
            response["id"] = command["id"]
        response.update(extra)
        await emit(response)

    def user_message(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": now_ms()}

    def answer_later(command: dict[str, Any], action: Any, *args: Any) -> None:
        # Queued behind the current work; the response says how the action went.
        async def job() -> None:
            try:
                result = await action(*args)
            except (HostCallError, UsageError) as exc:
                await respond(command, False, error=str(exc))
            else:
                await respond(command, True, data=result)

        host.enqueue(job)

    def busy_reason() -> str:
        if host.session.running:
            return "the agent is running"
        return "an earlier command is still in progress"

    def running() -> bool:
        # reload, new_session, bash and compact wait behind queued work, but never
        # start while a run is in progress (or a replacement is).
        return host.session.running or host.replacing

    def busy() -> bool:
        return host.session.running or host._queued > 0 or host.replacing

    async with trio.lowlevel.FdStream(os.dup(stdin_fd)) as stream:
        async for raw in _lines(stream):
            if raw is None:
                await emit(
                    {
                        "type": "response",
                        "success": False,
                        "error": f"command longer than {MAX_COMMAND_BYTES} bytes; skipped",
                    }
                )
                continue
            if not raw.strip():
                continue
            try:
                # The worker channel's decoder: bounded numbers and nesting, no NaN.
                command = decode_line(raw)
            except FrameError as exc:
                await emit({"type": "response", "success": False, "error": str(exc)[:500]})
                continue
            if not isinstance(command.get("type"), str):
                await emit(
                    {
                        "type": "response",
                        "success": False,
                        "error": "a command needs a string 'type'",
                    }
                )
                continue
            kind = command["type"]
            message = command.get("message")
            if kind in ("prompt", "steer", "follow_up") and not isinstance(message, str):
                await respond(command, False, error=f"{kind}: 'message' must be a string")
                continue
            if kind == "prompt":
                if busy():
                    await respond(
                        command,
                        False,
                        error=f"{busy_reason()}; use steer, follow_up or abort",
                    )
                    continue

                async def prompt_job(text: str = message) -> None:
                    await host.submit(text)

                host.enqueue(prompt_job, prompt=True)
                await respond(command, True)
            elif kind in ("steer", "follow_up"):
                if host.session.running:
                    queue = host.session.steering if kind == "steer" else host.session.follow_ups
                    queue.append(user_message(message))
                else:

                    async def queued_job(text: str = message) -> None:
                        await host.submit(text)

                    host.enqueue(queued_job, prompt=True)
                await respond(command, True)
            elif kind == "abort":
                await respond(command, True, data={"aborted": host.abort()})
            elif kind == "abort_retry":
                # pi docs rpc-commands.md "Retry": cancel the wait and stop retrying.
                retry = host.session.retry
                await respond(
                    command, True, data={"aborted": retry.abort_retry() if retry else False}
                )
            elif kind == "set_auto_retry":
                enabled = command.get("enabled")
                if not isinstance(enabled, bool):
                    await respond(
                        command, False, error="set_auto_retry: 'enabled' must be true or false"
                    )
                    continue
                if host.session.retry is not None:
                    host.session.retry.settings.enabled = enabled
                await respond(command, True)
            elif kind in ("reload", "new_session"):
                if running():
                    await respond(
                        command,
                        False,
                        error=f"cannot {kind.replace('_', ' ')}: {busy_reason()}; "
                        "wait until it is idle or abort it",
                    )
                    continue

                answer_later(command, host.replace, "reload" if kind == "reload" else "new")
            elif kind == "bash":
                bash_command = command.get("command")
                if not isinstance(bash_command, str) or not bash_command.strip():
                    await respond(
                        command, False, error="bash: 'command' must be a non-empty string"
                    )
                    continue
                if running():
                    await respond(command, False, error=f"{busy_reason()}; bash waits for idle")
                    continue

                answer_later(command, host.user_bash, bash_command)
            elif kind == "compact":
                if running():
                    await respond(command, False, error=f"cannot compact: {busy_reason()}")
                    continue
                # pi's field is customInstructions; instructions is the older spelling.
                instructions = command.get("customInstructions", command.get("instructions"))
                if instructions is not None and not isinstance(instructions, str):
                    await respond(
                        command, False, error="compact: 'customInstructions' must be a string"
                    )
                    continue

                async def compact_job(
                    command: dict[str, Any] = command, instructions: str | None = instructions
                ) -> None:
                    try:
                        result = await host.compact(instructions)
                    except (HostCallError, UsageError, ProviderError) as exc:
                        await respond(command, False, error=f"compaction failed: {exc}")
                        return
                    if result.get("compacted"):
                        await respond(command, True, data=result)
                    elif result.get("cancelled"):
                        await respond(
                            command, False, error=f"compaction cancelled: {result.get('reason')}"
                        )
                    else:
                        await respond(
                            command, False, error="nothing to compact (the session is too small)"
                        )

                host.enqueue(compact_job)
            elif kind == "set_auto_compaction":
                enabled = command.get("enabled")
                if not isinstance(enabled, bool):
                    await respond(
                        command, False, error="set_auto_compaction: 'enabled' must be true or false"
                    )
                    continue
                host.session.compactor.auto = enabled
                await respond(command, True)
            elif kind == "set_trust":
                decision = command.get("decision")
                if decision not in ("yes", "no", "sandboxed"):
                    await respond(
                        command, False, error="set_trust: 'decision' must be yes, no or sandboxed"
                    )
                    continue
                save = command.get("save", False)
                if not isinstance(save, bool):
                    await respond(command, False, error="set_trust: 'save' must be true or false")
                    continue
                if running():
                    await respond(command, False, error=f"cannot change trust: {busy_reason()}")
                    continue

                async def set_trust(decision: str = decision, save: bool = save) -> Any:
                    return await host.set_trust(decision, save=save)

                answer_later(command, set_trust)
            elif kind in MODEL_COMMANDS and getattr(host, "models", None) is not None:
                # issue 16: model/thinking switches and usage totals (pi's shapes).
                try:
                    data = host.models.handle(command)
                except UsageError as exc:
                    await respond(command, False, error=str(exc))
                else:
                    extra = {} if kind == "set_thinking_level" else {"data": data}
                    await respond(command, True, **extra)
            elif kind == "get_state":
                await respond(command, True, data=host.state())
            elif kind == "get_commands":
                await respond(command, True, data=host.commands())
            elif kind == "extension_ui_response":
                found = host.ui_response(str(command.get("ui_id")), command.get("value"))
                await respond(command, found, **({} if found else {"error": "no such UI request"}))
            elif kind == "policy_approval_response":
                # issue 18: our own command (pi has no policy gate), answering a
                # policy_approval_request event.
                fields = command.get("scope"), command.get("message")
                if not isinstance(command.get("id"), str) or not isinstance(
                    command.get("decision"), str
                ):
                    problem = "policy_approval_response needs a string 'id' and 'decision'"
                elif fields[0] is not None and not isinstance(fields[0], str):
                    problem = "policy_approval_response: 'scope' must be a string"
                else:
                    problem = host.answer_approval(
                        command["id"], command["decision"], fields[0], fields[1]
                    )
                await respond(command, problem is None, **({"error": problem} if problem else {}))
            elif kind in SESSION_COMMANDS:  # issue 15: sessions/rpc_commands.py
                await handle_session_command(
                    host,
                    command,
                    emit=emit,
                    respond=respond,
                    answer_later=answer_later,
                    running=running,
                    busy_reason=busy_reason,
                )
            elif kind == "quit":
                await respond(command, True)
                break
            else:
                await respond(command, False, error=f"unknown command type {kind!r}")
    host.close_ui()
    await host.wait_quiet()
