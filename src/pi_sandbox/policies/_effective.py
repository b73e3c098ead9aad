"""The effective policy: every tier's files combined so that a lower tier only tightens.

Tiers, highest first (issue 4, DESIGN §7): ``managed`` (``/etc/pi/policy.d/*.yaml``
in name order, then every ``--policy FILE``), ``user`` (``~/.pi/agent/policy.yaml``),
``project`` (``.pi/policy.yaml``, read only when the project is trusted).

Combination rules, section by section:

- ``lock: [SECTION…]`` in a file makes every file of a *lower* tier lose that
  section (ignored, with a diagnostic); files of the same tier are peers.
- ``tool_call``: each tier keeps its own rules and defaults and decides on its own;
  the strictest tier decision wins (`evaluate_tool_call`).
- ``sandbox``: deny lists, read-only paths and ``sockets`` (managed and user
  tiers only) accumulate; ``workspace: read`` beats
  ``write``; writable roots, the network allowlist and the environment allowlist
  intersect across the files that set them; limits take the smallest value. The
  project tier cannot grant what no higher tier granted: before it is applied,
  every grant nobody set becomes its default (nothing), every limit nobody set
  becomes its default. A project file governs only the project's own code (the
  tool worker, project extensions): the workers of managed, user and ``-e``
  extensions get `Policy.higher_tier_sandbox`, combined without the project tier,
  so a repository cannot starve the user's guard of memory, processes or time
  (issue 13 §3). The network stays run-wide (one egress proxy per run).
- ``extensions``: ``project: deny`` wins; ``deny`` patterns accumulate; ``allow``
  lists intersect (an extension must match every file's list); per capability
  ``false`` wins, and a project file can only withhold capabilities. Entries of a
  project file govern project extensions only; ``handler_timeout_s`` takes the
  smallest value, a project file's only for project extensions (issue 13 §3).
- ``trust``: the strictest ``default`` (yes < sandboxed < ask < no) and the
  strictest ``users_may_trust`` (yes < sandboxed < no); a project file's ``trust``
  section is ignored (trust is decided before the project policy is read).
- ``audit``: every ``file`` of the managed and user tiers receives the records;
  ``include`` is the union; ``arguments`` comes from the highest tier that sets
  it. A project file cannot choose where pi writes (its ``audit.file`` is ignored).

Every value of the result remembers which file and tier it came from
(`Policy.provenance`), for ``pi policy show``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.policies._extension_limits import LimitRules, combine_limits
from pi_sandbox.policies._mcp import McpRules, combine_mcp
from pi_sandbox.policies._schema import (
    AUDIT_RECORDS,
    CAPABILITIES,
    PolicyFile,
    SandboxSection,
)
from pi_sandbox.policies._tool_gate import _SEVERITY, TIERS, PolicyRule, PolicyTier, Tier
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings

__all__ = [
    "AuditSettings",
    "ExtensionRules",
    "LoadedPolicyFile",
    "Policy",
    "TrustRules",
    "build_policy",
]

_TRUST_DEFAULT_ORDER = {"yes": 0, "sandboxed": 1, "ask": 2, "no": 3}
_USERS_MAY_TRUST_ORDER = {"yes": 0, "sandboxed": 1, "no": 2}
_DEFAULT_CAPABILITIES = {
    "override_builtin_tools": False,
    "send_user_messages": True,
    "ui": True,
    "exec": True,
    "network": False,
    "set_model": True,
    "register_providers": True,
}

DEFAULT_HANDLER_TIMEOUT_S = 30.0
"""Deadline of one extension handler call when no policy sets
``extensions.handler_timeout_s`` (seconds)."""


@dataclass(frozen=True)
class LoadedPolicyFile:
    """A validated policy file and the tier it was loaded as.

    ``system`` marks managed files from the managed directories
    (``/etc/pi/policy.d``): their ``lock`` binds the other managed files too
    (``--policy``, ``$PI_MANAGED_POLICY_DIR``), which whoever starts ``pi`` chooses.
    """

    tier: Tier
    path: Path
    file: PolicyFile
    system: bool = False

    @property
    def lock_rank(self) -> int:
        """Order for ``lock``: system managed 0, other managed 1, user 2, project 4."""
        return 2 * TIERS.index(self.tier) + (0 if self.system or self.tier != "managed" else 1)


@dataclass(frozen=True)
class ValueOrigin:
    """One row of ``pi policy show``: a value and the files (with tiers) it came from.

    ``files`` is empty for a built-in default (``tier`` is then ``"default"``).
    """

    key: str
    value: Any
    tier: str
    files: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "tier": self.tier, "files": list(self.files)}


@dataclass(frozen=True)
class ExtensionRules:
    """The combined ``extensions`` sections.

    Patterns are matched against every form of an extension: its canonical path
    and the path it was discovered at (a symlink such as
    ``.pi/extensions/helper.py -> ../../lib/helper.py``), and the names of both
    (file stem or package directory name). A deny matching any form refuses it;
    an allow list or a capability entry matching any form applies.

    A name is not proof of identity: a repository can ship a ``guard.py`` of its
    own. For extensions of origin ``"project"`` a bare-name pattern (no ``/``)
    can therefore only withhold (``deny``, a capability ``false``); membership
    of an ``allow`` list and a capability ``true`` need a path pattern matching
    the extension (e.g. ``"*/.pi/extensions/guard.py"``).

    Attributes:
        project_allowed: whether project extensions may load at all.
        allow_lists: one ``(patterns, file)`` per file that set ``allow``.
        deny: ``(pattern, file)`` pairs.
        capabilities: ``(pattern, capability, value, file)`` entries.
        project_files: project-tier policy files; their entries govern project
            extensions only (a repository must not switch off the user's own
            guard extensions).
        required: ``(pattern, file)`` pairs from managed/user files: extensions that
            must be active for the run to go on (issue 13 §2; `requirement_met`).
        on_load_error: ``"stop"``, ``"continue"`` or None (not set; then a ``--ci``
            run stops and other runs warn) from managed/user files, ``stop`` winning.
        handler_timeout_s: the deadline of each handler call of a managed, user or
            command-line (``-e``) extension, seconds: the smallest the managed and
            user tiers set. A project file cannot shorten it: a deadline of 0.1 s
            would make the user's redaction hook fail on every call (issue 13 §3).
        project_handler_timeout_s: the deadline for project extensions: the
            smallest any tier set, the project tier included.
    """

    project_allowed: bool = True
    project_denied_by: str | None = None
    allow_lists: tuple[tuple[tuple[str, ...], str], ...] = ()
    deny: tuple[tuple[str, str], ...] = ()
    capabilities: tuple[tuple[str, str, bool, str], ...] = ()
    project_files: frozenset[str] = frozenset()
    handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S
    required: tuple[tuple[str, str], ...] = ()
    on_load_error: str | None = None

    def requirement_met(
        self, pattern: str, name: str, path: Path, origin: str, *, discovered: Path | None = None
    ) -> bool:
        """Whether the extension ``name`` at ``path`` satisfies the ``required`` entry
        ``pattern`` (issue 13 §2). Like an ``allow`` entry, a bare name is not proof of
        identity: only a path pattern can be met by a project extension."""
        return self._may_grant(pattern, origin) and self._any_form(
            pattern, self._forms(name, path, discovered)
        )

    # issue 13 §4: ``extensions.limits`` (`LimitRules.for_origin`).
    limits: LimitRules = field(default_factory=LimitRules)
    project_handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S

    def handler_timeout_for(self, origin: str) -> float:
        """The handler deadline (seconds) of an extension of ``origin`` (``"project"``,
        ``"user"``, ``"cli"`` …): a project's policy governs only the project's own
        extensions (issue 13 §3)."""
        return self.project_handler_timeout_s if origin == "project" else self.handler_timeout_s

    def refusal(
        self, name: str, path: Path, origin: str, *, discovered: Path | None = None
    ) -> str | None:
        """Why the extension may not load (naming the policy file), or None when it may.

        A deny pattern matching any form refuses; an allow list is satisfied by
        any form. For a project extension only path patterns satisfy an allow list.

        Args:
            name: the extension's name (file stem, or package directory name).
            path: its canonical path.
            origin: ``"cli"``, ``"project"``, ``"user"`` …
            discovered: the path it was found at, before symlinks were resolved
                (None: the same as ``path``).
        """
        if origin == "project" and not self.project_allowed:
            return f"project extensions are not allowed by policy {self.project_denied_by}"
        forms = self._forms(name, path, discovered)
        for pattern, source in self.deny:
            if self._governs(source, origin) and self._any_form(pattern, forms):
                return f"denied by pattern {pattern!r} in policy {source}"
        for patterns, source in self.allow_lists:
            if not self._governs(source, origin):
                continue
            if not any(
                self._may_grant(pattern, origin) and self._any_form(pattern, forms)
                for pattern in patterns
            ):
                why = f"not in the extensions.allow list of policy {source}"
                if origin == "project" and any(
                    self._any_form(pattern, forms) for pattern in patterns
                ):
                    why += " (a project extension is allowed only by a path pattern, not by name)"
                return why
        return None

    def _governs(self, source: str, origin: str) -> bool:
        return origin == "project" or source not in self.project_files

    @staticmethod
    def _may_grant(pattern: str, origin: str) -> bool:
        """Whether ``pattern`` may grant (allow, capability ``true``) to ``origin``:
        a project extension is identified by path, never by a name it chose."""
        return origin != "project" or "/" in pattern

    @staticmethod
    def _forms(name: str, path: Path, discovered: Path | None) -> list[tuple[str, Path]]:
        forms = [(name, path)]
        if discovered is not None and discovered != path:
            alias = discovered.stem if discovered.suffix == ".py" else discovered.name
            forms.append((alias, discovered))
        return forms

    @staticmethod
    def _any_form(pattern: str, forms: list[tuple[str, Path]]) -> bool:
        return any(_matches(pattern, name, path) for name, path in forms)

    def capabilities_for(
        self,
        name: str,
        path: Path,
        origin: str = "project",
        *,
        discovered: Path | None = None,
    ) -> dict[str, bool]:
        """Each capability in `CAPABILITIES` for this extension: ``false`` from any
        entry matching any form wins, else ``true`` from any, else the default.

        For a project extension a ``true`` counts only from a path pattern (see
        the class docstring); a bare-name ``false`` still withholds.
        """
        result = dict(_DEFAULT_CAPABILITIES)
        said: dict[str, bool] = {}
        forms = self._forms(name, path, discovered)
        for pattern, capability, value, source in self.capabilities:
            if not self._governs(source, origin) or not self._any_form(pattern, forms):
                continue
            if value and not self._may_grant(pattern, origin):
                continue
            said[capability] = said.get(capability, True) and value
        result.update(said)
        return result


def _matches(pattern: str, name: str, path: Path) -> bool:
    if "/" in pattern:
        return fnmatch.fnmatchcase(str(path), pattern)
    return fnmatch.fnmatchcase(name, pattern)


@dataclass(frozen=True)
class TrustRules:
    """The combined ``trust`` sections (see `TrustSection`)."""

    default: str = "ask"
    default_source: str | None = None
    users_may_trust: str = "yes"
    users_may_trust_source: str | None = None

    def decide(self, requested: str | None, *, has_ui: bool = False) -> tuple[str | None, str]:
        """The run's trust decision and where it came from (DESIGN §8, issue 4).

        ``requested`` (``--trust``) wins when the policy allows it; otherwise
        ``default`` decides, limited by ``users_may_trust``. ``ask`` stays ``"ask"``
        with a UI and becomes None (undecided: not trusted) without one.

        Returns:
            ``(decision, source)``: decision ``"yes"``, ``"no"``, ``"sandboxed"``,
            ``"ask"`` or None; source ``"--trust"``, ``"policy FILE"`` or
            ``"default"``.

        Raises:
            ValueError: ``requested`` is forbidden by ``users_may_trust`` (the
                message names the policy file).
        """
        if requested is not None:
            refusal = self.refusal(requested)
            if refusal is not None:
                raise ValueError(f"{requested!r} is not allowed: {refusal}")
            return requested, "--trust"
        source = f"policy {self.default_source}" if self.default_source else "default"
        decision: str | None = self.default
        if decision == "ask":
            return ("ask" if has_ui else None), source
        if self.refusal(decision) is not None:
            decision = "sandboxed" if self.users_may_trust == "sandboxed" else "no"
            source += f" (limited by policy {self.users_may_trust_source})"
        return decision, source

    def refusal(self, decision: str) -> str | None:
        """Why a user's trust ``decision`` is not allowed, or None when it is."""
        if decision == "yes" and self.users_may_trust != "yes":
            return f"policy {self.users_may_trust_source} allows only " + (
                "'sandboxed' or 'no'" if self.users_may_trust == "sandboxed" else "'no'"
            )
        if decision == "sandboxed" and self.users_may_trust == "no":
            return f"policy {self.users_may_trust_source} forbids trusting projects"
        return None


