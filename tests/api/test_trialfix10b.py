"""New-user trial 10 findings fixed on branch trialfix10b (notes/trialfix10b.md): F12 (concurrent priority changes
wrote two transitions from one old value), F3 (the what-if forecast submissions that submission refuses), F5 (the
queueing page's pending export cut at 200 rows), F6 (utilization filters naming nothing answered 200), F7 (queue
weight bounds differed between the queue API and the what-if). F1 (the admin's stale quota / queue form) is in
tests/platform/test_admin_services.py."""
from __future__ import annotations

import threading

import pytest
from django.db import connections

SLEEP = ["sleep", "3600"]


# --- F12: concurrent priority changes chain in the audit trail -------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_concurrent_priority_changes_write_a_chain(client_for, jobs):
    """F12: four parallel PATCH {"priority": N} each read the old priority from their own copy of the job, so
    the events read 0 -> 3, 0 -> 4, 3 -> 2, 3 -> 1. The service reads and writes under the job's row lock: the
    events are one chain from 0 to the final priority."""
    from gpuplatform.models import Event, Job
    from gpuplatform.services import jobs as job_services

    job = jobs["own"]
    clients = [client_for("team_admin") for _ in range(4)]
    barrier = threading.Barrier(4)
    answers = [None] * 4

    def patch(i):
        try:
            barrier.wait(timeout=10)
            answers[i] = clients[i].patch(f"/api/v1/jobs/{job.pk}/", {"priority": i + 1}, format="json")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=patch, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(a is not None and a.status_code == 200 for a in answers), [getattr(a, "content", a) for a in answers]
    chain = list(Event.objects.filter(kind="priority_changed", job=job).order_by("id").values_list("data", flat=True))
    assert len(chain) == 4
    assert chain[0]["old"] == 0
    assert all(b["old"] == a["new"] for a, b in zip(chain, chain[1:])), chain
    assert Job.objects.get(pk=job.pk).priority == chain[-1]["new"]


def test_priority_change_reads_the_old_value_from_the_row_not_the_callers_copy(jobs):
    """F12, deterministic: a caller holding a stale copy (priority 0 while the row says 5) writes "5 -> 7"."""
    from gpuplatform import services
    from gpuplatform.models import Event, Job

    stale = Job.objects.get(pk=jobs["own"].pk)
    services.set_job_priority(Job.objects.get(pk=stale.pk), 5)
    services.set_job_priority(stale, 7)
    last = Event.objects.filter(kind="priority_changed", job=stale).latest("id")
    assert (last.data["old"], last.data["new"]) == (5, 7) and "5 -> 7" in last.message
