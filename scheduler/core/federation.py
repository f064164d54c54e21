"""Federation dispatch policy: filter and score member clusters as the cycle filters and scores nodes, and
place each job on ONE of them (issue #22, DESIGN section 15). Pure: no Django, no I/O.

Inputs
------
- `ClusterView`: what the manager last synced from one member (`summarize(snapshot)` builds it on the
  worker from the snapshot the cycle reads): per flavor the total and free GPUs, the most GPUs on one node,
  the most GPUs in one domain of each tier (capacity, cluster empty) and the most free GPUs in one domain of
  each tier (now); per queue and flavor guarantee / quota / limit / used GPUs; the backlog (pending jobs,
  pending GPUs); labels (e.g. {"region": "eu", "data-site": "lyon"}); cost per GPU-hour; health.
- `JobRequest`: the job as the manager holds it: queue, total GPUs, the largest task (GPUs per task),
  allowed flavors, highest tier a gang may span, allowed clusters (`clusters`), required labels
  (`selector`), preferred data site (`data_site`).
- optional per-cluster estimated start (seconds from now) from the member's what-if
  (POST /api/v1/forecast/ with a hypothetical `submit`, scheduler/forecast/whatif.py).

Filter (`reject_reason`) -- a cluster is out when any holds, with the reason given:
  not healthy; not in `clusters`; a `selector` label missing or different; no allowed flavor; for every
  allowed flavor: fewer GPUs in total than the job asks, a task larger than any node, the gang larger than
  every domain of its tier (`highest_tier`, when the cluster is empty); no queue of that name there; the
  queue's `limit` for the flavor below the job's GPUs (the worker would never admit it).

Score (`score`, lower is better, in seconds of expected wait; each part is returned for the job page):
  wait      the member's forecast start when given, else 0 when the job fits the free GPUs now (and a
            domain of its tier has enough free GPUs), else backlog_wait = (pending GPUs + the job's GPUs -
            free GPUs) / total GPUs x `Weights.mean_runtime_s` (Little's law with one mean run time);
  quota     0 when the queue's usage plus the job stays within its guarantee, `Weights.over_guarantee_s`
            within its quota, `Weights.borrowed_s` beyond (a borrowed start is the first to be reclaimed);
  data      `Weights.data_site_miss_s` when the job names a data site and the cluster's `data-site` label
            differs;
  cost      cost per GPU-hour x GPUs x `Weights.seconds_per_currency` (what one currency unit of the job's
            hourly cost is worth in waiting).
  The best flavor of a cluster is its score; ties break on the cluster name (a stable, repeatable choice).

`choose(job, clusters, estimates)` -> `Decision` (the chosen cluster and flavor or None, every candidate's
score parts, every rejected cluster's reason). `should_withdraw` says when a dispatched job that has not
started should be withdrawn and placed again. The baselines the benchmark compares against
(first-to-admit copies, round robin, least loaded) are here too, so the replay uses the same filter.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

__all__ = ["FlavorState", "QueueShare", "ClusterView", "JobRequest", "Weights", "Candidate", "Decision",
           "reject_reason", "capacity_reason", "never_fits", "never_fits_message", "score", "choose", "should_withdraw", "summarize", "quota_class",
           "first_to_admit", "round_robin", "least_loaded", "view_from_summary"]


@dataclass(frozen=True, slots=True)
class FlavorState:
    """One GPU flavor of a cluster. GPUs; `domain_gpus` / `largest_free`: tier -> GPUs in the largest
    domain of that tier (all of it / free now)."""

    total: int
    free: int
    node_gpus: int = 0
    domain_gpus: Mapping[int, int] = field(default_factory=dict)
    largest_free: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueShare:
    """A queue's quota for one flavor on one cluster, and the GPUs its jobs hold there now."""

    guarantee: int = 0
    quota: int = 0
    limit: int | None = None
    used: int = 0


