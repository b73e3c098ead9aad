"""``pi --mode rpc``: JSON-lines commands on stdin, events and responses on stdout.

pi 1.6.0's RPC protocol (pi docs rpc.md, rpc-commands.md, rpc-extension-ui.md; issue
17 §2): each stdin line is one command ``{type, id?, …}``; its response is
``{"type": "response", "id"?, "command", "success", "data"?, "error"?}`` with pi's
``data`` shapes; the session's events are written as they happen, as pi's wire
records (`pi_sandbox.supervisor.modes.rpc_wire` translates our internal events).

All 33 commands of rpc-commands.md: ``prompt {message, images?,
streamingBehavior?}`` (``data.disposition``: ``started``, ``queued`` or
``handled``), ``steer``/``follow_up {message, images?}`` (``queued``; sent while
idle they wait for the next prompt, `rpc_wire.RpcQueue`), ``abort``,
``clear_queue``, ``new_session``, ``get_state``, ``get_messages``, the model and
thinking commands (`model_commands`), ``set_steering_mode``/``set_follow_up_mode
{mode}``, ``compact {customInstructions?}``, ``set_auto_compaction {enabled}``,
``set_auto_retry {enabled}``, ``abort_retry``, ``bash {command}`` (streams
``bash_execution_update``), ``abort_bash``, ``get_session_stats``, ``export_html
{outputPath?}``, the session commands (`sessions.rpc_commands`: ``switch_session``,
``fork``, ``clone``, ``get_fork_messages``, ``get_entries``, ``get_tree``,
``set_session_name``), ``get_last_assistant_text``, ``get_commands``; and
``extension_ui_response {id, value | confirmed | cancelled}``, which gets no
response (as pi).

Our own commands, named so that pi's cannot collide with them (docs/rpc.md):
``sandbox_set_trust {decision, save?}``, ``sandbox_reload``,
``sandbox_navigate_tree``, ``sandbox_set_label``, ``sandbox_quit``; the older
unprefixed names (``set_trust``, ``reload``, ``navigate_tree``, ``set_label``,
``quit``) still work; ``policy_approval_response {id, decision, scope?, message?}``
answers a ``policy_approval_request`` (issue 18).

``prompt`` while the agent runs needs ``streamingBehavior`` (as pi);
``new_session``/``sandbox_reload``/``bash``/``compact`` wait for queued work and
are refused while the agent runs. End of input waits for queued work and ends the
session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.errors import HostCallError, ProviderError, UsageError
from pi_sandbox.protocol.framing import FrameError, decode_line
from pi_sandbox.supervisor.agent.tool_pipeline import EmitFn
from pi_sandbox.supervisor.modes.model_commands import MODEL_COMMANDS
from pi_sandbox.supervisor.modes.rpc_wire import RpcQueue, RpcWire
from pi_sandbox.supervisor.sessions.rpc_commands import SESSION_COMMANDS, handle_session_command
from pi_sandbox.supervisor.sessions.session_file import now_ms

__all__ = ["MAX_COMMAND_BYTES", "OUR_COMMANDS", "serve_rpc"]

MAX_COMMAND_BYTES = 8 * 1024 * 1024
"""Longest command line accepted on stdin; a longer one is refused and skipped."""

OUR_COMMANDS = {
    "sandbox_set_trust": "set_trust",
    "sandbox_reload": "reload",
    "sandbox_navigate_tree": "navigate_tree",
    "sandbox_set_label": "set_label",
    "sandbox_quit": "quit",
}
"""Our RPC commands (pi has none of them): the ``sandbox_`` name → the older
unprefixed name, which still works (docs/rpc.md)."""

QUEUE_MODES = ("all", "one-at-a-time")
"""``set_steering_mode``/``set_follow_up_mode`` values (rpc-commands.md)."""


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


def _images(command: dict[str, Any]) -> list[dict[str, Any]] | bool | None:
    """The command's ``images`` (pi's ImageContent list), None when absent, False
    when malformed."""
    images = command.get("images")
    if images is None:
        return None
    if not isinstance(images, list) or not all(
        isinstance(i, dict)
        and i.get("type") == "image"
        and isinstance(i.get("data"), str)
        and isinstance(i.get("mimeType"), str)
        for i in images
    ):
        return False
    return images


def _user_message(text: str, images: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}, *(images or [])],
        "timestamp": now_ms(),
    }


def _last_assistant_text(messages: list[dict[str, Any]]) -> str | None:
    """pi's ``getLastAssistantText``: the text blocks of the last assistant message
    that has content, or None."""
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and content:
            return "".join(
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            )
    return None


def _source_info(command: dict[str, Any], host: Any) -> dict[str, Any]:
    """pi's ``sourceInfo`` ``{path, source, scope, origin}`` for a ``get_commands`` item."""
    path = command.get("path")
    scope = "user"
    if command.get("source") == "builtin":
        return {
            "path": f"builtin:{command['name']}",
            "source": "builtin",
            "scope": "user",
            "origin": "top-level",
        }
    for source, _ in getattr(host.pool, "extensions", ()):
        if command.get("extension") == str(source.path):
            path = str(source.path)
            scope = {"cli": "temporary", "project": "project"}.get(source.origin, "user")
    return {"path": path or "", "source": "local", "scope": scope, "origin": "top-level"}


