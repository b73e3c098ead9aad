"""The supervisor's boundary with extensions (issue 13 §4): what an extension hands
over is checked against pi's message schemas (`agent_messages`,
`extension_values`) and bounded in size and rate (`extension_budgets`;
policy ``extensions.limits``) before it touches state, disk or output."""

from pi_sandbox.supervisor.boundary.agent_messages import (
    KNOWN_ROLES,
    MessageRefusedError,
    check_agent_message,
    check_content_blocks,
)
from pi_sandbox.supervisor.boundary.extension_budgets import (
    KINDS,
    ExtensionBudgets,
    LimitExceededError,
)
from pi_sandbox.supervisor.boundary.extension_values import (
    DELIVERY_MODES,
    check_bus_message,
    check_entry,
    check_handler_state,
    check_text,
    check_ui_call,
    custom_message_from,
    json_size,
    user_message_from,
)

__all__ = [
    "DELIVERY_MODES",
    "KINDS",
    "KNOWN_ROLES",
    "ExtensionBudgets",
    "LimitExceededError",
    "MessageRefusedError",
    "check_agent_message",
    "check_bus_message",
    "check_content_blocks",
    "check_entry",
    "check_handler_state",
    "check_text",
    "check_ui_call",
    "custom_message_from",
    "json_size",
    "user_message_from",
]
