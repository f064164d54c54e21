"""A non-preemptible job may not borrow, whether it takes whole GPUs or GPU shares (session 21, helper F).

It could never be reclaimed, so it runs only within the entitlement of every level of its queue's chain
(plugins.quota.borrow_refusal): the whole-GPU allocator (actions/allocate.Admission) and the GPU-sharing pass
(sharing._over_quota: the walk's placement, the pass after the engine, a hold's binding and the eviction search)
apply that one rule. Before, a sharing job skipped it: a non-preemptible fraction borrowed and could never be given
back."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core import CycleConfig, QueueInfo, QuotaInfo, Snapshot, TaskPlacement, run_cycle
from scheduler.core.testing import World, check_result

from test_sharing import job
from test_sharing_evict import frac, shared


def _one_queue(nodes, jobs, quota=1, limit=4) -> Snapshot:
    return Snapshot(nodes=tuple(nodes), queues=(QueueInfo("a", quotas={"T4": QuotaInfo(0, quota, limit)}),),
                    jobs=tuple(jobs))


def _want(jid, milli, *, preemptible, priority=0):
    return replace(job(jid, milli=milli, queue="a", submit=10.0), priority=priority, preemptible=preemptible)


RULE = ("non-preemptible jobs run only within quota: queue a uses 1 of its quota of 1 T4 GPU-equivalents (its "
        "entitlement, docs/quotas.md), job needs 0.5")


def test_a_non_preemptible_fraction_does_not_borrow_free_shares():
    # queue a (quota 1, limit 4) uses its whole entitlement: 2 x 0.5 on GPU 0; GPU 1 is free (all of one
    # priority: nobody may be preempted)
    running = [frac(f"r{i}", 500, node="s", gpu=0, queue="a", start=float(i)) for i in range(2)]
    nodes = [shared("s", gpus=2)]
    r = run_cycle(_one_queue(nodes, [*running, _want("np", 500, preemptible=False)]))
    assert "np" not in {b.job_id for b in r.bindings}
    assert (r.pending["np"].code, r.pending["np"].message) == ("quota", RULE)
    # a preemptible one borrows the free share (it may be reclaimed); the limit still holds for both
    r = run_cycle(_one_queue(nodes, [*running, _want("p", 500, preemptible=True)]))
    assert "p" in {b.job_id for b in r.bindings}
    # within the entitlement the non-preemptible one starts
    r = run_cycle(_one_queue(nodes, [running[0], _want("np", 500, preemptible=False)]))
    assert "np" in {b.job_id for b in r.bindings}


def test_a_non_preemptible_fraction_evicts_nobody_to_borrow():
    # a borrows: 0.5 + 0.5 on GPU 0 and a full share of GPU 1 (2 GPU-equivalents, quota 1); the node is full. A
    # higher-priority 0.5 job could preempt lo (0.5): a preemptible one does; a non-preemptible one would then
    # use 2 of an entitlement of 1, so its search finds no victim set and evicts nobody
    running = [frac("lo", 500, node="s", gpu=0, queue="a", start=2.0),
               replace(frac("mid", 500, node="s", gpu=0, queue="a", start=1.0), priority=9),
               replace(frac("full", 1000, node="s", gpu=1, queue="a", start=0.0), priority=9)]
    nodes = [shared("s", gpus=2)]
    r = run_cycle(_one_queue(nodes, [*running, _want("hi", 500, preemptible=True, priority=5)]))
    assert [e.job_id for e in r.evictions] == ["lo"]
    r = run_cycle(_one_queue(nodes, [*running, _want("hi", 500, preemptible=False, priority=5)]))
    assert not r.evictions and not r.nominations
    assert r.pending["hi"].code in ("no_share", "quota")


def test_a_non_preemptible_fraction_routed_past_the_walk_does_not_borrow():
    # held shares whose victims are gone: bound at once (serve_hold) only within the entitlement
    held = (TaskPlacement("worker", 0, "s", (1,), gpu_milli=500, gpu_memory_mib=8_000),)
    running = [frac(f"r{i}", 500, node="s", gpu=0, queue="a", start=float(i)) for i in range(2)]
    holder = replace(_want("np", 500, preemptible=False), reserved=held)
    r = run_cycle(_one_queue([shared("s", gpus=2)], [*running, holder]))
    assert "np" not in {b.job_id for b in r.bindings}
    ok = replace(_want("np", 500, preemptible=False), reserved=held)
    r = run_cycle(_one_queue([shared("s", gpus=2)], [running[0], ok]))
    assert "np" in {b.job_id for b in r.bindings}


def test_the_whole_gpu_path_and_the_sharing_pass_give_the_same_rule():
    w = World().nodes(count=1, gpus=8).queue(name="a", quota={"H100": 2}).queue(name="o", quota={"H100": 6})
    w.running(name="run", queue="a", nodes=["n1"], gpus_per_task=2)
    w.job(name="np", queue="a", tasks=1, gpus_per_task=1, preemptible=False)
    snapshot = w.snapshot()
    r = w.cycle()
    check_result(snapshot, r)
    assert (r.pending["np"].code, r.pending["np"].message) == (
        "queue_limit", "non-preemptible jobs run only within quota: queue a uses 2 of its quota of 2 H100 GPUs (its "
                       "entitlement, docs/quotas.md), job needs 1")
    # the sharing pass words the same rule the same way (one function), in GPU-equivalents
    running = [frac(f"r{i}", 500, node="s", gpu=0, queue="a", start=float(i)) for i in range(2)]
    shared_reason = run_cycle(_one_queue([shared("s", gpus=2)], [*running, _want("np", 500, preemptible=False)])
                              ).pending["np"]
    assert shared_reason.message.split(" uses ")[0] == r.pending["np"].message.split(" uses ")[0]


def test_preemption_off_changes_nothing_for_the_rule():
    running = [frac(f"r{i}", 500, node="s", gpu=0, queue="a", start=float(i)) for i in range(2)]
    r = run_cycle(_one_queue([shared("s", gpus=2)], [*running, _want("np", 500, preemptible=False)]),
                  CycleConfig(preemption=False, reclaim=False))
    assert r.pending["np"].code == "quota"


def test_a_non_preemptible_fraction_above_its_queues_entitlement_never_fits():
    # quota 1 GPU-equivalent: a non-preemptible gang of 3 x 0.5 can never start there (terminal, as a whole-GPU
    # job above its entitlement), while a preemptible one may borrow and starts on the free GPUs
    gang = replace(job("np", milli=500, tasks=3, queue="a"), preemptible=False)
    r = run_cycle(_one_queue([shared("s", gpus=2)], [gang]))
    reason = r.pending["np"]
    assert reason.code == "never_fits_queue_quota" and reason.terminal
    assert reason.message == ("can never start: needs 1.5 T4 GPU-equivalents; non-preemptible jobs run only within "
                              "quota (they may not borrow) and queue a is entitled to 1 (its quota plus what its "
                              "parents leave unassigned, docs/quotas.md); submit it preemptible or raise the quota")
    r = run_cycle(_one_queue([shared("s", gpus=2)], [replace(gang, preemptible=True)]))
    assert "np" in {b.job_id for b in r.bindings}
