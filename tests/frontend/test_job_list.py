"""The jobs page: search by name / id / external id, filters (team, state, queue, submitter), sort by any
column (finished and duration included), keyset pages stable while jobs are submitted, live regions."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest

from gpuplatform.models import Job
from tests.frontend.conftest import T0

pytestmark = pytest.mark.django_db


def _ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-job="(\d+)"', html)]


def _next(html: str) -> str | None:
    m = re.search(r'href="([^"]+)" rel="next"', html)
    return "/jobs/" + m.group(1).replace("&amp;", "&") if m else None


def test_search_by_name_id_and_external_id(client, world):
    client.force_login(world["admin"])
    job = world["jobs"]["red-pending"]
    Job.objects.filter(pk=job.pk).update(external_id="ci-4711")
    assert _ids(client.get("/jobs/?q=red-pend").content.decode()) == [job.pk]
    assert _ids(client.get(f"/jobs/?q={job.pk}").content.decode()) == [job.pk]
    assert _ids(client.get("/jobs/?q=ci-47").content.decode()) == [job.pk]
    assert _ids(client.get("/jobs/?q=nothing-like-this").content.decode()) == []


def test_filters_team_state_queue_submitter(client, world):
    client.force_login(world["admin"])
    Job.objects.filter(pk=world["jobs"]["blue-pending"].pk).update(submitter=world["alice"])
    blue = _ids(client.get("/jobs/?team=blue").content.decode())
    assert sorted(blue) == sorted([world["jobs"]["blue-done"].pk, world["jobs"]["blue-pending"].pk])
    assert _ids(client.get("/jobs/?state=finished").content.decode()) == [world["jobs"]["blue-done"].pk]
    assert _ids(client.get("/jobs/?queue=red&state=pending").content.decode()) == [world["jobs"]["red-pending"].pk]
    assert _ids(client.get("/jobs/?submitter=alice").content.decode()) == [world["jobs"]["blue-pending"].pk]


def test_sort_by_every_column_with_finished_and_duration(client, world, make_job):
    client.force_login(world["admin"])
    done = world["jobs"]["blue-done"]
    Job.objects.filter(pk=done.pk).update(finished_at=done.started_at + timedelta(hours=2, minutes=5))
    html = client.get("/jobs/?sort=-duration").content.decode()
    assert _ids(html)[0] == done.pk and "2h 5m" in html and 'title="7500 s"' in html
    by_name = _ids(client.get("/jobs/?sort=name").content.decode())
    names = dict(Job.objects.values_list("pk", "name"))
    assert [names[i] for i in by_name] == sorted(names.values())
    assert [names[i] for i in _ids(client.get("/jobs/?sort=-name").content.decode())] == sorted(names.values())[::-1]
    for column in ("submitted", "started", "finished", "duration", "team", "queue", "state", "gpus", "priority"):
        for sort in (column, f"-{column}"):
            r = client.get(f"/jobs/?sort={sort}")
            assert r.status_code == 200 and len(_ids(r.content.decode())) == 4, sort
    assert 'aria-sort="descending"' in html


@pytest.mark.parametrize("sort", ["-submitted", "name", "-gpus", "finished"])
def test_keyset_pages_list_each_job_once_while_jobs_are_submitted(client, world, make_job, settings, sort,
                                                                   monkeypatch):
    """Offset pages shifted under inserts; cursor pages do not, in any sort order (ties on the sort key
    are broken by id)."""
    from frontend import views

    monkeypatch.setattr(views, "JOBS_PER_PAGE", 3)
    for i in range(7):
        make_job(world["red"], world["queues"]["red"], f"bulk-{i}", Job.State.PENDING, gpus=1 + i % 2,
                 at=T0 + timedelta(minutes=i % 3))
    client.force_login(world["admin"])
    before = set(Job.objects.values_list("pk", flat=True))
    seen, url = [], f"/jobs/?sort={sort}"
    while url:
        html = client.get(url).content.decode()
        seen += _ids(html)
        make_job(world["red"], world["queues"]["red"], f"new-{len(seen)}", Job.State.PENDING,
                 at=T0 + timedelta(days=1))
        url = _next(html)
    assert len(seen) == len(set(seen)) and before <= set(seen)
    html = client.get(f"/jobs/?sort={sort}&cursor=not-a-cursor").content.decode()
    assert len(_ids(html)) == 3  # a foreign cursor shows the first page


def test_job_pages_are_live_regions(client, world):
    """live.js refreshes the [data-live] regions; a finished job's page marks itself done (no polling)."""
    client.force_login(world["admin"])
    listing = client.get("/jobs/").content.decode()
    assert 'id="job-rows" data-live' in listing and "frontend/live.js" in listing
    running = client.get(f"/jobs/{world['jobs']['red-running'].pk}/").content.decode()
    assert 'id="job-head" data-live data-live-interval-ms="3000">' in running
    assert 'id="job-tasks" data-live' in running and 'id="job-events" data-live' in running
    done = client.get(f"/jobs/{world['jobs']['blue-done'].pk}/").content.decode()
    assert "data-live-done" in done
