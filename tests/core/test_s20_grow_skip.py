"""The cycle skips the grow action, and the list of waiting jobs it would be given, when the snapshot's facts say no
running job places fewer tasks than its roles want (issue 16, session 20: the list is built from every job that did
not start, each cycle of a busy replay, for grow to return [] at its first test). A job that does miss tasks still
grows, with the cache and without it."""
from __future__ import annotations

import scheduler.core.cycle as cycle_module
from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.snapshot import JobInfo, NodeInfo, QueueInfo, RoleInfo, Snapshot, TaskPlacement


def _snapshot(elastic_short: bool) -> Snapshot:
    nodes = (NodeInfo(name="n0", flavor="H100", gpus=8, used=frozenset(range(8))),
             NodeInfo(name="n1", flavor="H100", gpus=8))
    # a running job of two 8-GPU tasks on n0 (its second task missing when elastic_short), and a pending job too big
    # to start: a busy cycle's waiting list of one
    placed = (TaskPlacement("w", 0, "n0", tuple(range(8))),)
    running = JobInfo(id="run", queue="q", roles=(RoleInfo("w", 2 if elastic_short else 1, 8, 1),), priority=0,
                      submit_time=0.0, state="running", placement=placed)
    waiting = JobInfo(id="big", queue="q", roles=(RoleInfo("w", 3, 8, 3),), priority=0, submit_time=1.0)
    return Snapshot(nodes=nodes, queues=(QueueInfo("q", quotas={}),), jobs=(running, waiting))


def test_no_job_short_of_tasks_skips_grow(monkeypatch):
    calls = []
    real = cycle_module.grow

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cycle_module, "grow", counted)
    result = run_cycle(_snapshot(False), CycleConfig(), cache=EngineCache())
    assert result.growths == [] and "big" in result.pending
    assert calls == []  # with the cache's facts: not called
    run_cycle(_snapshot(False), CycleConfig(), cache=None)
    assert len(calls) == 1  # without them (no facts): called, and it scans the jobs itself


def test_a_job_short_of_tasks_still_grows():
    for cache in (EngineCache(), None):
        result = run_cycle(_snapshot(True), CycleConfig(), cache=cache)
        assert [(b.job_id, [t.node for t in b.tasks]) for b in result.growths] == [("run", ["n1"])]
