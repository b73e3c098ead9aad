"""The interactive mode's libraries cost nothing to the other modes (issue 18):
prompt_toolkit and rich's Markdown (with markdown-it) are imported only when the
terminal UI starts. (rich's console itself is imported by httpx, whose optional CLI
module loads whenever rich and click are installed: not ours to avoid here.)"""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import pi_sandbox.cli
import pi_sandbox.supervisor.modes.run
import pi_sandbox.supervisor.modes.rpc_mode
import pi_sandbox.supervisor.modes.output_modes
heavy = ('prompt_toolkit', 'rich.markdown', 'markdown_it', 'pi_sandbox.supervisor.tui')
loaded = sorted(m for m in sys.modules if m.startswith(heavy))
print(','.join(loaded))
"""


def test_print_json_and_rpc_modes_do_not_import_prompt_toolkit_or_rich_markdown():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""


def test_control_the_terminal_ui_package_does_import_them():
    """Control: the check above would see them if they were imported."""
    code = CHECK.replace(
        "import pi_sandbox.cli\n",
        "import pi_sandbox.cli\nimport pi_sandbox.supervisor.tui.app\n"
        "pi_sandbox.supervisor.tui.render.markdown_ansi('# x', 40)\n",
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "prompt_toolkit" in out.stdout and "rich.markdown" in out.stdout
