"""Figures of the dashboards (queue watermarks, fragmentation, queueing): pure functions from rows
(dashboard_queries) to plotly figure dicts and plain lists. The cluster page's figures are figures.py's.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from gpuplatform.borrowing import borrowed
from gpuplatform.gpu_request import as_gpus
from scheduler.sim.report import SIZE_BUCKETS, size_bucket

from .figures import _iso, _layout, plain
from .states import PALETTE, SERIES_COLORS, STATE_COLORS


def _line(name, x, y, color, **extra) -> dict:
    name = plain(name)
    return {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y,
            "line": {"color": color, "width": 1.5, **extra.pop("line", {})},
            "hovertemplate": "%{y}<extra>" + name + "</extra>", **extra}


def watermark_figure(queue: str, samples: Sequence[Mapping], *, height: int = 360) -> dict:
    """One queue over time: used GPUs split into within-quota and borrowed (above quota, stacked), the GPUs
    held (reserved) for its jobs that have not started, stacked on top, against guarantee, quota, limit,
    pending demand and the engine's fair share."""
    x = [_iso(s["time"]) for s in samples]
    used = [as_gpus(s["used"]) for s in samples]  # GPU-equivalents: 103.5 stays 103.5
    quota = [int(s["quota"]) for s in samples]
    data = [
        _line("used within quota", x, [as_gpus(min(u, q)) for u, q in zip(used, quota)], STATE_COLORS["running"],
              stackgroup="used", line={"width": 0.5}),
        _line("borrowed (above quota)", x, [borrowed(u, q) for u, q in zip(used, quota)], SERIES_COLORS["borrowed"],
              stackgroup="used", line={"width": 0.5}),
        _line("held (reserved, not started)", x, [int(s.get("held") or 0) for s in samples], SERIES_COLORS["held"],
              stackgroup="used", line={"width": 0.5}),
        # The lines often coincide (quota = limit = fair share): each has its own dash and a width that narrows in
        # drawing order (WATERMARK_LINES), so a later, thinner line runs inside an earlier, wider one and both show;
        # the legend names them (session 27: four lines on top of each other, no legend)
        *(_line(name, x, values, SERIES_COLORS[key], line={"dash": dash, "width": width})
          for name, key, dash, width, values in (
              ("quota", "quota", "solid", 4, quota),
              ("limit", "limit", "dash", 2.5, [s["limit"] for s in samples]),
              ("guarantee", "guarantee", "longdash", 2, [s["guarantee"] for s in samples]),
              ("pending demand", "pending_demand", "dashdot", 1.5, [as_gpus(s["pending_demand"]) for s in samples]))),
    ]
    if any(s.get("fair_share") is not None for s in samples):
        data.append(_line("fair share", x, [None if s.get("fair_share") is None else round(s["fair_share"], 2)
                                            for s in samples], SERIES_COLORS["fair_share"],
                          line={"dash": "dot", "width": 1.5}))
    layout = _layout(plain(queue), yaxis={"title": {"text": "GPUs"}}, height=height)
    layout["margin"] = {"l": 44, "r": 8, "t": 30, "b": 28}
    layout["xaxis"] = {**layout["xaxis"], "automargin": True}  # date labels are never clipped
    layout["yaxis"] = {**layout["yaxis"], "automargin": True}
    # the legend below the plot (clear of the two-line date labels), two entries a row: Plotly widens the bottom margin
    # for it; one entry a row made it taller than the chart (a scroll bar) on the page's small cards
    layout["showlegend"] = True
    layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.3, "yanchor": "top",
                        "entrywidth": 0.5, "entrywidthmode": "fraction", "font": {"size": 10}, "traceorder": "normal"}
    layout["hovermode"] = "x unified"
    figure = {"data": data, "layout": layout}
    if not samples:  # an empty state instead of empty 0-1 axes (poll.js's gpuplatformApplyFigure shows the message)
        figure["empty"] = (f"No usage recorded for queue {queue} yet: its chart starts with the next scheduling "
                           f"cycle that samples it.")
    return figure


