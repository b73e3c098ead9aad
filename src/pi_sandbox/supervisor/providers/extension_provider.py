"""A provider an extension registered with ``pi.register_provider(name, {"stream": fn})``.

The extension's ``stream`` function runs in the extension's own worker (issue 16):
this object only forwards the request (``provider/stream``) and checks the answer.
So the provider's network requests leave through that worker's sandbox — the egress
proxy and the policy's allowlist, when the extension has the ``network``
capability, no network otherwise — and it is given no key: the request carries the
conversation and tools, never a key, and the worker's environment and sandbox hold
none (``worker_pool.unsandboxed_env``, the sandbox masks ``auth.json`` and
``models.json``).
"""

from __future__ import annotations

from typing import Any

from pi_sandbox.errors import PiSandboxError, ProviderError, UsageError

from .base import (
    AssistantEventCallback,
    AssistantTurn,
    TextDeltaCallback,
    ToolCall,
    ToolDefinition,
)

__all__ = ["MAX_STREAMED_CHARS", "PROVIDER_TIMEOUT_S", "ExtensionProvider"]

PROVIDER_TIMEOUT_S = 600.0
"""How long one request to an extension's provider may take, in seconds."""

MAX_STREAMED_CHARS = 4 * 1024 * 1024
"""Text forwarded as it streams, per request; the rest still arrives in the answer."""

_STOP_REASONS = ("stop", "length", "toolUse", "error", "aborted")


class ExtensionProvider:
    """``--model NAME/MODEL`` for a provider an extension registers.

    The extensions load after the provider is chosen, so the object starts unbound;
    ``bind(pool)`` checks that an extension registered a streaming provider ``name``
    (and that the policy granted ``register_providers``: refused ones are absent
    from ``pool.providers``).
    """

    api = "extension"

    def __init__(self, name: str, model: str) -> None:
        self.name = name
        self.model = model
        self.pool: Any = None

    def __repr__(self) -> str:
        return f"ExtensionProvider(name={self.name!r}, model={self.model!r})"

    def bind(self, pool: Any) -> None:
        """Attach the started worker pool.

        Raises:
            UsageError: no extension registered a provider ``name`` with a ``stream``
                function (names the provider and what was registered).
        """
        registered = getattr(pool, "providers", {}) or {}
        entry = registered.get(self.name)
        if entry is None or not entry[1].get("stream"):
            known = ", ".join(sorted(registered)) or "none"
            raise UsageError(
                f"--model {self.name}/{self.model}: no provider {self.name!r} (not in the "
                f"catalogue or models.json, and no extension registered one with a stream "
                f"function; extension providers: {known})"
            )
        self.pool = pool

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
        """Run one request in the extension's worker. Text a ``stream`` generator
        yields reaches ``on_text_delta`` as it comes (``provider/delta``); a plain
        function's answer arrives as one delta. Raises ``ProviderError`` when the
        extension is disabled, fails, times out, or answers in the wrong shape."""
        if self.pool is None:
            raise ProviderError(f"{self.name}/{self.model}: the extension provider is not bound")
        path, _ = self.pool.providers[self.name]
        index = next(
            (i for i, (source, _) in enumerate(self.pool.extensions) if str(source.path) == path),
            None,
        )
        worker = await self.pool.ensure_extension_worker(index) if index is not None else None
        if worker is None:
            raise ProviderError(f"{self.name}/{self.model}: its extension {path} is disabled")
        from pi_sandbox.protocol import methods

        forwarded = 0

        async def on_delta(_worker: Any, message: Any) -> None:
            # Text as the extension produces it (a `stream` generator's yields).
            nonlocal forwarded
            delta = (message.params or {}).get("delta")
            if not isinstance(delta, str) or forwarded + len(delta) > MAX_STREAMED_CHARS:
                return
            forwarded += len(delta)
            if on_text_delta is not None:
                await on_text_delta(delta)

        worker.provider_deltas = on_delta
        try:
            result = await worker.request(
                methods.PROVIDER_STREAM,
                {
                    "provider": self.name,
                    "model": self.model,
                    "system_prompt": system_prompt,
                    "messages": messages,
                    "tools": [
                        {"name": t.name, "description": t.description, "parameters": t.parameters}
                        for t in tools
                    ],
                    "thinking_level": thinking_level,
                    "ctx": self.pool._ctx(),
                },
                timeout_s=PROVIDER_TIMEOUT_S,
            )
        except PiSandboxError as exc:
            raise ProviderError(f"{self.name}/{self.model}: {exc}") from None
        finally:
            worker.provider_deltas = None
        turn = _turn(self.name, self.model, result)
        if turn.text and on_text_delta is not None and not forwarded:
            await on_text_delta(turn.text)  # a plain function answers whole
        return turn


def _turn(name: str, model: str, result: Any) -> AssistantTurn:
    where = f"{name}/{model}: the extension's answer"
    if not isinstance(result, dict):
        raise ProviderError(f"{where} is not an object")
    text = result.get("text", "")
    if not isinstance(text, str):
        raise ProviderError(f"{where}: 'text' must be a string")
    calls = []
    for index, call in enumerate(result.get("tool_calls") or []):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not isinstance(call.get("arguments", {}), dict)
        ):
            raise ProviderError(
                f"{where}: tool_calls[{index}] must be {{'id', 'name', 'arguments': object}}"
            )
        calls.append(
            ToolCall(
                str(call.get("id") or f"{name}-call-{index}"),
                call["name"],
                call.get("arguments", {}),
            )
        )
    stop = result.get("stop_reason") or ("toolUse" if calls else "stop")
    if stop not in _STOP_REASONS:
        raise ProviderError(f"{where}: unknown stop_reason {stop!r}")
    usage = result.get("usage")
    return AssistantTurn(
        text=text,
        tool_calls=calls,
        stop_reason=stop,
        usage=dict(usage) if isinstance(usage, dict) else {},
        provider=name,
        model=model,
        api="extension",
    )
