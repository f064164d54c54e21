"""New-user trial 22, F3: the submit form's "Estimate start" (the what-if of the job as filled in) says how many
running jobs the job would stop to start (its reclaims), other teams' counted, never named; nothing when none."""
from __future__ import annotations

from django.test import Client

from tests.api.test_forecast_api import busy  # noqa: F401 (a fixture)


def _form(queue: str, gpus: str = "8") -> dict:
    return {"queue": queue, "roles-TOTAL_FORMS": "1", "roles-0-name": "worker", "roles-0-tasks": "1",
            "roles-0-gpus_per_task": gpus, "priority": "0", "preemptible": "on", "time_limit_minutes": "15"}


def test_the_estimate_says_how_many_running_jobs_it_would_stop(busy, users):
    """alpha's four jobs borrow beta's share of the 32 GPUs: an 8-GPU beta job reclaims one (and beta-wait, already
    waiting, another); alpha's jobs are another team's for beta's member."""
    client = Client()
    client.force_login(users["other"])
    r = client.post("/jobs/new/estimate/", _form("beta"))
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["stops"] == 1
    assert body["text"].endswith("; it would stop 1 running job to start (reclaim or preemption; 1 of other teams): "
                                 "they are requeued"), body["text"]
    assert not any(f"run{i}" in body["text"] for i in range(4))  # no other team's job named
    # alpha's member: its jobs are already over alpha's quota, a new one waits and stops nothing
    client.force_login(users["member"])
    body = client.post("/jobs/new/estimate/", _form("alpha")).json()
    assert body["stops"] == 0 and "stop" not in body["text"], body
