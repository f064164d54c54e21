"""The failure page's numbers and figures (docs/diagnosis.md), pure: rows in, dicts out.

Input rows (one per ended attempt the user may see): {"job_id", "team", "ended_at" (datetime), "failed",
"category", "gpu_seconds", "node" (the diagnosis' node or None), "node_flavor", "recovery_seconds"}.
- failed attempts by category per day (stacked bars), GPU-hours lost by category (failed attempts'
  gpus x duration: the attempt ledger; the GPU-hour ledger's `lost to failure` bucket replaces it when the
  utilization issue lands);
- the nodes with most failed attempts pointing at them: a diagnosis whose category is the node's fault
  (engine.NODE_FAULT_CATEGORIES: gpu_hardware, nccl_network, platform with a node: a lost node) and names the node;
  a user error, an OOM or an unknown cause names where the task ran, not a fault of that node (new-user trial 19, F4);
- mean time between failures per node model: observed node-hours of that model (nodes x the window from
  the first attempt to now) / failed attempts with a hardware or network diagnosis on nodes of that model;
- recovery time p50 / p90 overall and per ISO week.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from gpuplatform.diagnosis.engine import NODE_FAULT_CATEGORIES

from .figures import _layout
from .states import PALETTE

HARDWARE_OR_NETWORK = ("gpu_hardware", "nccl_network")
CATEGORY_ORDER = ("gpu_hardware", "cuda_oom", "host_oom", "cuda_error", "storage", "nan_loss", "user_error",
                  "nccl_network", "nccl_timeout", "platform", "cancelled", "unknown")
DAY_MS = 86_400_000  # a day on a plotly date axis
NO_FAILED_ATTEMPT = "No failed attempt."  # what the tables say too (_failure_tables.html)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def _cat_color(c: str) -> str:
    return PALETTE[CATEGORY_ORDER.index(c) % len(PALETTE)] if c in CATEGORY_ORDER else "#a0aec0"


def failure_payload(rows: list[dict], *, nodes_by_flavor: dict[str, int], now: datetime) -> dict:
    failed = [r for r in rows if r["failed"]]
    days = sorted({r["ended_at"].date().isoformat() for r in failed})
    by_day: dict[str, Counter] = defaultdict(Counter)
    lost: Counter = Counter()
    for r in failed:
        cat = r["category"] or "unknown"
        by_day[cat][r["ended_at"].date().isoformat()] += 1
        lost[cat] += r["gpu_seconds"] / 3600
    cats = [c for c in CATEGORY_ORDER if c in by_day]
    # One bar per day, a day wide, on day ticks: with a single day plotly otherwise zooms to milliseconds.
    over_time = {"data": [{"type": "bar", "name": c, "x": days, "y": [by_day[c][d] for d in days],
                           "width": DAY_MS * 0.8, "marker": {"color": _cat_color(c)}} for c in cats],
                 "layout": {**_layout("Failed attempts by category, per day", yaxis={"title": {"text": "attempts"}}),
                            "xaxis": {"type": "date", "gridcolor": "#edf2f7", "tickformat": "%b %d",
                                      "dtick": DAY_MS},
                            "barmode": "stack"}}
    lost_fig = {"data": [{"type": "bar", "x": cats, "y": [round(lost[c], 3) for c in cats],
                          "marker": {"color": [_cat_color(c) for c in cats]}}],
                "layout": {**_layout("GPU-hours lost by category", yaxis={"title": {"text": "GPU-hours"}}),
                           "xaxis": {"type": "category", "gridcolor": "#edf2f7"},  # categories, not dates
                           "showlegend": False}}
    if not failed:  # say so instead of drawing empty axes (a date axis around Jan 2000)
        over_time["empty"] = lost_fig["empty"] = NO_FAILED_ATTEMPT
    per_node: dict[str, Counter] = defaultdict(Counter)
    for r in failed:
        if r["node"] and r["category"] in NODE_FAULT_CATEGORIES:
            per_node[r["node"]][r["category"] or "unknown"] += 1
    top_nodes = sorted(per_node.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))[:15]
    nodes_table = [{"node": n, "failed_attempts": sum(c.values()),
                    "hardware_or_network": sum(v for k, v in c.items() if k in HARDWARE_OR_NETWORK),
                    "categories": ", ".join(f"{k} {v}" for k, v in c.most_common())} for n, c in top_nodes]
    first = min((r["ended_at"] for r in rows), default=None)
    hours = max((now - first).total_seconds() / 3600, 0.0) if first else 0.0
    hw_by_flavor = Counter(r["node_flavor"] for r in failed if r["category"] in HARDWARE_OR_NETWORK and r["node_flavor"])
    mtbf = [{"flavor": f, "nodes": n, "node_hours": round(n * hours, 1), "failures": hw_by_flavor.get(f, 0),
             "mtbf_hours": round(n * hours / hw_by_flavor[f], 1) if hw_by_flavor.get(f) else None}
            for f, n in sorted(nodes_by_flavor.items())]
    rec = [r["recovery_seconds"] for r in rows if r["recovery_seconds"] is not None]
    weeks: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["recovery_seconds"] is not None:
            y, w, _ = r["ended_at"].isocalendar()
            weeks[f"{y}-W{w:02d}"].append(r["recovery_seconds"])
    weekly = [{"week": k, "interruptions": len(v), "p50_seconds": pct(v, 0.5), "p90_seconds": pct(v, 0.9)}
              for k, v in sorted(weeks.items())]
    summary = {"failed_attempts": len(failed), "attempts": len(rows),
               "gpu_hours_lost": round(sum(lost.values()), 3),
               "recovery_p50_seconds": pct(rec, 0.5), "recovery_p90_seconds": pct(rec, 0.9), "recoveries": len(rec)}
    table_rows = [{"category": c, "failed_attempts": sum(by_day[c].values()), "gpu_hours_lost": round(lost[c], 3)}
                  for c in cats]
    return {"figures": {"by_category": over_time, "gpu_hours": lost_fig}, "summary": summary,
            "nodes": nodes_table, "mtbf": mtbf, "weekly": weekly, "rows": table_rows}
