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
    r = client.get(f"/jobs/?sort={sort}&cursor=not-a-cursor")
    # a foreign cursor is a 400 saying so above an empty list, not page 1 silently (new-user trial 9, F7)
    assert r.status_code == 400 and len(_ids(r.content.decode())) == 0 and "cursor: " in r.content.decode()


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


def test_a_search_for_an_id_shows_that_job_first(client, world, make_job, monkeypatch):
    """New-user report 7, F11: ?q=<id> also matches names containing the digits (philly-321xx); the job with
    that id comes first, not somewhere on a later page."""
    from frontend import views

    monkeypatch.setattr(views, "JOBS_PER_PAGE", 3)
    target = world["jobs"]["red-pending"]
    for i in range(5):  # newer jobs whose names contain the id: they fill the first page (newest first)
        make_job(world["red"], world["queues"]["red"], f"philly-{target.pk}{i}", Job.State.PENDING,
                 at=T0 + timedelta(days=1, minutes=i))
    client.force_login(world["admin"])
    html = client.get(f"/jobs/?q={target.pk}").content.decode()
    ids = _ids(html)
    assert ids[0] == target.pk and len(ids) == len(set(ids)) == 4  # the match, then the first page
    assert _ids(client.get(f"/jobs/?q=%23{target.pk}").content.decode())[0] == target.pk


def test_duration_ascending_lists_finished_jobs_before_unfinished_ones(client, world):
    """F12: ascending by duration, jobs without one (not finished: "—") come after the finished ones."""
    client.force_login(world["admin"])
    done = world["jobs"]["blue-done"]
    Job.objects.filter(pk=done.pk).update(finished_at=done.started_at + timedelta(hours=2))
    ids = _ids(client.get("/jobs/?sort=duration").content.decode())
    assert ids[0] == done.pk, ids
    assert _ids(client.get("/jobs/?sort=-duration").content.decode())[0] == done.pk


def test_pending_filter_drops_the_columns_a_pending_job_leaves_empty(client, world):
    """F8: on ?state=pending the finished, duration, placement and nodes columns go (always empty there), so
    the pending reason is on screen; every row has as many cells as the header."""
    client.force_login(world["admin"])
    html = client.get("/jobs/?state=pending").content.decode()
    head = re.search(r"<thead>(.*?)</thead>", html, re.S).group(1)
    assert "pending reason" in head and ">finished" not in head and ">duration" not in head
    assert ">placement<" not in head and ">nodes<" not in head
    n = head.count("<th ")
    for row in re.findall(r'<tr data-job="\d+">(.*?)</tr>', html, re.S):
        assert row.count("<td") + row.count("<th ") == n
    assert ">finished" in client.get("/jobs/").content.decode()  # other lists keep them


def test_state_is_repeatable_as_on_the_jobs_api(client, world, make_job):
    """New-user trial 11, F14: /jobs/?state=pending&state=running answered 400 "given more than once", while
    GET /api/v1/jobs/?state=pending&state=running (documented) lists both. The page takes what the API takes
    (and its own live / finished), keeps every state in its sort and page links, and still refuses an unknown
    state among them or another parameter given twice."""
    client.force_login(world["admin"])
    want = sorted(Job.objects.filter(state__in=("pending", "running")).values_list("pk", flat=True))
    assert len(set(Job.objects.filter(pk__in=want).values_list("state", flat=True))) == 2  # both states exist
    r = client.get("/jobs/?state=pending&state=running")
    html = r.content.decode()
    assert r.status_code == 200 and 'id="filter-errors"' not in html, html[:500]
    assert sorted(_ids(html)) == want
    api = client.get("/api/v1/jobs/?state=pending&state=running&limit=500").json()
    assert sorted(j["id"] for j in api["results"]) == want
    assert "state=pending&amp;state=running" in html  # the sort links keep both states
    both = _ids(client.get("/jobs/?state=finished&state=pending").content.decode())
    assert sorted(both) == sorted(Job.objects.filter(state__in=[*Job.FINAL_STATES, "pending"]).values_list("pk", flat=True))
    assert client.get("/jobs/?state=pending&state=nope").status_code == 400
    assert client.get("/jobs/?team=red&team=blue").status_code == 400
