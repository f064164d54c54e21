"""Reads behind the dashboards (topology map, queue watermarks, fragmentation, queueing): flat
`values_list` queries returning plain rows; the figure builders in `frontend/` turn them into charts.

Visibility stays in `queries` (who sees which jobs); these functions return numbers for every team and
the views decide which job names to show.
"""
from __future__ import annotations

from datetime import datetime

from django.db.models import F, Sum
from django.db.models.functions import Coalesce

from . import queries
from .gpu_request import as_gpus, from_milli, shared_gpu_memory
from .models import Allocation, ClusterSample, Gpu, Job, JobRole, Node, Queue, QueueSample, Team
from .trees import Tree


# --- topology ---------------------------------------------------------------------------------------

def domains() -> list[tuple[int, str, int, int | None]]:
    """Every domain as (id, name, tier, parent_id), by name (the rows of queries.domain_tree)."""
    return list(queries.domain_tree().rows.values())


def topology_gpus(domain_ids: set[int] | None = None, flavor: str | None = None) -> list[tuple]:
    """GPUs as (gpu_id, index, health, node_id, node_name, node_state, flavor, domain_id), optionally only
    those whose node sits in one of `domain_ids` (tier-1 ids) and of one GPU flavor."""
    qs = Gpu.objects.all()
    if domain_ids is not None:
        qs = qs.filter(node__domain_id__in=domain_ids)
    if flavor:
        qs = qs.filter(node__flavor=flavor)
    return list(qs.order_by().values_list("id", "index", "health", "node_id", "node__name", "node__state",
                                          "node__flavor", "node__domain_id"))


def domainless_nodes() -> list[str]:
    """The names of the nodes without a domain, by name (each a tier-1 domain of its own, "node:<name>")."""
    return list(Node.objects.filter(domain__isnull=True).order_by("name").values_list("name", flat=True))


def domainless_node_exists(name: str) -> bool:
    """Whether a node of that name exists and has no domain."""
    return Node.objects.filter(name=name, domain__isnull=True).exists()


def live_allocations() -> dict[int, int]:
    """{gpu_id: job_id} of every live allocation (released_at null)."""
    return dict(Allocation.objects.filter(released_at__isnull=True).order_by().values_list("gpu_id", "job_id"))


def held_gpu_ids() -> set[int]:
    """GPU ids the latest cycle held for jobs that have not started (a gang's or an eviction beneficiary's hold,
    the backfill / drain reservation) and not bound since: the GPUs its ClusterSample.held_gpus counts
    (ClusterSample.held_at), so the topology map shows them held, not free, and its totals agree with the
    cluster page and /metrics. Three small queries."""
    return set(held_gpu_holders())


