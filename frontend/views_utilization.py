"""The Utilization page: where the cluster's GPU-hours went (the GPU-hour ledger, DESIGN section 14), as a
stacked area of the buckets over time with the effective-utilization line, the totals, the top idle
allocations and the top jobs by GPU-hours lost to failure; filters by flavor, queue and team. It reads
gpuplatform.utilization (the same function GET /api/v1/utilization/ answers from) and polls data.json."""
from __future__ import annotations

from datetime import timedelta, timezone
from urllib.parse import urlencode

from django.core.cache import cache
from django.http import HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.http import require_safe

from gpuplatform import access, clock
from gpuplatform.inputs import html_only
from gpuplatform.login import login_required
from gpuplatform.models import Node, Queue, Team
from gpuplatform.telemetry import idle_allocations
from gpuplatform.utilization import records_since, top_jobs_lost_to_failure, utilization
from scheduler.core.gpu_hours import BUCKETS

from .figures import _layout
from .views_dashboards import _json_view, data_response, page_team, query_errors, unknown_name

WINDOWS = {"6h": timedelta(hours=6), "24h": timedelta(days=1), "7d": timedelta(days=7)}
BINS = 48
MIN_STEP_SECONDS = 60.0  # the finest bin the page draws (the API's own step=60)


def ledger_step(since, until) -> float:
    """The page's bin in seconds: the span the ledger has records for, split in BINS, at least MIN_STEP_SECONDS.
    utilization() starts at the last workload reset when that is inside the window (records_since), so a step taken
    from the whole window put a demo's first minutes into one bin: one x point, an empty chart (trial 23, F5)."""
    start = records_since()
    if start is not None and since < start < until:
        since = start
    return max(MIN_STEP_SECONDS, (until - since).total_seconds() / BINS)
BUCKET_LABELS = {
    "useful": ("useful", "#2ca02c", "allocated to a running task whose work was kept"),
    "idle_allocated": ("idle allocated", "#bcbd22", "running, but the GPUs sat under the idle threshold "
                       "(IDLE_SM_PERCENT for IDLE_MINUTES); needs telemetry"),
    "lost_to_failure": ("lost to failure", "#d62728", "a failed attempt's run (the platform does not know "
                        "checkpoints: its work was not kept), and held GPUs until the failure was handled"),
    "grace_and_startup": ("grace and startup", "#ff7f0e", "from binding to the first progress, and stop grace periods"),
    "held": ("held", "#9467bd", "reserved for a gang or a reservation"),
    "free_fragmented": ("free but fragmented", "#8c564b", "free while a pending job waited (it did not fit)"),
    "free": ("free", "#c7d0d9", "free while nothing waited"),
    "down": ("down", "#7f7f7f", "node not ready / failed, or GPU unhealthy"),
}
EFFECTIVE = "useful / (capacity − down)"
ALLOCATION = "allocated GPUs / schedulable GPUs (latest cycle)"


def _filters(request, team_ids) -> dict:
    queues = Queue.objects.filter(team__isnull=False)
    teams = Team.objects.all()
    if team_ids is not None:
        queues, teams = queues.filter(team_id__in=team_ids), teams.filter(pk__in=team_ids)
    window = request.GET.get("window") if request.GET.get("window") in WINDOWS else "24h"
    return {
        "flavor": request.GET.get("flavor") or "", "queue": request.GET.get("queue") or "",
        "team": page_team(request.GET.get("team")) or "", "window": window,  # a slug or a name: the team's name
        "flavors": sorted(set(Node.objects.values_list("flavor", flat=True))),
        "queues": sorted(queues.values_list("name", flat=True)), "teams": sorted(teams.values_list("name", flat=True)),
        "windows": list(WINDOWS),
    }


