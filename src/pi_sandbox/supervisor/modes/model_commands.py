"""Model and thinking-level switching, and usage totals (issue 16; pi docs
rpc-commands.md "Model", "Thinking", ``get_session_stats``).

``ModelControl`` is the run's handle on which model answers: RPC ``set_model``,
``cycle_model``, ``get_available_models``, ``set_thinking_level``,
``cycle_thinking_level``, ``get_available_thinking_levels`` and
``get_session_stats`` go through it. A switch writes a ``model_change`` or
``thinking_level_change`` entry. Keys never leave the supervisor: a new provider is
built by the run's ``ProviderFactory``.
"""

from __future__ import annotations

from typing import Any

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.providers.base import THINKING_LEVELS
from pi_sandbox.supervisor.providers.catalogue import ModelInfo

__all__ = ["MODEL_COMMANDS", "ModelControl", "session_stats", "usage_line"]

MODEL_COMMANDS = frozenset(
    {
        "get_available_models",
        "set_model",
        "cycle_model",
        "set_thinking_level",
        "cycle_thinking_level",
        "get_available_thinking_levels",
        "get_session_stats",
    }
)
"""The RPC command types ``ModelControl.handle`` answers."""


class ModelControl:
    """The current model of ``session`` and the ways to change it.

    Args:
        session: the ``AgentSession`` (its ``provider``, ``thinking_level``, ``writer``).
        model: the model the run started with (None for the scripted provider).
        factory: the run's ``ProviderFactory`` (None: no switching).
        scope: ``--models``/``enabledModels`` as ``(model, level or None)``.
    """

    def __init__(
        self,
        session: Any,
        model: ModelInfo | None,
        factory: Any,
        scope: list[tuple[ModelInfo, str | None]] | None = None,
    ) -> None:
        self.session = session
        self.model = model
        self.factory = factory
        self.scope = list(scope or [])

    @property
    def current(self) -> ModelInfo:
        """The model answering now: `model`, or for a provider outside the catalogue
        (the scripted one, an extension's) a Model object describing it, so that
        RPC ``get_state``/``get_available_models`` always have pi's Model shape."""
        if self.model is not None:
            return self.model
        provider = self.session.provider
        name, model_id = str(provider.name), str(provider.model)
        api = str(getattr(provider, "api", None) or name)
        return ModelInfo(provider=name, id=model_id, name=model_id, api=api, base_url="")

    def available(self) -> list[ModelInfo]:
        """pi's "available models": those whose provider has a key (or needs none)."""
        if self.factory is None:
            return [self.current]
        return self.factory.available()

    def _switch(self, model: ModelInfo, level: str | None) -> None:
        if self.session.running:
            raise UsageError("cannot change the model while the agent is running")
        provider = self.factory.build(model)
        self.session.provider = provider
        self.model = model
        self.session.writer.append_model_change(model.provider, model.id)
        wanted = level or self.session.thinking_level
        self._set_level(model.clamp_thinking(wanted) if model.reasoning else "off")

    def _set_level(self, level: str) -> None:
        if level != self.session.thinking_level:
            self.session.thinking_level = level
            self.session.writer.append_thinking_level_change(level)

    def set_model(self, provider: Any, model_id: Any) -> dict[str, Any]:
        """RPC ``set_model``: switch to ``provider``/``model_id``; returns the Model
        object. Raises ``UsageError`` for an unknown model or a provider without a key."""
        if self.factory is None:
            current = self.current
            if (provider, model_id) == (current.provider, current.id):
                return current.as_dict()  # the model already answering: nothing to switch
            raise UsageError("set_model: this run's provider cannot be switched (scripted)")
        if not isinstance(provider, str) or not isinstance(model_id, str) or not model_id:
            raise UsageError("set_model: 'provider' and 'modelId' must be strings")
        info = self.factory.catalogue.providers.get(provider)
        if info is None:
            raise UsageError(f"set_model: unknown provider {provider!r}")
        model = info.find(model_id) or info.adhoc(model_id)
        self._switch(model, None)
        return model.as_dict()

    def cycle_model(self) -> dict[str, Any] | None:
        """RPC ``cycle_model``: the next model of the scope (or of the available
        models); None when there is only one."""
        if self.factory is None:
            return None
        scoped = bool(self.scope)
        ring = self.scope or [(m, None) for m in self.available()]
        if len(ring) < 2:
            return None
        refs = [m.ref for m, _ in ring]
        current = self.model.ref if self.model is not None else None
        index = (refs.index(current) + 1) % len(ring) if current in refs else 0
        model, level = ring[index]
        self._switch(model, level)
        return {
            "model": model.as_dict(),
            "thinkingLevel": self.session.thinking_level,
            "isScoped": scoped,
        }

    def levels(self) -> list[str]:
        """The levels the current model takes (``["off"]`` without reasoning)."""
        return self.model.thinking_levels() if self.model is not None else ["off"]

    def set_thinking_level(self, level: Any) -> None:
        """RPC ``set_thinking_level``; clamped to the model (pi). Raises
        ``UsageError`` for a level that is not one of ``THINKING_LEVELS``."""
        if level == "max":
            level = "xhigh"
        if level not in THINKING_LEVELS:
            raise UsageError(
                f"set_thinking_level: 'level' must be one of {', '.join(THINKING_LEVELS)}"
            )
        levels = self.levels()
        self._set_level(level if level in levels else levels[-1] if level != "off" else "off")

    def cycle_thinking_level(self) -> dict[str, str] | None:
        """RPC ``cycle_thinking_level``: the next level; None without reasoning."""
        levels = self.levels()
        if len(levels) < 2:
            return None
        current = self.session.thinking_level
        index = (levels.index(current) + 1) % len(levels) if current in levels else 0
        self._set_level(levels[index])
        return {"level": levels[index]}

    def handle(self, command: dict[str, Any]) -> Any:
        """Answer one RPC command of ``MODEL_COMMANDS``; returns the ``data``.

        Raises:
            UsageError: bad arguments, unknown model, missing key, agent running.
        """
        kind = command["type"]
        if kind == "get_available_models":
            return {"models": [m.as_dict() for m in self.available()]}
        if kind == "set_model":
            return self.set_model(command.get("provider"), command.get("modelId"))
        if kind == "cycle_model":
            return self.cycle_model()
        if kind == "set_thinking_level":
            self.set_thinking_level(command.get("level"))
            return None
        if kind == "cycle_thinking_level":
            return self.cycle_thinking_level()
        if kind == "get_available_thinking_levels":
            return {"levels": self.levels()}
        if kind == "get_session_stats":
            return session_stats(self.session, self.current)
        raise UsageError(f"unknown command type {kind!r}")


