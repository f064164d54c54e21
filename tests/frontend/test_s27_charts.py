"""Session 27, a user's report from a real browser (demo-local, 4 GPUs):

1. the Utilization page's stack fell toward 0 at the right edge: the bin still in progress (and a first bin that starts
   at a node's registration) was a mean over the full bin width. A bin's mean GPUs is now over the part of it that has
   data (utilization()'s per-bin "hours"), in the chart, the JSON and the CSV alike;
2. the Queueing page's wait charts read "hours" with ticks of 100µ for waits of a second: the unit now fits the
   longest wait (seconds / minutes / hours) and titles the axis;
3. the Queues page's quota / limit / fair-share lines hid each other and had no legend.
"""
from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from gpuplatform import clock
from gpuplatform.audit import record_event
from gpuplatform.models import Node
from scheduler.core.gpu_hours import BUCKETS

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen(monkeypatch):
    """The cluster clock stopped at a whole second (every bin edge below is exact)."""
    now = clock.now().replace(microsecond=0)
    monkeypatch.setattr(clock, "_source", lambda: now)
    return now


# --- 1. utilization: partial bins ---------------------------------------------------------------------


def test_partial_first_and_last_bins_are_means_over_their_covered_part(db, frozen):
    """A node registered 20 s into the first 60 s bin and a window that ends 10 s into its last bin: those bins
    report the hours they cover (40 s, 10 s), and GPU-hours / those hours is the node's 4 GPUs in every bin."""
    from frontend.views_utilization import mean_gpus
    from gpuplatform.utilization import utilization

    since = frozen - timedelta(minutes=10)
    until = since + timedelta(seconds=250)  # bins at 0, 60, 120, 180, 240 s: the last one covers 10 s
    node = Node.objects.create(name="late", flavor="L40", gpu_count=4)
    record_event("node_registered", "node late registered", node=node, data={"created": True},
                 time=since + timedelta(seconds=20))
    series = utilization("cluster", since, until, flavor="L40", step=60)["series"]["cluster"]
    assert [round(s["hours"] * 3600, 6) for s in series] == [40, 60, 60, 60, 10]
    for s in series:
        assert mean_gpus(s, "capacity") == pytest.approx(4.0)
        assert sum(mean_gpus(s, b) for b in BUCKETS) == pytest.approx(4.0, abs=0.01)
    # the raw GPU-hours are unchanged: the last bin holds 10 s of 4 GPUs
    assert series[-1]["capacity"] == pytest.approx(4 * 10 / 3600)


def test_the_page_data_stack_sums_to_the_cluster_in_the_bin_in_progress(client, world, frozen):
    """10.5 minutes after a workload reset the page's bins are 60 s: the last one is half over. Its stacked buckets
    still sum to the node's 8 GPUs (they read 4 before), in the chart's traces and in the CSV's *_gpus columns; the
    CSV's `hours` says how much of the bin has data."""
    record_event("workload_reset", "demo workload reset", time=frozen - timedelta(seconds=630))
    client.force_login(world["admin"])
    fig = client.get("/utilization/data.json").json()["figures"]["ledger"]
    stack = [t for t in fig["data"] if t.get("stackgroup") == "gpus"]
    assert len(stack) == len(BUCKETS) and len(stack[0]["x"]) == 11
    for i in range(len(stack[0]["x"])):
        assert sum(t["y"][i] for t in stack) == pytest.approx(8.0, abs=0.01), i
    assert fig["layout"]["yaxis"]["range"] == [0, 8.0]
    rows = list(csv.DictReader(io.StringIO(client.get("/utilization/data.json?format=csv").content.decode())))
    assert len(rows) == 11
    assert float(rows[-1]["hours"]) == pytest.approx(30 / 3600, abs=1e-6)
    assert float(rows[0]["hours"]) == pytest.approx(60 / 3600, abs=1e-6)
    last = rows[-1]
    assert float(last["capacity"]) == pytest.approx(8 * 30 / 3600, abs=1e-4)  # GPU-hours, as before
    assert sum(float(last[f"{b}_gpus"]) for b in BUCKETS) == pytest.approx(8.0, abs=0.01)
    # the chart's numbers are the CSV's
    assert [float(r["useful_gpus"]) for r in rows] == next(t for t in stack if t["name"] == "useful")["y"]


