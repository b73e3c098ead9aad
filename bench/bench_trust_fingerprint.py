"""How long binding trust to content costs (issue 14 §4).

Builds a project in a temporary directory: 200 generated skills (``SKILL.md``, two
reference files and a script each), the six published skill packages of
``../shared/corpus/agent-skills`` when present, three extensions, settings, a
policy, and a source tree of N directories (default 2,000) with a nested
``pkg/app/.pi`` — then times, median of R runs (default 7):

- ``run_fingerprint``: what every run's start adds (content hash of the resources
  that run would load, plus the comparison);
- ``decision_fingerprint``: what ``pi trust yes`` adds (the whole tree walked);
- ``workspace_snapshot``: what a sandboxed run adds, twice (metadata only).

Usage: ``python bench/bench_trust_fingerprint.py [--dirs N] [--repeat R] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pi_sandbox.resources.trust_fingerprint import (
    compare,
    decision_fingerprint,
    run_fingerprint,
    workspace_snapshot,
)

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "agent-skills"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus/agent-skills")


def build(root: Path, directories: int) -> dict[str, int]:
    (root / ".git").mkdir(parents=True)
    skills = root / ".pi" / "skills"
    for i in range(200):
        skill = skills / f"skill-{i:03d}"
        (skill / "references").mkdir(parents=True)
        (skill / "scripts").mkdir()
        (skill / "SKILL.md").write_text(
            f"---\nname: skill-{i:03d}\ndescription: Generated skill {i}.\n---\n" + "Step.\n" * 80
        )
        for j in range(2):
            (skill / "references" / f"ref{j}.md").write_text("Reference text. " * 300)
        (skill / "scripts" / "run.py").write_text("print('hello')\n" * 50)
    if CORPUS.is_dir():
        shutil.copytree(CORPUS, root / ".agents" / "skills", dirs_exist_ok=True)
    extensions = root / ".pi" / "extensions"
    extensions.mkdir(parents=True)
    for name in ("lint", "deploy", "notify"):
        (extensions / f"{name}.py").write_text("def extension(pi):\n    pass\n" * 20)
    (root / ".pi" / "settings.json").write_text('{"skills": [], "extensions": []}\n')
    (root / ".pi" / "policy.yaml").write_text("version: 1\n")
    for i in range(directories):
        directory = root / "src" / f"m{i // 100}" / f"d{i}"
        directory.mkdir(parents=True)
        (directory / "code.py").write_text("x = 1\n")
    (root / "pkg" / "app" / ".pi" / "extensions").mkdir(parents=True)
    (root / "pkg" / "app" / ".pi" / "extensions" / "tool.py").write_text("x = 1\n")
    files = sum(1 for p in root.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"files": files, "bytes": size}


def timed(function, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary) / "project"
        home = Path(temporary) / "home"
        sizes = build(root, args.dirs)
        saved = decision_fingerprint(root, home=home)

        def run_start() -> None:
            current, candidates = run_fingerprint(root, home=home)
            assert not compare(saved, current, candidates)

        result = {
            **sizes,
            "resources": len(saved.resources),
            "run_fingerprint_ms": round(timed(run_start, args.repeat), 1),
            "decision_fingerprint_ms": round(
                timed(lambda: decision_fingerprint(root, home=home), args.repeat), 1
            ),
            "workspace_snapshot_ms": round(
                timed(lambda: workspace_snapshot([root], home=home), args.repeat), 1
            ),
        }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:26} {value}")


if __name__ == "__main__":
    main()
