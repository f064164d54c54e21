"""api-subgroup-tier-limit-ignored.yaml over REST: role-level (sub-group) topology, tier names and unknown
keys in a job submission are honoured or refused with a 400 naming them, never dropped."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec
from scheduler.core import CycleConfig

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


@pytest.fixture
def case_cluster(db):
    """The case's cluster: three tier-1 domains of one 2-GPU node under a spine; one GPU busy on each node."""
    from gpuplatform import services
    from gpuplatform.models import Queue
    from gpuplatform.scheduling import store

    spec = ClusterSpec(
        name="case",
        domains=(DomainSpec("spine", 2), *(DomainSpec(f"t1-{i}", 1, "spine") for i in (1, 2, 3))),
        nodes=tuple(NodeSpec(f"n{i}", "H100", 2, domain=f"t1-{i}") for i in (1, 2, 3)),
        queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 6, 6)}),))
    services.load_cluster_spec(spec)
    queue = Queue.objects.get(name="q")
    for i in (1, 2, 3):
        services.submit_job(team=queue.team, queue=queue, name=f"fill{i}", roles=[{"tasks": 1, "gpus_per_task": 1}],
                            command=["sleep", "3600"])
    store.run_cycle_once(clock=CLOCK, config=CycleConfig(binpack=False))  # spread: one fill per node
    return queue


@pytest.fixture
def staff_client(case_cluster, django_user_model):
    from gpuplatform.services import issue_api_token
    from rest_framework.test import APIClient

    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return client


def submit(client, name, roles, **extra):
    return client.post("/api/v1/jobs/", {"name": name, "queue": "q", "command": "sleep 1", "roles": roles, **extra},
                       format="json")


def run_cycle():
    from gpuplatform.scheduling import store

    store.run_cycle_once(clock=CLOCK)


@pytest.mark.parametrize("body", [
    {"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "highest_tier": 1}]},
    {"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1}],
     "subgroups": [{"role": "tp", "group_size": 2, "group_highest_tier": 1}]},
    # variants: the tier by name, on the role and in the sub-group
    {"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "topology_mode": "hard", "highest_tier": "tier-1"}]},
    {"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "group_size": 2, "group_highest_tier": "nvlink"}]},
])
def test_api_subgroup_tier_limit_honoured(staff_client, body):
    """api-subgroup-tier-limit-ignored.yaml: the first and third requests (and tier names) are accepted and
    honoured: the job stays pending while no tier-1 domain has 2 free GPUs; its roles show the group."""
    from gpuplatform.models import Job

    response = submit(staff_client, "tp-job", **body)
    assert response.status_code == 201, response.json()
    role = response.json()["roles"][0]
    assert (role["group_size"], role["group_highest_tier"], role["group_mode"]) == (2, 1, "hard")
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "pending"
    assert "groups of 2" in job.pending_reason
    # the same job without the sub-group runs across the spine: the constraint is what keeps it waiting
    plain = submit(staff_client, "plain", [{"name": "tp", "tasks": 2, "gpus_per_task": 1}])
    run_cycle()
    assert Job.objects.get(pk=plain.json()["id"]).placement_domain == "spine"


@pytest.mark.parametrize("body, field", [
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "topology_mode": "hard", "highest_tier_name": "tier-1"}]},
     "highest_tier_name"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "highest_tier": "rack-ish"}]}, "highest_tier"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1}], "subgroups": [{"role": "tp", "group_size": 2,
                                                                                 "group_tier": 1}]}, "group_tier"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1}], "subgroups": [{"role": "pp", "group_size": 2,
                                                                                 "group_highest_tier": 1}]}, "role"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1}], "topology": "hard"}, "topology"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1}], "highest_tier": "spline"}, "highest_tier"),
    ({"roles": [{"name": "tp", "tasks": 2, "gpus_per_task": 1, "group_size": 2, "group_highest_tier": 4}]},
     "group_highest_tier"),
])
def test_api_subgroup_unknown_keys_and_tier_names_refused(staff_client, body, field):
    """An unknown key at any level, an unknown tier name or a tier the cluster lacks: 400 naming it, nothing
    stored."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    response = submit(staff_client, "bad", **body)
    assert response.status_code == 400, response.json()
    assert field in str(response.json())
    assert Job.objects.count() == before


def test_api_job_level_tier_name_and_numa(staff_client):
    """The job-level highest_tier accepts a tier name (refused on the first round), and numa: single is
    stored and shown."""
    response = submit(staff_client, "named", [{"tasks": 2, "gpus_per_task": 1}], topology_mode="hard",
                      highest_tier="tier-1", numa="single")
    assert response.status_code == 201, response.json()
    assert (response.json()["highest_tier"], response.json()["numa"]) == (1, "single")
    assert submit(staff_client, "bad-numa", [{"tasks": 1}], numa="spread").status_code == 400


def test_api_heterogeneous_job_runs_each_role_on_its_flavor(db, django_user_model):
    """An RL job over REST: trainer on H100, rollout on A100, both flavors in the cluster. It is accepted
    (the first round refused it: "no node of flavor A100|H100 in this cluster") and the cycle starts both
    roles at once, each on its own flavor; a role naming a flavor the cluster lacks is refused naming it."""
    from gpuplatform.services import issue_api_token
    from rest_framework.test import APIClient

    from gpuplatform import services
    from gpuplatform.models import Job, Task

    services.load_cluster_spec(ClusterSpec(
        name="two-flavors", nodes=(NodeSpec("h1", "H100", 8), NodeSpec("a1", "A100", 8), NodeSpec("a2", "A100", 8)),
        queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 8, 8), "A100": (0, 16, 16)}),)))
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    roles = [{"name": "trainer", "tasks": 1, "gpus_per_task": 8, "flavor": "H100"},
             {"name": "rollout", "tasks": 4, "gpus_per_task": 4, "flavor": "A100"}]
    response = submit(client, "rl", roles)
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state in ("admitted", "running"), job.pending_reason
    flavors = {(t.role.name, t.node.flavor) for t in Task.objects.filter(job=job).select_related("role", "node")}
    assert flavors == {("trainer", "H100"), ("rollout", "A100")}
    bad = submit(client, "rl-bad", [roles[0], {**roles[1], "flavor": "B200"}])
    assert bad.status_code == 400 and "rollout" in str(bad.json()) and "B200" in str(bad.json())
