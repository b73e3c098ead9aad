"""``codemode``: run a model-written Python script that calls other tools (issue 19;
docs/mcp.md "Codemode"; pi docs codemode.md for the JavaScript original).

Each call gets a fresh sandboxed worker (`WorkerPool.open_codemode_worker`: no
workspace, no network, the policy's limits) that runs the script
(`pi_sandbox.worker.codemode_runner`). Every tool call the script makes comes back
here as a ``host/call`` and runs through `ToolPipeline.run_nested`: validation, the
policy gate, ``tool_call`` and ``tool_result`` hooks, audited and reported with the
codemode call as parent. A script can therefore never do what the model could not.
Only what the script prints returns to the model, bounded.
"""

from __future__ import annotations

import json
import time
from typing import Any

import trio

from pi_sandbox.errors import HostCallError, PiSandboxError, WorkerError, WorkerTimeoutError
from pi_sandbox.protocol import methods
from pi_sandbox.protocol.messages import ToolDefinitionWire
from pi_sandbox.supervisor.agent.tool_exposure import ToolExposure, script_identifier
from pi_sandbox.supervisor.agent.tool_pipeline import HostTool, ToolPipeline
from pi_sandbox.supervisor.providers.base import ToolCall

__all__ = [
    "CODEMODE",
    "DEFAULT_MAX_OUTPUT_CHARS",
    "HARD_OUTPUT_CHARS",
    "MAX_NESTED_CALLS",
    "CodemodeTool",
    "parse_options",
]

CODEMODE = "codemode"
DEFAULT_MAX_OUTPUT_CHARS = 40_000
"""Output kept for the model (characters; pi's default 10,000 tokens ≈ 40,000)."""
HARD_OUTPUT_CHARS = 16 * 1024 * 1024
"""A script printing more than this in all is stopped (pi: 16,777,216 characters)."""
MAX_NESTED_CALLS = 1_000
"""Tool calls one script may make."""
MAX_WORKERS = 2
"""Scripts running at once per session; more wait in arrival order (pi: two workers)."""
WORKER_WAIT_S = 60.0
"""How long a script waits for a free worker before it fails without running (pi: 60 s)."""
_OPTIONS_PREFIX = "# @options:"

_DESCRIPTION = """Run a Python script that calls your other tools; only what it prints comes back to you.

The input `script` is Python source (no markdown fence). It runs in a fresh sandbox with no files, no network and no access to the workspace except through tools. Globals:
- `tools.<name>(**args)`: call a tool; returns its text output. A failed, unknown or blocked call (policy, hooks) raises `ToolError` (`.text`, `.result`); catch it to go on. Names that are not identifiers use `_` (`mcp__my-server__x` -> `tools.mcp__my_server__x`).
- `call_tool(name, args)`: the whole result dict {content, details, is_error}; never raises for a tool's failure.
- `search_tools(query, limit=8)`: find callable tools, including ones not declared to you -> [{name, description}].
- `describe_tool(name)`: {name, description, parameters} or None.
- `print(...)`: the only output. Long output keeps its start and end.
Use it to run several calls, loop, and filter large results before you see them. An optional first line `# @options: {"timeout_s": 60, "max_output_chars": 20000}` lowers the limits. Scripts cannot start other codemode scripts."""

_DEFINITION = ToolDefinitionWire(
    name=CODEMODE,
    label="Codemode",
    description=_DESCRIPTION,
    parameters={
        "type": "object",
        "properties": {
            "script": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200_000,
                "description": "Python source to run",
            }
        },
        "required": ["script"],
        "additionalProperties": False,
    },
    prompt_snippet="Run a Python script that calls the other tools; only its printed output returns",
    prompt_guidelines=[
        "Use codemode to run many tool calls or to filter large tool output before it "
        "reaches you; print only what you need.",
    ],
)


