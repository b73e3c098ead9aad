"""JSON Schema validation of tool arguments with time-bounded regular expressions.

Tool schemas come from extensions and tool arguments from the model or from a
``tool_call`` hook: both may be hostile. ``jsonschema`` evaluates ``pattern`` and
``patternProperties`` with Python's ``re``, which has no time limit, on the
supervisor's event loop — a backtracking pattern (``^(a|a)+$``) and a crafted string
would freeze every deadline. Here those keywords use the ``regex`` library with a
bound per search; a search that runs out of time is a validation error (the call
fails closed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import regex
from jsonschema.exceptions import ValidationError

__all__ = ["SCHEMA_REGEX_TIMEOUT_S", "validator_for"]

SCHEMA_REGEX_TIMEOUT_S = 0.25


def _search(pattern: str, text: str) -> bool | None:
    """Bounded ``search``; None when it ran out of time or the pattern does not compile."""
    try:
        return regex.search(pattern, text, timeout=SCHEMA_REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        return None
    except regex.error:
        return None


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    found = _search(pattern, instance)
    if found is None:
        yield ValidationError(f"could not be checked against the pattern {pattern!r} in time")
    elif not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _matching_patterns(schema: dict[str, Any], key: str) -> tuple[list[str], bool]:
    """The patternProperties patterns that match ``key``, and whether any check timed out."""
    matched, timed_out = [], False
    for pattern in schema.get("patternProperties", {}):
        found = _search(pattern, key)
        timed_out |= found is None
        if found:
            matched.append(pattern)
    return matched, timed_out


def _pattern_properties(
    validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for key, value in instance.items():
        matched, timed_out = _matching_patterns(schema, key)
        if timed_out:
            yield ValidationError(
                f"property name {key!r} could not be checked against patternProperties in time"
            )
        for pattern in matched:
            yield from validator.descend(
                value, pattern_properties[pattern], path=key, schema_path=pattern
            )


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = []
    for key in instance:
        if key in properties:
            continue
        matched, timed_out = _matching_patterns(schema, key)
        if timed_out:
            yield ValidationError(
                f"property name {key!r} could not be checked against patternProperties in time"
            )
        elif not matched:
            extras.append(key)
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        yield ValidationError(
            f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))} unexpected)"
        )


def validator_for(schema: dict[str, Any]) -> Any:
    """A validator instance for ``schema`` (its ``$schema`` draft, default 2020-12).

    Raises:
        jsonschema.SchemaError: ``schema`` is not a valid JSON Schema.
    """
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    base.check_schema(schema)
    bounded = jsonschema.validators.extend(
        base,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
    return bounded(schema)