@dataclass(frozen=True)
class AuditSettings:
    """The combined ``audit`` sections: files to append to and records to write."""

    files: tuple[tuple[str, str], ...] = ()  # (audit file as written, policy file)
    include: tuple[str, ...] = AUDIT_RECORDS
    arguments: bool = True


@dataclass(frozen=True)
class Policy:
    """The effective policy of a run.

    Build one with :func:`load_effective_policy` (all tiers) or
    :func:`load_policies` (``--policy`` files only).

    Attributes:
        tiers: the ``tool_call`` gate of each tier that has files, highest first.
        sandbox: the combined ``sandbox`` sections.
        extensions: the combined ``extensions`` sections.
        trust: the combined ``trust`` sections.
        audit: the combined ``audit`` sections.
        files: every file, with its tier, in load order.
        provenance: one `ValueOrigin` per effective value (``pi policy show``).
        diagnostics: what was ignored and why (locked sections, grants a project
            cannot make), one line each, naming the file.
        workspace_write_granted: a managed or user file says
            ``filesystem.workspace: write`` explicitly (CI mode keeps the workspace
            read-only otherwise).
        sandbox_required_by: the first file with ``sandbox.required: true`` (the
            run is sandboxed whatever the options say), or None.
        has_sandbox_section: some file in force has a ``sandbox`` section (which
            binds only sandboxed runs).
        higher_tier_sandbox: the ``sandbox`` sections of the managed and user tiers
            alone, with the run-wide network of ``sandbox``: the settings of the
            workers of managed, user and command-line extensions, which a project
            file must not govern (issue 13 §3). None: the same as ``sandbox``.
    """

    tiers: tuple[PolicyTier, ...] = ()
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    extensions: ExtensionRules = field(default_factory=ExtensionRules)
    trust: TrustRules = field(default_factory=TrustRules)
    audit: AuditSettings = field(default_factory=AuditSettings)
    files: tuple[LoadedPolicyFile, ...] = ()
    provenance: tuple[ValueOrigin, ...] = ()
    diagnostics: tuple[str, ...] = ()
    workspace_write_granted: bool = False
    sandbox_required_by: str | None = None
    has_sandbox_section: bool = False
    higher_tier_sandbox: SandboxSettings | None = None
    # issue 19: the combined ``mcp`` sections (policies/_mcp.py).
    mcp: McpRules = field(default_factory=McpRules)

    @property
    def rules(self) -> tuple[PolicyRule, ...]:
        """Every tier's rules, highest tier first."""
        return tuple(rule for tier in self.tiers for rule in tier.rules)

    @property
    def default(self) -> str:
        """The strictest tier default (``allow`` without tiers)."""
        return max((t.default for t in self.tiers), key=_SEVERITY.__getitem__, default="allow")

    @property
    def unparseable(self) -> str:
        """The strictest tier ``unparseable`` decision (``ask`` without tiers)."""
        return max((t.unparseable for t in self.tiers), key=_SEVERITY.__getitem__, default="ask")

    @property
    def default_source(self) -> Path | None:
        """The file whose ``default`` is the strictest (first such)."""
        best = None
        for tier in self.tiers:
            if best is None or _SEVERITY[tier.default] > _SEVERITY[best.default]:
                best = tier
        return best.default_source if best else None

    @property
    def sources(self) -> tuple[Path, ...]:
        """Every file, in load order."""
        return tuple(loaded.path for loaded in self.files)


