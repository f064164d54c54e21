"""Submission-time "can this job EVER fit this cluster?" (read only), asking the engine's own rule.

The engine marks such jobs terminal at cycle time (`scheduler.core.plugins.feasibility.Capacity`); the
API refuses them up front with a 400 instead, so a script learns at once. Nothing is re-implemented here:
a capacity-only Snapshot (every node, any state, and the domain tree; no jobs, no queues) is built in two
flat queries and the same `Capacity.never_fits` the allocator uses is asked, per allowed GPU flavor, with
the same tier cap the allocator would use. The job is refused only when every flavor never fits.

An empty cluster (no nodes registered yet) refuses nothing: it is being set up, not too small.
"""
from __future__ import annotations

from scheduler.core.plugins.feasibility import Capacity
from scheduler.core.plugins.predicates import allowed_flavors
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, RoleInfo, Snapshot
from scheduler.core.state import ClusterState
from scheduler.core.domain_tree import TopologyError, build_tree

from .models import Domain, Node


def _capacity() -> tuple[Capacity, int] | None:
    nodes = tuple(NodeInfo(name=name, flavor=flavor, gpus=gpus, domain=domain)
                  for name, flavor, gpus, domain in Node.objects.values_list("name", "flavor", "gpu_count", "domain__name"))
    if not nodes:
        return None
    domains = tuple(DomainInfo(n, t, p) for n, t, p in Domain.objects.values_list("name", "tier", "parent__name"))
    snapshot = Snapshot(nodes=nodes, domains=domains)
    try:
        tree = build_tree(snapshot)
    except TopologyError:
        return None  # a broken tree is the cycle's problem to report, not a reason to refuse a job
    return Capacity(ClusterState(snapshot)), tree.top_tier


def never_fits(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None) -> str | None:
    """Why the job can never fit this cluster (the engine's message), or None when it may fit.
    `roles` are normalised role dicts (job_rules.check_roles): tasks, gpus_per_task, min_available, flavor."""
    built = _capacity()
    if built is None:
        return None
    capacity, top = built
    infos = tuple(RoleInfo(r["name"], r["tasks"], r["gpus_per_task"], r["min_available"], r.get("cpu_milli", 0),
                           r.get("memory_mib", 0), tuple(f for f in (r.get("flavor") or "").split("|") if f))
                  for r in roles)
    job = JobInfo(id="submission", queue="", roles=infos, topology_mode=topology_mode, highest_tier=highest_tier)
    flavors = allowed_flavors(infos, capacity.state.flavors)  # the allocator's own rule
    if not flavors:
        wanted = sorted({f for r in infos for f in r.flavors})
        return f"no node of flavor {'|'.join(wanted)} in this cluster"
    cap = min(highest_tier, top) if topology_mode == "hard" and highest_tier is not None else top
    reasons = [capacity.never_fits(job, flavor, cap) for flavor in sorted(flavors)]
    if all(r is not None for r in reasons):
        return reasons[0].message
    return None
