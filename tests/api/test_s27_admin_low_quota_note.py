"""Session 27, an admin's trial (item 2): PATCH /api/v1/quotas/<id>/ setting a quota or limit below what the queue uses
(used 4 GPUs, limit 2) was accepted silently and the queues page then showed used 4, limit 2, borrowed 2. It is still
accepted (running jobs keep their GPUs: a limit evicts nothing, as in Kueue and Volcano), and the 200 answer carries
`quota_note` saying so and what the scheduler does then (docs/quotas.md)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.api.conftest import SLEEP

pytestmark = pytest.mark.django_db

CLOCK = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def _run_in_beta(users, gpus: int = 4):
    from gpuplatform import services
    from gpuplatform.models import Allocation, Queue
    from gpuplatform.scheduling import store

    job = services.submit_job(command=SLEEP, team=Queue.objects.get(name="beta").team, queue="beta", name="big",
                              roles=[{"tasks": 1, "gpus_per_task": gpus}], submitter=users["other"],
                              submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == gpus
    return job


def test_a_limit_below_use_is_accepted_with_a_note(admin, users):
    from gpuplatform.models import Allocation, Quota

    job = _run_in_beta(users)
    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='beta').pk}/"
    r = admin.patch(url, {"quota": 2, "limit": 2}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["quota"], body["limit"]) == (2, 2)
    note = body["quota_note"]
    assert note.startswith("queue beta (with the queues below it) uses 4 H100 GPUs, above its limit of 2: its "
                           "running jobs keep them (a limit evicts nothing)"), note
    assert "no new job of it or of a queue below it starts on H100" in note
    assert "the 2 above its quota of 2 are borrowed" in note and "never below this queue's guarantee of 0" in note
    # accepted: stored, and the job keeps its GPUs
    assert Quota.objects.filter(queue__name="beta").values_list("quota", "limit").get() == (2, 2)
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 4
    # the GET answers no note (a change's answer only); a PUT within use has none
    assert "quota_note" not in admin.get(url).json()
    r = admin.put(url, {"guarantee": 0, "quota": 4, "limit": 8}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 200 and "quota_note" not in r.json(), r.content


def test_a_quota_below_use_within_the_limit_says_borrowed_only(admin, users):
    from gpuplatform.models import Quota

    _run_in_beta(users)
    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='beta').pk}/"
    r = admin.patch(url, {"quota": 3}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 200, r.content
    note = r.json()["quota_note"]
    assert note.startswith("queue beta (with the queues below it) uses 4 H100 GPUs; the 1 above its quota of 3 are "
                           "borrowed"), note
    assert "limit" not in note.split(";")[0]


def test_an_inner_queue_counts_its_subtree(admin, users):
    from gpuplatform.models import Quota

    _run_in_beta(users)
    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='root').pk}/"
    r = admin.get(url)
    assert r.status_code == 200 and "quota_note" not in r.json()
    from gpuplatform.services.queues import quota_note, quota_use

    row = Quota.objects.get(queue__name="root")
    assert quota_use(row.queue, "H100") == 4 and quota_note(row) is None  # root's quota 32


def test_the_schema_names_quota_note(admin):
    schema = admin.get("/api/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    components = schema.json()["components"]["schemas"]
    ref = paths["/api/v1/quotas/{id}/"]["patch"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert "quota_note" in components[ref.rsplit("/", 1)[1]]["properties"]
