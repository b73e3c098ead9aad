"""Event kinds and their combiners: one pure module shared by worker and supervisor.

DESIGN §4 (seed 000 §9): every event has one kind, and each kind has one way of
combining handler results. A worker runs its own handlers with these functions; the
supervisor runs the same functions across workers, passing the running ``state``
from one worker to the next. Stdlib only — this module is imported inside workers.

The combination is a fold over handlers::

    state = initial_state(event, payload)
    for handler in handlers:                         # load order, then registration order
        view = handler_view(event, payload, state)   # what the handler receives
        try:
            result = handler(view, ctx)
        except Exception as exc:
            state, stop = apply_error(event, state, message)
        else:
            state, stop = apply_result(event, state, view, result)
        if stop:
            break

Kinds and their failure rule:

==================  ==========================================  =======================
kind                combination                                 on error / timeout
==================  ==========================================  =======================
notification        results ignored                             report, continue
chained             output of one is the input of the next      report, keep previous
short_circuit       first decisive result wins                  ``tool_call``: block
transaction         ``cancel`` stops at once, else last result  report, continue
collect             union of contributed paths                  report, continue
==================  ==========================================  =======================
"""

from __future__ import annotations

import copy
from collections.abc import Mapping  # used at run time (isinstance)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from typing import Any

__all__ = [
    "CHAINED",
    "COLLECT",
    "EVENT_KINDS",
    "NOTIFICATION",
    "SHORT_CIRCUIT",
    "TRANSACTION",
    "HandlerResultError",
    "apply_error",
    "apply_result",
    "check_state",
    "handler_view",
    "initial_state",
    "is_decisive",
    "kind_of",
]

NOTIFICATION = "notification"
CHAINED = "chained"
SHORT_CIRCUIT = "short_circuit"
TRANSACTION = "transaction"
COLLECT = "collect"

EVENT_KINDS: dict[str, str] = {
    **{
        name: NOTIFICATION
        for name in (
            "session_start",
            "session_shutdown",
            "agent_start",
            "agent_end",
            "agent_settled",
            "turn_start",
            "turn_end",
            "message_start",
            "message_update",
            "tool_execution_start",
            "tool_execution_update",
            "tool_execution_end",
            "model_select",
            "session_compact",
            "session_tree",
        )
    },
    **{
        name: CHAINED
        for name in (
            "input",
            "context",
            "before_agent_start",
            "tool_result",
            "before_provider_request",
            "message_end",
        )
    },
    "tool_call": SHORT_CIRCUIT,
    "project_trust": SHORT_CIRCUIT,
    "user_bash": SHORT_CIRCUIT,
    "session_before_switch": TRANSACTION,
    "session_before_fork": TRANSACTION,
    "session_before_tree": TRANSACTION,
    "session_before_compact": TRANSACTION,
    "resources_discover": COLLECT,
}

# The fields a tool_result handler may patch (seed 000 §8.3), with pi's camelCase alias.
_TOOL_RESULT_FIELDS = {
    "content": "content",
    "details": "details",
    "is_error": "is_error",
    "isError": "is_error",
}


class HandlerResultError(ValueError):
    """A handler returned a value of the wrong shape for its event (treated as a handler error)."""


def kind_of(event: str) -> str:
    """The kind of ``event``; events not in the table are notifications."""
    return EVENT_KINDS.get(event, NOTIFICATION)


