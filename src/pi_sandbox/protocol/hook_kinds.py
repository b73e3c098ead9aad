"""Event kinds and their combiners: one pure module shared by worker and supervisor.

DESIGN §4 (seed 000 §9–§11): every event has one kind, and each kind has one way of
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

Kinds and how they combine:

==================  ==========================================
kind                combination
==================  ==========================================
notification        results ignored
chained             output of one is the input of the next
short_circuit       first decisive result wins
transaction         ``cancel`` stops at once, else last result
collect             union of contributed paths
==================  ==========================================

What a failed handler (it raised, returned a malformed result, timed out, or its
worker crashed or is disabled) means is one table, `ON_FAILURE` (issue 13 §1: a
handler that can block, redact or rewrite is never skipped silently). Every event
whose handlers can block or rewrite *fails closed*:

- ``block`` — ``tool_call``, ``user_bash``: the tool call / the user's command does
  not run; the message names the extension and the failure.
- ``withhold`` — ``tool_result``, ``message_end``: the model, the output and the
  session file get a "withheld" form, never the value the handler was to redact.
- ``stop`` — ``input``, ``before_agent_start``, ``context``,
  ``before_provider_request``: the prompt or provider request is not sent; the run
  ends with an error.
- ``cancel`` — ``session_before_switch/fork/tree/compact``: the operation is cancelled.
- ``distrust`` — ``project_trust``: the project is not trusted (``no``) for this run.
- ``continue`` — notifications and ``resources_discover``: reported, nothing stops
  (fail-open: they observe, or contribute optional resources).

`apply_error` folds a failure into the state where the state can express it
(``tool_call`` blocked, a transaction cancelled, ``project_trust`` → ``no``) and
stops the chain for every fail-closed event; for the others the caller acts on the
dispatcher's reported failure (``DispatchOutcome.failure``) as the table says.

States (what ``initial_state`` returns and ``check_state`` enforces, keys exactly) and
what a handler may return. In a returned mapping a key whose value is ``None`` counts
as absent; a result of the wrong shape raises ``HandlerResultError``, which callers
treat as a handler error (``apply_error``, with the failure rule of `ON_FAILURE`).

- notifications (and unknown events): ``{}``; results ignored.
- ``input``: ``{"text": str, "images": [dict], "action": "continue" | "transform" |
  "handled"}``. Returns None or ``{"action": "continue"}`` (no change);
  ``{"action": "transform", "text": str, "images"?: [dict]}`` (action becomes
  ``"transform"``); ``{"action": "handled"}`` (decisive: the input is consumed).
- ``before_agent_start``: ``{"messages": [dict], "system_prompt": str | None}``.
  Returns ``{"message"?: dict, "messages"?: [dict], "system_prompt" | "systemPrompt"?:
  str}``: messages accumulate in order, the prompt replaces (this prompt only).
- ``context``: ``{"messages": [dict with a str "role"]}``. Returns ``{"messages": [...]}``
  (replaces the list).
- ``before_provider_request``: ``{"payload": dict}``. Returns ``{"payload": dict}``
  (replaces; a mapping without ``payload`` is an error).
- ``message_end``: ``{"message": dict}``. Returns ``{"message": dict}`` with the same
  ``role`` (replaces).
- ``tool_call``: ``{"input": dict, "block": bool, "reason": str | None, "terminate":
  bool}`` (``reason``/``terminate`` only with ``block``). A handler may mutate
  ``event.input`` in place and/or return ``{"input": dict}`` (a shallow patch), or
  ``{"block": True, "reason"?: str, "terminate"?: bool}`` (decisive).
- ``tool_result``: ``{"content": [block], "details": dict, "is_error": bool,
  "terminate": bool}``. Returns a patch of ``content`` (a string becomes one text
  block), ``details``, ``is_error``/``isError``, ``terminate``.
- ``user_bash``: ``{"result": dict | None}``; the first result wins (decisive). A
  result is ``{"result": {"output": str, "exit_code": int | None, "cancelled"?:
  bool}}`` (or the inner mapping alone); anything else is an error.
- ``project_trust``: ``{"result": "yes" | "no" | "sandboxed" | None}``; returns one of
  those strings or ``{"trust" | "decision": ...}``; ``"undecided"`` counts as None;
  the first decision wins (decisive).
- ``session_before_switch/fork/tree/compact``: ``{"result": dict | None}``; returns a
  mapping; ``{"cancel": True}`` is decisive, otherwise the last one is kept.
- ``resources_discover``: ``{"skill_paths": [str], "prompt_paths": [str],
  "theme_paths": [str]}``; returns ``skill_paths``/``skillPaths``,
  ``prompt_paths``/``promptPaths``, ``theme_paths``/``themePaths``; unioned in order,
  without duplicates.

The view a handler receives is a deep copy of the payload with ``type`` set and the
running state applied: ``input`` → ``text``/``images``; ``before_agent_start`` →
``system_prompt``; ``context`` → ``messages``; ``before_provider_request`` →
``payload``; ``message_end`` → ``message``; ``tool_call`` → ``input``;
``tool_result`` → the four state fields.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping  # used at run time (isinstance)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from typing import Any

__all__ = [
    "BLOCK",
    "CANCEL",
    "CHAINED",
    "COLLECT",
    "CONTINUE",
    "DISTRUST",
    "EVENT_KINDS",
    "KNOWN_EVENTS",
    "NOTIFICATION",
    "ON_FAILURE",
    "SHORT_CIRCUIT",
    "STOP",
    "TRANSACTION",
    "WITHHOLD",
    "HandlerResultError",
    "apply_error",
    "apply_result",
    "check_state",
    "check_transition",
    "fails_closed",
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
            "after_provider_response",
            # The after-events of the session_before_* transactions.
            "session_switch",
            "session_fork",
            "session_compact",
            "session_compact_failed",
            "session_tree",
            # A session name was set (RPC set_session_name, pi.set_session_name; issue 15).
            "session_info_changed",
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

BLOCK = "block"
WITHHOLD = "withhold"
STOP = "stop"
CANCEL = "cancel"
DISTRUST = "distrust"
CONTINUE = "continue"

ON_FAILURE: dict[str, str] = {
    **{event: CONTINUE for event, kind in EVENT_KINDS.items() if kind == NOTIFICATION},
    # Can block: the protected action does not happen.
    "tool_call": BLOCK,
    "user_bash": BLOCK,
    # Can redact: the unredacted value must reach neither the model nor the session.
    "tool_result": WITHHOLD,
    "message_end": WITHHOLD,
    # Can rewrite what is sent to the provider (or consume the input): nothing is sent.
    "input": STOP,
    "before_agent_start": STOP,
    "context": STOP,
    "before_provider_request": STOP,
    # Can cancel (or supply the result of) a session operation: it is cancelled.
    "session_before_switch": CANCEL,
    "session_before_fork": CANCEL,
    "session_before_tree": CANCEL,
    "session_before_compact": CANCEL,
    # Can decide trust: the strictest decision, for this run only.
    "project_trust": DISTRUST,
    # Contributes resources, protects nothing: a missing contribution is reported.
    "resources_discover": CONTINUE,
}
"""What a failed handler of each event means (issue 13 §1; see the module docstring).
Events not in the table are notifications (``continue``)."""


RECHECKED: frozenset[str] = frozenset(
    {"tool_call", "tool_result", "message_end", "input", "context", "before_provider_request"}
)
"""Events whose final value must pass every more trusted extension (REDTEAM F5,
issue 13 §1: a protective handler overridden by a later, less trusted one is as
good as skipped). Handlers run in load order (``-e`` extensions before the
project's), and each sees the output of the previous one (DESIGN §4); when an
extension of `LESS_TRUSTED_ORIGINS` then changes the value, the dispatcher runs
once more, on the changed value, the handlers of the more trusted extensions that
ran before it, so their block, redaction or rewrite is what holds. The second pass
runs no project handler, so it ends: two passes at most. Not in the set:
``before_agent_start`` (its messages accumulate, a second run would repeat them;
what it sets reaches the provider only through ``context`` and
``before_provider_request``, which are), and the decisive-first kinds
(``user_bash``, ``project_trust``: an earlier decisive answer already ends the
chain; the transactions: a ``cancel`` ends it at once, and a later extension's
result replacing an earlier one is their documented "last valid result")."""

LESS_TRUSTED_ORIGINS: frozenset[str] = frozenset({"project"})
"""Extension origins whose change of a `RECHECKED` value is checked again by the
more trusted extensions that ran before them (``extension_discovery.Origin``)."""


def fails_closed(event: str) -> bool:
    """Whether a failed handler of ``event`` stops what the event protects (issue 13 §1)."""
    return ON_FAILURE.get(event, CONTINUE) != CONTINUE


# Every event the extension runtime knows; the supervisor dispatches only these.
KNOWN_EVENTS: frozenset[str] = frozenset(EVENT_KINDS)

# The fields a tool_result handler may patch (seed 000 §9.8), with pi's camelCase alias.
_TOOL_RESULT_FIELDS = {
    "content": "content",
    "details": "details",
    "is_error": "is_error",
    "isError": "is_error",
    "terminate": "terminate",
}

_INPUT_ACTIONS = ("continue", "transform", "handled")

_TRUST_DECISIONS = ("yes", "no", "sandboxed")

# resources_discover: state key → the keys a handler may use for it.
_RESOURCE_KEYS = {
    "skill_paths": ("skill_paths", "skillPaths"),
    "prompt_paths": ("prompt_paths", "promptPaths"),
    "theme_paths": ("theme_paths", "themePaths"),
}


class HandlerResultError(ValueError):
    """A handler returned a value of the wrong shape for its event (treated as a handler error)."""


def kind_of(event: str) -> str:
    """The kind of ``event``; events not in the table are notifications."""
    return EVENT_KINDS.get(event, NOTIFICATION)


def initial_state(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The state before the first handler runs (shapes: see the module docstring)."""
    if event == "tool_call":
        return {
            "input": copy.deepcopy(dict(payload.get("input") or {})),
            "block": False,
            "reason": None,
            "terminate": False,
        }
    if event == "tool_result":
        return {
            "content": copy.deepcopy(list(payload.get("content") or [])),
            "details": copy.deepcopy(dict(payload.get("details") or {})),
            "is_error": bool(payload.get("is_error", False)),
            "terminate": False,
        }
    if event == "input":
        text = payload.get("text")
        return {
            "text": text if isinstance(text, str) else "",
            "images": copy.deepcopy(list(payload.get("images") or [])),
            "action": "continue",
        }
    if event == "before_agent_start":
        prompt = payload.get("system_prompt")
        return {"messages": [], "system_prompt": prompt if isinstance(prompt, str) else None}
    if event == "context":
        return {"messages": copy.deepcopy(list(payload.get("messages") or []))}
    if event == "before_provider_request":
        return {"payload": copy.deepcopy(dict(payload.get("payload") or {}))}
    if event == "message_end":
        return {"message": copy.deepcopy(dict(payload.get("message") or {}))}
    kind = kind_of(event)
    if kind == COLLECT:
        return {key: [] for key in _RESOURCE_KEYS}
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
    elif event == "input":
        view["text"] = state["text"]
        view["images"] = copy.deepcopy(state["images"])
    elif event == "before_agent_start":
        view["system_prompt"] = state["system_prompt"]
    elif event == "context":
        view["messages"] = copy.deepcopy(state["messages"])
    elif event == "before_provider_request":
        view["payload"] = copy.deepcopy(state["payload"])
    elif event == "message_end":
        view["message"] = copy.deepcopy(state["message"])
    return view


def apply_result(
    event: str, state: dict[str, Any], view: Mapping[str, Any], result: Any
) -> tuple[dict[str, Any], bool]:
    """Fold one handler's ``result`` into ``state``; returns ``(state, stop)``.

    ``state`` is never mutated: a new state is returned.

    Raises:
        HandlerResultError: ``result`` has the wrong shape for the event; callers treat it
            as a handler error (``apply_error``).
    """
    if event == "tool_call":
        return _apply_tool_call(state, view, result)
    if result is None:
        return state, False
    kind = kind_of(event)
    if kind == NOTIFICATION:
        return state, False
    if event == "project_trust":
        decision = _trust_decision(result)
        return ({"result": decision}, True) if decision is not None else (state, False)
    if not isinstance(result, Mapping):
        raise HandlerResultError(
            f"{event} handler returned {type(result).__name__}; expected None or a mapping"
        )
    if event == "tool_result":
        patched = dict(state)
        for key, field in _TOOL_RESULT_FIELDS.items():
            if result.get(key) is not None:
                patched[field] = _check_tool_result_field(field, result[key])
        return patched, False
    if event == "input":
        return _apply_input(state, result)
    if event == "before_agent_start":
        return _apply_before_agent_start(state, result), False
    if event == "context":
        messages = result.get("messages")
        if messages is None:
            return state, False
        _check_messages(event, messages, need_role=True)
        return {"messages": copy.deepcopy(list(messages))}, False
    if event == "before_provider_request":
        new_payload = result.get("payload")
        if not isinstance(new_payload, dict):
            raise HandlerResultError(
                "before_provider_request handler must return None or {'payload': {...}}"
            )
        return {"payload": copy.deepcopy(new_payload)}, False
    if event == "message_end":
        message = result.get("message")
        if message is None:
            return state, False
        if not isinstance(message, dict):
            raise HandlerResultError("message_end handler: message must be an object")
        if message.get("role") != state["message"].get("role"):
            raise HandlerResultError(
                f"message_end handler changed the message role from "
                f"{state['message'].get('role')!r} to {message.get('role')!r}"
            )
        return {"message": copy.deepcopy(message)}, False
    if kind == SHORT_CIRCUIT:  # user_bash: the first mapping wins
        problem = _user_bash_problem(result)
        if problem:
            raise HandlerResultError(problem)
        return {"result": copy.deepcopy(dict(result))}, True
    if kind == TRANSACTION:
        return {"result": copy.deepcopy(dict(result))}, result.get("cancel") is True
    if kind == COLLECT:
        merged = {key: list(state[key]) for key in _RESOURCE_KEYS}
        for field, aliases in _RESOURCE_KEYS.items():
            for alias in aliases:
                paths = result.get(alias)
                if paths is None:
                    continue
                if not isinstance(paths, list | tuple) or not all(
                    isinstance(p, str) for p in paths
                ):
                    raise HandlerResultError(f"{event} handler: {alias} must be a list of strings")
                merged[field] += [p for p in dict.fromkeys(paths) if p not in merged[field]]
        return merged, False
    return state, False


def _apply_tool_call(
    state: dict[str, Any], view: Mapping[str, Any], result: Any
) -> tuple[dict[str, Any], bool]:
    new_input = view.get("input")
    if not isinstance(new_input, dict):
        raise HandlerResultError("tool_call handler replaced event.input with a non-object")
    if result is not None and not isinstance(result, Mapping):
        raise HandlerResultError(
            f"tool_call handler returned {type(result).__name__}; expected None or a mapping"
        )
    state = {**state, "input": copy.deepcopy(dict(new_input))}
    if result is None:
        return state, False
    patch = result.get("input")
    if patch is not None:
        if not isinstance(patch, Mapping):
            raise HandlerResultError("tool_call handler: input must be an object (a patch)")
        state["input"] = {**state["input"], **copy.deepcopy(dict(patch))}
    terminate = result.get("terminate")
    if terminate is not None and not isinstance(terminate, bool):
        raise HandlerResultError("tool_call handler: terminate must be a boolean")
    if result.get("block"):
        reason = result.get("reason")
        return {
            **state,
            "block": True,
            "reason": str(reason) if reason else "Blocked by an extension",
            "terminate": bool(terminate),
        }, True
    return state, False


def _apply_input(state: dict[str, Any], result: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    action = result.get("action")
    if action == "continue":
        return state, False
    if action == "handled":
        return {**state, "action": "handled"}, True
    if action != "transform":
        raise HandlerResultError(
            f"input handler returned action {action!r}; expected 'continue', 'transform' or 'handled'"
        )
    text = result.get("text")
    if not isinstance(text, str):
        raise HandlerResultError("input handler: a transform needs a string text")
    images = result.get("images")
    if images is None:
        images = state["images"]
    elif not isinstance(images, list) or not all(isinstance(i, dict) for i in images):
        raise HandlerResultError("input handler: images must be a list of image objects")
    return {"text": text, "images": copy.deepcopy(images), "action": "transform"}, False


def _apply_before_agent_start(state: dict[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    added = []
    message = result.get("message")
    if message is not None:
        if not isinstance(message, dict):
            raise HandlerResultError("before_agent_start handler: message must be an object")
        added.append(message)
    messages = result.get("messages")
    if messages is not None:
        _check_messages("before_agent_start", messages, need_role=False)
        added += messages
    prompt = result.get("system_prompt")
    if prompt is None:
        prompt = result.get("systemPrompt")
    if prompt is not None and not isinstance(prompt, str):
        raise HandlerResultError("before_agent_start handler: system_prompt must be a string")
    return {
        "messages": [*state["messages"], *copy.deepcopy(added)],
        "system_prompt": state["system_prompt"] if prompt is None else prompt,
    }


def _user_bash_problem(result: Mapping[str, Any]) -> str | None:
    """Why a ``user_bash`` answer is not a result, or None. pi's shape is
    ``{"result": {"output": str, "exit_code": int | None, "cancelled"?: bool}}``; the
    inner mapping alone is accepted too. A malformed one is a failed handler, and
    ``user_bash`` fails closed (issue 13 §1)."""
    inner = result.get("result", result)
    if not isinstance(inner, Mapping):
        return "user_bash handler: result must be an object"
    exit_code = inner.get("exit_code")
    if (
        not isinstance(inner.get("output"), str)
        or (exit_code is not None and (type(exit_code) is not int or not -255 <= exit_code <= 255))
        or not isinstance(inner.get("cancelled", False), bool)
    ):
        return (
            "user_bash handler must return None or {'result': {'output': str, "
            "'exit_code': int from -255 to 255 or None, 'cancelled'?: bool}}"
        )
    return None


def _trust_decision(result: Any) -> str | None:
    decision = result
    if isinstance(result, Mapping):
        decision = result.get("trust")
        if decision is None:
            decision = result.get("decision")
        if decision is None:
            raise HandlerResultError("project_trust handler returned a mapping without trust")
    if decision is None or decision == "undecided":
        return None
    if decision not in _TRUST_DECISIONS:
        raise HandlerResultError(
            f"project_trust handler returned {decision!r}; expected 'yes', 'no' or 'sandboxed'"
        )
    return decision


def _check_messages(event: str, messages: Any, *, need_role: bool) -> None:
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and (not need_role or isinstance(m.get("role"), str)) for m in messages
    ):
        what = "objects with a string role" if need_role else "objects"
        raise HandlerResultError(f"{event}: messages must be a list of {what}")


def apply_error(event: str, state: dict[str, Any], message: str) -> tuple[dict[str, Any], bool]:
    """Fold a handler failure (exception, timeout, crashed worker) into ``state``.

    `ON_FAILURE` decides (issue 13 §1). ``tool_call`` is blocked with ``message`` as
    the reason (``terminate`` stays False); a transaction is cancelled
    (``{"cancel": True, "reason": message}``); ``project_trust`` becomes ``no``. Every
    other fail-closed event keeps the previous state but stops the chain — its caller
    must not use that state (it blocks, withholds or stops). Notifications and
    ``resources_discover`` keep the previous state and continue.
    """
    action = ON_FAILURE.get(event, CONTINUE)
    if event == "tool_call":
        return {**state, "block": True, "reason": message, "terminate": False}, True
    if action == CANCEL:
        return {"result": {"cancel": True, "reason": message}}, True
    if action == DISTRUST:
        return {"result": "no"}, True
    return state, action != CONTINUE


def _check_tool_result_field(field: str, value: Any) -> Any:
    if field in ("is_error", "terminate"):
        if not isinstance(value, bool):
            raise HandlerResultError(f"tool_result patch: {field} must be a boolean")
        return value
    if field == "details":
        if not isinstance(value, dict):
            raise HandlerResultError("tool_result patch: details must be an object")
        return copy.deepcopy(value)
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not _is_content(value):
        raise HandlerResultError(
            "tool_result patch: content must be a string or a list of content blocks"
        )
    return copy.deepcopy(value)


def _is_content(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(block, dict) and isinstance(block.get("type"), str) for block in value
    )


def is_decisive(event: str, state: Mapping[str, Any]) -> bool:
    """Whether ``state`` ends the chain for ``event``, judged from the state alone.

    The supervisor uses this instead of a worker's own ``stopped`` flag: a worker
    could otherwise claim to stop a chain and silence every later extension's
    ``tool_call`` or ``tool_result`` hook without blocking anything.
    """
    kind = kind_of(event)
    if event == "tool_call":
        return state.get("block") is True
    if event == "input":
        return state.get("action") == "handled"
    if kind == SHORT_CIRCUIT:
        return state.get("result") is not None
    if kind == TRANSACTION:
        result = state.get("result")
        return isinstance(result, Mapping) and result.get("cancel") is True
    return False


def check_state(event: str, state: Mapping[str, Any]) -> None:
    """Check that a state a worker returned has the shape ``initial_state`` gives.

    Raises:
        HandlerResultError: ``state`` is not a mapping, a key is missing or extra, or a
            value is of the wrong type.
    """
    if not isinstance(state, Mapping):
        raise HandlerResultError(f"{event} state is {type(state).__name__}; expected an object")
    expected = set(initial_state(event, {}))
    if set(state) != expected:
        raise HandlerResultError(
            f"{event} state has keys {sorted(state)}; expected {sorted(expected)}"
        )
    problem = _state_problem(event, state)
    if problem:
        raise HandlerResultError(f"{event} state: {problem}")


def _state_problem(event: str, state: Mapping[str, Any]) -> str | None:
    kind = kind_of(event)
    if event == "tool_call":
        if not isinstance(state["input"], dict):
            return "input must be an object"
        if not isinstance(state["block"], bool) or not isinstance(state["terminate"], bool):
            return "it needs a boolean block and a boolean terminate"
        if state["block"]:
            if not isinstance(state["reason"], str):
                return "a block needs a string reason"
        elif state["reason"] is not None or state["terminate"]:
            return "reason and terminate need block"
    elif event == "tool_result":
        if not _is_content(state["content"]):
            return "content must be a list of content blocks"
        if not isinstance(state["details"], dict):
            return "details must be an object"
        if not isinstance(state["is_error"], bool) or not isinstance(state["terminate"], bool):
            return "is_error and terminate must be booleans"
    elif event == "input":
        if not isinstance(state["text"], str):
            return "text must be a string"
        if not isinstance(state["images"], list) or not all(
            isinstance(i, dict) for i in state["images"]
        ):
            return "images must be a list of objects"
        if state["action"] not in _INPUT_ACTIONS:
            return "action must be 'continue', 'transform' or 'handled'"
    elif event == "before_agent_start":
        if not isinstance(state["messages"], list) or not all(
            isinstance(m, dict) for m in state["messages"]
        ):
            return "messages must be a list of objects"
        if state["system_prompt"] is not None and not isinstance(state["system_prompt"], str):
            return "system_prompt must be a string or null"
    elif event == "context":
        try:
            _check_messages(event, state["messages"], need_role=True)
        except HandlerResultError as exc:
            return str(exc)
    elif event == "before_provider_request":
        if not isinstance(state["payload"], dict):
            return "payload must be an object"
    elif event == "message_end":
        message = state["message"]
        if not isinstance(message, dict) or not isinstance(message.get("role", ""), str):
            return "message must be an object with a string role"
    elif event == "project_trust":
        if state["result"] is not None and state["result"] not in _TRUST_DECISIONS:
            return "result must be 'yes', 'no', 'sandboxed' or null"
    elif kind in (SHORT_CIRCUIT, TRANSACTION):
        if state["result"] is not None and not isinstance(state["result"], dict):
            return "result must be an object or null"
        if event == "user_bash" and state["result"] is not None:
            return _user_bash_problem(state["result"])
    elif kind == COLLECT:
        for key in _RESOURCE_KEYS:
            paths = state[key]
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                return f"{key} must be a list of strings"
            if len(set(paths)) != len(paths):
                return f"{key} has duplicates"
    return None


def check_transition(event: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """Check that ``after`` (from a worker) is a state its handlers could reach from ``before``.

    ``check_state`` judges a state alone; this also rejects a worker that rewrites
    what earlier workers decided: a changed ``message_end`` role, dropped
    ``before_agent_start`` messages or ``resources_discover`` paths, an ``input``
    transform undone. ``before`` is the (valid) state the worker was sent.

    Raises:
        HandlerResultError: ``after`` is malformed or not reachable from ``before``.
    """
    check_state(event, after)
    if event == "message_end":
        if after["message"].get("role") != before["message"].get("role"):
            raise HandlerResultError("message_end: a worker changed the message role")
    elif event == "before_agent_start":
        count = len(before["messages"])
        if after["messages"][:count] != before["messages"]:
            raise HandlerResultError("before_agent_start: a worker dropped earlier messages")
    elif event == "input":
        if before["action"] == "transform" and after["action"] == "continue":
            raise HandlerResultError("input: a worker undid an earlier transform")
    elif kind_of(event) == COLLECT:
        for key in _RESOURCE_KEYS:
            if after[key][: len(before[key])] != before[key]:
                raise HandlerResultError(f"{event}: a worker dropped earlier {key}")
