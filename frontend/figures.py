"""Plotly figure builders: pure functions from query results (lists of dicts) to figure dicts.

No database, no request: the views call queries, pass the rows here, and hand the dicts to plotly.js
(`Plotly.react(div, fig.data, fig.layout)`). The dicts are JSON-ready (times as ISO strings) and valid
plotly figures (the tests check them with plotly.graph_objects.Figure).
"""
from __future__ import annotations

import html
from collections import OrderedDict
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from gpuplatform.gpu_request import as_gpus

from .states import PALETTE, SERIES_COLORS, STATE_COLORS

FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


def plain(value) -> str:
    """A name from the database as plotly text: plotly.js renders `<b>`, `<br>`, `<span style>`, `<a>` in
    trace names, hover text, annotations, titles and tick labels, so markup in a job / queue / team / node
    / domain name is escaped (shown as typed). Every name placed in a figure's text goes through here."""
    return html.escape(str(value), quote=False)


def _iso(t) -> str:
    return t.isoformat() if isinstance(t, datetime) else str(t)


def _layout(title: str, *, yaxis: dict | None = None, **extra) -> dict:
    layout = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 14}},
        "font": FONT,
        "margin": {"l": 50, "r": 10, "t": 36, "b": 36},
        "height": 280,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "xaxis": {"type": "date", "gridcolor": "#edf2f7"},
        "yaxis": {"gridcolor": "#edf2f7", "rangemode": "tozero", **(yaxis or {})},
        "legend": {"orientation": "h", "y": -0.18, "yanchor": "top"},
        "uirevision": "keep",  # Plotly.react keeps the user's zoom between updates
    }
    layout.update(extra)
    return layout


def with_empty_state(figure: dict, sentence: str) -> dict:
    """Mark a figure none of whose traces has a point with `empty` (the sentence shown instead of its chart:
    poll.js, gpuplatformApplyFigure), so no page draws plotly's empty axes, e.g. a made-up 'Jan 2000 ... Nov
    2000' date axis (new-user trial 25, federation 2). Returns the figure."""
    if not any(len(t.get(k) or ()) for t in figure.get("data") or () for k in ("x", "y", "values")):
        figure["empty"] = sentence
    return figure


def rates_figure(samples: Sequence[Mapping]) -> dict:
    """Allocation rate and fragmentation rate (percent) over the cluster clock, from cluster samples."""
    x = [_iso(s["time"]) for s in samples]
    data = [
        {
            "type": "scatter", "mode": "lines", "name": "allocation rate", "x": x,
            "y": [round(100 * s["allocation_rate"], 2) for s in samples],
            "line": {"color": SERIES_COLORS["allocation_rate"], "width": 2},
            "hovertemplate": "%{y:.1f}%<extra>allocation</extra>",
        },
        {
            "type": "scatter", "mode": "lines", "name": "fragmentation rate", "x": x,
            "y": [round(100 * s["fragmentation_rate"], 2) for s in samples],
            "line": {"color": SERIES_COLORS["fragmentation_rate"], "width": 2},
            "hovertemplate": "%{y:.1f}%<extra>fragmentation</extra>",
        },
    ]
    return with_empty_state(
        {"data": data, "layout": _layout("Allocation and fragmentation rate",
                                         yaxis={"range": [0, 100], "ticksuffix": "%", "rangemode": "normal"})},
        "No data yet: the allocation and fragmentation rates start with the first scheduling cycle's sample.")


def allocation_figure(samples: Sequence[Mapping]) -> dict:
    """Allocation rate only (percent)."""
    fig = rates_figure(samples)
    fig["data"] = fig["data"][:1]
    fig["layout"]["title"]["text"] = "Allocation rate"
    return fig


def fragmentation_figure(samples: Sequence[Mapping]) -> dict:
    """Fragmentation rate only (percent)."""
    fig = rates_figure(samples)
    fig["data"] = fig["data"][1:]
    fig["layout"]["title"]["text"] = "Fragmentation rate"
    return fig


def queue_usage_figure(rows: Iterable[Mapping], *, max_queues: int = 16) -> dict:
    """GPUs used per queue over time, stacked, from queue samples (time, queue__name, used).

    The queues with the most usage get their own line; the rest are summed as "other queues".
    """
    times: "OrderedDict[str, None]" = OrderedDict()
    per_queue: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for r in rows:
        t = _iso(r["time"])
        times.setdefault(t, None)
        name = r.get("queue__name") or r.get("queue")
        per_queue.setdefault(name, {})[t] = as_gpus(per_queue.get(name, {}).get(t, 0) + r["used"])  # GPU-equivalents
        totals[name] = totals.get(name, 0) + r["used"]
    x = list(times)
    ranked = sorted(per_queue, key=lambda q: (-totals[q], q))
    shown, rest = ranked[:max_queues], ranked[max_queues:]
    data = []
    for i, name in enumerate(sorted(shown)):
        series = per_queue[name]
        data.append({
            "type": "scatter", "mode": "lines", "name": plain(name), "x": x, "y": [series.get(t, 0) for t in x],
            "stackgroup": "used", "line": {"width": 0.5, "color": PALETTE[i % len(PALETTE)]},
            "hovertemplate": "%{y} GPUs<extra>" + plain(name) + "</extra>",
        })
    if rest:
        data.append({
            "type": "scatter", "mode": "lines", "name": "other queues", "x": x,
            "y": [as_gpus(sum(per_queue[q].get(t, 0) for q in rest)) for t in x],
            "stackgroup": "used", "line": {"width": 0.5, "color": "#a0aec0"},
        })
    return with_empty_state(
        {"data": data, "layout": _layout("GPUs used per queue", yaxis={"title": {"text": "GPUs"}}, height=320)},
        "No data yet: the GPUs used per queue start with the first scheduling cycle's sample.")


def team_jobs_figure(counts: Sequence) -> dict:
    """Running and pending jobs per team as stacked horizontal bars, in the state colors.

    `counts` are objects or dicts with team, pending, running (finished jobs are in the table).
    """
    def get(c, k):
        return c[k] if isinstance(c, Mapping) else getattr(c, k)

    teams = [plain(get(c, "team")) for c in counts]
    data = []
    for key, color_state in (("running", "running"), ("pending", "pending")):
        data.append({
            "type": "bar", "orientation": "h", "name": key, "y": teams, "x": [get(c, key) for c in counts],
            "marker": {"color": STATE_COLORS[color_state]},
        })
    layout = _layout("Running and pending jobs per team",
                     yaxis={"type": "category", "autorange": "reversed", "rangemode": "normal"},
                     barmode="stack", height=max(220, 24 * len(teams) + 90))
    layout["xaxis"] = {"title": {"text": "jobs"}, "gridcolor": "#edf2f7", "rangemode": "tozero"}
    layout["margin"] = {"l": 80, "r": 10, "t": 36, "b": 36}
    return with_empty_state({"data": data, "layout": layout}, "No running or pending jobs now.")
