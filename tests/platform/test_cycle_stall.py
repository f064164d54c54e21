"""A scheduler that stopped is visible (new-user trial 14, F10): with the Celery worker dead, /readyz stayed ready,
pending jobs read "waiting for the next scheduling cycle" forever, and the restarted worker ran the 35 queued beat
cycles back to back. Now beat's periodic messages expire after one period, and once no cycle has run for
SCHEDULER_STALL_SECONDS /readyz, every page, the pending reason and /metrics say so."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Job, SchedulerCycle
from tests.platform.helpers_platform import small_spec


def test_every_periodic_task_expires_within_its_period():
    """Beat sends a message per period whether a worker consumes or not: each expires after one period, so a
    worker that comes back drops the stale ones instead of running the backlog."""
    schedule = django_settings.CELERY_BEAT_SCHEDULE
    assert "scheduling-cycle" in schedule
    for name, entry in schedule.items():
        expires = (entry.get("options") or {}).get("expires")
        assert expires is not None and 0 < expires <= float(entry["schedule"]), (name, entry)


@pytest.fixture
def pending_job(db, settings):
    settings.REDIS_URL = ""
    settings.SCHEDULER_CYCLE_SECONDS = 2
    settings.SCHEDULER_STALL_SECONDS = 0  # the default: five periods, at least 30 s
    services.load_cluster_spec(small_spec())
    user = get_user_model().objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    api = APIClient()
    api.force_authenticate(user)
    r = api.post("/api/v1/jobs/", {"name": "waits", "queue": "alpha", "command": "sleep 1",
                                   "roles": [{"tasks": 1, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 201, r.content[:300]
    return api, user, Job.objects.get(pk=r.json()["id"])


def _cycle(number: int, seconds_ago: float):
    when = timezone.now() - timedelta(seconds=seconds_ago)
    SchedulerCycle.objects.create(number=number, started_at=when, clock=when)


@pytest.mark.django_db
def test_a_stalled_scheduler_shows_on_readyz_pages_pending_reasons_and_metrics(client, pending_job, settings):
    api, user, job = pending_job
    _cycle(1, 3)  # cycles run: nothing is said
    body = client.get("/readyz").json()
    assert body["scheduler"] == "ok" and body["ready"] is True
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"] == job.pending_reason
    client.force_login(user)
    assert 'id="cycle-stall"' not in client.get("/jobs/").content.decode()

    SchedulerCycle.objects.all().delete()
    _cycle(2, 45)  # the worker died 45 s ago: more than five 2-s periods and 30 s
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True  # the web tier still serves
    assert r.json()["scheduler"].startswith("stalled: no scheduling cycle for 45 s (expected every 2 s)"), r.json()
    reason = api.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"]
    assert reason.startswith("no scheduling cycle for 45 s") and reason.endswith(job.pending_reason), reason
    listed = api.get("/api/v1/jobs/").json()["results"]
    assert all(j["pending_reason"].startswith("no scheduling cycle") for j in listed if j["state"] == "pending")
    for page in ("/jobs/", f"/jobs/{job.pk}/", "/"):
        html = client.get(page).content.decode()
        assert 'id="cycle-stall"' in html and "no scheduling cycle for 45 s" in html, page
    metrics = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}" if getattr(
        settings, "METRICS_TOKEN", "") else "").content.decode()
    stamp = SchedulerCycle.objects.get(number=2).started_at.timestamp()
    line = next(ln for ln in metrics.splitlines() if ln.startswith("gpuplatform_last_cycle_timestamp_seconds "))
    assert abs(float(line.split()[1]) - stamp) < 1e-3

    settings.SCHEDULER_STALL_SECONDS = 60  # an operator's own threshold
    assert client.get("/readyz").json()["scheduler"] == "ok"


@pytest.mark.django_db
def test_before_the_first_cycle_a_job_waiting_long_is_a_stall(client, pending_job):
    api, _, job = pending_job
    assert client.get("/readyz").json()["scheduler"] == "ok"  # just submitted, no cycle yet: not a stall yet
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    assert client.get("/readyz").json()["scheduler"].startswith("stalled: no scheduling cycle has run yet")
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"].startswith("no scheduling cycle has run yet")
