"""The queueing page names the rule that refuses a job for good (trial 21, F6): a job over its queue's limit fits
the cluster, so its estimate reads "never (above queue blue's limit of 1 GPUs)", not "never (does not fit this
cluster)"; a non-preemptible job above its queue's quota names that rule; a job bigger than the cluster keeps the
cluster's wording. The rule is the one the engine gives (its terminal reason's code, checked here against a cycle
on the same rows)."""
from __future__ import annotations

import pytest

from gpuplatform.dashboard_queries import never_rules
from gpuplatform.models import Job, Quota
from gpuplatform.scheduling import store
from scheduler.core import run_cycle

pytestmark = pytest.mark.django_db


def _engine_code(job_id) -> str:
    snapshot, _ = store.build_snapshot()
    return run_cycle(snapshot).pending[job_id].code


def _estimate_cell(client, name: str) -> str:
    html = client.get("/queueing/").content.decode()
    row = html[html.index(f">{name}</a>"):]
    cell = row[row.index('<td class="estimate">') + len('<td class="estimate">'):]
    return cell[:cell.index("</td>")]


def _refused(job: Job, reason: str) -> None:
    """What the cycle writes for a terminal reason (store._update_pending)."""
    Job.objects.filter(pk=job.pk).update(never_fits=True, pending_reason=reason)


def test_a_job_over_its_queues_limit_names_the_limit(client, world):
    blue = world["jobs"]["blue-pending"]  # 2 GPUs on a cluster of 8
    Quota.objects.filter(queue=world["queues"]["blue"]).update(guarantee=0, quota=1, limit=1)
    assert _engine_code(blue.pk) == "never_fits_queue_limit"
    assert never_rules([blue.pk]) == {blue.pk: ("never_fits_queue_limit", "blue", 1)}
    _refused(blue, "needs 2 P100 GPUs, above queue blue limit of 1")
    client.force_login(world["admin"])
    assert _estimate_cell(client, "blue-pending") == "never (above queue blue&#x27;s limit of 1 GPUs)"


def test_a_non_preemptible_job_above_its_queues_quota_names_the_quota(client, world):
    blue = world["jobs"]["blue-pending"]
    Quota.objects.filter(queue=world["queues"]["blue"]).update(guarantee=0, quota=1)
    Job.objects.filter(pk=blue.pk).update(preemptible=False)
    assert _engine_code(blue.pk) == "never_fits_queue_quota"
    assert never_rules([blue.pk]) == {blue.pk: ("never_fits_queue_quota", "blue", 1)}
    _refused(blue, "can never start: needs 2 P100 GPUs; non-preemptible jobs run only within quota ...")
    client.force_login(world["admin"])
    assert _estimate_cell(client, "blue-pending") == (
        "never (non-preemptible, above queue blue&#x27;s quota of 1 GPUs: it may not borrow)")


def test_a_job_bigger_than_the_cluster_keeps_the_clusters_wording(client, world):
    red = world["jobs"]["red-pending"]  # 4 tasks of 8 GPUs on one node of 8: no node count holds it
    # its queue's limit refuses it too
    Quota.objects.filter(queue=world["queues"]["red"]).update(guarantee=0, quota=1, limit=1)
    assert _engine_code(red.pk).startswith("never_fits_") and _engine_code(red.pk) != "never_fits_queue_limit"
    assert never_rules([red.pk]) == {}
    _refused(red, "can never fit: needs 32 P100 GPUs, more than the whole cluster has (8)")
    client.force_login(world["admin"])
    assert _estimate_cell(client, "red-pending") == "never (does not fit this cluster)"