def build_policy(files: Sequence[LoadedPolicyFile]) -> Policy:
    """Combine validated files (each with its tier) into the effective policy.

    Args:
        files: in load order; tiers must appear highest first (managed, user, project).

    Returns:
        The effective policy (see the module docstring for the rules).

    Raises:
        ValueError: ``files`` are not ordered by tier.
    """
    ranks = [TIERS.index(f.tier) for f in files]
    if ranks != sorted(ranks):
        raise ValueError("policy files must be given highest tier first")
    diagnostics: list[str] = []
    origins: list[ValueOrigin] = []
    # Which sections each file may set, after higher tiers' locks.
    locked_by: dict[str, tuple[int, str, str]] = {}  # section -> (lock rank, file, tier)
    usable: list[tuple[LoadedPolicyFile, set[str]]] = []
    for loaded in files:
        rank = loaded.lock_rank
        present = {name for name in loaded.file.model_fields_set if name not in ("version", "lock")}
        allowed = set()
        for section in present:
            lock = locked_by.get(section)
            if lock is not None and lock[0] < rank:
                diagnostics.append(
                    f"{loaded.path}: section {section!r} ignored: locked by {lock[1]} "
                    f"({lock[2]} tier)"
                )
                continue
            allowed.add(section)
        usable.append((loaded, allowed))
        for section in loaded.file.lock:
            if section not in locked_by:
                locked_by[section] = (rank, str(loaded.path), loaded.tier)
                origins.append(
                    ValueOrigin(f"lock.{section}", True, loaded.tier, (str(loaded.path),))
                )

    tiers = _tool_call_tiers(usable, origins)
    sandbox, workspace_write_granted = _sandbox(usable, origins, diagnostics)
    higher = [(f, allowed) for f, allowed in usable if f.tier != "project"]
    higher_tier_sandbox = None
    if len(higher) != len(usable):
        # Issue 13 §3: the project tier governs only the project's code.
        higher_tier_sandbox = dataclasses.replace(
            _sandbox(higher, [], [])[0],
            network=sandbox.network,
            network_allow=sandbox.network_allow,
            network_deny=sandbox.network_deny,
        )
    extensions = _extensions(usable, origins, diagnostics)
    trust = _trust(usable, origins, diagnostics)
    audit = _audit(usable, origins, diagnostics)
    mcp, mcp_notes = combine_mcp(
        [
            (f.tier, str(f.path), f.file.mcp)
            for f, allowed in usable
            if f.file.mcp is not None and "mcp" in allowed
        ]
    )
    diagnostics.extend(mcp_notes)
    required = [
        f
        for f, allowed in usable
        if "sandbox" in allowed and f.file.sandbox and f.file.sandbox.required
    ]
    if required:
        origins.append(
            ValueOrigin("sandbox.required", True, required[0].tier, (str(required[0].path),))
        )
    return Policy(
        sandbox_required_by=str(required[0].path) if required else None,
        has_sandbox_section=any("sandbox" in allowed for _, allowed in usable),
        tiers=tiers,
        sandbox=sandbox,
        extensions=extensions,
        trust=trust,
        audit=audit,
        files=tuple(files),
        provenance=tuple(origins),
        diagnostics=tuple(diagnostics),
        workspace_write_granted=workspace_write_granted,
        higher_tier_sandbox=higher_tier_sandbox,
        mcp=mcp,
    )


