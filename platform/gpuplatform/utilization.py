"""The live GPU-hour ledger: spans built from the platform's own records, handed to the pure module
scheduler.core.gpu_hours (the one the replay uses). Read-only.

    utilization(scope, since, until, *, team_ids=None, flavor=None, queue=None, team=None, step=None) -> dict

Where each span comes from:

- capacity: every node's GPUs over the whole window (labels flavor, node);
- down: a node from `node_not_ready` / `node_failed` to `node_ready` (its Events; a node not_ready now with
  no such Event in the window: from `since`), and each GPU unhealthy now from its node's last `gpu_health`
  Event (or `since`);
- attempts: each Allocation (one GPU of one task attempt) over [created_at, released_at or now):
  grace_and_startup until the job's first `running` Event in it (a simulated job, or any job on a node
  with the simulated executor, runs at once; an agent task that never started is startup throughout); after a failure (`task_failed`, `requeued_after_failure`,
  `node_failed` on its node) the rest is lost_to_failure, and since the platform does not know a job's
  checkpoints, so is the attempt's whole run before it (its work was not kept); after a stop (`stopping`,
  `preempted`, `reclaimed`, `evicted`, `cancelled`, `time_limit`) the rest is grace_and_startup; idle
  periods (IdleAllocation) are idle_allocated; the remainder is useful;
- waiting: from one ClusterSample with pending_jobs > 0 to the next sample;
- held: not measured yet (nominations are not recorded over time): 0.

Returns {"scope", "since", "until", "rows": [{"key", "capacity", each bucket (GPU-hours),
"effective_utilization"}], "series": {key: [{"time", buckets...}]} (when step), "telemetry": whether any GPU
telemetry covers the window (False: idle_allocated cannot be measured and pages say "no telemetry")}.
`team_ids` (None = all): restricts queue / team / job scopes and the job lists to those teams.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Max, Q

from scheduler.core import gpu_hours

from . import clock
from .models import Allocation, ClusterSample, Event, Gpu, GpuSample, IdleAllocation, Job, Node

FAILURE_KINDS = {"task_failed", "requeued_after_failure"}
STOP_KINDS = {"stopping", "preempted", "reclaimed", "evicted", "cancelled", "time_limit"}
DOWN_KINDS = {"node_not_ready", "node_failed"}
SCOPES = ("cluster", "flavor", "queue", "team", "job")


def _ts(t: datetime) -> float:
    return t.timestamp()


def _node_spans(since: datetime, until: datetime, flavor: str | None) -> tuple[list, list, dict]:
    nodes = list(Node.objects.all().values_list("id", "name", "flavor", "gpu_count", "state", "executor"))
    if flavor:
        nodes = [n for n in nodes if n[2] == flavor]
    s, u = _ts(since), _ts(until)
    cap = [gpu_hours.Span.of(s, u, n[3], "capacity", flavor=n[2], node=n[1]) for n in nodes]
    info = {n[0]: n for n in nodes}
    down = []
    events: dict[int, list] = {}
    for node_id, kind, t in Event.objects.filter(node_id__in=info, kind__in=DOWN_KINDS | {"node_ready"},
                                                 time__lt=until).order_by("time").values_list("node_id", "kind", "time"):
        events.setdefault(node_id, []).append((kind, t))
    for node_id, (_, name, fl, gpus, state, _executor) in info.items():
        start = None
        for kind, t in events.get(node_id, []):
            if kind in DOWN_KINDS and start is None:
                start = t
            elif kind == "node_ready" and start is not None:
                down.append(gpu_hours.Span.of(_ts(start), _ts(t), gpus, "down", flavor=fl, node=name))
                start = None
        if start is None and state == Node.State.NOT_READY:
            start = since
        if start is not None:
            down.append(gpu_hours.Span.of(_ts(start), u, gpus, "down", flavor=fl, node=name))
    last_health = dict(Event.objects.filter(node_id__in=info, kind="gpu_health").values("node_id")
                       .annotate(t=Max("time")).values_list("node_id", "t").order_by())
    for node_id, in Gpu.objects.filter(node_id__in=info).exclude(health=Gpu.Health.HEALTHY).values_list("node_id"):
        if info[node_id][4] == Node.State.NOT_READY:
            continue  # the whole node is down already
        start = max(last_health.get(node_id, since), since)
        down.append(gpu_hours.Span.of(_ts(start), u, 1, "down", flavor=info[node_id][2], node=info[node_id][1]))
    return cap, down, info


def _attempt_spans(since: datetime, until: datetime, now: datetime, node_info: dict, team_ids, queue, team) -> list:
    allocs = Allocation.objects.filter(created_at__lt=until).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=since)).filter(gpu__node_id__in=node_info)
    if team_ids is not None:
        allocs = allocs.filter(job__team_id__in=list(team_ids))
    if queue:
        allocs = allocs.filter(job__queue__name=queue)
    if team:
        allocs = allocs.filter(job__team__name=team)
    rows = list(allocs.values_list("job_id", "gpu__node_id", "created_at", "released_at", "task__started_at",
                                   "job__simulated", "job__queue__name", "job__team__name"))
    job_ids = {r[0] for r in rows}
    ev: dict[int, list] = {}
    for job_id, kind, t in Event.objects.filter(job_id__in=job_ids, kind__in=FAILURE_KINDS | STOP_KINDS | {"running"},
                                                time__lt=until).order_by("time").values_list("job_id", "kind", "time"):
        ev.setdefault(job_id, []).append((kind, t))
    node_fail: dict[int, list] = {}
    for node_id, t in Event.objects.filter(node_id__in=node_info, kind="node_failed", time__lt=until) \
            .values_list("node_id", "time"):
        node_fail.setdefault(node_id, []).append(t)
    idle: dict[int, list] = {}
    for job_id, a, b in IdleAllocation.objects.filter(job_id__in=job_ids).values_list("job_id", "since", "ended_at"):
        idle.setdefault(job_id, []).append((_ts(a), _ts(b or now)))
    out = []
    for job_id, node_id, created, released, task_started, simulated, qname, tname in rows:
        end = released or now
        if end <= created:
            continue
        in_attempt = [(k, t) for k, t in ev.get(job_id, []) if created <= t <= end]
        progress = next((t for k, t in in_attempt if k == "running"), None)
        if progress is None:
            if simulated or node_info[node_id][5] == Node.Executor.SIMULATED:
                progress = created
            elif task_started is not None and created <= task_started <= end:
                progress = task_started
            else:
                progress = end  # never started: startup throughout
        fails = [t for k, t in in_attempt if k in FAILURE_KINDS]
        fails += [t for t in node_fail.get(node_id, []) if created <= t <= end]
        failure = min(fails) if fails else None
        stop = next((t for k, t in in_attempt if k in STOP_KINDS), None)
        labels = dict(flavor=node_info[node_id][2], node=node_info[node_id][1], queue=qname, team=tname, job=job_id)
        if failure is not None:
            out += gpu_hours.attempt_spans(start=_ts(created), end=_ts(end), gpus=1, progress_start=_ts(progress),
                                           kept_until=_ts(progress), stop_at=_ts(failure), failed=True, **labels)
        else:
            out += gpu_hours.attempt_spans(start=_ts(created), end=_ts(end), gpus=1, progress_start=_ts(progress),
                                           stop_at=None if stop is None else _ts(stop), idle=idle.get(job_id, ()),
                                           **labels)
    return out


def _waiting(since: datetime, until: datetime) -> list:
    prev = ClusterSample.objects.filter(time__lt=since).order_by("-time").values_list("time", "pending_jobs").first()
    samples = ([prev] if prev else []) + list(ClusterSample.objects.filter(time__gte=since, time__lt=until)
                                              .order_by("time").values_list("time", "pending_jobs"))
    out = []
    for i, (t, pending) in enumerate(samples):
        nxt = samples[i + 1][0] if i + 1 < len(samples) else until
        if pending:
            out.append(gpu_hours.Span.of(_ts(max(t, since)), _ts(nxt), 0, "waiting"))
    return out


def default_window(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The last 24 hours of the cluster clock."""
    now = now or clock.now()
    return now - timedelta(days=1), now