def fragmentation_figures(samples: Sequence[Mapping]) -> dict:
    """Two figures over time: 'rates' (fragmentation rate and domain completeness, percent) and 'gpus'
    (free GPUs and the largest runnable job per tier, GPUs)."""
    x = [_iso(s["time"]) for s in samples]
    rates = {"data": [
        _line("fragmentation rate", x, [round(100 * s["fragmentation_rate"], 2) for s in samples],
              SERIES_COLORS["fragmentation_rate"], line={"width": 2}),
        _line("domain completeness", x, [round(100 * s["domain_completeness"], 2) for s in samples],
              SERIES_COLORS["domain_completeness"], line={"width": 2}),
    ], "layout": _layout("Fragmentation rate and domain completeness",
                         yaxis={"range": [0, 100], "ticksuffix": "%", "rangemode": "normal"})}
    tiers = sorted({int(t) for s in samples for t in (s.get("largest_runnable") or {})})
    gpu_data = [_line("free GPUs", x, [s["free_gpus"] for s in samples], SERIES_COLORS["free_gpus"],
                      fill="tozeroy", line={"width": 1})]
    for i, t in enumerate(tiers):
        gpu_data.append(_line(f"largest runnable, tier ≤ {t}", x,
                              [(s.get("largest_runnable") or {}).get(str(t), (s.get("largest_runnable") or {}).get(t))
                               for s in samples], PALETTE[i % len(PALETTE)], line={"width": 2}))
    gpus = {"data": gpu_data, "layout": _layout("Free GPUs and the largest runnable job per tier",
                                                yaxis={"title": {"text": "GPUs"}})}
    return {"rates": rates, "gpus": gpus, "fgd": fgd_figure(samples)}


def fgd_by_flavor(sample: Mapping | None) -> dict[str, float]:
    """One sample's FGD measure per flavor ({flavor: GPUs}, 2 decimals, by flavor name): the expected GPUs' worth
    of free share on shared and auto GPUs that the request mix cannot use (scheduler.core.sharing.Placer
    .fragmentation, stored as ClusterSample.sharing["fgd_fragmentation"]). {} when the cycle had no sharing.
    Every place that shows the number (the chart, the latest table, the CSV, the JSON) takes it from here."""
    values = ((sample or {}).get("sharing") or {}).get("fgd_fragmentation") or {}
    return {str(f): round(float(v), 2) for f, v in sorted(values.items())}


FGD_EMPTY = ("No cycle has measured FGD fragmentation yet: it is measured on GPUs in mode shared or auto, "
             "from the first scheduling cycle that sees one.")


def fgd_figure(samples: Sequence[Mapping]) -> dict:
    """FGD fragmentation over time, one line per GPU flavor (GPUs; fgd_by_flavor): a flavor missing from a
    sample (no shared or auto GPU of it in that cycle) is a gap (null). An empty state when no sample has it."""
    per = [fgd_by_flavor(s) for s in samples]
    flavors = sorted({f for p in per for f in p})
    x = [_iso(s["time"]) for s in samples]
    data = [_line(f, x, [p.get(f) for p in per], PALETTE[i % len(PALETTE)],
                  line={"width": 2}, hovertemplate="%{y:.2f} GPUs<extra>" + plain(f) + "</extra>")
            for i, f in enumerate(flavors)]
    figure = {"data": data, "layout": _layout("FGD fragmentation per flavor: GPUs unusable by the request mix",
                                              yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"},
                                              showlegend=True)}  # the flavor's name even when it is the only one
    if not flavors:
        figure["empty"] = FGD_EMPTY
    return figure


