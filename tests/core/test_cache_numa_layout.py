"""The engine cache's cluster shape includes each node's NUMA layout (review 11, S5): a layout reported in one
cycle and gone in the next (or changed) gives a new ClusterStatic, so Capacity's largest NUMA node, its never-fits
answers and the kept lane table follow the layout: the cached engine decides as a fresh one."""
from __future__ import annotations

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, RoleInfo, Snapshot

DOMAINS = (DomainInfo("r0", 1),)


def _snapshot(numa: tuple, jobs: tuple = ()) -> Snapshot:
    nodes = tuple(NodeInfo(name=f"n{i}", flavor="H", gpus=8, domain="r0", gpu_numa=numa) for i in range(2))
    return Snapshot(nodes=nodes, domains=DOMAINS, queues=(QueueInfo("q"),), jobs=jobs, now=0.0)


def _outcome(result, job_id: str):
    reason = result.pending.get(job_id)
    return ([b.job_id for b in result.bindings], None if reason is None else (reason.code, reason.terminal))


def test_a_changed_numa_layout_is_a_new_shape():
    job = JobInfo(id="j", queue="q", roles=(RoleInfo("w", 1, 8, 1),), numa="single")  # 8 GPUs on one NUMA node
    cfg = CycleConfig()
    for before, after in (((0, 0, 0, 0, 1, 1, 1, 1), ()), ((0,) * 8, (0, 0, 0, 0, 1, 1, 1, 1))):
        cache = EngineCache()
        run_cycle(_snapshot(before), cfg, cache=cache)
        now = _snapshot(after, (job,))
        kept, fresh = run_cycle(now, cfg, cache=cache), run_cycle(now, cfg, cache=EngineCache())
        assert _outcome(kept, "j") == _outcome(fresh, "j"), (before, after)
        assert cache.builds == 2
