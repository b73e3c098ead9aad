"""Docs that name a version or a tag name the current one (issue 17 §5)."""

from __future__ import annotations

import re
from pathlib import Path

from pi_sandbox import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_docs_that_name_a_pi_sandbox_version_name_the_current_one() -> None:
    stale = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for version in re.findall(r"(?:as of|pi-sandbox\s+)(\d+\.\d+\.\d+)", line):
                if version != __version__:
                    stale.append(f"{path.relative_to(ROOT)}:{number}: {version}")
    assert stale == []


def test_the_github_actions_example_pins_no_tag_that_does_not_exist() -> None:
    text = (ROOT / "docs" / "examples" / "github-actions.yml").read_text(encoding="utf-8")
    assert not re.search(r"ref:\s*v\d", text)
    assert "PI_SANDBOX_COMMIT" in text
