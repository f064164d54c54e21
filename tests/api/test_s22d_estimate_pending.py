"""New-user trial 22, G10: after a drain requeued a job it showed estimated_start null and an empty estimate_note
until the next forecast (up to FORECAST_SECONDS), while every pending job is said to carry an estimate or "no
estimate" with a reason. A pending job the forecast has not seen yet now says when one comes."""
from __future__ import annotations

from datetime import timedelta

from gpuplatform import clock, services
from gpuplatform.execution import expire_stops
from gpuplatform.models import Job, Queue, Team
from gpuplatform.scheduling import store

from tests.api.conftest import SLEEP

PENDING = "estimate pending: the next forecast, within 60 s, gives one"


def _get(admin, job):
    return admin.get(f"/api/v1/jobs/{job.pk}/").json()


def test_a_job_a_drain_requeues_says_its_estimate_is_pending(admin, settings):
    settings.FORECAST_SECONDS = 60
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    job = services.submit_job(command=SLEEP, team=team, queue=queue, name="drained",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    assert _get(admin, job)["estimate_note"] == PENDING  # submitted, not forecast yet
    now = clock.now()
    store.run_cycle_once(clock=now)
    job.refresh_from_db()
    assert job.state == "running"
    assert _get(admin, job)["estimate_note"] == ""  # a running job has none
    [node] = {t.node.name for t in job.tasks.select_related("node")}
    assert admin.post(f"/api/v1/nodes/{node}/drain/", {}, format="json").status_code == 200
    expire_stops(now + timedelta(hours=1))
    job.refresh_from_db()
    assert (job.state, job.estimated_start, job.estimate_note) == ("pending", None, "")
    body = _get(admin, job)
    assert (body["estimated_start"], body["estimate_note"]) == (None, PENDING)
    listed = admin.get("/api/v1/jobs/", {"state": "pending"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [r["estimate_note"] for r in rows if r["id"] == job.pk] == [PENDING]


def test_a_forecasts_own_no_estimate_reason_is_kept_and_an_off_forecast_is_said(admin, settings):
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    job = services.submit_job(command=SLEEP, team=team, queue=queue, name="far",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    Job.objects.filter(pk=job.pk).update(estimate_note="not started within the 168 h horizon",
                                         estimated_at=clock.now())
    assert _get(admin, job)["estimate_note"] == "not started within the 168 h horizon"
    Job.objects.filter(pk=job.pk).update(estimate_note="")
    settings.FORECAST_SECONDS = 0
    assert _get(admin, job)["estimate_note"] == "no estimate: the forecast is off (FORECAST_SECONDS = 0)"
