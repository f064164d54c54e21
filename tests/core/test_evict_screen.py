"""The eviction phase's cheap screen (actions/evict.py): its C-level form (`_screen`, with the engine cache's job
memo on a one-flavor cluster where no job may preempt: the queues that may not reclaim left out, `_closed`) picks the
same jobs as the one-by-one screen (`_screen_each`) at every call, and adds no key to the queues' usage (a
defaultdict that the one-by-one screen reads through reclaim_may_help only for the queues of its jobs)."""
from __future__ import annotations

import random

import pytest

from scheduler.core import EngineCache, run_cycle
from scheduler.core.actions import evict
from scheduler.core.testing import World, check_result


def _world(seed: int) -> World:
    rng = random.Random(seed)
    w = World()
    w.nodes(count=rng.randint(2, 5), gpus=8, flavor="A10", prefix="n")
    nodes = [n.name for n in w.node_infos]
    names = []
    for i in range(rng.randint(3, 6)):
        parent = None if i < 2 or rng.random() < 0.6 else rng.choice(names)
        limit = {"A10": rng.choice([4, 8, 16])} if rng.random() < 0.3 else None
        w.queue(name=f"q{i}", parent=parent, quota={"A10": rng.choice([0, 1, 2, 3, 4, 8])}, limit=limit)
        names.append(f"q{i}")
    free = {n: 8 for n in nodes}
    for i in range(rng.randint(4, 40)):  # up to a full cluster: jobs wait for GPUs, queues borrow
        gpus = rng.choice([1, 2, 4])
        node = rng.choice(nodes)
        if free[node] >= gpus:
            free[node] -= gpus
            w.running(name=f"r{i}", queue=rng.choice(names), nodes=[node], gpus_per_task=gpus, started=float(i),
                      priority=rng.choice([0, 0, 1]))
    for i in range(rng.randint(3, 25)):
        w.job(name=f"j{i}", queue=rng.choice(names + ["nowhere"]), tasks=rng.choice([1, 1, 2]),
              gpus_per_task=rng.choice([0, 1, 2, 4, 8]), submit=float(i), priority=rng.choice([0, 0, 1]),
              flavors=["A10"])
    return w


def _one_by_one(queues, failed_order, reasons, memo, borrowing, limit) -> list:
    """The one-by-one screen's answer (evict._screen_each) for what _screen was asked, preemption off."""
    class _Session:
        config, queues = None, None
    session = _Session()
    session.queues = queues
    session.config = type("C", (), {"preemption": False})()
    return evict._screen_each(session, failed_order, reasons, memo, borrowing, {}, limit, {}, True)


@pytest.mark.parametrize("seed", range(60))
def test_the_c_level_screen_picks_what_the_one_by_one_screen_picks(seed, monkeypatch):
    calls = []
    fast = evict._screen

    def both(queues, flavor, failed_order, reasons, memo, borrowing, helps, limit):
        usage = {q: dict(per) for q, per in queues.usage.items()}
        got = fast(queues, flavor, failed_order, reasons, memo, borrowing, helps, limit)
        assert {q: dict(per) for q, per in queues.usage.items()} == usage  # no usage key added

        calls.append((got, _one_by_one(queues, failed_order, reasons, memo, borrowing, limit)))
        return got

    monkeypatch.setattr(evict, "_screen", both)
    world = _world(seed)
    cache = EngineCache()
    snapshot = world.snapshot()
    with_cache = run_cycle(snapshot, cache=cache)
    check_result(snapshot, with_cache)
    without = run_cycle(snapshot)  # no memo: the one-by-one screen
    assert [(e.job_id, e.tasks) for e in with_cache.evictions] == [(e.job_id, e.tasks) for e in without.evictions]
    assert with_cache.pending == without.pending
    for got, want in calls:
        assert got is None or [j.id for j in got] == [j.id for j in want]