@dataclass(frozen=True, slots=True)
class ClusterView:
    name: str
    flavors: Mapping[str, FlavorState] = field(default_factory=dict)
    queues: Mapping[str, Mapping[str, QueueShare]] = field(default_factory=dict)  # queue -> flavor -> share
    pending_jobs: int = 0
    pending_gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    cost_per_gpu_hour: float = 0.0
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class JobRequest:
    id: object
    queue: str
    gpus: int
    task_gpus: int
    flavors: tuple[str, ...] = ()
    highest_tier: int | None = None
    clusters: tuple[str, ...] = ()
    selector: Mapping[str, str] = field(default_factory=dict)
    data_site: str = ""


@dataclass(frozen=True, slots=True)
class Weights:
    """Score weights, all in seconds of wait (see the module docstring)."""

    over_guarantee_s: float = 600.0
    borrowed_s: float = 3600.0
    data_site_miss_s: float = 3600.0
    seconds_per_currency: float = 60.0
    mean_runtime_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class Candidate:
    cluster: str
    flavor: str
    total: float
    wait: float
    quota: float
    data: float
    cost: float
    quota_class: str  # guarantee | quota | borrowed
    estimated: bool  # wait from the member's forecast (True) or the backlog rule (False)

    def as_dict(self) -> dict:
        return {"cluster": self.cluster, "flavor": self.flavor, "score": round(self.total, 1),
                "wait_s": round(self.wait, 1), "quota_s": self.quota, "data_s": self.data,
                "cost_s": round(self.cost, 1), "quota_class": self.quota_class, "forecast": self.estimated}


@dataclass(frozen=True, slots=True)
class Decision:
    cluster: str | None
    flavor: str | None
    candidates: tuple[Candidate, ...] = ()  # best first
    rejected: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"cluster": self.cluster, "flavor": self.flavor,
                "candidates": [c.as_dict() for c in self.candidates], "rejected": dict(self.rejected)}


def _tier_capacity(caps: Mapping[int, int], tier: int | None) -> int | None:
    """GPUs in the largest domain of tier <= `tier` (None: no tier bound -> None, i.e. unbounded)."""
    if tier is None or not caps:
        return None
    fits = [gpus for t, gpus in caps.items() if int(t) <= tier]
    return max(fits) if fits else 0


def _flavors(job: JobRequest, cluster: ClusterView) -> list[str]:
    return sorted(f for f in cluster.flavors if not job.flavors or f in job.flavors)


def _flavor_reason(job: JobRequest, cluster: ClusterView, flavor: str, *, queues: bool = True) -> str | None:
    """Why `flavor` of `cluster` can never hold `job` (None: it can). queues=False: capacity only (total
    GPUs, node size, tier domain), not the queue's limit there."""
    fs = cluster.flavors[flavor]
    if fs.total < job.gpus:
        return f"{flavor}: needs {job.gpus} GPUs, the cluster has {fs.total}"
    if fs.node_gpus and job.task_gpus > fs.node_gpus:
        return f"{flavor}: a task of {job.task_gpus} GPUs fits no node (at most {fs.node_gpus})"
    cap = _tier_capacity(fs.domain_gpus, job.highest_tier)
    if cap is not None and job.gpus > cap:
        return f"{flavor}: {job.gpus} GPUs fit no tier-{job.highest_tier} domain (largest {cap})"
    share = cluster.queues.get(job.queue, {}).get(flavor) if queues else None
    if share is not None and share.limit is not None and job.gpus > share.limit:
        return f"{flavor}: queue {job.queue}'s limit is {share.limit} GPUs"
    return None


def reject_reason(job: JobRequest, cluster: ClusterView) -> str | None:
    """Why `cluster` can never run `job` (None: it can). See the module docstring for the rules."""
    if not cluster.healthy:
        return "not healthy"
    if job.clusters and cluster.name not in job.clusters:
        return "not in the job's clusters"
    for key, value in sorted(job.selector.items()):
        if cluster.labels.get(key) != value:
            return f"label {key}={value} required (cluster has {cluster.labels.get(key)!r})"
    if job.queue not in cluster.queues:
        return f"no queue {job.queue}"
    flavors = _flavors(job, cluster)
    if not flavors:
        return "none of the job's flavors " + ", ".join(job.flavors)
    reasons = [_flavor_reason(job, cluster, f) for f in flavors]
    return None if any(r is None for r in reasons) else "; ".join(reasons)


