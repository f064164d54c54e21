"""Celery tasks and the in-process loop: thin shells around `gpuplatform.scheduling.store.run_cycle_once`.

- `run_scheduling_cycle`: the Celery task (beat runs it every SCHEDULER_CYCLE_SECONDS; submissions ask
  for one through `request_cycle`). Single-flight: a second concurrent run returns {"skipped": True}.
- `request_cycle()`: ask for a cycle by task name when a broker (REDIS_URL) is configured, fire-and-forget
  (a sender thread publishes it; a broker outage never blocks or fails the caller), else do nothing (the
  embedded loop will pick the work up on its next tick).
- `detect_node_failures`: periodic failure detection (beat, every FAILURE_CHECK_SECONDS).
- `run_forecast` (issue #15): the forecast of every pending job's start (scheduling/forecast.py), sent by
  name after a cycle when FORECAST_SECONDS have passed since the last one (`request_forecast`); a separate
  task on its own single-flight lock, so it never delays a cycle.
- `run_loop(...)`: the embedded default's scheduling loop, run in a thread of the web process; it runs
  failure detection before every cycle, and the forecast in a thread of its own when due.

The task NAMES (RUN_SCHEDULING_CYCLE, DETECT_NODE_FAILURES) are what beat schedules
(settings.CELERY_BEAT_SCHEDULE) and queued messages carry, so they keep the `scheduler.tasks.` prefix of
the module these tasks lived in before the cycle's database side moved into the platform.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta
from typing import Callable

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, connection

log = logging.getLogger("gpuplatform.scheduling.tasks")

RUN_SCHEDULING_CYCLE = "scheduler.tasks.run_scheduling_cycle"
DETECT_NODE_FAILURES = "scheduler.tasks.detect_node_failures"
RUN_FORECAST = "scheduler.tasks.run_forecast"
_last_forecast_request = [0.0]  # monotonic time this process last asked for a forecast
_forecast_thread: list[threading.Thread | None] = [None]
_last_forecast_clock: list[datetime | None] = [None]  # cluster time at which this process last started one
_forecast_wall = [0.0, 0.0]  # monotonic end of this process's last forecast thread, and its wall seconds


def _summary(cycle) -> dict:
    if cycle is None:
        return {"skipped": True}
    return {"skipped": False, "number": cycle.number, "binds": cycle.binds, "pending": cycle.pending,
            "stale_skipped": cycle.stale_skipped, "duration_ms": cycle.duration_ms}


def _clock(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@shared_task(name=RUN_SCHEDULING_CYCLE, ignore_result=False)
def run_scheduling_cycle(clock: str | None = None) -> dict:
    """Run failure detection and one cycle now, under one lock (cluster clock = wall clock, or `clock`, an
    ISO 8601 time with its zone, for replays and tests). Returns {"skipped", "number", "binds", "pending", "stale_skipped", "duration_ms"};
    raises what the cycle raised (the failure is recorded first)."""
    from gpuplatform.scheduling.store import run_cycle_once

    summary = _summary(run_cycle_once(clock=_clock(clock), detect=True))
    if not summary["skipped"]:
        request_forecast()
    return summary


@shared_task(name=RUN_FORECAST, ignore_result=False)
def run_forecast(clock: str | None = None) -> dict:
    """Forecast every pending job's start at cluster time `clock` (ISO 8601; default the cluster clock).
    Returns scheduling.forecast.run_forecast_once's summary, or {"skipped": True} when another runs or the
    last forecast is less than FORECAST_SECONDS old (forecast_due)."""
    from gpuplatform import clock as cluster_clock
    from gpuplatform.scheduling.forecast import forecast_due, run_forecast_once

    when = _clock(clock) or cluster_clock.now()
    if not forecast_due(when):  # several cycle workers may each ask: one forecast per FORECAST_SECONDS
        return {"skipped": True, "reason": "not due"}
    summary = run_forecast_once(clock=when)
    return {"skipped": True} if summary is None else {"skipped": False, **summary}


def _forecast_period() -> float:
    return float(getattr(settings, "FORECAST_SECONDS", 60))


def _take_forecast_turn(period: float) -> bool:
    """True (and the time noted) when this process last asked for a forecast `period` seconds ago or more."""
    if time.monotonic() - _last_forecast_request[0] < period:
        return False
    _last_forecast_request[0] = time.monotonic()
    return True


def request_forecast() -> bool:
    """After a cycle: send RUN_FORECAST by name unless this process asked less than FORECAST_SECONDS ago
    (FORECAST_SECONDS <= 0 turns the forecast off). Returns True if a task was enqueued; never raises."""
    period = _forecast_period()
    if period <= 0 or not getattr(settings, "REDIS_URL", "") or not _take_forecast_turn(period):
        return False
    try:
        from gpuplatform.celery import app

        app.send_task(RUN_FORECAST, expires=max(period * 2, 10))
        return True
    except Exception:  # noqa: BLE001 - the cycle must not fail because the broker is down
        log.warning("could not enqueue a forecast", exc_info=True)
        return False


def forecast_in_thread(clock: datetime) -> threading.Thread | None:
    """The embedded loop's forecast: run it in a daemon thread at cluster time `clock` when none runs and
    FORECAST_SECONDS of cluster time have passed since this process last started one (or the clock went
    back). The period is on the cluster clock, not the wall clock: the trace demo's clock runs 600x, and a
    forecast every 60 wall seconds left estimated starts up to ~10 simulated hours stale (new-user trial
    7, F7); on a wall clock it is the same as before. A forecast that took a second or more is followed by
    at least as long a pause (wall time), so back-to-back forecasts take at most half the process's time.
    Returns the thread, or None."""
    period = _forecast_period()
    running = _forecast_thread[0]
    if period <= 0 or (running is not None and running.is_alive()):
        return None
    last = _last_forecast_clock[0]
    if last is not None and last <= clock < last + timedelta(seconds=period):
        return None
    ended, took = _forecast_wall
    if took >= 1.0 and time.monotonic() - ended < took:
        return None
    _last_forecast_clock[0] = clock

    def work():
        from gpuplatform.scheduling.forecast import run_forecast_once

        began = time.monotonic()
        try:
            run_forecast_once(clock=clock)
        except Exception:  # noqa: BLE001 - logged; the next period tries again
            log.exception("forecast failed")
        finally:
            close_old_connections()
            _forecast_wall[:] = [time.monotonic(), time.monotonic() - began]

    thread = threading.Thread(target=work, name="forecast", daemon=True)
    _forecast_thread[0] = thread
    thread.start()
    return thread


def wait_for_forecast(timeout_seconds: float = 60.0) -> bool:
    """Wait up to `timeout_seconds` (wall) for the forecast thread forecast_in_thread started, if one runs.
    A loop that stops calls it, so that no forecast goes on writing (and holding its connection's locks)
    after the loop's owner has moved on: the CI run at 22c0f34 lost a test's teardown (its TRUNCATE) to a
    demo's forecast still running after the demo returned. Returns True when no forecast runs any more."""
    running = _forecast_thread[0]
    if running is None or running is threading.current_thread():
        return True
    running.join(timeout_seconds)
    return not running.is_alive()


@shared_task(name=DETECT_NODE_FAILURES, ignore_result=False)
def detect_node_failures(now: str | None = None) -> dict:
    """Periodic failure detection (failures.py) at wall-clock time (or `now`, ISO 8601), under
    the cycle's single-flight lock so it never interleaves with a cycle's apply. Returns what changed,
    or {"skipped": True} when a cycle holds the lock: that cycle ran detection when it took the lock
    (run_scheduling_cycle detects first), so detection never starves under load."""
    from django.utils import timezone

    from gpuplatform.scheduling.failures import detect_failures
    from gpuplatform.scheduling.locks import single_flight

    with single_flight() as acquired:
        if not acquired:
            return {"skipped": True}
        report = detect_failures(_clock(now) or timezone.now())
    return {"skipped": False, "not_ready": report.not_ready, "failed_nodes": report.failed_nodes,
            "requeued": report.requeued, "drained": report.drained}


class _CycleRequester:
    """Fire-and-forget cycle requests: `request()` only sets a flag; one daemon thread per process sends
    RUN_SCHEDULING_CYCLE. Requests made while a send is under way coalesce into one more send, and after
    a failed send (broker down) nothing is sent for BROKER_RETRY_SECONDS: the beat's periodic cycle (or a
    later submission) catches up. A request never waits on the broker."""

    def __init__(self) -> None:
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.down_until = 0.0

    def request(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()  # a forked worker (gunicorn) does not inherit the parent's thread
                self._thread = threading.Thread(target=self._run, name="cycle-requester", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            send_cycle_request()


_requester = _CycleRequester()
BROKER_RETRY_SECONDS = 5.0


def send_cycle_request() -> bool:
    """Send RUN_SCHEDULING_CYCLE by name now (it expires after two cycle periods, at least 10 s), with no
    publish retries and the broker's short connect timeout (settings.CELERY_BROKER_TRANSPORT_OPTIONS).
    Returns True if sent. Never raises: a failure is logged and further sends pause BROKER_RETRY_SECONDS."""
    if time.monotonic() < _requester.down_until:
        return False
    try:
        from gpuplatform.celery import app

        app.send_task(RUN_SCHEDULING_CYCLE, expires=max(settings.SCHEDULER_CYCLE_SECONDS * 2, 10), retry=False)
        return True
    except Exception:  # noqa: BLE001 - a submission must not fail because the broker is down
        _requester.down_until = time.monotonic() + BROKER_RETRY_SECONDS
        log.warning("could not enqueue a scheduling cycle (beat catches up)", exc_info=True)
        return False


def request_cycle() -> bool:
    """Ask for a scheduling cycle soon, without waiting: returns True when a broker (REDIS_URL) is
    configured and the request was handed to this process's sender thread (`send_cycle_request`), False
    without a broker (the embedded loop picks the work up on its next tick). Never raises or blocks."""
    if not getattr(settings, "REDIS_URL", ""):
        return False
    _requester.request()
    return True


def run_loop(*, interval_seconds: float, clock_fn: Callable[[], datetime], stop_event: threading.Event,
             config=None, on_cycle: Callable | None = None, forecast: bool = False) -> int:
    """Run cycles every `interval_seconds` (wall time) until `stop_event` is set; each cycle runs at
    cluster time `clock_fn()`, after failure detection at that time. A failing cycle is logged (and recorded by run_cycle_once) and the loop
    goes on. `on_cycle(cycle_or_None)` is called after each attempt; `forecast` runs the forecast after a
    cycle when due (forecast_in_thread). Returns the number of cycles run."""
    from gpuplatform.scheduling.store import run_cycle_once

    count = 0
    while not stop_event.is_set():
        cycle = None
        try:
            now = clock_fn()
            cycle = run_cycle_once(clock=now, config=config, detect=True)
            count += cycle is not None
            if cycle is not None and forecast:
                forecast_in_thread(now)
        except Exception:  # noqa: BLE001 - keep the loop alive; the error is in SchedulerCycle.error
            log.exception("scheduling loop: cycle failed")
        finally:
            if not connection.in_atomic_block:  # inside a test's transaction, closing would break it
                close_old_connections()
        if on_cycle is not None:
            on_cycle(cycle)
        stop_event.wait(interval_seconds)
    if forecast:
        wait_for_forecast()
    return count
