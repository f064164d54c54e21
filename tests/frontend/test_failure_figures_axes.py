"""The failure page's figures (frontend/failure_figures.py): GPU-hours lost are bars per category on a
category axis (a date axis drew nothing, new-user report 7 F21), and without a failed attempt both charts say
"No failed attempt." instead of empty axes around Jan 2000 (F15)."""
from __future__ import annotations

from datetime import datetime, timezone

from frontend.failure_figures import failure_payload

NOW = datetime(2017, 9, 28, 12, 0, tzinfo=timezone.utc)


def _row(category, failed=True, gpu_seconds=7200.0):
    return {"job_id": 1, "team": "t", "ended_at": NOW, "failed": failed, "category": category,
            "gpu_seconds": gpu_seconds, "node": "m1", "node_flavor": "P100", "recovery_seconds": None}


def test_gpu_hours_lost_are_bars_on_a_category_axis():
    figs = failure_payload([_row("cuda_oom"), _row("platform", gpu_seconds=3600.0)],
                           nodes_by_flavor={"P100": 1}, now=NOW)["figures"]
    lost = figs["gpu_hours"]
    assert lost["layout"]["xaxis"]["type"] == "category"
    assert lost["data"][0]["x"] == ["cuda_oom", "platform"] and lost["data"][0]["y"] == [2.0, 1.0]
    assert "empty" not in lost and "empty" not in figs["by_category"]
    per_day = figs["by_category"]
    assert per_day["layout"]["xaxis"]["type"] == "date" and per_day["layout"]["xaxis"]["dtick"] == 86_400_000
    assert per_day["data"][0]["x"] == ["2017-09-28"] and per_day["data"][0]["width"] == 0.8 * 86_400_000


def test_without_a_failed_attempt_both_charts_say_so():
    for rows in ([], [_row("unknown", failed=False)]):
        figs = failure_payload(rows, nodes_by_flavor={"P100": 1}, now=NOW)["figures"]
        assert figs["gpu_hours"]["empty"] == figs["by_category"]["empty"] == "No failed attempt."
