"""A job that waits because reclaim refused it says which queue and which rule (session 21, helper F).

When the job's reclaim search ran and failed, its pending reason ends with one clause from what the search knows
(actions.reclaim.refusal_clause): a victim queue that would drop below its guarantee, a victim queue within its
entitlement, several victim queues none of which borrows, or a level of the job's own chain with no room left
below its entitlement. A job whose search did not run, or found victims, gets no clause; no decision changes."""
from __future__ import annotations

from scheduler.core.testing import World, check_result


def _cycle(w: World):
    snapshot = w.snapshot()
    result = w.cycle()
    check_result(snapshot, result)
    return result


def test_a_victim_queue_that_would_drop_below_its_guarantee_is_named_and_only_then():
    # b (quota 4, guarantee 4) borrows: its one 8-GPU gang fills the node; evicting it would take b to 0
    w = World().nodes(count=1, gpus=8).queue(name="a", quota={"H100": 4}).queue(
        name="b", quota={"H100": 4}, guarantee={"H100": 4})
    w.running(name="big", queue="b", nodes=["n1"], gpus_per_task=8)
    w.job(name="want", queue="a", tasks=1, gpus_per_task=4)
    r = _cycle(w)
    assert not r.evictions
    message = r.pending["want"].message
    assert r.pending["want"].code == "insufficient_gpus"
    assert message.endswith("; reclaim: queue b would drop below its guarantee of 4 H100 GPUs"), message
    assert message.count("; reclaim:") == 1
    # no clause when reclaim succeeds, or when it is not tried
    # b borrows (quota 0): reclaim evicts, the job is nominated with the usual reason
    w = World().nodes(count=1, gpus=8).queue(name="a", quota={"H100": 8}).queue(name="b", quota={"H100": 0})
    w.running(name="borrower", queue="b", nodes=["n1"], gpus_per_task=8)
    w.job(name="want", queue="a", tasks=1, gpus_per_task=8)
    r = _cycle(w)
    assert r.pending["want"].code == "nominated" and "; reclaim:" not in r.pending["want"].message
    # nobody borrows: no search, no clause
    w = World().nodes(count=1, gpus=8).queue(name="a", quota={"H100": 8}).queue(name="b", quota={"H100": 8})
    w.running(name="b-job", queue="b", nodes=["n1"], gpus_per_task=8)
    w.job(name="want", queue="a", tasks=1, gpus_per_task=8)
    r = _cycle(w)
    assert "; reclaim:" not in r.pending["want"].message


def _two_flavors(*others: str) -> World:
    """a (quota 8 H100) waits for an 8-GPU H100 node; each of `others` (quota 8 H100) fills one; c borrows
    A100 GPUs (quota 0): someone borrows, but no H100 GPU is borrowed."""
    w = World().nodes(count=len(others), gpus=8).nodes(names=["m1"], gpus=8, flavor="A100")
    w.queue(name="a", quota={"H100": 8}).queue(name="c", quota={"A100": 0})
    for i, q in enumerate(others):
        w.queue(name=q, quota={"H100": 8}).running(name=f"{q}-job", queue=q, nodes=[f"n{i + 1}"], gpus_per_task=8)
    w.running(name="c-job", queue="c", nodes=["m1"], gpus_per_task=8)
    w.job(name="want", queue="a", tasks=1, gpus_per_task=8, flavors=("H100",))
    return w


def test_a_victim_queue_within_its_entitlement_is_named():
    r = _cycle(_two_flavors("b"))
    assert not r.evictions
    assert r.pending["want"].message.endswith("; reclaim: queue b is within its entitlement of 8 H100 GPUs")


def test_several_victim_queues_none_borrowing():
    r = _cycle(_two_flavors("b", "d"))
    assert not r.evictions
    assert r.pending["want"].message.endswith("; reclaim: no queue borrows GPUs it could take")


def test_a_second_job_answered_by_the_walk_memo_gets_the_same_clause():
    w = _two_flavors("b")
    w.job(name="want2", queue="a", tasks=1, gpus_per_task=8, flavors=("H100",), submit=1.0)
    r = _cycle(w)
    clause = "; reclaim: queue b is within its entitlement of 8 H100 GPUs"
    assert r.pending["want"].message.endswith(clause) and r.pending["want2"].message.endswith(clause)


def test_a_level_of_the_jobs_own_chain_at_its_entitlement_is_named():
    # p (quota 8) holds a and a2 (quota 4 each); a2 uses all of p's 8 GPUs, protected by its guarantee of 4 for an
    # 8-GPU gang; b (quota 0) borrows the other node, but p is at its entitlement: a may not take from b
    w = World().nodes(count=2, gpus=8).queue(name="p", quota={"H100": 8}).queue(
        name="a", parent="p", quota={"H100": 4}).queue(name="a2", parent="p", quota={"H100": 4},
                                                       guarantee={"H100": 4}).queue(name="b", quota={"H100": 0})
    w.running(name="sib", queue="a2", nodes=["n1"], gpus_per_task=8)
    w.running(name="borrower", queue="b", nodes=["n2"], gpus_per_task=8)
    w.job(name="want", queue="a", tasks=1, gpus_per_task=4)
    r = _cycle(w)
    assert not r.evictions
    assert r.pending["want"].message.endswith("; reclaim: queue p uses 8 of its entitlement of 8 H100 GPUs")
