"""How a worker is started (issue 20 §5): ``python -I -S -B -c`` with the paths `site`
would have added, and the worker's own bytecode written once by the supervisor."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from pi_sandbox.supervisor.extensions.extension_discovery import ExtensionSource
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool
from pi_sandbox.supervisor.workers.worker_process import (
    compile_stale,
    worker_command,
    worker_sys_path,
)


def _run_as_worker(code: str) -> dict:
    """Run ``code`` with the worker's interpreter flags and sys.path arguments."""
    argv = worker_command()
    bootstrap = argv.index("-c") + 1
    argv[bootstrap] = "import sys;sys.path+=sys.argv[1:];del sys.argv[1:];" + code
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd="/").stdout
    return json.loads(out)


def test_a_worker_runs_isolated_without_site_and_without_writing_bytecode():
    argv = worker_command()
    assert argv[0] == sys.executable
    flags = argv[1 : argv.index("-c")]
    assert flags == ["-I", "-S", "-B"]
    assert "pi_sandbox.worker" in argv[argv.index("-c") + 1]  # how tests find workers


def test_without_site_a_worker_still_finds_its_package_and_the_installed_packages():
    seen = _run_as_worker(
        "import json, pi_sandbox.worker.runtime, pydantic;"
        "print(json.dumps({'site': 'site' in sys.modules, 'path': sys.path,"
        " 'runtime': pi_sandbox.worker.runtime.__file__, 'argv': sys.argv}))"
    )
    assert seen["site"] is False
    assert Path(seen["runtime"]).resolve() == (
        Path(importlib.util.find_spec("pi_sandbox.worker.runtime").origin).resolve()
    )
    # The stdlib entries first, then what site would add, in site's order; no
    # current directory and no script directory (isolated mode).
    assert seen["path"][-len(worker_sys_path()) :] == list(worker_sys_path())
    assert "" not in seen["path"] and "/" not in seen["path"]
    assert seen["argv"] == ["-c"]


def test_the_site_paths_are_those_of_an_isolated_interpreter(tmp_path):
    isolated = json.loads(
        subprocess.run(
            [sys.executable, "-I", "-c", "import sys, json; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
    )
    bare = json.loads(
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", "import sys, json; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
    )
    added_by_site = [p for p in isolated if p not in bare]
    assert list(worker_sys_path()) == added_by_site


def test_missing_or_stale_bytecode_is_written_and_fresh_bytecode_is_left_alone(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("VALUE = 1\n")
    assert compile_stale([str(source)]) == 1
    pyc = tmp_path / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    assert pyc.is_file()
    written = pyc.stat().st_mtime_ns
    assert compile_stale([str(source)]) == 0
    assert pyc.stat().st_mtime_ns == written
    source.write_text("VALUE = 22\n")  # new size: stale
    os.utime(source, (1_000_000, 1_000_000))
    assert compile_stale([str(source)]) == 1
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-B",
            "-v",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import mod; print(mod.VALUE)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "22"
    assert f"{pyc} matches {source}" in out.stderr  # the worker reads it, compiles nothing


def test_a_source_that_does_not_compile_is_skipped(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert compile_stale([str(broken)]) == 0


def test_an_extension_importing_an_installed_package_loads_in_a_worker(tmp_path):
    extension = tmp_path / "uses_pydantic.py"
    extension.write_text(
        "import pydantic\n\ndef extension(pi):\n    pi.on('tool_call', lambda event, ctx: None)\n"
    )
    workspace, home, agent = (tmp_path / n for n in ("ws", "home", "agent"))
    for directory in (workspace, home, agent):
        directory.mkdir()

    async def main() -> list:
        pool = WorkerPool(PoolConfig(cwd=workspace, agent_dir=agent, home=home, sandbox=False))
        async with trio.open_nursery() as nursery:
            try:
                with trio.fail_after(60):
                    await pool.start(nursery, [ExtensionSource(extension, "cli")])
                return [list(pool.load_errors), len(pool.extensions)]
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()

    errors, loaded = trio.run(main)
    assert errors == []
    assert loaded == 1


def test_bytecode_is_not_compiled_where_it_cannot_be_written(tmp_path, monkeypatch):
    source = tmp_path / "mod.py"
    source.write_text("VALUE = 1\n")
    # As root every directory is writable: the read-only install is the OS's answer.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert compile_stale([str(source)]) == 0
    assert not (tmp_path / "__pycache__").exists()