def _quantile(values: Sequence[float], p: float) -> float:
    """plotly.js's own quantile (Lib.interp, the box trace's default quartilemethod "linear"): position
    p * n - 0.5 in the sorted values, linearly interpolated, clamped to the ends."""
    t = p * len(values) - 0.5
    if t <= 0:
        return values[0]
    if t >= len(values) - 1:
        return values[-1]
    lo = int(t)
    frac = t - lo
    return round(frac * values[lo + 1] + (1 - frac) * values[lo], 4)


def _box(name: str, hours: list[float], color: str) -> dict:
    """One box from precomputed statistics (q1, median, q3; whiskers at min and max, as the box trace
    draws them for `boxpoints: false` from raw values): a few numbers instead of every wait, so the page's
    poll does not carry thousands of points. No sample points exist, so none are drawn."""
    v = sorted(hours)
    return {"type": "box", "name": name, "x": [name], "q1": [_quantile(v, 0.25)], "median": [_quantile(v, 0.5)],
            "q3": [_quantile(v, 0.75)], "lowerfence": [v[0]], "upperfence": [v[-1]],
            "marker": {"color": color}, "hoverinfo": "y+name"}


def job_size(row: Mapping) -> str:
    """The size bucket of a wait_times row: its GPU-equivalents' bucket ("<1" for a share of one GPU), and
    "<1" for a job asking only GPU-memory shares (its GPU-equivalents are 0 until bound)."""
    if not row["gpus"] and row.get("memory_share"):
        return "<1"
    return size_bucket(row["gpus"])


# the wait charts' unit: the first whose limit the longest wait is under (the table's human durations read "1s",
# "12m", "3h 5m": the axis reads in the same kind of unit, never 100µ hours, session 27)
WAIT_UNITS = (("seconds", 1.0, 120.0), ("minutes", 60.0, 2 * 3600.0), ("hours", 3600.0, float("inf")))


def wait_unit(max_seconds: float | None) -> tuple[str, float]:
    """(unit name, seconds per unit) for waits whose longest is `max_seconds`: seconds under 2 minutes, minutes
    under 2 hours, else hours (hours when there is no wait at all)."""
    if max_seconds is None:
        return "hours", 3600.0
    return next((name, per) for name, per, limit in WAIT_UNITS if max_seconds < limit)


def wait_figures(rows: Sequence[Mapping], *, max_teams: int = 20) -> dict:
    """Wait-time distributions (box plots of precomputed quartiles, whiskers at min / max) in the unit that fits
    the longest wait (wait_unit: seconds, minutes or hours; the y axis says which): 'by_size' (the replay report's
    job size buckets, scheduler.sim.report.SIZE_BUCKETS: "0" = CPU-only jobs) and 'by_team'."""
    unit, per = wait_unit(max((r["wait_seconds"] for r in rows), default=None))
    by_size, by_team = defaultdict(list), defaultdict(list)
    for r in rows:
        value = round(r["wait_seconds"] / per, 4)
        by_size[job_size(r)].append(value)
        by_team[r["team"]].append(value)
    labels = [label for label, _, _ in SIZE_BUCKETS if label in by_size]
    size_data = [_box(f"{b} ({len(by_size[b])})", by_size[b], PALETTE[i % len(PALETTE)]) for i, b in enumerate(labels)]
    teams = sorted(by_team, key=lambda t: -len(by_team[t]))[:max_teams]
    team_data = [_box(f"{plain(t)} ({len(by_team[t])})", by_team[t], PALETTE[i % len(PALETTE)])
                 for i, t in enumerate(sorted(teams))]
    out = {}
    for key, data, title in (("by_size", size_data, "Wait time by job size (GPUs)"),
                             ("by_team", team_data, "Wait time by team")):
        # linear: zero waits are common; no SI prefixes on the ticks (they read 100µ for 0.0001)
        layout = _layout(title, yaxis={"title": {"text": f"wait ({unit})"}, "exponentformat": "none"})
        layout["xaxis"] = {"type": "category", "gridcolor": "#edf2f7"}
        layout["showlegend"] = False
        out[key] = {"data": data, "layout": layout}
    return out


