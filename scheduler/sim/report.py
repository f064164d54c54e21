"""What a replay measured, and the small pure helpers that compute it.

Times are seconds of simulated time unless a name says otherwise (`*_days`, `wall_seconds`,
`engine_*_ms`); rates are fractions in [0, 1]; usage is in GPU-hours.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from clusterspec.spec import ClusterSpec

# Job size buckets by requested GPUs (GPU-equivalents): (label, lowest, highest) inclusive. "<1" holds jobs
# that ask for a share of one GPU (a fraction or a GPU-memory share: the platform's wait times; the replay's
# jobs ask for whole GPUs).
SIZE_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("0", 0, 0), ("<1", 0.001, 0.999), ("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), ("9-32", 9, 32),
    ("33-128", 33, 128), (">128", 129, math.inf),
)


def size_bucket(gpus: int | float) -> str:
    """The label of the size bucket holding a job of `gpus` GPU-equivalents ("0" = CPU-only jobs, "<1" =
    a share of one GPU); a fractional size above 1 counts as the whole GPUs it spans (1.5 -> "2-4").
    Raises ValueError for a negative size."""
    if 0 < gpus < 1:
        return "<1"
    gpus = math.ceil(gpus)
    for label, lo, hi in SIZE_BUCKETS:
        if lo <= gpus <= hi:
            return label
    raise ValueError(gpus)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def queueing_summary(waits: list[float]) -> dict:
    """count, mean and p50/p90/p99 of queueing times in seconds."""
    waits = sorted(waits)
    return {
        "count": len(waits),
        "mean": (sum(waits) / len(waits)) if waits else None,
        "p50": percentile(waits, 50), "p90": percentile(waits, 90), "p99": percentile(waits, 99),
    }


def tier_capacity(cluster: ClusterSpec) -> dict[int, int]:
    """For each tier, the most GPUs any one domain of that tier holds (nodes roll up the tree)."""
    parent = {d.name: d.parent for d in cluster.domains}
    tier = {d.name: d.tier for d in cluster.domains}
    total = dict.fromkeys(parent, 0)
    for node in cluster.nodes:
        name, hops = node.domain, 0
        while name is not None and name in total and hops <= len(parent):
            total[name] += node.gpus
            name, hops = parent[name], hops + 1
    best: dict[int, int] = {}
    for name, gpus in total.items():
        best[tier[name]] = max(best.get(tier[name], 0), gpus)
    return dict(sorted(best.items()))


def lowest_feasible_tier(capacity: dict[int, int], gpus: int) -> int | None:
    """The lowest tier with a domain of at least `gpus` GPUs; None if no domain is large enough."""
    for t, cap in capacity.items():  # ascending tiers
        if cap >= gpus:
            return t
    return None


@dataclass
class ReplayReport:
    """Figures of one replay. `queueing` and `queueing_by_size` are queueing_summary dicts (seconds) of
    each job's first start; `team_gpu_hours` is GPU-hours used per team (queue name when the queue has
    no team) over the span. jobs_started counts jobs (first starts); `restarts` counts later starts of
    requeued (evicted or failed) jobs; `evictions_by_rule` counts evictions by the engine's rule and
    `evictions_per_started_job` = all evictions / jobs_started. `config` is the engine's CycleConfig as
    a dict. `fairness`: scheduler.sim.fairness.FairnessMeter.summary() (Jain's index of usage / fair
    share over time, per-team figures). Goodput = useful / allocated GPU-hours (replay module
    docstring); `waste_gpu_hours` splits the rest: work lost to failures since the last checkpoint,
    GPUs held by failed jobs until detection, checkpoint stalls, eviction grace periods, other (partial
    holds of non-gang engines). `failures`: replay.failure_summary(), empty without failure injection."""

    cluster: str
    trace: str
    cluster_gpus: int
    cluster_nodes: int
    cycle_interval: float
    until: float | None
    jobs_in_trace: int
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_finished: int = 0
    jobs_rejected: int = 0
    jobs_pending_at_end: int = 0
    jobs_running_at_end: int = 0
    jobs_requeued: int = 0
    restarts: int = 0
    evictions_by_rule: dict = field(default_factory=dict)
    evictions_withdrawn: int = 0  # evictions taken back in their grace period (their beneficiary left); not counted above
    rejected_by_code: dict = field(default_factory=dict)
    rejected_by_team: dict = field(default_factory=dict)  # team (queue name when none) -> jobs rejected
    pending_by_code: dict = field(default_factory=dict)
    mean_allocation_rate: float = 0.0
    mean_fragmentation_rate: float | None = None
    queueing: dict = field(default_factory=dict)
    queueing_by_size: dict = field(default_factory=dict)
    multi_node_jobs: int = 0
    multi_node_aligned: int = 0
    multi_node_beyond_largest_domain: int = 0
    topology_alignment: float | None = None
    tier_capacity: dict = field(default_factory=dict)
    team_gpu_hours: dict = field(default_factory=dict)
    sim_start: float = 0.0
    sim_end: float = 0.0
    span_seconds: float = 0.0
    span_days: float = 0.0
    wall_seconds: float = 0.0
    cycles: int = 0
    engine_mean_ms: float = 0.0
    engine_max_ms: float = 0.0
    snapshot_mean_ms: float = 0.0
    apply_mean_ms: float = 0.0
    config: dict = field(default_factory=dict)
    evictions: int = 0
    evictions_per_started_job: float | None = None
    fairness: dict = field(default_factory=dict)
    allocated_gpu_hours: float = 0.0
    useful_gpu_hours: float = 0.0
    goodput: float | None = None
    waste_gpu_hours: dict = field(default_factory=dict)
    checkpoint: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)
    # hot spares (replay(spares=n)): per_rack, racks, nodes, gpus, restarts_on_spare, restarts_without_spare
    spares: dict = field(default_factory=dict)
    # the GPU-hour ledger (scheduler.core.gpu_hours): capacity and each bucket in GPU-hours, and the
    # effective utilization; no telemetry in the replay, so idle_allocated is 0. allocated_unclassified: the
    # allocated GPU-hours the replay credited to no attempt (e.g. a grace period cut short by a failure)
    gpu_hours: dict = field(default_factory=dict)
    rescheduling: dict = field(default_factory=dict)  # replay.Replay.rescheduling_summary()
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-serializable dict (tier keys become strings, infinities None)."""
        out = asdict(self)
        out["tier_capacity"] = {str(k): v for k, v in self.tier_capacity.items()}
        return _finite(out)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
