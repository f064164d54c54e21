"""Integration fixtures: PostgreSQL + Redis + a real Celery worker subprocess.

Tests marked `services` are skipped when PostgreSQL (DATABASE_URL must point at it) or Redis is
unreachable, UNLESS the environment variable CI is set: then they fail, so CI can never go green by
skipping them. Redis: INTEGRATION_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379/13. The worker
consumes a queue private to this test session, so no other worker on the same Redis can steal its tasks.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kombu import pools as kombu_pools

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("INTEGRATION_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/13"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _services_problem() -> str | None:
    from django.conf import settings

    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        return "DATABASE_URL does not point at PostgreSQL"
    if not _reachable(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)):
        return "PostgreSQL is unreachable"
    redis = urlparse(REDIS_URL)
    if not _reachable(redis.hostname or "127.0.0.1", redis.port or 6379):
        return f"Redis is unreachable at {REDIS_URL}"
    return None


@pytest.fixture(autouse=True)
def _require_services(request):
    if request.node.get_closest_marker("services") is None:
        return
    problem = _services_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the integration services are missing: {problem}")
        pytest.skip(problem)


@pytest.fixture(autouse=True)
def _no_cycle_on_commit(monkeypatch):
    """Submissions would enqueue extra cycles (when REDIS_URL is set) that race the test's own cycles and
    the teardown's TRUNCATE; each test asks for the cycles it checks explicitly."""
    monkeypatch.setattr("gpuplatform.scheduling.tasks.request_cycle", lambda: False)


@pytest.fixture(scope="session")
def celery_queue() -> str:
    return f"itest-{uuid.uuid4().hex[:10]}"


def _point_app_at(app, **conf) -> None:
    """Reconfigure this process's Celery app, dropping what it cached from the old settings (an earlier
    test may have used it eagerly with the memory broker and no result backend)."""
    app.conf.update(**conf)
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)
    # kombu keeps connection and producer pools in process-wide registries keyed by broker URL: closing
    # only the app's pool leaves a closed pool registered under the same URL ("Acquire on closed pool"
    # when an earlier test already used this broker), so close and forget them all.
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    for cached in ("queues", "router", "_rtable"):
        app.amqp.__dict__.pop(cached, None)


def _db_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    return (f"postgres://{db['USER'] or 'postgres'}" + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
            + f"@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}")


def start_worker(queue: str, log_path: Path, env_extra: dict | None = None) -> subprocess.Popen:
    """Start `celery -A gpuplatform worker --pool=solo` on the pytest-django test database, consuming only
    `queue`, with `env_extra` over the environment (settings such as HEARTBEAT_TIMEOUT_SECONDS); returns
    once it is ready. Raises RuntimeError with its log when it does not come up within 60 s."""
    env = {**os.environ, "DATABASE_URL": _db_url(), "REDIS_URL": REDIS_URL, "CELERY_RESULT_BACKEND": REDIS_URL,
           "DJANGO_SETTINGS_MODULE": "gpuplatform.settings",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"), os.environ.get("PYTHONPATH", "")]),
           **(env_extra or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuplatform", "worker", "--pool=solo", "-l", "info",
             "-Q", queue, "-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b" ready." not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_worker(proc)
            raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, celery_queue, tmp_path_factory):
    """Start `celery -A gpuplatform worker --pool=solo` against the pytest-django test database and this
    session's private queue. Stopped (and its DB connection closed) before the test database is dropped. This
    process's Celery app points at the same broker and queue only during the tests that use the worker
    (`_app_on_the_worker`): a later test elsewhere whose submission asks for a cycle on commit must not have the
    live worker run one on the test database while that test flushes it (CI, session 11: a TRUNCATE deadlocked
    with such a cycle in tests/platform/test_references.py)."""
    problem = _services_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the integration services are missing: {problem}")
        pytest.skip(problem)
    from gpuplatform.celery import app

    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    proc = start_worker(celery_queue, log_path)
    try:
        yield {"queue": celery_queue, "log": log_path, "process": proc, "app": app}
    finally:
        stop_worker(proc)


@pytest.fixture(autouse=True)
def _app_on_the_worker(request):
    """For a test that uses the session's worker (`celery_worker`, directly or through another fixture): this
    process's Celery app sent to the worker's broker and queue during the test, back as it was after it."""
    if "celery_worker" not in request.fixturenames:
        yield
        return
    worker = request.getfixturevalue("celery_worker")
    app = worker["app"]
    saved = {k: app.conf[k] for k in ("broker_url", "result_backend", "task_default_queue")}
    _point_app_at(app, broker_url=REDIS_URL, result_backend=REDIS_URL, task_default_queue=worker["queue"])
    try:
        yield
    finally:
        _point_app_at(app, **saved)
