"""Runs one codemode script inside a ``codemode`` worker (issue 19, docs/mcp.md "Codemode").

The supervisor starts a fresh sandboxed worker for every script (no workspace, no
network, the policy's rlimits and cgroup limits, a wall-clock deadline it enforces by
killing the worker) and sends one ``codemode/run`` request. The script is Python,
executed with these globals:

- ``tools``: ``tools.<name>(**args)`` (or ``tools.<name>({...})``) calls a tool by name
  and returns its text; a failed, blocked or unknown call raises `ToolError`. MCP names
  are reached by their identifier form (``mcp__dev-radius__x`` → ``tools.mcp__dev_radius__x``).
- ``call_tool(name, args)``: the whole result ``{"content", "details", "is_error"}``;
  never raises for a tool's failure.
- ``search_tools(query, limit=8)``: ``[{"name", "description"}]`` ranked by BM25.
- ``describe_tool(name)``: ``{"name", "description", "parameters"}`` or None.
- ``ToolError``: the exception class.

Every call is a ``host/call`` to the supervisor, which runs it through the same tool
pipeline (validation, policy gate, ``tool_call``/``tool_result`` hooks) as a model's
call; nothing here decides what a script may do. Only what the script prints returns:
kept to ``max_output_chars`` (its start and end around a marker), and a script that
prints more than ``hard_output_chars`` in all is stopped (`OutputLimitExceeded`).

Standard library only, imported lazily by the runtime (tests/unit/test_worker_imports.py).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

__all__ = ["OutputLimitExceeded", "ToolError", "run_script"]

_SCRIPT_NAME = "<codemode>"


class ToolError(Exception):
    """A tool call from a script failed: blocked by policy or a hook, unknown tool,
    invalid arguments, or the tool's own error. ``result`` is the whole result."""

    def __init__(self, name: str, text: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(f"{name}: {text}")
        self.name = name
        self.text = text
        self.result = result or {}


class OutputLimitExceeded(BaseException):
    """The script printed more than the hard limit. A ``BaseException``, so that an
    ``except Exception`` in the script does not swallow it and keep printing."""


class _Output:
    """A text sink that keeps the first and last ``keep // 2`` characters and counts
    the rest; past ``hard`` characters in all, every write raises."""

    def __init__(self, keep: int, hard: int) -> None:
        self.keep_head = max(keep // 2, 0)
        self.keep_tail = max(keep - self.keep_head, 0)
        self.hard = hard
        self.head: list[str] = []
        self.head_len = 0
        self.tail: deque[str] = deque()
        self.tail_len = 0
        self.total = 0
        self.lock = threading.Lock()

    def write(self, text: Any) -> int:
        text = str(text)
        with self.lock:
            self.total += len(text)
            if self.total > self.hard:
                raise OutputLimitExceeded(
                    f"the script printed more than {self.hard} characters; write large "
                    "results to a file with a tool instead"
                )
            room = self.keep_head - self.head_len
            if room > 0:
                self.head.append(text[:room])
                self.head_len += min(room, len(text))
                text = text[room:]
            if text:
                self.tail.append(text)
                self.tail_len += len(text)
                while self.tail and self.tail_len - len(self.tail[0]) >= self.keep_tail:
                    self.tail_len -= len(self.tail.popleft())
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> tuple[str, bool]:
        """The kept output and whether anything was cut out of its middle."""
        head = "".join(self.head)
        tail = "".join(self.tail)
        if len(tail) > self.keep_tail:
            tail = tail[len(tail) - self.keep_tail :]
        dropped = self.total - len(head) - len(tail)
        if dropped <= 0:
            return head + tail, False
        return f"{head}\n…{dropped} chars truncated…\n{tail}", True


def _text_of(result: dict[str, Any]) -> str:
    parts = [
        str(p.get("text", ""))
        for p in result.get("content") or []
        if isinstance(p, dict) and p.get("type") == "text"
    ]
    return "\n".join(parts)


class _Tools:
    """``tools.<name>(...)``: one method per callable tool, resolved by the supervisor."""

    def __init__(self, call: Any, names: Any) -> None:
        self._call = call
        self._names = names

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
            if arguments is not None and not isinstance(arguments, dict):
                raise TypeError(f"tools.{name}: pass arguments as keywords or one dict")
            result = self._call(name, {**(arguments or {}), **kwargs})
            if result.get("is_error"):
                raise ToolError(name, _text_of(result), result)
            return _text_of(result)

        method.__name__ = name
        return method

    def __dir__(self) -> list[str]:
        return list(self._names())


def run_script(host: Any, params: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
    """Run ``params["script"]``; returns ``{"output", "truncated", "error",
    "output_chars", "calls", "wall_ms"}`` (``error`` None when it completed).

    Args:
        host: the runtime's ``_Host`` (``call(op, args)`` sends ``host/call``).
        params: ``script`` (str), ``max_output_chars`` and ``hard_output_chars``
            (ints, characters).
        cancel: set when the supervisor cancels the request (it kills the worker
            shortly after; a running script is not interrupted here).
    """
    script = str(params.get("script") or "")
    keep = int(params.get("max_output_chars") or 40_000)
    hard = int(params.get("hard_output_chars") or 16 * 1024 * 1024)
    output = _Output(keep, hard)
    calls = 0
    cpu = params.get("cpu_seconds")
    if isinstance(cpu, int) and not isinstance(cpu, bool) and cpu > 0:
        # The policy's CPU time for one command: the script is this worker's one
        # command (SIGXCPU ends it; the supervisor reports the stop).
        import resource

        ceiling = int(time.process_time()) + 1 + cpu
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (ceiling, ceiling))
        except (ValueError, OSError):
            pass  # a lower limit is already in force

    def call_tool(name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        nonlocal calls
        if not isinstance(name, str):
            raise TypeError("call_tool: name must be a string")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError("call_tool: arguments must be a dict")
        calls += 1
        result = host.call("codemode.call_tool", {"name": name, "arguments": arguments or {}})
        return result if isinstance(result, dict) else {"content": [], "is_error": True}

    def search_tools(query: str, limit: int = 8) -> list[dict[str, Any]]:
        return list(host.call("codemode.search_tools", {"query": str(query), "limit": int(limit)}))

    def describe_tool(name: str) -> dict[str, Any] | None:
        return host.call("codemode.describe_tool", {"name": str(name)})

    def tool_names() -> list[str]:
        return list(host.call("codemode.list_tools", {}))

    def script_print(*values: Any, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
        output.write((" " if sep is None else sep).join(str(v) for v in values))
        output.write("\n" if end is None else end)

    namespace: dict[str, Any] = {
        "__name__": "__codemode__",
        "__builtins__": __builtins__,
        "tools": _Tools(call_tool, tool_names),
        "call_tool": call_tool,
        "search_tools": search_tools,
        "describe_tool": describe_tool,
        "ToolError": ToolError,
        "print": script_print,
    }
    started = time.monotonic()
    error: str | None = None
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = output  # type: ignore[assignment]
    try:
        code = compile(script, _SCRIPT_NAME, "exec")
        exec(code, namespace)
    except OutputLimitExceeded as exc:
        error = f"OutputLimitExceeded: {exc}"
    except SyntaxError as exc:
        error = f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except BaseException as exc:  # SystemExit too: the script ends, the worker answers
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            error = None
        else:
            error = _script_traceback(exc)
    finally:
        sys.stdout, sys.stderr = saved
    text, truncated = output.text()
    return {
        "output": text,
        "truncated": truncated,
        "error": error,
        "output_chars": output.total,
        "calls": calls,
        "wall_ms": int((time.monotonic() - started) * 1000),
    }


def _script_traceback(exc: BaseException) -> str:
    """The exception with only the script's own frames (the runner's are noise)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == _SCRIPT_NAME]
    lines = [f"  line {f.lineno}, in {f.name}" for f in frames[-5:]]
    head = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join([*lines, head]) if lines else head
