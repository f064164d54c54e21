"""Trial 23: a cluster with no domains (the local mode: `make demo-local`) is one model everywhere: each node is
a tier-1 domain of its own ("node:<name>"), under the synthetic root "cluster" at tier 2. The domain tree API
already said so; the engine placed every job at "cluster (tier 2)", its completeness counted the one tier-2
domain (0 % with one node full and the other idle), and every highest_tier was refused ("tiers: none")."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
pytestmark = pytest.mark.django_db


@pytest.fixture
def local(db, django_user_model):
    from gpuplatform import services
    from gpuplatform.services import issue_api_token
    from rest_framework.test import APIClient

    services.load_cluster_spec(ClusterSpec(
        name="local", nodes=tuple(NodeSpec(f"local-{i}", "H100", 2) for i in (0, 1)),
        queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 4, 4)}),)))
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return client


def submit(client, name, **extra):
    return client.post("/api/v1/jobs/", {"name": name, "queue": "q", "command": "sleep 1",
                                         "roles": [{"tasks": 1, "gpus_per_task": 2}], **extra}, format="json")


def test_local_mode_tiers_placement_and_completeness_agree(local):
    from gpuplatform.models import Job
    from gpuplatform.scheduling import store

    tree = local.get("/api/v1/domains/tree/").json()
    assert {(d["name"], d["tier"]) for d in tree} == {("node:local-0", 1), ("node:local-1", 1)}
    for tier in (1, 2, "leaf", "nvlink"):  # the tiers the engine has are the tiers a job may name
        r = submit(local, f"t{tier}", topology_mode="hard", highest_tier=tier)
        assert r.status_code == 201, r.json()
        Job.objects.filter(pk=r.json()["id"]).update(state="cancelled")
    r = submit(local, "t3", topology_mode="hard", highest_tier=3)
    assert r.status_code == 400 and r.json() == {"highest_tier": ["no such tier in this cluster: 3 (tiers: [1, 2])"]}
    job = submit(local, "fill").json()
    store.run_cycle_once(clock=CLOCK)
    job = Job.objects.get(pk=job["id"])
    assert job.state in ("starting", "running")
    assert (job.placement_domain, job.placement_tier) == ("node:local-0", 1)
    current = local.get("/api/v1/cluster-metrics/current/").json()["sample"]
    assert current["domain_completeness"] == 1.0  # node:local-0 all used, node:local-1 all free
    assert set(current["largest_runnable"]) == {"1", "2"}


def test_the_submit_form_offers_the_engines_tiers(local, client, django_user_model):
    client.force_login(django_user_model.objects.get(username="ops"))
    page = client.get("/jobs/new/").content.decode()
    assert '<option value="1">' in page and '<option value="2">' in page


def test_the_topology_map_takes_the_engines_root_as_the_whole_map(local, client, django_user_model):
    """A job across the nodes of a cluster without domains is placed in 'cluster (tier 2)': ?zoom=cluster is the
    whole map, not a 400 (new-user trial 24, F2); a name that is neither a domain nor the root is still a 400."""
    from gpuplatform.models import Job
    from gpuplatform.scheduling import store

    job = submit(local, "wide", roles=[{"tasks": 2, "gpus_per_task": 2}]).json()
    store.run_cycle_once(clock=CLOCK)
    job = Job.objects.get(pk=job["id"])
    assert (job.placement_domain, job.placement_tier) == ("cluster", 2)
    client.force_login(django_user_model.objects.get(username="ops"))
    whole = client.get("/topology.json").json()
    zoomed = client.get("/topology.json?zoom=cluster")
    assert zoomed.status_code == 200 and zoomed.json() == whole
    assert client.get("/topology/?zoom=cluster").status_code == 200
    assert client.get("/topology.json?zoom=nowhere").status_code == 400


def test_the_form_names_the_tiers_and_the_map_lists_the_nodes_own_domains(local, client, django_user_model):
    """New-user re-check 24: R5, a tier the form does not offer is refused in the API's words (it was Django's
    "Select a valid choice"); R4, the topology page's zoom list offers each node's own domain (only "whole cluster"
    before) and the 'running' Event of a one-task job says "its task running", not "all 1 tasks running"."""
    client.force_login(django_user_model.objects.get(username="ops"))
    page = client.post("/jobs/new/", {"name": "x", "queue": "q", "topology_mode": "hard", "highest_tier": "3"})
    assert "no such tier in this cluster: 3 (tiers: [1, 2])" in page.content.decode()
    topo = client.get("/topology/").content.decode()
    assert '<option value="node:local-0" >node:local-0 (tier 1)</option>' in topo.replace("  ", " ")
    from gpuplatform import lifecycle
    from gpuplatform.models import Event, Job, Node, Task

    job = Job.objects.get(pk=submit(local, "one").json()["id"])
    Job.objects.filter(pk=job.pk).update(state="admitted")
    Task.objects.filter(job=job).update(state="bound", node=Node.objects.get(name="local-0"))
    assert lifecycle.report_task_running(Task.objects.get(job=job), at=CLOCK)
    assert Event.objects.get(job=job, kind="running").message == "one: its task running"
