"""The model catalogue: built-in providers and models (data) plus ``models.json``.

The built-in part is ``catalogue.json`` next to this module (issue 16: "a built-in
catalogue … that is data, not code"); its header says where the prices came from and
when. ``models_config.load_models_config`` merges the user's (and a trusted project's)
``models.json`` over it, giving a ``Catalogue``.

Shapes follow pi (pi docs models-configuration.md, rpc-commands.md "Model object"):
costs are USD per million tokens, ``contextWindow``/``maxTokens`` are tokens.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from .base import THINKING_LEVELS

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOKENS",
    "Catalogue",
    "ModelInfo",
    "ProviderInfo",
    "add_cost",
    "builtin_catalogue",
    "split_thinking_suffix",
    "usage_with_cost",
]

DEFAULT_CONTEXT_WINDOW = 128000
"""pi's default ``contextWindow`` for a model that names none (models-configuration.md)."""
DEFAULT_MAX_TOKENS = 16384
"""pi's default ``maxTokens`` (models-configuration.md)."""

_ZERO_COST = {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0}


@dataclass
class ModelInfo:
    """One model as pi describes it (rpc-commands.md "Model object").

    Attributes:
        provider: the provider id, e.g. ``"anthropic"``.
        id: the model id sent to the API.
        name: display name (also matched by ``--model`` patterns).
        api: ``"openai-completions"`` or ``"anthropic-messages"``.
        base_url: the API root requests go to.
        reasoning: whether thinking levels apply (otherwise the level is ``off``).
        input: ``["text"]`` or ``["text", "image"]``.
        context_window / max_tokens: tokens.
        cost: USD per million tokens: ``input``, ``output``, ``cacheRead``,
            ``cacheWrite`` (and pi's optional ``tiers``).
        headers: extra request headers (values as written: literal/``$ENV``/``!cmd``).
        compat: pi's ``compat`` flags (provider values overlaid by model values);
            handed to the OpenAI provider's compatibility switches.
        known: False for an id the catalogue does not list (``openai/any-id``).
    """

    provider: str
    id: str
    name: str
    api: str
    base_url: str
    reasoning: bool = False
    input: list[str] = field(default_factory=lambda: ["text"])
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int = DEFAULT_MAX_TOKENS
    cost: dict[str, Any] = field(default_factory=lambda: dict(_ZERO_COST))
    headers: dict[str, str] = field(default_factory=dict)
    compat: dict[str, Any] = field(default_factory=dict)
    known: bool = True

    @property
    def ref(self) -> str:
        """``provider/id``."""
        return f"{self.provider}/{self.id}"

    def as_dict(self) -> dict[str, Any]:
        """pi's RPC Model object (no headers: they may hold secrets)."""
        return {
            "id": self.id,
            "name": self.name,
            "api": self.api,
            "provider": self.provider,
            "baseUrl": self.base_url,
            "reasoning": self.reasoning,
            "input": list(self.input),
            "contextWindow": self.context_window,
            "maxTokens": self.max_tokens,
            "cost": {k: v for k, v in self.cost.items() if k != "tiers"},
        }

    def thinking_levels(self) -> list[str]:
        """The levels this model takes: all of ``THINKING_LEVELS`` with reasoning, else
        ``["off"]`` (rpc-commands.md ``get_available_thinking_levels``)."""
        return list(THINKING_LEVELS) if self.reasoning else ["off"]

    def clamp_thinking(self, level: str) -> str:
        """``level`` for a reasoning model, ``"off"`` otherwise (pi clamps the same)."""
        return level if self.reasoning and level in THINKING_LEVELS else "off"


@dataclass
class ProviderInfo:
    """One provider: where it lives and how it authenticates.

    Attributes:
        id: provider id (``--model ID/…``, auth.json key).
        name: display name.
        api: default wire API of its models.
        base_url: default API root ("" when each model must name one).
        env_keys: environment variables holding its key, first wins (providers.md).
        api_key: ``apiKey`` as written in models.json (literal/``$ENV``/``!cmd``), or None.
        headers: provider-level request headers as written.
        compat: provider-level ``compat`` flags.
        builtin: True for a provider of the built-in catalogue.
        models: its models in catalogue order.
        sources: which models.json files changed this provider (for messages).
        project: True when a trusted project's ``.pi/models.json`` defined or changed it.
        default_model: the model ``--model PROVIDER`` (no id) and the start-up choice use.
    """

    id: str
    name: str
    api: str
    base_url: str
    env_keys: list[str] = field(default_factory=list)
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    compat: dict[str, Any] = field(default_factory=dict)
    builtin: bool = False
    models: list[ModelInfo] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    project: bool = False
    default_model: str | None = None

    def find(self, model_id: str) -> ModelInfo | None:
        """The model with exactly this id, or None."""
        return next((m for m in self.models if m.id == model_id), None)

    def adhoc(self, model_id: str) -> ModelInfo:
        """A model this provider does not list (pi's defaults, no prices): lets
        ``openai/any-served-id`` keep working against any compatible server."""
        return ModelInfo(
            provider=self.id,
            id=model_id,
            name=model_id,
            api=self.api,
            base_url=self.base_url,
            headers=dict(self.headers),
            compat=dict(self.compat),
            known=False,
        )