def test_a_bin_with_no_capacity_is_a_gap_not_a_zero():
    from frontend.views_utilization import mean_gpus, utilization_figure

    point = {"time": "2026-12-04T23:00:00+00:00", **dict.fromkeys(BUCKETS, 0.0), "capacity": 0.0, "hours": 0.0}
    assert mean_gpus(point, "free") is None
    fig = utilization_figure([point])
    assert fig["data"][0]["y"] == [None] and "range" not in fig["layout"]["yaxis"]


# --- 2. queueing: the wait charts' unit -------------------------------------------------------------------


@pytest.mark.parametrize("waits,unit,values", [
    ([1.0, 0.5, 2.0], "seconds", [0.5, 1.0, 2.0]),   # the demo's waits: never 100µ hours
    ([30.0, 600.0], "minutes", [0.5, 10.0]),
    ([7200.0, 36000.0], "hours", [2.0, 10.0]),
    ([0.0], "seconds", [0.0]),
])
def test_wait_charts_take_the_unit_of_the_longest_wait(waits, unit, values):
    from frontend.dashboard_figures import wait_figures

    figs = wait_figures([{"wait_seconds": w, "gpus": 1, "team": "red"} for w in waits])
    for key in ("by_size", "by_team"):
        layout = figs[key]["layout"]
        assert layout["yaxis"]["title"]["text"] == f"wait ({unit})"
        assert layout["yaxis"]["exponentformat"] == "none"  # no SI prefixes (100µ) on the ticks
        box = figs[key]["data"][0]
        assert (box["lowerfence"], box["upperfence"]) == ([min(values)], [max(values)])


def test_wait_unit_edges():
    from frontend.dashboard_figures import wait_unit

    assert wait_unit(None) == ("hours", 3600.0)
    assert wait_unit(119.9) == ("seconds", 1.0) and wait_unit(120) == ("minutes", 60.0)
    assert wait_unit(7199) == ("minutes", 60.0) and wait_unit(7200) == ("hours", 3600.0)


def test_queueing_page_data_titles_the_axis_in_seconds_for_second_waits(client, world):
    """The frontend world's jobs started seconds after submission at most: the JSON the page draws says seconds."""
    from frontend.dashboard_figures import wait_unit
    from gpuplatform import dashboard_queries as dq

    client.force_login(world["admin"])
    figs = client.get("/queueing/data.json").json()["figures"]
    waits = [w["wait_seconds"] for w in dq.wait_times()]
    unit, _ = wait_unit(max(waits, default=None))
    assert figs["by_size"]["layout"]["yaxis"]["title"]["text"] == f"wait ({unit})"


# --- 3. queues: legend and distinguishable lines ------------------------------------------------------------


def test_watermark_lines_have_a_legend_and_distinct_dashes():
    from frontend.dashboard_figures import watermark_figure

    t = clock.now()
    fig = watermark_figure("red", [{"time": t, "used": 2, "quota": 4, "guarantee": 4, "limit": 4, "held": 0,
                                    "pending_demand": 4, "fair_share": 4.0}])
    assert fig["layout"]["showlegend"] is True and fig["layout"]["legend"]["orientation"] == "h"
    lines = [tr for tr in fig["data"] if "stackgroup" not in tr]
    assert [tr["name"] for tr in lines] == ["quota", "limit", "guarantee", "pending demand", "fair share"]
    dashes = [tr["line"]["dash"] for tr in lines]
    assert len(set(dashes)) == len(dashes)
    widths = [tr["line"]["width"] for tr in lines]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]  # later lines run inside earlier ones
