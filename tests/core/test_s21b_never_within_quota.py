"""A job its queue's quota rules can never admit is refused for good, naming the queue and the rule (trial 21, F5).

A non-preemptible job may not borrow (it could never be reclaimed): it runs only within the entitlement of every
level of its queue's chain. When its minimum exceeds that (a quota of 0 with nothing unassigned above it, a quota
below its need) no wait starts it: a terminal never_fits_queue_quota, not a "queue_limit" wait that suggests it may
start. A job that may borrow is not refused for good by its quota: a preemptible job in a quota-0 queue, a quota-0
child of a parent with unassigned quota (entitled to that part). A limit of 0 stays never_fits_queue_limit."""
from __future__ import annotations

import pytest

from scheduler.core.testing import World, check_result, role


def _cycle(w: World):
    snapshot = w.snapshot()
    result = w.cycle()
    check_result(snapshot, result)
    return result


def _world(**queue) -> World:
    return World().nodes(count=2, gpus=8).queue(name="z", **queue).queue(name="o", quota={"H100": 8})


@pytest.mark.parametrize("queue, need, entitled", [
    ({"quota": {"H100": 0}}, 1, 0),  # quota 0, nothing to borrow from above
    ({}, 1, 0),  # no quota row at all (a leaf with no quota is entitled to nothing)
    ({"quota": {"H100": 2}}, 4, 2),  # a quota below the job's minimum
])
def test_non_preemptible_job_above_its_queues_entitlement_never_fits(queue, need, entitled):
    w = _world(**queue)
    w.job(name="np", queue="z", tasks=1, gpus_per_task=need, preemptible=False)
    reason = _cycle(w).pending["np"]
    assert reason.code == "never_fits_queue_quota" and reason.terminal
    assert reason.message == (f"can never start: needs {need} H100 GPUs; non-preemptible jobs run only within quota "
                              f"(they may not borrow) and queue z is entitled to {entitled} (its quota plus what its "
                              f"parents leave unassigned, docs/quotas.md); submit it preemptible or raise the quota")


def test_the_binding_level_may_be_a_parent():
    """p (quota 2) over c (quota 4, more than its parent's: the engine takes what it is given): c's 4-GPU
    non-preemptible job is within c's entitlement but above p's, which is named; a 2-GPU one runs."""
    w = World().nodes(count=1, gpus=8).queue(name="p", quota={"H100": 2}).queue(name="c", parent="p",
                                                                                 quota={"H100": 4})
    w.job(name="big", queue="c", tasks=1, gpus_per_task=4, preemptible=False)
    w.job(name="fits", queue="c", tasks=1, gpus_per_task=2, preemptible=False, submit=1.0)
    r = _cycle(w)
    assert [b.job_id for b in r.bindings] == ["fits"]
    assert r.pending["big"].code == "never_fits_queue_quota" and r.pending["big"].terminal
    assert "queue p is entitled to 2 " in r.pending["big"].message


def test_jobs_that_may_borrow_or_are_entitled_are_not_refused_for_good():
    # a preemptible job of a quota-0 queue borrows idle GPUs
    w = _world(quota={"H100": 0})
    w.job(name="p", queue="z", tasks=1, gpus_per_task=1, preemptible=True)
    assert [b.job_id for b in _cycle(w).bindings] == ["p"]
    # a quota-0 child of a parent with unassigned quota: entitled to that part, so a non-preemptible job runs
    w = World().nodes(count=1, gpus=8).queue(name="P", quota={"H100": 8}).queue(name="c", parent="P",
                                                                                 quota={"H100": 0})
    w.job(name="np", queue="c", tasks=1, gpus_per_task=4, preemptible=False)
    assert [b.job_id for b in _cycle(w).bindings] == ["np"]
    # within its entitlement but the GPUs are taken: a wait, not a terminal reason
    w = _world(quota={"H100": 8})
    w.running(name="hog", queue="o", nodes=["n1", "n2"], gpus_per_task=8)
    w.job(name="np", queue="z", tasks=1, gpus_per_task=4, preemptible=False)
    reason = _cycle(w).pending["np"]
    assert not reason.terminal


def test_a_job_of_several_flavors_is_refused_for_good_only_when_every_flavor_refuses():
    w = (World().nodes(count=1, gpus=8).nodes(count=1, gpus=8, flavor="A10", prefix="a")
         .queue(name="z", quota={"H100": 0, "A10": 4}))
    w.job(name="np", queue="z", tasks=1, gpus_per_task=2, preemptible=False)  # any flavor: A10 is within
    assert [b.job_id for b in _cycle(w).bindings] == ["np"]
    w = (World().nodes(count=1, gpus=8).nodes(count=1, gpus=8, flavor="A10", prefix="a")
         .queue(name="z", quota={"H100": 0, "A10": 1}))
    w.job(name="np", queue="z", tasks=1, gpus_per_task=2, preemptible=False)
    reason = _cycle(w).pending["np"]
    assert reason.code == "never_fits_queue_quota" and reason.terminal


def test_a_limit_of_zero_stays_the_limit_rule():
    w = _world(quota={"H100": 0}, limit={"H100": 0})
    w.job(name="np", queue="z", tasks=1, gpus_per_task=1, preemptible=False)
    w.job(name="p", queue="z", tasks=1, gpus_per_task=1, submit=1.0)
    r = _cycle(w)
    for j in ("np", "p"):
        assert r.pending[j].code == "never_fits_queue_limit" and r.pending[j].terminal
        assert r.pending[j].message == "needs 1 H100 GPUs, above queue z limit of 0"


def test_a_non_preemptible_job_of_two_flavors_is_held_to_its_entitlement():
    """A heterogeneous job (roles on different flavors, Admission._place_mixed) applies the same rule: it used to
    raise AttributeError (QueueTree has no quota_room) and stop the cycle."""
    def world(a10: int) -> World:
        w = (World().nodes(count=1, gpus=8).nodes(count=1, gpus=8, flavor="A10", prefix="a")
             .queue(name="z", quota={"H100": 4, "A10": a10}))
        return w.job(name="mx", queue="z", preemptible=False,
                     roles=[role(name="t", tasks=1, gpus_per_task=2, flavors=["H100"]),
                            role(name="r", tasks=1, gpus_per_task=2, flavors=["A10"])])

    assert [b.job_id for b in _cycle(world(4)).bindings] == ["mx"]
    reason = _cycle(world(0)).pending["mx"]
    assert reason.code == "never_fits_queue_quota" and reason.terminal and "queue z is entitled to 0 " in reason.message
