"""One scheduling cycle over a frozen snapshot (DESIGN section 5).

    run_cycle(snapshot, config) -> CycleResult

Phases, each timed in CycleResult.timings (seconds):
  1. open: index the domain tree, free capacity and queue usage from the snapshot;
  2. allocate: pending jobs in fair-share order, gang + topology + binpack placement (actions/allocate.py);
  3. metrics: allocation rate, largest runnable job per tier, fragmentation rate, domain completeness.
The snapshot is never mutated; the same input gives the same result.
"""
from __future__ import annotations

import time

from .actions.allocate import Allocator
from .metrics import cluster_metrics
from .plugins.quota import QueueTree
from .snapshot import CycleConfig, CycleResult, Snapshot
from .state import ClusterState
from .topology import build_tree


def run_cycle(snapshot: Snapshot, config: CycleConfig | None = None) -> CycleResult:
    """Decide which pending jobs start and where. Raises TopologyError on an inconsistent domain tree."""
    config = config or CycleConfig()
    result = CycleResult()
    t0 = time.perf_counter()
    tree = build_tree(snapshot)
    state = ClusterState(snapshot, tree)
    queues = QueueTree(snapshot)
    pending = [j for j in snapshot.jobs if j.state == "pending"]
    t1 = time.perf_counter()
    result.bindings, result.pending = Allocator(state, queues, config).run(pending)
    t2 = time.perf_counter()
    result.metrics = cluster_metrics(state)
    result.metrics["pending_jobs"] = len(result.pending)
    result.metrics["running_jobs"] = sum(1 for j in snapshot.jobs if j.state != "pending") + len(result.bindings)
    result.metrics["queue_usage"] = {q: dict(u) for q, u in queues.usage.items()}
    t3 = time.perf_counter()
    result.timings = {"open": t1 - t0, "allocate": t2 - t1, "metrics": t3 - t2, "total": t3 - t0}
    return result