def held_gpu_holders() -> dict[int, int | None]:
    """{GPU id: the id of the job it is held for, or None when no job can be named} over held_gpu_ids' GPUs: a
    nomination's GPUs (an eviction's beneficiary, a drain reservation, a moved job's new place) by the holder's
    Job.reserved, the rest by the backfill (EASY) reservation, whose one holder is the pending job with a
    reservation_start (evict.apply_holds writes both with the sample). Five small queries. The topology map's
    ?job= / ?team= filters and its GPU hovers name the holder (trial 21, F15: ?job= of a pending job holding 2 GPUs
    showed 0)."""
    from .scheduling.evict import decode_reserved

    held_at = ClusterSample.objects.order_by("-time", "-id").values_list("held_at", flat=True).first() or {}
    wanted = {(str(node), int(g)) for node, gpus in held_at.items() for g in gpus}
    if not wanted:
        return {}
    allocated = set(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", flat=True))
    ids = {(node, index): gid for gid, node, index in Gpu.objects.filter(node__name__in={n for n, _ in wanted})
           .values_list("id", "node__name", "index") if (node, index) in wanted and gid not in allocated}
    holder: dict[tuple[str, int], int] = {}
    for job_id, reserved in Job.objects.filter(state__in=(Job.State.PENDING, Job.State.PREEMPTING),
                                               reserved__isnull=False).values_list("id", "reserved"):
        for task in decode_reserved(reserved):
            for g in task.gpus:
                holder[(task.node, g)] = job_id
    easy = list(Job.objects.filter(state=Job.State.PENDING, reservation_start__isnull=False)
                .values_list("id", flat=True)[:2])
    rest = easy[0] if len(easy) == 1 else None  # the backfill reservation holds for one job
    return {gid: holder.get(key, rest) for key, gid in ids.items()}


def holder_jobs(job_ids) -> list[dict]:
    """The jobs of `job_ids` (holders of held GPUs: held_gpu_holders) as live_jobs' dicts: id, name, state,
    team_id, team_name, queue_id, queue_name."""
    keys = ("id", "name", "state", "team_id", "queue_id")
    rows = [dict(zip(keys, r)) for r in Job.objects.filter(pk__in=set(job_ids) - {None}).values_list(*keys)]
    if rows:
        teams = dict(Team.objects.values_list("id", "name"))
        queues = dict(Queue.objects.values_list("id", "name"))
        for r in rows:
            r["team_name"], r["queue_name"] = teams.get(r["team_id"], ""), queues.get(r["queue_id"], "")
    return rows


def gpu_shares() -> dict[int, dict]:
    """{gpu_id: share} for GPUs that are shared, hold a fraction, or are in MIG mode (DESIGN section 12). share:
    "text" ("shared, 0.75 used": the sum of its live fractions, or "MIG 2 of 7 instances used (1g.18gb x7)"),
    "used" (the GPU share its live fractions take, 0..1; None for a MIG GPU), "jobs" (the fractions it holds:
    [(job id, share 0..1)], by job id) and "instances" (a MIG GPU's instances by UUID: {"profile", "uuid",
    "job" (the job id holding it, or None)}; [] otherwise). Three flat queries."""
    from .models import Gpu, MigInstance

    out: dict[int, dict] = {}
    fractions: dict[int, list] = {}
    for gpu_id, job_id, milli in (Allocation.objects.filter(released_at__isnull=True, gpu_milli__gt=0)
                                  .order_by("gpu_id", "job_id").values_list("gpu_id", "job_id", "gpu_milli")):
        fractions.setdefault(gpu_id, []).append((job_id, milli / 1000))
    for gpu_id, held in fractions.items():
        milli = sum(round(share * 1000) for _, share in held)
        out[gpu_id] = {"text": f"shared, {milli / 1000:g} used", "used": milli / 1000, "instances": [], "jobs": held}
    for gpu_id in Gpu.objects.filter(sharing="shared").exclude(pk__in=list(out)).values_list("pk", flat=True):
        out[gpu_id] = {"text": "shared, 0 used", "used": 0.0, "instances": [], "jobs": []}
    holder = dict(Allocation.objects.filter(released_at__isnull=True, mig_instance__isnull=False).order_by()
                  .values_list("mig_instance_id", "job_id"))
    layout: dict[int, list] = {}
    for iid, gpu_id, profile, uuid in MigInstance.objects.order_by("gpu_id", "uuid").values_list(
            "id", "gpu_id", "profile", "uuid"):
        layout.setdefault(gpu_id, []).append({"profile": profile, "uuid": uuid, "job": holder.get(iid)})
    for gpu_id, instances in layout.items():
        counts: dict[str, int] = {}
        for i in instances:
            counts[i["profile"]] = counts.get(i["profile"], 0) + 1
        kinds = ", ".join(f"{p} x{c}" for p, c in sorted(counts.items()))
        used = sum(1 for i in instances if i["job"] is not None)
        out[gpu_id] = {"text": f"MIG {used} of {len(instances)} instances used ({kinds})", "used": None,
                       "instances": instances, "jobs": []}
    return out


def live_jobs() -> list[dict]:
    """Jobs in a live state (admitted, running, preempting) IN START ORDER (started, else bound; then id):
    id, name, state, team_id, team_name, queue_id, queue_name. One flat query without joins or datetime
    columns (parsing 10,000s of them dominated the map's time); names from the small tables."""
    teams = dict(Team.objects.values_list("id", "name"))
    queues = dict(Queue.objects.values_list("id", "name"))
    keys = ("id", "name", "state", "team_id", "queue_id")
    rows = [dict(zip(keys, r)) for r in Job.objects.filter(state__in=Job.LIVE_STATES)
            .order_by(Coalesce("started_at", "bound_at").asc(nulls_last=True), "id").values_list(*keys)]
    for r in rows:
        r["team_name"] = teams.get(r["team_id"], "")
        r["queue_name"] = queues.get(r["queue_id"], "")
    return rows


def queue_quotas() -> dict[int, int]:
    """{queue_id: quota in GPUs summed over flavors} (queries.queue_quotas)."""
    return {qid: q.quota for qid, q in queries.queue_quotas().items()}


def flavors() -> list[str]:
    from .models import Node

    return sorted(set(Node.objects.values_list("flavor", flat=True).distinct()))


# --- queue watermarks -------------------------------------------------------------------------------

def queue_tree() -> Tree:
    """The queue tree (queries.queue_tree: id, name, parent_id, team_name, weight, state), each row with
    its latest sample's numbers under "sample" (None before the first cycle)."""
    latest: dict[int, dict] = {}
    last_time = QueueSample.objects.order_by("-time").values_list("time", flat=True).first()
    if last_time is not None:
        for s in QueueSample.objects.filter(time=last_time).values(
                "queue_id", "used", "held", "guarantee", "quota", "limit", "pending_demand", "fair_share"):
            latest[s["queue_id"]] = _gpus(s)
        _held_not_allocated(list(latest.values()), last_time)
    tree = queries.queue_tree()
    for q in tree.rows.values():
        q["sample"] = latest.get(q["id"])
    return tree


def watermark_series(queue_id: int, since: datetime | None = None, limit: int = 2000) -> list[dict]:
    """One queue's samples, oldest first: time, used, held, guarantee, quota, limit, pending_demand, fair_share."""
    qs = QueueSample.objects.filter(queue_id=queue_id)
    if since is not None:
        qs = qs.filter(time__gte=since)
    rows = list(qs.order_by("-time").values("time", "used", "held", "guarantee", "quota", "limit", "pending_demand",
                                            "fair_share")[:limit])
    rows.reverse()
    return _held_not_allocated([_gpus(r) for r in rows])


def _held_not_allocated(rows: list[dict], time: datetime | None = None) -> list[dict]:
    """Each sample's `held` as GPUs reserved and NOT allocated, the cluster card's and /metrics' held: a
    preemptor's hold on GPUs its victim still uses during the grace is in QueueSample.held (Job.reserved),
    and the queues page stacked it on top of the victim's used GPUs: 6 GPUs in a 4-GPU cluster, above the
    limit line (new-user trial 19, F8). A queue's held not allocated is at most the cluster's at that cycle
    (ClusterSample.held_gpus, written with it at the same time): capped there (0 while every held GPU is
    still in use). Samples without a cluster sample at their time are left as stored. `time`: the rows'
    time where they have no "time" key. Changes `rows`."""
    times = {r.get("time", time) for r in rows if r.get("held")}
    if not times:
        return rows
    cluster = dict(ClusterSample.objects.filter(time__in=times).values_list("time", "held_gpus"))
    for r in rows:
        at = r.get("time", time)
        if r.get("held") and at in cluster:
            r["held"] = min(r["held"], cluster[at])
    return rows


def _gpus(sample: dict) -> dict:
    """A QueueSample row with used / pending_demand (GPU-equivalents, float columns) as shown: 105, 103.5."""
    for key in ("used", "pending_demand"):
        if key in sample:
            sample[key] = as_gpus(sample[key])
    return sample


# --- fragmentation ----------------------------------------------------------------------------------

def fragmentation_series(limit: int = 2000) -> list[dict]:
    """Cluster samples, oldest first: time, fragmentation_rate, free_gpus, largest_runnable {tier: GPUs},
    domain_completeness, allocation_rate, schedulable_gpus, by_group and sharing (ClusterSample.sharing: the
    GPU-sharing figures and the FGD measure per flavor)."""
    rows = list(ClusterSample.objects.order_by("-time", "-id").values(
        "time", "fragmentation_rate", "free_gpus", "largest_runnable", "domain_completeness",
        "allocation_rate", "schedulable_gpus", "by_group", "sharing")[:limit])
    rows.reverse()
    return rows


# --- queueing ---------------------------------------------------------------------------------------

def wait_times(limit: int = 5000) -> list[dict]:
    """The latest `limit` started jobs: gpus (GPU-equivalents asked for: whole GPUs and MIG instances one
    each, fractions as their share, queries.role_gpu_milli), memory_share (the job has a GPU-memory role,
    whose share is not counted in gpus), team, wait seconds (started - submitted). Warm-start jobs
    (Job.warm_start: a replay's jobs already running at its start) are left out: their wait never happened."""
    jobs = list(Job.objects.filter(started_at__isnull=False, warm_start=False).order_by("-started_at")
                .values("id", "submitted_at", "started_at", team_name=F("team__name"))[:limit])
    ids = [j["id"] for j in jobs]
    milli = dict(JobRole.objects.filter(job_id__in=ids).values("job_id")
                 .annotate(n=Sum(queries.role_gpu_milli())).order_by().values_list("job_id", "n"))
    memory = set(JobRole.objects.filter(job_id__in=ids, gpu_memory_mib__gt=0, gpu_milli=0)
                 .values_list("job_id", flat=True))
    return [{"team": j["team_name"], "gpus": from_milli(milli.get(j["id"])), "memory_share": j["id"] in memory,
             "wait_seconds": max(0.0, (j["started_at"] - j["submitted_at"]).total_seconds())} for j in jobs]


def pending_jobs() -> list[dict]:
    """Every pending job in the order the last scheduling cycle considered them (Job.pending_position,
    written by the cycle; jobs submitted since come last, by submission): id, name, team, queue, priority,
    submitted_at, pending_reason, pending_reason_code (the engine's code for it, written by the cycle with the words:
    the page names a never-fits job's rule from it, frontend/templatetags/forecast.never_words), estimated_start,
    never_fits, gpus (GPU-equivalents, as the jobs API's `gpus`: queries.role_gpu_milli), `position` (in its queue:
    the jobs API's `position`, from the same expression, queries.pending_queue_position) and `overall_position`
    (among all pending jobs), both None until a cycle has seen the job."""
    rows = list(Job.objects.filter(state=Job.State.PENDING)
                .order_by(F("pending_position").asc(nulls_last=True), "submitted_at", "id").values(
        "id", "name", "team_id", "queue_id", "priority", "submitted_at", "pending_reason", "pending_reason_code",
        "estimated_start", "estimated_start_p90", "estimate_note", "estimated_at", "never_fits", "reserved",
        "reservation_start", position=queries.pending_queue_position(), overall_position=F("pending_position"),
        team_name=F("team__name"), queue_name=F("queue__name")))
    milli = dict(JobRole.objects.filter(job__state=Job.State.PENDING).values("job_id")
                 .annotate(n=Sum(queries.role_gpu_milli(gpu_memory=shared_gpu_memory()))).order_by()
                 .values_list("job_id", "n"))
    from .scheduling.forecast import shown_estimate

    for r in rows:
        r["gpus"] = from_milli(milli.get(r["id"]) or 0)
        r.update(shown_estimate(r))  # the cycle's reservation over the forecast's, as the API (trial 26, F6)
    return rows
