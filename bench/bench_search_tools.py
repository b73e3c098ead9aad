"""Cost of the built-in ``grep`` and ``find`` (issue 17 §6): ripgrep/fd against the
Python fallback, on one generated tree, and the fallback on a pathological regex.

    python bench/bench_search_tools.py [--files 5000] [--runs 5]

The tree: ``--files`` Python-like files of 60 lines in directories of 50, a
``.gitignore`` ignoring ``build/`` (which holds as many files again) and ``*.log``.
Prints the median wall time of each case in milliseconds. rg is the one next to this
interpreter (the ``ripgrep`` wheel) or on PATH; fd likewise, when installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pi_sandbox.worker import search_tools


def make_tree(root: Path, files: int) -> None:
    (root / ".gitignore").write_text("build/\n*.log\n")
    body = "".join(f"def f{i}(x):\n    return x + {i}  # value {i}\n" for i in range(30))
    for i in range(files):
        d = root / "src" / f"pkg{i // 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(body + ("# TODO: needle\n" if i % 97 == 0 else ""))
        b = root / "build" / f"gen{i // 50}"
        b.mkdir(parents=True, exist_ok=True)
        (b / f"mod{i}.py").write_text(body + "# TODO: needle\n")


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    os.environ["PATH"] = path
    have_rg = shutil.which("rg") is not None
    have_fd = (shutil.which("fd") or shutil.which("fdfind")) is not None

    def nothing() -> None:
        return None

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, args.files)
        cases = {
            "grep needle (python)": lambda: search_tools.grep_files(
                {"pattern": "needle"}, str(root), cancel=nothing, use_rg=False
            ),
            "grep needle, context 2 (python)": lambda: search_tools.grep_files(
                {"pattern": "needle", "context": 2}, str(root), cancel=nothing, use_rg=False
            ),
            "find *.py (python)": lambda: search_tools.find_files(
                {"pattern": "*.py", "limit": 100000}, str(root), cancel=nothing, use_fd=False
            ),
        }
        if have_rg:
            cases["grep needle (rg)"] = lambda: search_tools.grep_files(
                {"pattern": "needle"}, str(root), cancel=nothing, use_rg=True
            )
            cases["grep needle, context 2 (rg)"] = lambda: search_tools.grep_files(
                {"pattern": "needle", "context": 2}, str(root), cancel=nothing, use_rg=True
            )
        if have_fd:
            cases["find *.py (fd)"] = lambda: search_tools.find_files(
                {"pattern": "*.py", "limit": 100000}, str(root), cancel=nothing, use_fd=True
            )
        evil = root / "evil"
        evil.mkdir()
        (evil / "e.txt").write_text(("a" * 2000 + "!\n") * 5000)
        cases["grep (a+)+$ on 10 MB of a…a! lines (python, RE2)"] = lambda: search_tools.grep_files(
            {"pattern": "(a+)+$"}, str(evil), cancel=nothing, use_rg=False
        )
        print(f"tree: {args.files} files in src/, {args.files} ignored in build/")
        for name, fn in cases.items():
            print(f"{name}: {median_ms(fn, args.runs):.0f} ms")
        if not have_fd:
            print("fd: not installed (no wheel); fd cases skipped")


if __name__ == "__main__":
    main()
