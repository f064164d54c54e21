"""The pages say what gpuctl says (one wording, gpuplatform.wording): a start estimated with an assumed run time
says so in the estimate (new-user trial 25, F2: "run time assumed: no history"; the job page keeps the whole note
next to it), and a pending reason's retry time is counted from the cluster's clock, as every other time of the
column is (F3: "attempt 1 retries at 2026-12-04T17:04:23Z" reads "attempt 1 retries in about 40 s"; the API's
pending_reason keeps the engine's words)."""
from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import clock
from gpuplatform.models import Job

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 4, 17, 3, 43, tzinfo=tz.utc)
RETRY = "requeued after attempt 0; attempt 1 retries at 2026-12-04T17:04:23Z"


@pytest.fixture
def cluster_clock():
    clock.use(lambda: NOW)
    yield
    clock.use(None)


def _pending(world, **fields):
    job = world["jobs"]["blue-pending"]
    Job.objects.filter(pk=job.pk).update(**fields)
    return job


def test_the_pages_count_a_retry_time_from_the_clusters_clock(client, world, cluster_clock):
    job = _pending(world, pending_reason=RETRY)
    client.force_login(world["admin"])
    for path in ("/jobs/", "/queueing/", f"/jobs/{job.pk}/"):
        html = client.get(path).content.decode()
        assert "attempt 1 retries in about 40 s" in html, path
        assert "retries at 2026-12-04T17:04:23Z" not in html, path
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"].endswith(RETRY)  # the API: the engine's words


def test_the_pages_say_a_run_time_was_assumed(client, world, cluster_clock):
    start = NOW + timedelta(hours=1)
    job = _pending(world, estimated_start=start, estimated_start_p90=start, estimated_at=NOW,
                   estimate_note="run time from no history yet (1 h assumed)")
    client.force_login(world["admin"])
    for path in ("/jobs/", "/queueing/"):
        assert "in about 1 h (run time assumed: no history)" in client.get(path).content.decode(), path
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Estimated start: in about 1 h (" in detail and "run time assumed" not in detail  # the whole note:
    assert "· run time from no history yet (1 h assumed)" in detail
    Job.objects.filter(pk=job.pk).update(estimate_note="run time from the queue's recent jobs (5 jobs)")
    assert "run time assumed" not in client.get("/jobs/").content.decode()