def parse_options(script: str) -> dict[str, Any]:
    """The ``# @options: {...}`` first line of ``script`` (``timeout_s``,
    ``max_output_chars``: positive numbers), or ``{}``.

    Raises:
        ValueError: the first line is an options line that is not a JSON object of
            known, positive options, or an options line appears on a later line.
    """
    lines = script.splitlines()
    for number, line in enumerate(lines[1:], start=2):
        if line.strip().startswith(_OPTIONS_PREFIX):
            raise ValueError(f"the options line must be the first line (found on line {number})")
    if not lines or not lines[0].strip().startswith(_OPTIONS_PREFIX):
        return {}
    raw = lines[0].strip()[len(_OPTIONS_PREFIX) :]
    try:
        options = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"the options line is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ValueError("the options line must hold a JSON object")
    for key, value in options.items():
        if key not in ("timeout_s", "max_output_chars"):
            raise ValueError(f"unknown option {key!r} (timeout_s, max_output_chars)")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"option {key} must be a positive number, got {value!r}")
    return options


class CodemodeTool:
    """The ``codemode`` host tool.

    Args:
        pipeline: runs every nested call (`ToolPipeline.run_nested`).
        exposure: the registry (what scripts may call; ``search_tools``).
        callable: whether a script may call a tool (exposure, minus the host tools).
    """

    def __init__(self, pipeline: ToolPipeline, exposure: ToolExposure, callable: Any) -> None:
        self.pipeline = pipeline
        self.exposure = exposure
        self.callable = callable
        # trio's semaphore wakes waiters in arrival order.
        self._slots = trio.Semaphore(MAX_WORKERS)

    def host_tool(self) -> HostTool:
        """The pipeline's view of this tool."""
        return HostTool(_DEFINITION, self.execute)

    def _resolve(self, name: str) -> str:
        """A script's tool name (exact, or its identifier form) → the tool's name."""
        if self.exposure.get(name) is not None:
            return name
        for tool in self.exposure.all():
            if script_identifier(tool.definition.name) == name and self.callable(
                tool.definition.name
            ):
                return tool.definition.name
        return name

    async def execute(
        self, call: ToolCall, arguments: dict[str, Any], session: Any
    ) -> dict[str, Any]:
        """Run the script; the result text starts with ``Script completed`` or
        ``Script failed``, the wall time and the printed output (and the error).
        ``details``: ``calls``, ``output_chars``, ``truncated``, ``error``."""
        script = str(arguments.get("script", ""))
        try:
            options = parse_options(script)
        except ValueError as exc:
            return _failed(f"codemode: {exc}")
        pool = self.pipeline.pool
        timeout = min(
            float(options.get("timeout_s", self.pipeline.tool_timeout_s)),
            self.pipeline.tool_timeout_s,
        )
        keep = min(
            int(options.get("max_output_chars", DEFAULT_MAX_OUTPUT_CHARS)),
            DEFAULT_MAX_OUTPUT_CHARS * 4,
        )
        limits = pool.config.settings.limits
        calls = 0
        scopes: set[trio.CancelScope] = set()

        async def host_call(worker: Any, request: Any) -> Any:
            nonlocal calls
            op = request.params.get("op")
            args = request.params.get("args") or {}
            if not isinstance(args, dict):
                raise HostCallError(
                    "codemode: arguments must be an object", code=methods.ERROR_INVALID_PARAMS
                )
            if op == "codemode.call_tool":
                name, tool_args = args.get("name"), args.get("arguments")
                if not isinstance(name, str) or not isinstance(tool_args, dict):
                    raise HostCallError(
                        "codemode.call_tool: name and arguments", code=methods.ERROR_INVALID_PARAMS
                    )
                calls += 1
                if calls > MAX_NESTED_CALLS:
                    return _failed(
                        f"codemode: a script may make at most {MAX_NESTED_CALLS} tool calls"
                    )
                nested = ToolCall(
                    id=f"{call.id}/{calls}", name=self._resolve(name), arguments=tool_args
                )
                with trio.CancelScope() as scope:
                    scopes.add(scope)
                    try:
                        outcome = await self.pipeline.run_nested(nested, call.id, session)
                    finally:
                        scopes.discard(scope)
                if scope.cancelled_caught:
                    return _failed("cancelled: the script ended")
                return outcome.result
            if op == "codemode.search_tools":
                limit = args.get("limit", 8)
                limit = limit if isinstance(limit, int) and 0 < limit <= 50 else 8
                found = self.exposure.search(
                    str(args.get("query", ""))[:1000], limit, candidates=self.callable
                )
                return [
                    {"name": t.definition.name, "description": t.definition.description}
                    for t in found
                ]
            if op == "codemode.describe_tool":
                name = self._resolve(str(args.get("name", "")))
                return self.exposure.describe(name) if self.callable(name) else None
            if op == "codemode.list_tools":
                return [
                    t.definition.name
                    for t in self.exposure.all()
                    if self.callable(t.definition.name)
                ]
            raise HostCallError(
                f"codemode: unknown action {op!r}", code=methods.ERROR_METHOD_NOT_FOUND
            )

        started = time.monotonic()
        raw: Any = None
        failure: str | None = None
        with trio.move_on_after(min(WORKER_WAIT_S, timeout)) as waited:
            await self._slots.acquire()
        if waited.cancelled_caught:
            return _failed(
                f"codemode: no free worker within {min(WORKER_WAIT_S, timeout):g} s (at most "
                f"{MAX_WORKERS} scripts run at once); the script did not run"
            )
        # The deadline covers the wait for a worker too (pi docs codemode.md).
        left = max(timeout - (time.monotonic() - started), 0.1)
        try:
            async with pool.open_codemode_worker(f"codemode {call.id}") as worker:
                worker.host_call = host_call
                params = {
                    "script": script,
                    "max_output_chars": keep,
                    "hard_output_chars": HARD_OUTPUT_CHARS,
                    "cpu_seconds": limits.cpu_seconds,
                }
                try:
                    raw = await worker.request(methods.CODEMODE_RUN, params, timeout_s=left)
                except WorkerTimeoutError:
                    failure = f"the script ran longer than {timeout:g} s and was stopped"
                except WorkerError as exc:
                    failure = f"the script's sandbox stopped: {_why(worker, exc)}"
                finally:
                    for scope in list(scopes):
                        scope.cancel()  # pi: calls still running when the script ends
        except PiSandboxError as exc:
            return _failed(f"codemode: {exc}")
        finally:
            self._slots.release()
        wall = time.monotonic() - started
        if failure is None and not isinstance(raw, dict):
            failure = "the script's worker sent no result"
        result = raw if isinstance(raw, dict) else {}
        output = str(result.get("output") or "")
        error = failure or result.get("error")
        pool.audit(
            {
                "event": "codemode_script",
                "tool_call_id": call.id,
                "calls": calls,
                "output_chars": result.get("output_chars"),
                "error": str(error)[:2000] if error else None,
                "wall_ms": int(wall * 1000),
            }
        )
        head = f"Script {'failed' if error else 'completed'} in {wall:.2f} s"
        if result.get("truncated"):
            head += f" (output truncated to its start and end; {result.get('output_chars')} chars in all)"
        text = head + "\n" + output
        if error:
            text = text.rstrip("\n") + f"\nScript error: {error}"
        return {
            "content": [{"type": "text", "text": text}],
            "details": {
                "calls": calls,
                "output_chars": result.get("output_chars"),
                "truncated": bool(result.get("truncated")),
                "error": error,
            },
            "is_error": bool(error),
        }


def _why(worker: Any, exc: Exception) -> str:
    events = worker.limit_events()
    if events.get("oom_kill"):
        return "its memory limit was reached"
    if events.get("pids"):
        return "its process limit was reached"
    if worker.returncode is not None and worker.returncode < 0:
        return f"killed by signal {-worker.returncode}"
    return str(exc)


def _failed(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": {}, "is_error": True}
