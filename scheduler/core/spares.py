"""Hot spare nodes (DESIGN section 14, docs/diagnosis.md "Spare nodes"): the policy, once, for the platform
and the replay. Pure: no Django, no I/O.

A spare (NodeInfo.spare) runs nothing but jobs that may be stopped at once (JobInfo.interruptible), and a
gang that lost a node restarts on a spare at once, stopping those occupants.

- Placement (`spare_pass`, called by cycle.run_cycle after everything else): spares are not `schedulable`,
  so allocate, backfill, preemption, reclaim, growth, rescheduling and the metrics never see them. Then the
  pending interruptible jobs that did not start (and hold nothing) are placed, by the same allocate
  (gang, topology, binpack, queue limits; no backfill, eviction or growth), on a view of the cluster where
  the spares are the only ready nodes. A job of fractions or MIG instances is never placed on a spare.
  Non-interruptible jobs are never placed there.
- Recovery (`plan_restart`, called by the failure path of the platform and of the replay): each failed
  node of the gang's placement is replaced by a ready spare of the same flavor whose GPUs include the
  indices the gang used there, free or held only by interruptible jobs; a spare in the failed node's rack
  first, then an idle one before an occupied one, then by name. The occupants holding those GPUs are stopped
  at once (grace 0, requeued whole: `SpareRestart.stop`) and the gang is bound there in the same step.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .snapshot import Binding, CycleConfig, CycleResult, JobId, JobInfo, NodeInfo, Snapshot, TaskPlacement

__all__ = ["SpareRestart", "has_spares", "plan_restart", "spare_pass"]

SPARE_RULE = "spare"  # Binding.rule of a gang restarted on a spare
ON_SPARE_RULE = "on_spare"  # Binding.rule of an interruptible job placed on a spare by the cycle


def has_spares(snapshot: Snapshot) -> bool:
    """Whether any node of the snapshot is a ready hot spare (the cycle then runs spare_pass)."""
    return any(n.spare and n.state == "ready" for n in snapshot.nodes)


def spare_pass(snapshot: Snapshot, config: CycleConfig, result: CycleResult, cache=None) -> list[Binding]:
    """Place pending interruptible jobs on the ready spares (module docstring) after the cycle's own
    decisions in `result`, appending their bindings (rule "on_spare") to result.bindings and removing them
    from result.pending. Returns the new bindings. cache: the cycle's EngineCache (its ClusterStatic is
    reused: the spare view has the snapshot's shape), or None. Raises TopologyError on an inconsistent
    domain tree."""
    from .actions.allocate import allocate
    from .actions.backfill import Reservations
    from .cache import ClusterStatic
    from .plugins.quota import QueueTree
    from .session import Session
    from .state import ClusterState

    started = {b.job_id: b for b in result.bindings}
    held = {n.job_id for n in result.nominations}
    candidates = [replace(j, reserved=()) for j in snapshot.jobs
                  if j.state == "pending" and j.interruptible and j.id not in started and j.id not in held
                  and not getattr(result.pending.get(j.id), "terminal", False)
                  and not any(r.shares for r in j.roles)]
    if not candidates:
        return []
    grown: dict = {}
    for g in result.growths:
        grown.setdefault(g.job_id, []).extend(g.tasks)
    jobs: list[JobInfo] = []
    for j in snapshot.jobs:
        if j.state == "pending":
            b = started.get(j.id)
            if b is not None:  # started this cycle: its queue is charged for it
                jobs.append(replace(j, state="running", placement=b.tasks, start_time=snapshot.now, reserved=()))
        else:
            jobs.append(replace(j, reserved=(), placement=(*j.placement, *grown.get(j.id, ()))))
    jobs.extend(candidates)
    nodes = tuple(replace(n, spare=False) if n.spare else replace(n, state="cordoned") if n.state == "ready" else n
                  for n in snapshot.nodes)
    view = replace(snapshot, nodes=nodes, jobs=tuple(jobs))
    cfg = replace(config, backfill=False, preemption=False, reclaim=False, reschedule=False,
                  reschedule_advice=False, fgd_whole=False)
    static = cache.static_for(snapshot) if cache is not None else ClusterStatic(view)  # the same shape
    state = ClusterState(view, static)
    session = Session(state, QueueTree(view, static), cfg, view)
    allocation = allocate(session, candidates, Reservations(session, candidates), shares=result.fair_share)
    out = [replace(b, rule=ON_SPARE_RULE) for b in allocation.bindings]
    for b in out:
        result.pending.pop(b.job_id, None)
    result.bindings.extend(out)
    result.metrics["spare_bindings"] = len(out)
    return out


@dataclass(frozen=True, slots=True)
class SpareRestart:
    """A failed gang's restart on spares. swap: failed node -> the spare that replaces it; tasks: the
    gang's new placement (its old one, each failed node replaced); stop: ids of the interruptible jobs on
    those spares to stop at once (no grace) and requeue whole, sorted by str(id)."""

    job_id: JobId
    tasks: tuple[TaskPlacement, ...]
    swap: Mapping[str, str]
    stop: tuple[JobId, ...] = ()

    @property
    def binding(self) -> Binding:
        """The gang's binding (rule "spare"; domain "" and tier 0: the cluster)."""
        return Binding(job_id=self.job_id, tasks=self.tasks, domain="", tier=0, rule=SPARE_RULE)


