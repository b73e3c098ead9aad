"""The layering rule: the lower layers (``protocol``, ``worker``, ``sandbox``,
``policies``, ``resources``) never import the supervisor or the command line, not even
lazily inside a function (the project's engineering rules; docs/architecture.md "Where
the supervisor's code lives"), and the supervisor keeps its modules in sub-packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pi_sandbox

PACKAGE = Path(pi_sandbox.__file__).parent
LOWER_LAYERS = ("protocol", "worker", "sandbox", "policies", "resources")
UPPER = ("pi_sandbox.supervisor", "pi_sandbox.cli")
TOP_LEVEL_SUPERVISOR_MODULES = {"__init__", "audit_log", "egress_proxy", "json_lines"}


def upper_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of the supervisor or the CLI in ``source``,
    at any depth (a lazy import inside a function counts)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.startswith(UPPER)]
    return found


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_a_lower_layer_never_imports_the_supervisor_or_the_cli(layer):
    offenders = {
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, name in upper_imports(path.read_text())
    }
    assert not offenders, sorted(offenders)


def test_control_a_lazy_supervisor_import_in_a_function_is_found():
    source = "def f():\n    from pi_sandbox.supervisor.extensions import extension_discovery\n"
    assert upper_imports(source) == [
        (2, "pi_sandbox.supervisor.extensions"),
        (2, "pi_sandbox.supervisor.extensions.extension_discovery"),
    ]
    assert upper_imports("import pi_sandbox.cli as c\n") == [(1, "pi_sandbox.cli")]
    assert upper_imports("from pi_sandbox.policies import Policy\n") == []


def test_the_supervisor_keeps_its_modules_in_sub_packages():
    top_level = {path.stem for path in (PACKAGE / "supervisor").glob("*.py")}
    assert top_level == TOP_LEVEL_SUPERVISOR_MODULES
