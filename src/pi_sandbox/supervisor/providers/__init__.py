"""Model providers (supervisor only): the ``Provider`` interface and its implementations.

``create_provider`` turns the command line's ``--model PROVIDER[/ID]`` into a provider.
"""

from __future__ import annotations

import os
from pathlib import Path

from pi_sandbox.errors import UsageError

from .base import AssistantTurn, Provider, ToolCall, ToolDefinition
from .openai import OpenAIProvider
from .scripted import ScriptedProvider

__all__ = [
    "AnthropicProvider",
    "AssistantTurn",
    "OpenAIProvider",
    "Provider",
    "ScriptedProvider",
    "ToolCall",
    "ToolDefinition",
    "create_provider",
]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_MAX_TOKENS = 8192
_KNOWN = ("anthropic/MODEL", "openai/MODEL", "scripted")


def __getattr__(name: str) -> object:
    # The Anthropic provider is imported only when used: CLI start-up must not pay
    # for it (issue 16, "CLI start-up unchanged"; tests/unit/test_provider_imports.py).
    if name == "AnthropicProvider":
        from .anthropic import AnthropicProvider

        return AnthropicProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_provider(
    spec: str,
    *,
    script: Path | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Provider:
    """Build the provider named by ``spec``.

    Args:
        spec: ``PROVIDER[/ID]``: ``scripted``, ``openai/MODEL`` or ``anthropic/MODEL``
            (the model id may itself contain slashes, e.g.
            ``openai/meta-llama/Llama-3.1-8B``).
        script: the YAML script, required by ``scripted``; ignored otherwise.
        base_url: API root for ``openai`` (default ``https://api.openai.com/v1``) or
            ``anthropic`` (default ``https://api.anthropic.com``).
        api_key: key for ``openai`` / ``anthropic``; default ``$OPENAI_API_KEY`` /
            ``$ANTHROPIC_API_KEY``. It may be missing only when ``base_url`` is given
            (a local server needs none).

    Returns:
        A ``ScriptedProvider``, an ``OpenAIProvider`` or an ``AnthropicProvider``
        (imported only then). Options that do not apply to
        the chosen provider are ignored.

    Raises:
        UsageError: unknown provider (names ``--model`` and the known ones), a missing
            model id, ``scripted`` without ``--script`` or with a model id, or
            ``openai`` against the default endpoint without a key.
        ProviderError: the script file is unreadable or malformed; the Anthropic key
            cannot be sent in a header.
    """
    provider, _, model = spec.partition("/")
    if provider == "scripted":
        if model:
            raise UsageError(f"--model {spec!r}: the scripted provider takes no model id")
        if script is None:
            raise UsageError("--model scripted needs --script FILE (a YAML list of turns)")
        return ScriptedProvider(script)
    if provider == "openai":
        if not model:
            raise UsageError(
                f"--model {spec!r}: name the model after a slash, e.g. openai/gpt-4o-mini"
            )
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None and base_url is None:
            raise UsageError(
                f"--model {spec!r}: no API key; set OPENAI_API_KEY "
                "(a key may be omitted only for a local server given by base URL)"
            )
        return OpenAIProvider(model, base_url or OPENAI_DEFAULT_BASE_URL, key)
    if provider == "anthropic":
        return _anthropic(spec, model, base_url, api_key)
    raise UsageError(f"--model {spec!r}: unknown provider {provider!r}; known: {', '.join(_KNOWN)}")


def _anthropic(spec: str, model: str, base_url: str | None, api_key: str | None) -> Provider:
    """``anthropic/MODEL``: key from ``--api-key`` or ``$ANTHROPIC_API_KEY`` (pi
    providers.md); without one only an explicit base URL (a local proxy) is allowed."""
    if not model:
        raise UsageError(
            f"--model {spec!r}: name the model after a slash, e.g. anthropic/claude-sonnet-4-5"
        )
    key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
    if key is None and base_url is None:
        raise UsageError(
            f"--model {spec!r}: no API key; set ANTHROPIC_API_KEY "
            "(a key may be omitted only for a local server given by base URL)"
        )
    from .anthropic import ANTHROPIC_DEFAULT_BASE_URL, AnthropicProvider

    return AnthropicProvider(
        model,
        base_url or ANTHROPIC_DEFAULT_BASE_URL,
        key,
        max_tokens=ANTHROPIC_DEFAULT_MAX_TOKENS,
    )
