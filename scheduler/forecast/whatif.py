"""What if we changed something? The forecast before and after a list of changes, nothing written.

    what_if(snapshot, changes, estimate, **forecast_kwargs) -> WhatIf

Changes (plain dicts, as the API takes them; `kind` says which):
  {"kind": "submit", "id", "queue", "tasks", "gpus_per_task", "priority"=0, "time_limit"=None,
   "topology_mode"="none", "highest_tier"=None, "flavors"=()}   a hypothetical job, submitted now
   (or "roles": [{"name", "tasks", "gpus_per_task", "min_available", "flavors"}] for several roles);
   a role may also carry cpu_milli, memory_mib and one GPU-sharing kind (gpu_milli thousandths of one GPU,
   gpu_memory_mib, or mig_profile with gpus_per_task instances), the job "preemptible" and "interruptible"
  {"kind": "set_quota", "queue", "flavor", "guarantee"?, "quota"?, "limit"?}   (fields not given stay; GPUs, 0 to
   variants.QUOTA_MAX, limit null = no cap)
  {"kind": "set_weight", "queue", "weight"}
  {"kind": "drain_nodes", "nodes": [names]}   no new work; their running jobs are stopped and requeued
  {"kind": "add_nodes", "count", "gpus", "flavor"=the first flavor by name, "domain"=None, "prefix"="whatif-node"}
  (a submit change may ask for a flavor an add_nodes change brings, wherever it stands in the list)
  {"kind": "set_priority", "job", "priority"}
  {"kind": "cancel", "job"}                   pending: gone; running: gone and its GPUs free
Raises WhatIfError(index, field, message) for a change that names an unknown queue, job, node, flavor or
domain, or a kind it does not know. Units: seconds, GPUs. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Hashable

from scheduler.core.snapshot import JobInfo, NodeInfo, QuotaInfo, RoleInfo, Snapshot

from .forecast import JobForecast, forecast_start
from .variants import quota_error

KINDS = ("submit", "set_quota", "set_weight", "drain_nodes", "add_nodes", "set_priority", "cancel")


class WhatIfError(ValueError):
    """A change that cannot be applied: `index` in the list, the `field` at fault, the rule."""

    def __init__(self, index: int, field_name: str, message: str):
        super().__init__(f"changes[{index}].{field_name}: {message}")
        self.index, self.field, self.message = index, field_name, message


@dataclass(slots=True)
class WhatIf:
    """before / after: job id -> JobForecast (hypothetical jobs only in after); queues: queue -> {"jobs": its
    jobs pending in either case, hypothetical ones included; "mean_wait_before_s" / "mean_wait_after_s": the
    mean wait of those that start within the horizon in that case (None: none does; a hypothetical job's wait
    is in the after mean); "change_s": the mean change of start over the jobs that start in both;
    "no_start_before" / "no_start_after": how many of them are pending in that case and do not start within
    the horizon; "hypothetical": how many are the changes' submissions}; evictions: [(time, victim, rule, beneficiary)] the after-run
    has and the before-run has not (drained jobs count with rule "drain"); removed: jobs the changes cancel;
    hypothetical: ids of the submitted jobs; info: cost of both runs."""

    now: float
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    queues: dict = field(default_factory=dict)
    evictions: list = field(default_factory=list)
    removed: list = field(default_factory=list)
    hypothetical: list = field(default_factory=list)
    info: dict = field(default_factory=dict)


def submit_ids(changes: list[dict]) -> dict[int, str]:
    """Change index -> the id of the hypothetical job each `submit` change adds: its own `id`, else
    "hypothetical-<index + 1>", or the next free number after it when another change's `id` already reads so
    (new-user trial 16, F1: an unnamed change was refused for the name the user gave another one)."""
    given = {ch.get("id") for ch in changes if ch.get("kind") == "submit" and ch.get("id")}
    out: dict[int, str] = {}
    for i, ch in enumerate(changes):
        if ch.get("kind") != "submit":
            continue
        jid = ch.get("id")
        if not jid:
            n = i + 1
            while f"hypothetical-{n}" in given:
                n += 1
            jid = f"hypothetical-{n}"
            given.add(jid)
        out[i] = jid
    return out


def _job(jobs: dict, i: int, change: dict) -> JobInfo:
    job = jobs.get(change.get("job"))
    if job is None:
        raise WhatIfError(i, "job", f"no pending or running job {change.get('job')!r}")
    return job


def apply_changes(snapshot: Snapshot, changes: list[dict]) -> tuple[Snapshot, list, list, list]:
    """The snapshot with `changes` applied, and (hypothetical ids, removed ids, drained job ids)."""
    nodes = {n.name: n for n in snapshot.nodes}
    queues = {q.name: q for q in snapshot.queues}
    jobs = {j.id: j for j in snapshot.jobs}
    flavors = {n.flavor for n in snapshot.nodes}
    # an add_nodes change without a flavor adds the cluster's first flavor by name (a set's order would differ
    # between processes)
    default_flavor = min(flavors, default="gpu")
    # a submit change may ask for a flavor only the what-if's add_nodes changes bring (new-user trial 14, F4: "would
    # it run on the B200 nodes we buy?"); the hypothetical job is forecast on the cluster all the changes build
    added_flavors = {str(c.get("flavor") or default_flavor) for c in changes if c.get("kind") == "add_nodes"}
    domains = {d.name for d in snapshot.domains}
    hypothetical, removed, drained = [], [], []
    # a hypothetical job is submitted now, after every job already there (it joins the back of its queue)
    submit_at = max([snapshot.now, *(j.submit_time + 1e-3 for j in snapshot.jobs)])

    def free(job: JobInfo) -> None:
        for t in job.placement:
            n = nodes[t.node]
            role = next((r for r in job.roles if r.name == t.role), None)
            nodes[t.node] = replace(n, used=n.used - set(t.gpus),
                                    cpu_used=max(0, n.cpu_used - (role.cpu_milli if role else 0)),
                                    memory_used=max(0, n.memory_used - (role.memory_mib if role else 0)))

    ids = submit_ids(changes)
    for i, ch in enumerate(changes):
        kind = ch.get("kind")
        if kind not in KINDS:
            raise WhatIfError(i, "kind", f"must be one of {', '.join(KINDS)}")
        if kind in ("set_quota", "set_weight", "submit"):
            q = queues.get(ch.get("queue"))
            if q is None:
                raise WhatIfError(i, "queue", f"no queue {ch.get('queue')!r}")
        if kind == "submit":
            jid = ids[i]
            if jid in jobs:
                raise WhatIfError(i, "id", f"{jid!r} is already a job's id")
            for f in ch.get("flavors") or ():
                if f not in flavors and f not in added_flavors:
                    raise WhatIfError(i, "flavors", f"no node has flavor {f!r}")
            specs = ch.get("roles") or [{"name": "worker", "tasks": ch["tasks"], "gpus_per_task": ch["gpus_per_task"],
                                         "min_available": ch.get("min_available"), "flavors": ch.get("flavors")}]
            roles = []
            for k, r in enumerate(specs):
                tasks, gpt = int(r["tasks"]), int(r["gpus_per_task"])
                roles.append(RoleInfo(str(r.get("name") or f"role{k}"), tasks, gpt,
                                      int(r.get("min_available") or tasks), flavors=tuple(r.get("flavors") or ()),
                                      cpu_milli=int(r.get("cpu_milli") or 0), memory_mib=int(r.get("memory_mib") or 0),
                                      gpu_milli=int(r.get("gpu_milli") or 0),
                                      gpu_memory_mib=int(r.get("gpu_memory_mib") or 0),
                                      mig_profile=str(r.get("mig_profile") or "")))
            jobs[jid] = JobInfo(id=jid, queue=q.name, roles=tuple(roles), priority=int(ch.get("priority") or 0),
                                submit_time=submit_at, time_limit=ch.get("time_limit"), name=str(jid),
                                topology_mode=ch.get("topology_mode") or "none", highest_tier=ch.get("highest_tier"),
                                preemptible=ch.get("preemptible", True) is not False,
                                interruptible=ch.get("interruptible") is True)
            hypothetical.append(jid)
        elif kind == "set_quota":
            flavor = ch.get("flavor")
            if flavor not in flavors and flavor not in added_flavors:
                raise WhatIfError(i, "flavor", f"no node has flavor {flavor!r}")
            for name in ("guarantee", "quota", "limit"):  # the quota API's rule (variants.quota_error)
                given = name in ch and not (name == "limit" and ch[name] is None)
                error = quota_error(name, ch[name]) if given else None
                if error:
                    raise WhatIfError(i, name, error)
            old = q.quotas.get(flavor, QuotaInfo())
            new = QuotaInfo(guarantee=int(ch.get("guarantee", old.guarantee)), quota=int(ch.get("quota", old.quota)),
                            limit=ch["limit"] if "limit" in ch else old.limit)
            if not new.guarantee <= new.quota or (new.limit is not None and new.quota > new.limit):
                raise WhatIfError(i, "quota", "must hold guarantee <= quota <= limit")
            queues[q.name] = replace(q, quotas={**q.quotas, flavor: new})
        elif kind == "set_weight":
            weight = float(ch.get("weight", 0))
            if not weight > 0:
                raise WhatIfError(i, "weight", "must be > 0")
            queues[q.name] = replace(q, weight=weight)
        elif kind == "drain_nodes":
            names = list(ch.get("nodes") or ())
            for name in names:
                if name not in nodes:
                    raise WhatIfError(i, "nodes", f"no node {name!r}")
            gone = set(names)
            for name in names:
                nodes[name] = replace(nodes[name], state="draining")
            for jid, job in list(jobs.items()):
                if job.state != "pending" and any(t.node in gone for t in job.placement):
                    free(job)
                    if str(jid).endswith(":releasing"):
                        del jobs[jid]
                        continue
                    jobs[jid] = replace(job, state="pending", placement=(), start_time=None, reserved=(),
                                        attempts=job.attempts + 1)
                    drained.append(jid)
        elif kind == "add_nodes":
            count, gpus = int(ch.get("count", 0)), int(ch.get("gpus", 0))
            if count < 1 or gpus < 1:
                raise WhatIfError(i, "count", "count and gpus must be >= 1")
            dom = ch.get("domain")
            if dom is not None and dom not in domains:
                raise WhatIfError(i, "domain", f"no domain {dom!r}")
            prefix = ch.get("prefix") or "whatif-node"
            for k in range(count):
                name = f"{prefix}-{i + 1}-{k + 1}"
                nodes[name] = NodeInfo(name=name, flavor=str(ch.get("flavor") or default_flavor),
                                       gpus=gpus, domain=dom)
        elif kind == "set_priority":
            job = _job(jobs, i, ch)
            jobs[job.id] = replace(job, priority=int(ch["priority"]))
        elif kind == "cancel":
            job = _job(jobs, i, ch)
            if job.state != "pending":
                free(job)
            del jobs[job.id]
            removed.append(job.id)
    changed = Snapshot(nodes=tuple(nodes.values()), domains=snapshot.domains, queues=tuple(queues.values()),
                       jobs=tuple(jobs.values()), now=snapshot.now)
    return changed, hypothetical, removed, drained


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def what_if(snapshot: Snapshot, changes: list[dict], estimate: Callable[[JobInfo, float], tuple[float, float]],
            **kwargs) -> WhatIf:
    """Forecast `snapshot` as it is and with `changes` applied (apply_changes); kwargs go to
    forecast.forecast (horizon, max_cycles, config, ...). Raises WhatIfError (see the module docstring)."""
    changed, hypothetical, removed, drained = apply_changes(snapshot, changes)
    before, info_b = forecast_start(snapshot, estimate, **kwargs)
    after, info_a = forecast_start(changed, estimate, **kwargs)
    out = WhatIf(now=snapshot.now, before=before, after=after, removed=removed, hypothetical=hypothetical,
                 info={"before": {k: info_b[k] for k in ("cycles", "cycles_p90", "wall", "wall_p90", "truncated")},
                       "after": {k: info_a[k] for k in ("cycles", "cycles_p90", "wall", "wall_p90", "truncated")}})
    queue_of: dict[Hashable, str] = {j.id: j.queue for j in changed.jobs}
    queue_of.update({j.id: j.queue for j in snapshot.jobs})
    # Per queue, every job pending in either case (hypothetical ones included) counts: a job that starts in
    # one case and not within the horizon in the other is in `jobs` and in no_start_before / no_start_after,
    # not dropped (a drain of every node read "0 jobs, no change": new-user trial 19, F6).
    stats: dict[str, dict] = {}
    for jid in set(before) | set(after):
        b: JobForecast | None = before.get(jid)
        a: JobForecast | None = after.get(jid)
        st = stats.setdefault(queue_of[jid], {"jobs": 0, "hypothetical": 0, "no_start_before": 0,
                                              "no_start_after": 0, "b": [], "a": [], "d": []})
        st["jobs"] += 1
        st["hypothetical"] += jid in hypothetical
        if b is not None:
            if b.start is None:
                st["no_start_before"] += 1
            else:
                st["b"].append(b.start - snapshot.now)
        if a is not None:
            if a.start is None:
                st["no_start_after"] += 1
            else:
                st["a"].append(a.start - snapshot.now)
        if a is not None and b is not None and a.start is not None and b.start is not None:
            st["d"].append(a.start - b.start)
    # Every leaf queue of the cluster (jobs are submitted to leaves: an admin trying a quota sees each team,
    # also those with nothing waiting), and any queue with pending jobs.
    parents = {q.parent for q in snapshot.queues if q.parent}
    leaves = {q.name for q in snapshot.queues if q.name not in parents}
    for q in sorted(leaves | {j.queue for j in snapshot.jobs if j.state == "pending"} | set(stats)):
        st = stats.get(q) or {"jobs": 0, "hypothetical": 0, "no_start_before": 0, "no_start_after": 0,
                              "b": [], "a": [], "d": []}
        out.queues[q] = {"jobs": st["jobs"], "mean_wait_before_s": _mean(st["b"]),
                         "mean_wait_after_s": _mean(st["a"]), "change_s": _mean(st["d"]),
                         "no_start_before": st["no_start_before"], "no_start_after": st["no_start_after"],
                         "hypothetical": st["hypothetical"]}
    seen = {(victim, rule) for _, victim, rule, _ in info_b["evictions"]}
    out.evictions = [(snapshot.now, j, "drain", None) for j in drained]
    out.evictions += [e for e in info_a["evictions"] if (e[1], e[2]) not in seen]
    return out
