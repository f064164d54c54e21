"""Server-rendered pages: the cluster dashboard, the job list and a job's detail; plus health and metrics JSON.

Reads come from gpuplatform.queries, figures from frontend.figures; views only glue them together.
"""
from __future__ import annotations

from datetime import timezone as dt_timezone
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_safe

from gpuplatform import access, clock, queries
from gpuplatform.event_visibility import redacted
from gpuplatform.gpu_request import from_milli, gpu_request, job_gpus
from gpuplatform.inputs import html_only, whole_number
from gpuplatform.federation.manager import is_manager, visible_federated_jobs
from gpuplatform.login import login_required
from gpuplatform.models import IdleAllocation, Job
from gpuplatform.scheduling.forecast import shown_estimate
from gpuplatform.telemetry import task_summary

from . import figures, job_paging, job_run
from .conditional import conditional_json, login_required_json
from .delta import BadSince, with_since
from .states import STATE_COLORS
from .templatetags.units import human_seconds
from .views_dashboards import zoom_exists
from .views_jobs import can_act

JOBS_PER_PAGE = 50
SERIES_POINTS = 600


def _pct(x):
    return None if x is None else round(100 * x, 1)


def _effective_today():
    from .views_utilization import effective_utilization_today

    return effective_utilization_today()


def shared_apart_text(apart: dict) -> str:
    """The allocation card's line for the GPUs in mode shared or mig that jobs hold (queries.shared_apart): the rate
    leaves them out while the queue table's `used` counts their GPU-equivalents, so the card says so ("" when none).
    New-user trial 22, G9: the card read "100.0 % 1 of 1 GPUs" beside queue demo "used 2"."""
    gpus, jobs = apart["gpus"], apart["jobs"]
    if not gpus:
        return ""
    return (f"+ {gpus} GPU{'s' if gpus != 1 else ''} shared by {jobs} job{'s' if jobs != 1 else ''} now "
            f"({apart['gpu_equivalents']} GPU-equivalent{'' if apart['gpu_equivalents'] == 1 else 's'}), counted apart: GPUs in mode shared or MIG are not in the "
            f"rate; the queue table's used counts them")


def sample_moment(sample) -> str:
    """Which moment the sample's figures show: "at cycle 12, 2026-12-04 17:03:40 UTC" (the cluster clock's time of
    the cycle's sample), "no cycle yet" without one."""
    if sample is None:
        return "no cycle yet"
    return f"at cycle {sample.cycle}, {sample.time.astimezone(dt_timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def _numbers(sample, totals: dict) -> dict:
    """The headline numbers, formatted once for both the page and metrics.json."""
    return {
        "allocation_rate": _pct(sample.allocation_rate) if sample else None,
        "fragmentation_rate": _pct(sample.fragmentation_rate) if sample else None,
        "domain_completeness": _pct(sample.domain_completeness) if sample else None,
        "free_gpus": sample.free_gpus if sample else None,
        "allocated_gpus": sample.allocated_gpus if sample else None,
        "held_gpus": sample.held_gpus if sample else None,
        "schedulable_gpus": sample.schedulable_gpus if sample else None,
        # the cycle the sample figures above come from (the queue table's rows are live: new-user trial 8, F3)
        "sample_cycle": sample.cycle if sample else None,
        # and when, in words beside the figures: the topology page's totals are live, so the two pages' free counts
        # differ between cycles (new-user trial 25, F7); "live" is what topology.json's `moment` says
        "sample_time": sample.time.isoformat() if sample else None,
        "sample_moment": sample_moment(sample),
        "shared_apart": shared_apart_text(queries.shared_apart()),  # live, as the queue table
        "effective_utilization": _effective_today(),
        **{f"jobs_{k}": v for k, v in totals.items()},
    }


def _cluster_context(request) -> dict:
    """Every number of the cluster page (and of metrics.json) read from one database snapshot, so a number
    shown twice agrees (queries.one_snapshot)."""
    with queries.one_snapshot():
        return _cluster_numbers(request)


