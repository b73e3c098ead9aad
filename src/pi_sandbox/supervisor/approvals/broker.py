"""Putting a policy ``ask`` to the user and remembering "allow for this session".

Issue 18 "Approvals". The tool pipeline's gate calls `ApprovalBroker.ask` when the
effective decision is ``ask`` and the run has a user interface. The broker emits
``policy_approval_request``, waits for `ApprovalBroker.answer` (the terminal UI,
or the RPC command ``policy_approval_response``), and emits
``policy_approval_resolved``. Every resolution is audited (``policy_approval``).

Wire shapes (the contract with the terminal UI and RPC clients)::

    {"type": "policy_approval_request", "id": str, "toolCallId": str,
     "toolName": str, "args": {...}, "rule": str | None, "tier": str,
     "source": str | None, "reason": str, "commands": [{"argv", "decision", ...}],
     "scopes": [{"id": str, "label": str}]}
    {"type": "policy_approval_resolved", "id": str,
     "decision": "allow_once" | "allow_session" | "deny",
     "by": "user" | "timeout" | "abort" | "closed", "scope"?: str}

A request ends in a denial when its timeout passes (``by: timeout``), when the run
is aborted (``by: abort``; the call gets "Operation aborted"), or when the user
interface goes away (``by: closed``: an RPC client's input ended). Fail-closed:
nothing but an explicit allow answer lets the call run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio

from pi_sandbox.policies import Policy, ToolCallDecision
from pi_sandbox.supervisor.agent.tool_pipeline import EmitFn
from pi_sandbox.supervisor.approvals.scopes import (
    ApprovalScope,
    SessionGrant,
    grant_covers,
    offered_scopes,
)
from pi_sandbox.supervisor.audit_log import redact_secrets

__all__ = ["DECISIONS", "MAX_MESSAGE_CHARS", "ApprovalBroker", "ApprovalOutcome"]

DECISIONS = ("allow_once", "allow_session", "deny")
"""The answers a user may give to a ``policy_approval_request``."""

MAX_MESSAGE_CHARS = 4000
"""Longest message a denial may carry to the model (longer ones are refused)."""

ResolvedBy = Literal["user", "timeout", "abort", "closed"]


@dataclass(frozen=True)
class ApprovalOutcome:
    """How one request ended.

    Attributes:
        approval_id: the request id.
        decision: ``allow_once``, ``allow_session`` or ``deny``.
        by: ``user``, ``timeout``, ``abort`` or ``closed``.
        scope: the chosen scope (``allow_session`` only).
        message: the user's text for the model (``deny`` only), or None.
    """

    approval_id: str
    decision: str
    by: ResolvedBy
    scope: ApprovalScope | None = None
    message: str | None = None

    @property
    def allowed(self) -> bool:
        """Whether the call may run."""
        return self.decision in ("allow_once", "allow_session")


@dataclass
class _Pending:
    answered: trio.Event
    scopes: dict[str, ApprovalScope]
    outcome: ApprovalOutcome | None = None


@dataclass
class ApprovalBroker:
    """The open approval requests and the session grants of one session.

    Attributes:
        emit: the session's event output.
        audit: receives JSON-ready audit records.
        timeout_s: how long a request waits for an answer (seconds); None: until
            answered, aborted or closed (pi's dialogs have no default timeout either).
        grants: the session grants, oldest first (cleared with a new session).
        closed: the user interface went away: requests are denied without asking.
        aborted_calls: tool call ids whose request an abort ended (the pipeline
            answers them "Operation aborted").
    """

    emit: EmitFn
    audit: Callable[[dict[str, Any]], None]
    timeout_s: float | None = None
    grants: list[SessionGrant] = field(default_factory=list)
    closed: bool = False
    aborted_calls: set[str] = field(default_factory=set)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _ids: int = 0

    @property
    def pending(self) -> list[str]:
        """The ids of the requests waiting for an answer."""
        return list(self._pending)

    def find_grant(
        self,
        policy: Policy | None,
        tool_name: str,
        arguments: dict[str, Any],
        decision: ToolCallDecision,
        *,
        cwd: Path,
    ) -> SessionGrant | None:
        """The first session grant that covers this call (`grant_covers`), or None."""
        for grant in self.grants:
            if grant_covers(grant, policy, tool_name, arguments, decision, cwd=cwd):
                return grant
        return None

    def clear_grants(self) -> None:
        """Forget every session grant (a new, forked or resumed session)."""
        self.grants.clear()

    async def ask(
        self,
        *,
        tool_call_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        decision: ToolCallDecision,
        policy: Policy | None,
        cwd: Path,
    ) -> ApprovalOutcome:
        """Put one ``ask`` decision to the user and wait for the answer.

        Returns:
            The outcome; ``allow_session`` has already added its grant.

        Raises:
            trio.Cancelled: the run was aborted while waiting (the request is
                resolved ``by: abort`` first and the tool call id is added to
                ``aborted_calls``).
        """
        self._ids += 1
        approval_id = f"approval-{self._ids}"
        if self.closed:
            outcome = ApprovalOutcome(approval_id, "deny", "closed")
            self._record(outcome, tool_call_id, tool_name, decision)
            return outcome
        scopes = offered_scopes(policy, tool_name, arguments, decision, cwd=cwd)
        pending = _Pending(trio.Event(), {scope.id: scope for scope in scopes})
        self._pending[approval_id] = pending
        try:
            await self.emit(
                {
                    "type": "policy_approval_request",
                    "id": approval_id,
                    "toolCallId": tool_call_id,
                    "toolName": tool_name,
                    "args": arguments,
                    "rule": decision.rule,
                    "tier": decision.tier,
                    "source": decision.source,
                    "reason": redact_secrets(decision.reason),
                    "commands": decision.commands,
                    "scopes": [scope.wire() for scope in scopes],
                }
            )
            limit = self.timeout_s if self.timeout_s is not None else math.inf
            with trio.move_on_after(limit):
                await pending.answered.wait()
            if pending.outcome is None:
                pending.outcome = ApprovalOutcome(approval_id, "deny", "timeout")
        finally:
            self._pending.pop(approval_id, None)
            if pending.outcome is None:
                # Cancelled while waiting: the run was aborted (or is ending).
                pending.outcome = ApprovalOutcome(approval_id, "deny", "abort")
                self.aborted_calls.add(tool_call_id)
                with trio.CancelScope(shield=True):
                    await self._resolved(pending.outcome, tool_call_id, tool_name, decision)
        outcome = pending.outcome
        if outcome.by != "abort":
            await self._resolved(outcome, tool_call_id, tool_name, decision)
        if outcome.decision == "allow_session" and outcome.scope is not None:
            self.grants.append(
                SessionGrant(
                    approval_id,
                    tool_name,
                    decision.rule,
                    decision.tier,
                    decision.source,
                    outcome.scope,
                )
            )
        return outcome

    def answer(
        self,
        approval_id: str,
        decision: str,
        scope: str | None = None,
        message: str | None = None,
    ) -> str | None:
        """Answer an open request; returns None when accepted, else why not.

        ``decision`` is one of `DECISIONS`; ``allow_session`` needs ``scope``, one
        of the ids the request offered (a scope the request did not offer, even a
        narrower-looking one, is refused: the user chooses among what the policy
        and the parse allow, never names a new one); ``message`` (a string of at
        most `MAX_MESSAGE_CHARS`) goes to the model with a denial (``scope`` and
        ``message`` are ignored with the other decisions). A refused answer leaves the
        request open.
        """
        pending = self._pending.get(approval_id)
        if pending is None or pending.outcome is not None:
            return f"no open approval request {approval_id!r}"
        if decision not in DECISIONS:
            return f"decision must be one of {', '.join(DECISIONS)}"
        chosen: ApprovalScope | None = None
        if decision == "allow_session":
            if not pending.scopes:
                return "this request offers no session scope; answer allow_once or deny"
            if scope not in pending.scopes:
                offered = ", ".join(pending.scopes)
                return f"scope must be one of the offered scope ids: {offered}"
            chosen = pending.scopes[scope]
        if message is not None:
            if not isinstance(message, str):
                return "message must be a string"
            if len(message) > MAX_MESSAGE_CHARS:
                return f"message is longer than {MAX_MESSAGE_CHARS} characters"
        text = message if message and decision == "deny" else None
        pending.outcome = ApprovalOutcome(approval_id, decision, "user", chosen, text)
        pending.answered.set()
        return None

    def close(self) -> None:
        """The user interface went away: open requests are denied (``by: closed``)
        and later ones are denied without asking."""
        self.closed = True
        for approval_id, pending in list(self._pending.items()):
            if pending.outcome is None:
                pending.outcome = ApprovalOutcome(approval_id, "deny", "closed")
                pending.answered.set()

    async def _resolved(
        self,
        outcome: ApprovalOutcome,
        tool_call_id: str,
        tool_name: str,
        decision: ToolCallDecision,
    ) -> None:
        self._record(outcome, tool_call_id, tool_name, decision)
        event: dict[str, Any] = {
            "type": "policy_approval_resolved",
            "id": outcome.approval_id,
            "decision": outcome.decision,
            "by": outcome.by,
        }
        if outcome.scope is not None:
            event["scope"] = outcome.scope.id
        await self.emit(event)

    def _record(
        self,
        outcome: ApprovalOutcome,
        tool_call_id: str,
        tool_name: str,
        decision: ToolCallDecision,
    ) -> None:
        self.audit(
            {
                "event": "policy_approval",
                "approval_id": outcome.approval_id,
                "tool_call_id": tool_call_id,
                "tool": tool_name,
                "rule": decision.rule,
                "tier": decision.tier,
                "policy_file": decision.source,
                "decision": outcome.decision,
                "by": outcome.by,
                "scope": outcome.scope.label if outcome.scope is not None else None,
                "message": redact_secrets(outcome.message) if outcome.message else None,
            }
        )
