"""The policy files of one test, under its own tmp dir (shared by the policy-tier unit
tests: test_policy_tiers.py, test_policy_tier_scope.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pi_sandbox.policies import Policy, PolicyLocations, evaluate_tool_call, load_effective_policy

__all__ = ["Files", "write_dedented"]


class Files:
    """A managed directory, a user file and a project file under one tmp dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.managed_dir = root / "managed.d"
        self.managed_dir.mkdir()
        self.workspace = root / "ws"
        (self.workspace / ".pi").mkdir(parents=True)
        self.user = root / "agent" / "policy.yaml"
        self.user.parent.mkdir()
        self.project = self.workspace / ".pi" / "policy.yaml"
        self.policy_files: list[Path] = []

    def managed(self, text: str, name: str = "50-org.yaml") -> Path:
        return write_dedented(self.managed_dir / name, text)

    def cli(self, text: str, name: str = "cli.yaml") -> Path:
        path = write_dedented(self.root / name, text)
        self.policy_files.append(path)
        return path

    def set_user(self, text: str) -> Path:
        return write_dedented(self.user, text)

    def set_project(self, text: str) -> Path:
        return write_dedented(self.project, text)

    def locations(self, *, trusted: bool = True) -> PolicyLocations:
        return PolicyLocations(
            policy_files=tuple(self.policy_files),
            managed_dirs=(self.managed_dir,),
            user_file=self.user,
            project_file=self.project if trusted else None,
        )

    def load(self, *, trusted: bool = True) -> Policy:
        return load_effective_policy(self.locations(trusted=trusted))

    def decide(self, policy: Policy, command: str, tool: str = "bash"):
        return evaluate_tool_call(policy, tool, {"command": command}, workspace=self.workspace)


def write_dedented(path: Path, text: str) -> Path:
    """Write ``text`` dedented, without its leading newlines, to ``path``; returns it."""
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path
