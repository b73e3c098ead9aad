"""What "allow for this session" may cover, and whether a grant covers a later call.

Issue 18 "Approvals": a session grant is scoped to the rule that asked and to the
exact command prefix (per parsed simple command), the exact path, or the tool
name of a tool-only rule. Scopes are computed here from the policy's own rule and
the gate's per-command breakdown (`ToolCallDecision.commands`), never from text
the model chose to call a scope; the user picks one of the offered ones.

A grant covers a later call only when all of this holds:

1. the call's own decision is ``ask`` (so no rule, of any tier, denies it), was not
   made by the ``unparseable`` setting, and was made by the granted rule (same id,
   tier and file; or the same tier default);
2. the part that asks is inside the scope: every simple command the breakdown
   marks ``ask`` matches one of the scope's argv patterns (same ``via`` path, no
   dangerous variables, no words read at run time, no shell expansion in any
   word); or the path is the same; or the tool is the same for a tool-only rule;
3. with the granted rule turned into ``allow`` (or the granted tier default, when no
   rule asked), the whole call is ``allow``: no other rule and no other tier asks
   about any part of it. So a grant never lifts a ``deny``, nor another rule's
   ``ask``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pi_sandbox.policies import Policy, PolicyRule, ToolCallDecision, evaluate_tool_call

__all__ = ["ApprovalScope", "SessionGrant", "grant_covers", "offered_scopes"]

ScopeKind = Literal["command", "text", "path", "tool", "call"]

# A word in which the shell still expands something at run time (the parser keeps
# `$x`, `$(…)`, globs, braces and `~` as written): its value is not what was approved.
_RUNTIME_CHARS = re.compile(r"[$`*?\[\]{}~]")

MIN_PREFIX_WORDS = 2
"""Shortest argv prefix offered as a session scope (a program name alone, like
``rm``, would be a blanket grant; issue 18: never a bare ``*``)."""


@dataclass(frozen=True)
class ApprovalScope:
    """One scope offered for "allow for this session" (issue 18 Approvals).

    Attributes:
        id: stable within one request: ``"command"`` (the exact simple commands),
            ``"prefix"`` (their argv prefixes), ``"text"`` (the exact command text),
            ``"path"``, ``"tool"`` or ``"call"`` (these exact arguments).
        label: what the user is shown before confirming.
        kind: how `grant_covers` compares a later call.
        patterns: for ``command``: ``(via, argv, exact)`` per asking simple command;
            ``exact`` False means an argv prefix.
        value: for ``text``/``path``/``call``: the command text, the normalised
            absolute path, or the canonical JSON of the arguments.
    """

    id: str
    label: str
    kind: ScopeKind
    patterns: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = ()
    value: str | None = None

    def wire(self) -> dict[str, str]:
        """The ``{"id", "label"}`` shape of a ``policy_approval_request`` event."""
        return {"id": self.id, "label": self.label}


@dataclass(frozen=True)
class SessionGrant:
    """An "allow for this session" answer: which rule, for which tool, in which scope.

    Attributes:
        approval_id: the ``policy_approval_request`` id it answered (audited as
            ``granted by session approval <id>``).
        tool: the tool name.
        rule: the id of the rule that asked; None when a tier default asked.
        tier: that rule's (or default's) tier.
        source: that rule's (or default's) policy file, as text.
        scope: the chosen `ApprovalScope`.
    """

    approval_id: str
    tool: str
    rule: str | None
    tier: str
    source: str | None
    scope: ApprovalScope
    _masked: dict[int, tuple[Policy, Policy | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def masked(self, policy: Policy) -> Policy | None:
        """``policy`` with the granted rule (or tier default) made ``allow``; None when
        the policy no longer has that rule (a reload removed it: the grant is void)."""
        cached = self._masked.get(id(policy))
        if cached is not None and cached[0] is policy:
            return cached[1]
        masked = _mask(policy, self.rule, self.tier, self.source)
        self._masked.clear()  # one policy at a time; a reload makes a new one
        self._masked[id(policy)] = (policy, masked)
        return masked


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): a label is
    shown to the user, and words come from the model, which must not be able to
    break a label into lines or send terminal escapes that redraw the prompt."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _quoted(argv: tuple[str, ...]) -> str:
    return _printable(shlex.join(argv))


def _plain(entry: dict[str, Any]) -> bool:
    """A breakdown entry whose words are all known now (no dangerous variables, no
    words read or expanded at run time): the only kind a scope may name."""
    if entry.get("flags") or entry.get("unknown"):
        return False
    return not any(_RUNTIME_CHARS.search(word) for word in entry.get("argv") or ())


def _asking(decision: ToolCallDecision) -> list[dict[str, Any]]:
    return [entry for entry in decision.commands if entry.get("decision") == "ask"]


def find_rule(policy: Policy | None, rule: str | None, tier: str, source: str | None) -> bool:
    """Whether ``policy`` still has the rule (or, for None, a tier ``tier``)."""
    if policy is None:
        return False
    for policy_tier in policy.tiers:
        if policy_tier.tier != tier:
            continue
        if rule is None:
            return True
        for candidate in policy_tier.rules:
            if candidate.id == rule and _source(candidate) == source:
                return True
    return False


def _source(rule: PolicyRule) -> str | None:
    return str(rule.source) if rule.source is not None else None


def _mask(policy: Policy, rule: str | None, tier: str, source: str | None) -> Policy | None:
    found = False
    tiers = []
    for policy_tier in policy.tiers:
        if policy_tier.tier == tier and rule is None:
            found = True
            policy_tier = dataclasses.replace(policy_tier, default="allow")
        elif policy_tier.tier == tier:
            rules = []
            for candidate in policy_tier.rules:
                if candidate.id == rule and _source(candidate) == source:
                    found = True
                    candidate = dataclasses.replace(candidate, decision="allow")
                rules.append(candidate)
            policy_tier = dataclasses.replace(policy_tier, rules=tuple(rules))
        tiers.append(policy_tier)
    if not found:
        return None
    return dataclasses.replace(policy, tiers=tuple(tiers))


def _rule_object(policy: Policy | None, decision: ToolCallDecision) -> PolicyRule | None:
    if policy is None or decision.rule is None:
        return None
    for policy_tier in policy.tiers:
        for candidate in policy_tier.rules:
            if (
                candidate.id == decision.rule
                and candidate.tier == decision.tier
                and _source(candidate) == decision.source
            ):
                return candidate
    return None


def normalised_path(path: str, cwd: Path) -> str:
    """``path`` as an absolute, normalised path text (``~`` is the user's home)."""
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def _canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def offered_scopes(
    policy: Policy | None,
    tool_name: str,
    arguments: dict[str, Any],
    decision: ToolCallDecision,
    *,
    cwd: Path,
) -> list[ApprovalScope]:
    """The scopes "allow for this session" may take for this ``ask`` decision.

    Computed from the deciding rule and the gate's parse of the call, never from
    the call's other text (issue 18: no model-controlled way to widen a grant).
    Empty when no scope can be named safely: the ``unparseable`` setting decided,
    a command that asks has dangerous variables, words read at run time or a shell
    expansion, or the deciding rule is gone; then only "allow once" and "deny"
    are offered.

    Returns:
        The scopes, narrowest first.
    """
    if decision.decision != "ask" or decision.unparseable:
        return []
    if not find_rule(policy, decision.rule, decision.tier, decision.source):
        return []
    rule = _rule_object(policy, decision)
    asked_by = f"rule {decision.rule}" if decision.rule else f"the {decision.tier} default"
    command = arguments.get("command")
    if isinstance(command, str) and decision.commands:
        asking = _asking(decision)
        if not asking or (rule is not None and rule.command is None):
            # A whole-call rule asked (command_regex, path, arguments, or the tool
            # alone): it judged the text, not one command, so only this exact text
            # can be named.
            return [
                ApprovalScope(
                    "text",
                    f"{tool_name} with exactly this command ({asked_by}): {_printable(command)}",
                    "text",
                    value=command,
                )
            ]
        if not all(_plain(entry) for entry in asking):
            return []
        exact: dict[tuple[tuple[str, ...], tuple[str, ...]], None] = {}
        prefixes: dict[tuple[tuple[str, ...], tuple[str, ...]], None] = {}
        for entry in asking:
            via, argv = tuple(entry.get("via") or ()), tuple(entry["argv"])
            exact[(via, argv)] = None
            if len(argv) > MIN_PREFIX_WORDS:
                prefixes[(via, argv[:-1])] = None
        scopes = [
            ApprovalScope(
                "command",
                f"exactly {' and '.join(_quoted(argv) for _, argv in exact)} ({asked_by})",
                "command",
                patterns=tuple((via, argv, True) for via, argv in exact),
            )
        ]
        # A prefix stands for "this command with any further words": it fits a rule
        # about commands (or a default), not one about paths, text or arguments,
        # whose matches the further words could change.
        command_rule = rule is None or (
            rule.command is not None
            and not rule.path_globs
            and rule.command_regex is None
            and not rule.arguments
        )
        if command_rule and len(prefixes) == len(exact):
            scopes.append(
                ApprovalScope(
                    "prefix",
                    "commands starting with "
                    f"{' and '.join(_quoted(argv) for _, argv in prefixes)} followed by "
                    f"plain words, no options ({asked_by})",
                    "command",
                    patterns=tuple((via, argv, False) for via, argv in prefixes),
                )
            )
        return scopes
    path = arguments.get("path")
    if rule is not None and rule.path_globs and isinstance(path, str) and path:
        where = normalised_path(path, cwd)
        label = f"{tool_name} on {_printable(where)} ({asked_by})"
        return [ApprovalScope("path", label, "path", value=where)]
    if (
        rule is not None
        and rule.command is None
        and rule.command_regex is None
        and not rule.path_globs
        and not rule.arguments
    ):
        return [ApprovalScope("tool", f"every {tool_name} call ({asked_by})", "tool")]
    return [
        ApprovalScope(
            "call",
            f"{tool_name} with exactly these arguments ({asked_by})",
            "call",
            value=_canonical(arguments),
        )
    ]


def _in_scope(
    scope: ApprovalScope, arguments: dict[str, Any], decision: ToolCallDecision, cwd: Path
) -> bool:
    if scope.kind == "tool":
        return True
    if scope.kind == "call":
        return _canonical(arguments) == scope.value
    if scope.kind == "path":
        path = arguments.get("path")
        return isinstance(path, str) and normalised_path(path, cwd) == scope.value
    command = arguments.get("command")
    if not isinstance(command, str):
        return False
    if scope.kind == "text":
        return command == scope.value
    asking = _asking(decision)
    if not asking:
        return False
    for entry in asking:
        if not _plain(entry):
            return False
        via, argv = tuple(entry.get("via") or ()), tuple(entry["argv"])
        if not any(
            via == p_via
            and (
                argv == p_argv
                if exact
                else argv[: len(p_argv)] == p_argv and _plain_operands(argv[len(p_argv) :])
            )
            for p_via, p_argv, exact in scope.patterns
        ):
            return False
    return True


def _plain_operands(words: tuple[str, ...]) -> bool:
    """Whether the words a prefix grant adds are plain operands: no option (``-x``,
    ``--force``, ``--receive-pack=…``, ``--exec …`` run code or change what the
    command does), no git force or delete refspec (``+main``, ``:main``) — a grant of
    ``git push origin`` covers ``git push origin main``, never ``git push origin
    --receive-pack='sh -c …' main`` (red-team finding, issue 18)."""
    return all(word and not word.startswith(("-", "+", ":")) for word in words)


def grant_covers(
    grant: SessionGrant,
    policy: Policy | None,
    tool_name: str,
    arguments: dict[str, Any],
    decision: ToolCallDecision,
    *,
    cwd: Path,
) -> bool:
    """Whether ``grant`` allows this call without asking (see the module docstring).

    Args:
        decision: the gate's decision for this very call (``evaluate_tool_call``).
    """
    if policy is None or tool_name != grant.tool:
        return False
    if decision.decision != "ask" or decision.unparseable:
        return False
    if (decision.rule, decision.tier, decision.source) != (grant.rule, grant.tier, grant.source):
        return False
    if not _in_scope(grant.scope, arguments, decision, cwd):
        return False
    masked = grant.masked(policy)
    if masked is None:
        return False
    return evaluate_tool_call(masked, tool_name, arguments, workspace=cwd).decision == "allow"
