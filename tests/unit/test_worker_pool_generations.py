"""Ending a generation (`WorkerPool.end_generation`), in memory: fake workers stand in
for the processes, so the order of steps inside the pool is what is tested.

Issue 13 §7: issue 5 case 3's report (a background thread's StaleContextError) went
missing under load because its ``log`` error could arrive in the moment the old worker
was in neither ``extensions`` nor ``retired`` and was dropped unseen.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pi_sandbox.supervisor.extensions.extension_discovery import ExtensionSource
from pi_sandbox.supervisor.workers.worker_pool import PoolConfig, WorkerPool


class ReportingHost:
    """The session host's `report`, recording what it was asked to show."""

    def __init__(self) -> None:
        self.reports: list[tuple[list[dict[str, str]], str]] = []

    async def report(self, errors: list[dict[str, str]], event: str) -> None:
        self.reports.append((errors, event))


class ThreadDiesOnGenerationEnd:
    """An extension worker whose thread dies of StaleContextError the moment it hears
    ``generation/end``: its ``log`` error reaches the pool while the pool is still
    notifying (the earliest it can arrive from a real worker)."""

    def __init__(self, path: Path) -> None:
        self.name = "ext-1"
        self.generation = 1
        self.spec = SimpleNamespace(init_params={"path": str(path)})
        self.registrations = None
        self.error_logs: Any = None
        self.notified: list[str] = []

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.notified.append(method)
        await self.error_logs(self, "a thread died: StaleContextError: ctx.is_idle")


async def test_a_stale_thread_error_sent_while_the_generation_ends_is_reported(tmp_path):
    path = tmp_path / "c3_background.py"
    pool = WorkerPool(PoolConfig(cwd=tmp_path, agent_dir=tmp_path, home=tmp_path, sandbox=False))
    try:
        host = ReportingHost()
        pool.host = host
        pool.tool_worker = SimpleNamespace(registrations=SimpleNamespace(tools=[]))  # type: ignore[assignment]
        worker = ThreadDiesOnGenerationEnd(path)
        pool._connect(worker)  # type: ignore[arg-type]
        pool.extensions = [(ExtensionSource(path, "cli"), worker)]  # type: ignore[list-item]

        old = await pool.end_generation()

        assert old == [worker] and worker.notified == ["generation/end"]
        assert pool.extensions == [] and pool.retired == [worker]
        [(errors, event)] = host.reports
        assert event == "extension"
        [error] = errors
        assert error["path"] == str(path)
        assert "(ended generation 1)" in error["message"]
        assert "StaleContextError" in error["message"]
    finally:
        shutil.rmtree(pool.log_dir, ignore_errors=True)
