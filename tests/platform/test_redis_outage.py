"""Issue #12, Redis outage: asking for a cycle never blocks a request, /healthz answers from the database
alone, /readyz reports each dependency, and the shared cache (throttles) fails open and fast."""
from __future__ import annotations

import time

import pytest
from django.test import TestCase

from gpuplatform.cache import FailOpenRedisCache

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connection refused at once


@pytest.fixture
def dead_cache(monkeypatch):
    monkeypatch.setattr(FailOpenRedisCache, "_down_until", 0.0)
    return FailOpenRedisCache(DEAD_REDIS, {"OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}})


def test_shared_cache_fails_open_and_then_stops_trying(dead_cache, monkeypatch):
    started = time.monotonic()
    assert dead_cache.get("k", "dflt") == "dflt"
    assert dead_cache.add("k", 1) is False
    dead_cache.set("k", 1)
    assert dead_cache.get_many(["k"]) == {}
    assert time.monotonic() - started < 2
    # During the pause no connection is even tried.
    monkeypatch.setattr("django.core.cache.backends.redis.RedisCache.get", lambda *a, **k: 1 / 0)
    assert dead_cache.get("k", "again") == "again"


def test_shared_cache_is_redis_when_a_broker_is_configured():
    from django.conf import settings

    if settings.REDIS_URL:
        assert settings.CACHES["default"]["BACKEND"] == "gpuplatform.cache.FailOpenRedisCache"
        assert settings.CACHES["default"]["LOCATION"] == settings.REDIS_URL


@pytest.mark.django_db
def test_healthz_ignores_redis_and_readyz_reports_it(client, settings):
    settings.REDIS_URL = DEAD_REDIS
    started = time.monotonic()
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert time.monotonic() - started < 3
    assert r.status_code == 503 and r["Retry-After"]
    body = r.json()
    assert body["database"] == "ok" and body["redis"].startswith("unavailable") and body["ready"] is False


@pytest.mark.django_db
def test_readyz_all_ok(client, settings):
    settings.REDIS_URL = ""
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True and r.json()["database"] == "ok"


@pytest.mark.django_db
def test_submission_with_a_dead_broker_answers_at_once(settings, monkeypatch, client):
    """A job submitted while the broker is unreachable: the request's cycle request is handed to the
    sender thread; the request itself answers in well under a second."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from gpuplatform import services
    from gpuplatform.celery import app
    from gpuplatform.scheduling import tasks
    from tests.platform.helpers_platform import small_spec

    services.load_cluster_spec(small_spec())
    settings.REDIS_URL = DEAD_REDIS
    monkeypatch.setattr(tasks._requester, "down_until", 0.0)
    slow = []
    monkeypatch.setattr(app, "send_task", lambda *a, **k: (slow.append(1), time.sleep(3)))
    user = get_user_model().objects.create_user("root", password="pw", is_staff=True)
    api = APIClient()
    api.force_authenticate(user)
    started = time.monotonic()
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = api.post("/api/v1/jobs/", {"name": "fast", "queue": "alpha", "command": "sleep 1",
                                       "roles": [{"tasks": 1, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 201, r.content[:300]
    assert time.monotonic() - started < 1.5
