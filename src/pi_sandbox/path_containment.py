"""Whether a path lies inside a directory — the one check behind every "a project's
files must be its own" rule (issue 6): settings paths, skills, prompt templates,
context files, system-prompt files, extension-contributed paths.

Stdlib only; nothing here opens a file.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolves_inside", "within"]


def within(real: str, root: str) -> bool:
    """Whether canonical path ``real`` is canonical directory ``root`` or below it
    (string comparison on whole components: ``/a/bc`` is not inside ``/a/b``)."""
    return real == root or real.startswith(root.rstrip("/") + "/")


def resolves_inside(path: Path | str, root: Path | str) -> bool:
    """Whether ``path`` is ``root`` or below it once symlinks of both are resolved."""
    return within(os.path.realpath(path), os.path.realpath(root))
