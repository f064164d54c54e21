"""Server-rendered pages: the cluster dashboard, the job list and a job's detail; plus health and metrics JSON.

Reads come from gpuplatform.queries, figures from frontend.figures; views only glue them together.
"""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from gpuplatform import access, queries
from gpuplatform.models import Job

from . import figures, job_run
from .states import STATE_COLORS
from .views_jobs import can_act

JOBS_PER_PAGE = 50
SERIES_POINTS = 600


def human_seconds(seconds: float | None) -> str:
    """3725 -> '1h 2m'; 443841 -> '5d 3h 17m'; None -> '—'."""
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days}d"] if days else []
    if hours or days:
        parts.append(f"{hours}h")
    parts.append(f"{minutes}m")
    return " ".join(parts)


def _pct(x):
    return None if x is None else round(100 * x, 1)


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
def cluster(request):
    return render(request, "frontend/cluster.html", _cluster_context(request))




@never_cache
@login_required
@require_GET
def cluster_metrics(request):
    """What the cluster page polls: the numbers, two table fragments and the figure dicts."""
    ctx = _cluster_context(request)
    cycle = ctx["cycle"]
    payload = {
        "clock": cycle.clock.isoformat() if cycle else None,
        "cycle": cycle.number if cycle else None,
        "cycle_ms": round(cycle.duration_ms, 1) if cycle else None,
        "numbers": ctx["numbers"],
        "largest_runnable": {str(t): g for t, g in ctx["largest_runnable"]},
        "html": {
            "largest": render_to_string("frontend/_largest_runnable.html", ctx, request=request),
            "teams": render_to_string("frontend/_team_counts.html", ctx, request=request),
            "queues": render_to_string("frontend/_queue_usage.html", ctx, request=request),
        },
        "figures": ctx["figures"],
    }
    return JsonResponse(payload)


@login_required
def job_list(request):
    team = request.GET.get("team") or None
    state = request.GET.get("state") or None
    queue = request.GET.get("queue") or None
    qs = queries.job_list(request.user, team=team, state=state, queue=queue)
    page = Paginator(qs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [{"job": j, "shape": queries.shape(j), "nodes": queries.node_names(j)} for j in page.object_list]
    params = request.GET.copy()
    params.pop("page", None)
    return render(request, "frontend/job_list.html", {
        "page": page,
        "rows": rows,
        "filters": {"team": team or "", "state": state or "", "queue": queue or ""},
        "teams": access.visible_teams(request.user).order_by("name").values_list("name", flat=True),
        "queues": access.visible_queues(request.user).filter(team__isnull=False).order_by("name")
                  .values_list("name", flat=True),
        "states": [*Job.State.values, "live", "finished"],
        "query_string": params.urlencode(),
    })


# Event kinds that change a job's state, and the state they lead to (the job page's state history).
HISTORY_KINDS = {
    "submitted": "pending", "admitted": "admitted", "running": "running", "preempted": "preempting",
    "reclaimed": "preempting", "evicted": "preempting", "requeued": "pending", "requeued_after_failure": "pending",
    "gang_start_timeout": "pending", "cancelled": "cancelled", "succeeded": "succeeded", "failed": "failed",
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
def job_detail(request, pk: int):
    job = queries.job_detail(request.user, pk)
    if job is None:
        raise Http404("No such job, or not one of your teams' jobs.")
    allocations = list(job.allocations.all())
    events = list(queries.job_events(job))
    roles = list(job.roles.all())
    tasks = job_run.task_rows(job.tasks.all())
    return render(request, "frontend/job_detail.html", {
        "job": job,
        "roles": roles,
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
        "run_time": human_seconds(job.duration_seconds),
        "time_limit": human_seconds(job.time_limit_seconds),
        "events": events,
        "history": state_history(job, events),
        "can_cancel": job.state not in Job.FINAL_STATES and can_act(request.user, job),
        "show_map": bool(job.placement_domain) and job.state in Job.LIVE_STATES,
        "map_zoom": job.placement_domain,
        "state_colors": STATE_COLORS,
    })


@never_cache
def healthz(request):
    """200 when the database answers (the web container's health check); no login."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return HttpResponse(f"database unavailable: {exc.__class__.__name__}\n", status=503,
                            content_type="text/plain")
    return HttpResponse("ok\n", content_type="text/plain")
