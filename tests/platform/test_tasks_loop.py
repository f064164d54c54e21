"""gpuplatform.scheduling.tasks: request_cycle is a no-op without a broker and sends the cycle task by name with
one; run_loop runs cycles until stopped."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone as tz

from gpuplatform.celery import app as celery_app
from gpuplatform.models import Job, SchedulerCycle
from gpuplatform.scheduling import tasks
from tests.platform.helpers_platform import first_fit


def test_request_cycle_without_broker_does_nothing(settings, monkeypatch):
    settings.REDIS_URL = ""
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: 1 / 0)
    assert tasks.request_cycle() is False


def test_send_cycle_request_enqueues_by_name_without_retries_and_never_raises(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.SCHEDULER_CYCLE_SECONDS = 30
    monkeypatch.setattr(tasks._requester, "down_until", 0.0)
    sent = []
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: sent.append((a, k)))
    assert tasks.send_cycle_request() is True
    assert sent == [(("scheduler.tasks.run_scheduling_cycle",), {"expires": 60, "retry": False})]
    assert tasks.run_scheduling_cycle.name == tasks.RUN_SCHEDULING_CYCLE == "scheduler.tasks.run_scheduling_cycle"
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: 1 / 0)
    assert tasks.send_cycle_request() is False
    # After a failure the broker is left alone for a while: no send is even tried.
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: sent.append((a, k)))
    assert tasks.send_cycle_request() is False and len(sent) == 1


def test_request_cycle_never_waits_on_the_broker(settings, monkeypatch):
    """A broker that hangs (Redis stopped: reconnects) costs the caller nothing: the send happens on the
    sender thread, and requests made meanwhile coalesce into one more send."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(tasks._requester, "down_until", 0.0)
    release, sends = threading.Event(), []

    def hanging_send(*a, **k):
        sends.append(1)
        release.wait(10)

    monkeypatch.setattr(celery_app, "send_task", hanging_send)
    started = time.monotonic()
    assert all(tasks.request_cycle() is True for _ in range(50))
    assert time.monotonic() - started < 0.5
    deadline = time.monotonic() + 5
    while not sends and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    deadline = time.monotonic() + 5
    while len(sends) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert 1 <= len(sends) <= 2  # 50 requests: the one being sent, then at most one coalesced send


def test_no_result_backend_by_default():
    """Nothing waits on task results in production; a result backend's reconnects blocked submissions."""
    from django.conf import settings as django_settings

    if "CELERY_RESULT_BACKEND" not in __import__("os").environ:
        assert django_settings.CELERY_RESULT_BACKEND is None
    assert django_settings.CELERY_BROKER_TRANSPORT_OPTIONS["socket_connect_timeout"] <= 2


def test_celery_task_eager(submit, monkeypatch):
    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    submit("j", tasks=1, gpus=1)
    summary = tasks.run_scheduling_cycle.apply().get()
    assert summary["skipped"] is False and summary["binds"] == 1


def test_run_loop_runs_cycles_on_the_given_clock_and_survives_errors(submit, monkeypatch):
    calls = {"n": 0}

    def engine(snapshot, config=None, *, cache=None):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("first cycle crashes")
        return first_fit(snapshot, config)

    monkeypatch.setattr("scheduler.core.run_cycle", engine)
    submit("j", tasks=1, gpus=1)
    stop = threading.Event()
    start = datetime(2024, 1, 1, tzinfo=tz.utc)
    ticks = iter(start + timedelta(minutes=i) for i in range(100))
    seen = []

    def on_cycle(cycle):
        seen.append(cycle)
        if len(seen) == 3:
            stop.set()

    count = tasks.run_loop(interval_seconds=0, clock_fn=lambda: next(ticks), stop_event=stop, on_cycle=on_cycle)
    assert count == 2 and seen[0] is None
    assert list(SchedulerCycle.objects.order_by("number").values_list("clock", flat=True)) == \
        [start, start + timedelta(minutes=1), start + timedelta(minutes=2)]
    assert SchedulerCycle.objects.get(number=1).error
    assert Job.objects.get().state == "running"
