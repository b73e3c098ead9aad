"""The CLI's start path does not import the Anthropic provider unless it is used (issue 16,
"CLI start-up unchanged when the Anthropic provider is not used")."""

import json
import subprocess
import sys
from pathlib import Path

ANTHROPIC_MODULES = ("pi_sandbox.supervisor.providers.anthropic", "anthropic")


def loaded_after(code: str) -> set[str]:
    """Modules a fresh interpreter has loaded after running ``code``."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_cli_start_path_and_other_providers_do_not_import_the_anthropic_provider(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- text: hi\n")
    loaded = loaded_after(
        "import pi_sandbox.cli, pi_sandbox.supervisor.modes.run\n"
        "from pi_sandbox.supervisor.providers import create_provider\n"
        f"create_provider('scripted', script={str(script)!r})\n"
        "create_provider('openai/m', base_url='http://127.0.0.1:9')"
    )
    assert "pi_sandbox.supervisor.providers" in loaded  # the path under test ran
    assert not loaded & set(ANTHROPIC_MODULES)


def test_control_choosing_anthropic_imports_it_and_never_the_sdk() -> None:
    loaded = loaded_after(
        "from pi_sandbox.supervisor.providers import create_provider\n"
        "create_provider('anthropic/claude-x', base_url='http://127.0.0.1:9')"
    )
    assert "pi_sandbox.supervisor.providers.anthropic" in loaded
    assert "anthropic" not in loaded  # httpx and our SSE decoder, not the SDK


HTTP_MODULES = ("httpx", "pi_sandbox.supervisor.providers.openai")


def test_a_scripted_run_imports_no_http_client(tmp_path: Path) -> None:
    # issue 20: httpx (with the CLI module it imports) was ~75 ms of every start-up.
    script = tmp_path / "script.yaml"
    script.write_text("- text: hi\n")
    loaded = loaded_after(
        "import pi_sandbox.cli, pi_sandbox.supervisor.modes.run\n"
        "from pi_sandbox.supervisor.providers import create_provider\n"
        f"create_provider('scripted', script={str(script)!r})"
    )
    assert "pi_sandbox.supervisor.providers.scripted" in loaded
    assert not loaded & set(HTTP_MODULES)


def test_an_http_provider_imports_httpx_without_its_command_line_client() -> None:
    loaded = loaded_after(
        "from pi_sandbox.supervisor.providers import create_provider\n"
        "create_provider('openai/m', base_url='http://127.0.0.1:9')\n"
        "assert 'httpx._main' not in sys.modules or sys.modules['httpx._main'] is not None\n"
        "import httpx; assert callable(httpx.main) and httpx.AsyncClient"
    )
    assert "httpx" in loaded
    assert not loaded & {"httpx._main", "rich", "pygments", "click"}


def test_control_a_plain_httpx_import_loads_its_command_line_client() -> None:
    # What the provider's import avoids (rich and click are installed for the TUI).
    loaded = loaded_after("import httpx")
    assert "httpx._main" in loaded and "rich" in loaded
