"""gpuplatform.scheduling.forecast: the live snapshot forecast forward, estimates written per pending job
(time limit, else history), "no estimate" with its reason, single-flight on a lock of its own."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone as tz

from gpuplatform import services
from gpuplatform.models import Job
from gpuplatform.scheduling import forecast as fc, store, tasks
from gpuplatform.scheduling.locks import CYCLE_LOCK_KEY, single_flight

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def _fill(submit, **kwargs):
    """Four 8-GPU jobs filling the 32-GPU cluster, started by one cycle at CLOCK."""
    jobs = [submit(f"r{i}", tasks=1, gpus=8, submitted_at=CLOCK - timedelta(minutes=5), **kwargs) for i in range(4)]
    store.run_cycle_once(clock=CLOCK)
    assert all(Job.objects.get(pk=j.pk).state == "running" for j in jobs)
    return jobs


def test_time_limits_give_exact_starts_and_the_cycle_is_untouched(submit):
    _fill(submit, time_limit_seconds=3600)
    a = submit("a", tasks=2, gpus=8, time_limit_seconds=1800, submitted_at=CLOCK)
    b = submit("b", tasks=4, gpus=8, time_limit_seconds=600, submitted_at=CLOCK + timedelta(seconds=1))
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=10))
    summary = fc.run_forecast_once(clock=CLOCK + timedelta(seconds=20))
    assert summary["jobs"] == 2 and summary["estimated"] == 2
    a, b = Job.objects.get(pk=a.pk), Job.objects.get(pk=b.pk)
    # every running job ends at CLOCK + 1 h: a starts then; b needs the whole cluster, free when a ends
    assert a.estimated_start == CLOCK + timedelta(hours=1)
    assert b.estimated_start == CLOCK + timedelta(hours=1, minutes=30)
    assert a.estimated_start_p90 == a.estimated_start  # time limits have no spread
    assert a.estimate_note == "run time from its time limit"
    assert a.estimated_at == CLOCK + timedelta(seconds=20)
    # a cycle keeps the forecast's estimate (the backfill reservation's goes to reservation_start)
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=30))
    assert Job.objects.get(pk=a.pk).estimated_start == CLOCK + timedelta(hours=1)


def test_history_estimates_with_p90_and_no_estimate_past_the_horizon(submit, settings):
    team_jobs = [submit(f"h{i}", tasks=1, gpus=8, submitted_at=CLOCK - timedelta(days=1)) for i in range(4)]
    store.run_cycle_once(clock=CLOCK - timedelta(days=1))
    for i, j in enumerate(team_jobs):  # history: 8-GPU jobs of this team ran 1, 2, 3, 4 h
        services.finish_job(Job.objects.get(pk=j.pk), at=CLOCK - timedelta(days=1) + timedelta(hours=i + 1))
    _fill(submit)
    waiting = submit("w", tasks=1, gpus=8, submitted_at=CLOCK)
    settings.FORECAST_HORIZON_SECONDS = 7 * 86400
    fc.run_forecast_once(clock=CLOCK)
    w = Job.objects.get(pk=waiting.pk)
    # running jobs have run 0 s (they started at CLOCK): median of 1..4 h by nearest rank = 2 h, P90 = 4 h
    assert w.estimated_start == CLOCK + timedelta(hours=2)
    assert w.estimated_start_p90 == CLOCK + timedelta(hours=4)
    assert "submitter's recent jobs of this size (4 jobs)" in w.estimate_note
    # a horizon shorter than any end: no estimate, and the reason says so
    settings.FORECAST_HORIZON_SECONDS = 3600
    fc.run_forecast_once(clock=CLOCK + timedelta(minutes=1))
    w = Job.objects.get(pk=waiting.pk)
    assert w.estimated_start is None and w.estimated_start_p90 is None
    assert w.estimate_note.startswith("not started within the 1 h horizon")


def _hold(key, held, release):
    from django.db import connection

    try:
        with single_flight(key) as acquired:
            assert acquired
            held.set()
            release.wait(5)
    finally:
        connection.close()


def test_forecast_is_single_flight_on_its_own_lock(submit):
    submit("p", tasks=1, gpus=8)
    for key, expect_skip in ((fc.FORECAST_LOCK_KEY, True), (CYCLE_LOCK_KEY, False)):
        held, release = threading.Event(), threading.Event()
        thread = threading.Thread(target=_hold, args=(key, held, release))
        thread.start()
        held.wait(5)
        try:
            out = fc.run_forecast_once(clock=CLOCK)
            if expect_skip:  # another forecast runs: skipped
                assert out is None
            else:  # a cycle running neither stops nor waits for a forecast
                assert out["jobs"] == 1
                assert store.run_cycle_once(clock=CLOCK) is None  # and the cycle lock is still the cycle's
        finally:
            release.set()
            thread.join()


def test_request_forecast_after_a_cycle_is_throttled(settings, monkeypatch):
    from gpuplatform.celery import app as celery_app

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.FORECAST_SECONDS = 60
    sent = []
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: sent.append((a, k)))
    monkeypatch.setattr(tasks, "_last_forecast_request", [0.0])
    assert tasks.request_forecast() is True
    assert tasks.request_forecast() is False  # within FORECAST_SECONDS
    assert sent == [((tasks.RUN_FORECAST,), {"expires": 120})]
    settings.FORECAST_SECONDS = 0
    monkeypatch.setattr(tasks, "_last_forecast_request", [0.0])
    assert tasks.request_forecast() is False  # off


def test_forecast_task_eager(submit):
    submit("p", tasks=1, gpus=8)
    out = tasks.run_forecast.apply(kwargs={"clock": CLOCK.isoformat()}).get()
    assert out["skipped"] is False and out["estimated"] == 1
    assert Job.objects.get(name="p").estimated_start == CLOCK  # fits now: starts at the next cycle
    # another worker's request seconds later: not due yet; FORECAST_SECONDS later it runs again
    later = (CLOCK + timedelta(seconds=5)).isoformat()
    assert tasks.run_forecast.apply(kwargs={"clock": later}).get() == {"skipped": True, "reason": "not due"}
    due = (CLOCK + timedelta(seconds=61)).isoformat()
    assert tasks.run_forecast.apply(kwargs={"clock": due}).get()["skipped"] is False


def test_the_summary_line_is_info_once_a_minute(submit, caplog, monkeypatch):
    """The demo's forecast follows its 600x clock (several a second): its summary is logged at INFO at most once
    a minute of wall time, the others at DEBUG, so the demo's console is not flooded."""
    import logging

    _fill(submit, time_limit_seconds=3600)
    submit("a", tasks=1, gpus=8, time_limit_seconds=600, submitted_at=CLOCK)
    monkeypatch.setattr(fc, "_last_info", [-fc.INFO_EVERY_SECONDS])
    with caplog.at_level(logging.DEBUG, logger="gpuplatform.scheduling.forecast"):
        for i in range(3):
            fc.run_forecast_once(clock=CLOCK + timedelta(seconds=20 + i))
    levels = [r.levelno for r in caplog.records if r.getMessage().startswith("forecast: ")]
    assert levels == [logging.INFO, logging.DEBUG, logging.DEBUG]
