"""The policy of a running session, reloadable without ever falling back to "no policy".

Issue 4 case 8: a policy file that turns corrupt or unreadable mid-session (on
reload) keeps the last valid policy in force and reports the error. A reload is
explicit (``SIGHUP`` to the supervisor; later the ``/reload`` command): files are
not watched, so a tool that rewrites a policy file it can reach (only possible
without ``--sandbox``: sandboxes keep policy files read-only) changes nothing until
someone asks for a reload.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_sandbox.errors import PolicyError
from pi_sandbox.policies._effective import Policy
from pi_sandbox.policies._loading import PolicyLocations, load_effective_policy

__all__ = ["PolicyStore", "ReloadResult"]


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did.

    Attributes:
        ok: the files were valid and the new policy is in force.
        error: when not ok, every problem (``FILE:LINE: KEY: …`` lines); the
            previous policy stays in force.
        sandbox_changed: the ``sandbox`` section changed; running workers keep
            the profile they were started with (a sandbox cannot be widened or
            narrowed around a running process), so the change applies to the next
            run.
        other_changed: the ``extensions``, ``trust`` or ``audit`` sections changed;
            they were applied at start-up (extensions loaded, trust decided, log
            files opened) and apply to the next run.
    """

    ok: bool
    error: str | None = None
    sandbox_changed: bool = False
    other_changed: bool = False


class PolicyStore:
    """Holds the effective policy of a run and reloads it on request.

    Args:
        locations: where the run's policy files are (trust already decided: the
            project file is set only for a trusted project).
        policy: the policy loaded from ``locations`` at start-up.
    """

    def __init__(self, locations: PolicyLocations, policy: Policy) -> None:
        self.locations = locations
        self.current = policy
        self.reloads = 0

    def reload(self) -> ReloadResult:
        """Read every file again; swap the policy in only if all of them are valid.

        Never raises for bad files: a malformed, unreadable or vanished file is
        reported in the result and the last valid policy stays in force.
        """
        try:
            fresh = load_effective_policy(self.locations)
        except PolicyError as exc:
            return ReloadResult(ok=False, error=str(exc))
        except OSError as exc:  # e.g. a managed directory replaced mid-read
            return ReloadResult(ok=False, error=f"cannot read policy files: {exc}")
        vanished = [
            str(loaded.path)
            for loaded in self.current.files
            if loaded.path not in {f.path for f in fresh.files}
        ]
        if vanished:
            return ReloadResult(
                ok=False,
                error=f"policy file(s) no longer readable: {', '.join(vanished)}",
            )
        changed = fresh.sandbox != self.current.sandbox
        other = (fresh.extensions, fresh.trust, fresh.audit) != (
            self.current.extensions,
            self.current.trust,
            self.current.audit,
        )
        self.current = fresh
        self.reloads += 1
        return ReloadResult(ok=True, sandbox_changed=changed, other_changed=other)
