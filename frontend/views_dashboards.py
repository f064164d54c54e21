"""The dashboards: topology map, queue watermarks, fragmentation curve, queueing. Each page renders its
first figures server-side and polls a JSON endpoint (the same data, `?format=csv` for the numbers behind
the charts). Reads: gpuplatform.dashboard_queries; figures: frontend.topology, frontend.dashboard_figures.
"""
from __future__ import annotations

import csv
import io
import json
from functools import lru_cache, wraps
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpResponse, HttpResponseNotFound, JsonResponse

from scheduler.core.domain_tree import is_node_domain, node_domain, root_name
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_safe

from gpuplatform import dashboard_queries as dq
from gpuplatform import access, queries
from gpuplatform.api.filters import refuse_unknown_params
from gpuplatform.borrowing import borrowed
from gpuplatform.inputs import INT64_MAX, html_only, text_bad_request, whole_number
from gpuplatform.login import login_required
from gpuplatform.models import Queue, Team

from . import dashboard_figures as dfig
from .conditional import conditional_json, login_required_json
from .delta import BadSince, parse_since, with_since
from .states import GPU_STATE_COLORS
from .topology import BORROWED_DEFINITION, TOPOLOGY_COLUMNS, topology_payload

POINTS = 400

# The CSV headers of the pages' tables (data_response's `columns`): an empty table is still a CSV with them.
QUEUE_COLUMNS = ("queue", "time", "used", "held", "guarantee", "quota", "limit", "pending_demand", "fair_share")
FRAGMENTATION_COLUMNS = ("time", "fragmentation_rate", "free_gpus", "domain_completeness")
GROUP_COLUMNS = ("group", "flavor", "node_gpus", "nodes", "free_nodes", "schedulable_gpus", "free_gpus",
                 "largest_runnable", "fragmentation_rate")
WAIT_COLUMNS = ("team", "gpus", "wait_seconds")
FAILURE_COLUMNS = ("category", "failed_attempts", "gpu_hours_lost")


FORMATS = ("json", "csv")


def table_error(table: str, tables: dict | None) -> dict:
    """The 400 body for a `table` an endpoint does not have: the pages' JSON endpoints' one answer."""
    takes = f"one of {', '.join(sorted(tables))}" if tables else "none here (this endpoint has one table)"
    return {"table": [f"unknown table {table!r}; takes {takes}"]}


def data_response(request, payload: dict, rows: list[dict], name: str, tables: dict[str, list[dict]] | None = None,
                  *, columns: dict[str | None, tuple[str, ...]]):
    """JSON (default) or, with ?format=csv, the rows behind the charts as CSV (with ?table=<name>, the rows of
    one of `tables` instead, every one; ?table=<name> without format=csv: those rows as JSON, {table, count, rows}).
    `columns`: each table's header (key None: `rows`', the charts' table), written even when it has no rows: an
    empty CSV is its header row, never a one-column "empty" (new-user trial 11, F16); a table given no header is a
    programming error (KeyError). JSON carries `cursor` and, with ?since=<cursor>, only the time-series figures'
    new points (frontend/delta.py). A malformed `since`, a `format` other than json / csv or a `table` this
    endpoint does not have is a 400 naming the parameter and what it takes (never the default silently), in every
    form: the CSV and a table's rows, which carry every row whatever `since`, refuse a malformed one as the JSON
    does, with its words (`/queues/data.json?format=csv&since=garbage` answered 200 with the CSV; session 27)."""
    fmt, table = request.GET.get("format", "json"), request.GET.get("table")
    if fmt not in FORMATS:
        return JsonResponse({"format": [f"must be one of {', '.join(FORMATS)}"]}, status=400)
    try:
        parse_since(request.GET.get("since"))
    except BadSince as exc:
        return JsonResponse({"since": [str(exc)]}, status=400)
    if table is not None:
        if table not in (tables or {}):
            return JsonResponse(table_error(table, tables), status=400)
        rows = tables[table]
    if fmt == "json" and table is not None:  # one table's rows, all of them, as JSON (the CSV's rows)
        return JsonResponse({"table": table, "count": len(rows), "rows": rows},
                            json_dumps_params={"separators": (",", ":")})
    if fmt == "csv":
        out = io.StringIO()
        header = columns[table]
        # the header's columns, then any other a row has (a flavor's FGD column starts with the first cycle that
        # measures it), in first-seen order
        fields = list(dict.fromkeys([*header, *(k for r in rows for k in r)]))
        writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return response
    try:
        payload = with_since(request, payload)
    except BadSince as exc:
        return JsonResponse({"since": [str(exc)]}, status=400)
    return JsonResponse(payload, json_dumps_params={"separators": (",", ":")})