def capacity_reason(job: JobRequest, cluster: ClusterView) -> str | None:
    """Why `cluster` could never hold `job` whatever its load, health or queues (None: it could): not in
    the job's `clusters`, a `selector` label missing or different, none of the job's flavors, or for every
    allowed flavor too few GPUs in total, a task larger than any node, the gang larger than every domain of
    its tier. The submission-time rule (a job no member could ever hold is refused, as a single cluster
    refuses a job that can never fit); `reject_reason` adds the changing parts (health, queue, limit)."""
    if job.clusters and cluster.name not in job.clusters:
        return "not in the job's clusters"
    for key, value in sorted(job.selector.items()):
        if cluster.labels.get(key) != value:
            return f"label {key}={value} required (cluster has {cluster.labels.get(key)!r})"
    flavors = _flavors(job, cluster)
    if not flavors:
        return ("none of the job's flavors " + ", ".join(job.flavors)) if job.flavors else "no GPU flavors"
    reasons = [_flavor_reason(job, cluster, f, queues=False) for f in flavors]
    return None if any(r is None for r in reasons) else "; ".join(reasons)


def never_fits(job: JobRequest, clusters: Sequence[ClusterView]) -> dict[str, str] | None:
    """{cluster: reason} when no cluster in `clusters` could ever hold `job` (`capacity_reason` of each);
    None when one could, or when `clusters` is empty (nothing known yet refuses nothing)."""
    if not clusters:
        return None
    reasons = {}
    for c in clusters:
        why = capacity_reason(job, c)
        if why is None:
            return None
        reasons[c.name] = why
    return reasons


