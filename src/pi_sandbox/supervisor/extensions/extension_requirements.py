"""Whether a run may go on when extensions did not load (issue 13 §2).

A guard extension that fails to load must not be silently absent:

- a *required* extension (policy ``extensions.required``, managed/user tiers) that
  failed to load, was refused, disabled or never found stops the run before the
  first model request (exit status 2; `WorkerPool.required_failure`);
- in ``--ci`` any extension that failed to load stops the run (exit 2), unless the
  policy says ``extensions.on_load_error: continue``; ``on_load_error: stop`` does
  the same outside CI;
- otherwise the run goes on, with a warning per extension that says plainly that
  its hooks are NOT active.

What happens mid-run (a required extension disabled after crashing past its
restart budget) is the tool pipeline's part: every tool call is blocked and the run
ends with exit status 1.
"""

from __future__ import annotations

from typing import Any

__all__ = ["inactive_warnings", "load_stop_reason"]


def load_stop_reason(pool: Any, *, ci: bool) -> str | None:
    """Why the run must stop before the first model request, or None to go on.

    Args:
        pool: the started `WorkerPool` (its ``failed_to_load``, ``config.extension_rules``
            and `required_failure`).
        ci: ``--ci`` mode: a load failure stops unless the policy says ``continue``.

    Returns:
        A message naming the extension and its error (for exit status 2), or None.
    """
    required = pool.required_failure()
    if required is not None:
        return required
    rules = pool.config.extension_rules
    setting = rules.on_load_error if rules is not None else None
    stop = setting == "stop" or (ci and setting != "continue")
    if not stop or not pool.failed_to_load:
        return None
    path, (_, error) = next(iter(pool.failed_to_load.items()))
    more = len(pool.failed_to_load) - 1
    why = "policy extensions.on_load_error: stop" if setting == "stop" else "CI mode"
    return (
        f"extension {path} failed to load: {error}"
        + (f" (and {more} more)" if more else "")
        + f"; the run stops ({why}; a managed or user policy with "
        "extensions.on_load_error: continue runs on without it)"
    )


def inactive_warnings(pool: Any) -> list[str]:
    """One warning per extension that failed to load and that the run goes on
    without (issue 13 §2: the user must know its hooks do not protect this run)."""
    return [
        f"extension {path} did not load: its hooks are NOT active in this run (nothing "
        "it would block, redact or check is blocked, redacted or checked)"
        for path in pool.failed_to_load
    ]
