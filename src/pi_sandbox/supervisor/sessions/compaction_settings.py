"""The ``compaction`` settings of ``settings.json`` (pi docs settings.md "Compaction",
compaction.md "Settings" and "Per-model overrides").

Keys (defaults pi's)::

    {"compaction": {"enabled": true, "reserveTokens": 16384, "keepRecentTokens": 20000,
                    "modelOverrides": {"provider/modelId": {"reserveTokens": 400000}}}}

Files: ``<agent_dir>/settings.json`` (user), then ``<cwd>/.pi/settings.json`` (project,
read only when the project is trusted, as its other settings are). The two ``compaction``
objects merge recursively, the project's on top. Each token value resolves
independently: the matching model override, then the ordinary value, then the default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.errors import UsageError

__all__ = [
    "DEFAULT_COMPACTION",
    "CompactionConfig",
    "CompactionSettings",
    "CompactionSettingsError",
    "load_compaction_config",
]

_MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: pi's bound


class CompactionSettingsError(UsageError):
    """A ``compaction`` value in a settings file is malformed; the message names the
    file and the field (``…/settings.json: compaction.reserveTokens: expected …``)."""


@dataclass(frozen=True)
class CompactionSettings:
    """The settings one compaction (or one threshold check) uses.

    Attributes:
        enabled: automatic compaction (threshold and overflow recovery) is on; manual
            ``/compact`` works either way.
        reserve_tokens: compaction starts when the context passes ``context window -
            reserve_tokens`` tokens.
        keep_recent_tokens: about this many of the most recent tokens are kept verbatim.
    """

    enabled: bool = True
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000

    def as_event(self) -> dict[str, Any]:
        """The settings as extensions see them in ``preparation.settings``."""
        return {
            "enabled": self.enabled,
            "reserve_tokens": self.reserve_tokens,
            "keep_recent_tokens": self.keep_recent_tokens,
        }


DEFAULT_COMPACTION = CompactionSettings()


@dataclass(frozen=True)
class CompactionConfig:
    """The merged ``compaction`` objects, resolved per model by `for_model`.

    Attributes:
        base: the ordinary settings (defaults filled in).
        overrides: ``"provider/modelId"`` → the fields that override (``reserve_tokens``,
            ``keep_recent_tokens``).
        notices: settings files that could not be read (shown once, not fatal).
    """

    base: CompactionSettings = DEFAULT_COMPACTION
    overrides: dict[str, dict[str, int]] = field(default_factory=dict)
    notices: tuple[str, ...] = ()

    def for_model(self, provider: str, model: str) -> CompactionSettings:
        """The settings for ``provider/model`` (exact, case-sensitive key; pi docs
        compaction.md "Per-model overrides"); ``enabled`` is never per model."""
        override = self.overrides.get(f"{provider}/{model}")
        if not override:
            return self.base
        return CompactionSettings(
            enabled=self.base.enabled,
            reserve_tokens=override.get("reserve_tokens", self.base.reserve_tokens),
            keep_recent_tokens=override.get("keep_recent_tokens", self.base.keep_recent_tokens),
        )


def _read(path: Path, notices: list[str]) -> dict[str, Any] | None:
    from pi_sandbox.regular_files import FileRefusedError, read_regular_file
    from pi_sandbox.resources.settings_lists import MAX_SETTINGS_BYTES

    try:
        text = read_regular_file(path, MAX_SETTINGS_BYTES)
    except FileNotFoundError:
        return None
    except (FileRefusedError, OSError) as exc:
        notices.append(f"{path}: cannot read it ({exc}); its compaction settings were not loaded")
        return None
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        notices.append(f"{path}: invalid JSON ({exc}); its compaction settings were not loaded")
        return None
    if not isinstance(data, dict):
        return None
    section = data.get("compaction")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise CompactionSettingsError(
            f"{path}: compaction: expected an object, got {type(section).__name__}"
        )
    return section


def _merge(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(under)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _tokens(value: Any, where: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != int(value)
        or not 0 <= value <= _MAX_SAFE_INTEGER
    ):
        raise CompactionSettingsError(
            f"{where}: expected a non-negative integer (tokens), got {json.dumps(value)}"
        )
    return int(value)


def load_compaction_config(
    agent_dir: Path, cwd: Path | None = None, *, project_trusted: bool = False
) -> CompactionConfig:
    """Read the ``compaction`` settings of the user's and (when ``project_trusted``)
    the project's ``settings.json``.

    A missing file or key means the defaults. A file that cannot be read or is not JSON
    is a notice (``CompactionConfig.notices``), as for its other settings.

    Raises:
        CompactionSettingsError: (a ``UsageError``: exit 2) a value has the wrong type:
            ``enabled`` not a boolean, a token count not a non-negative safe integer,
            ``modelOverrides`` or one of its entries not an object. The message names the
            file(s) and the field.
    """
    notices: list[str] = []
    sources = [agent_dir / "settings.json"]
    if project_trusted and cwd is not None:
        sources.append(cwd / ".pi" / "settings.json")
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}  # top-level key → the file it came from, for errors
    for path in sources:
        section = _read(path, notices)
        if section is None:
            continue
        merged = _merge(merged, section)
        for key in section:
            origin[key] = str(path)

    def where(key: str) -> str:
        return f"{origin.get(key, 'settings.json')}: compaction.{key}"

    enabled = merged.get("enabled", DEFAULT_COMPACTION.enabled)
    if not isinstance(enabled, bool):
        raise CompactionSettingsError(
            f"{where('enabled')}: expected true or false, got {json.dumps(enabled)}"
        )
    base = CompactionSettings(
        enabled=enabled,
        reserve_tokens=_tokens(
            merged.get("reserveTokens", DEFAULT_COMPACTION.reserve_tokens), where("reserveTokens")
        ),
        keep_recent_tokens=_tokens(
            merged.get("keepRecentTokens", DEFAULT_COMPACTION.keep_recent_tokens),
            where("keepRecentTokens"),
        ),
    )
    raw_overrides = merged.get("modelOverrides", {})
    if not isinstance(raw_overrides, dict):
        raise CompactionSettingsError(f"{where('modelOverrides')}: expected an object")
    overrides: dict[str, dict[str, int]] = {}
    for key, entry in raw_overrides.items():
        label = f"{where('modelOverrides')}[{json.dumps(key)}]"
        if not isinstance(entry, dict):
            raise CompactionSettingsError(f"{label}: expected an object")
        resolved: dict[str, int] = {}
        if "reserveTokens" in entry:
            resolved["reserve_tokens"] = _tokens(entry["reserveTokens"], f"{label}.reserveTokens")
        if "keepRecentTokens" in entry:
            resolved["keep_recent_tokens"] = _tokens(
                entry["keepRecentTokens"], f"{label}.keepRecentTokens"
            )
        overrides[key] = resolved
    return CompactionConfig(base=base, overrides=overrides, notices=tuple(notices))
