"""The worker's import graph stays small (DESIGN §2: worker start-up is a product metric)."""

import json
import subprocess
import sys

ALLOWED_PREFIXES = ("pi_sandbox.worker", "pi_sandbox.protocol")


def test_a_worker_imports_only_the_stdlib_and_its_own_packages():
    code = (
        "import sys, json; before = set(sys.modules);"
        "import pi_sandbox.worker.runtime, pi_sandbox.worker.builtin_tools, pi_sandbox.worker.api;"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    foreign = [
        name
        for name in loaded
        if name.split(".")[0] not in sys.stdlib_module_names
        and name != "pi_sandbox"
        and not name.startswith(ALLOWED_PREFIXES)
    ]
    assert foreign == []
    own = [name for name in loaded if name.startswith("pi_sandbox.")]
    assert all(name.startswith(ALLOWED_PREFIXES) for name in own), own
    # The heavy stdlib pieces are imported lazily, not at start-up.
    assert "asyncio" not in loaded
    assert "pi_sandbox.protocol.messages" not in loaded
