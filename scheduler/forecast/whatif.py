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

Why jobs move (new-user trial 22, F3: a submission made other teams' jobs start up to 14.7 h earlier, with 8
evictions, and nothing said why). Both runs are the same engine from the same snapshot, so every difference comes
from the changes, directly or through what follows from them; `explain` names, for each job whose start moves, the
job whose GPUs it is about, from the two runs' timelines (Forecast.runs):
  starts earlier (at time a in the after-run, on GPUs G): on nodes the changes add ("added_nodes")? else who holds G
  at a without the changes?
    "cancelled"      a job the changes cancel;
    "eviction"       a job the after-run has evicted by then (reclaim, preemption, drain) for `beneficiary`: its GPUs
                     came free (e.g. your job reclaims 4 whole nodes, runs 20 minutes, and a 32-GPU gang that
                     waited for whole nodes takes them);
    "freed_earlier"  a job that, with the changes, has already ended there (it started sooner);
    "displaced"      a job that, with the changes, starts later or elsewhere: this one takes its place;
    "reordered"      the job that starts there at that moment without the changes, whose GPUs this one takes with
                     them: the two swap, the scheduler's order between them moved (a submission adds its queue's
                     demand, which lowers every other queue's water-filled fair share and swaps queues whose usage
                     over share were close: on the Philly demo data one 1-GPU submission to a third team turned
                     0.32132 < 0.32149 into 0.32201 > 0.32196 and swapped two teams' next jobs, which moved 19 jobs
                     by up to 32 h; a quota, weight or priority change moves the order directly);
    "order"          nobody: the GPUs were free, another job went first without the changes (as "reordered");
  starts later (at b in the before-run, on G; or not within the horizon): on nodes the changes drain
  ("drained_nodes")? else who holds G at b with the changes?
    "taken"          a job that starts there first (one of the changes' submissions: `your job`, or a job that
                     moved earlier); "freed_later": a job that holds them longer (it started later, or restarted
                     after an eviction); "reordered": the job it swaps with (as above); "order": nobody.
Evictions: `evictions` are those only the after-run makes (by victim and rule); `avoided` those only the before-run
makes; `eviction_why` says of each of `evictions` whether it is for one of the changes' submissions ("for_change") or
follows from the schedule the changes move ("knock_on", with the victims the before-run evicts for the same
beneficiary instead).
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
    why: dict = field(default_factory=dict)  # job id -> Why, for each job whose start differs (explain)
    avoided: list = field(default_factory=list)  # evictions the before-run makes and the after-run does not
    eviction_why: list = field(default_factory=list)  # per entry of `evictions`: EvictionWhy


# Why a job's start moves: the cause's code (module docstring) and whether it is earlier or later
EARLIER_CAUSES = ("added_nodes", "cancelled", "eviction", "freed_earlier", "displaced", "reordered", "order")
LATER_CAUSES = ("drained_nodes", "taken", "freed_later", "reordered", "order")


@dataclass(frozen=True, slots=True)
class Why:
    """Why a job starts earlier or later with the changes (module docstring): `moved` "earlier" | "later",
    `cause` (EARLIER_CAUSES / LATER_CAUSES), the other `job` it names (None for "order"), `at` the moment compared
    (seconds: the job's start in the case where it starts sooner); an "eviction" also has its `rule` and
    `beneficiary`."""

    moved: str
    cause: str
    job: Hashable | None = None
    at: float | None = None
    rule: str | None = None
    beneficiary: Hashable | None = None
    # "displaced" only: what `job` does with the change ("later": starts later or not within the horizon; "moved":
    # starts at the same time on other GPUs; "earlier": starts sooner, on other GPUs), and `via`, the job that holds
    # the GPUs `job` starts on with the change, without it (None: nobody), and whether the change cancels `via`
    other: str | None = None
    via: Hashable | None = None
    via_cancelled: bool = False


@dataclass(frozen=True, slots=True)
class EvictionWhy:
    """An eviction only the after-run makes: "for_change" (its beneficiary is one of the changes' submissions) or
    "knock_on" (for a job whose turn the changes move); `instead`: victims the before-run evicts for the same
    beneficiary and the after-run does not."""

    cause: str
    instead: tuple = ()


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


