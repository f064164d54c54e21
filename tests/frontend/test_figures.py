"""frontend/figures.py: pure functions from rows to valid plotly figure dicts."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import plotly.graph_objects as go

from frontend import figures
from frontend.states import SERIES_COLORS, STATE_COLORS

T0 = datetime(2017, 10, 9, tzinfo=timezone.utc)


def samples(n=4):
    return [{"time": T0 + timedelta(minutes=i), "allocation_rate": i / 10, "fragmentation_rate": 0.5 - i / 20}
            for i in range(n)]


def assert_valid(fig):
    go.Figure(fig)  # raises on anything plotly.js would not understand
    json.dumps(fig)  # JSON-ready: no datetimes, no numpy


def test_rates_figure_has_both_series_in_percent():
    fig = figures.rates_figure(samples())
    assert_valid(fig)
    alloc, frag = fig["data"]
    assert alloc["name"] == "allocation rate" and frag["name"] == "fragmentation rate"
    assert alloc["y"] == [0.0, 10.0, 20.0, 30.0]
    assert frag["y"] == [50.0, 45.0, 40.0, 35.0]
    assert alloc["x"][0] == T0.isoformat()
    assert alloc["line"]["color"] == SERIES_COLORS["allocation_rate"]


def test_single_rate_figures():
    assert [t["name"] for t in figures.allocation_figure(samples())["data"]] == ["allocation rate"]
    assert [t["name"] for t in figures.fragmentation_figure(samples())["data"]] == ["fragmentation rate"]


def test_empty_inputs_give_valid_empty_figures():
    for fig in (figures.rates_figure([]), figures.queue_usage_figure([]), figures.team_jobs_figure([])):
        assert_valid(fig)


def test_queue_usage_figure_stacks_per_queue_and_fills_gaps():
    rows = [
        {"time": T0, "queue__name": "a", "used": 3},
        {"time": T0, "queue__name": "b", "used": 1},
        {"time": T0 + timedelta(minutes=1), "queue__name": "a", "used": 5},
    ]
    fig = figures.queue_usage_figure(rows)
    assert_valid(fig)
    series = {t["name"]: t["y"] for t in fig["data"]}
    assert series == {"a": [3, 5], "b": [1, 0]}
    assert all(t["stackgroup"] == "used" for t in fig["data"])


def test_queue_usage_figure_folds_small_queues_into_other():
    rows = [{"time": T0, "queue__name": f"q{i:02d}", "used": i} for i in range(20)]
    fig = figures.queue_usage_figure(rows, max_queues=5)
    assert_valid(fig)
    names = [t["name"] for t in fig["data"]]
    assert len(names) == 6 and names[-1] == "other queues"
    assert fig["data"][-1]["y"] == [sum(range(15))]


def test_team_jobs_figure_uses_state_colors():
    counts = [{"team": "red", "pending": 2, "running": 1, "finished": 9},
              {"team": "blue", "pending": 0, "running": 4, "finished": 0}]
    fig = figures.team_jobs_figure(counts)
    assert_valid(fig)
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["running"]["x"] == [1, 4] and by_name["pending"]["x"] == [2, 0]
    assert by_name["running"]["marker"]["color"] == STATE_COLORS["running"]
    assert by_name["pending"]["marker"]["color"] == STATE_COLORS["pending"]


def test_human_seconds():
    from frontend.views import human_seconds

    assert human_seconds(None) == "—"
    assert human_seconds(42) == "42s"
    assert human_seconds(3725) == "1h 2m"
    assert human_seconds(443841) == "5d 3h 17m"
