"""An EASY reservation's pending reason gives its estimated start as a UTC time people read (new-user trial 22b:
"reserved, estimated start t=1796360762s" on gpuctl and the API, beside an ISO estimated_start), as a requeued
gang's retry time already was (snapshot.utc_iso)."""
from __future__ import annotations

from scheduler.core import run_cycle
from scheduler.core.snapshot import (CycleConfig, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot,
                                     TaskPlacement, utc_iso)

NOW = 1796360000.0  # 2026-12-04T04:53:20Z


def test_the_reservation_reason_names_the_start_as_a_utc_time():
    node = NodeInfo(name="n0", flavor="H200", gpus=4, used=frozenset({0, 1, 2, 3}))
    running = JobInfo(id="r", queue="q", roles=(RoleInfo("w", 1, 4, 1),), state="running",
                      placement=(TaskPlacement("w", 0, "n0", (0, 1, 2, 3)),), start_time=NOW - 100,
                      time_limit=600.0, submit_time=NOW - 200)
    waiting = JobInfo(id="w", queue="q", roles=(RoleInfo("w", 2, 2, 2),), submit_time=NOW - 50, time_limit=600.0)
    snapshot = Snapshot(nodes=(node,), queues=(QueueInfo("q", quotas={"H200": QuotaInfo(0, 4, 4)}),),
                        jobs=(running, waiting), now=NOW)
    result = run_cycle(snapshot, CycleConfig())
    start = result.estimated_start["w"]
    assert start == NOW + 500  # the running job's time limit ends then
    message = result.pending["w"].message
    assert f"reserved, estimated start {utc_iso(start)}" in message, message
    assert utc_iso(start) == "2026-12-04T05:01:40Z"
    assert "t=" not in message