def _tool_call_tiers(
    usable: list[tuple[LoadedPolicyFile, set[str]]], origins: list[ValueOrigin]
) -> tuple[PolicyTier, ...]:
    tiers = []
    for tier in TIERS:
        members = [f for f, allowed in usable if f.tier == tier and "tool_call" in allowed]
        all_of_tier = [f for f, _ in usable if f.tier == tier]
        if not all_of_tier:
            continue
        if not members:
            # The tier's files exist but their tool_call sections are locked out.
            continue
        rules = tuple(
            PolicyRule.from_model(rule, source=f.path, tier=tier)
            for f in members
            for rule in f.file.tool_call.rules
        )
        default_file = _first_strictest(members, lambda f: f.file.tool_call.default)
        unparseable_file = _first_strictest(members, lambda f: f.file.tool_call.unparseable)
        tiers.append(
            PolicyTier(
                tier=tier,
                rules=rules,
                default=default_file.file.tool_call.default,
                unparseable=unparseable_file.file.tool_call.unparseable,
                default_source=default_file.path,
                sources=tuple(f.path for f in members),
            )
        )
        origins.append(
            ValueOrigin(
                f"tool_call.default[{tier}]",
                default_file.file.tool_call.default,
                tier,
                (str(default_file.path),),
            )
        )
        origins.append(
            ValueOrigin(
                f"tool_call.unparseable[{tier}]",
                unparseable_file.file.tool_call.unparseable,
                tier,
                (str(unparseable_file.path),),
            )
        )
        for rule in rules:
            origins.append(
                ValueOrigin(
                    "tool_call.rules",
                    {"id": rule.id, "tool": list(rule.tools), "decision": rule.decision},
                    tier,
                    (str(rule.source),),
                )
            )
    return tuple(tiers)


