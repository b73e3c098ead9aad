"""Each package's public surface is explicit and importable (STYLE rule 2)."""

import importlib

import pytest

PACKAGES = {
    "pi_sandbox.sandbox": {
        "SandboxProfile",
        "worker_profile",
        "build_bwrap_argv",
        "find_bwrap",
        "probe_bwrap",
    },
    "pi_sandbox.policies": {
        "Policy",
        "ToolCallDecision",
        "load_policy_file",
        "load_policies",
        "evaluate_tool_call",
    },
    "pi_sandbox.supervisor.providers": {"ScriptedProvider", "OpenAIProvider", "create_provider"},
    "pi_sandbox.errors": {
        "PiSandboxError",
        "ProtocolError",
        "WorkerError",
        "SandboxUnavailableError",
    },
    "pi_sandbox.worker.api": {"ExtensionAPI", "Context", "Event", "StaleContextError"},
    "pi_sandbox.sdk": {"ExtensionAPI", "Context", "ToolCallEvent", "block", "StaleContextError"},
}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_package_exports_an_explicit_importable_all(name):
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert PACKAGES[name] <= exported
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.__all__ names {symbol}, which does not exist"


def test_every_error_derives_from_the_root():
    from pi_sandbox import errors

    for symbol in errors.__all__:
        assert issubclass(getattr(errors, symbol), errors.PiSandboxError)