def _cluster_numbers(request) -> dict:
    team_ids = access.visible_team_ids(request.user)
    sample = queries.latest_cluster_sample()
    series = queries.cluster_series(limit=SERIES_POINTS)
    since = series[0]["time"] if series else None
    # Team counts and queue usage are shown for every team: contention is the point of the page, and
    # the numbers carry no job details. The job list is what visibility restricts.
    counts = queries.job_counts_by_team()
    usage = queries.queue_usage()
    largest = {}
    if sample is not None:
        largest = {int(k): v for k, v in (sample.largest_runnable or {}).items()}
    totals = {
        "pending": sum(c.pending for c in counts),
        "running": sum(c.running for c in counts),
        "finished": sum(c.finished for c in counts),
    }
    return {
        "sample": sample,
        "numbers": _numbers(sample, totals),
        "largest_runnable": sorted(largest.items()),
        "team_counts": counts,
        "totals": totals,
        "queue_usage": usage,
        # The viewer's own teams are marked in the tables (None: a platform admin, every team is theirs).
        "my_teams": None if team_ids is None else set(
            access.visible_teams(request.user).values_list("name", flat=True)),
        "cycle": queries.latest_cycle(),
        "figures": {
            "rates": figures.rates_figure(series),
            "queues": figures.queue_usage_figure(queries.queue_series(since=since)),
            "teams": figures.team_jobs_figure([c for c in counts if c.pending or c.running]),
        },
    }


@login_required
@require_safe
@html_only("/cluster/metrics.json (this page's numbers and charts)", "/api/v1/cluster-metrics/ (the REST API)")
def cluster(request):
    from .views_dashboards import page_bad_request, query_errors

    errors = query_errors(request, page=True)  # an unknown or repeated parameter: a 400 naming it (page_takes)
    if errors:
        return page_bad_request(request, errors)
    if is_manager():  # no nodes of its own: every figure here would read 0; say so and lead to /federation/
        return render(request, "frontend/cluster.html", {"federation": _federation_counts()})
    return render(request, "frontend/cluster.html", _cluster_context(request))


