"""Pending reasons of sharing jobs (scheduler/core/sharing.py): a gang of fractions above its queue's limit is
terminal like a whole-GPU job, and a gang of which only some shares fit says how many it needs and how many fit."""
from __future__ import annotations

from scheduler.core import JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement, run_cycle

H200_MEM = 143_771


def shared(name: str = "s", gpus: int = 2, flavor: str = "H200", mode: str = "shared") -> NodeInfo:
    return NodeInfo(name=name, flavor=flavor, gpus=gpus, gpu_modes=(mode,) * gpus, gpu_memory_mib=H200_MEM)


def job(jid, *, tasks=1, gpus=1, milli=0, mem=0, min_available=None, flavors=(), submit=0.0) -> JobInfo:
    role = RoleInfo("w", tasks, gpus, tasks if min_available is None else min_available, gpu_milli=milli,
                    gpu_memory_mib=mem, flavors=flavors)
    return JobInfo(id=jid, queue="demo", roles=(role,), submit_time=submit)


def cycle(nodes, jobs, limit=1):
    queues = (QueueInfo("demo", quotas={"H200": QuotaInfo(0, limit, limit)}),)
    return run_cycle(Snapshot(nodes=tuple(nodes), queues=queues, jobs=tuple(jobs)))


def test_fraction_gang_above_the_queue_limit_is_terminal_like_a_whole_gpu_job():
    r = cycle([shared(), NodeInfo(name="x", flavor="H200", gpus=2)], [job("frac", tasks=3, milli=500),
                                                                       job("whole", tasks=2, gpus=1, submit=1)])
    frac, whole = r.pending["frac"], r.pending["whole"]
    assert whole.code == "never_fits_queue_limit" and whole.terminal
    assert frac.code == "never_fits_queue_limit" and frac.terminal
    assert frac.message == "needs 1.5 H200 GPU-equivalents, above queue demo limit of 1"


def test_fraction_gang_within_the_limit_or_elastic_is_not_terminal():
    r = cycle([shared()], [job("two", tasks=2, milli=500)])
    assert {b.job_id for b in r.bindings} == {"two"}
    # 3 x 0.5 with min_available 2: its minimum (1 GPU-equivalent) fits the limit, so it is not terminal
    r = cycle([shared()], [job("elastic", tasks=3, milli=500, min_available=2)])
    assert "elastic" in {b.job_id for b in r.bindings} or not r.pending["elastic"].terminal
    # memory requests: 3 x 20000 MiB of a 143771 MiB GPU = 0.42 GPU-equivalents, within the limit
    r = cycle([shared()], [job("mem", tasks=3, mem=20_000)])
    assert [b.job_id for b in r.bindings] == ["mem"]
    # a queue limit on another flavor only: not this job's limit
    r = cycle([shared(flavor="A100")], [job("a", tasks=3, milli=500)])
    assert [b.job_id for b in r.bindings] == ["a"]


def test_gang_of_shares_says_how_many_it_needs_and_how_many_fit():
    running = JobInfo(id="r", queue="other", roles=(RoleInfo("w", 1, 1, 1, gpu_milli=500),), state="running",
                      placement=(TaskPlacement("w", 0, "s", (0,), gpu_milli=500, gpu_memory_mib=H200_MEM // 2),))
    r = cycle([shared(gpus=1)], [running, job("g", tasks=3, milli=500)], limit=8)
    assert r.pending["g"].code == "no_share" and not r.pending["g"].terminal
    assert r.pending["g"].message == "role w: needs 3 GPU shares of 0.5 GPU at once, only 1 fit now"
    r = cycle([shared(gpus=1)], [running, job("one", milli=600)], limit=8)
    assert r.pending["one"].message == "role w: no node has a GPU share of 0.6 GPU"
