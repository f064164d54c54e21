"""A parent's guarantee does not block reclaim between its children (trial 21, F16; Kueue's and KAI's semantics).

P (guarantee = quota = 8) has children A and B (quota 4 each). A runs above its quota; B, below its own, waits. A
reclaim from A to B is P's own business: P's guarantee protects P from other queues, not A from its sibling. It
used to be refused whenever A's victim freed more GPUs than B's minimum (P's usage would dip below its guarantee),
so B waited for good with a reason that did not say why."""
from __future__ import annotations

import pytest

from scheduler.core.testing import World, check_result


def _world(guarantee: int) -> World:
    return (World().nodes(count=1, gpus=8)
            .queue(name="P", quota={"H100": 8}, guarantee={"H100": guarantee})
            .queue(name="A", parent="P", quota={"H100": 4})
            .queue(name="B", parent="P", quota={"H100": 4}))


def _cycle(w: World):
    snapshot = w.snapshot()
    result = w.cycle()
    check_result(snapshot, result)
    return result


@pytest.mark.parametrize("guarantee", [0, 8])
def test_a_gang_larger_than_the_beneficiary_is_reclaimed_by_its_sibling(guarantee):
    w = _world(guarantee)
    w.running(name="a", queue="A", nodes=["n1"], gpus_per_task=8)  # A: 8 of its quota of 4
    w.job(name="b", queue="B", tasks=1, gpus_per_task=4, submit=100.0)
    r = _cycle(w)
    assert [(e.job_id, e.rule, e.beneficiary) for e in r.evictions] == [("a", "reclaim", "b")]
    assert r.pending["b"].code == "nominated"


@pytest.mark.parametrize("guarantee", [0, 8])
def test_an_elastic_beneficiary_whose_minimum_is_below_the_victim_reclaims(guarantee):
    w = _world(guarantee)
    w.running(name="a1", queue="A", nodes=["n1"], gpus_per_task=4, started=0.0)
    w.running(name="a2", queue="A", nodes=["n1"], gpus_per_task=4, started=5.0)
    w.job(name="b", queue="B", tasks=4, gpus_per_task=1, min_available=1, submit=100.0)
    r = _cycle(w)
    assert [(e.job_id, e.beneficiary) for e in r.evictions] == [("a2", "b")]  # the most recent one


def test_the_move_settles():
    """Afterwards B runs 4, A's 8-GPU gang waits: A is not entitled to 8, so it reclaims nothing back."""
    w = _world(8)
    w.running(name="b", queue="B", nodes=["n1"], gpus_per_task=4)
    w.job(name="a", queue="A", tasks=1, gpus_per_task=8, submit=0.0)
    r = _cycle(w)
    assert r.evictions == [] and r.bindings == []


@pytest.mark.parametrize("guarantee, evicted", [(0, ["a"]), (8, [])])
def test_another_queue_still_cannot_reclaim_below_the_parents_guarantee(guarantee, evicted):
    """The guarantee still protects P from outside: O (quota 8, nothing running) takes back A's borrowed gang when
    P has no guarantee, never while that would take P below its guarantee, though A is above its own quota."""
    w = _world(guarantee).queue(name="O", quota={"H100": 8})
    w.running(name="a", queue="A", nodes=["n1"], gpus_per_task=8)
    w.job(name="x", queue="O", tasks=1, gpus_per_task=8, submit=100.0)
    r = _cycle(w)
    assert [e.job_id for e in r.evictions] == evicted
