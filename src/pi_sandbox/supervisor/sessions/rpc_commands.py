"""The RPC session commands (issue 15; pi 1.6.0 rpc-commands.md "Session"), with pi's
request and response shapes:

- ``get_entries {since?}`` → ``{"entries": [...], "leafId"}`` (``since`` unknown:
  ``success: false``);
- ``get_tree`` → ``{"tree": [node…], "leafId"}`` (`tree.tree_json`);
- ``get_fork_messages`` → ``{"messages": [{"entryId", "text"}]}``;
- ``fork {entryId}`` → ``{"text", "cancelled": false}`` or ``{"cancelled": true}``:
  a new session with the path before that user message;
- ``clone`` → ``{"cancelled"}``: a new session with the active path;
- ``switch_session {sessionPath}`` → ``{"cancelled"}``;
- ``set_session_name {name}`` → success, no data.

Our additions (pi navigates with the interactive ``/tree`` and labels with ``/label``):

- ``navigate_tree {targetId, summarize?, customInstructions?, replaceInstructions?,
  label?}`` → ``{"cancelled", "editorText"?, "summaryEntry"?}`` (the shape of pi's
  ``ctx.navigateTree`` result);
- ``set_label {entryId, label?}`` → ``{"entry": label entry}``.

Commands that change the session wait for queued work and are refused while the
agent runs, like ``new_session``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pi_sandbox.supervisor.json_lines import dumps_line

__all__ = ["SESSION_COMMANDS", "handle_session_command"]

SESSION_COMMANDS = frozenset(
    {
        "get_entries",
        "get_tree",
        "get_fork_messages",
        "fork",
        "clone",
        "switch_session",
        "set_session_name",
        "navigate_tree",
        "set_label",
    }
)

Respond = Callable[..., Awaitable[None]]


async def handle_session_command(
    host: Any,
    command: dict[str, Any],
    *,
    emit: Any,
    respond: Respond,
    answer_later: Callable[..., None],
    running: Callable[[], bool],
    busy_reason: Callable[[], str],
) -> None:
    """Answer one of `SESSION_COMMANDS` (see the module docstring). Bad fields get a
    failed response naming the field; nothing is raised."""
    from pi_sandbox.supervisor.sessions.tree import entries_since, fork_messages, tree_json

    kind = command["type"]
    writer = host.session.writer

    def string(key: str, *, optional: bool = False) -> str | bool | None:
        value = command.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            return False
        return value

    if kind == "get_entries":
        since = command.get("since")
        if since is not None and not isinstance(since, str):
            await respond(command, False, error="get_entries: 'since' must be an entry id")
            return
        try:
            entries = entries_since(writer.entries, since)
        except KeyError:
            await respond(command, False, error=f"get_entries: no entry {since!r}")
            return
        await respond(command, True, data={"entries": entries, "leafId": writer.last_id})
    elif kind == "get_tree":
        # Written as text: the tree nests as deep as the longest branch (tree_json).
        line = '{"type": "response", "command": "get_tree", "success": true'
        if "id" in command:
            line += ', "id": ' + dumps_line(command["id"])
        line += ', "data": ' + tree_json(writer.entries, writer.last_id) + "}"
        write_line = getattr(emit, "write_line", None)
        if write_line is not None:
            await write_line(line)
        else:  # an emitter without raw lines (tests): the parsed object
            import json

            await emit(json.loads(line))
    elif kind == "get_fork_messages":
        await respond(command, True, data={"messages": fork_messages(writer.entries)})
    elif kind == "set_session_name":
        name = string("name")
        if name is False:
            await respond(command, False, error="set_session_name: 'name' must be a string")
            return
        try:
            await host.set_session_name(name)
        except Exception as exc:  # HostCallError: the reason, as a failed response
            await respond(command, False, error=str(exc))
            return
        await respond(command, True)
    elif kind == "set_label":
        entry_id = string("entryId")
        label = command.get("label")
        if entry_id is False or not (label is None or isinstance(label, str)):
            await respond(
                command,
                False,
                error="set_label: 'entryId' must be an entry id and 'label' a string or null",
            )
            return
        try:
            entry = host.set_label(entry_id, label)
        except Exception as exc:
            await respond(command, False, error=str(exc))
            return
        await respond(command, True, data={"entry": entry})
    else:
        await _session_change(host, command, respond, answer_later, running, busy_reason)


async def _session_change(
    host: Any,
    command: dict[str, Any],
    respond: Respond,
    answer_later: Callable[..., None],
    running: Callable[[], bool],
    busy_reason: Callable[[], str],
) -> None:
    kind = command["type"]
    if running():
        await respond(
            command,
            False,
            error=f"cannot {kind.replace('_', ' ')}: {busy_reason()}; wait until it is idle "
            "or abort it",
        )
        return
    writer = host.session.writer
    if kind == "fork":
        entry_id = command.get("entryId")
        record = writer.by_id.get(entry_id) if isinstance(entry_id, str) else None
        message = record.get("message") if record else None
        if not isinstance(message, dict) or message.get("role") != "user":
            await respond(
                command, False, error=f"fork: 'entryId' {entry_id!r} is not a user message entry"
            )
            return
        from pi_sandbox.supervisor.sessions.tree import fork_messages

        text = next((m["text"] for m in fork_messages([record]) if m["entryId"] == entry_id), "")

        async def fork() -> dict[str, Any]:
            result = await host.replace("fork", entry_id=entry_id, position="before")
            return result if result.get("cancelled") else {"text": text, "cancelled": False}

        answer_later(command, fork)
    elif kind == "clone":
        if writer.last_id is None:
            await respond(command, False, error="clone: the session has no entries yet")
            return

        async def clone() -> dict[str, Any]:
            leaf = host.session.writer.last_id  # when it runs, after queued work
            return await host.replace("fork", entry_id=leaf, position="at")

        answer_later(command, clone)
    elif kind == "switch_session":
        path = command.get("sessionPath")
        if not isinstance(path, str) or not path:
            await respond(command, False, error="switch_session: 'sessionPath' must be a path")
            return

        async def switch() -> dict[str, Any]:
            return await host.replace("switch", session_file=path)

        answer_later(command, switch)
    elif kind == "navigate_tree":
        target = command.get("targetId")
        summarize = command.get("summarize")
        instructions = command.get("customInstructions")
        replace = command.get("replaceInstructions", False)
        label = command.get("label")
        problems = [
            "'targetId' must be an entry id" if not isinstance(target, str) else "",
            "'summarize' must be true or false"
            if summarize is not None and not isinstance(summarize, bool)
            else "",
            "'customInstructions' must be a string"
            if instructions is not None and not isinstance(instructions, str)
            else "",
            "'replaceInstructions' must be true or false" if not isinstance(replace, bool) else "",
            "'label' must be a string" if label is not None and not isinstance(label, str) else "",
        ]
        if any(problems):
            await respond(
                command, False, error="navigate_tree: " + "; ".join(p for p in problems if p)
            )
            return

        async def navigate() -> dict[str, Any]:
            from pi_sandbox.errors import ProviderError, UsageError

            try:
                result: dict[str, Any] = await host.navigate_tree(
                    target,
                    summarize=summarize,
                    custom_instructions=instructions,
                    replace_instructions=replace,
                    label=label,
                )
            except ProviderError as exc:  # nothing was written; the leaf did not move
                raise UsageError(f"navigate_tree: the branch summary failed: {exc}") from exc
            return result

        answer_later(command, navigate)