def _json_view(fn):
    """A polled JSON view: GET only (another method is a 405 with Allow before the session and CSRF checks: it
    changes nothing, new-user trial 12, F12), signed in (else a JSON 401), never cached by proxies, ETag / 304
    when unchanged."""
    return never_cache(require_GET(login_required_json(conditional_json(fn))))


DATA_PARAMS = ("format", "table", "since")  # what data_response reads on every JSON endpoint


def query_errors(request, known=(), multi=(), *, page: bool = False) -> dict | None:
    """{param: [message]} when the query has a parameter outside `known` (and data_response's own) or one
    given twice: the REST API's rule (docs/api.md), through its own check (api.filters.refuse_unknown_params),
    so a typo'd or repeated parameter is a 400 naming it, never the default data silently. None when fine.
    `page`: an HTML page's query, which takes only `known`: data_response's `format`, `table` and `since` are its
    JSON endpoint's (a page took them silently and answered HTML: trial 22, F2; `format` is inputs.html_only's)."""
    from rest_framework.exceptions import ValidationError

    from gpuplatform.api.filters import repeated_params

    if page:
        takes = f"takes: {', '.join(sorted(known))}" if known else "takes none"
        errors = repeated_params(request.GET, multi)
        errors.update({name: [f"unknown query parameter; this page {takes}"]
                       for name in sorted(set(request.GET) - set(known))})
        return errors or None
    try:
        refuse_unknown_params(request, (*known, *DATA_PARAMS), multi)
    except ValidationError as exc:
        return {k: [str(m) for m in v] for k, v in exc.detail.items()}
    return None


def takes_params(*known):
    """Decorator (under @_json_view) of a page's JSON endpoint: query_errors as a JSON 400."""
    def decorate(fn):
        @wraps(fn)
        def wrapped(request, *args, **kwargs):
            errors = query_errors(request, known)
            if errors:
                return JsonResponse(errors, status=400)
            return fn(request, *args, **kwargs)
        return wrapped
    return decorate


def page_bad_request(request, errors: dict[str, list[str]]) -> HttpResponse:
    """A dashboard page's 400 naming its bad parameters: to a browser (Accept names text/html) a page in the site's
    layout with the same words and its navigation (new-user trial 27: a bare line of text, no way back, and the
    browser's /favicon.ico 404); to anything else (curl, scripts) the text as before (inputs.text_bad_request)."""
    from django.utils.cache import patch_vary_headers

    if "text/html" not in request.headers.get("Accept", ""):
        response = text_bad_request(errors)
    else:
        message = "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items())
        response = render(request, "frontend/bad_request.html", {"message": message}, status=400)
    patch_vary_headers(response, ["Accept"])
    return response


def page_takes(*known):
    """Decorator of an HTML page: a query parameter it does not read, or one given twice, is a 400 naming it in
    text, as the topology, nodes and jobs pages answer (new-user trial 14, F14: /?foo=1 and /queues/?foo=1 were
    a 200 that ignored it)."""
    def decorate(fn):
        @wraps(fn)
        def wrapped(request, *args, **kwargs):
            errors = query_errors(request, known, page=True)
            if errors:
                return page_bad_request(request, errors)
            return fn(request, *args, **kwargs)
        return wrapped
    return decorate


# --- topology ---------------------------------------------------------------------------------------

