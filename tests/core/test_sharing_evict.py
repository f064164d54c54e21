"""Preemption and reclaim with GPU shares (issue 14): jobs holding fractions or MIG instances are victims; an
eviction frees exactly what it held (a fraction its share of a GPU, whole again only when no share is left; a
MIG task its instances); the beneficiary's shares are held for it and it starts on them once they are free."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core import CycleConfig, NodeInfo, QueueInfo, QuotaInfo, Snapshot, TaskPlacement, run_cycle

from test_sharing import H200_MEM, bound, job, mixed_node, snap

T4_MEM = 16_000


def shared(name="s", gpus=1, mode="shared") -> NodeInfo:
    return NodeInfo(name=name, flavor="T4", gpus=gpus, gpu_modes=(mode,) * gpus, gpu_memory_mib=T4_MEM)


def frac(jid, milli, *, node="s", gpu=0, priority=0, queue="q", start=0.0, preemptible=True, tasks=1):
    """A running job of `tasks` fractions of `milli` on one GPU."""
    placement = tuple(TaskPlacement("worker", i, node, (gpu,), gpu_milli=milli, gpu_memory_mib=milli * T4_MEM // 1000)
                      for i in range(tasks))
    return replace(job(jid, milli=milli, tasks=tasks, queue=queue, state="running", placement=placement),
                   priority=priority, start_time=start, preemptible=preemptible)


def want(jid, milli=0, *, priority=5, queue="q", **kw):
    return replace(job(jid, milli=milli, queue=queue, submit=10.0, **kw), priority=priority)


def test_a_fraction_frees_its_share_only_and_the_fewest_victims_go():
    # GPU 0 holds lo1 (0.5, started first) and lo2 (0.5): a 0.5 job needs one of them out, the most recent
    r = run_cycle(snap([shared()], [frac("lo1", 500, start=1), frac("lo2", 500, start=2), want("hi", 500)]))
    assert [e.job_id for e in r.evictions] == ["lo2"] and r.pending["hi"].code == "nominated"
    (n,) = r.nominations
    assert n.job_id == "hi" and n.tasks[0].gpu_milli == 500 and n.tasks[0].gpus == (0,)
    # a 0.8 job needs both: the GPU is whole again only when every share on it is gone
    r = run_cycle(snap([shared()], [frac("lo1", 500, start=1), frac("lo2", 500, start=2), want("hi", 800)]))
    assert sorted(e.job_id for e in r.evictions) == ["lo1", "lo2"]


def test_preempt_needs_lower_priority_in_the_same_queue_and_a_preemptible_victim():
    r = run_cycle(snap([shared()], [frac("lo", 600, priority=5), want("hi", 600, priority=5)]))
    assert not r.evictions and r.pending["hi"].code == "no_share"
    r = run_cycle(snap([shared()], [frac("lo", 600, preemptible=False), want("hi", 600)]))
    assert not r.evictions
    r = run_cycle(snap([shared()], [frac("lo", 600), want("hi", 600)]), CycleConfig(preemption=False))
    assert not r.evictions


def test_a_mig_task_frees_its_instance():
    node = mixed_node()
    mig1 = [m.uuid for m in node.mig if m.profile == "3g.71gb"]
    running = [replace(job(f"m{i}", mig="3g.71gb", state="running",
                           placement=(TaskPlacement("worker", 0, node.name, (2,), mig=(u,)),)), start_time=float(i))
               for i, u in enumerate(mig1)]
    r = run_cycle(snap([node], [*running, want("hi", mig="3g.71gb")]))
    assert [e.job_id for e in r.evictions] == ["m1"]  # the most recently started of the two
    assert r.nominations[0].tasks[0].mig == (mig1[1],)


def test_whole_gpu_job_on_an_auto_gpu_is_a_victim_for_fractions():
    node = shared(mode="auto")
    whole = replace(job("w", gpus=1, state="running", placement=(TaskPlacement("worker", 0, "s", (0,)),)), start_time=0.0)
    node = replace(node, used=frozenset({0}))
    r = run_cycle(snap([node], [whole, want("hi", 300)]))
    assert [e.job_id for e in r.evictions] == ["w"] and r.nominations[0].tasks[0].gpus == (0,)


def two_queues(nodes, jobs, a=(1, 2), b=(1, 2)):
    queues = (QueueInfo("a", quotas={"T4": QuotaInfo(0, *a)}), QueueInfo("b", quotas={"T4": QuotaInfo(0, *b)}))
    return Snapshot(nodes=tuple(nodes), queues=queues, jobs=tuple(jobs))


def test_reclaim_takes_back_borrowed_fractions_only():
    nodes = [shared("s1"), shared("s2")]
    # b runs 4 x 0.5 = 2 GPU-equivalents on a quota of 1: borrowing; a (quota 1, nothing running) wants 0.5
    borrowed = [frac(f"b{i}", 500, node=f"s{1 + i // 2}", queue="b", start=float(i)) for i in range(4)]
    r = run_cycle(two_queues(nodes, [*borrowed, want("a1", 500, queue="a", priority=0)]))
    assert [(e.job_id, e.rule) for e in r.evictions] == [("b3", "reclaim")]
    # b within its quota (2 of 2): nothing to reclaim
    r = run_cycle(two_queues(nodes, [*borrowed, want("a1", 500, queue="a", priority=0)], b=(2, 2)))
    assert not r.evictions and r.pending["a1"].code == "no_share"


def test_beneficiary_waits_on_its_held_share_then_starts_there():
    lo, hi = frac("lo", 600), want("hi", 600)
    r = run_cycle(snap([shared()], [lo, hi]))
    held = r.nominations[0].tasks
    # next cycle: the victim is releasing (preempting), the holder keeps its hold, nothing is withdrawn
    releasing = replace(lo, state="preempting", evicted_for="hi")
    holder = replace(hi, reserved=held)
    r = run_cycle(snap([shared()], [releasing, holder, want("other", 400, priority=9)]))
    assert "hi" not in bound(r) and r.pending["hi"].code == "nominated" and not r.withdrawals
    assert [n.tasks for n in r.nominations if n.job_id == "hi"] == [held]
    assert "other" not in bound(r)  # 0.4 + the 0.6 held + 0.6 releasing: the held share is nobody else's
    # the victim is gone: the holder starts on exactly its held share
    r = run_cycle(snap([shared()], [holder]))
    assert bound(r)["hi"].tasks == held and not r.nominations


def test_eviction_withdrawn_when_its_beneficiary_is_gone():
    releasing = replace(frac("lo", 600), state="preempting", evicted_for="gone")
    r = run_cycle(snap([shared()], [releasing]))
    assert [w.job_id for w in r.withdrawals] == ["lo"]


def test_hold_dropped_when_no_victim_releases_for_it():
    other = frac("other", 600)  # not evicted for hi: hi's held share is taken by someone else
    hi = replace(want("hi", 600), reserved=(TaskPlacement("worker", 0, "s", (0,), gpu_milli=600, gpu_memory_mib=9600),))
    r = run_cycle(snap([shared("s"), shared("t")], [other, hi]))
    assert bound(r)["hi"].tasks[0].node == "t"  # placed as any job


def test_quota_stays_kept_when_evicting_inside_a_queue():
    # limit 1 GPU-equivalent: lo 0.6 runs; hi 0.6 fits only once lo's charge is gone (preempt frees quota)
    quotas = {"T4": QuotaInfo(0, 1, 1)}
    r = run_cycle(snap([shared("s1"), shared("s2")], [frac("lo", 600, node="s1"), want("hi", 600)], quotas))
    assert [e.job_id for e in r.evictions] == ["lo"]
    assert r.decisions[0]["usage_before"]["q"]["T4"] == 0.6 and r.decisions[0]["usage_after"]["q"]["T4"] == 0.6


def test_a_whole_gpu_victim_keeps_its_gpu_until_released():
    """A whole-GPU job on an auto GPU evicted for a fraction holds that GPU whole through its grace period: no share
    is bound there, neither another job's in the same cycle nor the beneficiary's own in the next one (both used to
    be: the replay's safety net caught the GPU bound twice); the beneficiary starts there once the victim is gone."""
    node = replace(shared(mode="auto"), used=frozenset({0}))
    whole = replace(job("w", gpus=1, state="running", placement=(TaskPlacement("worker", 0, "s", (0,)),)),
                    start_time=0.0)
    hi, other = want("hi", 500), want("other", 500, priority=0)
    r = run_cycle(snap([node], [whole, hi, other]))
    assert [e.job_id for e in r.evictions] == ["w"] and [n.job_id for n in r.nominations] == ["hi"]
    assert not r.bindings  # "other" does not take the rest of the victim's GPU while it is still held
    held = r.nominations[0].tasks
    # next cycle: the victim is releasing (preempting, still on the GPU whole), the holder holds its share
    releasing = replace(whole, state="preempting", evicted_for="hi")
    r = run_cycle(snap([node], [releasing, replace(hi, reserved=held), other]))
    assert not r.bindings and [n.job_id for n in r.nominations] == ["hi"] and r.pending["hi"].code == "nominated"
    # the victim is gone: the holder starts on its held share (and the other fraction fits beside it)
    r = run_cycle(snap([replace(node, used=frozenset())], [replace(hi, reserved=held), other]))
    assert bound(r)["hi"].tasks == held and "other" in bound(r)