def mean_gpus(point: dict, key: str) -> float | None:
    """A bin's mean GPUs in `key` (a bucket or "capacity"): its GPU-hours over the hours of the bin that have data
    (utilization()'s "hours": the window and the nodes' capacity cover them), None for a bin with none. Over the full
    step, the bin still in progress (and a first one that starts at a node's registration) read as the cluster
    emptying: 2.1 of 4 GPUs half a bin in (session 27)."""
    hours = point.get("hours") or 0.0
    return round(point[key] / hours, 3) if hours > 1e-9 else None


def utilization_figure(series: list[dict], step: float | None = None) -> dict:
    """Stacked area of the buckets (mean GPUs in each bin = GPU-hours / the bin's covered hours, mean_gpus: the
    stack sums to the cluster's GPUs in every bin, the last one still in progress included) and the effective
    utilization line (right axis, percent). `step` is unused (kept for callers)."""
    x = [s["time"] for s in series]
    data = []
    for b in ("down",) + tuple(b for b in BUCKETS if b != "down"):
        label, color, _ = BUCKET_LABELS[b]
        data.append({"type": "scatter", "mode": "lines", "name": label, "x": x, "stackgroup": "gpus",
                     "y": [mean_gpus(s, b) for s in series], "line": {"width": 0.5, "color": color},
                     "fillcolor": color, "hovertemplate": "%{y:.1f} GPUs<extra>" + label + "</extra>"})
    eff = [None if s["capacity"] - s["down"] <= 1e-9 else round(100 * s["useful"] / (s["capacity"] - s["down"]), 2)
           for s in series]
    data.append({"type": "scatter", "mode": "lines", "name": "effective utilization", "x": x, "y": eff,
                 "yaxis": "y2", "line": {"width": 2.5, "color": "#111"},
                 "hovertemplate": "%{y:.1f}%<extra>effective utilization</extra>"})
    # The left axis spans [0, capacity] (the most GPUs of any bin), so the right axis' 100 % is the capacity
    # and the line sits at its share of the stack (new-user report 7, F9: an auto-ranged left axis put
    # 84.5 % above the 84.5 %-high useful area).
    capacity = max((c for s in series if (c := mean_gpus(s, "capacity")) is not None), default=0.0)
    yaxis = {"title": {"text": "GPUs (mean per bin)"}}
    if capacity > 0:
        yaxis.update({"range": [0, round(capacity, 3)], "autorange": False})
    layout = _layout("Where the GPU-hours went", yaxis=yaxis, height=380)
    layout["yaxis2"] = {"overlaying": "y", "side": "right", "range": [0, 100], "ticksuffix": "%", "showgrid": False}
    layout["hovermode"] = "x unified"
    layout["margin"] = {"l": 50, "r": 44, "t": 36, "b": 36}
    return {"data": data, "layout": layout}


def _definition(bucket: str, total: dict | None) -> str:
    """A bucket's definition; 'held' says 'none measured' only when its GPU-hours are truly 0 (trial 23: the text
    said 'not measured yet: 0' beside a 0.1 % share)."""
    text = BUCKET_LABELS[bucket][2]
    if bucket == "held" and (total is None or not total.get("held")):
        text += " (none measured in this window: 0)"
    return text


def _payload(request) -> dict:
    team_ids = access.visible_team_ids(request.user)
    f = _filters(request, team_ids)
    now = clock.now()
    since = now - WINDOWS[f["window"]]
    step = ledger_step(since, now)
    limit = team_ids if f["queue"] or f["team"] else None
    res = utilization("cluster", since, now, team_ids=limit, flavor=f["flavor"] or None, queue=f["queue"] or None,
                      team=f["team"] or None, step=step)
    total = res["rows"][0] if res["rows"] else None
    series = res["series"].get("cluster", [])
    buckets = [{"key": b, "label": BUCKET_LABELS[b][0], "color": BUCKET_LABELS[b][1], "definition": _definition(b, total),
                "gpu_hours": None if total is None else round(total[b], 2),
                "share": None if not total or not total["capacity"] else round(100 * total[b] / total["capacity"], 1)}
               for b in BUCKETS]
    eff = None if total is None or total["effective_utilization"] is None else round(100 * total["effective_utilization"], 1)
    return {**f, "figures": {"ledger": utilization_figure(series, step)}, "buckets": buckets, "total": total,
            "effective_utilization": eff, "telemetry": res["telemetry"], "since": res["since"], "until": res["until"],
            "idle": idle_allocations(team_ids, now=now, limit=10),
            "lost": top_jobs_lost_to_failure(since, now, team_ids=team_ids), "effective_definition": EFFECTIVE,
            "rows": [{"time": s["time"], **{b: round(s[b], 4) for b in BUCKETS}, "capacity": round(s["capacity"], 4),
                      "hours": round(s["hours"], 6), **{f"{b}_gpus": mean_gpus(s, b) for b in BUCKETS}}
                     for s in series]}


