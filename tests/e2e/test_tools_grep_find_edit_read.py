"""pi 1.6.0's built-in tools in a real ``pi -p --sandbox`` run (issue 17 §6): the
scripted model calls ``grep``, ``find``, ``edit`` with ``edits[]`` and ``read`` of an
image in a real workspace, through the sandboxed tool worker and the policy gate."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml
from pi_runs import json_events, pi_env, run_pi, scripted_argv

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("require_bwrap")]

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

TURNS = [
    {
        "text": "Looking around.",
        "tool_calls": [
            {"id": "g", "name": "grep", "arguments": {"pattern": "TODO", "context": 1}},
            {"id": "f", "name": "find", "arguments": {"pattern": "*.py"}},
            {"id": "r", "name": "read", "arguments": {"path": "logo.png"}},
        ],
    },
    {
        "text": "Fixing both TODOs in one edit.",
        "tool_calls": [
            {
                "id": "e",
                "name": "edit",
                "arguments": {
                    "path": "src/app.py",
                    "edits": [
                        {"oldText": "# TODO: greet", "newText": "print('hello')"},
                        {"oldText": "# TODO: part", "newText": "print('bye')"},
                    ],
                },
            },
            {
                "id": "bad",
                "name": "edit",
                "arguments": {
                    "path": "src/util.py",
                    "edits": [
                        {"oldText": "def helper", "newText": "def helper2"},
                        {"oldText": "not in the file", "newText": "x"},
                    ],
                },
            },
        ],
    },
    {"text": "All done."},
]


def workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "build").mkdir()
    (ws / ".gitignore").write_text("build/\n")
    (ws / "src" / "app.py").write_text("def main():\n    # TODO: greet\n    # TODO: part\n")
    (ws / "src" / "util.py").write_text("def helper():\n    return 1\n")
    (ws / "build" / "gen.py").write_text("# TODO: generated, ignored\n")
    (ws / "logo.png").write_bytes(PNG_1X1)
    return ws


def run(root: Path, *flags: str):
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump(TURNS))
    ws = workspace(root)
    proc = run_pi(scripted_argv(script, ws, "--sandbox", *flags), env=pi_env(root))
    return proc, ws


def test_the_model_greps_finds_edits_and_reads_an_image_in_a_sandboxed_print_run(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    proc, ws = run(root, "-p", "--tools", "read,edit,grep,find")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("All done.")
    assert (ws / "src" / "app.py").read_text() == (
        "def main():\n    print('hello')\n    print('bye')\n"
    )
    # The failing edit changed nothing, not even its first (valid) replacement.
    assert (ws / "src" / "util.py").read_text() == "def helper():\n    return 1\n"


def test_the_tool_results_are_pis_in_the_json_stream(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    proc, _ = run(root, "--mode", "json", "--tools", "read,edit,grep,find")
    assert proc.returncode == 0, proc.stderr
    ends = {
        e["toolCallId"]: e for e in json_events(proc.stdout) if e["type"] == "tool_execution_end"
    }
    assert ends["g"]["result"]["content"][0]["text"] == (
        "src/app.py-1- def main():\nsrc/app.py:2:     # TODO: greet\nsrc/app.py:3:     # TODO: part"
    )
    assert ends["f"]["result"]["content"][0]["text"] == "src/app.py\nsrc/util.py"
    assert ends["r"]["result"]["content"] == [
        {"type": "text", "text": "Read image file [image/png]"},
        {"type": "image", "data": base64.b64encode(PNG_1X1).decode(), "mimeType": "image/png"},
    ]
    assert ends["e"]["result"]["content"][0]["text"] == (
        "Successfully replaced 2 block(s) in src/app.py."
    )
    assert ends["bad"]["isError"] is True
    assert "Could not find edits[1]" in ends["bad"]["result"]["content"][0]["text"]


def test_grep_and_find_are_off_unless_tools_names_them_as_in_pi(tmp_path):
    root = Path(os.path.realpath(tmp_path))
    proc, _ = run(root, "--mode", "json")
    assert proc.returncode == 0, proc.stderr
    ends = {
        e["toolCallId"]: e for e in json_events(proc.stdout) if e["type"] == "tool_execution_end"
    }
    assert ends["g"]["result"]["content"][0]["text"] == "Tool grep not found"
    assert ends["f"]["result"]["content"][0]["text"] == "Tool find not found"
    assert ends["r"]["isError"] is False  # read is on by default
