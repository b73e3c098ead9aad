"""A model that replays a YAML script of assistant turns, for offline runs, demos and tests.

Script format (the public contract, DESIGN §9)::

    # top level: a list; each item is one assistant turn, consumed in order
    - text: "I'll look at the README first."
      tool_calls:
        - name: read
          arguments: {path: README.md}
          id: call_readme          # optional; default "call_<turn>_<index>"
    - text: "Done."

Each turn is a mapping with optional ``text`` (string) and optional ``tool_calls``
(list of mappings with ``name`` (string), ``arguments`` (mapping) and optional ``id``
(string)); a turn needs at least one of the two. The whole file is validated when the
provider is built, so a typo fails before the first request instead of mid-run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import trio
import yaml

from pi_sandbox.bounded_yaml import index_yaml
from pi_sandbox.errors import ProviderError

from .base import (
    AssistantEventCallback,
    AssistantTurn,
    TextDeltaCallback,
    ToolCall,
    ToolDefinition,
)

__all__ = ["SCRIPT_MAX_DEPTH", "ScriptedProvider", "load_script"]

SCRIPT_MAX_DEPTH = 256
"""Deepest YAML nesting in a script. Deeper than policy files' 64 (and than the
worker protocol's 100): a script stands for a model, and a model may send tool
arguments nested too deeply, which the tool pipeline must refuse (tests rely on
it). The node and alias bounds are the policy files' (`pi_sandbox.bounded_yaml`)."""


