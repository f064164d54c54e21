"""The embedded loop's forecast period is measured on the cluster clock: in the demo (simulated clock at
600x) a forecast every FORECAST_SECONDS of wall time covered ~10 simulated hours, so estimated starts lay
hours in the past (new-user trial 7, F7)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuplatform.scheduling import forecast as store_forecast
from gpuplatform.scheduling import tasks

T0 = datetime(2017, 9, 28, 18, 0, tzinfo=timezone.utc)


def test_the_forecast_period_follows_the_cluster_clock(settings, monkeypatch):
    settings.FORECAST_SECONDS = 60
    ran = []
    monkeypatch.setattr(store_forecast, "run_forecast_once", lambda clock: ran.append(clock))
    monkeypatch.setattr(tasks, "close_old_connections", lambda: None)
    monkeypatch.setattr(tasks, "_forecast_thread", [None])
    monkeypatch.setattr(tasks, "_last_forecast_request", [0.0])
    monkeypatch.setattr(tasks, "_last_forecast_clock", [None], raising=False)

    def at(clock):
        thread = tasks.forecast_in_thread(clock)
        if thread is not None:
            thread.join(5)
        return thread is not None

    assert at(T0)
    assert not at(T0 + timedelta(seconds=30))  # 30 s of cluster time: not due
    assert at(T0 + timedelta(seconds=600))  # a demo tick later (10 simulated minutes, under a wall second): due
    assert not at(T0 + timedelta(seconds=630))
    assert at(T0 + timedelta(seconds=660))
    assert at(T0 - timedelta(days=1))  # the clock went back (a demo restarted in this process): due
    assert ran == [T0, T0 + timedelta(seconds=600), T0 + timedelta(seconds=660), T0 - timedelta(days=1)]
    settings.FORECAST_SECONDS = 0
    assert not at(T0 + timedelta(days=1))  # off
