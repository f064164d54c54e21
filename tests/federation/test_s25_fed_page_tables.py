"""New-user trial 25 (federation, 3): the federation page's tables have the other pages' table class (row
lines, spaced headers), and "why there" reads as words: each candidate's score as its parts in seconds, the
chosen cluster marked, not a bare 'worker-0: 4260.0 (wait 0.0 s, quota)'."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform.models import FederatedJob, MemberCluster

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 2}]}


def test_the_federation_page_tables_are_styled_and_why_there_reads(client_for, users, members):
    jid = client_for("member").post("/api/v1/jobs/", JOB, format="json").json()["id"]
    decision = {"chosen": "east", "rejected": {}, "candidates": [
        {"cluster": "east", "flavor": "H100", "score": 4260.0, "wait_s": 0.0, "quota_s": 600, "data_s": 0,
         "cost_s": 3660.0, "quota_class": "quota", "forecast": True},
        {"cluster": "west", "flavor": "H100", "score": 7200.0, "wait_s": 3600.0, "quota_s": 3600, "data_s": 0,
         "cost_s": 0.0, "quota_class": "borrowed", "forecast": True}]}
    FederatedJob.objects.filter(pk=jid).update(state="running", reason="", decision=decision,
                                               cluster=MemberCluster.objects.get(name="east"))
    web = Client()
    web.force_login(users["member"])
    html = web.get("/federation/").content.decode()
    assert '<table class="data" id="fed-clusters">' in html and '<table class="data" id="fed-jobs">' in html
    assert ("east (chosen): score 4260 s = wait 0 s + 600 s above its guarantee + 3660 s cost, within its quota"
            in html)
    assert "west: score 7200 s = wait 3600 s + 3600 s borrowing</span>" in html