def initial_state(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The state before the first handler runs.

    Shapes: ``tool_call`` → ``{"input": dict, "block": False, "reason": None}``;
    ``tool_result`` → ``{"content": list, "details": dict, "is_error": bool}``;
    other chained events → ``{"value": payload}``; ``collect`` → ``{"paths": []}``;
    short-circuit and transaction events → ``{"result": None}``; notifications → ``{}``.
    """
    if event == "tool_call":
        return {
            "input": copy.deepcopy(dict(payload.get("input") or {})),
            "block": False,
            "reason": None,
        }
    if event == "tool_result":
        return {
            "content": copy.deepcopy(list(payload.get("content") or [])),
            "details": copy.deepcopy(payload.get("details") or {}),
            "is_error": bool(payload.get("is_error", False)),
        }
    kind = kind_of(event)
    if kind == CHAINED:
        return {"value": copy.deepcopy(dict(payload))}
    if kind == COLLECT:
        return {"paths": []}
    if kind in (SHORT_CIRCUIT, TRANSACTION):
        return {"result": None}
    return {}


def handler_view(
    event: str, payload: Mapping[str, Any], state: Mapping[str, Any]
) -> dict[str, Any]:
    """The event object the next handler receives: the payload with the running state applied.

    It is a fresh deep copy, so what one handler mutates is seen by later handlers only
    through ``apply_result`` (for ``tool_call``, mutation of ``input`` is the contract).
    """
    view = copy.deepcopy(dict(payload))
    view["type"] = event
    if event == "tool_call":
        view["input"] = copy.deepcopy(state["input"])
    elif event == "tool_result":
        view.update(copy.deepcopy(dict(state)))
    elif kind_of(event) == CHAINED:
        view.update(copy.deepcopy(state["value"]))
    return view


def apply_result(
    event: str, state: dict[str, Any], view: Mapping[str, Any], result: Any
) -> tuple[dict[str, Any], bool]:
    """Fold one handler's ``result`` into ``state``; returns ``(state, stop)``.

    Raises:
        HandlerResultError: ``result`` has the wrong shape for the event; callers treat it
            as a handler error (``apply_error``).
    """
    kind = kind_of(event)
    if event == "tool_call":
        new_input = view.get("input")
        if not isinstance(new_input, dict):
            raise HandlerResultError("tool_call handler replaced event.input with a non-object")
        state = {**state, "input": copy.deepcopy(new_input)}
        if result is None:
            return state, False
        if not isinstance(result, Mapping):
            raise HandlerResultError(
                f"tool_call handler returned {type(result).__name__}; expected None or a mapping"
            )
        if result.get("block"):
            reason = result.get("reason")
            return {
                **state,
                "block": True,
                "reason": str(reason) if reason else "Blocked by an extension",
            }, True
        return state, False
    if event == "tool_result":
        if result is None:
            return state, False
        if not isinstance(result, Mapping):
            raise HandlerResultError(
                f"tool_result handler returned {type(result).__name__}; expected None or a patch mapping"
            )
        patched = dict(state)
        for key, field in _TOOL_RESULT_FIELDS.items():
            if key in result:
                patched[field] = _check_tool_result_field(field, result[key])
        return patched, False
    if kind == CHAINED:
        if result is None:
            return state, False
        if not isinstance(result, Mapping):
            raise HandlerResultError(
                f"{event} handler returned {type(result).__name__}; expected a mapping"
            )
        return {"value": {**state["value"], **copy.deepcopy(dict(result))}}, False
    if kind == SHORT_CIRCUIT:
        if result is None:
            return state, False
        return {"result": copy.deepcopy(result)}, True
    if kind == TRANSACTION:
        if result is None:
            return state, False
        if isinstance(result, Mapping) and result.get("cancel"):
            return {"result": copy.deepcopy(dict(result))}, True
        return {"result": copy.deepcopy(result)}, False
    if kind == COLLECT:
        if result is None:
            return state, False
        paths = result.get("paths", []) if isinstance(result, Mapping) else result
        if not isinstance(paths, list | tuple) or not all(isinstance(p, str) for p in paths):
            raise HandlerResultError(f"{event} handler must return a list of path strings")
        return {"paths": [*state["paths"], *paths]}, False
    return state, False


def apply_error(event: str, state: dict[str, Any], message: str) -> tuple[dict[str, Any], bool]:
    """Fold a handler failure (exception, timeout, crashed worker) into ``state``.

    ``tool_call`` fails closed: the call is blocked with ``message`` as the reason and
    no later handler runs. Every other event keeps the previous state and continues.
    """
    if event == "tool_call":
        return {**state, "block": True, "reason": message}, True
    return state, False


def _check_tool_result_field(field: str, value: Any) -> Any:
    if field == "is_error":
        if not isinstance(value, bool):
            raise HandlerResultError("tool_result patch: is_error must be a boolean")
        return value
    if field == "details":
        if value is not None and not isinstance(value, dict):
            raise HandlerResultError("tool_result patch: details must be an object")
        return copy.deepcopy(value or {})
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list) or not all(
        isinstance(block, dict) and isinstance(block.get("type"), str) for block in value
    ):
        raise HandlerResultError(
            "tool_result patch: content must be a string or a list of content blocks"
        )
    return copy.deepcopy(value)


def is_decisive(event: str, state: Mapping[str, Any]) -> bool:
    """Whether ``state`` ends the chain for ``event``, judged from the state alone.

    The supervisor uses this instead of a worker's own ``stopped`` flag: a worker
    could otherwise claim to stop a chain and silence every later extension's
    ``tool_call`` or ``tool_result`` hook without blocking anything.
    """
    kind = kind_of(event)
    if event == "tool_call":
        return state.get("block") is True
    if kind == SHORT_CIRCUIT:
        return state.get("result") is not None
    if kind == TRANSACTION:
        result = state.get("result")
        return isinstance(result, Mapping) and bool(result.get("cancel"))
    return False


def check_state(event: str, state: Mapping[str, Any]) -> None:
    """Check that a state a worker returned has the shape ``initial_state`` gives.

    Raises:
        HandlerResultError: a key is missing, extra, or of the wrong type.
    """
    expected = set(initial_state(event, {}))
    if set(state) != expected:
        raise HandlerResultError(
            f"{event} state has keys {sorted(state)}; expected {sorted(expected)}"
        )
    if event == "tool_call":
        if not isinstance(state["input"], dict) or not isinstance(state["block"], bool):
            raise HandlerResultError("tool_call state needs an input object and a boolean block")
        if state["reason"] is not None and not isinstance(state["reason"], str):
            raise HandlerResultError("tool_call state: reason must be a string or null")
    elif event == "tool_result":
        for field in ("content", "details", "is_error"):
            _check_tool_result_field(field, state[field])
