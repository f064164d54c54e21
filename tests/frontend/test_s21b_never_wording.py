"""The queueing page names the rule that refuses a job for good (trial 21, F6): a job over its queue's limit fits
the cluster, so its estimate reads "never (above a queue's limit)", not "never (does not fit this cluster)" (the
reason next to it, the engine's words, names the queue and the limit); a non-preemptible job above its queue's quota
names that rule; a job bigger than the cluster keeps the cluster's wording. The rule is the one the engine gives: its
terminal reason's code, which the cycle stores with the words (Job.pending_reason_code, session 22)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Job, Quota
from gpuplatform.scheduling import store
from scheduler.core import run_cycle

pytestmark = pytest.mark.django_db


def _engine_reason(job_id):
    snapshot, _ = store.build_snapshot()
    return run_cycle(snapshot).pending[job_id]


def _engine_code(job_id) -> str:
    return _engine_reason(job_id).code


def _estimate_cell(client, name: str) -> str:
    html = client.get("/queueing/").content.decode()
    row = html[html.index(f">{name}</a>"):]
    cell = row[row.index('<td class="estimate">') + len('<td class="estimate">'):]
    return cell[:cell.index("</td>")]


def _refused(job: Job) -> None:
    """What the cycle writes for the engine's terminal reason (store._update_pending): its words and its code."""
    reason = _engine_reason(job.pk)
    assert reason.terminal
    Job.objects.filter(pk=job.pk).update(never_fits=True, pending_reason=reason.message,
                                         pending_reason_code=reason.code)


def test_a_job_over_its_queues_limit_names_the_limit(client, world):
    blue = world["jobs"]["blue-pending"]  # 2 GPUs on a cluster of 8
    Quota.objects.filter(queue=world["queues"]["blue"]).update(guarantee=0, quota=1, limit=1)
    assert _engine_code(blue.pk) == "never_fits_queue_limit"
    _refused(blue)
    client.force_login(world["admin"])
    assert _estimate_cell(client, "blue-pending") == "never (above a queue&#x27;s limit)"


def test_a_non_preemptible_job_above_its_queues_quota_names_the_quota(client, world):
    blue = world["jobs"]["blue-pending"]
    Quota.objects.filter(queue=world["queues"]["blue"]).update(guarantee=0, quota=1)
    Job.objects.filter(pk=blue.pk).update(preemptible=False)
    assert _engine_code(blue.pk) == "never_fits_queue_quota"
    _refused(blue)
    client.force_login(world["admin"])
    assert _estimate_cell(client, "blue-pending") == (
        "never (non-preemptible, above a queue&#x27;s quota: it may not borrow)")


def test_a_job_bigger_than_the_cluster_keeps_the_clusters_wording(client, world):
    red = world["jobs"]["red-pending"]  # 4 tasks of 8 GPUs on one node of 8: no node count holds it
    # its queue's limit refuses it too
    Quota.objects.filter(queue=world["queues"]["red"]).update(guarantee=0, quota=1, limit=1)
    assert _engine_code(red.pk).startswith("never_fits_") and _engine_code(red.pk) != "never_fits_queue_limit"
    _refused(red)
    client.force_login(world["admin"])
    assert _estimate_cell(client, "red-pending") == "never (does not fit this cluster)"
