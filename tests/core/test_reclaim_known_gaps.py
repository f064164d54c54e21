"""Known, open gaps of reclaim found by the entitlement property tests (tests/core/test_entitlement_properties.py,
Hypothesis, session 8), reduced to fixed worlds and kept as strict expected failures: each test states the rule
the engine should keep and fails today; when a fix makes it pass, strict xfail turns that into a failure, so the
marker goes with the fix.

Two reclaims in one cycle, the second inside the victim's parent: t2 (A10 guarantee 2, quota 2) has two children
that borrow from it. A reclaim for t0's 1-GPU job evicts t2c0's 4-GPU gang run3 (t2 8 -> 4, above its guarantee),
and three of the freed GPUs stay idle; then t2c1's 1-GPU job, within its entitlement, reclaims t2c0's other gang
run2 instead of taking one of those three GPUs, so t2 ends at 1 GPU, below its guarantee of 2. The ledger checks a
victim's guarantee only on the levels the beneficiary does not share (t2c0, not t2), and the second victim search
does not count the GPUs the first eviction frees as room for a hold."""
from __future__ import annotations

import pytest

from scheduler.core import run_cycle
from scheduler.core.testing import World


def _world() -> World:
    w = World()
    w.nodes(count=1, gpus=4, flavor="H100", prefix="H100-")
    w.nodes(count=2, gpus=8, flavor="A10", prefix="A10-")
    w.queue(name="t0", quota={"H100": 0, "A10": 9}, guarantee={"H100": 0, "A10": 0})
    w.queue(name="t1", quota={"H100": 0, "A10": 0}, guarantee={"H100": 0, "A10": 0})
    w.queue(name="t2", quota={"H100": 0, "A10": 2}, guarantee={"H100": 0, "A10": 2})
    w.queue(name="t2c0", parent="t2", quota={"H100": 0, "A10": 0})
    w.queue(name="t2c1", parent="t2", quota={"H100": 0, "A10": 0})
    for i, (queue, node) in enumerate([("t0", "A10-1"), ("t0", "A10-1"), ("t2c0", "A10-2"), ("t2c0", "A10-2")]):
        w.running(name=f"run{i}", queue=queue, nodes=[node], gpus_per_task=4, started=float(i))
    w.job(name="j0", queue="t0", tasks=1, gpus_per_task=1, flavors=["A10"], submit=0.0)
    w.job(name="j1", queue="t2c1", tasks=1, gpus_per_task=1, flavors=["A10"], submit=1.0)
    return w


def test_the_world_reclaims_for_both_jobs_today():
    """What the engine does now (the premise of the expected failure below, so that it fails for its reason)."""
    result = run_cycle(_world().snapshot())
    assert sorted((e.job_id, e.beneficiary) for e in result.evictions) == [("run2", "j1"), ("run3", "j0")]


@pytest.mark.xfail(strict=True, reason="open: a second reclaim in the cycle takes the victim's parent below its "
                                       "guarantee instead of using GPUs the first eviction freed (module docstring)")
def test_a_second_reclaim_uses_the_gpus_the_first_one_freed():
    result = run_cycle(_world().snapshot())
    evicted = {e.job_id for e in result.evictions}
    assert evicted == {"run3"}, f"evicted {sorted(evicted)}: one 4-GPU gang frees room for both 1-GPU jobs"
