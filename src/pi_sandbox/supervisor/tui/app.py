"""The prompt_toolkit screen of the interactive mode (issue 18).

Inline, like pi's: finished output (the user's messages, assistant answers rendered
as Markdown, tool blocks, notices) is printed into the terminal's own scrollback;
below it a live area shows what is still happening — the streaming answer, running
tool calls with their progress, dimmed thinking — then an open dialog, the editor,
the extensions' status line and a footer. Nothing is drawn with absolute positions,
so resizing only redraws the live part; the size is polled (a thread cannot receive
SIGWINCH).

Runs in a thread of its own (`TerminalFrontend`); it only reads the event dicts it
is given and answers through ``frontend.act(...)``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import (
    CompleteEvent,
    Completer,
    Completion,
    PathCompleter,
    get_common_complete_suffix,
)
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, FormattedText, to_formatted_text
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import (
    ConditionalContainer,
    Float,
    FloatContainer,
    FormattedTextControl,
    HSplit,
    Layout,
    Window,
)
from prompt_toolkit.layout.controls import BufferControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.output.color_depth import ColorDepth
from prompt_toolkit.styles import Style

from pi_sandbox.supervisor.modes.output_modes import printable
from pi_sandbox.supervisor.tui import render

__all__ = ["TerminalApp"]

DOUBLE_CTRL_C_S = 1.5
"""Two Ctrl-C within this many seconds quit (pi: "Press Ctrl-C again to exit")."""

SIZE_POLL_S = 0.1
"""How often the terminal's size is read (this thread gets no SIGWINCH)."""

EVENT_REDRAW_INTERVAL_S = 0.04
"""Events redraw the screen at most this often (25 times a second)."""

LIVE_TAIL_CHARS = 2500
"""Only the end of a long streaming answer is rendered live (the live area shows
its last lines anyway); the whole answer is rendered once, when it ends."""

LIVE_RENDER_INTERVAL_S = 0.1
"""The streaming answer is re-rendered as Markdown at most this often; in between the
cached rendering is shown (typing stays fast while the model streams)."""


def _tail(text: str) -> str:
    """The last `LIVE_TAIL_CHARS` of ``text``, from a paragraph start when there is
    one (so the Markdown around the cut still reads right)."""
    if len(text) <= LIVE_TAIL_CHARS:
        return text
    tail = text[-LIVE_TAIL_CHARS:]
    cut = tail.find("\n\n")
    return tail[cut + 2 :] if 0 <= cut < LIVE_TAIL_CHARS // 2 else tail


def _merged(fragments: list[Any]) -> list[tuple[str, str]]:
    """prompt_toolkit's ANSI parser yields one fragment per character; runs of one
    style joined make every later layout pass over them many times cheaper."""
    out: list[tuple[str, str]] = []
    for fragment in fragments:
        style, text = fragment[0], fragment[1]
        if out and out[-1][0] == style and len(fragment) == 2:
            out[-1] = (style, out[-1][1] + text)
        else:
            out.append((style, text))
    return out


