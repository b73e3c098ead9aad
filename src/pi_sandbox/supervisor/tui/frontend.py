"""The trio side of the terminal UI: events in, user actions out (issue 18).

The run calls the frontend as its ``output`` (every event dict of the session) and,
once the session is up, awaits `TerminalFrontend.serve`, which turns what the user
does on the screen into the same `SessionHost` calls ``--mode rpc`` makes
(`serve_rpc`): ``submit``/``enqueue`` for prompts, the steering and follow-up
queues, ``abort``, ``ui_response`` for dialogs, ``approval_response`` for policy
``ask`` prompts, ``user_bash`` for ``!cmd``, the model commands.

Threads: the prompt_toolkit application runs in a worker thread with its own asyncio
loop (`TerminalApp.run`); events cross to it through a queue drained on its loop,
and actions cross back through ``TrioToken.run_sync_soon`` into a trio channel.
Every read of the session (footer statistics, lists for completion) happens here,
on the trio side, and travels to the screen as a ``tui_*`` event of its own.
"""

from __future__ import annotations

import contextlib
import io
import math
import queue
import threading
from collections.abc import Callable
from typing import Any

import trio

from pi_sandbox.errors import HostCallError, PiSandboxError, ProviderError, UsageError
from pi_sandbox.supervisor.sessions.session_file import now_ms

__all__ = ["TUI_COMMANDS", "TerminalFrontend"]

TUI_COMMANDS: dict[str, str] = {
    "model": "Show or switch the model: /model [provider/id]",
    "thinking": "Show or set the thinking level: /thinking [level]",
    "name": "Show or set the session's name: /name [name]",
    "session": "Show the session: file, id, messages, tokens and cost",
    "resume": "Resume an earlier session of this directory: /resume [N]",
    "tree": "Show the session tree; go to any entry: /tree [N | ID-PREFIX [summary [TEXT]]]",
    "label": "Label the current entry, or one by id: /label [ID-PREFIX] TEXT (empty clears)",
    "fork": "Start a new session from an earlier user message: /fork [N]",
    "tools": "List the active tools",
    "policy": "Show the effective policy (as `pi policy show`)",
    "sandbox": "Show what the sandbox enforces here (as `pi sandbox doctor`)",
    "hotkeys": "List the keys",
    "quit": "Quit pi",
}
"""Commands the terminal UI handles itself (issue 18 §slash commands); the host's
built-ins (``/reload``, ``/new``, ``/trust``, ``/compact``), extension commands,
``/skill:NAME`` and prompt templates go to `SessionHost.submit` as in RPC mode."""

HOTKEYS: list[tuple[str, str]] = [
    ("Enter", "send the message (while the agent works: steer it)"),
    ("Alt-Enter", "queue a follow-up for when the agent is done"),
    ("Ctrl-J", "new line in the editor"),
    ("Esc", "abort the running turn; close a dialog"),
    ("Ctrl-C", "clear the editor; twice: quit"),
    ("Ctrl-D", "quit (on an empty editor)"),
    ("Tab", "complete /commands, @files and skills"),
    ("Up/Down", "editor history"),
    ("Ctrl-O", "show the last tool result in full"),
    ("Ctrl-T", "show or hide thinking"),
    ("!cmd", "run a shell command (hooks, policy, sandbox); !!cmd: not sent to the model"),
]


