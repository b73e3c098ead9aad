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

Two phases (seed 000 §6.3): while the factory runs, only registration is possible
(``on``, ``register_*``); action methods (``send_message``, ``exec``,
``set_active_tools`` …) raise `NotAvailableDuringLoadingError`. Once the factory
returned the extension is *bound*: registrations made later still take effect
(sent to the supervisor at once) and actions work.

Every ``pi`` and ``ctx`` belongs to one *generation* of the session. A reload or a
session replacement (``new_session``, ``fork``, ``switch_session``) ends it: from
then on any use of the old objects raises `StaleContextError` (seed 000 §8.4, where
``pi`` could only warn), and the old worker process is stopped soon after.
Values read through ``ctx`` (``model``, ``session_manager`` …) are fetched from the
supervisor when used, so they are current, never a snapshot.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~5 ms at worker start; annotations are strings anyway
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "CapabilityError",
    "CommandContext",
    "Context",
    "Event",
    "EventBus",
    "ExtensionAPI",
    "HostError",
    "NotAvailableDuringLoadingError",
    "ObserveOnly",
    "SessionManagerView",
    "StaleContextError",
    "ToolRegistration",
    "UserInterface",
]

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_COMMAND_CHARS = _NAME_CHARS | set(".:")
EXECUTION_MODES = ("parallel", "sequential")
EXPOSURES = ("direct", "deferred", "codemode", "hidden")
DELIVERY_MODES = ("steer", "follow_up", "next_turn")
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")

# Per-extension registration limits (the supervisor refuses larger registrations,
# `protocol.messages.Registrations`): checked here so the author gets a clear error.
MAX_TOOLS = 500
MAX_COMMANDS = 500
MAX_EVENTS = 200
MAX_FLAGS = 200
MAX_SHORTCUTS = 200
MAX_RENDERERS = 200
MAX_PROVIDERS = 50
MAX_CHANNELS = 200


def _check_json(what: str, value: Any) -> None:
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON (no NaN, sets or bytes): {exc}") from None


def _check_lengths(what: str, **fields: tuple[str, int]) -> None:
    for field, (value, limit) in fields.items():
        if len(value) > limit:
            raise ValueError(f"{what}: {field} is longer than {limit} characters")


def _check_room(registry: dict[str, Any], key: str, maximum: int, what: str) -> None:
    if key not in registry and len(registry) >= maximum:
        raise ValueError(f"{what}: an extension may register at most {maximum}")


RUNNING_EXEC_GROUPS: set[int] = set()
"""Process groups of ``pi.exec`` calls in progress: the worker kills them when it stops."""


class StaleContextError(RuntimeError):
    """A ``pi`` or ``ctx`` of a generation that ended (reload, new/fork/switch session)
    was used. Raised in the worker, without a round trip (issue 5 "Stale contexts")."""


class NotAvailableDuringLoadingError(RuntimeError):
    """An action method was called while the factory runs (seed 000 §6.3)."""


class CapabilityError(PermissionError):
    """The policy did not grant this extension the capability an action needs
    (e.g. ``send_user_messages``, ``ui``, ``exec``, ``set_model``); the refusal is audited."""


class HostError(RuntimeError):
    """The supervisor refused or failed an action; the message says why."""


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


class ObserveOnly:
    """A handler registered with ``pi.on(..., observe_only=True)``: called like the
    handler it wraps; the runtime checks after each call that it only looked
    (returned ``None``, left ``event.input`` unchanged). Issue 20 target 2."""

    __slots__ = ("handler", "name")

    def __init__(self, handler: Callable[..., Any]) -> None:
        self.handler = handler
        # Error messages name the extension's function, not this wrapper.
        self.name = getattr(handler, "__qualname__", repr(handler))

    def __call__(self, *args: Any) -> Any:
        return self.handler(*args)


class Generation:
    """One generation of the session as a worker sees it; ``end()`` makes every
    object bound to it raise `StaleContextError`."""

    def __init__(self, number: int = 1) -> None:
        self.number = number
        self.alive = True

    def end(self) -> None:
        """Mark the generation as ended (the supervisor's ``generation/end``)."""
        self.alive = False

    def check(self, what: str) -> None:
        """Raise `StaleContextError` naming ``what`` when the generation ended."""
        if not self.alive:
            raise StaleContextError(
                f"{what}: this object belongs to generation {self.number} of the session, "
                "which ended (reload or session replacement); use the pi/ctx passed to the "
                "current handler instead"
            )