class _Accumulator:
    """Text that grows by small pieces (a streamed answer): appending is O(piece),
    the whole is joined only when read, and ``version`` says whether it changed."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._joined = ""
        self._joined_parts = 0
        self.length = 0
        self.version = 0
        self._base = 0  # the version of the last `set` (appends since extend it)

    def append(self, piece: str) -> None:
        if piece:
            self._parts.append(piece)
            self.length += len(piece)
            self.version += 1

    def set(self, value: str) -> None:
        self._parts = [value] if value else []
        self._joined, self._joined_parts = value, len(self._parts)
        self.length = len(value)
        self.version += 1
        self._base = self.version

    def value(self) -> str:
        if self._joined_parts != len(self._parts):
            self._joined = "".join(self._parts)
            self._parts = [self._joined] if self._joined else []
            self._joined_parts = len(self._parts)
        return self._joined

    def extends(self, version: int) -> bool:
        """Whether the text at ``version`` is a prefix of the current text."""
        return version >= self._base

    def since(self, length: int) -> str:
        """The text after the first ``length`` characters."""
        return self.value()[length:]


class _Completer(Completer):
    """``/command`` names (with descriptions), ``@path`` files under the cwd, and
    ``/skill:NAME`` (skills are commands named ``skill:NAME``)."""

    def __init__(self, app: TerminalApp) -> None:
        self.app = app
        self.paths = PathCompleter(expanduser=True, get_paths=lambda: [str(app.cwd)])

    def get_completions(self, document: Document, complete_event: Any) -> Any:
        text = document.text_before_cursor
        for command, key in (("/model ", "models"), ("/thinking ", "levels")):
            if text.startswith(command) and " " not in text[len(command) :]:
                typed = text[len(command) :]
                for value in self.app.footer.get(key) or []:
                    if value.startswith(typed):
                        yield Completion(value, start_position=-len(typed))
                return
        if text.startswith("/") and " " not in text:
            typed = text[1:]
            for command in self.app.commands:
                name = command["name"]
                if name.startswith(typed):
                    yield Completion(
                        "/" + name,
                        start_position=-len(text),
                        display_meta=printable(command.get("description") or "", newlines=False)[
                            :60
                        ],
                    )
            return
        word = text.split()[-1] if text.split() and not text.endswith(" ") else ""
        if word.startswith("@"):
            inner = Document(word[1:], len(word) - 1)
            yield from self.paths.get_completions(inner, complete_event)


class _Dialog:
    """One open dialog: a policy approval, an extension's confirm/select/input/
    editor, or the start-up trust question."""

    def __init__(self, kind: str, event: dict[str, Any]) -> None:
        self.kind = kind  # "approval" | "confirm" | "select" | "input" | "editor" | "trust"
        self.event = event
        self.id = str(event.get("ui_id") or event.get("id") or "")
        self.options: list[str] = []
        self.selected = 0
        self.stage = "choose"  # approval: choose → scope → message; trust: choose → save
        self.opened = time.monotonic()
        self.choice: Any = None


class TerminalApp:
    """The screen (see the module docstring).

    Args:
        frontend: the `TerminalFrontend` (``events`` queue in, ``act`` out).
        cwd: the session's directory (``@file`` completion, footer).
        history_path: where the editor's history is kept (pi keeps its own in the
            agent dir; a file that cannot be used means an in-memory history).
        on_ready: called (in this thread) once the editor is on screen.
        input, output: prompt_toolkit's input and output (tests: a pipe and a dummy);
            None: the terminal.
    """

    def __init__(
        self,
        frontend: Any,
        *,
        cwd: Path,
        history_path: Path,
        on_ready: Any = None,
        input: Any = None,
        output: Any = None,
    ) -> None:
        self.frontend = frontend
        self.cwd = Path(cwd)
        self.on_ready = on_ready
        self.loop: Any = None
        self.commands: list[dict[str, str]] = []
        self.footer: dict[str, Any] = {"cwd": str(cwd)}
        self.running = False
        self._stream = _Accumulator()  # the assistant's text of the current message
        self._thinking = _Accumulator()
        self.show_thinking = True
        self.tools: dict[str, dict[str, Any]] = {}  # running tool calls by id
        self.decisions: dict[str, dict[str, Any]] = {}
        self.last_result: tuple[str, str] | None = None  # (title, full text), Ctrl-O
        self.dialogs: list[_Dialog] = []
        self.status: dict[str, str] = {}
        self.widgets: dict[str, list[str]] = {}
        self.hint = ""  # one transient line above the editor (Ctrl-C again …)
        self.hint_until = 0.0
        self._live_cache: tuple[int, int, int, float, str] = (-1, 0, 0, 0.0, "")
        self._scrollback: list[str] = []
        self._last_ctrl_c = 0.0
        self._exiting = False
        self._wake_pending = False
        self._live_parsed: tuple[str, Any] = ("", [])
        self._live_frame: tuple[int, Any, int] = (-1, [], 0)
        self._live_dirty = True  # an event changed what the live area shows
        self._live_width = 0
        self._live_stamp = 0.0
        self._redraw_scheduled = False
        self._last_event_redraw = 0.0
        history: Any
        try:
            history_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not history_path.exists():
                history_path.touch(mode=0o600)
            history = FileHistory(str(history_path))
        except OSError:
            history = InMemoryHistory()
        self.editor = Buffer(
            multiline=True,
            history=history,
            completer=_Completer(self),
            complete_while_typing=Condition(
                lambda: self.editor.text.startswith(("/", "@")) or " @" in self.editor.text
            ),
            enable_history_search=False,
        )
        self.dialog_input = Buffer(multiline=True)
        self._input, self._output = input, output
        self.app = self._build()

    @property
    def streaming(self) -> str:
        """The streaming answer's text so far."""
        return self._stream.value()

    @streaming.setter
    def streaming(self, value: str) -> None:
        self._stream.set(value)

    @property
    def thinking(self) -> str:
        """The streaming answer's thinking so far."""
        return self._thinking.value()

    @thinking.setter
    def thinking(self, value: str) -> None:
        self._thinking.set(value)

    # --- layout ---------------------------------------------------------------------------------

    def _width(self) -> int:
        try:
            return self.app.output.get_size().columns
        except Exception:
            return 80

    def _rows(self) -> int:
        try:
            return self.app.output.get_size().rows
        except Exception:
            return 24

    def _build(self) -> Application[Any]:
        has_dialog = Condition(lambda: bool(self.dialogs))
        dialog_typing = Condition(
            lambda: bool(self.dialogs) and self._dialog_wants_text(self.dialogs[0])
        )
        editor_window = Window(
            BufferControl(self.editor),
            height=Dimension(min=1, max=8),
            dont_extend_height=True,
            wrap_lines=True,
            get_line_prefix=lambda line, wrap: "> " if line == 0 and not wrap else "  ",
        )
        body = HSplit(
            [
                ConditionalContainer(
                    Window(
                        FormattedTextControl(self._live_text),
                        # Lines come wrapped to the width already (rich): an exact
                        # height spares prompt_toolkit measuring them on every redraw.
                        height=lambda: Dimension.exact(self._live_height()),
                        wrap_lines=False,
                    ),
                    filter=Condition(self._has_live),
                ),
                ConditionalContainer(
                    Window(
                        FormattedTextControl(self._dialog_text),
                        dont_extend_height=True,
                        wrap_lines=True,
                    ),
                    filter=has_dialog,
                ),
                ConditionalContainer(
                    dialog_window := Window(
                        BufferControl(self.dialog_input),
                        height=Dimension(min=1, max=6),
                        dont_extend_height=True,
                        wrap_lines=True,
                        get_line_prefix=lambda line, wrap: "» ",
                    ),
                    filter=dialog_typing,
                ),
                Window(height=1, char="─", style="class:rule"),
                editor_window,
                Window(
                    FormattedTextControl(self._status_text),
                    height=lambda: Dimension.exact(self._text_height(self._status_text())),
                    wrap_lines=True,
                ),
                Window(
                    FormattedTextControl(self._footer_text),
                    height=lambda: Dimension.exact(self._text_height(self._footer_text())),
                    wrap_lines=True,
                ),
            ]
        )
        self.editor_window, self.dialog_window = editor_window, dialog_window
        root = FloatContainer(
            body,
            floats=[Float(xcursor=True, ycursor=True, content=CompletionsMenu(max_height=8))],
        )
        style = Style.from_dict(
            {
                "rule": "#666666",
                "footer": "#888888",
                "dim": "#888888",
                "hint": "bold",
                "completion-menu.completion": "bg:#333333 #ffffff",
                "completion-menu.completion.current": "bg:#00aaaa #000000",
            }
        )
        color_depth = ColorDepth.DEPTH_1_BIT if render.no_color() else None
        app: Application[Any] = Application(
            layout=Layout(root, focused_element=editor_window),
            key_bindings=self._keys(),
            style=style,
            full_screen=False,
            mouse_support=False,
            color_depth=color_depth,
            # The size is polled: this thread cannot receive SIGWINCH.
            refresh_interval=0.5,
            erase_when_done=False,
            input=self._input,
            output=self._output,
        )
        # Esc is a key of its own here (abort): do not wait long for an Alt sequence.
        app.ttimeoutlen = 0.05
        app.timeoutlen = 0.4
        return app

    def _has_live(self) -> bool:
        return bool(
            self._stream.length
            or (self._thinking.length and self.show_thinking)
            or self.tools
            or (self.hint and time.monotonic() < self.hint_until)
        )

    def _dialog_wants_text(self, dialog: _Dialog) -> bool:
        return dialog.kind in ("input", "editor") or (
            dialog.kind == "approval" and dialog.stage == "message"
        )

    # --- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Run until `request_exit` (blocks; call from the screen's thread)."""
        import asyncio

        async def watch_size() -> None:
            # The stand-in for SIGWINCH, which only the main thread receives: a new
            # size erases the live part and draws it again (prompt_toolkit's own
            # resize handling), so a resize never leaves stale lines behind.
            size = self.app.output.get_size()
            while True:
                await asyncio.sleep(SIZE_POLL_S)
                current = self.app.output.get_size()
                if current != size:
                    size = current
                    self.app._on_resize()

        def pre_run() -> None:
            self.loop = asyncio.get_running_loop()
            self.app.create_background_task(watch_size())
            self.drain()
            if self.on_ready is not None:
                self.loop.call_soon(self.on_ready)

        import sys

        # A key waits for the interpreter lock while the session's thread streams:
        # a shorter switch interval bounds that wait (the default is 5 ms).
        previous = sys.getswitchinterval()
        sys.setswitchinterval(min(previous, 0.001))
        try:
            self.app.run(pre_run=pre_run, handle_sigint=False, set_exception_handler=False)
        finally:
            sys.setswitchinterval(previous)

    def wake(self) -> None:
        """From any thread: events are waiting."""
        loop = self.loop
        if loop is not None and not self._wake_pending:
            # One wake-up for a burst of events (a stream sends hundreds a second).
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(self.drain)

    def request_exit(self) -> None:
        """From any thread: end the screen."""
        loop = self.loop
        if loop is None:
            return

        def leave() -> None:
            self._flush()
            if self.app.is_running and not self._exiting:
                self._exiting = True
                with contextlib.suppress(Exception):
                    self.app.exit()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(leave)

    def drain(self) -> None:
        """Apply every waiting event, then print what finished, then redraw."""
        self._wake_pending = False
        events = self.frontend.events
        while True:
            try:
                event = events.get_nowait()
            except Exception:
                break
            try:
                self.handle(event)
            except Exception as exc:  # one bad event must not take the screen down
                self._print(render.styled(f"[display error: {exc!r}]", "red", self._width()))
        self._flush()
        # Redraws for events are paced (a keystroke still redraws at once): typing
        # stays responsive while the model streams.
        wait = self._last_event_redraw + EVENT_REDRAW_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self._last_event_redraw = time.monotonic()
            self.app.invalidate()
        elif not self._redraw_scheduled:
            self._redraw_scheduled = True

            def later() -> None:
                self._redraw_scheduled = False
                self._last_event_redraw = time.monotonic()
                self.app.invalidate()

            self.loop.call_later(wait, later)

    def _print(self, text: str) -> None:
        self._scrollback.append(text)

    def _flush(self) -> None:
        if not self._scrollback or not self.app.is_running:
            return
        text = "\n".join(self._scrollback)
        self._scrollback = []

        def write() -> None:
            out = self.app.output
            out.write_raw(text.replace("\n", "\r\n") + "\r\n")
            out.flush()

        run_in_terminal(write, render_cli_done=False, in_executor=False)

    def _say(self, text: str, style: str = "") -> None:
        self._print(render.styled(text, style, self._width()) if style else printable(text))

    # --- events ----------------------------------------------------------------------------------

    def handle(self, event: dict[str, Any]) -> None:
        """Apply one event of the session (or a ``tui_*`` event of the frontend)."""
        kind = event.get("type")
        self._live_dirty = True
        width = self._width()
        if kind == "tui_footer":
            self.footer.update({k: v for k, v in event.items() if k != "commands"})
            if "commands" in event:
                self.commands = event["commands"]
        elif kind == "tui_user":
            mark = "⧗ " if event.get("queued") else "› "
            self._print("")  # a blank line between exchanges, as pi does
            self._print(render.styled(mark + str(event.get("text", "")), "bold", width))
        elif kind == "tui_info":
            for line in event.get("lines") or []:
                self._print(render.styled(str(line), "", width))
        elif kind in ("tui_editor_text", "ui_set_editor_text"):
            # ui_set_editor_text: an extension's ctx.ui.set_editor_text (pi's setEditorText).
            self.editor.text = str(event.get("text", ""))
            self.editor.cursor_position = len(self.editor.text)  # type on at its end
        elif kind == "tui_bash_result":
            self._bash_result(event)
        elif kind == "tui_trust_request":
            self._open(_Dialog("trust", event))
        elif kind == "agent_start":
            self.running = True
        elif kind == "agent_end":
            self.running = False
            self._finish_message()
        elif kind == "agent_settled":
            if event.get("aborted"):
                # pi: tool calls that never got a result show "Operation aborted".
                for block in self.tools.values():
                    name = block["name"]
                    self._say(
                        f"✗ {name} Operation aborted  {render.args_summary(name, block['args'])}",
                        "red",
                    )
                self.tools.clear()
                self._say("⏹ aborted", "yellow")
        elif kind == "message_start":
            # Every message has one (pi 1.6.0); only an assistant's starts a stream.
            if (event.get("message") or {}).get("role") == "assistant":
                self.streaming, self.thinking = "", ""
        elif kind == "message_update":
            self._update(event)
        elif kind == "message_end":
            self._message_end(event)
        elif kind == "policy_decision":
            self.decisions[str(event.get("toolCallId"))] = event
        elif kind == "tool_execution_start":
            self._finish_message()
            call_id = str(event.get("toolCallId"))
            self.tools[call_id] = {
                "name": str(event.get("toolName")),
                "args": event.get("args"),
                "progress": "",
                "started": time.monotonic(),
            }
        elif kind == "tool_execution_update":
            block = self.tools.get(str(event.get("toolCallId")))
            if block is not None:
                text = render.result_text(event.get("partialResult"))
                # Progress is either the whole output so far or a note: keep the tail.
                block["progress"] = text[-4000:]
        elif kind == "tool_execution_end":
            self._tool_end(event)
        elif kind == "extension_ui_request":
            method = str(event.get("method"))
            if method in ("confirm", "select", "input", "editor"):
                self._open(_Dialog(method, event))
        elif kind == "extension_ui_cancelled":
            self._close(str(event.get("ui_id")), note="dialog closed (timeout or abort)")
        elif kind == "policy_approval_request":
            self._open(_Dialog("approval", event))
        elif kind == "policy_approval_resolved":
            by = event.get("by")
            if by != "user":
                self._close(str(event.get("id")), note=f"approval {event.get('decision')} ({by})")
        elif kind == "ui_notify":
            level = str(event.get("level") or "info")
            style = {"warning": "yellow", "error": "red"}.get(level, "cyan")
            self._say(f"{'⚠' if level != 'info' else 'ℹ'} {event.get('message', '')}", style)
        elif kind == "ui_set_status":
            key = str(event.get("key") or event.get("extension") or "")
            text = event.get("text")
            if text:
                self.status[key] = printable(str(text), newlines=False)
            else:
                self.status.pop(key, None)
        elif kind == "ui_set_widget":
            key = str(event.get("key") or event.get("extension") or "")
            lines = event.get("lines") or event.get("content")
            if isinstance(lines, str):
                lines = lines.splitlines()
            if lines:
                self.widgets[key] = [printable(str(x), newlines=False) for x in lines][:10]
            else:
                self.widgets.pop(key, None)
        elif kind == "ui_set_title":
            title = printable(str(event.get("title") or ""), newlines=False)
            with contextlib.suppress(Exception):
                self.app.output.set_title(title[:100])
        elif kind == "pisandbox_notice":
            self._say(f"ℹ {event.get('message', '')}", "dim")
        elif kind == "pisandbox_warning":
            self._say(f"⚠ {event.get('message', '')}", "yellow")
        elif kind == "pisandbox_error":
            self._say(f"✗ {event.get('error', '')}", "bold red")
        elif kind == "extension_error":
            self._say(
                f"⚠ extension error ({event.get('event')}): {event.get('error', '')}", "yellow"
            )
        elif kind == "trust_changed":
            saved = " (saved)" if event.get("saved") else ""
            self._say(f"ℹ project trust is now {event.get('decision')}{saved}", "dim")
        elif kind == "auto_retry_start":
            self._say(
                f"↻ retrying in {event.get('delayMs', 0) / 1000:.1f} s (attempt "
                f"{event.get('attempt')}/{event.get('maxAttempts')}): "
                f"{event.get('errorMessage', '')}",
                "yellow",
            )
        elif kind == "compaction_start":
            self._say(f"ℹ compacting the context ({event.get('reason')})", "dim")
        elif kind == "compaction_end":
            result = event.get("result")
            if isinstance(result, dict):
                self._say(
                    f"ℹ context compacted: ~{result.get('tokensBefore')} → "
                    f"~{result.get('estimatedTokensAfter')} tokens",
                    "dim",
                )
            elif event.get("aborted"):
                self._say("⚠ compaction cancelled", "yellow")
            else:
                self._say(f"⚠ compaction failed: {event.get('errorMessage')}", "yellow")
        elif kind in ("quarantine", "resource_diagnostic") and event.get("message"):
            self._say(f"⚠ {event.get('message')}", "yellow")

    def _update(self, event: dict[str, Any]) -> None:
        inner = event.get("assistantMessageEvent")
        if isinstance(inner, dict):
            if inner.get("type") == "thinking_delta":
                self._thinking.append(str(inner.get("delta", "")))
                return
            if inner.get("type") == "text_delta":
                self._stream.append(str(inner.get("delta", "")))
                return
            if "delta" not in event:
                return
        self._stream.append(str(event.get("delta", "")))

    def _message_end(self, event: dict[str, Any]) -> None:
        message = event.get("message") or {}
        if message.get("role") != "assistant":
            return
        text, thinking = [], []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                text.append(str(block.get("text", "")))
            elif block.get("type") == "thinking":
                thinking.append(str(block.get("thinking", "")))
        # The final message is what counts (a message_end hook may have redacted it).
        self.streaming = "\n".join(text)
        self.thinking = "\n".join(thinking) or self.thinking
        if message.get("stopReason") == "aborted":
            self._finish_message()
            self._say("✗ Operation aborted", "red")
            return
        if message.get("stopReason") == "error" and message.get("errorMessage"):
            self._finish_message()
            self._say(f"✗ {message.get('errorMessage')}", "bold red")
            return
        self._finish_message()

    def _finish_message(self) -> None:
        width = self._width()
        if self.thinking.strip():
            if self.show_thinking:
                self._print(render.styled(self.thinking.strip(), "dim italic", width))
            else:
                lines = len(self.thinking.strip().splitlines())
                self._print(
                    render.styled(f"∴ thinking ({lines} lines hidden; Ctrl-T shows)", "dim", width)
                )
        if self.streaming.strip():
            self._print(render.markdown_ansi(self.streaming.strip(), width))
        self.streaming, self.thinking = "", ""
        self._live_cache = (-1, 0, 0, 0.0, "")

    def _tool_end(self, event: dict[str, Any]) -> None:
        call_id = str(event.get("toolCallId"))
        block = self.tools.pop(call_id, None) or {
            "name": str(event.get("toolName")),
            "args": event.get("args"),
        }
        width = self._width()
        name = block["name"]
        text = render.result_text(event.get("result")).rstrip()
        decision = self.decisions.pop(call_id, None)
        details = (event.get("result") or {}).get("details")
        # A call stopped before it ran has no durationMs and says by whom in its
        # details (pi's stream has no `blocked` field; tool_pipeline.pi_result).
        blocked = (
            "durationMs" not in event
            and isinstance(details, dict)
            and details.get("blocked_by") is not None
        )
        if isinstance(details, dict) and details.get("blocked_by") == "abort":
            head, style = f"✗ {name} aborted", "red"
        elif blocked:
            head, style = f"✗ {name} BLOCKED", "bold red"
        elif event.get("isError"):
            head, style = f"✗ {name} error", "red"
        else:
            head, style = f"✓ {name}", "green"
        self._print(
            render.styled(f"{head}  {render.args_summary(name, block.get('args'))}", style, width)
        )
        if blocked and decision is not None:
            for line in render.decision_lines(decision):
                self._print(render.styled("  " + line, "red", width))
        lines = text.splitlines()
        shown = lines[: render.COLLAPSED_LINES]
        for line in shown:
            self._print(render.styled("  │ " + line, "dim", width))
        if len(lines) > len(shown):
            self._print(
                render.styled(
                    f"  … {len(lines) - len(shown)} more lines (Ctrl-O shows all)", "dim", width
                )
            )
        self.last_result = (f"{name} {render.args_summary(name, block.get('args'))}", text)

    def _bash_result(self, event: dict[str, Any]) -> None:
        width = self._width()
        code = event.get("exit_code")
        tail = " (not sent to the model)" if event.get("excluded") else ""
        mark = "✓" if code in (0, None) and not event.get("cancelled") else "✗"
        self._print(
            render.styled(
                f"{mark} $ {event.get('command')}  exit {code}{tail}",
                "green" if mark == "✓" else "red",
                width,
            )
        )
        text = printable(str(event.get("output", ""))).rstrip()
        lines = text.splitlines()
        for line in lines[: render.COLLAPSED_LINES]:
            self._print(render.styled("  │ " + line, "dim", width))
        if len(lines) > render.COLLAPSED_LINES:
            self._print(
                render.styled(
                    f"  … {len(lines) - render.COLLAPSED_LINES} more lines (Ctrl-O shows all)",
                    "dim",
                    width,
                )
            )
        self.last_result = (f"$ {event.get('command')}", text)

    # --- dialogs ----------------------------------------------------------------------------------

    def _open(self, dialog: _Dialog) -> None:
        event = dialog.event
        if dialog.kind == "select":
            dialog.options = [str(o) for o in event.get("options") or []]
        elif dialog.kind == "confirm":
            dialog.options = ["Yes", "No"]
        elif dialog.kind == "approval":
            dialog.options = ["Allow once", "Allow for this session", "Deny"]
        elif dialog.kind == "trust":
            allowed = event.get("allowed") or ["yes", "sandboxed", "no"]
            labels = {
                "yes": "Trust (load its extensions unsandboxed)",
                "sandboxed": "Trust sandboxed",
                "no": "Do not trust",
            }
            dialog.options = [labels[a] for a in allowed]
            dialog.choice = list(allowed)
        self.dialogs.append(dialog)
        if len(self.dialogs) == 1:
            self._focus_dialog()

    def _focus_dialog(self) -> None:
        if not self.dialogs:
            self._refocus()
            return
        dialog = self.dialogs[0]
        if dialog.kind in ("input", "editor"):
            self.dialog_input.text = str(dialog.event.get("prefill") or "")
            self.dialog_input.cursor_position = len(self.dialog_input.text)
        self._refocus()

    def _refocus(self) -> None:
        """The keyboard goes to a dialog's text field while one is open, else to
        the editor."""
        wanted = (
            self.dialog_window
            if self.dialogs and self._dialog_wants_text(self.dialogs[0])
            else self.editor_window
        )
        with contextlib.suppress(ValueError):
            self.app.layout.focus(wanted)

    def _close(self, dialog_id: str, note: str | None = None) -> None:
        for dialog in list(self.dialogs):
            if dialog.id == dialog_id and dialog.kind != "trust":
                self.dialogs.remove(dialog)
                if note:
                    self._say(f"ℹ {note}", "dim")
        self._focus_dialog()

    def _answer(self, value: Any, *extra: Any) -> None:
        dialog = self.dialogs.pop(0)
        self._live_dirty = True  # the live area gets the dialog's rows back
        self.dialog_input.text = ""
        if dialog.kind == "trust":
            dialog.event["reply"](value)
        elif dialog.kind == "approval":
            self.frontend.act("approval", dialog.id, value, *extra)
            shown = {"allow_once": "allowed once", "allow_session": "allowed for this session"}
            self._say(
                f"ℹ {dialog.event.get('toolName')}: {shown.get(value, 'denied')}"
                + (f" ({extra[0]})" if value == "allow_session" and extra and extra[0] else ""),
                "dim",
            )
        else:
            self.frontend.act("ui", dialog.id, value)
        self._focus_dialog()
        self.app.invalidate()

    def _dialog_key(self, key: str) -> bool:
        """A key while a dialog is open; True when the dialog took it."""
        dialog = self.dialogs[0]
        typing = self._dialog_wants_text(dialog)
        if key == "escape":
            if dialog.kind == "trust":
                self._answer(None)
            elif dialog.kind == "approval":
                if dialog.stage != "choose":
                    dialog.stage = "choose"
                    return True
                self._answer("deny", None, None)
            elif dialog.kind == "confirm":
                self._answer(False)
            else:
                self._answer(None)
            return True
        if typing:
            if key == "enter":
                text = self.dialog_input.text
                if dialog.kind == "approval":
                    self._answer("deny", None, text.strip() or None)
                else:
                    self._answer(text)
                return True
            return False
        if key in ("up", "down"):
            count = len(dialog.options) if dialog.stage != "scope" else len(self._scopes(dialog))
            if count:
                dialog.selected = (dialog.selected + (1 if key == "down" else -1)) % count
            return True
        if dialog.kind == "confirm" and key in ("y", "n"):
            self._answer(key == "y")
            return True
        if dialog.kind == "approval" and dialog.stage == "choose" and key in ("o", "s", "d"):
            dialog.selected = "osd".index(key)
            key = "enter"
        if dialog.kind == "trust" and dialog.stage == "save" and key in ("y", "n"):
            self._answer((dialog.choice, key == "y"))
            return True
        if key != "enter":
            return True  # a dialog holds the keyboard
        if dialog.kind == "confirm":
            self._answer(dialog.selected == 0)
        elif dialog.kind == "select":
            self._answer(dialog.options[dialog.selected] if dialog.options else None)
        elif dialog.kind == "trust":
            if dialog.stage == "choose":
                dialog.choice = dialog.choice[dialog.selected]
                dialog.stage = "save"
                dialog.selected = 0
            else:
                self._answer((dialog.choice, dialog.selected == 0))
        elif dialog.kind == "approval":
            if dialog.stage == "choose":
                if dialog.selected == 0:
                    self._answer("allow_once", None, None)
                elif dialog.selected == 1:
                    dialog.stage = "scope"
                    dialog.selected = 0
                else:
                    dialog.stage = "message"
                    self.dialog_input.text = ""
            elif dialog.stage == "scope":
                scopes = self._scopes(dialog)
                scope = scopes[dialog.selected]["id"] if scopes else None
                self._answer("allow_session", scope, None)
        return True

    @staticmethod
    def _scopes(dialog: _Dialog) -> list[dict[str, str]]:
        scopes = dialog.event.get("scopes") or []
        return [s for s in scopes if isinstance(s, dict) and "id" in s]

    def _dialog_text(self) -> Any:
        if not self.dialogs:
            return ""
        dialog = self.dialogs[0]
        event = dialog.event
        lines: list[tuple[str, str]] = []

        def add(text: str, style: str = "") -> None:
            lines.append((style, printable(text, newlines=False) + "\n"))

        def menu(options: list[str]) -> None:
            for i, option in enumerate(options):
                mark = "▶ " if i == dialog.selected else "  "
                add(f"{mark}{option}", "reverse" if i == dialog.selected else "")

        more = f" (+{len(self.dialogs) - 1} waiting)" if len(self.dialogs) > 1 else ""
        timeout = event.get("timeout")
        left = ""
        if isinstance(timeout, int | float) and timeout > 0:
            seconds = timeout / 1000  # pi rpc-extension-ui.md: milliseconds
            left = f" — closes in {max(0, int(seconds - (time.monotonic() - dialog.opened)))} s"
        if dialog.kind == "trust":
            add(f"Trust this project? {event.get('cwd')}", "bold")
            resources = event.get("resources") or []
            add(f"It has {len(resources)} resource(s) that run or steer code:")
            for path in resources[:5]:
                add(f"  {path}")
            if dialog.stage == "choose":
                menu(dialog.options)
                add("↑↓ Enter: choose   Esc: decide later (not trusted now)", "class:dim")
            else:
                add(f"Remember `{dialog.choice}` for this project?", "bold")
                menu(["Yes, save it in the trust store", "Only for this session"])
        elif dialog.kind == "approval":
            add(f"Approve {event.get('toolName')}?{more}{left}", "bold")
            add(render.args_summary(str(event.get("toolName")), event.get("args")))
            for line in render.decision_lines(event):
                add(line, "class:dim")
            if dialog.stage == "choose":
                menu(["[o] Allow once", "[s] Allow for this session…", "[d] Deny…"])
                add("↑↓ Enter or o/s/d   Esc: deny", "class:dim")
            elif dialog.stage == "scope":
                add("Allow for this session — what exactly:", "bold")
                scopes = self._scopes(dialog)
                menu([str(s.get("label") or s["id"]) for s in scopes] or ["(this call)"])
                add("Enter: allow   Esc: back", "class:dim")
            else:
                add("Deny — message to the model (optional), Enter to send, Esc: back", "bold")
        else:
            title = str(event.get("title") or event.get("method"))
            add(f"{title}{more}{left}", "bold")
            if event.get("message"):
                for line in str(event["message"]).splitlines()[:10]:
                    add(line)
            if dialog.kind in ("confirm", "select"):
                menu(dialog.options)
                hint = "y/n, " if dialog.kind == "confirm" else ""
                add(f"↑↓ Enter, {hint}Esc: cancel", "class:dim")
            else:
                if event.get("placeholder") and not self.dialog_input.text:
                    add(str(event["placeholder"]), "class:dim")
                add("Enter: submit   Ctrl-J: new line   Esc: cancel", "class:dim")
        return FormattedText(lines)

    # --- live area, status, footer ------------------------------------------------------------------

    def _text_height(self, text: Any) -> int:
        """Rows ``text`` (formatted text) takes when wrapped to the width."""
        if not text:
            return 0
        width = max(1, self._width())
        plain = "".join(fragment[1] for fragment in text)
        return sum(max(1, -(-len(line) // width)) for line in plain.split("\n"))

    def _live_height(self) -> int:
        self._live_text()
        return self._live_frame[2]

    def _live_text(self) -> Any:
        # Asked for twice a redraw (height, then content): computed once a redraw.
        key = self.app.render_counter
        if self._live_frame[0] != key and not self._live_current():
            shown = self._live_compute()
            if shown != self._live_parsed[0]:
                # Parsing ANSI costs milliseconds: a keystroke's redraw reuses it.
                self._live_parsed = (shown, _merged(to_formatted_text(ANSI(shown))))
            self._live_frame = (key, self._live_parsed[1], shown.count("\n") + 1 if shown else 0)
            self._live_dirty = False
            self._live_width = self._width()
            self._live_stamp = time.monotonic()
        return self._live_frame[1]

    def _live_current(self) -> bool:
        """Whether the last live frame still holds: no event since, same width, no
        running call's seconds counter or hint due to change (a keystroke's redraw
        then costs nothing here)."""
        now = time.monotonic()
        if self._live_dirty or self._live_width != self._width():
            return False
        if self.tools and now - self._live_stamp >= 1.0:
            return False
        if self.hint and self._live_stamp < self.hint_until <= now + 0.01:
            return False
        self._live_frame = (self.app.render_counter, *self._live_frame[1:])
        return True

    def _live_compute(self) -> str:
        """The live area as ANSI text, at most the rows left for it."""
        width = self._width()
        budget = max(3, self._rows() - 8 - (6 if self.dialogs else 0))
        parts: list[str] = []
        if self.thinking and self.show_thinking:
            tail = self.thinking.strip().splitlines()[-3:]
            parts.append(render.styled("\n".join(tail), "dim italic", width))
        if self._stream.length:
            version, length, w, stamp, rendered = self._live_cache
            now = time.monotonic()
            if version != self._stream.version or w != width:
                if (
                    now - stamp >= LIVE_RENDER_INTERVAL_S
                    or w != width
                    or not self._stream.extends(version)
                ):
                    rendered = render.markdown_ansi(_tail(self.streaming), width)
                    self._live_cache = (
                        self._stream.version,
                        self._stream.length,
                        width,
                        now,
                        rendered,
                    )
                else:
                    # Between renderings: the cached Markdown plus the raw new text.
                    rendered = rendered + printable(self._stream.since(length))
            parts.append(rendered)
        for block in self.tools.values():
            elapsed = time.monotonic() - block["started"]
            parts.append(
                render.styled(
                    f"⏵ {block['name']}  {render.args_summary(block['name'], block['args'])}"
                    f"  ({elapsed:.0f} s)",
                    "bold cyan",
                    width,
                )
            )
            progress = [line for line in block["progress"].splitlines() if line.strip()][-4:]
            for line in progress:
                parts.append(render.styled("  │ " + line, "dim", width))
        if self.hint and time.monotonic() < self.hint_until:
            parts.append(render.styled(self.hint, "bold", width))
        text = "\n".join(p for p in parts if p)
        lines = text.splitlines()
        if len(lines) > budget:
            lines = lines[-budget:]
        return "\n".join(lines)

    def _status_text(self) -> Any:
        lines: list[str] = []
        for widget in self.widgets.values():
            lines.extend(widget)
        if self.status:
            lines.append("  ".join(self.status.values()))
        if self.running:
            spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"[int(time.monotonic() * 8) % 10]
            lines.append(f"{spinner} working… (Esc to abort)")
        return FormattedText([("class:dim", "\n".join(lines))]) if lines else ""

    def _footer_text(self) -> Any:
        footer = self.footer
        cwd = str(footer.get("cwd") or "")
        home = os.path.expanduser("~")
        if cwd.startswith(home + os.sep):
            cwd = "~" + cwd[len(home) :]
        name = footer.get("session_name")
        first = printable(cwd + (f" • {name}" if name else ""), newlines=False)
        bits = []
        if footer.get("model"):
            level = footer.get("thinking")
            bits.append(f"{footer['model']}" + (f" ({level})" if level and level != "off" else ""))
        tokens = footer.get("tokens")
        if isinstance(tokens, dict):
            bits.append(
                f"↑{tokens.get('input', 0):,} ↓{tokens.get('output', 0):,} "
                f"${float(footer.get('cost') or 0):.3f}"
            )
        if "sandboxed" in footer:
            bits.append("sandboxed: bwrap+seccomp" if footer["sandboxed"] else "NOT sandboxed")
        if footer.get("trust"):
            bits.append(f"trust: {footer['trust']}")
        width = self._width()
        if len(first) > width:
            first = "…" + first[-(width - 1) :]
        # Break between the parts, not inside one (a 40-column terminal).
        lines: list[str] = []
        for bit in (printable(b, newlines=False) for b in bits):
            if lines and len(lines[-1]) + 3 + len(bit) <= width:
                lines[-1] += " • " + bit
            else:
                lines.append(bit)
        return FormattedText([("class:footer", "\n".join([first, *lines]))])

    # --- keys ---------------------------------------------------------------------------------------

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        in_dialog = Condition(lambda: bool(self.dialogs))
        no_dialog = ~in_dialog

        typing = Condition(lambda: bool(self.dialogs) and self._dialog_wants_text(self.dialogs[0]))
        choosing = in_dialog & ~typing

        def dialog_key(name: str) -> Any:
            def handler(event: Any) -> None:
                self._dialog_key(name)
                self._refocus()

            return handler

        for name in ("escape", "enter"):
            keys.add(name, filter=in_dialog)(dialog_key(name))
        for name in ("up", "down", *"ynosd"):
            keys.add(name, filter=choosing)(dialog_key(name))

        @keys.add("<any>", filter=choosing)
        def _(event: Any) -> None:
            pass  # a dialog holds the keyboard: other keys do not reach the editor

        @keys.add("c-j", filter=typing)
        def _(event: Any) -> None:
            self.dialog_input.insert_text("\n")

        @keys.add("enter", filter=no_dialog)
        def _(event: Any) -> None:
            state = self.editor.complete_state
            if state is not None and state.current_completion is not None:
                self.editor.apply_completion(state.current_completion)
                return
            self._submit(follow_up=False)

        @keys.add("escape", "enter", filter=no_dialog)
        def _(event: Any) -> None:
            self._submit(follow_up=True)

        @keys.add("tab", filter=no_dialog)
        def _(event: Any) -> None:
            state = self.editor.complete_state
            if state is not None and len(state.completions) > 1:
                self.editor.complete_next()
                return
            # Computed here, not by prompt_toolkit's background completion: a Tab
            # pressed while that runs would be dropped (it runs one at a time).
            document = self.editor.document
            completions = list(
                self.editor.completer.get_completions(
                    document, CompleteEvent(completion_requested=True)
                )
            )
            if len(completions) == 1:
                self.editor.apply_completion(completions[0])
            elif completions:
                common = get_common_complete_suffix(document, completions)
                if common:
                    self.editor.insert_text(common)
                self.editor.start_completion(select_first=False)

        @keys.add("s-tab", filter=no_dialog)
        def _(event: Any) -> None:
            if self.editor.complete_state is not None:
                self.editor.complete_previous()

        @keys.add("c-j", filter=no_dialog)
        def _(event: Any) -> None:
            self.editor.insert_text("\n")

        @keys.add("escape", filter=no_dialog)
        def _(event: Any) -> None:
            if self.editor.complete_state is not None:
                self.editor.cancel_completion()
                return
            if self.running:
                self.frontend.act("abort")
                self._hint("aborting…")

        @keys.add("c-c")
        def _(event: Any) -> None:
            now = time.monotonic()
            if now - self._last_ctrl_c < DOUBLE_CTRL_C_S:
                self._quit()
                return
            self._last_ctrl_c = now
            self.editor.reset()
            self._hint("Press Ctrl-C again to exit")

        @keys.add("c-d", filter=no_dialog)
        def _(event: Any) -> None:
            if not self.editor.text:
                self._quit()
            else:
                self.editor.delete()

        @keys.add("c-o", filter=no_dialog)
        def _(event: Any) -> None:
            if self.last_result is None:
                self._hint("no tool result yet")
                return
            title, text = self.last_result
            width = self._width()
            self._print(render.styled(f"── {title} (in full)", "bold", width))
            for line in text.splitlines():
                self._print(render.styled("  │ " + line, "dim", width))
            self._flush()

        @keys.add("c-t", filter=no_dialog)
        def _(event: Any) -> None:
            self.show_thinking = not self.show_thinking
            self._hint(f"thinking {'shown' if self.show_thinking else 'hidden'}")

        return keys

    def _hint(self, text: str) -> None:
        self._live_dirty = True
        self.hint = text
        self.hint_until = time.monotonic() + DOUBLE_CTRL_C_S

    def _quit(self) -> None:
        self._say("bye", "dim")
        self.frontend.act("quit")

    def _submit(self, *, follow_up: bool) -> None:
        text = self.editor.text
        if not text.strip():
            return
        self.editor.append_to_history()
        self.editor.reset()
        self.frontend.act("input", text, follow_up)