def _job(jobs: dict, i: int, change: dict, cancelled: dict | None = None) -> JobInfo:
    """The job a change names; `cancelled`: job id -> index of the earlier change that cancelled it (new-user trial
    23: a job cancelled twice was refused as "no pending or running job 44", though it was one until changes[0])."""
    job = jobs.get(change.get("job"))
    if job is None:
        if change.get("job") in (cancelled or {}):
            raise WhatIfError(i, "job", f"job {change.get('job')!r} is already cancelled by "
                                        f"changes[{cancelled[change.get('job')]}]")
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
    cancelled: dict = {}  # job id -> the change that cancelled it
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
            if jid in hypothetical:  # another submit change's (new-user trial 24, F5b: it read "a job's id")
                first = next(k for k in range(i) if ids.get(k) == jid)
                raise WhatIfError(i, "id", f"{jid!r} is already the id of changes[{first}]")
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
            job = _job(jobs, i, ch, cancelled)
            jobs[job.id] = replace(job, priority=int(ch["priority"]))
        elif kind == "cancel":
            job = _job(jobs, i, ch, cancelled)
            if job.state != "pending":
                free(job)
            del jobs[job.id]
            removed.append(job.id)
            cancelled[job.id] = i
    changed = Snapshot(nodes=tuple(nodes.values()), domains=snapshot.domains, queues=tuple(queues.values()),
                       jobs=tuple(jobs.values()), now=snapshot.now)
    return changed, hypothetical, removed, drained


def _gpu_index(runs: dict) -> dict:
    """(node, gpu) -> [(start, end or inf, job id)] of every run in a Forecast.runs."""
    index: dict = {}
    for jid, spans in runs.items():
        for start, end, gpus in spans:
            for g in gpus:
                index.setdefault(g, []).append((start, end if end is not None else float("inf"), jid))
    return index


def _holder(index: dict, gpus, t0: float, t1: float, exclude) -> tuple[Hashable | None, float]:
    """The job (other than `exclude`) that holds the most GPU-seconds of `gpus` from t0 to t1 in a run (a run holds
    from its start, included, to its end, excluded; t1 <= t0: the holder at t0), and when it first holds them in
    that window: (job id, time), or (None, t0). Ties by id. The job in the way for most of the window is the one a
    job's earlier or later start is about (a job holding them for the first minute only is not)."""
    weight: dict = {}
    first: dict = {}
    for g in gpus:
        for start, end, jid in index.get(g, ()):
            if jid == exclude:
                continue
            if t1 > t0:
                lo, hi = max(start, t0), min(end, t1)
                if hi <= lo:
                    continue
                w = hi - lo
            elif start <= t0 < end:
                lo, w = t0, 1.0
            else:
                continue
            weight[jid] = weight.get(jid, 0.0) + w
            first[jid] = min(first.get(jid, lo), lo)
    if not weight:
        return None, t0
    best = min(weight, key=lambda j: (-weight[j], str(j)))
    return best, first[best]


def _removed_holder(index: dict, gpus, t0: float, t1: float, removed):
    """The first (by id) of the `removed` jobs that holds any of `gpus` between t0 and t1 in a run, or None."""
    hit = {jid for g in gpus for start, end, jid in index.get(g, ())
           if jid in removed and start < max(t1, t0 + 1e-9) and end > t0}
    return min(hit, key=str) if hit else None


def _run_at(runs: dict, jid, start: float):
    """The run of `jid` that starts at `start`, or None."""
    return next((r for r in runs.get(jid, ()) if abs(r[0] - start) < 1e-6), None)


def _displaced(k, tk: float, sa: float, runs_before: dict, runs_after: dict, idx_b: dict, removed) -> Why:
    """jid starts earlier, at sa, on GPUs k holds at tk without the changes, and k is neither evicted nor ended by
    then with them: what k does instead with the changes (Why.other, Why.via). New-user trial 22, G6: a cancel's
    what-if said job 10 "starts later or elsewhere" while its start did not change (it took the cancelled job's
    GPUs at the same moment, and job 11 took its place)."""
    inf = float("inf")
    run_b = next((r for r in runs_before.get(k, ()) if r[0] <= tk < (r[1] if r[1] is not None else inf)), None)
    if run_b is None:
        return Why("earlier", "displaced", k, sa)
    same = _run_at(runs_after, k, run_b[0])
    if same is not None:
        via, _ = _holder(idx_b, same[2], same[0], same[0], k)
        return Why("earlier", "displaced", k, sa, other="moved", via=via, via_cancelled=via in removed)
    after_starts = [r[0] for r in runs_after.get(k, ())
                    if (r[1] if r[1] is not None else inf) > run_b[0] and r[0] <= run_b[0]]
    if after_starts:  # with the changes k already holds other GPUs by then (it started sooner)
        return Why("earlier", "displaced", k, sa, other="earlier")
    return Why("earlier", "displaced", k, sa, other="later")