def _first_strictest(files: Sequence[LoadedPolicyFile], decision_of: Any) -> LoadedPolicyFile:
    best = files[0]
    for loaded in files[1:]:
        if _SEVERITY[decision_of(loaded)] > _SEVERITY[decision_of(best)]:
            best = loaded
    return best


class _Grant:
    """An allowlist that intersects across the files that set it, with provenance."""

    def __init__(self) -> None:
        self.items: dict[str, list[str]] | None = None  # None: nobody constrained it

    def apply(self, values: Sequence[str], source: str) -> list[str]:
        """Intersect with ``values``; returns the entries ``values`` asked for in vain."""
        if self.items is None:
            self.items = {value: [source] for value in values}
            return []
        refused = [value for value in values if value not in self.items]
        self.items = {
            value: [*files, source] for value, files in self.items.items() if value in values
        }
        return refused

    def close(self) -> None:
        """Nobody set it so far: from now on, it is empty (the default grants nothing)."""
        if self.items is None:
            self.items = {}

    def values(self) -> tuple[str, ...]:
        return tuple(self.items or ())


def _sandbox(
    usable: list[tuple[LoadedPolicyFile, set[str]]],
    origins: list[ValueOrigin],
    diagnostics: list[str],
) -> tuple[SandboxSettings, bool]:
    writable, env_allow, net_allow = _Grant(), _Grant(), _Grant()
    union: dict[str, dict[str, list[str]]] = {
        "read_only": {},
        "deny_read": {},
        "deny_write": {},
        "network_deny": {},
        "sockets": {},
    }
    workspace_read: list[tuple[str, str]] = []
    git_read: list[tuple[str, str]] = []
    workspace_write_granted = False
    network_none_by: list[tuple[str, str]] = []
    allowlist_by: list[tuple[str, str]] = []
    limits: dict[str, tuple[int, str, str]] = {}  # name -> (value, tier, file)
    closed = False
    for loaded, allowed in usable:
        if loaded.tier == "project" and not closed:
            closed = True
            for grant in (writable, env_allow, net_allow):
                grant.close()
            for name, default in vars(SandboxLimits()).items():
                limits.setdefault(name, (default, "default", ""))
        section: SandboxSection | None = loaded.file.sandbox
        if section is None or "sandbox" not in allowed:
            continue
        source, tier = str(loaded.path), loaded.tier
        fs, net = section.filesystem, section.network
        if fs.workspace == "read":
            workspace_read.append((tier, source))
        elif "workspace" in fs.model_fields_set and tier != "project":
            workspace_write_granted = True
        if fs.git == "read":
            git_read.append((tier, source))
        if "writable_roots" in fs.model_fields_set:
            refused = writable.apply(fs.writable_roots, source)
            if refused:
                diagnostics.append(_not_granted(source, "filesystem.writable_roots", refused, tier))
        if fs.read_only and tier == "project":
            # Read-only binds expose host paths (files, sockets) to the sandbox: a grant.
            diagnostics.append(
                f"{source}: sandbox.filesystem.read_only {list(fs.read_only)} ignored: a "
                "project policy cannot expose host paths to the sandbox"
            )
        if section.sockets and tier == "project":
            diagnostics.append(
                f"{source}: sandbox.sockets {list(section.sockets)} ignored: a project "
                "policy cannot bind host sockets into the sandbox"
            )
        for key, values in (
            ("read_only", fs.read_only if tier != "project" else ()),
            ("sockets", section.sockets if tier != "project" else ()),
            ("deny_read", fs.deny_read),
            ("deny_write", fs.deny_write),
            ("network_deny", net.deny),
        ):
            for value in values:
                union[key].setdefault(value, []).append(source)
        if "mode" in net.model_fields_set and net.mode == "none":
            network_none_by.append((tier, source))
        if net.mode == "allowlist":
            allowlist_by.append((tier, source))
            refused = net_allow.apply(net.allow, source)
            if refused:
                diagnostics.append(_not_granted(source, "network.allow", refused, tier))
        if "allow" in section.environment.model_fields_set:
            refused = env_allow.apply(section.environment.allow, source)
            if refused:
                diagnostics.append(_not_granted(source, "environment.allow", refused, tier))
        for name in section.limits.model_fields_set:
            value = getattr(section.limits, name)
            if name not in limits or value < limits[name][0]:
                limits[name] = (value, tier, source)

    network = "allowlist" if allowlist_by and not network_none_by else "none"
    if network == "allowlist" and not net_allow.values():
        network = "none"  # every host was refused: an empty allowlist is no network
    settings = SandboxSettings(
        workspace_writable=not workspace_read,
        git="read" if git_read else "commit",
        writable_roots=writable.values(),
        read_only=tuple(union["read_only"]),
        deny_read=tuple(union["deny_read"]),
        deny_write=tuple(union["deny_write"]),
        network=network,
        network_allow=net_allow.values() if network == "allowlist" else (),
        network_deny=tuple(union["network_deny"]),
        environment_allow=env_allow.values(),
        limits=SandboxLimits(**{name: value for name, (value, _, _) in limits.items()}),
        sockets=tuple(union["sockets"]),
    )

    def origin(key: str, value: Any, entries: Sequence[tuple[str, str]]) -> None:
        if entries:
            tier = min((t for t, _ in entries), key=TIERS.index)
            origins.append(
                ValueOrigin(key, value, tier, tuple(dict.fromkeys(f for _, f in entries)))
            )
        else:
            origins.append(ValueOrigin(key, value, "default"))

    origin(
        "sandbox.filesystem.workspace",
        "write" if settings.workspace_writable else "read",
        workspace_read,
    )
    origin("sandbox.filesystem.git", settings.git, git_read)
    for key, grant in (
        ("sandbox.filesystem.writable_roots", writable),
        ("sandbox.network.allow", net_allow),
        ("sandbox.environment.allow", env_allow),
    ):
        if key == "sandbox.network.allow" and network != "allowlist":
            continue
        for value, sources in (grant.items or {}).items():
            origins.append(ValueOrigin(key, value, _tier_of(sources, usable), tuple(sources)))
    for key, values in union.items():
        full = {
            "network_deny": "sandbox.network.deny",
            "sockets": "sandbox.sockets",
        }.get(key, f"sandbox.filesystem.{key}")
        for value, sources in values.items():
            origins.append(ValueOrigin(full, value, _tier_of(sources, usable), tuple(sources)))
    origin("sandbox.network.mode", network, network_none_by or allowlist_by)
    for name, default in vars(SandboxLimits()).items():
        value, tier, source = limits.get(name, (default, "default", ""))
        origins.append(
            ValueOrigin(f"sandbox.limits.{name}", value, tier, (source,) if source else ())
        )
    return settings, workspace_write_granted


