"""Issue #12's fault runs, on real processes (tests/faults/conftest.py: own PostgreSQL, Redis, Celery
worker, gunicorn): Redis stopped, PostgreSQL restarted, the worker killed mid-cycle. Requests stay fast or
answer 503 JSON cleanly; nothing submitted is lost or stored twice; no GPU is ever double-bound; after each
fault the platform catches up on its own (the next submission asks for the cycle)."""
from __future__ import annotations

import time

import pytest

from tests.faults.conftest import wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

FAST = 1.0  # seconds: what "a request never waits on a dead dependency" means here


def _pending(stack, names) -> int:
    return stack.sql("SELECT count(*) FROM gpuplatform_job WHERE name = ANY(%s) AND state = 'pending'",
                     list(names))[0][0]


def _kick_until_bound(stack, names, timeout: float = 90) -> None:
    """Ask for cycles the way the product does (a submission requests one) until `names` are placed."""
    kicks = []

    def bound():
        if _pending(stack, names) == 0:
            return True
        status, body, _, _ = stack.submit(f"kick-{len(kicks)}")
        assert status == 201, body
        kicks.append(body["id"])
        return False

    wait_for(bound, timeout, f"jobs {sorted(names)} to be bound", step=2)


def test_baseline_submission_is_bound_by_the_worker(stack):
    status, body, took, _ = stack.submit("base")
    assert status == 201, body
    _kick_until_bound(stack, ["base"], timeout=60)
    stack.assert_consistent()


def test_redis_stopped_requests_stay_fast_and_the_platform_catches_up(stack):
    stack.redis_stop()
    names, times = [], []
    for i in range(10):
        status, body, took, _ = stack.submit(f"redis-down-{i}")
        assert status == 201, body
        names.append(f"redis-down-{i}")
        times.append(took)
    assert max(times) < FAST, times
    status, _, took, _ = stack.get("/healthz")
    assert status == 200 and took < FAST
    status, body, took, headers = stack.get("/readyz")
    assert status == 503 and body["database"] == "ok" and body["redis"].startswith("unavailable")
    assert headers.get("Retry-After") and took < 3
    status, body, took, _ = stack.get("/api/v1/jobs/?limit=5")  # reads too (throttle cache fails open)
    assert status == 200 and took < FAST
    stack.redis_start()
    _kick_until_bound(stack, names)
    assert stack.sql("SELECT count(*) FROM gpuplatform_job WHERE name LIKE 'redis-down-%%'")[0][0] == 10
    stack.assert_consistent()


def test_postgres_restart_answers_503_json_then_recovers_without_failures(stack):
    for _ in range(4):  # warm the gunicorn workers' persistent connections
        assert stack.get("/api/v1/jobs/?limit=1")[0] == 200
    stack.pg_stop()
    for path in ("/api/v1/jobs/?limit=1", "/api/v1/nodes/"):
        status, body, took, headers = stack.get(path)
        assert status == 503, (status, body)
        assert "database" in body["detail"] and int(headers["Retry-After"]) > 0 and took < 5
    status, body, _, _ = stack.submit("while-down")
    assert status == 503, body
    assert stack.get("/healthz")[0] == 503
    stack.pg_start()
    results = [stack.get("/api/v1/jobs/?limit=1")[0] for _ in range(12)]  # stale connections: health-checked
    assert results == [200] * 12, results
    assert stack.sql("SELECT count(*) FROM gpuplatform_job WHERE name = 'while-down'")[0][0] == 0
    status, body, _, _ = stack.submit("after-pg")
    assert status == 201, body
    _kick_until_bound(stack, ["after-pg"])
    stack.assert_consistent()


def test_worker_killed_mid_cycle_loses_nothing_and_the_next_worker_cycles(stack):
    names = [f"burst-{i}" for i in range(12)]
    log_before = stack.worker_log.read_bytes()
    for name in names:
        assert stack.submit(name)[0] == 201
    # Kill the worker as soon as it has taken a cycle task (a cycle is running in it).
    wait_for(lambda: stack.worker_log.read_bytes().count(b"received") > log_before.count(b"received"), 30,
             "the worker to take a cycle")
    stack.worker_kill()
    stack.assert_consistent()  # the cycle's apply is one transaction: all of it or none of it
    # The dead worker's advisory lock went with its connection: a new worker cycles at once.
    stack.worker_start()
    _kick_until_bound(stack, names)
    rows = stack.sql("SELECT name, count(*) FROM gpuplatform_job WHERE name LIKE 'burst-%%' GROUP BY name")
    assert sorted(rows) == sorted((n, 1) for n in names)  # each accepted submission stored exactly once
    stack.assert_consistent()
    errors = stack.sql("SELECT count(*) FROM gpuplatform_schedulercycle WHERE error <> ''")[0][0]
    assert errors == 0