def plan_restart(job_id: JobId, placement: Iterable[TaskPlacement], failed: Iterable[str],
                 nodes: Iterable[NodeInfo], running: Iterable[JobInfo],
                 rack_of: Mapping[str, str | None]) -> SpareRestart | None:
    """Where the gang `job_id`, released from `placement` because `failed` nodes failed, restarts at once
    (module docstring), or None when it cannot (no failed node in its placement, a failed node without a
    fitting spare, a node it keeps not ready, a spare, or with a GPU it used taken): it then waits for a cycle.

    nodes: NodeInfo of at least the spares and the nodes of `placement` (their `used`, `unhealthy`, state),
    without the gang's own GPUs; running: the running or preempting jobs (those on spares are the
    occupants); rack_of: node name -> its rack (the failed node's rack's spares come first)."""
    placement = tuple(placement)
    by_name = {n.name: n for n in nodes}
    down = sorted({t.node for t in placement} & set(failed))
    if not down:
        return None
    need: dict[str, set[int]] = {}
    for t in placement:
        need.setdefault(t.node, set()).update(t.gpus)
    for name in {t.node for t in placement} - set(down):
        n = by_name.get(name)
        if n is None or not n.schedulable or need[name] & (n.used | n.unhealthy):
            return None
    holders: dict[tuple[str, int], JobInfo] = {}
    for j in running:
        for t in j.placement:
            for g in t.gpus:
                holders[(t.node, g)] = j
    spares = sorted((n for n in by_name.values() if n.spare and n.state == "ready"), key=lambda n: n.name)
    swap: dict[str, str] = {}
    stop: set = set()
    for name in down:
        lost = by_name.get(name)
        flavor, rack = (lost.flavor if lost else None), rack_of.get(name)
        fits = []
        for s in spares:
            if s.name in swap.values() or (flavor is not None and s.flavor != flavor):
                continue
            want = need[name]
            if any(g >= s.gpus or g in s.unhealthy for g in want):
                continue
            occupants = set()
            for g in want & s.used:
                j = holders.get((s.name, g))
                if j is None or not j.interruptible:  # held by something that may not be stopped at once
                    break
                occupants.add(j)
            else:
                fits.append((rack_of.get(s.name) != rack, bool(occupants), s.name, occupants))
        if not fits:
            return None
        _, _, chosen, occupants = min(fits, key=lambda f: f[:3])
        swap[name] = chosen
        stop.update(j.id for j in occupants)
    tasks = tuple(replace(t, node=swap.get(t.node, t.node)) for t in placement)
    return SpareRestart(job_id=job_id, tasks=tasks, swap=swap, stop=tuple(sorted(stop, key=str)))