def explain(before: dict, after: dict, runs_before: dict, runs_after: dict, evictions_after: list,
            hypothetical=(), removed=(), added_nodes=(), drained_nodes=(), ends=(float("inf"), float("inf"))) -> dict:
    """job id -> Why for every job pending in both cases whose start differs (module docstring). before / after:
    job id -> JobForecast; runs_*: the runs' Forecast.runs; evictions_after: the after-run's every eviction
    [(time, victim, rule, beneficiary)]; removed: the jobs the changes cancel; added_nodes / drained_nodes: names of
    the nodes the changes add / drain; ends: the simulated time each run reached (the window's end for a job that does
    not start within the horizon in one case)."""
    added_nodes, drained_nodes, removed = set(added_nodes), set(drained_nodes), set(removed)
    idx_b, idx_a = _gpu_index(runs_before), _gpu_index(runs_after)
    evicted: dict = {}
    for t, victim, rule, ben in evictions_after:
        evicted.setdefault(victim, []).append((t, rule, ben))
    out: dict = {}
    for jid, b in before.items():
        a = after.get(jid)
        if a is None or jid in hypothetical:
            continue
        sb, sa = b.start, a.start
        if sb == sa or (sb is None and sa is None):
            continue
        if sa is not None and (sb is None or sa < sb):  # earlier: who holds its after-run GPUs then, without?
            run = _run_at(runs_after, jid, sa)
            if run and any(node in added_nodes for node, _ in run[2]):
                out[jid] = Why("earlier", "added_nodes", at=sa)
                continue
            # who is in the way on those GPUs, without the changes, from sa to its start then (sb)
            k, tk = _holder(idx_b, run[2], sa, sb if sb is not None else ends[0], jid) if run else (None, sa)
            if k is not None and k in removed:
                out[jid] = Why("earlier", "cancelled", k, sa)
                continue
            # a job the changes cancel holds some of those GPUs then: that is what lets it start (new-user trial 22,
            # G6: job 11 took a node job 7, cancelled, and job 10, which went to other GPUs at the same moment,
            # shared; it named job 10 only, as "starting later or elsewhere")
            gone = _removed_holder(idx_b, run[2], sa, sb if sb is not None else ends[0], removed) if run else None
            if gone is not None:
                out[jid] = Why("earlier", "cancelled", gone, sa)
                continue
            if k is None:
                out[jid] = Why("earlier", "order", at=sa)
                continue
            # the holder's run (without the changes) there at tk: since when it held them
            held_from = max((r[0] for r in runs_before.get(k, ()) if r[0] <= tk), default=None)
            ev = [e for e in evicted.get(k, ()) if e[0] <= tk and (held_from is None or e[0] >= held_from)]
            if ev:
                t, rule, ben = ev[-1]
                out[jid] = Why("earlier", "eviction", k, sa, rule, ben)
            elif any(r[0] <= tk and r[1] is not None and r[1] <= tk for r in runs_after.get(k, ())) \
                    and not any(r[0] <= tk < (r[1] if r[1] is not None else float("inf"))
                                for r in runs_after.get(k, ())):
                out[jid] = Why("earlier", "freed_earlier", k, sa)
            else:
                out[jid] = _displaced(k, tk, sa, runs_before, runs_after, idx_b, removed)
        else:  # later (or not within the horizon): who holds its before-run GPUs then, with the changes?
            run = _run_at(runs_before, jid, sb)
            if run and any(node in drained_nodes for node, _ in run[2]):
                out[jid] = Why("later", "drained_nodes", at=sb)
                continue
            # who is in the way on those GPUs, with the changes, from sb to its start then (sa)
            k, tk = _holder(idx_a, run[2], sb, sa if sa is not None else ends[1], jid) if run else (None, sb)
            if k is None:
                out[jid] = Why("later", "order", at=sb)
                continue
            run_k = next((r for r in runs_after.get(k, ()) if r[0] <= tk < (r[1] if r[1] is not None
                                                                            else float("inf"))), None)
            same = run_k is not None and _run_at(runs_before, k, run_k[0]) is not None
            out[jid] = Why("later", "freed_later" if same and k not in hypothetical else "taken", k, sb)
    # Two jobs that swap at one moment (J takes the GPUs K starts on at t without the changes, K's are taken by J):
    # the order between them moved there; each names the other ("reordered"), and jobs behind name them in turn
    for jid, w in list(out.items()):
        k = w.job
        other = out.get(k)
        if w.cause == "displaced" and other is not None and other.cause == "taken" and other.job == jid \
                and other.at == w.at:
            out[jid] = Why("earlier", "reordered", k, w.at)
            out[k] = Why("later", "reordered", jid, w.at)
    return out