def session_stats(session: Any, model: ModelInfo | None) -> dict[str, Any]:
    """pi's ``get_session_stats`` data (rpc-commands.md): message counts, summed
    token usage and cost (USD) of the assistant messages on the session's current
    branch, and the context use of the last one against the model's window."""
    from pi_sandbox.supervisor.providers.base import normalise_usage

    writer = session.writer
    messages = writer.messages()
    tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    cost = 0.0
    counts = {"user": 0, "assistant": 0, "toolResult": 0}
    tool_calls = 0
    last: dict[str, Any] | None = None
    for message in messages:
        role = message.get("role")
        if role in counts:
            counts[role] += 1
        if role != "assistant":
            continue
        tool_calls += sum(
            1
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "toolCall"
        )
        usage = normalise_usage(message.get("usage"))
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            tokens[key] += usage[key]
        tokens["total"] += usage["totalTokens"]
        cost += usage["cost"]["total"]
        last = usage
    data: dict[str, Any] = {
        "sessionFile": str(writer.path) if writer.path is not None else None,
        "sessionId": writer.header.id,
        "userMessages": counts["user"],
        "assistantMessages": counts["assistant"],
        "toolCalls": tool_calls,
        "toolResults": counts["toolResult"],
        "totalMessages": len(messages),
        "tokens": tokens,
        "cost": cost,
    }
    if model is not None and model.context_window:
        used = last["totalTokens"] if last is not None else None
        data["contextUsage"] = {
            "tokens": used,
            "contextWindow": model.context_window,
            "percent": round(100 * used / model.context_window, 1) if used is not None else None,
        }
    return data


def usage_line(stats: dict[str, Any], model_ref: str) -> str:
    """The ``--verbose`` end-of-run line of print mode, e.g. ``usage: 1,204 input,
    87 output, 0 cache read, 0 cache write tokens; cost $0.000233 (openai/gpt-4o-mini)``."""
    t = stats["tokens"]
    return (
        f"usage: {t['input']:,} input, {t['output']:,} output, {t['cacheRead']:,} cache read, "
        f"{t['cacheWrite']:,} cache write tokens; cost ${stats['cost']:.6f} ({model_ref})"
    )
