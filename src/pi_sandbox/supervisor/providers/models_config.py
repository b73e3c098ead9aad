"""``models.json``: custom providers, models and overrides (supervisor only).

Files (pi docs models.md "Configure a compatible endpoint", models-configuration.md):
``<agent_dir>/models.json`` (the user's) and, only in a trusted project (``--trust
yes|sandboxed``), ``<project>/.pi/models.json`` (ours; pi 1.6.0 reads the user's
file only). Each is validated against pi's JSON Schema (``models.schema.json``,
shipped with this package); an error names the file and the field.

A project may not redirect where a user's key is sent (issue 16, seed 000 on pi's
``auth.provider`` rule): a project file may not set ``baseUrl``, ``apiKey`` or
``headers`` (provider, model or ``modelOverrides`` level) for a built-in provider,
a provider of the user's models.json, or one with a key in the user's auth.json;
and a project's own providers may only hold literal values (no ``$ENV``
interpolation, no ``!command``): the project would otherwise read the user's
environment or run commands to build a request it chose the destination of.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

from pi_sandbox.errors import UsageError

from .catalogue import Catalogue, ModelInfo, ProviderInfo, _model_from_entry, builtin_catalogue

__all__ = [
    "KNOWN_APIS",
    "ModelsConfigError",
    "load_catalogue",
    "read_models_file",
    "resolve_value",
]

KNOWN_APIS = ("openai-completions", "anthropic-messages")
"""The wire APIs this build speaks (pi's names)."""

MAX_MODELS_FILE_BYTES = 1024 * 1024
COMMAND_TIMEOUT_S = 10.0
"""How long a ``!command`` key may take before the key counts as unresolved."""

_REDIRECTING = ("baseUrl", "apiKey", "headers")


class ModelsConfigError(UsageError):
    """A models.json file is unreadable or invalid; the message names file and field."""


@cache
def _validator() -> Any:
    from importlib import resources

    import jsonschema

    schema = json.loads(
        resources.files(__package__).joinpath("models.schema.json").read_text("utf-8")
    )
    return jsonschema.Draft202012Validator(schema)


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_JSON_STRING_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')
_JSON_STRING_OR_TRAILING_COMMA = re.compile(r'"(?:\\.|[^"\\])*"|,(\s*[}\]])')


def strip_json_comments(text: str) -> str:
    """``text`` without ``//`` line comments and trailing commas, string literals
    untouched: what pi 1.6.0 accepts in models.json (its ``stripJsonComments``)."""
    text = _JSON_STRING_OR_COMMENT.sub(lambda m: m[0] if m[0][0] == '"' else "", text)
    return _JSON_STRING_OR_TRAILING_COMMA.sub(lambda m: m[1] if m[1] is not None else m[0], text)


def read_models_file(path: Path) -> dict[str, Any] | None:
    """The validated content of one models.json, or None when it does not exist.

    Raises:
        ModelsConfigError: unreadable, world-writable, too large, not JSON, or not pi's schema
            (``…/models.json: providers.ollama.models[0].contextWindow: …``); an
            invalid ``apiKey`` or header value is not quoted (it may be a secret).
    """
    try:
        with open(path, "rb") as handle:
            # Anyone could point a world-writable file's providers elsewhere.
            if os.fstat(handle.fileno()).st_mode & 0o002:
                raise ModelsConfigError(
                    f"{path}: anyone may write it; it decides where keys are sent. "
                    f"Run: chmod o-w {path}"
                )
            raw = handle.read(MAX_MODELS_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelsConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_MODELS_FILE_BYTES:
        raise ModelsConfigError(f"{path}: larger than {MAX_MODELS_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")  # pi strips a byte-order mark
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            # pi 1.6.0 reads models.json with `//` comments and trailing commas
            # (model-config.js stripJsonComments); a file written for pi reads here too.
            data = json.loads(strip_json_comments(text))
    except UnicodeDecodeError:
        raise ModelsConfigError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ModelsConfigError(
            f"{path}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    import jsonschema

    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        where = _where(error.absolute_path)
        secret = any(p in ("apiKey", "headers") for p in error.absolute_path)
        message = "invalid value (not shown: it may be a secret)" if secret else error.message
        raise ModelsConfigError(f"{path}: {where}: {message}")
    return data


def _check_apis(path: Path, pid: str, info: ProviderInfo) -> None:
    for index, model in enumerate(info.models):
        field = f"providers.{pid}.models[{index}]"
        if not model.api:
            raise ModelsConfigError(f"{path}: {field}: no 'api' (set it on the provider or model)")
        if model.api not in KNOWN_APIS:
            raise ModelsConfigError(
                f"{path}: {field}.api: {model.api!r} is not supported here "
                f"(supported: {', '.join(KNOWN_APIS)})"
            )
        if not model.base_url:
            raise ModelsConfigError(
                f"{path}: {field}: no 'baseUrl' (set it on the provider or model)"
            )
        if not model.base_url.startswith(("http://", "https://")):
            raise ModelsConfigError(f"{path}: {field}.baseUrl: not an http(s) URL")


def _apply(catalogue: Catalogue, path: Path, data: dict[str, Any]) -> None:
    """Merge one validated file into ``catalogue`` (pi's rules, models-configuration.md)."""
    for pid, raw in data.get("providers", {}).items():
        info = catalogue.providers.get(pid)
        if info is None:
            info = ProviderInfo(id=pid, name=raw.get("name", pid), api="", base_url="")
            catalogue.providers[pid] = info
        info.sources.append(str(path))
        if "name" in raw:
            info.name = raw["name"]
        if "api" in raw:
            info.api = raw["api"]
            for model in info.models:
                model.api = raw["api"]
        if "baseUrl" in raw:
            # "Also applies to the provider's built-in models."
            info.base_url = raw["baseUrl"]
            for model in info.models:
                model.base_url = raw["baseUrl"]
        if "apiKey" in raw:
            info.api_key = raw["apiKey"]
        if "headers" in raw:
            info.headers = {**info.headers, **raw["headers"]}
            for model in info.models:
                model.headers = {**model.headers, **raw["headers"]}
        if "compat" in raw:
            info.compat = {**info.compat, **raw["compat"]}
            for model in info.models:
                model.compat = {**model.compat, **raw["compat"]}
        for entry in raw.get("models", []):
            model = _model_from_entry(info, entry)
            existing = next((i for i, m in enumerate(info.models) if m.id == model.id), None)
            if existing is None:
                info.models.append(model)
            else:
                info.models[existing] = model
        for model_id, override in raw.get("modelOverrides", {}).items():
            target = info.find(model_id)
            if target is None:
                continue  # pi: unknown override ids are ignored
            _override(target, override)
        _check_apis(path, pid, info)


def _override(model: ModelInfo, override: dict[str, Any]) -> None:
    # Object fields merge field by field; others replace (models-configuration.md).
    simple = {
        "name": "name",
        "reasoning": "reasoning",
        "input": "input",
        "contextWindow": "context_window",
        "maxTokens": "max_tokens",
    }
    for key, attr in simple.items():
        if key in override:
            setattr(model, attr, override[key])
    if "cost" in override:
        model.cost = {**model.cost, **override["cost"]}
    if "headers" in override:
        model.headers = {**model.headers, **override["headers"]}
    if "compat" in override:
        model.compat = {**model.compat, **override["compat"]}


def _is_literal(value: str) -> bool:
    # "$$" and "$!" are escapes; any other "$" interpolates, a leading "!" runs.
    return not value.startswith("!") and "$" not in value.replace("$$", "").replace("$!", "")


def _project_check(path: Path, data: dict[str, Any], protected: set[str]) -> None:
    """Refuse a project file that would send a user's key elsewhere (module docstring)."""
    for pid, raw in data.get("providers", {}).items():
        base = f"providers.{pid}"
        places: list[tuple[str, dict[str, Any]]] = [(base, raw)]
        places += [(f"{base}.models[{i}]", m) for i, m in enumerate(raw.get("models", []))]
        places += [
            (f"{base}.modelOverrides.{k}", m) for k, m in raw.get("modelOverrides", {}).items()
        ]
        for where, entry in places:
            for key in _REDIRECTING:
                if key not in entry:
                    continue
                if pid in protected:
                    raise ModelsConfigError(
                        f"{path}: {where}.{key}: a project may not set {key} for provider "
                        f"{pid!r}, whose key comes from your own configuration (auth.json, "
                        "the environment, --api-key or your models.json): the project would "
                        "choose where your key is sent. Put it in your own "
                        "~/.pi/agent/models.json if you mean it"
                    )
                values = entry[key].values() if key == "headers" else [entry[key]]
                if not all(_is_literal(v) for v in values):
                    raise ModelsConfigError(
                        f"{path}: {where}.{key}: a project's values must be literal "
                        "(no $VARIABLE and no !command: they would read your environment "
                        "or run a command)"
                    )


def load_catalogue(
    agent_dir: Path | None,
    *,
    project_dir: Path | None = None,
    stored_keys: frozenset[str] | set[str] = frozenset(),
) -> Catalogue:
    """The built-in catalogue with ``<agent_dir>/models.json`` and, when
    ``project_dir`` is given (the caller passes it only for a trusted project),
    ``<project_dir>/.pi/models.json`` applied in that order.

    Args:
        agent_dir: the user's agent directory; None reads no user file (tests).
        project_dir: the trusted project's root, or None.
        stored_keys: providers with a key in the user's auth.json.

    Raises:
        ModelsConfigError: a file is invalid, a provider lacks ``api``/``baseUrl``,
            or the project file tries to redirect a user's key (names file and field).
    """
    catalogue = builtin_catalogue()
    if agent_dir is not None:
        user_file = agent_dir / "models.json"
        data = read_models_file(user_file)
        if data is not None:
            _apply(catalogue, user_file, data)
    if project_dir is not None:
        project_file = project_dir / ".pi" / "models.json"
        data = read_models_file(project_file)
        if data is not None:
            protected = set(catalogue.providers) | set(stored_keys)
            _project_check(project_file, data, protected)
            _apply(catalogue, project_file, data)
            for pid in data.get("providers", {}):
                catalogue.providers[pid].project = True
    return catalogue


_INTERPOLATION = re.compile(r"\$\$|\$!|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def resolve_value(value: str, *, what: str) -> str | None:
    """A models.json/auth.json value resolved as pi does (models.md): a leading ``!``
    runs the rest as a shell command (its stdout, stripped, is the value; pi runs it
    through the shell too: ``!security find-generic-password -ws 'anthropic'``);
    otherwise ``$NAME``/``${NAME}`` interpolate the environment, ``$$`` and ``$!``
    give ``$`` and ``!``. Commands run here, in the supervisor, never in a worker,
    with a ``COMMAND_TIMEOUT_S`` limit and stdin closed.

    Returns:
        The value, or None when it is unresolved: an unset variable, a command that
        failed, timed out or printed nothing (pi leaves the key unresolved then).
    """
    if value.startswith("!"):
        import subprocess  # only for !command values

        try:
            done = subprocess.run(
                ["/bin/sh", "-c", value[1:]],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        out = done.stdout.decode("utf-8", "replace").strip()
        return out if done.returncode == 0 and out else None
    missing = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal missing
        token = match.group(0)
        if token in ("$$", "$!"):
            return token[1]
        name = match.group(1) or match.group(2)
        found = os.environ.get(name)
        if found is None:
            missing = True
            return ""
        return found

    out = _INTERPOLATION.sub(substitute, value)
    return None if missing or not out else out