NO_SUCH_JOB = "No such job, or not one of your teams' jobs."


def check_job_visible(user, job: int | None) -> None:
    """Raises Http404 (NO_SUCH_JOB) when `job` is given and is not a job `user` may see: unknown and invisible
    read the same. The topology page and topology.json check it alike (new-user trial 22, G3: the page was a 200)."""
    if job is not None and not access.visible_jobs(user).filter(pk=job).exists():
        raise Http404(NO_SUCH_JOB)


def build_topology(user, *, zoom=None, team=None, flavor=None, job=None) -> dict:
    """The /topology.json payload: flat queries, then the pure builder. Raises Http404 for an unknown
    domain or a job the user may not see. A node without a domain is shown as the tier-1 domain it is for
    placement, named as the engine names it (scheduler.core.domain_tree.node_domain: "node:<name>"), and
    can be zoomed into like any domain."""
    domains = dq.domains()
    check_job_visible(user, job)
    if zoom and is_node_domain(zoom):
        gpus = [g for g in dq.topology_gpus(None, flavor) if g[7] is None and node_domain(g[4]) == zoom]
        if not gpus and not dq.domainless_node_exists(zoom[len(node_domain("")):]):
            raise Http404(f"No domain named {zoom}.")
    else:
        scope = None
        if zoom:
            tree = queries.domain_tree(domains)
            root = next((k for k, d in tree.rows.items() if d[1] == zoom), None)
            if root is None:
                raise Http404(f"No domain named {zoom}.")
            scope = tree.subtree(root)
        gpus = dq.topology_gpus(scope, flavor)
    own = {}  # node name -> its own domain row, for the GPUs of nodes without a domain
    for g in gpus:
        if g[7] is None and g[4] not in own:
            own[g[4]] = (node_domain(g[4]), node_domain(g[4]), 1, None)
    if own:
        gpus = [g if g[7] is not None else (*g[:7], own[g[4]][0]) for g in gpus]
        domains = [*domains, *own.values()]
    holders = dq.held_gpu_holders()
    return topology_payload(domains=domains, gpus=gpus, allocations=dq.live_allocations(),
                            jobs=dq.live_jobs(), quotas=dq.queue_quotas(), zoom=zoom, team=team, job=job,
                            visible_team_ids=access.visible_team_ids(user), shares=dq.gpu_shares(),
                            held_gpus=holders, holders=dq.holder_jobs(holders.values()))


class BadParam(ValueError):
    """A query parameter this page cannot read: {param: [message]} for a JSON 400."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def unknown_name(param: str, value: str) -> str | None:
    """The message for a page filter that names no team / queue / node flavor (they are public: the cluster
    and queues pages show them all), else None. One wording for topology and utilization. A team is named by its
    slug or its name, as the API's ?team= (queries.find_team; page_team)."""
    if param == "team" and queries.find_team(value) is None:
        return f"no team named {value[:60]!r}"
    if param == "queue" and not Queue.objects.filter(name=value).exists():
        return f"no queue named {value[:60]!r}"
    if param == "flavor":
        flavors = dq.flavors()
        if value not in flavors:
            return f"no node has flavor {value[:60]!r}; flavors: {', '.join(flavors)}"
    return None


def page_team(value: str | None) -> str | None:
    """The name of the one team a page's `?team=` names, by its slug or its name (queries.find_team, as every
    ?team= of the API and the lists: the slug first), or None (none named, or none such: unknown_name words it).
    The pages filter and select by that name (the topology payload's jobs, the utilization ledger, the filter
    forms' options): `?team=<slug>` was "no team named" on these pages while the API took it (review 19b)."""
    team = queries.find_team(value) if value else None
    return team.name if team is not None else None


def zoom_exists(name: str) -> bool:
    """Whether the topology map can zoom into `name`: a domain of the topology or a domainless node's own
    (node_domain). The engine's synthetic root (domain_tree.ROOT_NAME, "cluster") is neither: it is the map's
    top level, no zoom."""
    if is_node_domain(name):
        return dq.domainless_node_exists(name[len(node_domain("")):])
    return any(d[1] == name for d in dq.domains())