class TerminalFrontend:
    """The interactive mode's output and input (issue 18).

    Args:
        options: the run's ``RunOptions`` (``message``: the first prompt, if any;
            ``agent_dir``: where the editor history is kept; ``cwd``).

    Attributes:
        failed: always False (the run's exit status reads it from every output).
    """

    def __init__(self, options: Any) -> None:
        self.options = options
        self.failed = False
        self.events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.app: Any = None
        self.host: Any = None
        self.context: dict[str, Any] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._actions_send, self._actions_recv = trio.open_memory_channel[tuple[Any, ...]](math.inf)
        self._ended = threading.Event()
        self._quit = trio.Event()  # the user quit (or the screen ended)
        self._model_refs: list[str] | None = None  # /model completion, read once
        self._closed = False

    # --- output (the event stream) -------------------------------------------------------------

    async def __call__(self, event: dict[str, Any]) -> None:
        """Take one event of the session (any thread-safe dict; not kept after)."""
        self.post(event)
        if event.get("type") in ("agent_end", "turn_end", "message_end", "session_changed"):
            self.post_footer()

    def post(self, event: dict[str, Any]) -> None:
        """Hand ``event`` to the screen (drained on the UI thread's loop)."""
        self.events.put(event)
        if self.app is not None:
            self.app.wake()

    def post_footer(self) -> None:
        """Send the footer's current facts (read here, on the trio side)."""
        self.post(self.footer())

    def footer(self) -> dict[str, Any]:
        """``{"type": "tui_footer", …}``: model, thinking level, session name,
        tokens and cost, sandbox state and trust."""
        event: dict[str, Any] = {"type": "tui_footer", "cwd": str(self.options.cwd)}
        context = self.context
        if "sandboxed" in context:
            event["sandboxed"] = bool(context["sandboxed"]())
        if "trust" in context:
            info = context["trust"]()
            event["trust"] = (info.decision or "undecided") if info is not None else None
        host = self.host
        if host is None:
            return event
        session = host.session
        event["model"] = f"{session.provider.name}/{session.provider.model}"
        event["thinking"] = session.thinking_level
        event["session_name"] = session.writer.name
        try:
            from pi_sandbox.supervisor.modes.model_commands import session_stats

            stats = session_stats(session, getattr(host.models, "model", None))
        except Exception:  # the footer is cosmetic: a bad record must not end the session
            stats = None
        if stats is not None:
            event["tokens"] = stats["tokens"]
            event["cost"] = stats["cost"]
            event["context"] = stats.get("contextUsage")
        event["commands"] = self._completion_commands()
        models = host.models
        if models is not None:
            with contextlib.suppress(Exception):  # completion lists are a convenience
                if self._model_refs is None:
                    self._model_refs = [m.ref for m in models.available()][:500]
                event["models"] = self._model_refs
                event["levels"] = list(models.levels())
        return event

    def _completion_commands(self) -> list[dict[str, str]]:
        commands = [
            {"name": name, "description": text, "source": "tui"}
            for name, text in TUI_COMMANDS.items()
        ]
        with contextlib.suppress(Exception):
            commands += [
                {
                    "name": c["name"],
                    "description": c.get("description") or "",
                    "source": c["source"],
                }
                for c in self.host.commands()
            ]
        return commands

    # --- the screen's thread --------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the screen in its thread; returns once the editor is drawn."""
        from pi_sandbox.supervisor.tui.app import TerminalApp

        self._token = trio.lowlevel.current_trio_token()
        ready = trio.Event()
        token = self._token
        self.app = TerminalApp(
            self,
            cwd=self.options.cwd,
            history_path=self.options.agent_dir / "prompt-history",
            on_ready=lambda: token.run_sync_soon(ready.set),
        )
        self.post_footer()

        async def run_thread() -> None:
            try:
                await trio.to_thread.run_sync(self._run_app, abandon_on_cancel=True)
            finally:
                # The screen ended (or failed): the session ends with it.
                self._deliver(("quit",))
                ready.set()

        nursery.start_soon(run_thread)
        await ready.wait()

    def _run_app(self) -> None:
        try:
            self.app.run()
        finally:
            self._ended.set()

    def act(self, *action: Any) -> None:
        """From the UI thread: queue ``action`` for `serve` (non-blocking)."""
        if self._token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, action)

    def _deliver(self, action: tuple[Any, ...]) -> None:
        # On the trio side. A quit also ends a question asked before the session
        # started (the trust prompt): nobody will answer it.
        if action[0] == "quit":
            self._quit.set()
        self._actions_send.send_nowait(action)

    def close(self) -> None:
        """End the screen and restore the terminal (idempotent; waits up to 5 s)."""
        if self._closed or self.app is None:
            return
        self._closed = True
        self.app.request_exit()
        self._ended.wait(5)

    # --- trust at start ----------------------------------------------------------------------------

    async def ask_trust(
        self, cwd: Any, resources: list[Any], allowed: list[str]
    ) -> tuple[str, bool] | None:
        """Ask the user about an undecided project: ``(decision, save)``, or None
        when the prompt was dismissed (Esc) or the screen ended."""
        answer: list[Any] = []
        done = trio.Event()
        token = self._token
        assert token is not None

        def reply(value: Any) -> None:
            def settle() -> None:
                answer.append(value)
                done.set()

            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(settle)

        self.post(
            {
                "type": "tui_trust_request",
                "cwd": str(cwd),
                "resources": [str(p) for p in resources],
                "allowed": allowed,
                "reply": reply,
            }
        )
        async with trio.open_nursery() as nursery:

            async def quit_watch() -> None:
                await self._quit.wait()
                done.set()

            nursery.start_soon(quit_watch)
            await done.wait()
            nursery.cancel_scope.cancel()
        return answer[0] if answer else None

    # --- input (the user's actions) ----------------------------------------------------------------

    async def serve(self, host: Any, context: dict[str, Any]) -> None:
        """Drive ``host`` from the screen until the user quits (``/quit``, Ctrl-D,
        Ctrl-C twice) or the screen ends; then abort what runs and wait for quiet."""
        self.host = host
        self.context = context
        host.keep_going = True
        self.post_footer()
        # pi docs cli.md: the command line's messages are sent in turn, the first
        # with the @file attachments (and piped stdin, which is print mode here).
        first = self.options.message
        if first and first.strip():
            self.post({"type": "tui_user", "text": first})
            self._prompt(first, self.options.images or None)
            for message in self.options.rest_messages:
                self.post({"type": "tui_user", "text": message})
                self._prompt(message)
        async for action in self._actions_recv:
            kind = action[0]
            try:
                if kind == "quit":
                    break
                if kind == "input":
                    await self._input(action[1], follow_up=action[2])
                elif kind == "abort":
                    host.abort()
                elif kind == "ui":
                    host.ui_response(action[1], action[2])
                elif kind == "approval":
                    # The approvals backend (issue 18, branch u2-approvals).
                    respond = getattr(host, "approval_response", None)
                    if respond is None or not respond(
                        action[1], action[2], scope=action[3], message=action[4]
                    ):
                        self.post(
                            {
                                "type": "pisandbox_warning",
                                "message": "that approval is no longer pending",
                            }
                        )
            except (UsageError, HostCallError) as exc:
                self.post({"type": "pisandbox_warning", "message": str(exc)})
            self.post_footer()
        host.close_ui()
        host.abort()
        await host.wait_quiet()

    def _prompt(self, text: str, images: list[dict[str, Any]] | None = None) -> None:
        async def job() -> None:
            await self.host.submit(text, images)

        self.host.enqueue(job, prompt=True)

    def _job(self, action: Callable[[], Any]) -> None:
        """Queue ``action`` (async) behind the current work; its errors are shown."""

        async def job() -> None:
            try:
                await action()
            except (HostCallError, UsageError) as exc:
                self.post({"type": "pisandbox_warning", "message": str(exc)})
            except (ProviderError, PiSandboxError) as exc:
                self.post({"type": "pisandbox_error", "error": str(exc)})
            self.post_footer()

        self.host.enqueue(job)

    async def _input(self, text: str, *, follow_up: bool) -> None:
        host = self.host
        stripped = text.strip()
        if not stripped:
            return
        if stripped.startswith("!"):
            exclude = stripped.startswith("!!")
            command = stripped[2:] if exclude else stripped[1:]
            if not command.strip():
                return
            if host.session.running or host.replacing:
                self.post(
                    {"type": "pisandbox_warning", "message": "!cmd waits until the agent is idle"}
                )
                return
            self.post({"type": "tui_user", "text": stripped})

            async def bash() -> None:
                result = await host.user_bash(command, exclude_from_context=exclude)
                self.post(
                    {
                        "type": "tui_bash_result",
                        "command": command,
                        "excluded": exclude,
                        **result,
                    }
                )

            self._job(bash)
            return
        if stripped.startswith("/"):
            name, _, args = stripped[1:].partition(" ")
            if name in TUI_COMMANDS:
                self.post({"type": "tui_user", "text": stripped})
                await self._command(name, args.strip())
                return
        self.post({"type": "tui_user", "text": text, "queued": host.session.running})
        if host.session.running and not stripped.startswith("/"):
            # pi: Enter while the agent works steers it; Alt-Enter queues a follow-up.
            queue_ = host.session.follow_ups if follow_up else host.session.steering
            queue_.append(
                {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": now_ms()}
            )
            kind = "follow-up" if follow_up else "steering message"
            self.post({"type": "pisandbox_notice", "message": f"queued as a {kind}"})
            return
        self._prompt(text)

    # --- the screen's own commands ----------------------------------------------------------------

    def _say(self, *lines: str) -> None:
        self.post({"type": "tui_info", "lines": list(lines)})

    async def _command(self, name: str, args: str) -> None:
        host = self.host
        if name == "quit":
            self._deliver(("quit",))
        elif name == "hotkeys":
            self._say(*(f"{key:10} {what}" for key, what in HOTKEYS))
        elif name == "model":
            await self._model(args)
        elif name == "thinking":
            if not args:
                levels = host.models.levels() if host.models is not None else ["off"]
                self._say(
                    f"thinking: {host.session.thinking_level} (this model takes: "
                    f"{', '.join(levels)})"
                )
            else:
                host.models.set_thinking_level(args)
                self._say(f"thinking: {host.session.thinking_level}")
        elif name == "name":
            writer = host.session.writer
            if not args:
                self._say(f"session name: {writer.name or '(none)'}")
            else:
                writer.append_session_info(args)
                self._say(f"session name: {args}")
        elif name == "session":
            from pi_sandbox.supervisor.modes.model_commands import session_stats

            stats = session_stats(host.session, getattr(host.models, "model", None))
            tokens = stats["tokens"]
            self._say(
                f"file: {stats['sessionFile'] or '(not saved: --no-session)'}",
                f"id: {stats['sessionId']}",
                f"name: {host.session.writer.name or '(none)'}",
                f"messages: {stats['userMessages']} user, {stats['assistantMessages']} "
                f"assistant, {stats['toolCalls']} tool calls",
                f"tokens: {tokens['input']:,} in, {tokens['output']:,} out; "
                f"cost ${stats['cost']:.4f}",
            )
        elif name == "tools":
            tools = [
                f"{tool.name}: {(tool.description or '').strip().splitlines()[0][:70]}"
                if (tool.description or "").strip()
                else tool.name
                for tool in host.active_definitions()
            ]
            self._say(*(tools or ["no active tools"]))
        elif name == "policy":
            self._say(*self._policy_lines())
        elif name == "sandbox":
            from pi_sandbox.sandbox.doctor import run_doctor

            report = await trio.to_thread.run_sync(run_doctor)
            sandboxed = self.context.get("sandboxed", lambda: False)()
            self._say(
                "this session: "
                + ("sandboxed: bwrap+seccomp" if sandboxed else "NOT sandboxed (--sandbox)"),
                *report.as_text().splitlines(),
            )
        elif name == "fork":
            await self._fork(args)
        elif name == "resume":
            await self._resume(args)
        elif name == "tree":
            await self._tree(args)
        elif name == "label":
            self._label(args)

    def _policy_lines(self) -> list[str]:
        from pi_sandbox.cli import _show_policy

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            _show_policy(self.context["policy"](), as_json=False)
        return out.getvalue().rstrip("\n").splitlines()

    async def _model(self, args: str) -> None:
        models = self.host.models
        if not args:
            current = f"{self.host.session.provider.name}/{self.host.session.provider.model}"
            refs = [m.ref for m in models.available()] if models is not None else []
            self._say(f"model: {current}", *(f"  {ref}" for ref in refs[:30]))
            if len(refs) > 30:
                self._say(f"  … and {len(refs) - 30} more (pi --list-models)")
            return
        if models is None:
            raise UsageError("/model: this run's model cannot be switched")
        provider, _, model_id = args.partition("/")
        if not model_id:
            matches = [m for m in models.available() if m.id == args]
            if not matches:
                raise UsageError(f"/model: no available model {args!r}; use provider/id")
            provider, model_id = matches[0].provider, matches[0].id
        models.set_model(provider, model_id)
        self._say(f"model: {provider}/{model_id} (thinking {self.host.session.thinking_level})")

    def _user_entries(self) -> list[dict[str, Any]]:
        writer = self.host.session.writer
        return [
            entry
            for entry in writer.branch()
            if entry.get("type") == "message" and entry.get("message", {}).get("role") == "user"
        ]

    async def _resume(self, args: str) -> None:
        """``/resume``: this directory's saved sessions, newest first; ``/resume N``
        switches to one (the host's ``switch``, as ``ctx.switch_session``)."""
        from pi_sandbox.supervisor.sessions.session_file import session_dir_for

        folder = session_dir_for(self.options.agent_dir, self.options.cwd)
        current = self.host.session.writer.path
        try:
            files = sorted(
                (p for p in folder.glob("*.jsonl") if p != current),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )[:20]
        except OSError:
            files = []
        if not args:
            if not files:
                self._say(f"no other saved session for this directory (in {folder})")
                return
            lines = [f"{i + 1}. {_session_preview(path)}" for i, path in enumerate(files)]
            self._say(*lines, "/resume N switches to session N")
            return
        if not args.isdigit() or not 1 <= int(args) <= len(files):
            raise UsageError(f"/resume: give a session number from 1 to {len(files)}")
        path = files[int(args) - 1]
        if self.host.session.running or self.host.replacing:
            raise UsageError("/resume: wait until the agent is idle")

        async def switch() -> None:
            result = await self.host.replace("switch", session_file=str(path))
            if isinstance(result, dict) and result.get("cancelled"):
                self._say("resume cancelled by an extension")
                return
            messages = self.host.session.writer.messages()
            self._say(f"resumed {path.name} ({len(messages)} messages)")
            for message in messages[-4:]:
                text = _message_text(message)
                if text and message.get("role") in ("user", "assistant"):
                    mark = "›" if message["role"] == "user" else " "
                    self._say(f"{mark} {text[:300]}")
            self.post({"type": "session_changed"})

        self._job(switch)

    async def _tree(self, args: str) -> None:
        """``/tree``: the session tree (every branch, ids, labels, ``*`` at the current
        entry) and the numbered user messages of the current branch. ``/tree N`` goes
        back to just before user message N (its text back in the editor); ``/tree
        ID-PREFIX`` continues from any entry of any branch (issue 15 "The tree"). Both
        go through the host's ``navigate_tree``. pi asks whether to summarise the
        abandoned branch; here the answer is in the command: ``summary [TEXT]`` after
        the target writes a ``branch_summary`` (TEXT: extra instructions for it),
        without it none is written."""
        users = self._user_entries()
        words = args.split()
        if not words:
            lines = _tree_lines(self.host.session.writer)
            self._say(
                *(lines or ["(no entries yet)"]),
                *(f"{i + 1}. {_message_text(e['message'])[:70]}" for i, e in enumerate(users)),
                "/tree N goes back to just before message N; /tree ID-PREFIX continues from "
                "that entry (the rest stays in the file); add `summary` for a branch summary",
            )
            return
        if len(words) > 1 and words[1] != "summary":
            raise UsageError("/tree: N or ID-PREFIX, optionally followed by summary [TEXT]")
        summarize = len(words) > 1
        instructions = " ".join(words[2:]) or None
        target, editor_text = None, None
        if words[0].isdigit() and 1 <= int(words[0]) <= len(users):
            entry = users[int(words[0]) - 1]
            target = entry.get("parentId")
            if target is None:
                raise UsageError("/tree: message 1 has no entry before it; use /new")
            editor_text = _message_text(entry["message"])
            where = f"back before message {words[0]}"
        else:
            record = _entry_by_prefix(self.host.session.writer, words[0])
            target, where = record["id"], f"at entry {record['id'][:8]}"
            message = record.get("message") if record.get("type") == "message" else None
            if isinstance(message, dict) and message.get("role") == "user":
                # pi: choosing a user message puts its text back in the editor and
                # continues from the entry before it.
                target, editor_text = record.get("parentId"), _message_text(message)
                if target is None:
                    raise UsageError("/tree: that is the first message; use /new")
        if self.host.session.running or self.host.replacing:
            raise UsageError("/tree: wait until the agent is idle")

        async def navigate() -> None:
            result = await self.host.navigate_tree(
                target, summarize=summarize, custom_instructions=instructions
            )
            if isinstance(result, dict) and result.get("cancelled"):
                self._say("navigation cancelled by an extension")
                return
            self._say(f"{where}; the next prompt starts a new branch")
            if editor_text is not None:
                self.post({"type": "tui_editor_text", "text": editor_text})
            self.post({"type": "session_changed"})

        self._job(navigate)

    def _label(self, args: str) -> None:
        """``/label TEXT`` labels the current entry, ``/label ID-PREFIX TEXT`` another
        one; an empty text clears the label (pi's ``/label``)."""
        writer = self.host.session.writer
        first, _, rest = args.strip().partition(" ")
        record = None
        if first and len(first) >= 4 and all(c in "0123456789abcdef-" for c in first.lower()):
            try:
                record = _entry_by_prefix(writer, first)
            except UsageError:
                record = None
        if record is not None:
            target, text = record["id"], rest.strip()
        else:
            # The current entry of the conversation, not a label or other metadata
            # entry appended after it (red-team finding: a second /label labelled
            # the first label).
            target = next(
                (
                    r["id"]
                    for r in reversed(writer.branch())
                    if r.get("type")
                    in ("message", "custom_message", "branch_summary", "compaction")
                ),
                writer.last_id,
            )
            text = args.strip()
        if target is None:
            raise UsageError("/label: no entry to label yet")
        self.host.set_label(target, text or None)
        self._say(f"label of {target[:8]}: {text or '(cleared)'}")

    async def _fork(self, args: str) -> None:
        """``/fork``: list the user messages; ``/fork N``: a new session file with the
        branch before the N-th one (the host's ``fork``), its text back in the editor."""
        users = self._user_entries()

        def text_of(entry: dict[str, Any]) -> str:
            return _message_text(entry["message"])

        if not args:
            if not users:
                self._say("nothing to fork from: no user message yet")
                return
            self._say(
                *(f"{i + 1}. {text_of(e)[:70]}" for i, e in enumerate(users)),
                "/fork N starts a new session from message N",
            )
            return
        if not args.isdigit() or not 1 <= int(args) <= len(users):
            raise UsageError(f"/fork: give a message number from 1 to {len(users)}")
        entry = users[int(args) - 1]
        if self.host.session.running or self.host.replacing:
            raise UsageError("/fork: wait until the agent is idle")

        async def fork() -> None:
            # pi: the new session holds the history before the message; the
            # message itself goes back to the editor, to edit and send.
            parent = entry.get("parentId")
            result = (
                await self.host.replace("fork", entry_id=parent)
                if parent is not None
                else await self.host.replace("new")
            )
            if not (isinstance(result, dict) and result.get("cancelled")):
                self.post({"type": "tui_editor_text", "text": text_of(entry)})
                self.post({"type": "session_changed"})

        self._job(fork)


def _entry_by_prefix(writer: Any, prefix: str) -> dict[str, Any]:
    """The entry whose id starts with ``prefix``.

    Raises:
        UsageError: no entry, or several (they are listed).
    """
    matches = [r for r in writer.entries if str(r.get("id", "")).startswith(prefix)]
    if not matches:
        raise UsageError(f"/tree: no entry id starts with {prefix!r} (see /tree)")
    if len(matches) > 1:
        ids = ", ".join(str(r["id"])[:12] for r in matches[:10])
        raise UsageError(f"/tree: {prefix!r} is ambiguous: {ids}")
    return matches[0]


def _tree_lines(writer: Any, limit: int = 200) -> list[str]:
    """The session tree as text: messages, branch summaries and compactions in
    depth-first order, indented only where a branch forks (a long linear session
    stays flat), ``*`` at the current entry, labels in brackets; at most the last
    ``limit`` lines."""
    from pi_sandbox.supervisor.sessions.tree import labels_of

    entries = [r for r in writer.entries if isinstance(r.get("id"), str)]
    labels = labels_of(writer.entries)
    ids = {r["id"] for r in entries}
    children: dict[str, list[dict[str, Any]]] = {}
    roots = []
    for record in entries:
        parent = record.get("parentId")
        if parent in ids and parent != record["id"]:
            children.setdefault(parent, []).append(record)
        else:
            roots.append(record)
    leaf = writer.last_id
    lines: list[str] = []
    stack = [(root, 0) for root in reversed(roots)]
    while stack:
        record, depth = stack.pop()
        kids = children.get(record["id"], [])
        text = _entry_summary(record)
        if text is not None:
            mark = "*" if record["id"] == leaf else " "
            label = f" [{labels[record['id']][0]}]" if record["id"] in labels else ""
            lines.append(f"{'  ' * min(depth, 12)}{mark}{record['id'][:8]} {text}{label}")
        deeper = depth + 1 if len(kids) > 1 else depth
        stack.extend((kid, deeper) for kid in reversed(kids))
    if len(lines) > limit:
        lines = [f"… {len(lines) - limit} earlier entries", *lines[-limit:]]
    return lines


def _entry_summary(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    if kind == "message":
        message = record.get("message") or {}
        role = message.get("role")
        text = " ".join(_message_text(message).split())[:60]
        if role == "assistant":
            calls = [
                b.get("name")
                for b in message.get("content") or []
                if isinstance(b, dict) and b.get("type") == "toolCall"
            ]
            if calls:
                text = (text + " " if text else "") + f"→ {', '.join(map(str, calls))}"
        return f"{role}: {text}" if role in ("user", "assistant") else None
    if kind == "branch_summary":
        return "branch summary"
    if kind == "compaction":
        return "compaction"
    return None


def _message_text(message: dict[str, Any]) -> str:
    """A message's text blocks, joined (a string content as is)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(
        str(b.get("text", ""))
        for b in content or []
        if isinstance(b, dict) and b.get("type") == "text"
    )


def _session_preview(path: Any) -> str:
    """``DATE  name or first user message`` of a session file (best effort: an
    unreadable file shows its name)."""
    import json
    import time as _time

    first = ""
    name = ""
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle):
                if number > 2000:
                    break
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("type") == "session_info" and isinstance(record.get("name"), str):
                    name = record["name"]
                message = record.get("message") if record.get("type") == "message" else None
                if not first and isinstance(message, dict) and message.get("role") == "user":
                    first = _message_text(message)
        stamp = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(path.stat().st_mtime))
    except OSError:
        return path.name
    from pi_sandbox.supervisor.modes.output_modes import printable

    return printable(f"{stamp}  {name or first[:60] or '(empty)'}", newlines=False)