def _federation_counts() -> dict:
    """A federation manager's cluster page: its member clusters and its federated jobs now (every team's, as the
    cluster page counts every team's jobs: numbers only, no job details). new-user trial 25, federation 2: the
    page read '0 running · 0 pending' and quota 0 of 8 while a federated job ran on a member."""
    from django.db.models import Count

    from gpuplatform.models import FederatedJob, MemberCluster

    with queries.one_snapshot():  # one moment for the page and for metrics.json's `federation`
        states = dict(FederatedJob.objects.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
        return {"clusters": MemberCluster.objects.count(),
                "healthy": MemberCluster.objects.filter(state=MemberCluster.State.HEALTHY).count(),
                "running": states.get("running", 0),
                "pending": sum(states.get(s, 0) for s in ("pending", "dispatching", "dispatched")),
                "lost": states.get("lost", 0)}


@never_cache
@require_GET  # before the session and CSRF checks: a wrong method is a 405 with Allow (new-user trial 12, F12)
@login_required_json
@conditional_json
def cluster_metrics(request):
    """What the cluster page polls: the numbers, table fragments and the figure dicts; `cursor` and, with
    ?since=<cursor>, only the charts' new points (frontend/delta.py; a malformed `since` is a 400, and so is any
    other parameter or one given twice: views_dashboards.query_errors; it has no `table`). `federation_manager`
    says whether this instance is a federation manager (no nodes of its own: the local keys read 0 there, kept so a
    poller reads the same shape); on one, `federation` is what its cluster page shows instead: the member clusters
    and the federated jobs now (_federation_counts)."""
    from .views_dashboards import query_errors, table_error

    errors = query_errors(request, ("since",))
    if errors is None and request.GET.get("format", "json") != "json":
        errors = {"format": ["must be json (this endpoint has no CSV)"]}
    if errors is None and request.GET.get("table") is not None:  # read, then ignored (new-user trial 12, F3)
        errors = table_error(request.GET["table"], None)
    if errors:
        return JsonResponse(errors, status=400)
    ctx = _cluster_context(request)
    cycle = ctx["cycle"]
    payload = {
        "clock": cycle.clock.isoformat() if cycle else None,
        "cycle": cycle.number if cycle else None,
        "cycle_ms": round(cycle.duration_ms, 1) if cycle else None,
        # that cycle's own figures (the header's); numbers.jobs_* are live counts (new-user trial 9, F4)
        "cycle_started": cycle.binds if cycle else None,
        "cycle_pending": cycle.pending if cycle else None,
        "numbers": ctx["numbers"],
        "largest_runnable": {str(t): g for t, g in ctx["largest_runnable"]},
        "html": {
            "largest": render_to_string("frontend/_largest_runnable.html", ctx, request=request),
            "teams": render_to_string("frontend/_team_counts.html", ctx, request=request),
            "queues": render_to_string("frontend/_queue_usage.html", ctx, request=request),
        },
        "figures": ctx["figures"],
        "federation_manager": is_manager(),
    }
    if payload["federation_manager"]:
        payload["federation"] = _federation_counts()
    try:
        return JsonResponse(with_since(request, payload))
    except BadSince as exc:
        return JsonResponse({"since": [str(exc)]}, status=400)


JOB_COLUMNS = [  # (sort key, header, numeric)
    ("name", "job", False), ("team", "team", False), ("queue", "queue", False), ("state", "state", False),
    ("gpus", "GPUs", True), (None, "tasks × GPUs", False), ("submitted", "submitted", False),
    ("started", "started", False), ("finished", "finished", False), ("duration", "duration", True),
    (None, "placement", False), (None, "nodes", False), (None, "pending reason", False),
]
PENDING_HIDDEN_COLUMNS = frozenset({"finished", "duration", "placement", "nodes"})  # empty for a pending job


@login_required
@require_safe  # a page: GET / HEAD only (DELETE /jobs/ answered the list: trial 9, F12)
@html_only("/api/v1/jobs/ (the REST API)")
def job_list(request):
    """The jobs page: search (id, name, external id), filters (team, state, queue, submitter), sort by any
    sortable column (?sort=-duration), keyset pages (?cursor=, from the next / previous links). It updates
    in place while open (live.js fetches it again every 5 s). On a federation manager (no local jobs) the
    jobs are federated ones: redirect to /federation/, which lists them."""
    if is_manager():
        return redirect("federation")
    filters = {k: (request.GET.get(k) or "").strip() for k in ("q", "team", "queue", "submitter")}
    # `state` is repeatable, as on the jobs API (`?state=pending&state=running` lists both; new-user trial 11, F14)
    filters["state"] = list(dict.fromkeys(v.strip() for v in request.GET.getlist("state") if v.strip()))
    errors = job_list_errors(request, filters)
    qs = queries.job_list(request.user, team=filters["team"] or None, state=filters["state"] or None,
                          queue=filters["queue"] or None, submitter=filters["submitter"] or None,
                          search=filters["q"] or None)
    if errors:
        qs = qs.none()  # a typo'd filter lists nothing and says why, never the whole cluster
    page = job_paging.keyset_page(qs, sort=request.GET.get("sort"), cursor=request.GET.get("cursor"),
                                  limit=JOBS_PER_PAGE)
    # A search for a job id shows that job first (new-user report 7 F11: ?q=321 listed 50 philly-321xx jobs
    # and not job #321), on the first page; the rest keep the chosen order.
    page_rows = list(page.rows)
    text = filters["q"].lstrip("#")
    if whole_number(text) is not None and len(text) < 18 and not request.GET.get("cursor"):
        exact = next((j for j in page_rows if j.pk == int(text)), None) or qs.filter(pk=int(text)).first()
        if exact is not None:
            page_rows = [exact] + [j for j in page_rows if j.pk != exact.pk]
    rows = []
    for j in page_rows:
        duration = (j.finished_at - j.started_at).total_seconds() if j.finished_at and j.started_at else None
        rows.append({"job": j, "gpus": from_milli(j.gpus_milli), "shape": queries.shape(j), "nodes": queries.node_names(j), "duration": duration})
    base = {k: v for k, v in filters.items() if v}
    sort_value = ("-" if page.descending else "") + page.sort
    # Pending jobs have no finish, duration, placement or nodes: those columns go, so the pending reason is
    # on screen at 1400 px (new-user report 7 F8).
    hidden = PENDING_HIDDEN_COLUMNS if filters["state"] == ["pending"] else frozenset()
    columns = []
    for key, label, numeric in JOB_COLUMNS:
        if label in hidden:
            continue
        link = None
        if key:
            flip = f"-{key}" if (page.sort == key and not page.descending) else key  # first click: ascending
            link = "?" + urlencode({**base, "sort": flip}, doseq=True)
        columns.append({"key": key, "label": label, "numeric": numeric, "link": link,
                        "active": page.sort == key, "descending": page.descending})
    here = {**base, "sort": sort_value}
    visible_teams = access.visible_teams(request.user).order_by("name").values_list("name", flat=True)
    return render(request, "frontend/job_list.html", status=400 if errors else 200, context={
        "page": page,
        "rows": rows,
        "count": qs.count(),
        "columns": columns,
        "hide": {label: True for label in hidden},
        "filters": filters,
        "sort": sort_value,
        "teams": visible_teams,
        "queues": access.visible_queues(request.user).filter(team__isnull=False).order_by("name")
                  .values_list("name", flat=True),
        "submitters": get_user_model().objects.filter(job__in=access.visible_jobs(request.user)).distinct()
                      .order_by("username").values_list("username", flat=True)[:500],
        "states": list(JOB_LIST_STATES),
        "next_url": "?" + urlencode({**here, "cursor": page.next_cursor}, doseq=True) if page.next_cursor else None,
        "previous_url": ("?" + urlencode({**here, "cursor": page.previous_cursor}, doseq=True)
                         if page.previous_cursor else None),
        "first_url": "?" + urlencode(here, doseq=True) if request.GET.get("cursor") else None,
        "filtered": any(filters.values()) or bool(errors),
        "filter_errors": errors,
        "idle_ids": set(IdleAllocation.objects.filter(ended_at__isnull=True, job_id__in=[r["job"].pk for r in rows])
                        .values_list("job_id", flat=True)),
    })


JOB_LIST_PARAMS = ("cursor", "q", "queue", "sort", "state", "submitter", "team")
JOB_LIST_STATES = (*Job.State.values, *Job.STOPPING_WORDS, "live", "finished")


def job_list_errors(request, filters: dict) -> list[str]:
    """The jobs page's filter and sort values it cannot read, as "param: rule" lines (the page shows them
    above an empty list, with a 400): a state or sort column that does not exist, or a parameter given twice
    (the REST API's rules, docs/api.md; new-user trial 7, F2/F3), a team, queue or submitter that names
    nothing (api.filters.unknown_name, the API's NamedFilter wording), a cursor this list did not make
    (new-user trial 9, F7)."""
    from gpuplatform.api.filters import repeated_params, unknown_name
    from gpuplatform.models import Queue, Team

    errors = [f"{name}: {' '.join(m)}" for name, m in repeated_params(request.GET, multi=("state",)).items()]
    # a parameter the page does not read is refused, as on the nodes and topology pages (new-user trial 14, F14:
    # ?submitted_after=, a jobs API filter, listed every job)
    errors += [f"{name[:40]}: unknown query parameter; this page takes: {', '.join(JOB_LIST_PARAMS)}"
               for name in sorted(set(request.GET) - set(JOB_LIST_PARAMS))]
    for state in filters["state"]:
        if state not in JOB_LIST_STATES:
            errors.append(f"state: unknown state {state[:40]!r}; one of {', '.join(JOB_LIST_STATES)}")
    team = filters["team"]
    if team and unknown_name(Team, "slug", team, "team") and unknown_name(Team, "name", team, "team"):
        errors.append(f"team: {unknown_name(Team, 'name', team, 'team')}")
    # a user name is checked for admins only (api.filters.NamedFilter._may_tell: a non-admin is not told who has
    # an account; an unknown one just lists nothing)
    names = (("queue", Queue, "name", "queue"),) + ((("submitter", get_user_model(), "username", "user"),)
                                                    if request.user.is_staff else ())
    for param, model, lookup, what in names:
        error = filters[param] and unknown_name(model, lookup, filters[param], what)
        if error:
            errors.append(f"{param}: {error}")
    sort = (request.GET.get("sort") or "").strip()
    if sort and sort.lstrip("-") not in job_paging.SORTS:
        errors.append(f"sort: unknown column {sort[:40]!r}; one of {', '.join(job_paging.SORTS)} "
                      f"(a leading - sorts descending)")
    elif job_paging.cursor_error(request.GET.get("cursor"), sort):
        errors.append(job_paging.cursor_error(request.GET.get("cursor"), sort))
    return errors


# Event kinds that change a job's state, and the state they lead to (the job page's state history).
HISTORY_KINDS = {
    "submitted": "pending", "admitted": "admitted", "running": "running", "preempted": "preempting",
    "reclaimed": "preempting", "evicted": "preempting", "requeued": "pending", "requeued_after_failure": "pending",
    "gang_start_timeout": "pending", "cancel_requested": "preempting", "cancelled": "cancelled", "succeeded": "succeeded", "failed": "failed",
}


def state_history(job, events) -> list[dict]:
    """The job's states over time, oldest first, from its events (its timestamps when events are missing)."""
    out = [{"state": HISTORY_KINDS[e.kind], "time": e.time, "note": e.message}
           for e in sorted(events, key=lambda e: (e.time, e.id)) if e.kind in HISTORY_KINDS]
    for h in out:  # tasks that start at binding (TASKS_START_IMMEDIATELY) report no separate "running"
        if h["state"] == "admitted" and job.started_at and job.bound_at and job.started_at <= h["time"] \
                and not any(x["state"] == "running" for x in out):
            h["state"] = "running"
    if not out or out[0]["state"] != "pending":
        out.insert(0, {"state": "pending", "time": job.submitted_at, "note": "submitted"})
    if job.started_at and not any(h["state"] in ("admitted", "running") for h in out):
        out.append({"state": "running", "time": job.started_at, "note": "started"})
    if job.finished_at and out[-1]["state"] != job.state:
        out.append({"state": job.state, "time": job.finished_at, "note": ""})
    return out


@login_required
@require_safe
@html_only("/api/v1/jobs/{pk}/ (the REST API; its log: /api/v1/jobs/{pk}/logs/)")
def job_detail(request, pk: int):
    from .views_dashboards import page_bad_request, query_errors

    errors = query_errors(request, page=True)  # it reads no parameter: one given is a 400 naming it (trial 14, F14)
    if errors:
        return page_bad_request(request, errors)
    if is_manager():  # a federated job: its row on /federation/ (where it went, why, its state)
        if not visible_federated_jobs(request.user).filter(pk=pk).exists():
            raise Http404("No such federated job, or not one of your teams' jobs.")
        return redirect(reverse("federation") + f"#fed-job-{pk}")
    job = queries.job_detail(request.user, pk)
    if job is None:
        raise Http404("No such job, or not one of your teams' jobs.")
    allocations = list(job.allocations.all())
    events = list(queries.job_events(job))
    visible = access.visible_team_ids(request.user)
    for e in events:  # other teams' jobs named in an event read "a job of team X" (event_visibility.py)
        e.message, e.data = redacted(e.message, e.data, visible)
    roles = list(job.roles.all())
    tasks = job_run.task_rows(job.tasks.all())
    diagnosis = job_run.diagnosis_view(job, job.tasks.all())
    use = task_summary([r["task"].pk for r in tasks])  # GPU use per task (telemetry; absent: "no telemetry")
    for r in tasks:
        r["gpu_use"] = use.get(r["task"].pk)
    return render(request, "frontend/job_detail.html", {
        "job": job,
        "shown": shown_estimate(job),  # its one start estimate: the cycle's reservation or the forecast's (trial 26, F6)
        "diagnosis": diagnosis,
        "highlight": diagnosis["highlight"] if diagnosis else None,
        "attempts": job_run.attempt_rows(job),
        "roles": roles,
        "gpus": job_gpus(job),  # GPU-equivalents, as the API's `gpus` (1 + 2 x 0.25 = 1.5)
        "gpu_request": gpu_request(roles),
        "tasks": tasks,
        "runs": job_run.run_groups(roles),
        "stop_text": job_run.stop_text(job),
        "job_exit": job_run.exit_text(job.exit_code, job.exit_signal),
        "ended": job.state in Job.FINAL_STATES,
        # The log view polls GET /api/v1/jobs/{id}/logs/?task=&offset= (session auth); a simulated job has no output.
        "logs_url": reverse("api:job-logs", args=[job.pk]),
        "show_logs": bool(tasks) and not job.simulated,
        "allocations": allocations,
        "live_allocations": sum(1 for a in allocations if a.released_at is None),
        "nodes": queries.node_names(job),
        **_run_time(job),
        "time_limit": human_seconds(job.time_limit_seconds),
        "events": events,
        "history": state_history(job, events),
        "can_cancel": job.state not in Job.FINAL_STATES and can_act(request.user, job),
        "show_map": bool(job.placement_domain) and job.state in Job.LIVE_STATES,
        # The placement domain may be the engine's synthetic root ("cluster": a gang across domainless nodes,
        # or across top-level domains), which the map shows at its top level, not as a zoom (new-user trial 14, F8).
        "map_zoom": job.placement_domain if job.placement_domain and zoom_exists(job.placement_domain) else "",
        "state_colors": STATE_COLORS,
        "idle": IdleAllocation.objects.filter(job=job, ended_at__isnull=True).first(),
    })


def _run_time(job) -> dict:
    """The job page's run time: a replayed trace job's own duration; else started -> finished, or started ->
    now (the cluster clock) while it runs; "—" before it started (new-user report 7, F22)."""
    if job.duration_seconds is not None:
        return {"run_time": human_seconds(job.duration_seconds), "run_time_note": "replayed workload"}
    if job.started_at is None:
        return {"run_time": "—", "run_time_note": ""}
    if job.finished_at is not None:
        return {"run_time": human_seconds(max(0.0, (job.finished_at - job.started_at).total_seconds())),
                "run_time_note": "started to finished"}
    return {"run_time": human_seconds(max(0.0, (clock.now() - job.started_at).total_seconds())),
            "run_time_note": "since it started"}


@never_cache
@csrf_exempt  # takes no unsafe method: a POST is the 405 below, not Django's HTML CSRF page
@require_safe  # GET / HEAD; another method is a 405 with Allow (new-user trial 11, F15: POST answered 200)
def healthz(request):
    """200 when the database answers (the web container's health check); no login. The database alone:
    a broker outage does not make the web tier unhealthy (see `readyz` for every dependency)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return HttpResponse(f"database unavailable: {exc.__class__.__name__}\n", status=503,
                            content_type="text/plain")
    return HttpResponse("ok\n", content_type="text/plain")


NODE_HEALTH_FILTERS = ("ready", "cordoned", "draining", "not_ready", "in_repair", "validating", "unhealthy",
                       "mismatch", "spare")


@login_required
@require_safe
@html_only("/api/v1/nodes/ (the REST API)")
def node_list(request):
    """The nodes with their health: state, why and since when it is out of service, unhealthy GPUs, topology
    mismatches; filtered by `health` (a node state, "unhealthy": a GPU unhealthy or a health reason set,
    "mismatch": the topology audit found something, "spare": hot spares). Readable by every signed-in user, as /api/v1/nodes/ is."""
    from django.core.paginator import Paginator
    from django.db.models import Count, Q

    from gpuplatform.models import Node

    from gpuplatform.api.filters import repeated_params

    health = request.GET.get("health") or ""
    # a filter the page cannot read is a 400 saying so above an empty table, never every node (trial 9, F7)
    errors = [f"{name}: {' '.join(m)}" for name, m in repeated_params(request.GET).items()]
    errors += [f"{name}: unknown query parameter; this page takes: health, page"
               for name in sorted(set(request.GET) - {"health", "page"})]
    if health and health not in NODE_HEALTH_FILTERS:
        errors.append(f"health: unknown filter {health[:40]!r}; one of {', '.join(NODE_HEALTH_FILTERS)}")
        health = ""
    number = request.GET.get("page") or "1"
    if not (len(number) < 10 and (whole_number(number) or 0) >= 1):  # ASCII digits: '\u00b2'.isdigit() was a 500
        errors.append("page: a page number is a whole number from 1")
    qs = (Node.objects.select_related("domain").order_by("name")
          .annotate(unhealthy_gpus=Count("gpus", filter=Q(gpus__health="unhealthy"))))
    if health == "unhealthy":
        qs = qs.filter(Q(unhealthy_gpus__gt=0) | ~Q(health_reason=""))
    elif health == "mismatch":
        qs = qs.exclude(topology_mismatches=[])
    elif health == "spare":
        qs = qs.filter(spare=True)
    elif health:
        qs = qs.filter(state=health)
    counts = dict(Node.objects.values("state").annotate(n=Count("id")).values_list("state", "n"))
    # Natural order of names (m2 before m10, new-user report 7 F12): sorted here, then the page's rows read.
    from .topology import natural_key

    order = [pk for pk, _ in sorted(qs.values_list("id", "name"), key=lambda r: natural_key(r[1]))]
    paginator = Paginator([] if errors else order, 200)
    if not errors and whole_number(number) > paginator.num_pages:  # not the last page in its place (trial 23)
        errors.append(f"page: a page number is a whole number from 1 to {paginator.num_pages}")
        paginator = Paginator([], 200)
    page = paginator.get_page(1 if errors else number)
    rows = {n.pk: n for n in qs.filter(pk__in=list(page.object_list))}
    page.object_list = [rows[pk] for pk in page.object_list if pk in rows]
    return render(request, "frontend/node_list.html", status=400 if errors else 200, context={
        "page": page, "health": health, "filters": NODE_HEALTH_FILTERS, "counts": counts, "filter_errors": errors,
        "mismatches": [n for n in Node.objects.exclude(topology_mismatches=[]).order_by("name")[:100]],
    })


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


def _check_redis() -> str:
    from django.conf import settings

    if not settings.REDIS_URL:
        return "not configured (in-process scheduling loop)"
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
    finally:
        client.close()
    return "ok"


@never_cache
@csrf_exempt
@require_safe
def readyz(request):
    """Readiness, per dependency: {"database": "ok" | "unavailable: <error>", "redis": ..., "scheduler": "ok" |
    "stalled: <why>", "ready": bool}; 200 when every configured dependency answers, else 503 (with Retry-After);
    a stalled scheduler is reported but leaves `ready` as it is (liveness module). No login; each check is
    bounded (PostgreSQL connect_timeout, Redis 0.5 s)."""
    checks, ready = {}, True
    for name, check in (("database", _check_database), ("redis", _check_redis)):
        try:
            checks[name] = check()
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            checks[name], ready = f"unavailable: {exc.__class__.__name__}", False
    if checks["database"] == "ok":
        # Whether cycles run (new-user trial 14, F10). Reported, not part of `ready`: this probe is the web
        # tier's, which serves (and shows the stall on every page) whether or not the scheduler worker runs.
        from gpuplatform.scheduling.liveness import cycle_stall

        stall = cycle_stall()
        checks["scheduler"] = f"stalled: {stall}" if stall else "ok"
    response = JsonResponse({**checks, "ready": ready}, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = "5"
    return response