def _topology_params(request) -> dict:
    """The topology page's parameters. Raises BadParam for a `job` that is not a job id (a positive whole
    number)."""
    job = request.GET.get("job") or None
    if job is not None:  # ASCII digits (the one number parser; '\u00b2'.isdigit() was a 500 at int())
        number = whole_number(job)
        if number is None or number < 1:
            raise BadParam("job", f"must be a job id (a positive whole number), got {job[:40]!r}")
        if number > INT64_MAX:  # a whole number, out of the ids' range: say so (new-user trial 23)
            raise BadParam("job", f"must be at most {INT64_MAX}, got {job[:40]}{'...' if len(job) > 40 else ''}")
        job = number
    zoom = request.GET.get("zoom") or None
    if zoom is not None and not zoom_exists(zoom) and zoom == root_name({d[1] for d in dq.domains()}):
        # the engine's synthetic root, which a job placed across the top domains (or across the nodes of a cluster
        # without domains) names: the whole map, not a 400 (new-user trial 24, F2: ?zoom=cluster of the job's own
        # "cluster (tier 2)" was "no domain named 'cluster'")
        zoom = None
    # Domain names are public too (the page lists them all): a zoom naming none is a 400 naming it, not a page
    # whose map then fails to load (new-user trial 10, F11)
    if zoom is not None and not zoom_exists(zoom):
        raise BadParam("zoom", f"no domain named {zoom[:60]!r}")
    team, flavor = request.GET.get("team") or None, request.GET.get("flavor") or None
    # Team names are public (the cluster page shows every team's counts): an unknown one is a 400 naming it,
    # not an all-zero map; the same for a flavor no node has.
    for param, value in (("team", team), ("flavor", flavor)):
        why = unknown_name(param, value) if value is not None else None
        if why:
            raise BadParam(param, why)
    return {"zoom": zoom, "team": page_team(team), "flavor": flavor, "job": job}


TOPOLOGY_PARAMS = ("zoom", "team", "flavor", "job")


@_json_view
@takes_params(*TOPOLOGY_PARAMS)
def topology_json(request):
    """The topology map's data. A bad `job` is a JSON 400 naming it; an unknown domain or a job the user
    may not see a JSON 404 (a JSON endpoint answers JSON)."""
    try:
        payload = build_topology(request.user, **_topology_params(request))
    except BadParam as exc:
        return JsonResponse({exc.param: [str(exc)]}, status=400)
    except Http404 as exc:
        return JsonResponse({"detail": str(exc)}, status=404)
    return data_response(request, payload, payload["rows"], "topology",
                         columns={None: TOPOLOGY_COLUMNS[payload.get("level", "domains")]})


@login_required
@require_safe
@html_only("/topology.json (the map's data; ?format=csv for its rows)",
           "/api/v1/domains/ and /api/v1/nodes/ (the REST API)")
