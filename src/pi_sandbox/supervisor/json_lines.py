"""One JSON object per line, for session files and ``--mode json`` (supervisor side).

What goes into these lines comes partly from untrusted sources (model output, tool
results, extension patches). Two things in valid Python data are not valid strict
JSON or UTF-8: non-finite floats (a model may send ``1e999``) and lone surrogates (a
``"\\ud800"`` escape). They are written as ``null`` and as the same ``\\u`` JSON
escape, so every line stays parseable by strict JSON readers.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps_line", "has_non_finite"]


def has_non_finite(value: Any) -> bool:
    """True when ``value`` (nested dicts/lists) holds a NaN or an infinite float."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_non_finite(v) for v in value)
    return False


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps_line(value: Any) -> str:
    """``value`` as one line of strict JSON (no trailing newline), safe to encode as UTF-8."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, default=str)
    # Lone surrogates survive json.dumps(ensure_ascii=False) and break .encode(); put
    # them back as JSON escapes (valid JSON, and the same string when read back).
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
