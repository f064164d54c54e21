"""On a federation manager GET /cluster/metrics.json (what the cluster page polls) answered only the local zeros, as
if a real empty cluster, while its cluster page says it is a federation manager and counts the federated jobs
(test_s25_manager_cluster_page). It says so too: `federation_manager`, and `federation` with the page's own counts
(views._federation_counts: the same numbers on both), every existing key kept. A worker's answer is unchanged but
for `federation_manager: false`."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from gpuplatform.models import FederatedJob, MemberCluster

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 2}]}


def test_metrics_json_of_a_manager_says_so_with_the_pages_counts(client_for, users, members, settings):
    member = client_for("member")
    running = member.post("/api/v1/jobs/", JOB, format="json").json()["id"]
    member.post("/api/v1/jobs/", {**JOB, "name": "second"}, format="json")
    lost = member.post("/api/v1/jobs/", {**JOB, "name": "third"}, format="json").json()["id"]
    FederatedJob.objects.filter(pk=running).update(state="running", cluster=MemberCluster.objects.get(name="east"))
    FederatedJob.objects.filter(pk=lost).update(state="lost", cluster=MemberCluster.objects.get(name="west"))
    web = Client()
    web.force_login(users["viewer"])
    settings.FEDERATION_ROLE = "worker"
    worker = web.get("/cluster/metrics.json")
    assert worker.status_code == 200 and worker.json()["federation_manager"] is False
    assert "federation" not in worker.json()
    settings.FEDERATION_ROLE = "manager"
    r = web.get("/cluster/metrics.json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert set(worker.json()) | {"federation"} == set(body)  # the pollers' keys kept
    assert body["federation_manager"] is True
    assert body["federation"] == {"clusters": 2, "healthy": 0, "running": 1, "pending": 1, "lost": 1}
    page = web.get("/cluster/").content.decode()
    said = re.search(r"its (\d+) member clusters\s+\((\d+) healthy\).*</span>(\d+) running.*</span>(\d+) pending"
                     r" · (\d+) lost", page, re.S)
    assert said, page
    assert [int(n) for n in said.groups()] == [body["federation"][k] for k in ("clusters", "healthy", "running",
                                                                                "pending", "lost")]
    since = web.get("/cluster/metrics.json", {"since": "2026-12-01T10:00:00+00:00"})  # a poller's later call
    assert since.status_code == 200 and since.json()["federation"] == body["federation"]
