"""The live GPU-hour ledger: spans built from the platform's own records, handed to the pure module
scheduler.core.gpu_hours (the one the replay uses). Read-only.

    utilization(scope, since, until, *, team_ids=None, flavor=None, queue=None, team=None, step=None) -> dict

Where each span comes from:

- capacity: every node's GPUs over the window, from the node's registration when it registered inside it
  (its `node_registered` Event that created it; a node of a loaded cluster spec: the whole window) (labels
  flavor, node);
- down, per GPU: its node from `node_not_ready` / `node_failed` to `node_ready`, and the GPU itself from a
  `gpu_health` change to unhealthy to the change back to healthy (the Events' history; a node not_ready or
  a GPU unhealthy now with no such Event at all: from `since`), minus the time a task still held it (a
  failed task's GPUs until its gang is released: that is the attempt's, lost to failure);
- attempts: each Allocation (one GPU of one task attempt) over [created_at, released_at or now):
  grace_and_startup until the job's first `running` Event in it (a simulated job, or any job on a node
  with the simulated executor, runs at once; an agent task that never started is startup throughout); after a failure (`task_failed`, `requeued_after_failure`,
  `node_failed` on its node) the rest is lost_to_failure, and since the platform does not know a job's
  checkpoints, so is the attempt's whole run before it (its work was not kept); after a stop (`stopping`,
  `preempted`, `reclaimed`, `evicted`, `cancel_requested`, `cancelled`, `time_limit`) the rest is grace_and_startup; idle
  periods (IdleAllocation) are idle_allocated; the remainder is useful;
- waiting: from one ClusterSample with pending_jobs > 0 to the next sample;
- held, per GPU: the GPUs nominated for a pending gang (`hold_set` Events written when the cycle sets or
  changes Job.reserved, to the next hold Event, the gang's binding, its end or `until`) and the GPUs of
  hot spare nodes (`node_spare` Events), minus the time a job runs on them (a nomination may cover its
  victims' GPUs during their grace: those are the victims') and the time they are down.

The window starts no earlier than `records_since()` (the last demo workload reset: the deleted run's busy hours
would read as free): the answer's `since` says where it started.

Returns {"scope", "since", "until", "rows": [{"key", "capacity", each bucket (GPU-hours),
"effective_utilization"}], "series": {key: [{"time", buckets..., "capacity", "hours"}]} (when step; "hours": how
much of the bin the window and the nodes' capacity cover, so a bin's mean GPUs is its GPU-hours / "hours", not / the
step: the last bin is still in progress, the first may start at a node's registration), "telemetry": whether any GPU
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
STOP_KINDS = {"stopping", "preempted", "reclaimed", "evicted", "cancel_requested", "cancelled", "time_limit",
              "stopped_for_spare"}
DOWN_KINDS = {"node_not_ready", "node_failed"}
SCOPES = ("cluster", "flavor", "queue", "team", "job")


def _ts(t: datetime) -> float:
    return t.timestamp()


def _union(ivs: list) -> list:
    """Sorted, merged [(a, b)] of the half-open intervals `ivs` (empty ones dropped)."""
    out: list = []
    for a, b in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(ivs: list, cut: list) -> list:
    """The parts of the merged intervals `ivs` outside the merged intervals `cut` (both sorted)."""
    out, j = [], 0
    for a, b in ivs:
        while j < len(cut) and cut[j][1] <= a:
            j += 1
        k, cur = j, a
        while k < len(cut) and cut[k][0] < b:
            if cut[k][0] > cur:
                out.append((cur, cut[k][0]))
            cur = max(cur, cut[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def _open_closed(events: list, is_open, is_close, since: float, until: float, open_now: bool) -> list:
    """Intervals from time-ordered (t, kind) `events`: an `is_open` event starts one (if none is open), an
    `is_close` event ends it; one still open ends at `until`. With no event before `since` opening one,
    `open_now` (the state now) opens one at `since` when no event in the history says when it began."""
    out, start, seen = [], None, False
    for t, kind in events:
        seen = True
        if is_open(kind) and start is None:
            start = t
        elif is_close(kind) and start is not None:
            out.append((start, t))
            start = None
    if start is None and open_now and not seen:
        start = since
    if start is not None:
        out.append((start, until))
    return [(max(a, since), min(b, until)) for a, b in out if min(b, until) > max(a, since)]


def _node_starts(nodes: list, since: float) -> dict:
    """node id -> when its capacity starts in a window from `since`: the node's registration (its first
    `node_registered` Event that created it, on the cluster clock) when that is later, else `since`. Nodes
    of a loaded cluster spec have no such Event: they count over the whole window. A removed node's row is
    gone, so it counts nowhere."""
    born: dict = {}
    for node_id, t in Event.objects.filter(kind="node_registered", node_id__in=[n[0] for n in nodes],
                                           data__created=True).values_list("node_id", "time"):
        born[node_id] = min(born.get(node_id, _ts(t)), _ts(t))
    return {n[0]: max(since, born.get(n[0], since)) for n in nodes}


def _node_spans(since: datetime, until: datetime, flavor: str | None) -> tuple[list, list, dict]:
    """(capacity spans, down and held spans, node info) over the window; see the module docstring. Every
    span of this function is per GPU and never overlaps an allocation of that GPU, nor down and held each
    other, so no instant of one GPU is counted twice."""
    nodes = list(Node.objects.all().values_list("id", "name", "flavor", "gpu_count", "state", "executor"))
    if flavor:
        nodes = [n for n in nodes if n[2] == flavor]
    s, u = _ts(since), _ts(until)
    start = _node_starts(nodes, s)
    nodes = [n for n in nodes if start[n[0]] < u]  # registered after the window: no capacity in it
    cap = [gpu_hours.Span.of(start[n[0]], u, n[3], "capacity", flavor=n[2], node=n[1]) for n in nodes]
    info = {n[0]: n for n in nodes}
    node_ev: dict[int, list] = {}
    gpu_ev: dict[tuple, list] = {}
    for node_id, kind, t, data in Event.objects.filter(
            node_id__in=info, kind__in=DOWN_KINDS | {"node_ready", "gpu_health"}, time__lt=until
    ).order_by("time", "id").values_list("node_id", "kind", "time", "data"):
        if kind == "gpu_health":
            for c in (data or {}).get("changes", ()):
                if isinstance(c, dict) and isinstance(c.get("index"), int):
                    gpu_ev.setdefault((node_id, c["index"]), []).append((_ts(t), c.get("to") == "healthy"))
        else:
            node_ev.setdefault(node_id, []).append((_ts(t), kind))
    unhealthy_now = set(Gpu.objects.filter(node_id__in=info).exclude(health=Gpu.Health.HEALTHY)
                        .values_list("node_id", "index"))
    allocated: dict[tuple, list] = {}
    for node_id, idx, a, b in Allocation.objects.filter(gpu__node_id__in=info, created_at__lt=until).filter(
            Q(released_at__isnull=True) | Q(released_at__gt=since)).values_list("gpu__node_id", "gpu__index",
                                                                                "created_at", "released_at"):
        allocated.setdefault((node_id, idx), []).append((_ts(a), u if b is None else _ts(b)))
    held = _held_intervals(since, until, {n[1]: n[0] for n in nodes})
    use = []
    for node_id, (_, name, fl, gpus, state, _executor) in info.items():
        ns = start[node_id]
        node_down = _open_closed(node_ev.get(node_id, []), lambda k: k in DOWN_KINDS, lambda k: k == "node_ready",
                                 ns, u, state == Node.State.NOT_READY)
        for idx in range(gpus):
            gpu_down = _open_closed(gpu_ev.get((node_id, idx), []), lambda healthy: not healthy,
                                    lambda healthy: healthy, ns, u, (node_id, idx) in unhealthy_now)
            busy = _union(allocated.get((node_id, idx), []))
            down = _minus(_union(node_down + gpu_down), busy)  # a failed task's GPUs are its own (lost)
            use += [gpu_hours.Span.of(a, b, 1, "down", flavor=fl, node=name) for a, b in down]
            for (a, b), labels in held.get((node_id, idx), ()):
                for x, y in _minus(_minus([(a, b)], busy), down):
                    use.append(gpu_hours.Span.of(x, y, 1, "held", flavor=fl, node=name, **labels))
    return cap, use, info


def _held_intervals(since: datetime, until: datetime, node_ids: dict) -> dict:
    """(node id, GPU index) -> [((start, end), labels)]: GPUs a pending gang held (Job.reserved, from its
    `hold_set` Events) until the hold ended: the next hold Event of the job (`hold_set` with another
    placement, `hold_dropped`), the job's binding (its first allocation after the hold began), its end,
    or the window's end; plus GPUs of a node marked spare (`node_spare` Events), reserved for recovery.
    A hold in force with no `hold_set` Event (set before holds were recorded) counts from `since`."""
    s, u = _ts(since), _ts(until)
    hold_ev: dict[int, list] = {}
    for job_id, kind, t, data in Event.objects.filter(kind__in=("hold_set", "hold_dropped"), job_id__isnull=False,
                                                      time__lt=until).order_by("time", "id").values_list(
            "job_id", "kind", "time", "data"):
        hold_ev.setdefault(job_id, []).append((_ts(t), kind, (data or {}).get("reserved") or []))
    current = dict(Job.objects.filter(state__in=("pending", "preempting"), reserved__isnull=False)
                   .values_list("id", "reserved"))
    for job_id, reserved in current.items():
        if job_id not in hold_ev:
            hold_ev[job_id] = [(s, "hold_set", reserved)]
    if not hold_ev:
        return _spare_intervals(since, until, node_ids, {})
    jobs = {jid: (q, t, tid, ended) for jid, q, t, tid, ended in Job.objects.filter(pk__in=list(hold_ev))
            .values_list("id", "queue__name", "team__name", "team_id", "finished_at")}
    binds: dict[int, list] = {}
    for job_id, t in Allocation.objects.filter(job_id__in=list(hold_ev), created_at__lt=until).values_list(
            "job_id", "created_at"):
        binds.setdefault(job_id, []).append(_ts(t))
    out: dict[tuple, list] = {}
    for job_id, evs in hold_ev.items():
        if job_id not in jobs:
            continue
        qname, tname, team_id, ended = jobs[job_id]
        labels = {"queue": qname, "team": tname, "job": job_id, "team_id": team_id}
        for i, (t, kind, reserved) in enumerate(evs):
            if kind != "hold_set":
                continue
            end = evs[i + 1][0] if i + 1 < len(evs) else u
            end = min([end, *(b for b in binds.get(job_id, ()) if b >= t)])
            if ended is not None:
                end = min(end, _ts(ended))
            a, b = max(t, s), min(end, u)
            if b <= a:
                continue
            for entry in reserved:
                try:
                    _role, _index, node, gpus = entry[:4]  # a held GPU share adds its share (evict.encode_reserved)
                except (TypeError, ValueError):
                    continue
                if node in node_ids:
                    for g in gpus:
                        out.setdefault((node_ids[node], int(g)), []).append(((a, b), labels))
    return _spare_intervals(since, until, node_ids, out)


def _spare_intervals(since: datetime, until: datetime, node_ids: dict, out: dict) -> dict:
    """Add to `out` the GPUs of nodes marked spare (Node.spare; `node_spare` Events say since when)."""
    s, u = _ts(since), _ts(until)
    ids = set(node_ids.values())
    spare_now = dict(Node.objects.filter(pk__in=ids).values_list("id", "spare"))
    evs: dict[int, list] = {}
    for node_id, t, data in Event.objects.filter(kind="node_spare", node_id__in=ids, time__lt=until).order_by(
            "time", "id").values_list("node_id", "time", "data"):
        evs.setdefault(node_id, []).append((_ts(t), bool((data or {}).get("spare"))))
    gpus = dict(Node.objects.filter(pk__in=ids).values_list("id", "gpu_count"))
    for node_id in ids:
        for a, b in _open_closed(evs.get(node_id, []), lambda on: on, lambda on: not on, s, u,
                                 bool(spare_now.get(node_id))):
            for g in range(gpus.get(node_id, 0)):
                out.setdefault((node_id, g), []).append(((a, b), {}))
    return out


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
    # The records start at the last workload reset (the demo's, module docstring): before it the deleted workload's
    # busy hours would read as free (trial 19, F18)
    records = records_since()
    if records is not None and since < records < until_eff:
        since = records
    cap, down, info = _node_spans(since, until_eff, flavor)
    # the time the (flavor's) nodes had GPUs at all: a bin's mean GPUs is over the part of it covered (the last bin is
    # still in progress, the first may start at a node's registration), never over its full width (session 27)
    covered = _union([(sp.start, sp.end) for sp in cap])
    if queue or team or team_ids is not None:  # holds of the jobs shown only; spares belong to no team
        ids = None if team_ids is None else {str(t) for t in team_ids}
        down = [sp for sp in down if sp.bucket != "held" or (
            sp.label("job") is not None and (ids is None or sp.label("team_id") in ids)
            and (not queue or sp.label("queue") == queue) and (not team or sp.label("team") == team))]
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
    u = _ts(until_eff)
    series = {key: [{"time": datetime.fromtimestamp(t0, tz=since.tzinfo).isoformat(), **{b: v / 3600.0 for b, v in
                                                                                       t.buckets.items()},
                     "capacity": t.capacity / 3600.0, "hours": _covered(covered, t0, min(t0 + step, u)) / 3600.0}
                    for t0, t in bins] for key, bins in res.series.items()}
    has_telemetry = GpuSample.objects.filter(time__gte=since, time__lt=until_eff).exists()
    return {"scope": scope, "since": since, "until": until_eff, "rows": rows, "series": series,
            "telemetry": has_telemetry}


def _covered(ivs: list, a: float, b: float) -> float:
    """Seconds of [a, b) inside the merged intervals `ivs`."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in ivs)


def records_since() -> datetime | None:
    """When the ledger's records start: the time of the latest `workload_reset` Event (the demo clears its previous
    run's jobs, allocations and samples and writes one at the new run's clock), or None (never reset)."""
    return Event.objects.filter(kind="workload_reset").order_by("-pk").values_list("time", flat=True).first()


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
