"""Shared fixtures: fixture extension paths and a started, unsandboxed worker pool."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

FIXTURES = Path(__file__).parent / "fixtures"
EXTENSIONS = FIXTURES / "extensions"
REPO_ROOT = Path(__file__).parent.parent


@pytest.fixture
def ext():
    """``ext("blocker")`` → path of ``tests/fixtures/extensions/blocker.py`` (or a package dir)."""

    def path(name: str) -> Path:
        candidate = EXTENSIONS / f"{name}.py"
        return candidate if candidate.exists() else EXTENSIONS / name

    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def open_pool(tmp_path: Path, workspace: Path):
    """An async context manager factory that starts a WorkerPool and always reaps it."""
    from pi_sandbox.supervisor.worker_pool import ExtensionSource, PoolConfig, WorkerPool

    @asynccontextmanager
    async def opener(extensions=(), *, sandbox=False, hook_timeout_s=10.0, origin="cli"):
        config = PoolConfig(
            cwd=workspace,
            agent_dir=tmp_path / "agent",
            home=tmp_path / "home",
            sandbox=sandbox,
            hook_timeout_s=hook_timeout_s,
        )
        pool = WorkerPool(config)
        async with trio.open_nursery() as nursery:
            try:
                await pool.start(nursery, [ExtensionSource(Path(p), origin) for p in extensions])
                yield pool
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()

    return opener


@pytest.fixture(scope="session")
def require_bwrap() -> str:
    """The bwrap binary, or skip with the reason it cannot create namespaces here."""
    from pi_sandbox.errors import SandboxUnavailableError
    from pi_sandbox.sandbox import find_bwrap, probe_bwrap

    try:
        bwrap = find_bwrap()
        probe_bwrap(bwrap)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap cannot create namespaces here: {exc}")
    return bwrap
