"""With a project extension under ``--trust sandboxed``, every extension worker runs
sandboxed: the project's ``tool_call`` hook may rewrite calls to any tool, the
user's extension tools included, so those must not run unsandboxed (like the
tool worker). Needs bubblewrap (the ``require_bwrap`` fixture skips without it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from pi_sandbox.supervisor.agent.tool_pipeline import ToolPipeline
from pi_sandbox.supervisor.providers.base import ToolCall
from pi_sandbox.supervisor.workers.worker_pool import ExtensionSource, PoolConfig, WorkerPool

pytestmark = pytest.mark.e2e

PROJECT_HOOK = """
def extension(pi):
    def steer(event, ctx):
        return None

    pi.on("tool_call", steer)
"""

USER_TOOL = """
def extension(pi):
    pi.register_tool(name="whereami", description="d", execute=lambda p, c: "USER")
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def start_pool(
    tmp_path: Path, project_trust: str, records: list
) -> tuple[WorkerPool, Path, list[ExtensionSource]]:
    root = Path(os.path.realpath(tmp_path))
    workspace = root / "ws"
    project = write(workspace / ".pi" / "extensions" / "steer.py", PROJECT_HOOK)
    user = write(root / "agent" / "extensions" / "tool.py", USER_TOOL)
    (root / "home").mkdir()
    config = PoolConfig(
        cwd=workspace,
        agent_dir=root / "agent",
        home=root / "home",
        sandbox=False,
        project_trust=project_trust,
        audit=records.append,
    )
    pool = WorkerPool(config)
    sources = [
        ExtensionSource(project, "project", project),
        ExtensionSource(user, "user", user),
    ]
    return pool, workspace, sources


async def test_a_sandboxed_project_extension_sandboxes_the_users_extension_workers(
    tmp_path, require_bwrap
):
    records: list = []
    pool, workspace, sources = await start_pool(tmp_path, "sandboxed", records)
    async with trio.open_nursery() as nursery:
        try:
            await pool.start(nursery, sources)
            assert pool.load_errors == []
            by_origin = {source.origin: worker for source, worker in pool.extensions}
            assert by_origin["project"].spec.sandbox is not None
            assert by_origin["user"].spec.sandbox is not None
            assert pool.tool_worker.spec.sandbox is not None
            roles = {r["worker"]: r["role"] for r in records if r["event"] == "sandbox_profile"}
            assert roles[f"extension {sources[0].path}"] == "sandboxed-extension"
            assert roles[f"extension {sources[1].path}"] == "extension"
            # The sandboxed user extension still works.
            pipeline = ToolPipeline(pool=pool, policy=None, cwd=workspace, emit=_drop)
            [outcome] = await pipeline.run([ToolCall("c1", "whereami", {})])
            assert [b["text"] for b in outcome.result["content"]] == ["USER"]
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


async def test_a_trusted_project_leaves_user_extension_workers_unsandboxed(tmp_path):
    records: list = []
    pool, _, sources = await start_pool(tmp_path, "yes", records)
    async with trio.open_nursery() as nursery:
        try:
            await pool.start(nursery, sources)
            assert pool.load_errors == []
            assert all(worker.spec.sandbox is None for _, worker in pool.extensions)
            assert pool.tool_worker.spec.sandbox is None
        finally:
            await pool.aclose()
            nursery.cancel_scope.cancel()


async def _drop(event):
    pass
