"""``extensions.limits``: how much an extension may make the supervisor do (issue 13 §4).

An extension hands the supervisor values (session entries, messages, names, labels,
status lines, bus messages, log lines); each costs the supervisor memory, disk or
output. These keys bound them, per extension and per session. The supervisor
enforces them (``pi_sandbox.supervisor.boundary``); this module holds the schema,
the defaults and how the tiers combine.

Tier rules (issue 13 §3: a lower tier may not weaken someone else's protection — a
tighter limit can make a guard extension fail, which is a weakening):

- managed and user files govern every extension: for each key the smallest value
  any of them sets wins (an organisation's value is a ceiling the user can only
  lower); a key nobody sets keeps its default. They may also raise a default.
- a project file governs only the project's own extensions, and only downwards:
  its value applies to project extensions when it is below the managed/user one;
  a larger one is ignored with a diagnostic. ``session_bytes_total`` (shared by
  every extension) cannot be set by a project file at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

__all__ = [
    "LIMIT_DEFAULTS",
    "ExtensionLimits",
    "ExtensionLimitsSection",
    "LimitRules",
    "combine_limits",
]

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class ExtensionLimits:
    """The limits that apply to one extension (documented in docs/extensions.md,
    "Limits and boundary validation"; keys of ``extensions.limits``).

    Sizes are bytes of the value's JSON (UTF-8), text lengths are characters,
    rates are per second with a burst allowance (a token bucket per extension).

    Attributes:
        entry_bytes: one ``pi.append_entry`` data value.
        message_bytes: one message an extension hands over (``send_message``,
            ``send_user_message``, a ``before_agent_start`` message), and dialog
            texts (``confirm`` message, ``editor`` prefill).
        text_chars: a session name, a label, a status line, one widget line, a
            notification, a dialog title or option, a model id.
        widget_lines: lines of one widget; options of one ``select``.
        bus_bytes: one ``pi.events.emit`` data value.
        session_bytes: everything one extension writes into one session
            (entries, messages, names, labels), summed.
        session_entries: session writes (entries, messages, names, labels) of one
            extension in one session.
        session_bytes_total: everything all extensions together write into one
            session (refusals past it do not count against an extension: another
            extension may have used the room).
        writes_per_s / writes_burst: session writes (the ``session_entries`` kinds
            and ``set_model``), rate.
        ui_per_s / ui_burst: ``ctx.ui.*`` calls (notify, status, widgets, dialogs).
        bus_per_s / bus_burst: ``pi.events.emit`` messages.
        logs_per_s / logs_burst: ``log`` notifications (errors of threads and bus
            handlers); past it they are dropped.
        strikes: refusals (a value refused, a limit exceeded) after which the
            extension is disabled for the rest of the session.
    """

    entry_bytes: int = 1 * MIB
    message_bytes: int = 2 * MIB
    text_chars: int = 4096
    widget_lines: int = 200
    bus_bytes: int = 256 * KIB
    session_bytes: int = 32 * MIB
    session_entries: int = 10_000
    session_bytes_total: int = 128 * MIB
    writes_per_s: int = 20
    writes_burst: int = 200
    ui_per_s: int = 20
    ui_burst: int = 200
    bus_per_s: int = 100
    bus_burst: int = 1000
    logs_per_s: int = 50
    logs_burst: int = 500
    strikes: int = 50


LIMIT_DEFAULTS: dict[str, int] = {f.name: f.default for f in fields(ExtensionLimits)}  # type: ignore[misc]
"""Every ``extensions.limits`` key and its default."""


def _bounded(low: int, high: int) -> Any:
    return Annotated[StrictInt, Field(ge=low, le=high)] | None


class ExtensionLimitsSection(BaseModel):
    """``extensions.limits`` in a policy file: any subset of the `ExtensionLimits`
    keys. Bounds: below the lower one pi itself could not work (its own messages
    would be refused); above the upper one the limit means nothing (a frame on the
    worker channel is at most 8 MiB)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    entry_bytes: _bounded(KIB, 8 * MIB) = None  # type: ignore[valid-type]
    message_bytes: _bounded(KIB, 8 * MIB) = None  # type: ignore[valid-type]
    text_chars: _bounded(64, 1 * MIB) = None  # type: ignore[valid-type]
    widget_lines: _bounded(1, 100_000) = None  # type: ignore[valid-type]
    bus_bytes: _bounded(KIB, 8 * MIB) = None  # type: ignore[valid-type]
    session_bytes: _bounded(KIB, 64 * 1024 * MIB) = None  # type: ignore[valid-type]
    session_entries: _bounded(1, 100_000_000) = None  # type: ignore[valid-type]
    session_bytes_total: _bounded(KIB, 256 * 1024 * MIB) = None  # type: ignore[valid-type]
    writes_per_s: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    writes_burst: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    ui_per_s: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    ui_burst: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    bus_per_s: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    bus_burst: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    logs_per_s: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    logs_burst: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]
    strikes: _bounded(1, 1_000_000) = None  # type: ignore[valid-type]


