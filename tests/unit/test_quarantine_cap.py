"""The worker pool's handling of persistence-guard findings (red-team F2c, F8):
repeats reported once, an entry left in place and a quarantine flood each end the
run (``guard_failure``) and kill the sandboxed tool worker. The guard itself is
below this layer and replaced by its findings."""

from __future__ import annotations

from types import SimpleNamespace

from pi_sandbox.sandbox.persistence_guard import Finding
from pi_sandbox.supervisor.workers.worker_pool import QUARANTINE_CAP, WorkerPool


class FakeWorker:
    def __init__(self) -> None:
        self.spec = SimpleNamespace(sandbox=object())
        self.pid = 1234
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


def fake_pool() -> SimpleNamespace:
    records: list[dict] = []
    return SimpleNamespace(
        audit=records.append,
        records=records,
        quarantined=[],
        _reported_findings=set(),
        repeated_findings=0,
        guard_failure=None,
        tool_worker=FakeWorker(),
    )


def record(pool: SimpleNamespace, findings: list[Finding]) -> list[Finding]:
    return WorkerPool._record_findings(pool, findings)  # type: ignore[arg-type]


def test_a_path_quarantined_again_is_audited_but_reported_once():
    pool = fake_pool()
    finding = Finding("/ws/.envrc", "protected name .envrc", moved_to="/q/001/ws/.envrc")
    assert record(pool, [finding]) == [finding]
    assert record(pool, [finding, finding]) == []
    assert pool.repeated_findings == 2 and len(pool.records) == 3
    assert pool.guard_failure is None and pool.tool_worker.killed == 0


def test_an_entry_left_in_place_ends_the_run_and_says_what_to_do():
    pool = fake_pool()
    left = Finding("/ws/d/.envrc", "protected name .envrc", error="no", left=True)
    assert record(pool, [left]) == [left]
    assert "/ws/d/.envrc" in pool.guard_failure and "remove it by hand" in pool.guard_failure
    assert pool.tool_worker.killed == 1


def test_the_cap_th_quarantine_is_a_flood_that_kills_the_tool_worker():
    pool = fake_pool()
    for i in range(QUARANTINE_CAP - 1):
        record(pool, [Finding(f"/ws/{i}/.pi", "protected name .pi", moved_to="/q")])
    assert pool.guard_failure is None and pool.tool_worker.killed == 0
    record(pool, [Finding("/ws/last/.pi", "protected name .pi", moved_to="/q")])
    assert pool.guard_failure.startswith("quarantine flood")
    assert f"the cap is {QUARANTINE_CAP} per run" in pool.guard_failure
    assert pool.tool_worker.killed == 1
