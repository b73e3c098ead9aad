"""A sandboxed session over real files written by others (``../shared/corpus``).

The workspace is the corpus itself, bound read-only into an extension worker and
read-write into the tool worker; the session lists it, reads a large reference file
in pages and edits a copy — on real Markdown, not inputs made up for the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "agent-skills"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the shared corpus is not at {CORPUS}")
def test_a_sandboxed_session_reads_pages_of_and_edits_real_corpus_files(tmp_path, require_bwrap):
    work = tmp_path / "skills"
    # shared/ is laid out without write bits; copytree keeps the modes. Inside the
    # sandbox even root has no CAP_DAC_OVERRIDE, so the copy must be made writable.
    shutil.copytree(CORPUS, work, copy_function=shutil.copyfile)
    for path in [work, *work.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    reference = work / "mcp-builder" / "reference" / "node_mcp_server.md"
    lines = reference.read_text().splitlines()
    first_heading = next(line for line in lines if line.startswith("# "))
    script = tmp_path / "script.yaml"
    script.write_text(
        json.dumps(
            [
                {
                    "tool_calls": [
                        {"id": "ls", "name": "ls", "arguments": {"path": "mcp-builder/reference"}}
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "id": "page1",
                            "name": "read",
                            "arguments": {
                                "path": "mcp-builder/reference/node_mcp_server.md",
                                "limit": 100,
                            },
                        },
                        {
                            "id": "page2",
                            "name": "read",
                            "arguments": {
                                "path": "mcp-builder/reference/node_mcp_server.md",
                                "offset": 901,
                            },
                        },
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "id": "edit",
                            "name": "edit",
                            "arguments": {
                                "path": "mcp-builder/reference/node_mcp_server.md",
                                "oldText": first_heading,
                                "newText": first_heading + " (reviewed)",
                            },
                        }
                    ]
                },
                {"text": "done"},
            ]
        )
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--sandbox",
            "--mode",
            "json",
            "--tools",
            "+ls",  # ls is off by default, as in pi
            "--script",
            str(script),
            "-C",
            str(work),
            "review the skills",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ends = {
        e["toolCallId"]: e
        for e in map(json.loads, proc.stdout.splitlines())
        if e["type"] == "tool_execution_end"
    }
    errors = {k: e["result"]["content"][0]["text"][:300] for k, e in ends.items() if e["isError"]}
    assert not errors, errors
    listing = ends["ls"]["result"]["content"][0]["text"].splitlines()
    assert sorted(listing) == sorted(p.name for p in reference.parent.iterdir())
    page1 = ends["page1"]["result"]["content"][0]["text"]
    assert page1.startswith("\n".join(lines[:5])) and "offset=101" in page1
    page2 = ends["page2"]["result"]["content"][0]["text"]
    assert lines[-1] in page2 and lines[900] in page2
    assert f"{first_heading} (reviewed)" in reference.read_text()
    assert (
        CORPUS / "mcp-builder" / "reference" / "node_mcp_server.md"
    ).read_text().splitlines() == lines
