"""The victim search's slot bound (actions/victim_search._short_of_slots) skips only placement attempts that
would fail. Whole cycles decide the same with it and without it: on a replay whose queues contend (reclaim
evicts), on random worlds with a borrowing queue, and on a world where no node can be emptied for a gang."""
from __future__ import annotations

import random
from contextlib import contextmanager
from unittest import mock

from scheduler.core import run_cycle
from scheduler.core.actions import victim_search
from scheduler.core.testing import World, role
from tests.sim.test_replay_digest import run


@contextmanager
def counted(name: str):
    """victim_search.<name> counted: {"true": answers that were true, "asked": calls}."""
    real = getattr(victim_search, name)
    seen = {"true": 0, "asked": 0}

    def wrapper(*args):
        answer = real(*args)
        seen["asked"] += 1
        seen["true"] += bool(answer)
        return answer

    with mock.patch.object(victim_search, name, wrapper):
        yield seen


@contextmanager
def shortcuts_off():
    """The bound off, read from the state (_short_of_slots) and from the search's counts (_short_of_counted_slots)."""
    with mock.patch.object(victim_search, "_short_of_slots", lambda *args: False), \
            mock.patch.object(victim_search, "_short_of_counted_slots", lambda *args: False):
        yield


def _decisions(result) -> tuple:
    return result.bindings, result.pending, result.evictions, result.nominations, result.metrics


def test_a_contended_replay_decides_the_same():
    with counted("_short_of_slots") as bound:
        with_shortcuts, report, cycles = run("philly")
    with shortcuts_off():
        without, _, cycles_without = run("philly")
    assert bound["true"] > 20 and bound["asked"] > bound["true"], bound
    assert report.evictions_by_rule.get("reclaim", 0) > 0, report.evictions_by_rule
    assert (with_shortcuts, cycles) == (without, cycles_without)


def _world(rng: random.Random) -> World:
    """Two racks of 8-GPU nodes; queue `lender` runs small jobs (some not preemptible) far above its quota,
    queue `owner` (entitled to most of the cluster) waits with gangs of 1-8 GPU tasks: reclaim searches."""
    world = World()
    world.racks(count=2, nodes_per_rack=rng.choice([2, 3, 4]), gpus=8)
    world.queue(name="root", quota={"H100": 64})
    world.queue(name="owner", parent="root", quota={"H100": 48}, guarantee={"H100": rng.choice([0, 16])})
    world.queue(name="lender", parent="root", quota={"H100": rng.choice([0, 4, 8])})
    for i in range(rng.randint(4, 14)):
        free = [n.name for n in world.node_infos if n.gpus - len(n.used) >= 1]
        if not free:
            break
        gpt = rng.choice([1, 1, 2, 4])
        node = rng.choice(free)
        info = {n.name: n for n in world.node_infos}[node]
        if info.gpus - len(info.used) < gpt:
            gpt = 1
        world.running(name=f"run{i}", queue="lender", nodes=[node], gpus_per_task=gpt, started=float(i),
                      preemptible=rng.random() < 0.8)
    for j in range(rng.randint(1, 5)):
        tasks = rng.randint(1, 3)
        world.job(name=f"want{j}", queue="owner", roles=[role(tasks=tasks, gpus_per_task=rng.choice([1, 2, 4, 8]),
                                                               min_available=rng.randint(1, tasks))],
                  submit=float(j), topology_mode=rng.choice(["none", "hard"]), highest_tier=1)
    return world


def test_random_borrowing_worlds_decide_the_same():
    bound_true = 0
    for seed in range(60):
        snapshot = _world(random.Random(seed)).snapshot()
        with counted("_short_of_slots") as bound:
            fast = _decisions(run_cycle(snapshot))
        with shortcuts_off():
            full = _decisions(run_cycle(snapshot))
        assert fast == full, seed
        bound_true += bound["true"]
    assert bound_true > 10, bound_true


def test_a_gang_no_eviction_can_make_room_for_decides_the_same():
    """Every node runs a job that may not be evicted, so no node can be emptied for an 8-GPU task: the bound
    skips every placement attempt of the owner's gang, with the same outcome as the full search."""
    world = World()
    world.racks(count=1, nodes_per_rack=3, gpus=8)  # 21 GPUs can be freed (>= the gang's 16), none whole
    world.queue(name="root", quota={"H100": 16})
    world.queue(name="owner", parent="root", quota={"H100": 16}, guarantee={"H100": 16})
    world.queue(name="lender", parent="root", quota={"H100": 0})
    for n in world.node_infos:
        world.running(name=f"pinned-{n.name}", queue="lender", nodes=[n.name], gpus_per_task=1, preemptible=False)
        world.running(name=f"loose-{n.name}", queue="lender", nodes=[n.name], gpus_per_task=4, started=1.0)
    world.job(name="gang", queue="owner", tasks=2, gpus_per_task=8)
    snapshot = world.snapshot()
    with counted("_short_of_slots") as bound, counted("_short_of_counted_slots") as counted_bound:
        fast = run_cycle(snapshot)
    with shortcuts_off():
        full = run_cycle(snapshot)
    both = {k: bound[k] + counted_bound[k] for k in bound}
    assert both["true"] >= 1 and both["true"] == both["asked"], both
    assert _decisions(fast) == _decisions(full)
    assert not fast.evictions and "gang" in fast.pending
