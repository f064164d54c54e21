"""One fair-share walk across whole-GPU and sharing jobs (issue 14): fractions count as GPU-equivalents against
their flavor's quota and in the queues' shares, and the allocate walk takes both kinds in that one order (before,
every whole-GPU job went first in a cycle, whatever its queue's share)."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core import JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement, run_cycle


def node(gpus=4) -> NodeInfo:
    return NodeInfo(name="a", flavor="T4", gpus=gpus, gpu_modes=("auto",) * gpus, gpu_memory_mib=16_000)


def frac(jid, queue="frac", submit=1.0, milli=500, **kw) -> JobInfo:
    return JobInfo(id=jid, queue=queue, roles=(RoleInfo("worker", 1, 1, 1, gpu_milli=milli),), submit_time=submit, **kw)


def whole(jid, gpus, queue="whole", submit=0.0, **kw) -> JobInfo:
    return JobInfo(id=jid, queue=queue, roles=(RoleInfo("worker", 1, gpus, 1),), submit_time=submit, **kw)


def world(nodes, jobs) -> Snapshot:
    queues = (QueueInfo("frac", quotas={"T4": QuotaInfo(0, 2, 4)}), QueueInfo("whole", quotas={"T4": QuotaInfo(0, 2, 4)}))
    return Snapshot(nodes=tuple(nodes), queues=queues, jobs=tuple(jobs))


def test_fractions_of_a_queue_below_its_share_go_before_whole_jobs_of_a_queue_above_it():
    # queue whole already runs 2 GPUs (its quota); queue frac runs nothing. 2 GPUs free; whole queue's w (2 GPUs,
    # submitted first) would borrow, frac's four 0.5 jobs stay within frac's quota of 2: they go first
    running = replace(whole("r", 2), state="running", placement=(TaskPlacement("worker", 0, "a", (0, 1)),))
    n = replace(node(), used=frozenset({0, 1}))
    r = run_cycle(world([n], [running, whole("w", 2), *(frac(f"f{i}", submit=1.0 + i) for i in range(4))]))
    bound = [b.job_id for b in r.bindings]
    assert bound == ["f0", "f1", "f2", "f3"] and "w" in r.pending
    per_gpu: dict = {}
    for b in r.bindings:
        per_gpu[b.tasks[0].gpus[0]] = per_gpu.get(b.tasks[0].gpus[0], 0) + b.tasks[0].gpu_milli
    assert per_gpu == {2: 1000, 3: 1000}
    assert r.metrics["queue_usage"]["frac"]["T4"] == 2.0  # GPU-equivalents in the walk's queue usage


def test_whole_jobs_of_a_queue_below_its_share_go_before_fractions_of_a_queue_above_it():
    # the other way round: frac runs 4 x 0.5 = 2 GPU-equivalents (its quota), whole runs nothing
    running = [replace(frac(f"r{i}", milli=500), state="running",
                       placement=(TaskPlacement("worker", 0, "a", (i // 2,), gpu_milli=500, gpu_memory_mib=8_000),))
               for i in range(4)]
    r = run_cycle(world([node()], [*running, *(frac(f"f{i}", submit=0.0) for i in range(4)), whole("w", 2, submit=1.0)]))
    assert [b.job_id for b in r.bindings][:1] == ["w"] and set(r.bindings[0].tasks[0].gpus) == {2, 3}
    assert all(r.pending[f"f{i}"].code == "no_share" for i in range(4))


def test_fractions_count_in_the_fair_share_walk_as_gpu_equivalents():
    # two queues each submitting: fractions (frac) and 1-GPU jobs (whole), 4 GPUs, equal quotas of 2: the walk
    # alternates by share, so each queue ends with 2 GPU-equivalents (not one kind first until the GPUs are gone)
    jobs = [*(frac(f"f{i}", submit=float(i)) for i in range(8)), *(whole(f"w{i}", 1, submit=float(i)) for i in range(4))]
    r = run_cycle(world([node()], jobs))
    usage = r.metrics["queue_usage"]
    assert usage["frac"]["T4"] == 2.0 and usage["whole"]["T4"] == 2
    assert sum(1 for b in r.bindings if b.job_id.startswith("f")) == 4