def get_commands(host: Any) -> dict[str, Any]:
    """``get_commands`` data: ``{"commands": [{name, description, source, sourceInfo,
    path?}]}`` (pi's wrapper and ``source`` values ``extension``, ``prompt``,
    ``skill``; ``path``: the extension's, template's or skill's file; our built-ins
    come first with ``source: "builtin"``,
    since ours, unlike pi's RPC mode, runs ``/reload``, ``/compact``, ``/new`` and
    ``/trust`` sent as prompts)."""
    commands = []
    by_name = {c.name: c for c in host.pool.commands.values()}
    extensions = list(getattr(host.pool, "extensions", ()))
    for item in host.commands():
        entry = dict(item)
        registered = by_name.get(entry["name"])
        if registered is not None and 0 <= registered.index < len(extensions):
            entry["extension"] = str(extensions[registered.index][0].path)
        entry["sourceInfo"] = _source_info(entry, host)
        if "extension" in entry:
            # pi's source of an extension command is "extension"; ours names its file.
            entry["source"] = "extension"
            entry["path"] = entry.pop("extension")
        commands.append(entry)
    return {"commands": commands}


def get_state(host: Any, queue: RpcQueue) -> dict[str, Any]:
    """``get_state`` data with pi's fields (rpc-commands.md), plus ours under
    ``sandbox`` (docs/rpc.md)."""
    session = host.session
    writer = session.writer
    models = getattr(host, "models", None)
    if models is not None:
        model = models.current.as_dict()
    else:
        model = {"provider": session.provider.name, "id": session.provider.model}
    ours = dict(host.state())
    for key in ("model", "thinking_level", "session_file", "session_id", "session_name"):
        ours.pop(key, None)
    ours.pop("autoCompactionEnabled", None)
    ours.pop("isCompacting", None)
    return {
        "model": model,
        "thinkingLevel": host.thinking_level,
        "isStreaming": bool(session.running),
        "isCompacting": bool(session.compactor.compacting),
        "steeringMode": queue.steering_mode,
        "followUpMode": queue.follow_up_mode,
        "sessionFile": str(writer.path) if writer.path is not None else None,
        "sessionId": writer.header.id,
        "sessionName": writer.name,
        "autoCompactionEnabled": session.compactor.auto_enabled(session),
        "messageCount": len(session.messages),
        "pendingMessageCount": queue.pending,
        "sandbox": ours,
    }


def _bash_data(result: dict[str, Any]) -> dict[str, Any]:
    """pi's ``BashResult`` (rpc-commands.md ``bash``) from `SessionHost.user_bash`'s
    result. ``fullOutputPath`` is never set: ours keeps no full-output file."""
    return {
        "output": result["output"],
        "exitCode": result["exit_code"],
        "cancelled": result["cancelled"],
        "truncated": bool(result.get("truncated", False)),
    }


