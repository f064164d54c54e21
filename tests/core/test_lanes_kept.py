"""allocate's one-task lane answers kept across cycles (issue 16, Admission._kept_lanes): over many random cycles on
one engine cache (jobs of a few shapes coming and going, queue limits and quotas changing, the nodes' NUMA reporting
switched on and off while the cluster's shape stays the same), every answer taken from the kept table equals
Admission._lane worked out again from scratch for that job in that cycle; with the table's token checks taken out,
the same sequence finds a stale answer (the check can fail)."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.actions import allocate as allocate_mod
from scheduler.core.actions.allocate import Admission
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, \
    TaskPlacement

RACKS = ("r0", "r1", "r2")


def _nodes(numa: bool) -> tuple[NodeInfo, ...]:
    out = []
    for i in range(12):
        gpus = (8, 4, 8)[i % 3]
        out.append(NodeInfo(name=f"n{i:02d}", flavor="H100", gpus=gpus, domain=RACKS[i % 3],
                            gpu_numa=tuple(g * 2 // gpus for g in range(gpus)) if numa else ()))
    return tuple(out)


def _queues(rng: random.Random) -> tuple[QueueInfo, ...]:
    out = [QueueInfo("org", quotas={"H100": QuotaInfo(0, 64, rng.choice([None, 40, 80]))})]
    for q in "abc":
        quota = rng.randint(0, 30)
        limit = rng.choice([None, quota, rng.randint(quota, 80), 2, 4])
        out.append(QueueInfo(q, parent="org", quotas={"H100": QuotaInfo(0, quota, limit)}))
    return tuple(out)


def _job(rng: random.Random, i: int) -> JobInfo:
    gpus = rng.choice([1, 1, 2, 2, 4, 8])
    return JobInfo(id=f"j{i}", queue=rng.choice("abc"), roles=(RoleInfo("w", 1, gpus, 1),),
                   priority=rng.choice([0, 0, 1]), submit_time=float(i), preemptible=rng.random() < 0.7,
                   numa=rng.choice(["prefer", "prefer", "single"]), preferred_tier=rng.choice([None, None, 1]))


def _run(rng: random.Random, steps: int) -> tuple[int, int]:
    """(kept answers compared, mismatches) over `steps` cycles; a mismatch is a kept answer that differs from
    _lane's fresh one."""
    cache, config = EngineCache(), CycleConfig()
    domains = (DomainInfo("spine", 2),) + tuple(DomainInfo(r, 1, "spine") for r in RACKS)
    queues, numa = _queues(rng), True
    pending, running, serial = [], [], 0
    compared = mismatches = 0
    original = Admission.lane

    def checked(self, job, entry):
        nonlocal compared, mismatches
        lanes = self._lanes
        if lanes is not None and entry[5] in lanes:
            compared += 1
            mismatches += lanes[entry[5]] != self._lane(job, entry)
        return original(self, job, entry)

    Admission.lane = checked
    try:
        for _ in range(steps):
            roll = rng.random()
            if roll < 0.1:
                queues = _queues(rng)  # limits and quotas change: the kept table must not answer for the old ones
            elif roll < 0.2:
                numa = not numa  # the same shape (NUMA is not part of it), other search passes
            for _ in range(rng.randint(0, 6)):
                serial += 1
                pending.append(_job(rng, serial))
            if running and rng.random() < 0.5:
                running.pop(rng.randrange(len(running)))
            nodes = _nodes(numa)
            used: dict = {}
            for job in running:
                t = job.placement[0]
                used.setdefault(t.node, set()).update(t.gpus)
            nodes = tuple(_with_used(n, used.get(n.name, ())) for n in nodes)
            snapshot = Snapshot(nodes=nodes, domains=domains, queues=queues, jobs=tuple(running + pending), now=0.0)
            result = run_cycle(snapshot, config, cache=cache)
            started = {b.job_id: b for b in result.bindings}
            for job in [j for j in pending if j.id in started]:
                pending.remove(job)
                b = started[job.id]
                running.append(JobInfo(id=job.id, queue=job.queue, roles=job.roles, state="running",
                                       placement=tuple(TaskPlacement(t.role, t.index, t.node, t.gpus)
                                                       for t in b.tasks), preemptible=job.preemptible,
                                       submit_time=job.submit_time))
            pending = [j for j in pending if rng.random() < 0.9]  # some leave without starting
    finally:
        Admission.lane = original
    return compared, mismatches


def _with_used(node: NodeInfo, used) -> NodeInfo:
    return replace(node, used=frozenset(used)) if used else node


def test_kept_lane_answers_equal_fresh_ones() -> None:
    compared, mismatches = _run(random.Random(11), 300)
    assert mismatches == 0
    assert compared > 300  # the kept table answered many times


def test_a_table_kept_without_its_token_goes_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: dict = {}

    def untokened(self) -> dict:  # one table for the whole run, whatever the queues or NUMA
        return kept

    monkeypatch.setattr(allocate_mod.Admission, "_kept_lanes", untokened)
    _, mismatches = _run(random.Random(11), 300)
    assert mismatches > 0
