"""Choosing the model, thinking level and key of a run (supervisor only).

Inputs, strongest first (pi docs cli.md "Models", settings.md "Model and thinking"):
``--model PATTERN[:LEVEL]`` (``--provider`` restricts it), ``--thinking LEVEL``,
``--models A,B`` (the cycling scope; its first entry starts when ``--model`` is
absent), settings ``defaultProvider``/``defaultModel``/``modelThinkingLevels``/
``defaultThinkingLevel``/``enabledModels``/``thinkingBudgets`` (project ``.pi/settings.json`` over the user's, the project only
when trusted), then the first built-in provider with a key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.errors import UsageError

from .auth_store import KeySource, read_auth, resolve_key
from .base import THINKING_LEVELS, Provider
from .catalogue import Catalogue, ModelInfo, split_thinking_suffix
from .models_config import load_catalogue

__all__ = [
    "ModelChoice",
    "ModelSettings",
    "ProviderFactory",
    "UnknownProviderError",
    "read_model_settings",
    "resolve_pattern",
    "resolve_scope",
]

DEFAULT_THINKING_LEVEL = "medium"
"""pi's ``defaultThinkingLevel`` default (settings.md); clamped to ``off`` for models
without reasoning."""

_FALLBACK_PROVIDERS = ("openai", "anthropic")


class UnknownProviderError(UsageError):
    """``--model PROVIDER/ID`` names a provider neither the catalogue nor models.json
    knows (an extension may still register it: ``extension_provider``)."""


@dataclass
class ModelSettings:
    """The model keys of settings.json (pi docs settings.md); None when unset."""

    default_provider: str | None = None
    default_model: str | None = None
    default_thinking_level: str | None = None
    enabled_models: list[str] | None = None
    model_thinking_levels: dict[str, str] | None = None
    thinking_budgets: dict[str, int] | None = None


def read_model_settings(agent_dir: Path | None, project_dir: Path | None) -> ModelSettings:
    """``defaultProvider``, ``defaultModel``, ``defaultThinkingLevel``,
    ``modelThinkingLevels``, ``thinkingBudgets`` and ``enabledModels`` (pi docs
    settings.md) from ``<agent_dir>/settings.json`` then (``project_dir`` given only
    for a trusted project) ``<project>/.pi/settings.json``, the project's winning
    (the two objects merge key by key).

    A missing or malformed file contributes nothing (extension discovery reports a
    malformed settings file). Raises ``UsageError`` naming file and field when one of
    these keys has the wrong type or an unknown thinking level.
    """
    out = ModelSettings()
    files = []
    if agent_dir is not None:
        files.append(agent_dir / "settings.json")
    if project_dir is not None:
        files.append(project_dir / ".pi" / "settings.json")
    for path in files:
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        for key, attr in (
            ("defaultProvider", "default_provider"),
            ("defaultModel", "default_model"),
            ("defaultThinkingLevel", "default_thinking_level"),
        ):
            if key in data:
                if not isinstance(data[key], str) or not data[key]:
                    raise UsageError(f"{path}: {key}: expected a non-empty string")
                setattr(out, attr, data[key])
        level = data.get("defaultThinkingLevel")
        if level is not None and level not in (*THINKING_LEVELS, "max"):
            raise UsageError(
                f"{path}: defaultThinkingLevel: {level!r} is not one of "
                f"{', '.join(THINKING_LEVELS)}"
            )
        levels = data.get("modelThinkingLevels")
        if levels is not None:
            if not isinstance(levels, dict) or not all(
                isinstance(v, str) and v in (*THINKING_LEVELS, "max") for v in levels.values()
            ):
                raise UsageError(
                    f"{path}: modelThinkingLevels: expected an object of provider/modelId -> "
                    f"one of {', '.join(THINKING_LEVELS)}"
                )
            out.model_thinking_levels = {**(out.model_thinking_levels or {}), **levels}
        budgets = data.get("thinkingBudgets")
        if budgets is not None:
            if not isinstance(budgets, dict) or not all(
                k in ("minimal", "low", "medium", "high")
                and isinstance(v, int | float)
                and not isinstance(v, bool)
                and v > 0
                for k, v in budgets.items()
            ):
                raise UsageError(
                    f"{path}: thinkingBudgets: expected positive token counts for "
                    "minimal, low, medium, high"
                )
            out.thinking_budgets = {
                **(out.thinking_budgets or {}),
                **{k: int(v) for k, v in budgets.items()},
            }
        if "enabledModels" in data:
            models = data["enabledModels"]
            if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
                raise UsageError(f"{path}: enabledModels: expected a list of strings")
            out.enabled_models = list(models)
    return out


def resolve_pattern(
    catalogue: Catalogue,
    pattern: str,
    *,
    provider: str | None = None,
    has_key: Any = None,
) -> tuple[ModelInfo, str | None]:
    """The model ``pattern`` names and its ``:LEVEL`` suffix (pi cli.md ``--model``).

    ``provider/id`` picks that provider's model; an id the provider does not list
    gets pi's defaults and no prices (``openai/any-served-id``). A bare pattern is
    matched by exact id, exact name, then substring (``sonnet``); when several
    providers match, the ones ``has_key(provider_id)`` accepts are preferred, and a
    remaining tie asks for ``--provider``.

    Raises:
        UsageError: unknown provider or no match (names ``--model`` and the choices).
    """
    pattern, level = split_thinking_suffix(pattern.strip())
    known = ", ".join(["scripted", *catalogue.providers])
    if provider is not None and provider not in catalogue.providers:
        raise UsageError(f"--provider {provider!r}: unknown provider; known: {known}")
    head, slash, tail = pattern.partition("/")
    if provider is None and not slash and pattern in catalogue.providers:
        example = catalogue.providers[pattern].default_model or "MODEL"
        raise UsageError(
            f"--model {pattern!r}: name the model after a slash, e.g. {pattern}/{example}"
        )
    if provider is None and slash and head in catalogue.providers:
        provider, pattern = head, tail
    elif provider is None and slash and not catalogue.match(pattern):
        raise UnknownProviderError(
            f"--model {head + slash + tail!r}: unknown provider {head!r}; known: {known}"
        )
    if provider is not None:
        info = catalogue.providers[provider]
        if not pattern:
            if info.default_model:
                return catalogue.get(provider, info.default_model) or info.adhoc(
                    info.default_model
                ), level
            raise UsageError(
                f"--model {provider!r}: name the model after a slash, e.g. "
                f"{provider}/{info.models[0].id if info.models else 'MODEL'}"
            )
        found = info.find(pattern)
        if found is not None:
            return found, level
        matches = catalogue.match(pattern, provider=provider)
        if matches and not slash:
            return matches[0], level
        return info.adhoc(pattern), level
    matches = catalogue.match(pattern)
    if not matches:
        raise UsageError(
            f"--model {pattern!r}: no model matches; see pi --list-models (or give "
            "PROVIDER/ID for a model the catalogue does not list)"
        )
    providers = list(dict.fromkeys(m.provider for m in matches))
    if len(providers) > 1 and has_key is not None:
        keyed = [p for p in providers if has_key(p)]
        if keyed:
            providers = keyed
    if len(providers) > 1:
        raise UsageError(
            f"--model {pattern!r}: offered by several providers ({', '.join(providers)}); "
            "choose one with --provider or PROVIDER/ID"
        )
    return next(m for m in matches if m.provider == providers[0]), level


def resolve_scope(
    catalogue: Catalogue, patterns: list[str], *, has_key: Any = None
) -> list[tuple[ModelInfo, str | None]]:
    """``--models a,b,c`` / ``enabledModels``: each entry an exact id, a fuzzy match
    (its best model) or a case-insensitive glob (every model it matches), with an
    optional ``:LEVEL``. Duplicates are dropped. Raises ``UsageError`` for an entry
    that matches nothing."""
    out: list[tuple[ModelInfo, str | None]] = []
    seen: set[str] = set()
    for raw in patterns:
        pattern, level = split_thinking_suffix(raw.strip())
        if not pattern:
            continue
        if any(c in pattern for c in "*?["):
            found = catalogue.glob(pattern)
            if not found:
                raise UsageError(f"--models: {raw!r} matches no model")
            chosen = [(m, level) for m in found]
        else:
            model, suffix = resolve_pattern(catalogue, raw, has_key=has_key)
            chosen = [(model, suffix)]
        for model, lvl in chosen:
            if model.ref not in seen:
                seen.add(model.ref)
                out.append((model, lvl))
    return out


@dataclass
class ModelChoice:
    """What a run starts with, and what RPC model commands may switch to.

    Attributes:
        model: the chosen model.
        thinking_level: the requested level clamped to the model (``off`` without
            reasoning).
        scope: the ``--models``/``enabledModels`` cycle (empty: every available model).
        catalogue: the catalogue after models.json.
    """

    model: ModelInfo
    thinking_level: str
    scope: list[tuple[ModelInfo, str | None]] = field(default_factory=list)
    catalogue: Catalogue = field(default_factory=Catalogue)


class ProviderFactory:
    """Builds providers for a run: resolves keys (pi's precedence, ``auth_store``),
    enforces the project-redirect rule, and remembers the run's ``--api-key`` and
    ``--base-url`` for models chosen later (RPC ``set_model``/``cycle_model``).

    Args:
        catalogue: the run's catalogue.
        agent_dir: the user's agent directory (auth.json), None for none.
        cli_key: ``--api-key``; it applies to the model chosen at start only (pi:
            "It does not choose between providers").
        base_url: ``--base-url``; like ``cli_key``.
        thinking_budgets: settings ``thinkingBudgets`` (level -> tokens), for
            providers that take them.
    """

    def __init__(
        self,
        catalogue: Catalogue,
        *,
        agent_dir: Path | None,
        cli_key: str | None = None,
        base_url: str | None = None,
        thinking_budgets: dict[str, int] | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.thinking_budgets = thinking_budgets
        self.agent_dir = agent_dir
        self._cli_key = cli_key
        self._base_url = base_url
        self._cli_for: str | None = None  # the model ref --api-key/--base-url apply to
        self._auth: dict[str, Any] | None = None

    def auth(self) -> dict[str, Any]:
        """auth.json (read once; ``AuthStoreError`` when it is unsafe)."""
        if self._auth is None:
            self._auth = read_auth(self.agent_dir) if self.agent_dir is not None else {}
        return self._auth

    def has_key(self, provider_id: str) -> bool:
        """Whether ``provider_id`` has a key from any source (nothing is run)."""
        info = self.catalogue.providers.get(provider_id)
        if info is None:
            return False
        _, source = resolve_key(
            info, cli_key=None, auth=self.auth(), agent_dir=self.agent_dir, resolve=False
        )
        return source.kind != "none"

    def available(self) -> list[ModelInfo]:
        """Models whose provider has a key or needs none (custom providers), pi's
        "available models" (rpc-commands.md ``get_available_models``)."""
        return [
            m
            for m in self.catalogue.models()
            if self.has_key(m.provider) or not self.catalogue.providers[m.provider].builtin
        ]

    def key_for(self, model: ModelInfo, *, initial: bool = False) -> tuple[str | None, KeySource]:
        """The key ``model``'s requests carry, and its source.

        Raises:
            UsageError: the key is the user's but the project chose where requests
                go (``.pi/models.json`` defined the provider); a built-in provider at
                its public endpoint has no key (names the variables and ``pi auth``).
        """
        info = self.catalogue.providers[model.provider]
        cli = self._cli_key if initial or self._cli_for == model.ref else None
        key, source = resolve_key(info, cli_key=cli, auth=self.auth(), agent_dir=self.agent_dir)
        if info.project and source.users:
            raise UsageError(
                f"provider {info.id!r} is defined by the project's .pi/models.json "
                f"({info.sources[-1]}) but its key would come from {source.kind}: a project "
                "may not choose where your key is sent; give it its own literal apiKey there "
                "or define the provider in ~/.pi/agent/models.json"
            )
        public = info.builtin and model.base_url == _builtin_base(info.id)
        if key is None and public and not (initial and self._base_url):
            variables = " or ".join(info.env_keys) or "a key"
            raise UsageError(
                f"--model {model.ref!r}: no API key; set {variables}, run "
                f"`pi auth login {info.id}`, or pass --api-key "
                "(a key may be omitted only for a local server given by base URL)"
            )
        return key, source

    def build(self, model: ModelInfo, *, initial: bool = False) -> Provider:
        """A provider object for ``model`` (``initial``: the start-up model, which
        ``--api-key``/``--base-url`` apply to).

        Raises:
            UsageError: see ``key_for``; an API this build does not speak.
        """
        if initial:
            self._cli_for = model.ref
            if self._base_url:
                model.base_url = self._base_url
        key, _ = self.key_for(model, initial=initial)
        headers = _resolve_headers(model)
        if model.api == "openai-completions":
            provider: Any = _openai_provider(model, key, headers)
        elif model.api == "anthropic-messages":
            provider = _anthropic_provider(model, key, headers, self.thinking_budgets)
        else:
            raise UsageError(f"--model {model.ref!r}: API {model.api!r} is not supported")
        provider.name = model.provider
        provider.catalogue = self.catalogue
        provider.model_info = model
        return provider


def _openai_provider(model: ModelInfo, key: str | None, headers: dict[str, str]) -> Any:
    """An ``OpenAIProvider`` for ``model``, with what this build's provider takes:
    pi's ``compat`` flags through ``OpenAICompat.detect(base_url).with_overrides``
    (p2's switches), ``max_tokens`` and ``reasoning`` for a model the catalogue or
    models.json describes, and the resolved models.json ``headers``.

    Raises:
        UsageError: a ``compat`` field has the wrong type or value (names it).
    """
    import inspect

    from . import openai as openai_module

    cls = openai_module.OpenAIProvider
    params = inspect.signature(cls.__init__).parameters
    extra: dict[str, Any] = {}
    compat_cls = getattr(openai_module, "OpenAICompat", None)
    if "compat" in params and compat_cls is not None:
        try:
            extra["compat"] = compat_cls.detect(model.base_url).with_overrides(model.compat)
        except ValueError as exc:
            raise UsageError(f"models.json: providers.{model.provider}: {exc}") from None
    if model.known and "max_tokens" in params:
        extra["max_tokens"] = model.max_tokens
    if model.known and "reasoning" in params:
        extra["reasoning"] = model.reasoning
    if "headers" in params:
        extra["headers"] = headers
    provider = cls(model.id, model.base_url, key, **extra)
    if "headers" not in params:
        provider.extra_headers = headers
    return provider


ANTHROPIC_MAX_TOKENS_CAP = 32000
"""pi sends the model's output limit, at most this many tokens (p1's provider)."""


def _anthropic_provider(
    model: ModelInfo,
    key: str | None,
    headers: dict[str, str],
    thinking_budgets: dict[str, int] | None = None,
) -> Any:
    """An ``AnthropicProvider`` (p1) for ``model``: ``max_tokens`` from the catalogue
    (capped as pi), the model's limit, its ``reasoning`` flag, models.json
    ``headers`` and the provider's name, as far as this build's provider takes them.

    Raises:
        UsageError: this build has no Anthropic provider.
    """
    import inspect

    try:
        from .anthropic import AnthropicProvider
    except ImportError:
        raise UsageError(
            f"--model {model.ref!r}: the anthropic-messages API is not available in this build"
        ) from None
    params = inspect.signature(AnthropicProvider.__init__).parameters
    wanted: dict[str, Any] = {
        "max_tokens": min(model.max_tokens, ANTHROPIC_MAX_TOKENS_CAP),
        "model_max_tokens": model.max_tokens if model.known else None,
        "headers": headers,
        "provider_name": model.provider,
    }
    if thinking_budgets:
        wanted["thinking_budgets"] = dict(thinking_budgets)
    if model.known:
        wanted["reasoning"] = model.reasoning
    extra = {k: v for k, v in wanted.items() if k in params}
    provider = AnthropicProvider(model.id, model.base_url, key, **extra)
    if "headers" not in params:
        provider.extra_headers = headers
    return provider


def _builtin_base(provider_id: str) -> str | None:
    from .catalogue import builtin_catalogue

    found = builtin_catalogue().providers.get(provider_id)
    return found.base_url if found is not None else None


def _resolve_headers(model: ModelInfo) -> dict[str, str]:
    from .models_config import resolve_value

    out: dict[str, str] = {}
    for name, value in model.headers.items():
        resolved = resolve_value(value, what=f"header {name}")
        if resolved is None:
            raise UsageError(
                f"--model {model.ref!r}: header {name!r} in models.json did not resolve "
                "(an unset variable or a failed command)"
            )
        out[name] = resolved
    return out


def choose_model(
    *,
    agent_dir: Path | None,
    project_dir: Path | None,
    model: str | None,
    provider: str | None = None,
    thinking: str | None = None,
    models: str | None = None,
    cli_key: str | None = None,
    base_url: str | None = None,
) -> tuple[ModelChoice, ProviderFactory]:
    """Resolve the run's model, thinking level and cycle scope (module docstring).

    Raises:
        UsageError / ModelsConfigError / AuthStoreError: bad flags, files or settings
            (each names the argument, file or field).
    """
    from .auth_store import read_auth

    stored = set(read_auth(agent_dir)) if agent_dir is not None else set()
    catalogue = load_catalogue(agent_dir, project_dir=project_dir, stored_keys=stored)
    settings = read_model_settings(agent_dir, project_dir)
    factory = ProviderFactory(
        catalogue,
        agent_dir=agent_dir,
        cli_key=cli_key,
        base_url=base_url,
        thinking_budgets=settings.thinking_budgets,
    )
    if provider is not None and model is None:
        raise UsageError("--provider needs --model (pi: it restricts the --model lookup)")
    scope_patterns = (
        [p for p in models.split(",") if p.strip()]
        if models is not None
        else settings.enabled_models or []
    )
    scope = resolve_scope(catalogue, scope_patterns, has_key=factory.has_key)
    suffix: str | None = None
    if model is not None:
        chosen, suffix = resolve_pattern(
            catalogue, model, provider=provider, has_key=factory.has_key
        )
    elif models is not None and scope:
        chosen, suffix = scope[0]
    elif settings.default_model is not None:
        spec = settings.default_model
        chosen, suffix = resolve_pattern(
            catalogue, spec, provider=settings.default_provider, has_key=factory.has_key
        )
    elif settings.default_provider is not None:
        chosen, suffix = resolve_pattern(catalogue, settings.default_provider + "/")
    else:
        start = next((p for p in _FALLBACK_PROVIDERS if factory.has_key(p)), "openai")
        chosen, suffix = resolve_pattern(catalogue, start + "/")
    per_model = (settings.model_thinking_levels or {}).get(chosen.ref)
    requested = (
        thinking or suffix or per_model or settings.default_thinking_level or DEFAULT_THINKING_LEVEL
    )
    if requested == "max":
        requested = "xhigh"
    if requested not in THINKING_LEVELS:
        raise UsageError(f"--thinking {requested!r}: expected one of {', '.join(THINKING_LEVELS)}")
    return (
        ModelChoice(
            model=chosen,
            thinking_level=chosen.clamp_thinking(requested),
            scope=scope,
            catalogue=catalogue,
        ),
        factory,
    )
