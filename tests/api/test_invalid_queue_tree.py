"""The shared case ../shared/cases/api-invalid-queue-tree.yaml as a table: every bad request is refused
with HTTP 400 naming the field and the rule, the database is unchanged after it, and a valid job
submitted alongside is accepted and bound by the next scheduling cycle.

World: 12 nodes x 8 H100 (96 GPUs); queue `root` with H100 quota 96. A root queue has nothing above it
to borrow from, so its cap is written as limit 96 (the case's "the parent's 96").
Rows after the case's own list cover the rest of issue #5's bad inputs (unknown tier, never fits).
A quota is named by its place in the body's `quotas` list (`quotas[0].quota`, new-user trial 12, F9).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.contrib.auth import get_user_model
from gpuplatform.services import issue_api_token
from rest_framework.test import APIClient

from tests.api.helpers_api import table_counts

CASE = Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "api-invalid-queue-tree.yaml"


def _world():
    from gpuplatform import services
    from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec

    spec = ClusterSpec(
        name="api-invalid-queue-tree",
        domains=(DomainSpec("spine", 2), *(DomainSpec(f"nvl{i}", 1, "spine") for i in range(3))),
        nodes=tuple(NodeSpec(f"n{i:02d}", "H100", 8, domain=f"nvl{i // 4}") for i in range(12)))
    services.load_cluster_spec(spec)
    services.create_queue("root", quotas={"H100": (0, 96, 96)})
    services.create_team("tenant")
    user = get_user_model().objects.create_user("root-admin", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return client


def _job(name="bad", queue="root", **role):
    return {"name": name, "queue": queue, "team": "tenant",
            "command": "sleep 3600", "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1, **role}]}


def _child(name="child-a", quota=60):
    from gpuplatform import services

    services.create_queue(name, parent="root", quotas={"H100": (0, quota, None)})


def _closed_root():
    from gpuplatform import services

    services.create_queue("frozen", state="closed")


# name: (setup, method, url, body, field the 400 must name, words the rule must contain)
ROWS = {
    "child limit above the parent's": (None, "post", "/api/v1/queues/",
        {"name": "q1", "parent": "root", "quotas": [{"flavor": "H100", "quota": 0, "limit": 200}]},
        "quotas[0].limit", "above the parent"),
    "negative quota": (None, "post", "/api/v1/queues/",
        {"name": "q2", "parent": "root", "quotas": [{"flavor": "H100", "quota": -5}]},
        "quotas[0].quota", "from 0 to 2147483647"),  # the one quota rule (new-user trial 13; was "must not be negative")
    "guarantee above quota": (None, "post", "/api/v1/queues/",
        {"name": "q3", "parent": "root", "quotas": [{"flavor": "H100", "guarantee": 10, "quota": 5}]},
        "quotas[0].guarantee", "must not exceed quota"),
    "quota above limit": (None, "post", "/api/v1/queues/",
        {"name": "q4", "parent": "root", "quotas": [{"flavor": "H100", "quota": 10, "limit": 5}]},
        "quotas[0].quota", "must not exceed limit"),
    "unknown parent": (None, "post", "/api/v1/queues/", {"name": "q5", "parent": "no-such-queue"},
        "parent", "unknown queue"),
    "root under its own descendant (cycle)": (_child, "patch", "/api/v1/queues/root/", {"parent": "child-a"},
        "parent", "cycle"),
    "children's quotas above the parent's (new child)": (_child, "post", "/api/v1/queues/",
        {"name": "q7", "parent": "root", "quotas": [{"flavor": "H100", "quota": 50}]},
        "quotas[0].quota", "above the parent"),
    "children's quotas above the parent's (raised child)": (_child, "put", "quota-of:child-a",
        {"guarantee": 0, "quota": 100, "limit": None}, "quota", "above the parent"),
    "min_available above tasks": (None, "post", "/api/v1/jobs/", _job(tasks=4, min_available=5),
        "roles[0].min_available", "must not exceed tasks"),
    "zero-size role (no GPU, no CPU)": (None, "post", "/api/v1/jobs/", _job(gpus_per_task=0),
        "roles[0].gpus_per_task", "must request CPU"),
    "negative gpus_per_task": (None, "post", "/api/v1/jobs/", _job(gpus_per_task=-1),
        "roles[0].gpus_per_task", "negative"),
    "unknown queue": (None, "post", "/api/v1/jobs/", _job(queue="no-such-queue"), "queue", "unknown queue"),
    "closed queue": (_closed_root, "post", "/api/v1/jobs/", _job(queue="frozen"), "queue", "closed"),
    # issue #5, beyond the case file
    "unknown tier": (None, "post", "/api/v1/jobs/", {**_job(), "topology_mode": "hard", "highest_tier": 7},
        "highest_tier", "no such tier"),
    "task bigger than every node (never fits)": (None, "post", "/api/v1/jobs/", _job(gpus_per_task=16),
        "roles[0].gpus_per_task", "never fit"),
    "gang bigger than the cluster (never fits)": (None, "post", "/api/v1/jobs/", _job(tasks=13, gpus_per_task=8),
        "roles[0].tasks", "never fit"),
    "gang bigger than an NVLink domain under a hard tier-1 cap": (None, "post", "/api/v1/jobs/",
        {**_job(tasks=5, gpus_per_task=8), "topology_mode": "hard", "highest_tier": 1}, "roles[0].tasks", "never fit"),
}


def _state():
    from gpuplatform.models import Job, Queue, Quota

    return (table_counts(),
            sorted(Queue.objects.values_list("name", "parent__name", "team__slug", "weight", "state")),
            sorted(Quota.objects.values_list("queue__name", "flavor", "guarantee", "quota", "limit")),
            sorted(Job.objects.values_list("name", "state")))


def test_case_file_is_the_one_this_table_restates():
    if not CASE.exists():
        pytest.skip(f"shared case file not present at {CASE}")
    case = yaml.safe_load(CASE.read_text())
    assert case["case"] == "api-invalid-queue-tree"
    assert case["cluster"]["nodes"] == {"count": 12, "gpus": 8, "flavor": "H100"}
    assert len(case["requests"]) == 10  # every line is one or more rows above


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(ROWS))
def test_bad_request_refused_nothing_stored_and_scheduling_goes_on(name):
    from gpuplatform.models import Job, Quota
    from gpuplatform.scheduling import store

    setup, method, url, body, field, rule = ROWS[name]
    client = _world()
    if setup:
        setup()
    headers = {}
    if url.startswith("quota-of:"):
        url = f"/api/v1/quotas/{Quota.objects.get(queue__name=url.split(':', 1)[1]).pk}/"
    if method in ("put", "patch"):
        headers["HTTP_IF_MATCH"] = client.get(url)["ETag"]
    before = _state()

    response = getattr(client, method)(url, body, format="json", **headers)

    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert rule in " ".join(errors[field]), errors
    assert _state() == before, "a refused request stored something"

    leaf = "root" if setup in (None, _closed_root) else "child-a"
    ok = client.post("/api/v1/jobs/", _job(name="valid", queue=leaf, tasks=2, gpus_per_task=8), format="json")
    assert ok.status_code == 201, ok.content
    cycle = store.run_cycle_once()
    assert cycle is not None and not cycle.error
    assert Job.objects.get(name="valid").state == Job.State.RUNNING


def test_patch_parent_is_checked_by_the_quota_rules(db):
    """New-user trial 11, F2: PATCH {"parent": ...} moved a queue with quota 20 under a parent with quota 10
    (200); it is a 400 on `parent` naming the rule, and nothing changes."""
    from gpuplatform.models import Queue

    api = _world()
    assert api.post("/api/v1/queues/", {"name": "p10", "parent": "root", "quotas": [
        {"flavor": "H100", "guarantee": 0, "quota": 10}]}, format="json").status_code == 201
    assert api.post("/api/v1/queues/", {"name": "c20", "parent": "root", "quotas": [
        {"flavor": "H100", "guarantee": 0, "quota": 20}]}, format="json").status_code == 201
    etag = api.get("/api/v1/queues/c20/")["ETag"]
    before = table_counts()
    r = api.patch("/api/v1/queues/c20/", {"parent": "p10"}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400, r.content
    assert "children's quotas would sum to 20, above the parent queue's quota (10)" in r.json()["parent"][0]
    assert table_counts() == before and Queue.objects.get(name="c20").parent.name == "root"
