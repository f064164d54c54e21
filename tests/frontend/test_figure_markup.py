"""Issue #12: markup in a name (job, team, queue, node, domain, flavor) must not reach plotly's text as
markup: `<span style="font-size:300px">` covered the topology page, `<b>` / `<br>` forged hover lines.
Every figure is built with hostile names and every text plotly renders (trace names, hover text and
templates, annotations, titles, category tick labels) is checked for raw tags."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from frontend import dashboard_figures, figures
from frontend.topology import topology_payload

EVIL = ['<span style="font-size:300px">X</span>', "<b>forged</b><br>line", "<a href='//x'>y</a>"]
RENDERED_KEYS = {"name", "text", "hovertext", "hovertemplate"}


def rendered_strings(fig) -> list[str]:
    """Every string plotly.js renders as (pseudo-)HTML in this figure dict."""
    out = []

    def walk(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and key in RENDERED_KEYS:
            out.append(value)

    walk(fig["data"])
    # An annotation's "name" is not drawn (topology.js reads it to zoom on a clicked label): its "text" is.
    walk({k: v for k, v in fig["layout"].items() if k != "annotations"})
    walk([a.get("text") for a in fig["layout"].get("annotations", [])], "text")
    for trace in fig["data"]:  # category axes render their labels
        for axis in ("x", "y"):
            out += [v for v in trace.get(axis, []) if isinstance(v, str)]
    return out


def assert_no_markup_from(names, fig):
    texts = rendered_strings(fig)
    for name in names:
        assert not any(name in t for t in texts), (name, [t for t in texts if name in t][:3])
    assert not any("<span" in t or "<a " in t for t in texts)


@pytest.mark.parametrize("evil", EVIL)
def test_topology_both_levels_escape_every_name(evil):
    domains = [(1, evil, 2, None), (2, evil + "nvl", 1, 1)]
    gpus = [(i, i, "healthy", 1, evil + "node", "ready", evil + "flavor", 2) for i in range(4)]
    jobs = [{"id": 9, "name": evil, "state": "running", "team_id": 1, "team_name": evil, "queue_id": 5,
             "queue_name": evil},
            {"id": 8, "name": "hidden", "state": "running", "team_id": 2, "team_name": evil + "2", "queue_id": 6,
             "queue_name": "q"}]
    alloc = {0: 9, 1: 9, 2: 8}
    for zoom in (None, evil + "nvl"):
        payload = topology_payload(domains=domains, gpus=gpus, allocations=alloc, jobs=jobs, quotas={5: 4, 6: 4},
                                   zoom=zoom, visible_team_ids={1})
        assert_no_markup_from([evil], payload["figure"])
        assert any("&lt;" in t for t in rendered_strings(payload["figure"]))  # shown as typed, escaped


@pytest.mark.parametrize("evil", EVIL)
def test_cluster_and_dashboard_figures_escape_every_name(evil):
    t = datetime(2024, 1, 1, tzinfo=tz.utc)
    figs = [
        figures.queue_usage_figure([{"time": t, "queue": evil, "used": 3}]),
        figures.team_jobs_figure([{"team": evil, "running": 1, "pending": 2}]),
        dashboard_figures.watermark_figure(evil, [{"time": t, "used": 1, "quota": 2, "guarantee": 1, "limit": 4,
                                                   "pending_demand": 0, "fair_share": 1.0}]),
        *dashboard_figures.wait_figures([{"wait_seconds": 60, "gpus": 8, "team": evil}]).values(),
    ]
    for fig in figs:
        assert_no_markup_from([evil], fig)
    assert figures.team_jobs_figure([{"team": evil, "running": 1, "pending": 2}])["data"][0]["y"][0].startswith("&lt;")
