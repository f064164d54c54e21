"""New-user trial 3: list query parameters refused as the README promises (item 9): a boolean filter with a
value other than true / false / 1 / 0 and a `format` naming no renderer (or given twice) are 400s naming the
parameter, not a silently unfiltered list or DRF's 404; a sub-group larger than its role (item 8)."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("value", ["maybe", "yes", "2", "tru"])
def test_never_fits_with_a_value_that_is_no_boolean_is_refused(admin, jobs, value):
    r = admin.get(f"/api/v1/jobs/?never_fits={value}")
    assert r.status_code == 400, r.content
    assert list(r.json()) == ["never_fits"] and "true or false" in r.json()["never_fits"][0]


def test_never_fits_true_false_filter_and_empty_is_refused(admin, jobs):
    every = admin.get("/api/v1/jobs/").json()["results"]
    assert len(every) == 2
    assert admin.get("/api/v1/jobs/?never_fits=true").json()["results"] == []
    for value in ("false", "False", "0"):
        r = admin.get(f"/api/v1/jobs/?never_fits={value}")
        assert r.status_code == 200 and len(r.json()["results"]) == 2, (value, r.content)
    # sent empty: a 400 naming it, no longer "either" (trial 20, F3: one rule for every parameter sent empty)
    assert list(admin.get("/api/v1/jobs/?never_fits=").json()) == ["never_fits"]


def test_other_boolean_filters_refuse_a_bad_value(admin):
    for url in ("/api/v1/queues/?root=maybe", "/api/v1/scheduler-cycles/?failed=maybe"):
        r = admin.get(url)
        assert r.status_code == 400 and list(r.json()) in (["root"], ["failed"]), (url, r.content)
    assert admin.get("/api/v1/queues/?root=true").status_code == 200


@pytest.mark.parametrize("query", ["format=xml", "format=csv", "format=json&format=csv"])
def test_a_format_naming_no_renderer_is_a_400_naming_format(admin, jobs, query):
    r = admin.get(f"/api/v1/jobs/?{query}")
    assert r.status_code == 400, (r.status_code, r.content)
    assert r["Content-Type"].startswith("application/json")
    assert list(r.json()) == ["format"], r.json()


def test_a_known_format_still_works(admin, jobs):
    r = admin.get("/api/v1/jobs/?format=json")
    assert r.status_code == 200 and len(r.json()["results"]) == 2
    assert admin.get(f"/api/v1/jobs/{jobs['own'].pk}/?format=xml").status_code == 400


@pytest.mark.parametrize("extra", [{"group_highest_tier": 1}, {}])
def test_a_sub_group_larger_than_its_role_is_refused_naming_group_size(admin, extra):
    """Item 8: group_size 100 on a role of 4 tasks was accepted (with a tier) or refused for the tier alone."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    r = admin.post("/api/v1/jobs/", {"queue": "alpha", "name": "big-group", "command": ["true"], "roles": [
        {"name": "w", "tasks": 4, "gpus_per_task": 1, "group_size": 100, **extra}]}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["roles[0].group_size"] == ["group_size (100) must not exceed tasks (4)"], r.json()
    assert Job.objects.count() == before
    ok = admin.post("/api/v1/jobs/", {"queue": "alpha", "name": "ok-group", "command": ["true"], "roles": [
        {"name": "w", "tasks": 4, "gpus_per_task": 1, "group_size": 4, "group_highest_tier": 1}]}, format="json")
    assert ok.status_code == 201, ok.content
