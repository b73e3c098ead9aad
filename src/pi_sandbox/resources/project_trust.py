"""Which project files need a trust decision, and the trust store (issue 6 groundwork).

DESIGN §8, seed 000 §2: a project is trusted without asking only when it has nothing
that could run code or steer the agent. `trust_requiring_resources` lists what it
has; `TrustStore` keeps the user's decisions in ``~/.pi/agent/trust.json``, looked
up for the working directory or its nearest ancestor with a decision (a ``no`` for
``/a/b`` wins over a ``yes`` for ``/a`` in ``/a/b/c``).

Nothing here reads a resource's content: only whether it exists (``lexists``, so a
symlink counts as present even when it dangles). Not wired into runs yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from pi_sandbox.regular_files import FileRefusedError, read_regular_file

__all__ = [
    "PROJECT_RESOURCES",
    "TRUST_DECISIONS",
    "TrustStore",
    "TrustStoreError",
    "has_trust_requiring_resources",
    "trust_requiring_resources",
]

PROJECT_RESOURCES = (
    ".pi/settings.json",
    ".pi/extensions",
    ".pi/skills",
    ".pi/prompts",
    ".pi/SYSTEM.md",
    ".pi/APPEND_SYSTEM.md",
    ".pi/policy.yaml",
    ".pi/mcp.json",
    # Other agents' project configuration an extension could consume.
    ".mcp.json",
    ".claude",
)
"""Paths relative to the working directory that need a trust decision (issue 6)."""

TRUST_DECISIONS = ("yes", "no", "sandboxed")

MAX_STORE_BYTES = 1024 * 1024
"""Largest trust store read; a larger file is an error, not a slow start."""


class TrustStoreError(ValueError):
    """The trust store is malformed, too large or not a regular file (names the file)."""


def _git_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def trust_requiring_resources(cwd: Path, *, home: Path | None = None) -> list[Path]:
    """The project resources present under ``cwd`` that need a trust decision.

    ``PROJECT_RESOURCES`` in ``cwd``, plus ``.agents/skills`` in ``cwd`` and each
    ancestor up to the git root (only ``cwd`` outside a repository). The user's own
    ``~/.agents/skills`` (``home``) is never a project resource.

    Returns:
        Absolute paths, in the order checked.
    """
    cwd = Path(os.path.abspath(cwd))
    own = Path(os.path.abspath(home / ".agents" / "skills")) if home is not None else None
    found = [cwd / rel for rel in PROJECT_RESOURCES if os.path.lexists(cwd / rel)]
    root = _git_root(cwd)
    directories = [cwd]
    if root is not None:
        directories = [cwd, *[p for p in cwd.parents if p == root or root in p.parents]]
    for directory in directories:
        skills = directory / ".agents" / "skills"
        if skills != own and os.path.lexists(skills):
            found.append(skills)
    return found


def has_trust_requiring_resources(cwd: Path, *, home: Path | None = None) -> bool:
    """Whether ``cwd`` has anything that needs a trust decision (see
    `trust_requiring_resources`); ``False`` means trusted without asking."""
    return bool(trust_requiring_resources(cwd, home=home))


class TrustStore:
    """The user's trust decisions: ``{"version": 1, "decisions": {PATH: DECISION}}``.

    Paths are absolute and normalised (not resolved: the decision is for the path
    the user named). Writes are atomic (a temporary file in the same directory,
    then ``os.replace``), mode 0600, the directory 0700.

    Raises (`load`):
        TrustStoreError: not a regular file, larger than `MAX_STORE_BYTES`, not
            JSON, or entries of the wrong shape.
    """

    def __init__(self, path: Path, decisions: dict[str, str] | None = None) -> None:
        self.path = path
        self.decisions: dict[str, str] = dict(decisions or {})

    @classmethod
    def load(cls, path: Path) -> TrustStore:
        """Read the store at ``path``; a missing file is an empty store."""
        try:
            data = read_regular_file(path, MAX_STORE_BYTES, follow_symlinks=False)
        except FileNotFoundError:
            return cls(path)
        except FileRefusedError as exc:
            raise TrustStoreError(f"the trust store {exc}") from exc
        except OSError as exc:
            raise TrustStoreError(f"{path}: cannot open the trust store: {exc.strerror}") from exc
        try:
            document = json.loads(data.decode("utf-8")) if data.strip() else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise TrustStoreError(f"{path}: the trust store is not valid JSON: {exc}") from exc
        decisions = document.get("decisions", {}) if isinstance(document, dict) else None
        if not isinstance(decisions, dict):
            raise TrustStoreError(f"{path}: 'decisions' must be an object of path → decision")
        for key, value in decisions.items():
            if not os.path.isabs(key) or value not in TRUST_DECISIONS:
                raise TrustStoreError(
                    f"{path}: decisions[{key!r}]: expected an absolute path and one of "
                    f"{', '.join(TRUST_DECISIONS)}"
                )
        return cls(path, {os.path.normpath(k): v for k, v in decisions.items()})

    def decision_for(self, cwd: Path) -> tuple[str, Path] | None:
        """The decision for ``cwd`` or its nearest ancestor with one, and that path."""
        directory = Path(os.path.normpath(os.path.abspath(cwd)))
        for candidate in (directory, *directory.parents):
            decision = self.decisions.get(str(candidate))
            if decision is not None:
                return decision, candidate
        return None

    def set(self, path: Path, decision: str) -> None:
        """Record ``decision`` for ``path`` (call `save` to write it).

        Raises:
            ValueError: ``decision`` is not ``yes``, ``no`` or ``sandboxed``.
        """
        if decision not in TRUST_DECISIONS:
            raise ValueError(f"trust decision must be one of {', '.join(TRUST_DECISIONS)}")
        self.decisions[os.path.normpath(os.path.abspath(path))] = decision

    def forget(self, path: Path) -> bool:
        """Drop the decision recorded for exactly ``path``; whether there was one."""
        return self.decisions.pop(os.path.normpath(os.path.abspath(path)), None) is not None

    def save(self) -> None:
        """Write the store atomically (0600; the directory is created 0700)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        document = {"version": 1, "decisions": dict(sorted(self.decisions.items()))}
        fd, temporary = tempfile.mkstemp(prefix=".trust-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), 0o600)
                json.dump(document, handle, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
