"""The path lists of a settings file: ``"extensions"``, ``"skills"`` and ``"prompts"``
(pi docs settings.md), read the same way by extension discovery (supervisor side) and by
resource loading and the trust fingerprint (this layer).

It lives here, below the supervisor, because lower layers never import the supervisor
(the project's layering rule); extension discovery imports it from here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pi_sandbox.path_containment import within

__all__ = ["MAX_SETTINGS_BYTES", "PI_EXTENSION_SUFFIXES", "settings_paths"]


MAX_SETTINGS_BYTES = 1024 * 1024
"""Largest settings file read (bytes); a larger one is a notice, not a hang."""


def settings_paths(
    settings_file: Path, notices: list[str], key: str = "extensions", *, confine: Path | None = None
) -> list[tuple[str, Path]]:
    """The ``key`` list (``"extensions"``, ``"skills"``, ``"prompts"``) of
    ``settings_file`` as ``[(label, absolute path), …]``.

    ``label`` is ``"<file>: <key>[i]"`` for notices. Relative paths are relative
    to the settings file's directory; ``~`` is expanded. A missing file is no
    paths; a malformed one (not JSON, not a regular file, larger than
    `MAX_SETTINGS_BYTES`), a non-list value or a non-string entry is a notice naming
    the file and the field, never an exception. The file is read without blocking
    (a planted FIFO is refused).

    With ``confine`` (the project root, for a project's ``.pi/settings.json``), a
    settings file that resolves outside it (the file, ``.pi`` or a directory above
    linking out) names nothing, with a notice: the trust fingerprint does not hash
    content outside the project, so it must not count as the project's (F4, issue 6).
    """
    from pi_sandbox.regular_files import FileRefusedError, read_regular_file

    if confine is not None and os.path.lexists(settings_file):
        real = os.path.realpath(settings_file)
        if not within(real, os.path.realpath(confine)):
            notices.append(
                f"Refused {settings_file}: it resolves to {real}, outside the project "
                f"{confine}; a project's settings must be its own file. Its {key} were not loaded"
            )
            return []

    try:
        text = read_regular_file(settings_file, MAX_SETTINGS_BYTES)
    except FileNotFoundError:
        return []
    except FileRefusedError as exc:
        notices.append(f"{exc}; its {key} were not loaded")
        return []
    except OSError as exc:
        notices.append(f"{settings_file}: cannot read it ({exc}); its {key} were not loaded")
        return []
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        notices.append(f"{settings_file}: invalid JSON ({exc}); its {key} were not loaded")
        return []
    except RecursionError:
        notices.append(f"{settings_file}: JSON nested too deeply; its {key} were not loaded")
        return []
    if not isinstance(data, dict):
        notices.append(
            f"{settings_file}: expected a JSON object at the top level; its {key} were not loaded"
        )
        return []
    declared = data.get(key)
    if declared is None:
        return []
    if not isinstance(declared, list):
        notices.append(
            f"{settings_file}: {key}: expected a list of path strings, "
            f"got {type(declared).__name__}"
        )
        return []
    base = settings_file.parent
    paths = []
    for index, raw in enumerate(declared):
        label = f"{settings_file}: {key}[{index}]"
        if not isinstance(raw, str) or not raw.strip():
            notices.append(f"{label}: expected a path string")
            continue
        if _pi_only_entry(raw):
            continue  # pi 1.6.0's, in the settings file both programs read (issue 17 §4)
        if raw[0] in "!+-":
            notices.append(
                f"{label}: {raw!r} is one of pi's include/exclude patterns, which pi-sandbox "
                f"does not apply: what it would exclude or include is loaded as without it"
            )
            continue
        path = Path(os.path.expanduser(raw))
        paths.append((label, Path(os.path.abspath(base / path))))
    return paths


PI_EXTENSION_SUFFIXES = (".ts", ".js", ".mts", ".cts", ".mjs", ".cjs")
"""pi 1.6.0's (TypeScript/JavaScript) extension files: skipped without a notice."""


def _pi_only_entry(raw: str) -> bool:
    """Whether a settings list entry is pi 1.6.0's alone: a built-in extension
    (``builtin:mcp``, ``-builtin:codemode``; settings.md) or an include/exclude
    pattern naming a TypeScript/JavaScript file. pi-sandbox skips them quietly."""
    bare = raw[1:] if raw[0] in "!+-" else raw
    return bare.startswith("builtin:") or (
        raw[0] in "!+-" and bare.rstrip("/*").endswith(PI_EXTENSION_SUFFIXES)
    )