def _not_granted(source: str, key: str, refused: Sequence[str], tier: str) -> str:
    why = (
        "a project policy cannot grant what no higher tier granted"
        if tier == "project"
        else "another policy file of the same or a higher tier does not grant them"
    )
    return f"{source}: sandbox.{key} {list(refused)} ignored: {why}"


def _tier_of(sources: Sequence[str], usable: list[tuple[LoadedPolicyFile, set[str]]]) -> str:
    """The highest tier among ``sources`` (policy file paths)."""
    tiers = [loaded.tier for loaded, _ in usable if str(loaded.path) in sources]
    return min(tiers, key=TIERS.index) if tiers else "default"


def _extensions(
    usable: list[tuple[LoadedPolicyFile, set[str]]],
    origins: list[ValueOrigin],
    diagnostics: list[str],
) -> ExtensionRules:
    project_allowed, denied_by = True, None
    project_files = frozenset(str(f.path) for f, _ in usable if f.tier == "project")
    allow_lists: list[tuple[tuple[str, ...], str]] = []
    deny: list[tuple[str, str]] = []
    capabilities: list[tuple[str, str, bool, str]] = []
    handler_timeout_s = DEFAULT_HANDLER_TIMEOUT_S
    project_timeout: tuple[float, str] | None = None  # the project tier's tightest, and its file
    for loaded, allowed in usable:
        section = loaded.file.extensions
        if section is None or "extensions" not in allowed:
            continue
        source, tier = str(loaded.path), loaded.tier
        timeout = section.handler_timeout_s
        if timeout is not None and tier == "project":
            # Issue 13 §3: the project's own extensions only, never the user's guards.
            if project_timeout is None or timeout < project_timeout[0]:
                project_timeout = (timeout, source)
        elif timeout is not None and timeout < handler_timeout_s:
            handler_timeout_s = timeout
            origins.append(
                ValueOrigin("extensions.handler_timeout_s", handler_timeout_s, tier, (source,))
            )
        if section.project == "deny" and project_allowed:
            project_allowed, denied_by = False, source
            origins.append(ValueOrigin("extensions.project", "deny", tier, (source,)))
        if section.allow is not None:
            allow_lists.append((section.allow, source))
            origins.append(ValueOrigin("extensions.allow", list(section.allow), tier, (source,)))
        for pattern in section.deny:
            deny.append((pattern, source))
            origins.append(ValueOrigin("extensions.deny", pattern, tier, (source,)))
        for pattern, granted in section.capabilities.items():
            for capability in CAPABILITIES:
                value = getattr(granted, capability)
                if value is None:
                    continue
                if value and tier == "project":
                    diagnostics.append(
                        f"{source}: extensions.capabilities[{pattern!r}].{capability}: true "
                        "ignored: a project policy can only withhold capabilities"
                    )
                    continue
                capabilities.append((pattern, capability, value, source))
                origins.append(
                    ValueOrigin(
                        f"extensions.capabilities[{pattern}].{capability}", value, tier, (source,)
                    )
                )
    required, on_load_error = _extension_requirements(usable, origins, diagnostics)
    limits, limit_origins, limit_diagnostics = combine_limits(
        [
            (loaded.tier, str(loaded.path), loaded.file.extensions.limits)
            for loaded, allowed in usable
            if loaded.file.extensions is not None and "extensions" in allowed
        ]
    )
    diagnostics += limit_diagnostics
    origins += [
        ValueOrigin(key, value, tier, (source,)) for key, value, tier, source in limit_origins
    ]
    if project_allowed:
        said_allow = [
            (f.tier, str(f.path))
            for f, allowed in usable
            if "extensions" in allowed
            and f.file.extensions is not None
            and "project" in f.file.extensions.model_fields_set
        ]
        origins.append(
            ValueOrigin(
                "extensions.project",
                "allow",
                said_allow[0][0] if said_allow else "default",
                tuple(path for _, path in said_allow),
            )
        )
    project_handler_timeout_s = handler_timeout_s
    if project_timeout is not None and project_timeout[0] < handler_timeout_s:
        project_handler_timeout_s = project_timeout[0]
        origins.append(
            ValueOrigin(
                "extensions.handler_timeout_s[project extensions]",
                project_handler_timeout_s,
                "project",
                (project_timeout[1],),
            )
        )
    return ExtensionRules(
        project_allowed=project_allowed,
        project_denied_by=denied_by,
        allow_lists=tuple(allow_lists),
        deny=tuple(deny),
        capabilities=tuple(capabilities),
        project_files=project_files,
        handler_timeout_s=handler_timeout_s,
        required=required,
        on_load_error=on_load_error,
        limits=limits,
        project_handler_timeout_s=project_handler_timeout_s,
    )


