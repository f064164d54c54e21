"""The EASY reservation's estimated start counts a stopping job's GPUs as free at its stop deadline: a job in state
`preempting` (being stopped) has JobInfo.stop_deadline, when its GPUs come free for sure (the forecast reads it), so
the shadow frees them at min(its time limit's end, stop_deadline). Before, the shadow read only the time limit: a
stopping job was treated as running to its limit (the estimate hours late), and one without a limit was left out
(no reservation behind it at all, or one behind a later job)."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core import run_cycle
from scheduler.core.jobindex import JobCounts, with_facts
from scheduler.core.snapshot import (CycleConfig, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot,
                                     TaskPlacement, utc_iso)
from scheduler.core.testing import check_result

NOW = 1796360000.0  # 2026-12-04T04:53:20Z
NODES = (NodeInfo(name="n0", flavor="H200", gpus=4, used=frozenset({0, 1, 2, 3})),
         NodeInfo(name="n1", flavor="H200", gpus=4, used=frozenset({0, 1, 2, 3})))
QUEUES = (QueueInfo("q", quotas={"H200": QuotaInfo(0, 8, 8)}),)


def _running(name: str, node: str, time_limit: float | None, **over) -> JobInfo:
    return JobInfo(id=name, queue="q", roles=(RoleInfo("w", 1, 4, 1),), state="running",
                   placement=(TaskPlacement("w", 0, node, (0, 1, 2, 3)),), start_time=NOW - 100,
                   time_limit=time_limit, submit_time=NOW - 200, **over)


def _stopping(name: str, node: str, time_limit: float | None, deadline: float) -> JobInfo:
    return replace(_running(name, node, time_limit), state="preempting", stop_deadline=deadline)


WAITING = JobInfo(id="w", queue="q", roles=(RoleInfo("w", 1, 4, 1),), submit_time=NOW - 50, time_limit=600.0)


def _cycle(*live: JobInfo, facts: bool = False):
    jobs = (*live, WAITING)
    if facts:  # as the replay hands them over: with their counts (FactTuple.timed: no pass over the jobs)
        counts = JobCounts()
        for j in jobs:
            counts.add(j)
        jobs = with_facts(jobs, counts, pending_from=len(live))
    snapshot = Snapshot(nodes=NODES, queues=QUEUES, jobs=jobs, now=NOW)
    result = run_cycle(snapshot, CycleConfig())
    check_result(snapshot, result)
    return result


def test_a_stopping_job_frees_its_gpus_at_its_stop_deadline_not_its_time_limit():
    # s is being stopped (its GPUs free by NOW + 60), though its time limit runs 10 h; r ends at NOW + 3500
    result = _cycle(_stopping("s", "n0", 36000.0, NOW + 60), _running("r", "n1", 3600.0))
    assert result.estimated_start["w"] == NOW + 60, result.estimated_start
    assert f"reserved, estimated start {utc_iso(NOW + 60)}" in result.pending["w"].message


def test_a_stopping_job_past_its_time_limit_end_keeps_that_end():
    # its time limit ends (NOW + 500) before the stop deadline (NOW + 900): the earlier of the two
    result = _cycle(_stopping("s", "n0", 600.0, NOW + 900), _running("r", "n1", 3600.0))
    assert result.estimated_start["w"] == NOW + 500, result.estimated_start


def test_a_stopping_job_without_a_time_limit_is_waited_for():
    # no time limit: its GPUs still come free at the stop deadline (before: no end known, so w waited for r's)
    for facts in (False, True):
        result = _cycle(_stopping("s", "n0", None, NOW + 60), _running("r", "n1", 3600.0), facts=facts)
        assert result.estimated_start["w"] == NOW + 60, (facts, result.estimated_start)
        # and with no other job's end known at all (before: no reservation)
        result = _cycle(_stopping("s", "n0", None, NOW + 60), _running("r", "n1", None), facts=facts)
        assert result.estimated_start["w"] == NOW + 60, (facts, result.estimated_start)


def test_a_stopping_job_with_no_stop_deadline_is_read_as_before():
    # stop_deadline None (not known): its time limit's end, as a running job's
    result = _cycle(replace(_stopping("s", "n0", 600.0, NOW), stop_deadline=None), _running("r", "n1", 3600.0))
    assert result.estimated_start["w"] == NOW + 500