async def serve_rpc(host: Any, emit: EmitFn, stdin_fd: int = 0) -> None:
    """Serve commands from ``stdin_fd`` until ``sandbox_quit`` or end of input.

    ``emit`` is the run's `RpcWire` (any emit function works; then there is no
    ``queue_update`` on delivery and start-up notices were not held back).

    Never raises for bad input: a malformed line gets a failed response with
    ``command: "parse"`` naming the problem.
    """
    host.keep_going = True
    queue = emit.queue if isinstance(emit, RpcWire) else RpcQueue()
    if isinstance(emit, RpcWire):
        emit.live = True
    # pi's queue modes, one at a time by default (rpc-commands.md).
    host.session.steering_mode = queue.steering_mode
    host.session.follow_up_mode = queue.follow_up_mode

    async def respond(command: dict[str, Any], success: bool, **extra: Any) -> None:
        response = {"type": "response", "command": command.get("type"), "success": success}
        if "id" in command:
            response["id"] = command["id"]
        response.update(extra)
        await emit(response)

    async def parse_error(message: str) -> None:
        # pi's response to a line that is not a command: command "parse", no id.
        await emit({"type": "response", "command": "parse", "success": False, "error": message})

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

    def extension_command(text: str) -> str | None:
        if not text.startswith("/"):
            return None
        name = text[1:].partition(" ")[0]
        return name if name in host.pool.commands else None

    async def queue_message(kind: str, text: str, images: list[dict[str, Any]] | None) -> None:
        # pi's _queueSteer/_queueFollowUp: skills and templates expanded, the text
        # joins the queue the client sees; while idle the message waits for the
        # next prompt's run.
        text = await host.expand_input(text)
        message = _user_message(text, images)
        if kind == "steer":
            queue.steering.append(text)
            target = host.session.steering if host.session.running else queue.held_steering
        else:
            queue.follow_up.append(text)
            target = host.session.follow_ups if host.session.running else queue.held_follow_up
        target.append(message)
        await emit(queue.record())

    async def start_prompt(
        command: dict[str, Any], text: str, images: list[dict[str, Any]] | None
    ) -> None:
        answered = False

        async def disposition(value: str) -> None:
            nonlocal answered
            if value == "started":
                # Messages queued while idle go with this run (not with a command).
                queue.release(host.session)
            if not answered:
                answered = True
                await respond(command, True, data={"disposition": value})

        async def prompt_job() -> None:
            try:
                await host.submit(text, images, on_disposition=disposition)
            except BaseException as exc:
                if not answered and not isinstance(exc, trio.Cancelled):
                    with trio.CancelScope(shield=True):
                        await respond(command, False, error=str(exc) or type(exc).__name__)
                raise

        async def dropped() -> None:
            await respond(command, False, error="aborted before it started")

        host.enqueue(prompt_job, prompt=True, on_dropped=dropped)

    async with trio.lowlevel.FdStream(os.dup(stdin_fd)) as stream:
        async for raw in _lines(stream):
            if raw is None:
                await parse_error(f"command longer than {MAX_COMMAND_BYTES} bytes; skipped")
                continue
            if not raw.strip():
                continue
            try:
                # The worker channel's decoder: bounded numbers and nesting, no NaN.
                command = decode_line(raw)
            except FrameError as exc:
                await parse_error(f"Failed to parse command: {str(exc)[:500]}")
                continue
            if not isinstance(command.get("type"), str):
                await parse_error("a command needs a string 'type'")
                continue
            kind = command["type"]
            if kind in OUR_COMMANDS:
                kind = OUR_COMMANDS[kind]
            message = command.get("message")
            if kind in ("prompt", "steer", "follow_up"):
                images = _images(command)
                if not isinstance(message, str):
                    await respond(command, False, error=f"{kind}: 'message' must be a string")
                    continue
                if images is False:
                    await respond(
                        command,
                        False,
                        error=f"{kind}: 'images' must be a list of "
                        "{type: 'image', data, mimeType}",
                    )
                    continue
            if kind == "prompt":
                behaviour = command.get("streamingBehavior")
                if behaviour not in (None, "steer", "followUp"):
                    await respond(
                        command,
                        False,
                        error="prompt: 'streamingBehavior' must be steer or followUp",
                    )
                    continue
                if host.session.running:
                    if extension_command(message) is not None:
                        # pi runs an extension command even during a run, whatever
                        # streamingBehavior says; ours runs it once the run ended.
                        await start_prompt(command, message, images)
                        continue
                    if behaviour is None:
                        # pi's words (agent-session.js _preparePrompt).
                        await respond(
                            command,
                            False,
                            error="Agent is already processing. Specify streamingBehavior "
                            "('steer' or 'followUp') to queue the message.",
                        )
                        continue
                    await queue_message(
                        "steer" if behaviour == "steer" else "follow_up", message, images
                    )
                    await respond(command, True, data={"disposition": "queued"})
                    continue
                await start_prompt(command, message, images)
            elif kind in ("steer", "follow_up"):
                if (name := extension_command(message)) is not None:
                    await respond(
                        command,
                        False,
                        error=f'Extension command "/{name}" cannot be queued. '
                        "Use prompt or execute the command when not streaming.",
                    )
                    continue
                await queue_message(kind, message, images)
                await respond(command, True, data={"disposition": "queued"})
            elif kind == "abort":
                await respond(command, True, data={"aborted": host.abort()})
            elif kind == "clear_queue":
                data = queue.clear(host.session)
                await emit(queue.record())
                await respond(command, True, data=data)
            elif kind == "abort_retry":
                # pi docs rpc-commands.md "Retry": cancel the wait and stop retrying.
                retry = host.session.retry
                await respond(
                    command, True, data={"aborted": retry.abort_retry() if retry else False}
                )
            elif kind in ("set_auto_retry", "set_auto_compaction"):
                enabled = command.get("enabled")
                if not isinstance(enabled, bool):
                    await respond(command, False, error=f"{kind}: 'enabled' must be true or false")
                    continue
                if kind == "set_auto_compaction":
                    host.session.compactor.auto = enabled
                elif host.session.retry is not None:
                    host.session.retry.settings.enabled = enabled
                await respond(command, True)
            elif kind in ("set_steering_mode", "set_follow_up_mode"):
                mode = command.get("mode")
                if mode not in QUEUE_MODES:
                    await respond(
                        command, False, error=f"{kind}: 'mode' must be all or one-at-a-time"
                    )
                    continue
                if kind == "set_steering_mode":
                    queue.steering_mode = host.session.steering_mode = mode
                else:
                    queue.follow_up_mode = host.session.follow_up_mode = mode
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

                async def run_bash(
                    command: dict[str, Any] = command, bash_command: str = bash_command
                ) -> dict[str, Any]:
                    async def update(delta: str) -> None:
                        record: dict[str, Any] = {"type": "bash_execution_update"}
                        if "id" in command:
                            record["id"] = command["id"]
                        record["delta"] = delta
                        await emit(record)

                    return _bash_data(await host.user_bash(bash_command, on_output=update))

                answer_later(command, run_bash)
            elif kind == "abort_bash":
                host.abort_bash()
                await respond(command, True)
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
                        await respond(command, False, error=f"Compaction failed: {exc}")
                        return
                    if result.get("compacted"):
                        data = {
                            k: v
                            for k, v in result.items()
                            if k not in ("first_kept_entry_id", "tokens_before")
                        }
                        await respond(command, True, data=data)
                    elif result.get("cancelled"):
                        await respond(
                            command, False, error=f"Compaction cancelled: {result.get('reason')}"
                        )
                    else:
                        # pi's words and events (agent-session.js compact): it starts,
                        # then ends with the error.
                        refusal = "Nothing to compact (session too small)"
                        await emit({"type": "compaction_start", "reason": "manual"})
                        await emit(
                            {
                                "type": "compaction_end",
                                "reason": "manual",
                                "aborted": False,
                                "willRetry": False,
                                "errorMessage": refusal,
                            }
                        )
                        await respond(command, False, error=refusal)

                host.enqueue(compact_job)
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
            elif kind in MODEL_COMMANDS:
                # issue 16: model/thinking switches and usage totals (pi's shapes).
                if getattr(host, "models", None) is None:
                    await respond(command, False, error=f"{kind}: no model control in this run")
                    continue
                try:
                    data = host.models.handle(command)
                except UsageError as exc:
                    await respond(command, False, error=str(exc))
                else:
                    extra = {} if kind == "set_thinking_level" else {"data": data}
                    await respond(command, True, **extra)
            elif kind == "get_state":
                await respond(command, True, data=get_state(host, queue))
            elif kind == "get_messages":
                await respond(command, True, data={"messages": host.session.messages})
            elif kind == "get_last_assistant_text":
                text = _last_assistant_text(host.session.messages)
                await respond(command, True, data={"text": text})
            elif kind == "get_commands":
                await respond(command, True, data=get_commands(host))
            elif kind == "export_html":
                output_path = command.get("outputPath")
                if output_path is not None and (
                    not isinstance(output_path, str) or not output_path
                ):
                    await respond(command, False, error="export_html: 'outputPath' must be a path")
                    continue
                from pi_sandbox.supervisor.sessions.html_export import export_html

                try:
                    path = await trio.to_thread.run_sync(
                        export_html,
                        host.session.writer,
                        Path(output_path) if output_path else None,
                        Path(host.session.cwd),
                    )
                except OSError as exc:
                    await respond(command, False, error=f"export_html: cannot write: {exc}")
                    continue
                await respond(command, True, data={"path": str(path)})
            elif kind == "extension_ui_response":
                # pi sends no response to an answer (rpc-extension-ui.md); an answer to
                # no open dialog (timed out, or never asked) is dropped, as pi drops it.
                host.ui_response(str(command.get("ui_id", command.get("id"))), _ui_value(command))
            elif kind == "policy_approval_response":
                # issue 18: our own command (pi has no policy gate), answering a
                # policy_approval_request event; the approvals backend may be absent.
                fields = command.get("scope"), command.get("message")
                if getattr(host, "answer_approval", None) is None:
                    problem = "policy_approval_response: this build asks no approvals"
                elif not isinstance(command.get("id"), str) or not isinstance(
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
                await respond(command, False, error=f"Unknown command: {kind}")
    host.close_ui()
    await host.wait_quiet()


def _ui_value(command: dict[str, Any]) -> Any:
    """The answer an ``extension_ui_response`` carries, as `SessionHost.ui_response`
    takes it: ``cancelled: true`` → None (the dialog's default), ``confirmed`` (a
    confirm) → that boolean, else ``value``."""
    if command.get("cancelled") is True:
        return None
    if "confirmed" in command:
        return command["confirmed"]
    return command.get("value")
