"""Policy files and the tool-call gate (DESIGN §5 step 2, §7; issue 4).

Three tiers (managed, user, project); a lower tier only tightens. Load them with
:func:`load_effective_policy` (or just ``--policy`` files with
:func:`load_policies`), then ask :func:`evaluate_tool_call` about each tool call;
a malformed file raises :class:`~pi_sandbox.errors.PolicyFileError` naming the
file, line and key. :class:`PolicyStore` reloads a run's policy and keeps the
last valid one when a file turns bad.

Rules are defence in depth; the sandbox is the boundary.
"""

from pi_sandbox.policies._effective import (
    AuditSettings,
    ExtensionRules,
    LoadedPolicyFile,
    Policy,
    TrustRules,
    ValueOrigin,
    build_policy,
)
from pi_sandbox.policies._loading import (
    MANAGED_POLICY_DIR,
    PolicyLocations,
    load_effective_policy,
    load_policies,
    load_policy_file,
)
from pi_sandbox.policies._schema import (
    AUDIT_RECORDS,
    CAPABILITIES,
    SUPPORTED_VERSION,
    Decision,
    PolicyFile,
    RuleExamples,
    ToolCallRule,
    ToolCallSection,
)
from pi_sandbox.policies._store import PolicyStore, ReloadResult
from pi_sandbox.policies._tool_gate import (
    READ_LIKE_TOOLS,
    PolicyRule,
    PolicyTier,
    ToolCallDecision,
    evaluate_tool_call,
    path_exclusions,
    strictest,
)

__all__ = [
    "AUDIT_RECORDS",
    "CAPABILITIES",
    "MANAGED_POLICY_DIR",
    "READ_LIKE_TOOLS",
    "SUPPORTED_VERSION",
    "AuditSettings",
    "Decision",
    "ExtensionRules",
    "LoadedPolicyFile",
    "Policy",
    "PolicyFile",
    "PolicyLocations",
    "PolicyRule",
    "PolicyStore",
    "PolicyTier",
    "ReloadResult",
    "RuleExamples",
    "ToolCallDecision",
    "ToolCallRule",
    "ToolCallSection",
    "TrustRules",
    "ValueOrigin",
    "build_policy",
    "evaluate_tool_call",
    "load_effective_policy",
    "load_policies",
    "load_policy_file",
    "path_exclusions",
    "strictest",
]
