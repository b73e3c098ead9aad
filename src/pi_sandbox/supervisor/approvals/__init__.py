"""Human approval of policy ``ask`` decisions (issue 18 "Approvals").

`ApprovalBroker` puts an ``ask`` to the user (``policy_approval_request`` →
``policy_approval_resolved``) and keeps the session grants; `offered_scopes` and
`grant_covers` decide what "allow for this session" may name and cover.
"""

from pi_sandbox.supervisor.approvals.broker import (
    DECISIONS,
    MAX_MESSAGE_CHARS,
    ApprovalBroker,
    ApprovalOutcome,
)
from pi_sandbox.supervisor.approvals.scopes import (
    ApprovalScope,
    SessionGrant,
    grant_covers,
    offered_scopes,
)

__all__ = [
    "DECISIONS",
    "MAX_MESSAGE_CHARS",
    "ApprovalBroker",
    "ApprovalOutcome",
    "ApprovalScope",
    "SessionGrant",
    "grant_covers",
    "offered_scopes",
]