@dataclass
class Catalogue:
    """Every provider and model a run can use, after models.json is applied."""

    providers: dict[str, ProviderInfo] = field(default_factory=dict)

    def models(self) -> list[ModelInfo]:
        """All models, provider by provider in catalogue order."""
        return [m for p in self.providers.values() for m in p.models]

    def get(self, provider: str, model_id: str) -> ModelInfo | None:
        """The model ``provider/model_id`` if listed, else None."""
        found = self.providers.get(provider)
        return found.find(model_id) if found is not None else None

    def search(self, query: str) -> list[ModelInfo]:
        """Models whose ``provider/id`` or name contains every word of ``query``
        (case-insensitive; ``--list-models [search]``, pi's "fuzzy search")."""
        words = query.lower().split()
        return [
            m
            for m in self.models()
            if all(w in f"{m.provider}/{m.id} {m.name}".lower() for w in words)
        ]

    def match(self, pattern: str, *, provider: str | None = None) -> list[ModelInfo]:
        """The models ``pattern`` names, best first (pi cli.md ``--model``): an exact id
        (or ``provider/id``), else an exact name (case-insensitive), else ids and
        names containing the pattern. ``provider`` restricts the search."""
        pool = [m for m in self.models() if provider is None or m.provider == provider]
        lowered = pattern.lower()
        for test in (
            lambda m: m.id == pattern or m.ref == pattern,
            lambda m: m.name.lower() == lowered or m.id.lower() == lowered,
            lambda m: lowered in m.id.lower() or lowered in m.name.lower(),
        ):
            found = [m for m in pool if test(m)]
            if found:
                return found
        return []

    def glob(self, pattern: str) -> list[ModelInfo]:
        """Models whose ``provider/id`` or id matches the case-insensitive glob."""
        lowered = pattern.lower()
        return [
            m
            for m in self.models()
            if fnmatch.fnmatchcase(m.ref.lower(), lowered)
            or fnmatch.fnmatchcase(m.id.lower(), lowered)
        ]


def split_thinking_suffix(pattern: str) -> tuple[str, str | None]:
    """``"sonnet:high"`` → ``("sonnet", "high")``; a suffix that is not a thinking
    level stays part of the id (``qwen2.5-coder:7b``). pi's ``max`` is read as
    ``xhigh``, our strongest level."""
    head, sep, tail = pattern.rpartition(":")
    if sep and head and (tail in THINKING_LEVELS or tail == "max"):
        return head, "xhigh" if tail == "max" else tail
    return pattern, None


def _model_from_entry(provider: ProviderInfo, entry: dict[str, Any]) -> ModelInfo:
    cost = dict(_ZERO_COST)
    cost.update(copy.deepcopy(entry.get("cost") or {}))
    return ModelInfo(
        provider=provider.id,
        id=entry["id"],
        name=entry.get("name") or entry["id"],
        api=entry.get("api") or provider.api,
        base_url=entry.get("baseUrl") or provider.base_url,
        reasoning=bool(entry.get("reasoning", False)),
        input=list(entry.get("input") or ["text"]),
        context_window=int(entry.get("contextWindow") or DEFAULT_CONTEXT_WINDOW),
        max_tokens=int(entry.get("maxTokens") or DEFAULT_MAX_TOKENS),
        cost=cost,
        headers={**provider.headers, **(entry.get("headers") or {})},
        compat={**provider.compat, **(entry.get("compat") or {})},
    )


@cache
def _builtin_data() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("catalogue.json").read_text("utf-8")
    return json.loads(text)


def builtin_catalogue() -> Catalogue:
    """A fresh copy of the built-in catalogue (``catalogue.json``, package data).

    Raises:
        OSError / ValueError: the packaged file is missing or malformed (a broken
            installation; never the user's input).
    """
    data = copy.deepcopy(_builtin_data())
    catalogue = Catalogue()
    for pid, raw in data["providers"].items():
        info = ProviderInfo(
            id=pid,
            name=raw.get("name", pid),
            api=raw["api"],
            base_url=raw["baseUrl"],
            env_keys=list(raw.get("envKeys", [])),
            builtin=True,
            default_model=raw.get("defaultModel"),
        )
        info.models = [_model_from_entry(info, m) for m in raw.get("models", [])]
        catalogue.providers[pid] = info
    return catalogue


def add_cost(usage: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """``usage`` (pi's Usage, see ``base.normalise_usage``) with ``cost`` filled from
    per-million-token prices: ``cost.input = input × price.input / 1e6`` and so on,
    ``cost.total`` their sum (USD). pi's ``tiers``: the tier with the highest
    ``inputTokensAbove`` below the request's whole input (input + cache read +
    cache write) prices the full request. Returns a new dict; ``usage`` is unchanged.
    """
    from .base import normalise_usage

    out = normalise_usage(usage)
    prices = dict(cost)
    whole_input = out["input"] + out["cacheRead"] + out["cacheWrite"]
    tiers = [t for t in cost.get("tiers") or [] if whole_input > t.get("inputTokensAbove", 0)]
    if tiers:
        prices.update(max(tiers, key=lambda t: t["inputTokensAbove"]))
    parts = {
        key: out[key] * float(prices.get(key, 0) or 0) / 1_000_000
        for key in ("input", "output", "cacheRead", "cacheWrite")
    }
    out["cost"] = {**parts, "total": sum(parts.values())}
    return out


def usage_with_cost(provider: Any, turn: Any) -> dict[str, Any]:
    """``turn.usage`` in pi's shape with ``cost`` priced from the catalogue entry of
    the model that answered (issue 16 "every assistant message records usage and
    cost"). Providers built by ``ProviderFactory`` carry their ``catalogue``; others
    (scripted) and unlisted models cost 0. A cost the provider reported itself
    (``cost.total`` > 0) is kept."""
    from .base import normalise_usage

    usage = normalise_usage(turn.usage)
    if usage["cost"]["total"] > 0:
        return usage
    catalogue = getattr(provider, "catalogue", None)
    if not isinstance(catalogue, Catalogue):
        return usage
    name = getattr(provider, "name", "") or turn.provider
    model = catalogue.get(name, provider.model) or catalogue.get(name, turn.model or "")
    return add_cost(usage, model.cost) if model is not None else usage