# the CSV of data.json: each bin's GPU-hours per bucket and capacity, the hours of the bin that have data (the last
# bin is still in progress) and the chart's values, each bucket's mean GPUs over those hours (mean_gpus)
ROW_COLUMNS = ("time", *BUCKETS, "capacity", "hours", *(f"{b}_gpus" for b in BUCKETS))
PARAMS = ("window", "flavor", "queue", "team")  # the page's filters (it passes its own query to data.json)


def _query_errors(request, *, page: bool = False) -> dict | None:
    """A parameter the page does not read, one given twice, or a window outside WINDOWS: {param: [message]}.
    `page`: the HTML page's query (views_dashboards.query_errors: it takes no format, table or since)."""
    errors = query_errors(request, PARAMS, page=page)
    if errors is None and request.GET.get("window") not in (None, "", *WINDOWS):
        errors = {"window": [f"must be one of {', '.join(WINDOWS)}"]}
    if errors is None:  # a filter naming nothing is a 400 naming it, as on topology (new-user trial 8, F10)
        errors = {p: [why] for p in ("team", "queue", "flavor")
                  if request.GET.get(p) and (why := unknown_name(p, request.GET[p]))} or None
    return errors


@_json_view
def utilization_json(request):
    errors = _query_errors(request)
    if errors:
        return JsonResponse(errors, status=400)
    p = _payload(request)
    html = render_to_string("frontend/_utilization_tables.html", p, request=request)
    return data_response(request, {"figures": p["figures"], "latest": {"effective_utilization": p["effective_utilization"]},
                                   "html": {"utilization-tables": html}}, p["rows"], "utilization",
                         columns={None: ROW_COLUMNS})


@login_required
@require_safe
@html_only("/api/v1/utilization/ (the REST API)",
           "/utilization/data.json (the charts' data; ?format=csv for their rows)")
def utilization_page(request):
    errors = _query_errors(request, page=True)
    if errors:  # as the topology page answers a bad parameter
        return HttpResponseBadRequest("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()),
                                      content_type="text/plain; charset=utf-8")
    # data.json (the poller, the JSON and CSV links) gets the page's query without its empty fields: the filter form
    # sends "all" as `team=`, and a JSON endpoint refuses a parameter sent empty (inputs.EMPTY_MESSAGE, trial 20)
    data_query = urlencode([(k, v) for k, values in request.GET.lists() for v in values if v.strip()])
    return render(request, "frontend/utilization.html", {**_payload(request), "data_query": data_query})


def effective_utilization_today() -> float | None:
    """Cluster-wide effective utilization since 00:00 UTC of the cluster clock, percent (one decimal), or
    None before anything was up; cached for 60 s (the cluster page polls every few seconds)."""
    now = clock.now()
    midnight = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if now <= midnight:
        return None
    key = f"effective-utilization-today:{midnight:%Y%m%d}:{int(now.timestamp() // 60)}"

    def compute():
        res = utilization("cluster", midnight, now)
        e = res["rows"][0]["effective_utilization"] if res["rows"] else None
        return "none" if e is None else round(100 * e, 1)
    value = cache.get_or_set(key, compute, 60)
    return None if value == "none" else value

