"""Report trust-requiring resources a sandboxed run created or changed (issue 14 §4).

A sandboxed run may write its workspace, and so plant ``pkg/app/.pi/extensions/
helper.py`` or edit a skill of a trusted project. The next run would find a changed
fingerprint and treat the project as undecided (`resource_set.resolve_trust`); this
module makes the run that did it say so at its end: a warning (stderr in print
mode), a ``project_resources_changed`` event (``--mode json``/RPC) and an audit
record. It compares a metadata snapshot (`trust_fingerprint.workspace_snapshot`: no
file is read) of the writable roots taken when the workers have started with one
taken after they are gone.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.resources.trust_fingerprint import (
    WorkspaceSnapshot,
    snapshot_changes,
    workspace_snapshot,
)

__all__ = ["ResourceWatch", "watched_roots"]


def watched_roots(cwd: Path, writable: Iterable[str]) -> list[Path]:
    """The workspace and the sandbox's writable roots, none inside another."""
    roots = sorted({os.path.abspath(cwd), *(os.path.abspath(r) for r in writable)})
    kept: list[str] = []
    for root in roots:
        if not any(root == k or root.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(root)
    return [Path(r) for r in kept]


class ResourceWatch:
    """Snapshots of the trust-requiring resources below ``roots``: `start` at the
    run's start, `report` at its end.

    Args:
        roots: see `watched_roots`.
        home: the user's home (``~/.agents/skills`` is not a project resource).
    """

    def __init__(self, roots: list[Path], home: Path) -> None:
        self.roots = roots
        self.home = home
        self.before: WorkspaceSnapshot | None = None

    def _snapshot(self) -> WorkspaceSnapshot:
        return workspace_snapshot(self.roots, home=self.home)

    async def start(self) -> None:
        """Take the first snapshot (in a thread: it walks directories)."""
        self.before = await trio.to_thread.run_sync(self._snapshot)

    async def report(
        self,
        output: Callable[[dict[str, Any]], Awaitable[None]],
        audit: Callable[[dict[str, Any]], None],
    ) -> None:
        """Take the second snapshot and report what changed: a ``warning`` and a
        ``project_resources_changed`` event (``{"type", "roots", "added",
        "removed", "modified", "unverifiable", "incomplete"}``, absolute paths) on
        ``output``, and a ``{"event": "trust", "action": "resources_changed", …}``
        audit record. Nothing when nothing changed and the walk was complete; a
        warning alone when it was incomplete."""
        if self.before is None:
            return
        after = await trio.to_thread.run_sync(self._snapshot)
        changes = snapshot_changes(self.before, after)
        if not changes:
            if changes.incomplete:
                await output(
                    {
                        "type": "pisandbox_warning",
                        "message": "the check for trust-requiring resources (.pi/, "
                        f".agents/skills, …) created during the run was incomplete: "
                        f"{changes.incomplete}",
                    }
                )
            return
        detail = {"roots": [str(r) for r in self.roots], **changes.as_dict()}
        audit({"event": "trust", "action": "resources_changed", **detail})
        await output({"type": "project_resources_changed", **detail})
        incomplete = (
            f" (the check was incomplete: {changes.incomplete})" if changes.incomplete else ""
        )
        await output(
            {
                "type": "pisandbox_warning",
                "message": "this run created or changed trust-requiring project resources "
                f"({changes.summary()}){incomplete}. A saved trust decision does not "
                "cover them: the next run there treats the project as undecided until "
                "you review them and trust it again (pi trust show)",
            }
        )