def topology(request):
    # a parameter the page does not read, or one given twice, is a 400 naming it, as topology.json and the
    # utilization page answer (new-user trial 10, F11: the page took ?foo=1 and ?team=a&team=b silently)
    errors = query_errors(request, TOPOLOGY_PARAMS, page=True)
    if errors:
        return page_bad_request(request, errors)
    try:
        params = _topology_params(request)
    except BadParam as exc:
        return page_bad_request(request, {exc.param: [str(exc)]})
    try:  # a job the user may not see (or none such) is a 404 with topology.json's words, in text as the 400s
        check_job_visible(request.user, params["job"])
    except Http404 as exc:
        return HttpResponseNotFound(str(exc), content_type="text/plain; charset=utf-8")
    domains = [{"name": d[1], "tier": d[2]} for d in sorted(dq.domains(), key=lambda d: (-d[2], d[1]))]
    # and each node without a domain, the tier-1 domain it is for placement (node:<name>): the map and its zoom know
    # them, the list offered only the whole cluster in the local mode (new-user re-check 24, R4)
    domains += [{"name": node_domain(n), "tier": 1} for n in dq.domainless_nodes()]
    return render(request, "frontend/topology.html", {
        "params": {k: v or "" for k, v in params.items()},
        "domains": domains,
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
        recent = q.get("recent_usage") or {}
        ordered.append({**q, "depth": depth, "borrowed": borrowed(s["used"], s["quota"]) if s else 0,
                        "decayed": round(sum(recent.values()), 1) if recent else None,
                        "decayed_by_flavor": ", ".join(f"{f}: {v:.1f}" for f, v in sorted(recent.items()))})
    return {"figures": figures, "tree": ordered, "rows": rows, "leaves": leaves,
            "half_life_days": (settings.SCHEDULER_USAGE_HALF_LIFE_SECONDS or 0) / 86400}


@_json_view
@takes_params()
def queues_json(request):
    p = _queues_payload()
    html = render_to_string("frontend/_queue_tree.html", {"tree": p["tree"], "half_life_days": p["half_life_days"]},
                            request=request)
    return data_response(request, {"figures": p["figures"], "html": {"queue-tree": html}}, p["rows"], "queue-watermarks",
                         columns={None: QUEUE_COLUMNS})


@login_required
@require_safe
@html_only("/api/v1/queues/ (the REST API)", "/queues/data.json (the charts' data; ?format=csv for their rows)")
@page_takes()
def queues_page(request):
    p = _queues_payload()
    return render(request, "frontend/queues.html", {**p, "gpu_colors": GPU_STATE_COLORS,
                                                    "can_try_quota": access.is_platform_admin(request.user),
                                                    "flavors": dq.flavors(),
                                                    "borrowed_definition": BORROWED_DEFINITION})


# --- fragmentation ----------------------------------------------------------------------------------

def _fragmentation_payload() -> dict:
    series = dq.fragmentation_series(limit=POINTS)
    rows = [{"time": s["time"].isoformat(), "fragmentation_rate": s["fragmentation_rate"], "free_gpus": s["free_gpus"],
             "domain_completeness": s["domain_completeness"],
             **{f"largest_runnable_tier{t}": g for t, g in sorted((s["largest_runnable"] or {}).items())},
             **{f"fgd_gpus_{f}": v for f, v in dfig.fgd_by_flavor(s).items()}}
            for s in series]
    groups = [{"group": name, **g} for name, g in sorted(((series[-1].get("by_group") or {}) if series else {}).items(),
                                                             key=lambda kv: (kv[1]["flavor"], -kv[1]["node_gpus"]))]
    return {"figures": dfig.fragmentation_figures(series), "rows": rows, "latest": rows[-1] if rows else None,
            "groups": groups, "sharing": _sharing_latest(series[-1] if series else None)}


def _sharing_latest(sample) -> dict | None:
    """The latest cycle's GPU-sharing figures for the page's table (None without sharing): fgd [{flavor, gpus}]
    (dashboard_figures.fgd_by_flavor, the chart's numbers), allocated_gpu_equivalents, shared_gpus,
    mig_instances, mig_used."""
    sharing = (sample or {}).get("sharing") or {}
    if not sharing:
        return None
    return {"fgd": [{"flavor": f, "gpus": v} for f, v in dfig.fgd_by_flavor(sample).items()],
            "allocated_gpu_equivalents": round(float(sharing.get("allocated_gpu_equivalents") or 0), 2),
            "shared_gpus": int(sharing.get("shared_gpus") or 0), "mig_instances": int(sharing.get("mig_instances") or 0),
            "mig_used": int(sharing.get("mig_used") or 0)}


@_json_view
@takes_params()
def fragmentation_json(request):
    """?format=csv: the series (with fgd_gpus_<flavor>: the FGD measure per flavor); ?format=csv&table=groups:
    the latest per flavor and node size. `sharing`: the latest cycle's GPU-sharing figures (or null)."""
    p = _fragmentation_payload()
    html = render_to_string("frontend/_fragmentation_groups.html", p, request=request)
    sharing = render_to_string("frontend/_fragmentation_sharing.html", p, request=request)
    return data_response(request, {"figures": p["figures"], "latest": p["latest"], "groups": p["groups"],
                                   "sharing": p["sharing"],
                                   "html": {"fragmentation-groups": html, "fragmentation-sharing": sharing}},
                         p["rows"], "fragmentation", tables={"groups": p["groups"]},
                         columns={None: FRAGMENTATION_COLUMNS, "groups": GROUP_COLUMNS})


@login_required
@require_safe
@html_only("/fragmentation/data.json (the charts' data; ?format=csv for their rows)",
           "/api/v1/cluster-metrics/ (the REST API)")
@page_takes()
def fragmentation_page(request):
    from gpuplatform.scheduling.advice import fragmentation_advice

    return render(request, "frontend/fragmentation.html", {
        **_fragmentation_payload(), "advice": fragmentation_advice(),
        "can_move": access.is_platform_admin(request.user)})


# --- queueing ---------------------------------------------------------------------------------------

def _forecast_accuracy() -> tuple[dict, list[dict]]:
    """The forecast-accuracy figure and rows from the committed benchmark result (or nothing). The file is
    read and the figure built once per version of the file (its mtime and size), not on every poll."""
    path = Path(settings.BASE_DIR) / "benchmarks" / "results" / "forecast_accuracy_full.json"
    try:
        stat = path.stat()
        return _forecast_accuracy_of(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError):
        return {}, []


@lru_cache(maxsize=4)
def _forecast_accuracy_of(path: str, mtime_ns: int, size: int) -> tuple[dict, list[dict]]:
    return dfig.forecast_accuracy(json.loads(Path(path).read_text()))


PENDING_ON_PAGE = 200  # rows of the pending list drawn on the page; the CSV / JSON table has every one


def _queueing_payload(user) -> dict:
    """The queueing page's data. `pending_rows`: every pending job the user may see, in the cycle's order (the
    CSV / JSON table `pending`); `pending`: the first PENDING_ON_PAGE of them (the page's list), with the counts
    its sentence states (`pending_total` in the cluster, `pending_visible` of them the user's,
    `pending_truncated`). New-user trial 10, F5: the export was cut at 200 rows without a word and the sentence
    said both "all shown" and "(first 200)"."""
    waits = dq.wait_times()
    order = dq.pending_jobs()
    visible = access.visible_team_ids(user)
    rows = [j for j in order if visible is None or j["team_id"] in visible]
    accuracy_fig, accuracy = _forecast_accuracy()
    return {"figures": {**dfig.wait_figures(waits), **accuracy_fig}, "summary": dfig.wait_summary(waits),
            "accuracy": accuracy, "pending": rows[:PENDING_ON_PAGE], "pending_rows": rows,
            "pending_all_visible": visible is None, "pending_total": len(order), "pending_visible": len(rows),
            "pending_truncated": len(rows) > PENDING_ON_PAGE, "pending_on_page": PENDING_ON_PAGE,
            "rows": [{"team": w["team"], "gpus": w["gpus"], "wait_seconds": w["wait_seconds"]} for w in waits]}


# the CSV columns of /queueing/data.json?format=csv&table=pending (its header even when nothing is pending; docs/api.md,
# "The queueing page's pending table (CSV)"): `position` is the jobs API's
# (in the job's queue), `overall_position` the place among all pending jobs. Changed in trialfix10: `position` was the
# overall place and `queue_position` the place in the queue; `queue_position` stays, the same number as `position`,
# for one release (deprecated: to be removed), so a consumer that read it keeps its number under its name.
PENDING_COLUMNS = ("position", "overall_position", "name", "team_name", "queue_name", "gpus", "priority", "submitted_at",
                   "estimated_start", "estimated_start_p90", "estimate_note", "pending_reason", "queue_position")


@_json_view
@takes_params()
def queueing_json(request):
    p = _queueing_payload(request.user)
    pending = [{k: j["position" if k == "queue_position" else k] for k in PENDING_COLUMNS}
               for j in p["pending_rows"]]  # every row, never the page's cut
    html = render_to_string("frontend/_pending.html", p, request=request)
    # The forecast-accuracy figure (~50 KB) comes from a committed benchmark file, not from the cluster: the
    # page draws it once from its own HTML, and the poll does not carry it again on every change.
    figures = {k: v for k, v in p["figures"].items() if k != "forecast_accuracy"}
    counts = {"total": p["pending_total"], "yours": p["pending_visible"], "on_page": len(p["pending"]),
              "truncated": p["pending_truncated"], "all_rows": "?table=pending (JSON) or ?format=csv&table=pending"}
    return data_response(request, {"figures": figures, "summary": p["summary"], "pending": counts,
                                   "html": {"pending-list": html}},
                         p["rows"], "queueing", tables={"pending": pending}, columns={None: WAIT_COLUMNS, "pending": PENDING_COLUMNS})


@login_required
@require_safe
@html_only("/queueing/data.json (the charts' data; ?format=csv for their rows)",
           "/api/v1/jobs/?state=pending (the REST API)")
@page_takes()
def queueing_page(request):
    return render(request, "frontend/queueing.html", _queueing_payload(request.user))


# --- the project's documents ------------------------------------------------------------------------

@login_required
@require_GET
@html_only()
def doc_page(request, name: str = "concepts"):
    """docs/<name>.md as a page (frontend/docs.py), any file in docs/; the pages link their definitions here."""
    from . import docs

    listed = docs.documents()
    if name not in listed:
        raise Http404("No such document.")
    path = docs.docs_dir() / f"{name}.md"
    if not path.is_file():
        raise Http404("No such document.")
    html, toc = docs.render_markdown(path.read_text(encoding="utf-8"))
    return render(request, "frontend/doc.html", {"doc_html": html, "toc": toc, "name": name,
                                                 "docs": listed, "title": listed[name]})


# --- failures ---------------------------------------------------------------------------------------

def _failures_payload(user) -> dict:
    """Ended attempts the user may see (a team member: their teams' jobs; a platform admin: all), over the
    last FAILURE_PAGE_DAYS (30) days. Node names are those the job API already shows the same users."""
    from datetime import timedelta

    from django.db.models import Count

    from gpuplatform import clock
    from gpuplatform.models import Attempt, Node

    from .failure_figures import failure_payload

    now = clock.now()
    since = now - timedelta(days=int(getattr(settings, "FAILURE_PAGE_DAYS", 30)))
    qs = Attempt.objects.filter(ended_at__gte=since, job__in=access.visible_jobs(user))
    rows = list(qs.values("job_id", "job__team__name", "ended_at", "failed", "category", "gpu_seconds", "diagnosis",
                          "recovery_seconds"))
    flavor = dict(Node.objects.values_list("name", "flavor"))
    for r in rows:
        r["team"] = r.pop("job__team__name")
        node = (r.pop("diagnosis") or {}).get("node")
        r["node"], r["node_flavor"] = node, flavor.get(node)
    nodes_by_flavor = dict(Node.objects.values("flavor").annotate(n=Count("id")).values_list("flavor", "n"))
    p = failure_payload(rows, nodes_by_flavor=nodes_by_flavor, now=now)
    states = dict(Node.objects.filter(name__in=[n["node"] for n in p["nodes"]]).values_list("name", "state"))
    for n in p["nodes"]:
        n["state"] = states.get(n["node"], "")
    return p


@_json_view
@takes_params()
def failures_json(request):
    p = _failures_payload(request.user)
    html = render_to_string("frontend/_failure_tables.html", p, request=request)
    return data_response(request, {"figures": p["figures"], "summary": p["summary"], "html": {"failure-tables": html}},
                         p["rows"], "failures", columns={None: FAILURE_COLUMNS})


@login_required
@require_safe
@html_only("/failures/data.json (the charts' data; ?format=csv for their rows)",
           "/api/v1/jobs/?state=failed (the REST API)")
@page_takes()
def failures_page(request):
    return render(request, "frontend/failures.html", _failures_payload(request.user))