def _extension_requirements(
    usable: list[tuple[LoadedPolicyFile, set[str]]],
    origins: list[ValueOrigin],
    diagnostics: list[str],
) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """``extensions.required`` (union) and ``extensions.on_load_error`` (``stop``
    wins) from managed and user files (issue 13 §2). A project file may not set
    either: a repository must not make the user's run depend on its extensions, nor
    let a CI run go on without a guard that failed to load (ignored, diagnostic)."""
    required: list[tuple[str, str]] = []
    on_load_error: str | None = None
    for loaded, allowed in usable:
        section = loaded.file.extensions
        if section is None or "extensions" not in allowed:
            continue
        source, tier = str(loaded.path), loaded.tier
        if tier == "project":
            for key in ("required", "on_load_error"):
                if key in section.model_fields_set:
                    diagnostics.append(
                        f"{source}: extensions.{key} ignored: only a managed or user policy "
                        "may set it"
                    )
            continue
        for pattern in section.required:
            required.append((pattern, source))
            origins.append(ValueOrigin("extensions.required", pattern, tier, (source,)))
        if section.on_load_error is not None and on_load_error != "stop":
            on_load_error = section.on_load_error
            origins.append(ValueOrigin("extensions.on_load_error", on_load_error, tier, (source,)))
    return tuple(required), on_load_error


