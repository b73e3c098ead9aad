"""The approval prompt's timeout setting (issue 18 "Approvals").

``approvalTimeoutSeconds`` in ``<agent_dir>/settings.json`` (the user's settings;
a project's ``.pi/settings.json`` is not read for it): how long a
``policy_approval_request`` waits before the call is denied. Unset or ``null``: no
timeout, as pi's own dialogs (pi docs extensions.md "Timed Dialogs": a dialog
times out only when it is given a ``timeout``); the prompt waits until it is
answered, the run is aborted, or the user interface goes away.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pi_sandbox.errors import UsageError
from pi_sandbox.resources.settings_lists import MAX_SETTINGS_BYTES

__all__ = ["TIMEOUT_KEY", "approval_timeout_s"]

TIMEOUT_KEY = "approvalTimeoutSeconds"


def approval_timeout_s(agent_dir: Path) -> float | None:
    """The approval timeout in seconds, or None (no timeout).

    A settings file that is missing, unreadable or not JSON is skipped here (the
    extension loader reports such a file once).

    Raises:
        UsageError: ``approvalTimeoutSeconds`` is present but not a positive finite
            number or null (naming the file and the key).
    """
    from pi_sandbox.regular_files import FileRefusedError, read_regular_file

    path = agent_dir / "settings.json"
    try:
        data = json.loads(read_regular_file(path, MAX_SETTINGS_BYTES))
    except (FileRefusedError, OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get(TIMEOUT_KEY) is None:
        return None
    value = data[TIMEOUT_KEY]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UsageError(
            f"{path}: {TIMEOUT_KEY} must be a positive number of seconds or null, "
            f"not {json.dumps(value)[:60]}"
        )
    return float(value)