def test_a_queue_one_gpu_below_its_entitlement_reclaims_from_a_borrower(monkeypatch):
    """a uses 1 of its quota of 2, b borrows the other 7 GPUs of the only node: a's 1-GPU job passes the screen
    (claim room 1) and takes back a GPU; b's own job (b above its entitlement of 0) does not pass."""
    w = World()
    w.nodes(count=1, gpus=8, flavor="A10", prefix="n")
    w.queue(name="a", quota={"A10": 2})
    w.queue(name="b", quota={"A10": 0})
    w.running(name="ra", queue="a", nodes=["n1"], gpus_per_task=1, started=0.0)
    w.running(name="rb", queue="b", nodes=["n1"], gpus_per_task=7, started=1.0)
    w.job(name="jb", queue="b", tasks=1, gpus_per_task=1, submit=0.0, flavors=["A10"])
    w.job(name="ja", queue="a", tasks=1, gpus_per_task=1, submit=1.0, flavors=["A10"])
    picked = []
    fast = evict._screen

    def spy(*args):
        out = fast(*args)
        picked.append(None if out is None else [j.id for j in out])
        return out

    monkeypatch.setattr(evict, "_screen", spy)
    snapshot = w.snapshot()
    result = run_cycle(snapshot, cache=EngineCache())
    check_result(snapshot, result)
    ja = next(j.id for j in snapshot.jobs if j.name == "ja")
    assert [ja] in picked
    assert [d["beneficiary"] for d in result.decisions] == [ja]
    without = run_cycle(snapshot)
    assert [(e.job_id, e.tasks) for e in result.evictions] == [(e.job_id, e.tasks) for e in without.evictions]


def _reclaim_world(seed: int) -> World:
    """A full one-flavor cluster where queues under their quota wait behind borrowers: the screen has jobs to pick."""
    rng = random.Random(seed)
    w = World()
    w.nodes(count=rng.randint(2, 4), gpus=8, flavor="A10", prefix="n")
    nodes = [n.name for n in w.node_infos]
    quotas = [rng.choice([2, 4, 8]) for _ in range(rng.randint(2, 4))]
    for i, quota in enumerate(quotas):
        w.queue(name=f"q{i}", quota={"A10": quota})
    w.queue(name="borrower", quota={"A10": 0})
    for k, node in enumerate(nodes):  # every GPU taken, most by the borrower
        used = 0
        while used < 8:
            gpus = min(rng.choice([1, 2, 4]), 8 - used)
            queue = "borrower" if rng.random() < 0.8 else f"q{rng.randrange(len(quotas))}"
            w.running(name=f"r{k}-{used}", queue=queue, nodes=[node], gpus_per_task=gpus, started=float(used))
            used += gpus
    for i in range(rng.randint(3, 12)):
        w.job(name=f"j{i}", queue=rng.choice([*(f"q{k}" for k in range(len(quotas))), "borrower"]),
              tasks=1, gpus_per_task=rng.choice([1, 2, 4, 8]), submit=float(i), flavors=["A10"])
    return w


def test_the_c_level_screen_answers_and_picks_jobs_on_reclaim_worlds(monkeypatch):
    """The screen's C-level form is taken (not left to the one-by-one screen) and picks jobs, the same ones as the
    one-by-one screen, in many cycles of worlds built for reclaim: the random test above could pass on worlds where
    it never answers."""
    answered, picked = 0, 0
    fast = evict._screen

    def both(queues, flavor, failed_order, reasons, memo, borrowing, helps, limit):
        nonlocal answered, picked
        got = fast(queues, flavor, failed_order, reasons, memo, borrowing, helps, limit)
        if got is not None:
            want = _one_by_one(queues, failed_order, reasons, memo, borrowing, limit)
            assert [j.id for j in got] == [j.id for j in want]
            answered += 1
            picked += bool(got)
        return got

    monkeypatch.setattr(evict, "_screen", both)
    for seed in range(40):
        world = _reclaim_world(seed)
        snapshot = world.snapshot()
        with_cache = run_cycle(snapshot, cache=EngineCache())
        check_result(snapshot, with_cache)
        without = run_cycle(snapshot)
        assert [(e.job_id, e.tasks) for e in with_cache.evictions] == [(e.job_id, e.tasks) for e in without.evictions]
        assert with_cache.pending == without.pending
    assert answered >= 40 and picked >= 20, (answered, picked)