PROJECT_MAY_NOT_SET = frozenset({"session_bytes_total"})
"""Keys whose value governs every extension at once: a project file may not set them."""


@dataclass(frozen=True)
class LimitRules:
    """The combined ``extensions.limits`` of every tier.

    Attributes:
        shared: what applies to every extension (managed/user files and defaults).
        project: what applies to project extensions (``shared``, lowered by
            project files).
    """

    shared: ExtensionLimits = ExtensionLimits()
    project: ExtensionLimits = ExtensionLimits()

    def for_origin(self, origin: str) -> ExtensionLimits:
        """The limits of an extension of ``origin`` (``"cli"``, ``"user"``, ``"project"``)."""
        return self.project if origin == "project" else self.shared


def combine_limits(
    sections: Sequence[tuple[str, str, ExtensionLimitsSection]],
) -> tuple[LimitRules, list[tuple[str, int, str, str]], list[str]]:
    """Combine every file's ``extensions.limits`` (see the module docstring).

    Args:
        sections: ``(tier, file, section)`` in load order (highest tier first).

    Returns:
        ``(rules, origins, diagnostics)``: ``origins`` one ``(key, value, tier,
        file)`` per value that took effect; ``diagnostics`` one line per project
        value ignored.
    """
    shared: dict[str, int] = {}
    shared_from: dict[str, tuple[str, str]] = {}
    for tier, source, section in sections:
        if tier == "project":
            continue
        for key in section.model_fields_set:
            value = getattr(section, key)
            if value is not None and (key not in shared or value < shared[key]):
                shared[key], shared_from[key] = value, (tier, source)
    shared_limits = replace(ExtensionLimits(), **shared)
    project: dict[str, int] = {}
    project_from: dict[str, tuple[str, str]] = {}
    diagnostics: list[str] = []
    for tier, source, section in sections:
        if tier != "project":
            continue
        for key in section.model_fields_set:
            value = getattr(section, key)
            if value is None:
                continue
            ceiling = getattr(shared_limits, key)
            if key in PROJECT_MAY_NOT_SET:
                diagnostics.append(
                    f"{source}: extensions.limits.{key} ignored: it governs every "
                    "extension, and a project policy governs only the project's own"
                )
            elif value > ceiling:
                diagnostics.append(
                    f"{source}: extensions.limits.{key}: {value} ignored: a project policy "
                    f"can only lower a limit (in force: {ceiling})"
                )
            elif key not in project or value < project[key]:
                project[key], project_from[key] = value, (tier, source)
    origins = [(f"extensions.limits.{k}", shared[k], *shared_from[k]) for k in shared]
    origins += [
        (f"extensions.limits.{k} (project extensions)", project[k], *project_from[k])
        for k in project
    ]
    return (
        LimitRules(shared=shared_limits, project=replace(shared_limits, **project)),
        origins,
        diagnostics,
    )
