"""The extension authoring surface (stdlib only, importable without the supervisor).

An extension is a ``.py`` file, or a package directory with ``__init__.py``, whose
module defines ``extension(pi)``; the factory may be sync or async. Inside it::

    def extension(pi):
        def guard(event, ctx):
            if "rm -rf" in event.input.get("command", ""):
                return {"block": True, "reason": "no recursive deletes"}
        pi.on("tool_call", guard)

        def hello(params, ctx):
            return f"hello {params['name']} from {ctx.cwd}"
        pi.register_tool(
            name="hello",
            description="Greets someone.",
            parameters={"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"]},
            execute=hello,
        )

Handlers receive ``(event, ctx)`` and may be sync or async (an async one runs on an
event loop of its own in the request's thread). Tool ``execute`` receives
``(params, ctx)`` and returns ``{"content": [{"type": "text", "text": ...}],
"details": {...}, "is_error": bool}`` or a plain string.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from collections.abc import Callable
    from typing import Any

__all__ = ["Context", "Event", "ExtensionAPI", "ToolRegistration"]

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class Event(dict):
    """An event payload: a dict whose keys are also readable as attributes.

    ``event.input`` and ``event["input"]`` are the same object, so a ``tool_call``
    handler may mutate either.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class Context:
    """What a handler or tool knows about the running session (snapshot at dispatch).

    Attributes:
        cwd: the session's working directory (absolute path string).
        has_ui: whether a user interface can answer prompts (False in ``-p``/json modes).
        mode: ``"print"``, ``"json"``, ``"rpc"`` or ``"interactive"``.
        signal: a ``threading.Event`` set when the supervisor cancels this operation.
    """

    def __init__(
        self, *, cwd: str, has_ui: bool, mode: str, signal: threading.Event | None = None
    ) -> None:
        self.cwd = cwd
        self.has_ui = has_ui
        self.mode = mode
        self.signal = signal or threading.Event()

    @property
    def aborted(self) -> bool:
        """True once the supervisor cancelled the current operation."""
        return self.signal.is_set()


class ToolRegistration:
    """One tool an extension registered (kept inside the worker)."""

    def __init__(
        self,
        *,
        name: str,
        label: str,
        description: str,
        parameters: dict[str, Any],
        execute: Callable[..., Any],
    ) -> None:
        self.name = name
        self.label = label
        self.description = description
        self.parameters = parameters
        self.execute = execute

    def definition(self) -> dict[str, Any]:
        """The wire shape sent to the supervisor: name, label, description, parameters."""
        return {
            "name": self.name,
            "label": self.label,
            "description": self.description,
            "parameters": self.parameters,
        }


class ExtensionAPI:
    """The ``pi`` object passed to an extension's factory.

    Registration methods validate their arguments at once and raise ``TypeError`` or
    ``ValueError`` naming the bad argument, so a mistake surfaces as a load error with
    the extension's path rather than later in a session.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self._tools: dict[str, ToolRegistration] = {}

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe ``handler(event, ctx)`` to ``event``; returns a function that unsubscribes.

        Raises:
            TypeError: ``event`` is not a string or ``handler`` is not callable.
        """
        if not isinstance(event, str) or not event:
            raise TypeError("pi.on(event, handler): event must be a non-empty string")
        if not callable(handler):
            raise TypeError(f"pi.on({event!r}, handler): handler must be callable")
        self._handlers.setdefault(event, []).append(handler)

        def unsubscribe() -> None:
            handlers = self._handlers.get(event, [])
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def register_tool(
        self,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any] | None = None,
        execute: Callable[..., Any],
        label: str | None = None,
    ) -> None:
        """Register a tool the model can call.

        Args:
            name: 1–64 characters of ``[A-Za-z0-9_-]`` (what providers accept).
            description: shown to the model.
            parameters: a JSON Schema object (``{"type": "object", ...}``); ``None`` means
                no parameters.
            execute: ``execute(params, ctx)``, sync or async.
            label: a human-readable name for UIs (defaults to ``name``).

        Raises:
            ValueError / TypeError: an argument is missing or malformed (message names it).
        """
        if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= _NAME_CHARS:
            raise ValueError(
                f"register_tool: name {name!r} must be 1-64 characters of [A-Za-z0-9_-]"
            )
        if not isinstance(description, str):
            raise TypeError(f"register_tool({name!r}): description must be a string")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ValueError(
                f"register_tool({name!r}): parameters must be a JSON Schema with type 'object'"
            )
        if not callable(execute):
            raise TypeError(f"register_tool({name!r}): execute must be callable")
        if name in self._tools:
            raise ValueError(
                f"register_tool: tool {name!r} is already registered by this extension"
            )
        self._tools[name] = ToolRegistration(
            name=name,
            label=label or name,
            description=description,
            parameters=parameters,
            execute=execute,
        )

    # Read by the worker runtime only.
    def _registrations(self) -> dict[str, Any]:
        return {
            "tools": [tool.definition() for tool in self._tools.values()],
            "events": sorted(event for event, handlers in self._handlers.items() if handlers),
        }
