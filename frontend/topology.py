"""The topology map: a pure function from flat rows (domains, GPUs, live allocations, live jobs, quotas) to
the JSON payload of /topology.json (a plotly figure plus the numbers behind it).

Two levels, so the map stays light at 20,000 GPUs:
- "domains": one cell per lowest-tier (NVLink) domain, a small stacked column of its GPUs per state (to
  scale: the column's height is its GPU count over the largest domain's),
  grouped by parent domain (leaf switch); a wholly free domain is one full light-blue column. Bar traces.
- "gpus": one square per GPU (scattergl, WebGL), grouped by domain, a row per node; used when zoomed into
  a domain holding at most GPU_CELL_LIMIT GPUs.

A GPU's state, first match wins: unhealthy (GPU unhealthy or node not ready) > preempting (its job is in
its grace period) > borrowed (above its queue's quota, gpuplatform/borrowing.py) > running (held by
any other job) > held (not allocated, reserved for a job that has not started: counted apart, as the
cluster page and /metrics count held GPUs, never as free) > cordoned (free, node cordoned or draining) > free.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from operator import itemgetter

from gpuplatform.borrowing import BORROWED_DEFINITION, borrowed_gpu_ids
from gpuplatform.trees import Tree
from scheduler.core.domain_tree import is_node_domain

from .figures import plain
from .states import GPU_STATE_COLORS

GPU_STATES = tuple(GPU_STATE_COLORS)
# The CSV header of the map's rows at each level (frontend.views_dashboards.data_response)
TOPOLOGY_COLUMNS = {"domains": ("domain", "parent", "gpus", *GPU_STATES, "jobs", "matching_gpus"),
                    "gpus": ("domain", "node", "gpu", "flavor", "state", "job", "team", "queue", "share")}
GPU_CELL_LIMIT = 2400     # zoomed views up to this many GPUs draw one square per GPU
WRAP = 48                 # columns before a row of blocks wraps
UNIT_PX = 24              # pixels per row unit

# which moment the map shows (topology.json's `moment`, after the totals on the page): the live database
MOMENT = "live: GPUs as they are now (the cluster page's cards are the last cycle's sample)"


def natural_key(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name or "")]


def gpu_state(health: str, node_state: str, job: dict | None, borrowed: bool, held: bool = False) -> str:
    """borrowed: this GPU is one of its queue's borrowed GPUs (borrowing.borrowed_gpu_ids); held: it is
    reserved for a job that has not started (Job.reserved: dashboard_queries.held_gpu_ids), which the
    scheduler counts as held, not free (scheduler/core/metrics.py: schedulable = allocated + held + free)."""
    if health != "healthy" or node_state == "not_ready":
        return "unhealthy"
    if job is not None:
        if job["state"] == "preempting":
            return "preempting"
        return "borrowed" if borrowed else "running"
    if held:
        return "held"
    return "cordoned" if node_state in ("cordoned", "draining") else "free"


def _flow(blocks: list[tuple[int, int]], wrap: int = WRAP) -> tuple[list[tuple[int, float]], float, int]:
    """Place blocks of (cols, lines) left to right, wrapping; returns each block's (x0, y0) where y0 is
    the label line, the total height in units and the total width in columns."""
    pos, x, y, row_h, width = [], 0, 0.0, 0, 0
    for cols, lines in blocks:
        if x and x + cols > wrap:
            y += 0.6 + row_h + 0.3
            x, row_h = 0, 0
        pos.append((x, y))
        x += cols + 1
        width = max(width, x - 1)
        row_h = max(row_h, lines)
    return pos, (y + 0.6 + row_h + 0.3) if blocks else 1.0, max(width, 1)


def _layout(height_units: float, width_cols: int, annotations: list[dict]) -> dict:
    return {
        "margin": {"l": 8, "r": 8, "t": 30, "b": 8},
        "height": int(max(160, height_units * UNIT_PX + 60)),
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "#ffffff",
        # One unit is as wide as it is tall (square GPUs); the plot keeps to the left of the card.
        "xaxis": {"visible": False, "range": [-0.7, width_cols - 0.3], "constrain": "domain",
                  "constraintoward": "left", "scaleanchor": "y", "scaleratio": 1},
        "yaxis": {"visible": False, "range": [height_units, -0.3], "constrain": "domain"},
        "showlegend": True, "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0},
        "hovermode": "closest", "annotations": annotations, "uirevision": "topology",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "bargap": 0, "barmode": "overlay",
    }


def _label(name: str, x: float, y: float) -> dict:
    return {"text": plain(name), "name": name, "x": x - 0.45, "y": y + 0.25, "xanchor": "left", "yanchor": "middle",
            "showarrow": False, "captureevents": True, "font": {"size": 11, "color": "#2c5282"}}


def _job_label(job: dict | None, visible) -> str:
    if job is None:
        return ""
    if visible is None or job["team_id"] in visible:
        return f"{plain(job['name'])} · team {plain(job['team_name'])} · queue {plain(job['queue_name'])}"
    return f"a job of team {plain(job['team_name'])} · queue {plain(job['queue_name'])}"


def topology_payload(*, domains, gpus, allocations: dict[int, int], jobs, quotas: dict[int, int],
                     zoom: str | None = None, team: str | None = None, job: int | None = None,
                     visible_team_ids: set[int] | None = None, gpu_cell_limit: int = GPU_CELL_LIMIT,
                     shares: dict[int, dict] | None = None, held_gpus: set[int] | dict | frozenset = frozenset(),
                     holders: list[dict] | None = None) -> dict:
    """domains: (id, name, tier, parent_id); gpus: (gpu_id, index, health, node_id, node, node_state,
    flavor, domain_id) — already filtered by flavor; allocations {gpu_id: job_id} (all live ones: a job's
    GPU count comes from them); jobs: live job dicts (dashboard_queries.live_jobs); quotas {queue_id: GPUs};
    shares {gpu_id: {"text", "used", "jobs", "instances"}} (dashboard_queries.gpu_shares): a shared GPU's used
    share (a label on its cell, every fraction's job in its hover) or a MIG GPU's instances (dots on its cell),
    with the text in its hover and row ("share"), when zoomed to GPUs (_gpu_level); the team / job filter
    matches a shared GPU when any job holding a fraction of it matches. held_gpus: GPU ids reserved for jobs
    that have not started (dashboard_queries.held_gpu_ids): state "held" unless allocated; or {GPU id: the id of
    the job it is held for, or None} (dashboard_queries.held_gpu_holders), with `holders` those jobs' dicts (as
    live_jobs'): a held GPU then belongs to its holder, for the filters and the hovers. zoom: a domain name
    (None = the cluster).
    team / job: GPUs not held by that team's / job's jobs are dimmed: allocated to them, or held for them (a pending
    job's reservation: trial 21, F15). Unknown zoom raises KeyError."""
    tree = Tree(domains, key=itemgetter(0), parent=itemgetter(3))
    by_id = tree.rows
    zoom_row = None
    if zoom:
        zoom_row = next((d for d in domains if d[1] == zoom), None)
        if zoom_row is None:
            raise KeyError(zoom)
        scope = tree.subtree(zoom_row[0])
        gpus = [g for g in gpus if g[7] in scope]
    held = Counter(allocations.values())
    live = {j["id"]: j for j in jobs}  # every live job (one holding only MIG instances or fractions included)
    jobs = [{**j, "gpus": held[j["id"]]} for j in jobs if held.get(j["id"])]
    jobs_by_id = {j["id"]: j for j in jobs}
    borrowed = borrowed_gpu_ids(jobs, allocations, quotas)
    filtering = bool(team or job)

    def matches(j):
        return j is not None and (not team or j["team_name"] == team) and (not job or j["id"] == job)

    held_for = held_gpus if isinstance(held_gpus, dict) else {}
    holder_by_id = {h["id"]: h for h in holders or ()}
    cells = []  # (gpu row, state, job or None: the job it is allocated to, or held for when held, match)
    for g in gpus:
        j = jobs_by_id.get(allocations.get(g[0]))
        state = gpu_state(g[2], g[5], j, g[0] in borrowed, g[0] in held_gpus)
        if state == "held":
            j = holder_by_id.get(held_for.get(g[0]))
        frac = (shares or {}).get(g[0]) or {}  # a shared GPU matches when any job holding a fraction of it does
        match = matches(j) or any(matches(live.get(jid)) for jid, _ in frac.get("jobs") or ())
        cells.append((g, state, j, match))
    # The totals follow the team / job filter (what is highlighted), over the zoomed and flavor-filtered GPUs.
    totals = {s: 0 for s in GPU_STATES}
    for c in cells:
        if not filtering or c[3]:
            totals[c[1]] += 1
    borrowed_total = sum(1 for c in cells if c[0][0] in borrowed and (not filtering or c[3]))
    # Nodes without a domain ("node:<name>", the local mode's every node) have no NVLink domain to draw as a
    # column: shown on their own (no labelled domain among the cells), they get the zoomed view's one square per
    # GPU grouped by node, as a zoom into a domain does, not one unlabelled column per node under "(no leaf)"
    # (new-user trial 23: "4 GPUs shown" over 2 nameless squares)
    own_nodes_only = bool(cells) and all(is_node_domain(str(c[0][7])) for c in cells)
    level = "gpus" if (zoom_row is not None or own_nodes_only) and len(cells) <= gpu_cell_limit else "domains"
    build = _gpu_level if level == "gpus" else _domain_level
    figure, rows = build(cells, by_id, visible_team_ids, filtering, shares or {}, live)
    path = [{"name": by_id[d][1], "tier": by_id[d][2]} for d in reversed(tree.ancestors(zoom_row[0]))] if zoom_row else []
    # `moment`: the map and its totals are the live database, not a cycle's sample as the cluster page's cards
    # (numbers.sample_moment there): the two free counts differ between cycles (new-user trial 25, F7). No clock
    # time here: the body would change at every poll and never be a 304 (conditional.py)
    return {"moment": MOMENT,
            "level": level, "zoom": path[-1] if path else None, "path": path, "totals": totals,
            "borrowed_gpus": borrowed_total, "gpus": len(cells),
            "shown_gpus": sum(totals.values()), "filters": {"team": team or "", "job": job or ""},
            "borrowed_definition": BORROWED_DEFINITION, "figure": figure, "rows": rows}


def _domain_level(cells, by_id, visible, filtering, shares=None, live=None):
    per = defaultdict(lambda: {"states": defaultdict(int), "jobs": defaultdict(int), "match": 0, "gpus": 0})
    job_info = {}
    for g, state, j, match in cells:
        c = per[g[7]]
        c["gpus"] += 1
        c["states"][state] += 1
        c["match"] += match
        if j is not None:
            c["jobs"][j["id"]] += 1
            job_info[j["id"]] = j
    groups = defaultdict(list)
    for did in per:
        parent = by_id[did][3] if did in by_id else None
        groups[parent].append(did)

    def dname(did):
        return by_id[did][1] if did in by_id else "(no domain)"

    order = sorted(groups, key=lambda p: natural_key(dname(p) if p is not None else "~"))
    for p in order:
        groups[p].sort(key=lambda d: natural_key(dname(d)))
    cols = min(max((len(v) for v in groups.values()), default=1), WRAP)
    # To scale: a column's height is its GPU count over the largest domain's, so a domain of one 2-GPU machine
    # is a quarter of one holding an 8-GPU machine (the same baseline; state shares stacked inside).
    scale = max((c["gpus"] for c in per.values()), default=1) or 1
    pos, height, width = _flow([(cols, math.ceil(len(groups[p]) / cols)) for p in order])
    traces = {s: {"x": [], "base": [], "y": [], "hovertext": [], "customdata": [], "opacity": []} for s in GPU_STATES}
    annotations, rows = [], []
    for (x0, y0), p in zip(pos, order):
        annotations.append(_label(dname(p) if p is not None else "(no leaf)", x0, y0))
        for i, did in enumerate(groups[p]):
            c = per[did]
            x, top = x0 + i % cols, y0 + 0.6 + i // cols
            top_jobs = sorted(c["jobs"].items(), key=lambda kv: -kv[1])[:3]
            lines = [f"<b>{plain(dname(did))}</b> · {plain(dname(p)) if p is not None else ''} · {c['gpus']} GPUs",
                     ", ".join(f"{n} {s}" for s, n in sorted(c["states"].items(), key=lambda kv: -kv[1]))]
            lines += [f"{n} GPUs{' held for' if job_info[jid]['state'] == 'pending' else ''}: "
                      f"{_job_label(job_info[jid], visible)}" for jid, n in top_jobs]
            if len(c["jobs"]) > 3:
                lines.append(f"+{len(c['jobs']) - 3} more jobs")
            text = "<br>".join(lines)
            bottom = top + 0.9
            for s in GPU_STATES:
                n = c["states"].get(s, 0)
                if not n:
                    continue
                h = 0.85 * n / scale
                t = traces[s]
                t["x"].append(x)
                t["base"].append(round(bottom, 4))
                t["y"].append(round(-h, 4))
                t["hovertext"].append(text)
                t["customdata"].append(dname(did))
                t["opacity"].append(1.0 if not filtering or c["match"] else 0.25)
                bottom -= h
            rows.append({"domain": dname(did), "parent": dname(p) if p is not None else "", "gpus": c["gpus"],
                         **{s: c["states"].get(s, 0) for s in GPU_STATES}, "jobs": len(c["jobs"]),
                         "matching_gpus": c["match"]})
    data = []
    for s in GPU_STATES:
        t = traces[s]
        data.append({"type": "bar", "name": f"{s} ({sum(r[s] for r in rows)})", "x": t["x"], "y": t["y"],
                     "base": t["base"], "width": 0.86, "hovertext": t["hovertext"], "hoverinfo": "text",
                     "customdata": t["customdata"], "legendgroup": s,
                     "marker": {"color": GPU_STATE_COLORS[s], "opacity": t["opacity"], "line": {"width": 0}}})
    return {"data": data, "layout": _layout(height, width, annotations)}, rows


MIG_COLORS = {"used": "#1a202c", "free": "#ffffff"}  # a MIG instance's dot on its GPU's cell
DARK_CELLS = ("running", "borrowed", "preempting", "held", "unhealthy", "cordoned")  # cells that take a white label


def _mig_offsets(n: int) -> list[tuple[float, float]]:
    """Where a MIG GPU's n instances sit inside its cell (units from the cell's centre; the cell is 0.7 units
    wide): rows of 4, centred."""
    rows = math.ceil(n / 4) or 1
    out = []
    for k in range(n):
        r, c = divmod(k, 4)
        in_row = min(4, n - 4 * r)
        out.append((round((c - (in_row - 1) / 2) * 0.15, 3), round((r - (rows - 1) / 2) * 0.2, 3)))
    return out


def _unit_px(height_units: float, width_cols: int) -> float:
    """About how many pixels one unit takes on screen (the layout's height over its units, both axes share the
    scale): more than UNIT_PX for a small view (a node: the figure's minimum height), bounded so that a wide
    row of blocks (about 1,200 px of plot) still fits."""
    height = max(160, height_units * UNIT_PX + 60)
    return max(UNIT_PX * 0.75, min((height - 38) / (height_units + 0.3), 1200 / (width_cols + 0.4)))


def _gpu_level(cells, by_id, visible, filtering, shares=None, live=None):
    """One square per GPU. A GPU holding fractions or in mode shared carries its used share on the cell (a
    label, "25%", and "shared, 0.25 used" in its hover and row); a MIG GPU shows each of its instances as a dot
    on the cell (dark: bound to a job; white: free), each with its own hover (profile, UUID, job)."""
    shares = shares or {}
    by_domain = defaultdict(lambda: defaultdict(list))
    for cell in cells:
        by_domain[cell[0][7]][cell[0][4]].append(cell)

    def dname(did):
        return by_id[did][1] if did in by_id else "(no domain)"

    order = sorted(by_domain, key=lambda d: natural_key(dname(d)))
    per_node = max((len(v) for nodes in by_domain.values() for v in nodes.values()), default=1)
    blocks = [(per_node, len(by_domain[d])) for d in order]
    pos, height, width = _flow(blocks)
    px = _unit_px(height, width)  # a cell is 0.7 units (17 px at UNIT_PX; larger when zoomed to a node)
    cell_px, dot_px, font_px = max(17, min(round(0.7 * px), 40)), max(3, round(0.1 * px)), max(8, min(round(0.28 * px), 12))
    traces = {s: {"x": [], "y": [], "hovertext": [], "customdata": [], "opacity": []} for s in GPU_STATES}
    mig = {k: {"x": [], "y": [], "hovertext": [], "customdata": [], "opacity": []} for k in MIG_COLORS}
    labels = []  # the used share of shared GPUs, written on their cells
    jobs_by_id = {**(live or {}), **{c[2]["id"]: c[2] for c in cells if c[2] is not None}}
    annotations, rows = [], []
    for (x0, y0), did in zip(pos, order):
        annotations.append(_label(dname(did), x0, y0))
        for line, node in enumerate(sorted(by_domain[did], key=natural_key)):
            for g, state, j, match in sorted(by_domain[did][node], key=lambda c: c[0][1]):
                t = traces[state]
                x, y = x0 + g[1] % per_node, round(y0 + 0.6 + line + 0.45, 3)
                t["x"].append(x)
                t["y"].append(y)
                share = shares.get(g[0]) or {}
                text = share.get("text", "")
                fractions = [(jobs_by_id.get(jid), part) for jid, part in share.get("jobs") or ()]
                if fractions:  # every job holding a fraction of it, with its share
                    who = "<br>".join(f"{part:g} GPU: {_job_label(fj, visible) or 'a job'}" for fj, part in fractions)
                elif state == "held":
                    who = "held (reserved) for a job that has not started" + (
                        f": {_job_label(j, visible)}" if j is not None else "")
                else:
                    who = _job_label(j, visible)
                t["hovertext"].append(f"<b>{plain(node)}</b> GPU {g[1]} · {plain(g[6])} · {state}"
                                      + (f" · {text}" if text else "") + (f"<br>{who}" if who else ""))
                shown = j is not None and (visible is None or j["team_id"] in visible)
                t["customdata"].append([j["id"] if shown else None, dname(did)])
                t["opacity"].append(1.0 if not filtering or match else 0.25)
                if share.get("used") is not None:
                    labels.append({"text": f"{round(100 * share['used'])}%", "x": x, "y": y, "showarrow": False,
                                   "xanchor": "center", "yanchor": "middle", "name": f"share:{node}:{g[1]}",
                                   "opacity": 1.0 if not filtering or match else 0.25,
                                   "font": {"size": font_px, "color": "#ffffff" if state in DARK_CELLS else "#1a202c"}})
                instances = share.get("instances") or []
                for inst, (dx, dy) in zip(instances, _mig_offsets(len(instances))):
                    holder = jobs_by_id.get(inst["job"]) if inst["job"] is not None else None
                    m = mig["used" if inst["job"] is not None else "free"]
                    m["x"].append(round(x + dx, 3))
                    m["y"].append(round(y + dy, 3))
                    hj = _job_label(holder, visible) if holder else ("a job" if inst["job"] is not None else "")
                    m["hovertext"].append(f"<b>{plain(node)}</b> GPU {g[1]} · MIG {plain(inst['profile'])} · "
                                          f"{plain(inst['uuid'])}<br>{hj or 'free'}")
                    seen = holder is not None and (visible is None or holder["team_id"] in visible)
                    m["customdata"].append([inst["job"] if seen else None, dname(did)])
                    m["opacity"].append(1.0 if not filtering or match else 0.25)
                rows.append({"domain": dname(did), "node": node, "gpu": g[1], "flavor": g[6], "state": state,
                             "job": (j["name"] if shown else "(other team)") if j else "",
                             "team": j["team_name"] if j else "", "queue": j["queue_name"] if j else "",
                             "share": text})
    data = []
    for s in GPU_STATES:
        t = traces[s]
        data.append({"type": "scattergl", "mode": "markers", "name": f"{s} ({len(t['x'])})", "x": t["x"],
                     "y": t["y"], "hovertext": t["hovertext"], "hoverinfo": "text", "customdata": t["customdata"],
                     "legendgroup": s,
                     "marker": {"symbol": "square", "size": cell_px, "color": GPU_STATE_COLORS[s], "opacity": t["opacity"],
                                "line": {"width": 0}}})
    for k, m in mig.items():
        if m["x"]:  # drawn after the GPU squares, so on top of them
            data.append({"type": "scattergl", "mode": "markers", "name": f"MIG instance, {k} ({len(m['x'])})",
                         "x": m["x"], "y": m["y"], "hovertext": m["hovertext"], "hoverinfo": "text",
                         "customdata": m["customdata"], "legendgroup": f"mig-{k}",
                         "marker": {"symbol": "square", "size": dot_px, "color": MIG_COLORS[k], "opacity": m["opacity"],
                                    "line": {"width": 1, "color": "#1a202c"}}})
    return {"data": data, "layout": _layout(height, width, annotations + labels)}, rows
