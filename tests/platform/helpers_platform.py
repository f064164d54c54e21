"""Test helpers: `small_spec()` (2 NVLink domains under one leaf, 4 x 8 H100, queues root/alpha/beta) and
`first_fit`, a deliberately trivial engine used only by the platform/integration tests to exercise store.py
without depending on the real scheduler.core.cycle: first-fit, whole gang or nothing, no topology."""
from __future__ import annotations

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec
from scheduler.core.snapshot import Binding, CycleResult, PendingReason, TaskPlacement


def first_fit(snapshot, config=None, *, cache=None) -> CycleResult:
    free = {n.name: [g for g in range(n.gpus) if g not in n.used and g not in n.unhealthy]
            for n in snapshot.nodes if n.state == "ready"}
    result = CycleResult(metrics={"schedulable_gpus": sum(len(v) for v in free.values())})
    for job in sorted((j for j in snapshot.jobs if j.state == "pending"), key=lambda j: (-j.priority, j.submit_time)):
        trial = {k: list(v) for k, v in free.items()}
        placements = []
        for role in job.roles:
            for i in range(role.tasks):
                node = next((n for n, g in trial.items() if len(g) >= role.gpus_per_task), None)
                if node is None:
                    break
                gpus, trial[node] = trial[node][:role.gpus_per_task], trial[node][role.gpus_per_task:]
                placements.append(TaskPlacement(role.name, i, node, tuple(gpus)))
        if len(placements) == sum(r.tasks for r in job.roles):
            free = trial
            result.bindings.append(Binding(job.id, tuple(placements), "", 0))
        else:
            result.pending[job.id] = PendingReason("no_fit", "not enough free GPUs")
    result.metrics["free_gpus"] = sum(len(v) for v in free.values())
    return result


def small_spec(prefix: str = "n") -> ClusterSpec:
    numa = (0, 0, 0, 0, 1, 1, 1, 1)
    return ClusterSpec(
        name="small",
        domains=(DomainSpec("leaf-a", 2), DomainSpec("nvl-a1", 1, "leaf-a"), DomainSpec("nvl-a2", 1, "leaf-a")),
        nodes=tuple(NodeSpec(f"{prefix}{i}", "H100", 8, domain="nvl-a1" if i < 2 else "nvl-a2",
                             cpu_milli=64000, memory_mib=512000, gpu_numa=numa) for i in range(4)),
        queues=(QueueSpec("root", quotas={"H100": (0, 32, 32)}),
                QueueSpec("alpha", parent="root", team="alpha", quotas={"H100": (4, 16, 32)}),
                QueueSpec("beta", parent="root", team="beta", weight=2, quotas={"H100": (0, 16, None)})),
    )
