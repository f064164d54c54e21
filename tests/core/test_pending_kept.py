"""What the engine keeps of the pending jobs across cycles (issue 16, third round) equals what it derives
from each cycle's list alone: the demand sums of plugins.fairshare.pending_demand and the per-queue sorted
lists of actions.allocate (_PendingOrder), on random sequences of lists that reuse, drop, replace and add
JobInfo objects (a job in the list twice and GPU fractions included)."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.core.actions.allocate import _PendingOrder
from scheduler.core.plugins.fairshare import pending_demand
from scheduler.core.plugins.quota import job_order_key
from scheduler.core.snapshot import JobInfo, RoleInfo


def _job(rng: random.Random, n: int) -> JobInfo:
    roles = [RoleInfo(name="w", tasks=rng.randint(1, 4), gpus_per_task=rng.choice([0, 1, 2, 8]), min_available=1,
                      flavors=rng.choice([(), ("A",), ("B",), ("A", "B")]))]
    if rng.random() < 0.05:
        roles.append(RoleInfo(name="s", tasks=1, gpus_per_task=1, min_available=1, gpu_milli=500))
    return JobInfo(id=f"j{n}", queue=rng.choice("abcd"), roles=tuple(roles), priority=rng.choice([0, 0, 5]),
                   submit_time=float(rng.randint(0, 50)), time_limit=rng.choice([None, 100.0]),
                   not_before=rng.choice([None] * 9 + [10.0]))


def _nonzero(demand: dict) -> dict:
    return {q: {f: g for f, g in per.items() if g} for q, per in demand.items() if any(per.values())}


class _Queues:
    held: dict = {}


class _Admission:
    """What _PendingOrder reads of allocate's Admission: the job memo and a job's shape id."""

    def __init__(self, memo: dict):
        self.memo = memo

    def facts(self, job: JobInfo) -> list:
        return [job, 0, None, (), {}, hash((job.queue, job.roles)) % 7, ()]


@pytest.mark.parametrize("seed", range(12))
def test_kept_pending_matches_each_list(seed: int) -> None:
    rng = random.Random(seed)
    pool = [_job(rng, n) for n in range(60)]
    memo: dict = {}
    kept = _PendingOrder.of(memo)
    admission = _Admission(memo)
    flavors = {"A", "B"}
    n = len(pool)
    for step in range(80):
        if rng.random() < 0.3:  # a job replaced by a new object (requeued: attempts + 1) or a new job
            i = rng.randrange(len(pool))
            pool[i] = replace(pool[i], attempts=pool[i].attempts + 1) if rng.random() < 0.5 else _job(rng, n)
            n += 1
        if step and rng.random() < 0.25:  # the last list with jobs added at its end (arrivals), one maybe twice
            listed = {j.id for j in pending}  # a job id once per list, as in a snapshot
            pending = [*pending, *(j for j in pool if rng.random() < 0.1 and j.id not in listed)]
            if pending and rng.random() < 0.1:
                pending.append(rng.choice(pending))
        else:
            pending = rng.sample(pool, rng.randint(0, len(pool))) if rng.random() < 0.2 else \
                [j for j in pool if rng.random() < 0.9]
            rng.shuffle(pending)
        if pending and rng.random() < 0.05:
            pending.append(pending[0])  # the same object twice
        assert _nonzero(pending_demand(pending, flavors, memo)) == _nonzero(pending_demand(pending, flavors)), step
        by_queue, special = kept.update(pending, _Queues(), admission)
        if by_queue is None:
            assert len(set(map(id, pending))) < len(pending)
            continue
        ordinary = sorted((j for j in pending if j.not_before is None and not j.reserved), key=job_order_key)
        expected: dict = {}
        for j in ordinary:
            expected.setdefault(j.queue, []).append(j)
        assert {q: [id(j) for j in reversed(js)] for q, js in expected.items()} == \
            {q: [id(j) for j in js] for q, js in by_queue.items()}, step
        assert [id(j) for j in special] == [id(j) for j in sorted(
            (j for j in pending if j.not_before is not None or j.reserved), key=job_order_key)], step
        for q, js in by_queue.items():  # the index beside each list
            shapes, ids, distinct, backwards, decode = kept.index(q)
            assert ids == [j.id for j in js]
            assert [decode[s] for s in shapes] == [(admission.facts(j)[5], j.avoid_nodes) for j in js]
            assert list(distinct) == list(dict.fromkeys(shapes)) and backwards == shapes[::-1]


def test_threads_alternating_on_one_memo() -> None:
    """Cycles run by different threads on one engine cache (its job memo), alternating between two
    different pending sets, each get the answer for their own list (the kept state is per thread, and a
    thread's state is right whatever list it saw last)."""
    import threading
    rng = random.Random(3)
    pool = [_job(rng, n) for n in range(40)]
    memo: dict = {}
    admission = _Admission(memo)
    errors: list = []

    def one(pending: list) -> None:
        try:
            assert _nonzero(pending_demand(pending, {"A", "B"}, memo)) == _nonzero(pending_demand(pending, {"A", "B"}))
            by_queue, _ = _PendingOrder.of(memo).update(pending, _Queues(), admission)
            expected: dict = {}
            for j in sorted((j for j in pending if j.not_before is None), key=job_order_key):
                expected.setdefault(j.queue, []).append(id(j))
            assert {q: [id(j) for j in reversed(js)] for q, js in by_queue.items()} == expected
        except AssertionError as e:  # pragma: no cover - reported below
            errors.append(e)

    for step in range(10):
        for half in (pool[:25], pool[15:]):  # two threads, two different lists, one after the other
            pending = [j for j in half if rng.random() < 0.9]
            t = threading.Thread(target=one, args=(pending,))
            t.start()
            t.join()
    assert not errors
