"""New-user trial 25 (federation, 2): on a federation manager the cluster page (/cluster/, and / ) says it is a
federation manager with no nodes of its own, counts the federated jobs and links /federation/, instead of
'0 running · 0 pending', queues at 0 and empty charts while a federated job runs on a member. A worker's
cluster page is unchanged."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform.models import FederatedJob, MemberCluster

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 2}]}


def test_the_cluster_page_of_a_manager_says_so_and_counts_the_federated_jobs(client_for, users, members, settings):
    member = client_for("member")
    running = member.post("/api/v1/jobs/", JOB, format="json").json()["id"]
    member.post("/api/v1/jobs/", {**JOB, "name": "second"}, format="json")
    FederatedJob.objects.filter(pk=running).update(state="running", cluster=MemberCluster.objects.get(name="east"))
    web = Client()
    web.force_login(users["viewer"])
    for path in ("/cluster/", "/"):
        html = web.get(path).content.decode()
        assert "federation manager</strong>: it has no nodes of its own" in html
        assert "2 member clusters" in html and '<a href="/federation/">Federation</a>: the member clusters' in html
        assert "</span>1 running" in html and "</span>1 pending" in html
        assert "Jobs per team" not in html and "cluster.js" not in html and "fig-rates" not in html
    settings.FEDERATION_ROLE = "worker"
    html = web.get("/cluster/").content.decode()
    assert "federation manager" not in html and "Jobs per team" in html and "cluster.js" in html