class _NoHost:
    """The host of an API used outside a worker (tests, ``pi_sandbox.sdk`` docs)."""

    bound = True

    def call(self, op: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        raise HostError(f"{op}: not connected to a pi supervisor")

    def registrations_changed(self) -> None:
        pass

    def bus_emit(self, channel: str, data: Any) -> None:
        pass


class EventBus:
    """Inter-extension events, routed through the supervisor (``pi.events``).

    ``on(channel, handler)`` subscribes ``handler(data)``; ``emit(channel, data)``
    delivers ``data`` (JSON) to every subscriber of the current generation, in this
    and other extensions. Subscriptions die with their generation.
    """

    def __init__(self, api: ExtensionAPI) -> None:
        self._api = api
        self._handlers: dict[str, list[Callable[[Any], Any]]] = {}

    def on(self, channel: str, handler: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe ``handler(data)`` to ``channel``; returns an unsubscribe function.

        Raises:
            TypeError: bad channel or handler. StaleContextError: old generation.
        """
        self._api._generation.check("pi.events.on")
        if not isinstance(channel, str) or not channel:
            raise TypeError("pi.events.on(channel, handler): channel must be a non-empty string")
        if not callable(handler):
            raise TypeError("pi.events.on(channel, handler): handler must be callable")
        if len(channel) > 128:
            raise ValueError("pi.events.on: channel names are at most 128 characters")
        _check_room(
            {c: h for c, h in self._handlers.items() if h}, channel, MAX_CHANNELS, "pi.events.on"
        )
        self._handlers.setdefault(channel, []).append(handler)
        self._api._changed()

        def unsubscribe() -> None:
            handlers = self._handlers.get(channel, [])
            if handler in handlers:
                handlers.remove(handler)
                self._api._changed()

        return unsubscribe

    def emit(self, channel: str, data: Any = None) -> None:
        """Send ``data`` to every subscriber of ``channel`` (asynchronous, no reply).

        Raises:
            NotAvailableDuringLoadingError: inside the factory. StaleContextError.
        """
        self._api._action("pi.events.emit")
        if not isinstance(channel, str) or not channel:
            raise TypeError("pi.events.emit(channel, data): channel must be a non-empty string")
        self._api._host.bus_emit(channel, data)

    def channels(self) -> list[str]:
        """The channels with at least one subscriber in this extension."""
        return sorted(c for c, handlers in self._handlers.items() if handlers)

    def handlers(self, channel: str) -> list[Callable[[Any], Any]]:
        """This extension's subscribers of ``channel`` (a copy)."""
        return list(self._handlers.get(channel, []))


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
        prompt_snippet: str | None = None,
        prompt_guidelines: list[str] | None = None,
        execution_mode: str = "parallel",
        exposure: str = "direct",
    ) -> None:
        self.name = name
        self.label = label
        self.description = description
        self.parameters = parameters
        self.execute = execute
        self.prompt_snippet = prompt_snippet
        self.prompt_guidelines = prompt_guidelines or []
        self.execution_mode = execution_mode
        self.exposure = exposure

    def definition(self) -> dict[str, Any]:
        """The wire shape sent to the supervisor."""
        return {
            "name": self.name,
            "label": self.label,
            "description": self.description,
            "parameters": self.parameters,
            "prompt_snippet": self.prompt_snippet,
            "prompt_guidelines": list(self.prompt_guidelines),
            "execution_mode": self.execution_mode,
            "exposure": self.exposure,
        }


def _pydantic_schema(model: Any) -> dict[str, Any] | None:
    schema = getattr(model, "model_json_schema", None)
    if isinstance(model, type) and callable(schema):
        return schema()
    return None


class ExtensionAPI:
    """The ``pi`` object passed to an extension's factory.

    Registration methods validate their arguments at once and raise ``TypeError`` or
    ``ValueError`` naming the bad argument, so a mistake surfaces as a load error with
    the extension's path rather than later in a session.
    """

    def __init__(self, host: Any = None, generation: Generation | None = None) -> None:
        self._host = host or _NoHost()
        self._generation = generation or Generation()
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self._tools: dict[str, ToolRegistration] = {}
        self._commands: dict[str, dict[str, Any]] = {}
        self._flags: dict[str, dict[str, Any]] = {}
        self._shortcuts: dict[str, dict[str, Any]] = {}
        self._renderers: dict[str, Callable[..., Any]] = {}
        self._providers: dict[str, dict[str, Any]] = {}
        self._mcp_servers: dict[str, dict[str, Any]] = {}
        self._provider_streams: dict[str, Callable[..., Any]] = {}
        self._bound = False
        self.events = EventBus(self)

    # --- phases ----------------------------------------------------------------------------

    def _bind(self) -> None:
        self._bound = True

    def _changed(self) -> None:
        if self._bound:
            self._host.registrations_changed()

    def _action(self, what: str) -> None:
        self._generation.check(what)
        if not self._bound:
            raise NotAvailableDuringLoadingError(
                f"{what} is not available during loading: call it from an event handler, "
                "a command or a tool (registration methods work in the factory)"
            )

    def _call(self, what: str, op: str, /, **args: Any) -> Any:
        self._action(what)
        return self._host.call(op, args)

    # --- registration ------------------------------------------------------------------------

    def on(
        self, event: str, handler: Callable[..., Any], *, observe_only: bool = False
    ) -> Callable[[], None]:
        """Subscribe ``handler(event, ctx)`` to ``event``; returns a function that unsubscribes.

        ``observe_only=True`` promises that the handler only looks: it returns ``None``
        and leaves ``event.input`` as it is (never blocks nor mutates). A ``tool_call``
        handler of an extension whose handlers all promise it may then run at the same
        time as the handlers of the extensions after it (issue 20 target 2;
        docs/architecture.md, "Concurrent tool_call dispatch"). A handler that breaks
        the promise fails (the call is blocked, fail-closed).

        Raises:
            TypeError: ``event`` is not a string, ``handler`` is not callable or
                ``observe_only`` is not a boolean.
            StaleContextError: this ``pi`` belongs to an ended generation.
        """
        self._generation.check("pi.on")
        if not isinstance(event, str) or not event:
            raise TypeError("pi.on(event, handler): event must be a non-empty string")
        if not callable(handler):
            raise TypeError(f"pi.on({event!r}, handler): handler must be callable")
        if not isinstance(observe_only, bool):
            raise TypeError(f"pi.on({event!r}, handler): observe_only must be True or False")
        if observe_only:
            handler = ObserveOnly(handler)
        if len(event) > 128:
            raise ValueError("pi.on(event, handler): event names are at most 128 characters")
        _check_room(
            {e: h for e, h in self._handlers.items() if h}, event, MAX_EVENTS, "pi.on: events"
        )
        self._handlers.setdefault(event, []).append(handler)
        self._changed()

        def unsubscribe() -> None:
            handlers = self._handlers.get(event, [])
            if handler in handlers:
                handlers.remove(handler)
                self._changed()

        return unsubscribe

    def register_tool(
        self,
        *,
        name: str,
        description: str,
        parameters: Any = None,
        execute: Callable[..., Any],
        label: str | None = None,
        prompt_snippet: str | None = None,
        prompt_guidelines: list[str] | None = None,
        execution_mode: str = "parallel",
        exposure: str = "direct",
    ) -> None:
        """Register a tool the model can call.

        Args:
            name: 1–64 characters of ``[A-Za-z0-9_-]`` (what providers accept).
            description: shown to the model.
            parameters: a JSON Schema object (``{"type": "object", ...}``) or a pydantic
                model class (its ``model_json_schema()``); ``None`` means no parameters.
            execute: ``execute(params, ctx)``, sync or async.
            label: a human-readable name for UIs (defaults to ``name``).
            prompt_snippet: one line for the system prompt's tool list while the tool is
                active (defaults to the description's first line).
            prompt_guidelines: lines added to the system prompt's guidelines while active.
            execution_mode: ``"parallel"`` (default) or ``"sequential"``: a batch of tool
                calls that contains a sequential tool runs one call at a time.
            exposure: how the model reaches it (issue 19; pi docs extensions.md "Tool
                Exposure"): ``"direct"`` (default: declared while active),
                ``"deferred"`` (found and declared by ``tool_search``), ``"codemode"``
                (callable from codemode scripts only, until ``tool_search`` loads it)
                or ``"hidden"`` (registered but unreachable).

        Raises:
            ValueError / TypeError: an argument is missing or malformed (message names it).
        """
        self._generation.check("pi.register_tool")
        if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= _NAME_CHARS:
            raise ValueError(
                f"register_tool: name {name!r} must be 1-64 characters of [A-Za-z0-9_-]"
            )
        if not isinstance(description, str):
            raise TypeError(f"register_tool({name!r}): description must be a string")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        schema = _pydantic_schema(parameters)
        if schema is not None:
            parameters = schema
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ValueError(
                f"register_tool({name!r}): parameters must be a JSON Schema with type 'object' "
                "or a pydantic model class"
            )
        if not callable(execute):
            raise TypeError(f"register_tool({name!r}): execute must be callable")
        _check_json(f"register_tool({name!r}): parameters", parameters)
        if prompt_snippet is not None and not isinstance(prompt_snippet, str):
            raise TypeError(f"register_tool({name!r}): prompt_snippet must be a string")
        if prompt_guidelines is not None and (
            not isinstance(prompt_guidelines, list | tuple)
            or not all(isinstance(line, str) for line in prompt_guidelines)
        ):
            raise TypeError(f"register_tool({name!r}): prompt_guidelines must be a list of strings")
        if execution_mode not in EXECUTION_MODES:
            raise ValueError(
                f"register_tool({name!r}): execution_mode must be 'parallel' or 'sequential'"
            )
        if exposure not in EXPOSURES:
            raise ValueError(
                f"register_tool({name!r}): exposure must be one of {', '.join(EXPOSURES)}"
            )
        if name in self._tools and not self._bound:
            raise ValueError(
                f"register_tool: tool {name!r} is already registered by this extension"
            )
        _check_room(self._tools, name, MAX_TOOLS, "register_tool")
        _check_lengths(
            f"register_tool({name!r})",
            description=(description, 20_000),
            label=(label or "", 200),
            prompt_snippet=(prompt_snippet or "", 2_000),
            **{
                f"prompt_guidelines[{i}]": (g, 2_000) for i, g in enumerate(prompt_guidelines or [])
            },
        )
        if len(prompt_guidelines or []) > 50:
            raise ValueError(f"register_tool({name!r}): at most 50 prompt_guidelines")
        self._tools[name] = ToolRegistration(
            name=name,
            label=label or name,
            description=description,
            parameters=parameters,
            execute=execute,
            prompt_snippet=prompt_snippet,
            prompt_guidelines=list(prompt_guidelines or []),
            execution_mode=execution_mode,
            exposure=exposure,
        )
        self._changed()

    def register_command(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        description: str = "",
        completions: list[str] | Callable[[str], list[str]] | None = None,
    ) -> None:
        """Register ``/name``: ``handler(args, ctx)`` gets the text after the name and a
        `CommandContext`.

        Args:
            completions: argument completions, a list or ``fn(prefix) -> list``.

        Raises:
            ValueError / TypeError: bad name (1–64 of ``[A-Za-z0-9_.:-]``) or handler.
        """
        self._generation.check("pi.register_command")
        name = name.removeprefix("/") if isinstance(name, str) else name
        if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= _COMMAND_CHARS:
            raise ValueError(
                f"register_command: name {name!r} must be 1-64 characters of [A-Za-z0-9_.:-]"
            )
        if not callable(handler):
            raise TypeError(f"register_command({name!r}): handler must be callable")
        if not isinstance(description, str):
            raise TypeError(f"register_command({name!r}): description must be a string")
        if (
            completions is not None
            and not callable(completions)
            and (
                not isinstance(completions, list | tuple)
                or not all(isinstance(c, str) for c in completions)
            )
        ):
            raise TypeError(
                f"register_command({name!r}): completions must be a list of strings or a function"
            )
        _, colon, tail = name.rpartition(":")
        if colon and tail.isdigit():
            raise ValueError(
                f"register_command: {name!r} ends in ':<number>', which pi uses for "
                "commands two extensions registered (name:1, name:2)"
            )
        _check_room(self._commands, name, MAX_COMMANDS, "register_command")
        _check_lengths(f"register_command({name!r})", description=(str(description or ""), 2_000))
        if isinstance(completions, list | tuple) and (
            len(completions) > 500 or any(len(c) > 200 for c in completions)
        ):
            raise ValueError(
                f"register_command({name!r}): at most 500 completions of 200 characters"
            )
        self._commands[name] = {
            "description": str(description or ""),
            "handler": handler,
            "completions": completions,
        }
        self._changed()

    def register_flag(
        self, name: str, *, type: str = "bool", default: Any = None, description: str = ""
    ) -> None:
        """Register ``--name`` on pi's command line (parsed after extensions load).

        Args:
            type: ``"bool"`` (``--name``) or ``"string"`` (``--name VALUE``).
            default: the value when the flag is absent (False / None by default).

        Raises:
            ValueError: bad name or type.
        """
        self._generation.check("pi.register_flag")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or name[0] == "-":
            raise ValueError(f"register_flag: name {name!r} must be letters, digits, _ and -")
        if type not in ("bool", "string"):
            raise ValueError(f"register_flag({name!r}): type must be 'bool' or 'string'")
        if default is not None and not isinstance(default, bool | str):
            raise TypeError(f"register_flag({name!r}): default must be a bool, a string or None")
        _check_room(self._flags, name, MAX_FLAGS, "register_flag")
        _check_lengths(
            f"register_flag({name!r})", name=(name, 64), description=(str(description), 2_000)
        )
        if default is None and type == "bool":
            default = False
        self._flags[name] = {"type": type, "default": default, "description": str(description)}
        self._changed()

    def register_shortcut(
        self, key: str, handler: Callable[..., Any], *, description: str = ""
    ) -> None:
        """Register a keyboard shortcut (``"ctrl+shift+p"``) for interactive mode;
        ``handler(ctx)`` runs like a command."""
        self._generation.check("pi.register_shortcut")
        if not isinstance(key, str) or not key:
            raise ValueError("register_shortcut: key must be a non-empty string")
        if not callable(handler):
            raise TypeError(f"register_shortcut({key!r}): handler must be callable")
        _check_room(self._shortcuts, key, MAX_SHORTCUTS, "register_shortcut")
        _check_lengths(
            f"register_shortcut({key[:64]!r})", key=(key, 64), description=(str(description), 2_000)
        )
        self._shortcuts[key] = {"handler": handler, "description": str(description)}
        self._changed()

    def register_message_renderer(self, custom_type: str, renderer: Callable[..., Any]) -> None:
        """Register how custom messages of ``custom_type`` are shown by a UI."""
        self._generation.check("pi.register_message_renderer")
        if not isinstance(custom_type, str) or not custom_type:
            raise ValueError("register_message_renderer: custom_type must be a non-empty string")
        if not callable(renderer):
            raise TypeError(
                f"register_message_renderer({custom_type!r}): renderer must be callable"
            )
        _check_room(self._renderers, custom_type, MAX_RENDERERS, "register_message_renderer")
        self._renderers[custom_type] = renderer
        self._changed()

    def register_mcp_server(self, name: str, config: dict[str, Any]) -> None:
        """Add an MCP server for this session (pi ``registerMcpServer``, issue 19):
        ``config`` is an ``mcpServers`` entry (``command``/``args``/``env``/``cwd``
        or ``url``/``headers``, ``exposure``…). The supervisor validates it, needs
        the ``exec`` capability, and runs the server in its own sandbox like a
        configured one; a ``mcp.json`` server of the same name wins. Servers
        registered after the session started connect at the next reload.
        """
        self._generation.check("pi.register_mcp_server")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS:
            raise ValueError(f"register_mcp_server: name {name!r} must be letters, digits, _ and -")
        if not isinstance(config, dict):
            raise TypeError(f"register_mcp_server({name!r}): config must be a dict")
        _check_json(f"register_mcp_server({name!r}): config", config)
        _check_room(self._mcp_servers, name, MAX_PROVIDERS, "register_mcp_server")
        self._mcp_servers[name] = dict(config)
        self._changed()

    def register_provider(self, name: str, config: dict[str, Any]) -> None:
        """Register a model provider (``base_url``, ``api``, ``models``); queued until
        the extension is bound, then checked against the ``register_providers``
        capability by the supervisor.

        ``config["stream"]``, when given, is a function ``stream(request, ctx)``
        (plain or ``async``) that answers one model request in this worker
        (``pi --model NAME/MODEL``; issue 16): ``request`` is ``{"model",
        "system_prompt", "messages", "tools", "thinking_level"}`` (pi's message
        shapes), the result a string (the answer) or ``{"text": str, "tool_calls":
        [{"id", "name", "arguments"}], "stop_reason"?, "usage"?}``; or a generator
        that yields text (``str``, streamed to the user as it comes) and dicts
        (merged into the answer). Its network
        requests leave through the policy's egress proxy like any other code of the
        extension; it is given no key (it brings its own).
        """
        self._generation.check("pi.register_provider")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS:
            raise ValueError(f"register_provider: name {name!r} must be letters, digits, _ and -")
        if not isinstance(config, dict):
            raise TypeError(f"register_provider({name!r}): config must be a dict")
        stream = config.get("stream")
        if stream is not None and not callable(stream):
            raise TypeError(f"register_provider({name!r}): config['stream'] must be a function")
        wire = {k: v for k, v in config.items() if k != "stream"}
        _check_json(f"register_provider({name!r}): config", wire)
        _check_room(self._providers, name, MAX_PROVIDERS, "register_provider")
        # The supervisor learns only that the provider streams here, not the function.
        self._providers[name] = {**wire, **({"stream": True} if stream is not None else {})}
        if stream is not None:
            self._provider_streams[name] = stream
        else:
            self._provider_streams.pop(name, None)
        self._changed()

    # --- actions (after binding) --------------------------------------------------------------

    def send_message(
        self,
        message: dict[str, Any] | str,
        *,
        deliver_as: str | None = None,
        trigger_turn: bool = False,
    ) -> None:
        """Add a custom message to the session (``{"custom_type", "content", "display",
        "details"}``; a string is the content). ``deliver_as`` ``"steer"``/
        ``"follow_up"``/``"next_turn"`` when the agent is running; ``trigger_turn``
        starts a turn when it is idle."""
        if isinstance(message, str):
            message = {"content": message}
        if not isinstance(message, dict):
            raise TypeError("send_message: message must be a dict or a string")
        if not isinstance(message.get("content", ""), str | list):
            # The supervisor refuses it too (issue 13 §4); said here without a round trip.
            raise TypeError("send_message: content must be a string or a list of text/image blocks")
        if deliver_as is not None and deliver_as not in DELIVERY_MODES:
            raise ValueError(f"send_message: deliver_as must be None or one of {DELIVERY_MODES}")
        self._call(
            "pi.send_message",
            "send_message",
            message=message,
            deliver_as=deliver_as,
            trigger_turn=bool(trigger_turn),
        )

    def send_user_message(self, text: str, *, deliver_as: str = "steer") -> None:
        """Send a user message: ``"steer"`` (after the current tool calls),
        ``"follow_up"`` (after the agent finishes) or ``"next_turn"`` (with the next
        prompt). Needs the ``send_user_messages`` capability."""
        if deliver_as not in DELIVERY_MODES:
            raise ValueError(f"send_user_message: deliver_as must be one of {DELIVERY_MODES}")
        self._call(
            "pi.send_user_message", "send_user_message", text=str(text), deliver_as=deliver_as
        )

    def append_entry(self, custom_type: str, data: Any = None) -> str:
        """Append a custom entry (not sent to the model) to the session file; returns its id."""
        return self._call(
            "pi.append_entry", "append_entry", custom_type=str(custom_type), data=data
        )

    def set_session_name(self, name: str) -> None:
        """Name the session (a ``session_info`` entry)."""
        self._call("pi.set_session_name", "set_session_name", name=str(name))

    def get_session_name(self) -> str | None:
        """The session's name, or None."""
        return self._call("pi.get_session_name", "get_session_name")

    def set_label(self, entry_id: str, label: str | None) -> None:
        """Label a session entry (``None`` clears the label)."""
        self._call("pi.set_label", "set_label", entry_id=str(entry_id), label=label)

    def exec(
        self,
        command: str,
        args: list[str] | tuple[str, ...] = (),
        *,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Run ``command args…`` inside this extension's own sandbox (its worker), no shell.

        Returns:
            ``{"stdout": str, "stderr": str, "code": int, "killed": bool}``; ``killed``
            when ``timeout`` (seconds) passed (the process group is killed; without
            ``--sandbox`` a process that left the group with ``setsid`` survives).
            Each stream is cut at 10 MiB.

        Raises:
            CapabilityError: the policy did not grant ``exec`` (audited).
        """
        self._action("pi.exec")
        if not isinstance(command, str) or not command:
            raise TypeError("pi.exec(command, args): command must be a non-empty string")
        if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
            raise TypeError("pi.exec(command, args): args must be a list of strings")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < 10**9  # also refuses NaN and infinity
        ):
            raise ValueError("pi.exec: timeout must be a positive number of seconds")
        argv = [command, *[str(a) for a in args]]
        self._host.call("exec_check", {"argv": argv})
        import os
        import signal
        import subprocess
        import tempfile

        # Output goes to files, not pipes: a grandchild that leaves the process group
        # (setsid) and keeps a pipe open would make reading wait forever.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                process = subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                return {"stdout": "", "stderr": str(exc), "code": 127, "killed": False}
            killed = False
            RUNNING_EXEC_GROUPS.add(process.pid)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                # The whole process group: a shell's children must not outlive the call.
                killed = True
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
            finally:
                RUNNING_EXEC_GROUPS.discard(process.pid)
            limit = 10 * 1024 * 1024
            out.seek(0)
            err.seek(0)
            return {
                "stdout": out.read(limit).decode("utf-8", "replace"),
                "stderr": err.read(limit).decode("utf-8", "replace"),
                "code": -9 if killed else process.returncode,
                "killed": killed,
            }

    def get_active_tools(self) -> list[str]:
        """Names of the tools offered to the model."""
        return self._call("pi.get_active_tools", "get_active_tools")

    def get_all_tools(self) -> list[dict[str, Any]]:
        """Every registered tool: ``{"name", "description", "source", "active", "exposure"}``
        (``exposure``: issue 19, docs/mcp.md "Exposure")."""
        return self._call("pi.get_all_tools", "get_all_tools")

    def set_active_tools(self, names: list[str] | None) -> None:
        """Choose the active tools: ``None`` restores all, ``[]`` means none. Effective
        for the next provider request, the current run's included."""
        if names is not None and (
            not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names)
        ):
            raise TypeError("pi.set_active_tools(names): names must be a list of strings or None")
        self._call(
            "pi.set_active_tools",
            "set_active_tools",
            names=None if names is None else list(names),
        )

    def get_commands(self) -> list[dict[str, Any]]:
        """Every command: ``{"name", "description", "source"}`` (duplicates as ``name:N``)."""
        return self._call("pi.get_commands", "get_commands")

    def set_model(self, model: str) -> bool:
        """Switch the model (``provider/id``); needs the ``set_model`` capability."""
        return self._call("pi.set_model", "set_model", model=str(model))

    def get_thinking_level(self) -> str:
        """The thinking level: one of ``off minimal low medium high xhigh``."""
        return self._call("pi.get_thinking_level", "get_thinking_level")

    def set_thinking_level(self, level: str) -> None:
        """Set the thinking level (see `get_thinking_level`)."""
        if level not in THINKING_LEVELS:
            raise ValueError(f"set_thinking_level: level must be one of {THINKING_LEVELS}")
        self._call("pi.set_thinking_level", "set_thinking_level", level=level)

    def get_flag(self, name: str) -> Any:
        """The value of a flag this extension registered (its default when absent)."""
        return self._call("pi.get_flag", "get_flag", name=str(name))

    def request_reload(self) -> None:
        """Ask for a reload once the agent settles (coalesced; ignored during a reload)."""
        self._call("pi.request_reload", "request_reload")

    # Read by the worker runtime only.
    def _registrations(self) -> dict[str, Any]:
        commands = []
        for name, command in self._commands.items():
            completions = command["completions"]
            commands.append(
                {
                    "name": name,
                    "description": command["description"],
                    "completions": list(completions)
                    if isinstance(completions, list | tuple)
                    else [],
                    "dynamic_completions": callable(completions),
                }
            )
        return {
            "tools": [tool.definition() for tool in self._tools.values()],
            "events": sorted(event for event, handlers in self._handlers.items() if handlers),
            # Events whose every handler promised to only look (``observe_only``).
            "observers": sorted(
                event
                for event, handlers in self._handlers.items()
                if handlers and all(isinstance(h, ObserveOnly) for h in handlers)
            ),
            "commands": commands,
            "flags": [{"name": n, **f} for n, f in self._flags.items()],
            "shortcuts": [
                {"key": k, "description": s["description"]} for k, s in self._shortcuts.items()
            ],
            "renderers": sorted(self._renderers),
            "providers": [{"name": n, "config": c} for n, c in self._providers.items()],
            "mcp_servers": [{"name": n, "config": c} for n, c in self._mcp_servers.items()],
            "channels": self.events.channels(),
        }


class UserInterface:
    """``ctx.ui``: dialogs and status through the supervisor's user interface.

    Without a UI (``ctx.has_ui`` False: print and json modes) dialogs return their
    default (``None``, ``False``) at once and ``notify``/``set_status``/``set_widget``/
    ``set_title`` become events on the output. Every dialog takes ``timeout`` (seconds) and returns
    the default when it passes; ``ctx.signal`` aborts it. Needs the ``ui`` capability.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def _ui(self, kind: str, timeout: float | None = None, **args: Any) -> Any:
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < 10**9  # also refuses NaN and infinity
        ):
            raise ValueError(f"ctx.ui.{kind}: timeout must be a positive number of seconds")
        return self._ctx._call(f"ctx.ui.{kind}", "ui", kind=kind, timeout=timeout, **args)

    def select(self, title: str, options: list[str], *, timeout: float | None = None) -> str | None:
        """Pick one of ``options`` (a non-empty list of strings); None when dismissed,
        timed out or without a UI."""
        if not isinstance(options, list | tuple) or not options:
            raise TypeError("ctx.ui.select(title, options): options must be a non-empty list")
        return self._ui("select", timeout, title=str(title), options=[str(o) for o in options])

    def confirm(self, title: str, message: str = "", *, timeout: float | None = None) -> bool:
        """Yes/no; False when dismissed, timed out or without a UI."""
        return bool(self._ui("confirm", timeout, title=str(title), message=str(message)))

    def input(
        self, title: str, placeholder: str = "", *, timeout: float | None = None
    ) -> str | None:
        """One line of text; None when dismissed."""
        return self._ui("input", timeout, title=str(title), placeholder=str(placeholder))

    def editor(self, title: str, prefill: str = "", *, timeout: float | None = None) -> str | None:
        """Multi-line text; None when dismissed."""
        return self._ui("editor", timeout, title=str(title), prefill=str(prefill))

    def notify(self, message: str, level: str = "info") -> None:
        """Show a notification (``info``, ``warning``, ``error``)."""
        self._ui("notify", None, message=str(message), level=str(level))

    def set_status(self, key: str, text: str | None) -> None:
        """Set (or clear with None) a status line entry."""
        self._ui("set_status", None, key=str(key), text=text)

    def set_widget(self, key: str, lines: list[str] | None) -> None:
        """Set (or clear with None) a widget's lines."""
        self._ui("set_widget", None, key=str(key), lines=lines)

    def set_title(self, title: str) -> None:
        """Set the terminal window's title (pi docs extensions.md ``ctx.ui.setTitle``);
        a ``ui_set_title`` event."""
        self._ui("set_title", None, title=str(title))

    def set_editor_text(self, text: str) -> None:
        """Put ``text`` in the user's input editor (pi docs extensions.md
        ``ctx.ui.setEditorText``); a ``ui_set_editor_text`` event (RPC:
        ``extension_ui_request`` method ``set_editor_text``, rpc-extension-ui.md)."""
        self._ui("set_editor_text", None, text=str(text))


class SessionManagerView:
    """``ctx.session_manager``: read-only views of the current session (fetched on use)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def _get(self, what: str) -> Any:
        return self._ctx._call(f"ctx.session_manager.{what}", "session", what=what)

    def get_entries(self) -> list[dict[str, Any]]:
        """Every entry of the session file (header excluded), in file order."""
        return self._get("entries")

    def get_branch(self) -> list[dict[str, Any]]:
        """The entries from the root to the current leaf."""
        return self._get("branch")

    def get_leaf_id(self) -> str | None:
        """The id of the current leaf entry."""
        return self._get("leaf_id")

    def get_session_file(self) -> str | None:
        """The session file's path (None with ``--no-session``)."""
        return self._get("session_file")

    def get_session_id(self) -> str:
        """The session's id."""
        return self._get("session_id")

    def get_labels(self) -> dict[str, str]:
        """``{entry id: label}`` for every labelled entry (the latest ``label``
        entry of each wins; issue 15)."""
        return self._get("labels")

    def get_label(self, entry_id: str) -> str | None:
        """The label of one entry, or None (pi's ``sessionManager.getLabel``)."""
        return self.get_labels().get(str(entry_id))


class Context:
    """What a handler or tool knows about the running session.

    Attributes:
        cwd: the session's working directory (absolute path string).
        has_ui: whether a user interface can answer dialogs (False in print/json modes).
        mode: ``"print"``, ``"json"``, ``"rpc"`` or ``"interactive"``.
        signal: a ``threading.Event`` set when the supervisor cancels this operation
            (abort, deadline); long handlers should poll it.
        capabilities: what the policy granted this extension (``{"exec": bool, …}``).
        ui: `UserInterface`; session_manager: `SessionManagerView`.
    """

    def __init__(
        self,
        *,
        cwd: str,
        has_ui: bool,
        mode: str,
        signal: threading.Event | None = None,
        host: Any = None,
        generation: Generation | None = None,
        capabilities: dict[str, bool] | None = None,
        trust: str | None = None,
    ) -> None:
        self._generation = generation or Generation()
        self._host = host or _NoHost()
        self._cwd = cwd
        self._has_ui = has_ui
        self._mode = mode
        self._signal = signal or threading.Event()
        self._capabilities = dict(capabilities or {})
        self._trust = trust
        self.ui = UserInterface(self)
        self.session_manager = SessionManagerView(self)

    def _check(self, what: str) -> None:
        self._generation.check(what)

    def _call(self, what: str, op: str, /, **args: Any) -> Any:
        self._check(what)
        return self._host.call(op, args)

    @property
    def cwd(self) -> str:
        self._check("ctx.cwd")
        return self._cwd

    @property
    def has_ui(self) -> bool:
        self._check("ctx.has_ui")
        return self._has_ui

    @property
    def mode(self) -> str:
        self._check("ctx.mode")
        return self._mode

    @property
    def signal(self) -> threading.Event:
        self._check("ctx.signal")
        return self._signal

    @property
    def capabilities(self) -> dict[str, bool]:
        self._check("ctx.capabilities")
        return dict(self._capabilities)

    @property
    def aborted(self) -> bool:
        """True once the supervisor cancelled the current operation."""
        return self.signal.is_set()

    @property
    def model(self) -> dict[str, Any] | None:
        """The current model: ``{"provider", "id"}`` (fetched when read)."""
        return self._call("ctx.model", "get_model")

    def is_project_trusted(self) -> bool:
        """Whether the project is trusted (``yes``; ``sandboxed`` is not)."""
        self._check("ctx.is_project_trusted")
        return self._trust == "yes"

    @property
    def trust(self) -> str | None:
        """The project trust level: ``"yes"``, ``"no"``, ``"sandboxed"`` or None."""
        self._check("ctx.trust")
        return self._trust

    def is_idle(self) -> bool:
        """Whether the agent is idle (no run in progress)."""
        return bool(self._call("ctx.is_idle", "is_idle"))

    def abort(self) -> None:
        """Abort the current run (returns at once; the run ends at its next check)."""
        self._call("ctx.abort", "abort")

    def compact(self, instructions: str | None = None) -> None:
        """Compact the session's context now."""
        self._call("ctx.compact", "compact", instructions=instructions)

    def get_system_prompt(self) -> str:
        """The system prompt of the next provider request."""
        return self._call("ctx.get_system_prompt", "get_system_prompt")


class CommandContext(Context):
    """The context of a command handler: `Context` plus session control.

    Each session-replacing method runs the replacement and returns
    ``{"cancelled": bool}``; afterwards this context and its ``pi`` are stale. A
    ``with_session`` callback runs in the new generation's worker after its
    ``session_start``; it must be a module-level function of the extension (it is
    found again by name in the fresh process) and receives ``(ctx)``.
    """

    def _session_call(self, what: str, op: str, with_session: Any = None, /, **args: Any) -> Any:
        if with_session is not None:
            args["with_session"] = _callback_name(with_session, what)
        return self._call(what, op, **args)

    def wait_for_idle(self, timeout: float | None = None) -> bool:
        """Block until the agent is idle; False when ``timeout`` passed first."""
        return bool(self._call("ctx.wait_for_idle", "wait_for_idle", timeout=timeout))

    def new_session(self, *, with_session: Any = None) -> dict[str, Any]:
        """Start a new session (``session_before_switch`` may cancel it)."""
        return self._session_call("ctx.new_session", "new_session", with_session)

    def fork(self, entry_id: str, *, with_session: Any = None) -> dict[str, Any]:
        """Fork the session at ``entry_id`` into a new session file."""
        return self._session_call("ctx.fork", "fork", with_session, entry_id=str(entry_id))

    def switch_session(self, session_file: str, *, with_session: Any = None) -> dict[str, Any]:
        """Switch to another session file of this project."""
        return self._session_call(
            "ctx.switch_session", "switch_session", with_session, session_file=str(session_file)
        )

    def navigate_tree(self, target_id: str, *, with_session: Any = None) -> dict[str, Any]:
        """Move the session's leaf to ``target_id`` (a branch point)."""
        return self._session_call(
            "ctx.navigate_tree", "navigate_tree", with_session, target_id=str(target_id)
        )

    def reload(self, *, with_session: Any = None) -> dict[str, Any]:
        """Reload extensions, settings and resources (refused while a run is active)."""
        return self._session_call("ctx.reload", "reload", with_session)


def _callback_name(callback: Any, what: str) -> str:
    name = getattr(callback, "__qualname__", "")
    if not callable(callback) or not name or "<" in name:
        raise TypeError(
            f"{what}(with_session=...): the callback must be a module-level function of the "
            "extension (it runs in the new session's worker process and is found there by name)"
        )
    return name
