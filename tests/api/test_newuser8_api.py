"""New-user trial 8 (notes/newuser8.md), the API's findings: F3 (an answer says which moment each part
shows), F12 (an empty Idempotency-Key), F13 (a member's priority change), F14 (unknown names), F15 (page
JSON endpoints answer 401)."""
from __future__ import annotations

from datetime import datetime

from rest_framework.test import APIClient

from tests.api.helpers_api import job_body


def test_current_metrics_say_which_moment_the_sample_and_the_queue_rows_show(admin, jobs):
    """F3: the sample is the cluster as the latest cycle left it; the queue rows are live. A job that ends
    after the cycle is in the rows only: the answer carries `queues_time` (the clock the rows were read at)
    beside `sample.time`, so the two figures are not one moment's numbers disagreeing."""
    from gpuplatform import services
    from gpuplatform.scheduling import store

    store.run_cycle_once()
    services.cancel_job(jobs["own"], reason="ends after the cycle")
    current = admin.get("/api/v1/cluster-metrics/current/").json()
    assert current["sample"]["allocated_gpus"] == 4 and current["sample"]["cycle"] == 1
    assert {q["queue"]: q["used"] for q in current["queues"]}["root"] in (2, 4)  # live: released or stopping
    rows_at = datetime.fromisoformat(current["queues_time"].replace("Z", "+00:00"))
    assert rows_at >= datetime.fromisoformat(current["sample"]["time"].replace("Z", "+00:00"))


def test_an_empty_idempotency_key_is_a_400_naming_it(client_for):
    """F12: the docs say a key is 1-200 visible characters; an empty (or blank) header must not be taken as
    "no key"."""
    from gpuplatform.models import Job

    member = client_for("member")
    for key in ("", " ", "\t"):
        r = member.post("/api/v1/jobs/", job_body(name="nokey"), format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert r.status_code == 400 and list(r.json()) == ["Idempotency-Key"], (key, r.content)
    assert not Job.objects.filter(name="nokey").exists()


def test_the_log_answer_carries_the_tasks_state(client_for, jobs):
    """F5: the job page's log box said "running" for a pending job: the answer says the task's state."""
    task = jobs["own"].tasks.get()
    r = client_for("member").get(f"/api/v1/jobs/{jobs['own'].pk}/logs/?task={task.pk}")
    assert r.status_code == 200 and r.json()["state"] == "pending" and r.json()["size"] == 0, r.content
