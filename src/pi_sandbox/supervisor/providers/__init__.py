"""Model providers (supervisor only): the ``Provider`` interface and its implementations.

``create_provider`` turns the command line's ``--model PROVIDER[/ID]`` into a provider.
"""

from __future__ import annotations

from pathlib import Path

from pi_sandbox.errors import UsageError

from .base import AssistantTurn, Provider, ToolCall, ToolDefinition
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


def __getattr__(name: str) -> object:
    # The HTTP providers are imported only when used: CLI start-up must not pay for
    # them (issue 16, "CLI start-up unchanged"; issue 20: httpx alone is ~75 ms of a
    # scripted run's start-up; tests/unit/test_provider_imports.py).
    if name == "AnthropicProvider":
        from .anthropic import AnthropicProvider

        return AnthropicProvider
    if name == "OpenAIProvider":
        from .openai import OpenAIProvider

        return OpenAIProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_provider(
    spec: str,
    *,
    script: Path | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    agent_dir: Path | None = None,
) -> Provider:
    """Build the provider named by ``spec``.

    Args:
        spec: ``scripted``, ``PROVIDER/ID`` (the id may itself contain slashes, e.g.
            ``openai/meta-llama/Llama-3.1-8B``; an id the catalogue does not list is
            sent as is), or a bare pattern resolved through the catalogue (pi's
            ``--model`` rules, ``model_selection.resolve_pattern``). A ``:LEVEL``
            suffix is accepted and ignored here (the run applies it).
        script: the YAML script, required by ``scripted``; ignored otherwise.
        base_url: API root overriding the model's (``--base-url``).
        api_key: ``--api-key``; otherwise auth.json, models.json, then the
            provider's environment variable (pi's precedence). It may be missing
            only when the endpoint is not the provider's public one.
        agent_dir: the user's agent directory (auth.json, models.json); None reads
            neither.

    Returns:
        A ``ScriptedProvider``, an ``OpenAIProvider`` or (when built in) an
        ``AnthropicProvider``. Options that do not apply are ignored.

    Raises:
        UsageError: unknown provider (names ``--model`` and the known ones), a missing
            model id, ``scripted`` without ``--script`` or with a model id, or a
            public endpoint without a key; a bad models.json or auth.json.
        ProviderError: the script file is unreadable or malformed.
    """
    provider, _, model = spec.partition("/")
    if provider == "scripted":
        if model:
            raise UsageError(f"--model {spec!r}: the scripted provider takes no model id")
        if script is None:
            raise UsageError("--model scripted needs --script FILE (a YAML list of turns)")
        return ScriptedProvider(script)
    from .model_selection import choose_model

    choice, factory = choose_model(
        agent_dir=agent_dir, project_dir=None, model=spec, cli_key=api_key, base_url=base_url
    )
    return factory.build(choice.model, initial=True)
