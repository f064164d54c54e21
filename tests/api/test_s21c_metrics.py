"""Trial 21, F10: /metrics' pending_jobs / running_jobs of an inner queue count its subtree's jobs, as its
queue_allocated_gpus does and as the cluster page's queue table and the API's current metrics show them (an inner
queue read 0/0 while its children had jobs)."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from gpuplatform import queries


def _samples(name: str) -> dict[str, float]:
    text = APIClient().get("/metrics").content.decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name == name)
    return {s.labels["queue"]: s.value for s in family.samples}


@pytest.mark.django_db
def test_an_inner_queues_job_gauges_count_its_subtree_as_the_pages_do(jobs, admin):
    from gpuplatform.scheduling import store

    store.run_cycle_once()  # both 2-GPU jobs start
    from gpuplatform import services
    from gpuplatform.models import Queue

    alpha = Queue.objects.get(name="alpha")
    services.submit_job(command=["sleep", "1"], team=alpha.team, queue="alpha", name="big",
                        roles=[{"tasks": 1, "gpus_per_task": 8}], submitter=jobs["own"].submitter,
                        priority=0)  # pending: no cycle runs after it
    pending, running = _samples("gpuplatform_pending_jobs"), _samples("gpuplatform_running_jobs")
    assert (pending["alpha"], running["alpha"]) == (1, 1)
    assert (pending["beta"], running["beta"]) == (0, 1)
    assert (pending["root"], running["root"]) == (1, 2), (pending, running)  # was (0, 0)
    page = {u.queue: (u.pending_jobs, u.running_jobs) for u in queries.queue_usage()}
    assert page["root"] == (pending["root"], running["root"]) and page["alpha"] == (1, 1)
    current = admin.get("/api/v1/cluster-metrics/current/").json()["queues"]
    assert {q["queue"]: (q["pending_jobs"], q["running_jobs"]) for q in current}["root"] == (1, 2)
    help_text = APIClient().get("/metrics").content.decode()
    assert "# HELP gpuplatform_pending_jobs Pending jobs in the queue's subtree" in help_text
