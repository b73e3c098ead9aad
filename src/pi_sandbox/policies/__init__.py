"""Policy files and the tool-call gate (DESIGN §5 step 2, §7).

Milestone one: the ``tool_call`` section of ``--policy`` files (managed tier).
Load files with :func:`load_policies`, then ask :func:`evaluate_tool_call` about
each tool call; a malformed file raises
:class:`~pi_sandbox.errors.PolicyFileError` naming the file, line and key.

Rules are defence in depth; the sandbox is the boundary.
"""

from pi_sandbox.policies._loading import load_policies, load_policy_file
from pi_sandbox.policies._schema import (
    SUPPORTED_VERSION,
    Decision,
    PolicyFile,
    RuleExamples,
    ToolCallRule,
    ToolCallSection,
)
from pi_sandbox.policies._tool_gate import (
    Policy,
    PolicyRule,
    ToolCallDecision,
    evaluate_tool_call,
    strictest,
)

__all__ = [
    "SUPPORTED_VERSION",
    "Decision",
    "Policy",
    "PolicyFile",
    "PolicyRule",
    "RuleExamples",
    "ToolCallDecision",
    "ToolCallRule",
    "ToolCallSection",
    "evaluate_tool_call",
    "load_policies",
    "load_policy_file",
    "strictest",
]