def explain_evictions(evictions: list, before_evictions: list, after_evictions: list, hypothetical=()) -> list:
    """EvictionWhy per entry of `evictions` (those only the after-run makes)."""
    after_victims = {(v, r) for _, v, r, _ in after_evictions}
    out = []
    for _, victim, rule, ben in evictions:
        if ben is not None and ben in hypothetical:
            out.append(EvictionWhy("for_change"))
            continue
        instead = tuple(v for _, v, r, bb in before_evictions
                        if bb == ben and ben is not None and (v, r) not in after_victims)
        out.append(EvictionWhy("knock_on", tuple(dict.fromkeys(instead))))
    return out


def describe(why: Why, name: Callable[[Hashable], str] = lambda j: f"job {j}",
             when: Callable[[float], str] = lambda t: f"at {t:g} s") -> str:
    """One line for a Why, in the answer's words. name(job id) -> how the caller may see that job ("job 12 (train)",
    "your job h", "a job of another team"); when(seconds) -> a moment with its preposition ("at 760 s", "in 1 min":
    from_now). A "displaced" job's line says what the other job does with the change (Why.other): it never says that
    job starts later when its start does not move (new-user trial 22, G6)."""
    other = name(why.job) if why.job is not None else ""
    at = when(why.at) if why.at is not None else "then"
    if why.cause == "eviction":
        for_whom = f" for {name(why.beneficiary)}" if why.beneficiary is not None else " (a drain)"
        return (f"starts earlier: the GPUs it starts on {at} are freed by the {why.rule} of {other}{for_whom}, "
                f"which happens only with the change")
    if why.cause == "freed_earlier":
        return (f"starts earlier: {other}, which holds the GPUs it starts on {at} without the change, ends sooner "
                f"with it")
    if why.cause == "displaced":
        head = f"starts earlier: it takes the GPUs {other} holds {at} without the change"
        if why.other == "later":
            return f"{head}; with the change {other} starts later"
        if why.other == "earlier":
            return f"{head}; with the change {other} starts sooner, on other GPUs"
        if why.other == "moved":
            if why.via is None:
                where = ", free then"
            elif why.via_cancelled:
                where = f": those of {name(why.via)}, which the change cancels"
            else:
                where = f": those {name(why.via)} holds then without the change"
            return f"{head}; with the change {other} starts at the same time on other GPUs{where}"
        return f"{head}; with the change {other} does not hold them then"
    if why.cause == "added_nodes":
        return f"starts earlier: on GPUs of the nodes the change adds, {at}"
    if why.cause == "cancelled":
        # the moment first, next to the start it dates (new-user trial 22b: "..., which the change cancels, in 10 min"
        # read as if the cancel came in 10 min)
        return f"starts earlier, {at}: on GPUs of {other} (some at least), which the change cancels"
    if why.cause == "drained_nodes":
        return f"starts later: the GPUs it would start on {at} are on nodes the change drains"
    if why.cause == "reordered":
        first = f"it goes before {other}" if why.moved == "earlier" else f"{other} goes before it"
        return (f"starts {why.moved}: {first} {at}, the other way round without the change: the change moves the "
                f"scheduler's order (a submission adds its queue's demand, which lowers the other queues' fair shares "
                f"and can swap queues whose use of their share is nearly equal; a quota, weight or priority change "
                f"moves it directly)")
    if why.cause == "taken":
        return f"starts later: {other} takes the GPUs it would start on {at}"
    if why.cause == "freed_later":
        return (f"starts later: {other} holds the GPUs it would start on {at} longer with the change (it started "
                f"later, or restarts after an eviction)")
    return (f"starts {why.moved}: the scheduler's order moved (the change alters the queues' fair shares, usage or "
            f"priorities), so another job goes first {at}")