def never_fits_message(job: JobRequest, reasons: Mapping[str, str]) -> str:
    """One line for a job no member can ever hold: the GPUs it needs, then each member's reason."""
    return (f"needs {job.gpus} GPUs (largest task {job.task_gpus}) and no member cluster can ever hold it: "
            + "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items())))


def quota_class(share: QueueShare | None, gpus: int) -> str:
    """'guarantee' when used + gpus <= guarantee, 'quota' when <= quota, else 'borrowed'."""
    if share is None:
        return "borrowed"
    after = share.used + gpus
    if after <= share.guarantee:
        return "guarantee"
    return "quota" if after <= share.quota else "borrowed"


def _backlog_wait(job: JobRequest, cluster: ClusterView, flavor: str, weights: Weights) -> float:
    fs = cluster.flavors[flavor]
    free_domain = _tier_capacity(fs.largest_free, job.highest_tier)
    if fs.free >= job.gpus and (free_domain is None or free_domain >= job.gpus) and cluster.pending_gpus == 0:
        return 0.0
    short = cluster.pending_gpus + job.gpus - fs.free
    return max(0.0, short) / max(fs.total, 1) * weights.mean_runtime_s


def score(job: JobRequest, cluster: ClusterView, flavor: str, *, estimate: float | None = None,
          weights: Weights = Weights()) -> Candidate:
    """The score parts of `job` on `cluster` with `flavor` (lower is better; seconds). `estimate`: the
    member's forecast start in seconds from now (None: the backlog rule)."""
    wait = max(0.0, float(estimate)) if estimate is not None else _backlog_wait(job, cluster, flavor, weights)
    qc = quota_class(cluster.queues.get(job.queue, {}).get(flavor), job.gpus)
    quota = {"guarantee": 0.0, "quota": weights.over_guarantee_s, "borrowed": weights.borrowed_s}[qc]
    data = weights.data_site_miss_s if job.data_site and cluster.labels.get("data-site") != job.data_site else 0.0
    cost = cluster.cost_per_gpu_hour * job.gpus * weights.seconds_per_currency
    return Candidate(cluster.name, flavor, wait + quota + data + cost, wait, quota, data, cost, qc,
                     estimate is not None)


def choose(job: JobRequest, clusters: Sequence[ClusterView], estimates: Mapping[str, float | None] | None = None,
           *, weights: Weights = Weights()) -> Decision:
    """Filter, score and pick one cluster for `job`. `estimates`: cluster name -> forecast start (s from
    now) or None. Returns a Decision; `cluster` is None when every cluster is rejected."""
    estimates = estimates or {}
    rejected: dict[str, str] = {}
    best: list[Candidate] = []
    for c in clusters:
        why = reject_reason(job, c)
        if why is not None:
            rejected[c.name] = why
            continue
        options = [score(job, c, f, estimate=estimates.get(c.name), weights=weights)
                   for f in _flavors(job, c) if _flavor_reason(job, c, f) is None]
        best.append(min(options, key=lambda s: (s.total, s.flavor)))
    best.sort(key=lambda s: (s.total, s.cluster))
    top = best[0] if best else None
    return Decision(top.cluster if top else None, top.flavor if top else None, tuple(best), rejected)


def should_withdraw(waited_s: float, timeout_s: float, current: Candidate | None, best: Candidate | None,
                    *, margin_s: float = 300.0) -> bool:
    """Withdraw a dispatched, not yet started job when it has waited `timeout_s` (DISPATCH_TIMEOUT) and
    another cluster's score beats its current cluster's by more than `margin_s` (hysteresis: no ping-pong
    between equal clusters). `current` None: its cluster no longer qualifies -> withdraw after the timeout
    if any other does."""
    if waited_s < timeout_s or best is None:
        return False
    if current is None:
        return True
    return best.cluster != current.cluster and best.total + margin_s < current.total


# --- baselines (benchmarks/federation.py) ---------------------------------------------------------------

def first_to_admit(job: JobRequest, clusters: Sequence[ClusterView]) -> list[str]:
    """MultiKueue AllAtOnce / Slurm federation: a copy on EVERY cluster that passes the filter; the first
    to start it wins and the others are withdrawn. Returns the clusters that get a copy."""
    return [c.name for c in clusters if reject_reason(job, c) is None]


def round_robin(job: JobRequest, clusters: Sequence[ClusterView], turn: int) -> str | None:
    """The `turn`-th eligible cluster (modulo their number), or None."""
    ok = [c.name for c in clusters if reject_reason(job, c) is None]
    return ok[turn % len(ok)] if ok else None


def least_loaded(job: JobRequest, clusters: Sequence[ClusterView]) -> str | None:
    """The eligible cluster with the largest free fraction of its GPUs (any allowed flavor), or None."""
    best = None
    for c in clusters:
        if reject_reason(job, c) is not None:
            continue
        frac = max((c.flavors[f].free - c.pending_gpus) / max(c.flavors[f].total, 1) for f in _flavors(job, c))
        if best is None or frac > best[0]:
            best = (frac, c.name)
    return best[1] if best else None


# --- the worker's side: its snapshot -> the summary the manager syncs -----------------------------------

def summarize(snapshot) -> dict:
    """A member's summary from its scheduler.core.snapshot.Snapshot, as plain JSON-able data:
    {"flavors": {flavor: {"total", "free", "node_gpus", "domain_gpus": {tier: GPUs}, "largest_free":
    {tier: GPUs}}}, "queues": {queue: {flavor: {"guarantee", "quota", "limit", "used"}}}, "pending_jobs",
    "pending_gpus", "running_jobs"}. Free GPUs: of ready nodes, healthy and unused. Units: GPUs."""
    parent = {d.name: d.parent for d in snapshot.domains}
    tier = {d.name: d.tier for d in snapshot.domains}
    flavor_of = {}
    total: dict[str, int] = defaultdict(int)
    free: dict[str, int] = defaultdict(int)
    node_max: dict[str, int] = defaultdict(int)
    dom_total: dict[tuple[str, str], int] = defaultdict(int)
    dom_free: dict[tuple[str, str], int] = defaultdict(int)
    for n in snapshot.nodes:
        flavor_of[n.name] = n.flavor
        usable = n.gpus - len(n.unhealthy)
        idle = (n.gpus - len(n.used | n.unhealthy)) if n.schedulable else 0  # a hot spare is not free to place on
        total[n.flavor] += usable
        free[n.flavor] += idle
        node_max[n.flavor] = max(node_max[n.flavor], usable)
        d, seen = n.domain, set()
        while d is not None and d not in seen:
            seen.add(d)
            dom_total[(n.flavor, d)] += usable
            dom_free[(n.flavor, d)] += idle
            d = parent.get(d)
    flavors = {}
    for f in sorted(total):
        caps: dict[int, int] = {}
        frees: dict[int, int] = {}
        for (fl, d), gpus in dom_total.items():
            if fl == f and d in tier:
                caps[tier[d]] = max(caps.get(tier[d], 0), gpus)
                frees[tier[d]] = max(frees.get(tier[d], 0), dom_free[(fl, d)])
        flavors[f] = {"total": total[f], "free": free[f], "node_gpus": node_max[f],
                      "domain_gpus": {str(t): g for t, g in sorted(caps.items())},
                      "largest_free": {str(t): g for t, g in sorted(frees.items())}}
    used: dict[tuple[str, str], int] = defaultdict(int)
    pending_jobs = pending_gpus = running = 0
    for j in snapshot.jobs:
        if j.state == "pending":
            pending_jobs += 1
            pending_gpus += sum(r.tasks * r.gpus_per_task for r in j.roles)
            continue
        running += j.part_of is None
        for t in j.placement:
            used[(j.queue, flavor_of.get(t.node, ""))] += len(t.gpus)
    queues = {}
    for q in snapshot.queues:
        queues[q.name] = {f: {"guarantee": qi.guarantee, "quota": qi.quota, "limit": qi.limit,
                              "used": used.get((q.name, f), 0)} for f, qi in q.quotas.items()}
        for (qn, f), g in used.items():
            if qn == q.name and f not in queues[q.name]:
                queues[q.name][f] = {"guarantee": 0, "quota": 0, "limit": None, "used": g}
    return {"flavors": flavors, "queues": queues, "pending_jobs": pending_jobs, "pending_gpus": pending_gpus,
            "running_jobs": running}


def view_from_summary(name: str, summary: Mapping, *, labels: Mapping[str, str] | None = None,
                      cost_per_gpu_hour: float = 0.0, healthy: bool = True) -> ClusterView:
    """A ClusterView from `summarize`'s dict (as it came over the wire: tier keys are strings)."""
    flavors = {f: FlavorState(total=int(v.get("total", 0)), free=int(v.get("free", 0)),
                              node_gpus=int(v.get("node_gpus", 0)),
                              domain_gpus={int(t): int(g) for t, g in (v.get("domain_gpus") or {}).items()},
                              largest_free={int(t): int(g) for t, g in (v.get("largest_free") or {}).items()})
               for f, v in (summary.get("flavors") or {}).items()}
    queues = {q: {f: QueueShare(int(s.get("guarantee", 0)), int(s.get("quota", 0)),
                                None if s.get("limit") is None else int(s["limit"]), int(s.get("used", 0)))
                  for f, s in (shares or {}).items()}
              for q, shares in (summary.get("queues") or {}).items()}
    return ClusterView(name=name, flavors=flavors, queues=queues, pending_jobs=int(summary.get("pending_jobs", 0)),
                       pending_gpus=int(summary.get("pending_gpus", 0)), labels=dict(labels or {}),
                       cost_per_gpu_hour=float(cost_per_gpu_hour), healthy=healthy)