def wait_summary(rows: Sequence[Mapping]) -> list[dict]:
    """p50 / p90 / p99 wait (seconds) and job count per size bucket, for the table and the CSV."""
    by_size = defaultdict(list)
    for r in rows:
        by_size[job_size(r)].append(r["wait_seconds"])

    def pct(vals, p):
        vals = sorted(vals)
        return vals[min(len(vals) - 1, int(round(p / 100 * (len(vals) - 1))))] if vals else None
    return [{"size": label, "jobs": len(by_size[label]), "p50_s": pct(by_size[label], 50),
             "p90_s": pct(by_size[label], 90), "p99_s": pct(by_size[label], 99)}
            for label, _, _ in SIZE_BUCKETS if by_size.get(label)]


FORECAST_RUNS = (("without_time_limits", "no time limits (history estimator)"),
                 ("with_time_limits", "exact time limits"))


def forecast_accuracy(data: Mapping | None) -> tuple[dict, list[dict]]:
    """The forecast-accuracy plot and table from benchmarks/results/forecast_accuracy_full.json (written
    by benchmarks/forecast_accuracy.py): ({"forecast_accuracy": figure} or {}, rows). Figure: forecast wait
    vs actual wait (hours, each point one prediction, thinned) per run, with the y = x line; rows: per run,
    the forecast's and the baselines' median / p90 absolute error (s) and shares within 15 min / 25 %."""
    if not data or not data.get("runs"):
        return {}, []
    traces, rows, top = [], [], 1.0
    for i, (key, label) in enumerate(FORECAST_RUNS):
        run = data["runs"].get(key)
        if not run:
            continue
        pts = run.get("points") or []
        top = max([top] + [max(a, f) for a, f in pts])
        traces.append({"type": "scattergl", "mode": "markers", "name": f"{label} ({run['resolved']:,} predictions)",
                       "x": [a for a, _ in pts], "y": [f for _, f in pts],
                       "marker": {"size": 4, "opacity": 0.45, "color": PALETTE[i % len(PALETTE)]}})
        for name, fig in (("forecast", run["forecast"]), ("backfill reservation", run["backfill_reservation"]),
                          ("no estimate", run["no_estimate"])):
            rows.append({"run": label, "estimate": name, "predictions": fig["predictions"],
                         "with_estimate": fig["with_estimate"], "median_abs_error_s": fig["median_abs_error_s"],
                         "p90_abs_error_s": fig["p90_abs_error_s"], "within_15min": fig["share_within_15min"],
                         "within_25pct": fig["share_within_25pct_of_wait"],
                         "started_by_p90": fig["share_started_by_p90"]})
    traces.append({"type": "scatter", "mode": "lines", "name": "forecast = actual", "x": [0, top], "y": [0, top],
                   "line": {"color": "#4a5568", "dash": "dot", "width": 1}, "hoverinfo": "skip"})
    layout = _layout(f"Forecast vs actual wait, Philly replay days {data.get('start_day', 0):g}-"
                     f"{data.get('start_day', 0) + data.get('days', 0):g}",
                     yaxis={"title": {"text": "forecast wait (h)"}})
    layout["xaxis"] = {"title": {"text": "actual wait (h)"}, "gridcolor": "#edf2f7", "automargin": True}
    # The legend (three long entries) goes above the plot, under the title: below it, at _layout's y -0.18, it
    # was drawn over the x-axis title at 1400 px (new-user trial 19, F15). The top margin holds the title and
    # one legend line; a legend that wraps on a narrow screen grows upwards into the margin Plotly widens
    # (automargin), not over the axes.
    layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}
    layout["margin"] = {**layout["margin"], "t": 72, "b": 44}
    layout["title"] = {**layout["title"], "y": 0.98, "yanchor": "top"}
    layout["height"] = 320
    return {"forecast_accuracy": {"data": traces, "layout": layout}}, rows