class _ScriptToolCall(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    arguments: dict[str, Any]
    id: str | None = None

    @pydantic.field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @pydantic.field_validator("arguments")
    @classmethod
    def _arguments_are_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Arguments end up in session files and worker requests, both JSON; YAML can
        # produce dates, sets and binary that would only fail much later.
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be JSON-compatible ({exc})") from None
        return value


class _ScriptTurn(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    text: str | None = None
    tool_calls: list[_ScriptToolCall] | None = None

    @pydantic.model_validator(mode="after")
    def _not_empty(self) -> _ScriptTurn:
        if self.text is None and not self.tool_calls:
            raise ValueError("a turn needs `text` or `tool_calls`")
        return self


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _error_text(error: Any) -> str:
    # Our own validators' messages read better without pydantic's "Value error, " prefix.
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    return error["msg"]


def _parse_yaml(path: Path, text: str) -> tuple[Any, list[int]]:
    """Parse ``text`` and also return the 1-based line of each top-level list item."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            # The same bounds as policy files (issue 13 §4): no alias bombs, no
            # self-containing aliases, no nesting past MAX_DEPTH, checked before
            # anything is constructed.
            over = index_yaml(node, max_depth=SCRIPT_MAX_DEPTH).over_bounds
            if over:
                line, key, problem = over[0]
                at = f" ({_format_loc(key)})" if key else ""
                raise ProviderError(f"script {path}: line {line}{at}: {problem}")
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProviderError(f"script {path}:{where}: invalid YAML: {problem}") from exc
    except RecursionError as exc:
        raise ProviderError(f"script {path}: nested too deeply to read") from exc
    finally:
        loader.dispose()
    lines = (
        [item.start_mark.line + 1 for item in node.value]
        if isinstance(node, yaml.SequenceNode)
        else []
    )
    return data, lines


def load_script(path: Path) -> list[AssistantTurn]:
    """Read and validate a script file.

    Args:
        path: the YAML script (format in the module docstring).

    Returns:
        One ``AssistantTurn`` per script item, in order, with ``provider`` and
        ``model`` set to ``"scripted"``, missing tool-call ids filled in as
        ``call_<turn>_<index>`` (turn 1-based, index 0-based within the turn) and
        ``stop_reason`` ``"toolUse"`` when the turn has tool calls, else ``"stop"``.

    Raises:
        ProviderError: the file cannot be read, is not valid YAML (names the line),
            goes past the YAML bounds of `pi_sandbox.bounded_yaml` (an alias bomb,
            a recursive alias, nesting deeper than `SCRIPT_MAX_DEPTH`: names the line),
            its top level is not a list, or a turn is malformed (names the file, the
            1-based turn and its line, and the bad field), or two tool calls share an id.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProviderError(f"cannot read script {path}: {exc}") from exc

    data, lines = _parse_yaml(path, text)
    if not isinstance(data, list):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ProviderError(f"script {path}: the top level must be a list of turns, got {got}")

    turns: list[AssistantTurn] = []
    seen_ids: dict[str, int] = {}
    for number, raw in enumerate(data, start=1):
        where = f"script {path}: turn {number}"
        if number <= len(lines):
            where += f" (line {lines[number - 1]})"
        if not isinstance(raw, dict):
            raise ProviderError(
                f"{where}: a turn must be a mapping with `text` and/or `tool_calls`, "
                f"got {'nothing' if raw is None else type(raw).__name__}"
            )
        try:
            turn = _ScriptTurn.model_validate(raw)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                (f"field {_format_loc(err['loc'])}: " if err["loc"] else "") + _error_text(err)
                for err in exc.errors(include_url=False)
            )
            raise ProviderError(f"{where}: {problems}") from None

        calls: list[ToolCall] = []
        for index, call in enumerate(turn.tool_calls or []):
            call_id = call.id if call.id is not None else f"call_{number}_{index}"
            if call_id in seen_ids:
                raise ProviderError(
                    f"{where}: field tool_calls[{index}].id: {call_id!r} is already used "
                    f"in turn {seen_ids[call_id]}"
                )
            seen_ids[call_id] = number
            calls.append(ToolCall(id=call_id, name=call.name, arguments=dict(call.arguments)))
        turns.append(
            AssistantTurn(
                text=turn.text or "",
                tool_calls=calls,
                stop_reason="toolUse" if calls else "stop",
                provider="scripted",
                model="scripted",
            )
        )
    return turns


class ScriptedProvider:
    """Replays a script: each ``complete()`` returns the next turn, ignoring the request.

    Attributes:
        name: always ``"scripted"``.
        model: always ``"scripted"``.
        script_path: the script file.
        requests_made: how many ``complete()`` calls have been answered so far.
    """

    name = "scripted"

    def __init__(self, script_path: Path) -> None:
        """Load and validate the whole script.

        Raises:
            ProviderError: as ``load_script``.
        """
        self.model = "scripted"
        self.script_path = Path(script_path)
        self._turns = load_script(self.script_path)
        self.requests_made = 0

    @property
    def turns_left(self) -> int:
        """How many turns have not been replayed yet."""
        return len(self._turns) - self.requests_made

    async def complete(
        self,
        *,
        system_prompt: str,
        messages: list[dict[str, Any]],
        tools: list[ToolDefinition],
        on_text_delta: TextDeltaCallback | None = None,
        on_event: AssistantEventCallback | None = None,
        thinking_level: str = "off",
    ) -> AssistantTurn:
        """Return the next scripted turn; its text goes to ``on_text_delta`` in one call.

        The request arguments are ignored: a script is a fixed conversation.

        Raises:
            ProviderError: every turn has been used ("no turn left for request N").
            trio.Cancelled: as at any checkpoint; this method checkpoints once.
        """
        # A real provider always yields to the scheduler; doing the same keeps agent-loop
        # tests honest about cancellation.
        await trio.lowlevel.checkpoint()
        request = self.requests_made + 1
        if request > len(self._turns):
            raise ProviderError(
                f"script {self.script_path} has no turn left for request {request} "
                f"(it has {len(self._turns)} turns)"
            )
        self.requests_made = request
        turn = self._turns[request - 1]
        if on_event is not None:
            await _replay_events(turn, on_event)
        if turn.text and on_text_delta is not None:
            await on_text_delta(turn.text)
        return turn


async def _replay_events(turn: AssistantTurn, on_event: AssistantEventCallback) -> None:
    """pi's ``assistantMessageEvent`` sequence of a scripted turn: its text in one
    delta, then each tool call whole (start, one argument delta, end)."""
    index = 0
    if turn.text:
        await on_event({"type": "text_start", "contentIndex": index})
        await on_event({"type": "text_delta", "contentIndex": index, "delta": turn.text})
        await on_event({"type": "text_end", "contentIndex": index, "content": turn.text})
        index += 1
    for call in turn.tool_calls:
        await on_event(
            {"type": "toolcall_start", "contentIndex": index, "id": call.id, "toolName": call.name}
        )
        await on_event(
            {"type": "toolcall_delta", "contentIndex": index, "delta": json.dumps(call.arguments)}
        )
        tool_call = {"type": "toolCall", "id": call.id, "name": call.name}
        await on_event(
            {
                "type": "toolcall_end",
                "contentIndex": index,
                "toolCall": {**tool_call, "arguments": call.arguments},
            }
        )
        index += 1