def utilization(scope: str, since: datetime, until: datetime, *, team_ids=None, flavor: str | None = None,
                queue: str | None = None, team: str | None = None, step: float | None = None) -> dict:
    """The ledger (module docstring). Raises ValueError for an unknown scope or until <= since."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    if until <= since:
        raise ValueError("until must be after since")
    now = clock.now()
    until_eff = min(until, max(now, since + timedelta(seconds=1)))
    cap, down, info = _node_spans(since, until_eff, flavor)
    use = down + _attempt_spans(since, until_eff, now, info, team_ids, queue, team)
    # queue / team filters narrow the jobs, not the cluster's capacity: a filtered cluster view is the
    # capacity those jobs used (their own scope), so the buckets still sum to what is shown
    if (queue or team or team_ids is not None) and scope in ("cluster", "flavor"):
        use = [s for s in use if s.bucket != "down"]
        cap = []
        owned_scope = "team" if scope == "cluster" else scope
        res = gpu_hours.compute([], use, [], since=_ts(since), until=_ts(until_eff), scope=owned_scope, step=step)
        res = _merge(res, "cluster") if scope == "cluster" else res
    else:
        res = gpu_hours.compute(cap, use, _waiting(since, until_eff), since=_ts(since), until=_ts(until_eff),
                                scope=scope, step=step)
    rows = [{"key": key, **t.hours()} for key, t in sorted(res.totals.items())]
    series = {key: [{"time": datetime.fromtimestamp(t0, tz=since.tzinfo).isoformat(), **{b: v / 3600.0 for b, v in
                                                                                       t.buckets.items()},
                     "capacity": t.capacity / 3600.0} for t0, t in bins] for key, bins in res.series.items()}
    has_telemetry = GpuSample.objects.filter(time__gte=since, time__lt=until_eff).exists()
    return {"scope": scope, "since": since, "until": until_eff, "rows": rows, "series": series,
            "telemetry": has_telemetry}


def _merge(res: gpu_hours.LedgerResult, key: str) -> gpu_hours.LedgerResult:
    """Sum every scope value of `res` into one (`key`)."""
    tot = gpu_hours.Totals()
    for t in res.totals.values():
        tot.capacity += t.capacity
        for b, v in t.buckets.items():
            tot.buckets[b] += v
    series = {}
    if res.series:
        bins = None
        for lst in res.series.values():
            if bins is None:
                bins = [(t0, gpu_hours.Totals()) for t0, _ in lst]
            for (t0, acc), (_, t) in zip(bins, lst):
                acc.capacity += t.capacity
                for b, v in t.buckets.items():
                    acc.buckets[b] += v
        series = {key: bins or []}
    return gpu_hours.LedgerResult(res.since, res.until, {key: tot} if res.totals else {}, series)


def top_jobs_lost_to_failure(since: datetime, until: datetime, *, team_ids=None, limit: int = 10) -> list[dict]:
    """Jobs by GPU-hours lost to failure in the window, most first: [{"job", "job_name", "team", "queue",
    "lost_gpu_hours"}] (only jobs that lost some)."""
    res = utilization("job", since, until, team_ids=team_ids)
    lost = [(r["key"], r["lost_to_failure"]) for r in res["rows"] if r["lost_to_failure"] > 0]
    lost.sort(key=lambda x: -x[1])
    lost = lost[:limit]
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=[int(k) for k, _ in lost]).select_related("team", "queue")}
    return [{"job": int(k), "job_name": jobs[int(k)].name, "team": jobs[int(k)].team.name,
             "queue": jobs[int(k)].queue.name, "lost_gpu_hours": v} for k, v in lost if int(k) in jobs]
