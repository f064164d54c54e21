"""The dashboards: topology map, queue watermarks, fragmentation curve, queueing. Each page renders its
first figures server-side and polls a JSON endpoint (the same data, `?format=csv` for the numbers behind
the charts). Reads: gpuplatform.dashboard_queries; figures: frontend.topology, frontend.dashboard_figures.
"""
from __future__ import annotations

import csv
import io

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from gpuplatform import dashboard_queries as dq
from gpuplatform import access, queries
from gpuplatform.models import Team

from . import dashboard_figures as dfig
from .states import GPU_STATE_COLORS
from .topology import BORROWED_DEFINITION, topology_payload

POINTS = 400


def data_response(request, payload: dict, rows: list[dict], name: str):
    """JSON (default) or, with ?format=csv, the rows behind the charts as CSV."""
    if request.GET.get("format") == "csv":
        out = io.StringIO()
        fields = list(rows[0]) if rows else ["empty"]
        writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return response
    return JsonResponse(payload, json_dumps_params={"separators": (",", ":")})


def _json_view(fn):
    return never_cache(login_required(require_GET(fn)))


# --- topology ---------------------------------------------------------------------------------------

def build_topology(user, *, zoom=None, team=None, flavor=None, job=None) -> dict:
    """The /topology.json payload: flat queries, then the pure builder. Raises Http404 for an unknown
    domain or a job the user may not see."""
    domains = dq.domains()
    if job is not None and not access.visible_jobs(user).filter(pk=job).exists():
        raise Http404("No such job, or not one of your teams' jobs.")
    scope = None
    if zoom:
        tree = queries.domain_tree(domains)
        root = next((k for k, d in tree.rows.items() if d[1] == zoom), None)
        if root is None:
            raise Http404(f"No domain named {zoom}.")
        scope = tree.subtree(root)
    return topology_payload(domains=domains, gpus=dq.topology_gpus(scope, flavor), allocations=dq.live_allocations(),
                            jobs=dq.live_jobs(), quotas=dq.queue_quotas(), zoom=zoom, team=team, job=job,
                            visible_team_ids=access.visible_team_ids(user))


def _topology_params(request) -> dict:
    job = request.GET.get("job") or None
    try:
        job = int(job) if job else None
    except ValueError:
        raise Http404("job must be a job id") from None
    return {"zoom": request.GET.get("zoom") or None, "team": request.GET.get("team") or None,
            "flavor": request.GET.get("flavor") or None, "job": job}


@_json_view
def topology_json(request):
    payload = build_topology(request.user, **_topology_params(request))
    return data_response(request, payload, payload["rows"], "topology")


@login_required
def topology(request):
    params = _topology_params(request)
    domains = sorted(dq.domains(), key=lambda d: (-d[2], d[1]))
    return render(request, "frontend/topology.html", {
        "params": {k: v or "" for k, v in params.items()},
        "domains": [{"name": d[1], "tier": d[2]} for d in domains],
        # Team names are public (the cluster page shows every team's counts); job names are not.
        "teams": list(Team.objects.order_by("name").values_list("name", flat=True)),
        "flavors": dq.flavors(),
        "gpu_colors": GPU_STATE_COLORS,
        "borrowed_definition": BORROWED_DEFINITION,
    })


# --- queue watermarks -------------------------------------------------------------------------------

def _queues_payload() -> dict:
    tree = dq.queue_tree()
    leaves = [q for q in tree.rows.values() if q["team_name"]]
    figures, rows = {}, []
    since = None
    for q in leaves:
        series = dq.watermark_series(q["id"], limit=POINTS)
        figures[f"q{q['id']}"] = dfig.watermark_figure(q["name"], series)
        rows += [{"queue": q["name"], **s, "time": s["time"].isoformat()} for s in series]
        since = since or (series[0]["time"] if series else None)
    ordered = []
    for qid, depth in tree.walk():
        q = tree.rows[qid]
        s = q["sample"]
        ordered.append({**q, "depth": depth, "borrowed": max(0, s["used"] - s["quota"]) if s else 0})
    return {"figures": figures, "tree": ordered, "rows": rows, "leaves": leaves}


@_json_view
def queues_json(request):
    p = _queues_payload()
    html = render_to_string("frontend/_queue_tree.html", {"tree": p["tree"]}, request=request)
    return data_response(request, {"figures": p["figures"], "html": {"queue-tree": html}}, p["rows"], "queue-watermarks")


@login_required
def queues_page(request):
    p = _queues_payload()
    return render(request, "frontend/queues.html", {**p, "gpu_colors": GPU_STATE_COLORS})


# --- fragmentation ----------------------------------------------------------------------------------

def _fragmentation_payload() -> dict:
    series = dq.fragmentation_series(limit=POINTS)
    rows = [{"time": s["time"].isoformat(), "fragmentation_rate": s["fragmentation_rate"], "free_gpus": s["free_gpus"],
             "domain_completeness": s["domain_completeness"],
             **{f"largest_runnable_tier{t}": g for t, g in sorted((s["largest_runnable"] or {}).items())}}
            for s in series]
    return {"figures": dfig.fragmentation_figures(series), "rows": rows, "latest": rows[-1] if rows else None}


@_json_view
def fragmentation_json(request):
    p = _fragmentation_payload()
    return data_response(request, {"figures": p["figures"], "latest": p["latest"]}, p["rows"], "fragmentation")


@login_required
def fragmentation_page(request):
    from gpuplatform.scheduling.advice import fragmentation_advice

    return render(request, "frontend/fragmentation.html", {
        **_fragmentation_payload(), "advice": fragmentation_advice(),
        "can_move": access.is_platform_admin(request.user)})


# --- queueing ---------------------------------------------------------------------------------------

def _queueing_payload(user) -> dict:
    waits = dq.wait_times()
    order = dq.pending_jobs()
    visible = access.visible_team_ids(user)
    shown = [j for j in order if visible is None or j["team_id"] in visible][:200]
    return {"figures": dfig.wait_figures(waits), "summary": dfig.wait_summary(waits), "pending": shown,
            "pending_total": len(order), "rows": [{"team": w["team"], "gpus": w["gpus"],
                                                   "wait_seconds": w["wait_seconds"]} for w in waits]}


@_json_view
def queueing_json(request):
    p = _queueing_payload(request.user)
    if request.GET.get("table") == "pending":
        rows = [{k: j[k] for k in ("position", "queue_position", "name", "team_name", "queue_name", "gpus", "priority",
                                   "submitted_at", "estimated_start", "pending_reason")} for j in p["pending"]]
    else:
        rows = p["rows"]
    html = render_to_string("frontend/_pending.html", p, request=request)
    return data_response(request, {"figures": p["figures"], "summary": p["summary"], "html": {"pending-list": html}},
                         rows, "queueing")


@login_required
def queueing_page(request):
    return render(request, "frontend/queueing.html", _queueing_payload(request.user))