def from_now(t: float, now: float) -> str:
    """Moment t (seconds) said from `now`, with its preposition: "now", "in 40 s", "in 12 min", "in 2.5 h" (under an
    hour in minutes or seconds: "0.0 h from now" read as now for a moment a minute ahead, new-user trial 22, G6)."""
    d = t - now
    if d < 0.5:
        return "now"
    if d < 60:
        return f"in {d:.0f} s"
    if d < 3570:
        return f"in {max(1, round(d / 60))} min"
    return f"in {d / 3600:.1f} h"


def describe_eviction(victim, rule: str, beneficiary, why: EvictionWhy,
                      name: Callable[[Hashable], str] = lambda j: f"job {j}") -> str:
    """One line for an eviction only the after-run makes (its EvictionWhy), naming jobs by `name` as describe."""
    if rule == "drain":
        return f"{name(victim)} is stopped and requeued by the drain"
    for_whom = f"for {name(beneficiary)}" if beneficiary is not None else "(for no job)"
    if why.cause == "for_change":
        return f"{name(victim)} is evicted ({rule}) {for_whom}, one of the changes' jobs"
    instead = [name(i) for i in why.instead]
    return (f"{name(victim)} is evicted ({rule}) {for_whom}, a knock-on of the schedule the change moves"
            + (f"; without the change {', '.join(instead)} is evicted instead" if instead else ""))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def what_if(snapshot: Snapshot, changes: list[dict], estimate: Callable[[JobInfo, float], tuple[float, float]],
            **kwargs) -> WhatIf:
    """Forecast `snapshot` as it is and with `changes` applied (apply_changes); kwargs go to
    forecast.forecast (horizon, max_cycles, config, ...). Raises WhatIfError (see the module docstring)."""
    changed, hypothetical, removed, drained = apply_changes(snapshot, changes)
    kwargs = {**kwargs, "timeline": True}
    before, info_b = forecast_start(snapshot, estimate, **kwargs)
    # a drained job resumes with the work it has left (forecast.forecast's `progress`), not as a fresh job
    running = {j.id: j for j in snapshot.jobs if j.state != "pending"}
    progress = {jid: max(0.0, snapshot.now - running[jid].start_time) for jid in drained
                if running[jid].start_time is not None}
    after, info_a = forecast_start(changed, estimate, **{**kwargs, "progress": {**(kwargs.get("progress") or {}),
                                                                                **progress}})
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
    # Each side is compared with the WHOLE other run: `evictions` are the after-run's (drains included) that the
    # before-run does not make, `avoided` the before-run's that the after-run does not make. `avoided` was taken
    # against `evictions` (the after-run's evictions less those both runs make), so every eviction both runs made
    # read as avoided: a what-if that changed nothing (no change, or a weight set to its value) listed all the
    # forecast's evictions (7 to 12 on the Philly demo) as avoided beside "evictions": 0 and no job moved.
    all_after = [(snapshot.now, j, "drain", None) for j in drained] + list(info_a["evictions"])
    seen = {(victim, rule) for _, victim, rule, _ in info_b["evictions"]}
    out.evictions = [(snapshot.now, j, "drain", None) for j in drained]
    out.evictions += [e for e in info_a["evictions"] if (e[1], e[2]) not in seen]
    seen_after = {(victim, rule) for _, victim, rule, _ in all_after}
    out.avoided = [e for e in info_b["evictions"] if (e[1], e[2]) not in seen_after]
    out.eviction_why = explain_evictions(out.evictions, info_b["evictions"], info_a["evictions"], hypothetical)
    old_nodes = {n.name: n for n in snapshot.nodes}
    added = [n.name for n in changed.nodes if n.name not in old_nodes]
    drained_nodes = [n.name for n in changed.nodes if n.name in old_nodes and n.state != old_nodes[n.name].state]
    out.why = explain(before, after, info_b["runs"], info_a["runs"], all_after, hypothetical, removed, added,
                      drained_nodes, (info_b["end"], info_a["end"]))
    return out