def _trust(
    usable: list[tuple[LoadedPolicyFile, set[str]]],
    origins: list[ValueOrigin],
    diagnostics: list[str],
) -> TrustRules:
    default, default_source, default_tier = "ask", None, "default"
    users, users_source, users_tier = "yes", None, "default"
    for loaded, allowed in usable:
        section = loaded.file.trust
        if section is None or "trust" not in allowed:
            continue
        source = str(loaded.path)
        if loaded.tier == "project":
            diagnostics.append(
                f"{source}: section 'trust' ignored: trust is decided before a project "
                "policy is read"
            )
            continue
        fields = section.model_fields_set
        if "default" in fields and (
            default_source is None
            or _TRUST_DEFAULT_ORDER[section.default] > _TRUST_DEFAULT_ORDER[default]
        ):
            default, default_source, default_tier = section.default, source, loaded.tier
        if "users_may_trust" in fields and (
            users_source is None
            or _USERS_MAY_TRUST_ORDER[section.users_may_trust] > _USERS_MAY_TRUST_ORDER[users]
        ):
            users, users_source, users_tier = section.users_may_trust, source, loaded.tier
    origins.append(
        ValueOrigin(
            "trust.default", default, default_tier, (default_source,) if default_source else ()
        )
    )
    origins.append(
        ValueOrigin(
            "trust.users_may_trust", users, users_tier, (users_source,) if users_source else ()
        )
    )
    return TrustRules(default, default_source, users, users_source)


def _audit(
    usable: list[tuple[LoadedPolicyFile, set[str]]],
    origins: list[ValueOrigin],
    diagnostics: list[str],
) -> AuditSettings:
    files: list[tuple[str, str]] = []
    include: dict[str, list[str]] = {}
    arguments: tuple[bool, str, str] | None = None
    for loaded, allowed in usable:
        section = loaded.file.audit
        if section is None or "audit" not in allowed:
            continue
        source, tier = str(loaded.path), loaded.tier
        if section.file is not None:
            if tier == "project":
                diagnostics.append(
                    f"{source}: audit.file ignored: a project policy cannot choose where pi writes"
                )
            else:
                files.append((section.file, source))
                origins.append(ValueOrigin("audit.file", section.file, tier, (source,)))
        if tier == "project":
            if "include" in section.model_fields_set:
                diagnostics.append(
                    f"{source}: audit.include ignored: a project policy cannot change what "
                    "the audit log records"
                )
        else:
            for kind in section.include:  # a file that does not set it includes everything
                include.setdefault(kind, []).append(source)
        if "arguments" in section.model_fields_set and arguments is None:
            if tier == "project":
                diagnostics.append(
                    f"{source}: audit.arguments ignored: a project policy cannot change "
                    "what the audit log records"
                )
            else:
                arguments = (section.arguments, tier, source)
    kinds = tuple(kind for kind in AUDIT_RECORDS if kind in include) if include else AUDIT_RECORDS
    for kind in kinds:
        sources = include.get(kind, [])
        origins.append(
            ValueOrigin("audit.include", kind, _tier_of(sources, usable), tuple(sources))
        )
    if arguments is None:
        origins.append(ValueOrigin("audit.arguments", True, "default"))
    else:
        origins.append(ValueOrigin("audit.arguments", arguments[0], arguments[1], (arguments[2],)))
    return AuditSettings(
        files=tuple(files),
        include=kinds,
        arguments=True if arguments is None else arguments[0],
    )
