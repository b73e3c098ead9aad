"""``httpx`` imported without its command-line client (issue 20, start-up cost).

``import httpx`` also imports ``httpx._main``, the ``httpx`` command's module, which
pulls in ``rich`` (with ``pygments``' lexer tables) and ``click`` whenever they are
installed — and they are, for our interactive mode: about 65 ms of every run that
talks to a model. httpx expects that module to be missing (its ``__init__`` catches
the ``ImportError`` and installs a stub ``main``), so it is made missing for the one
import and put back afterwards. Import ``httpx`` from here, never directly.
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # "not importable"
    try:
        import httpx
    finally:
        if sys.modules.get("httpx._main", 0) is None:
            del sys.modules["httpx._main"]
else:
    import httpx

__all__ = ["httpx"]
