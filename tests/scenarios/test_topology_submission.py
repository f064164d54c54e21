"""topology-required-equals-preferred.yaml, the rows decided at submission: through the same service the
pages and the API call, refused with the field and the rule, nothing stored; the valid rows run in one rack."""
import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec

RACKS = {"rack-1": ["r1n1", "r1n2", "r1n3", "r1n4"], "rack-2": ["r2n1", "r2n2", "r2n3", "r2n4"]}
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


@pytest.fixture
def racks(db):
    from gpuplatform import services
    from gpuplatform.models import Queue, Team

    spec = ClusterSpec(
        name="racks",
        nodes=tuple(NodeSpec(name=n, flavor="H100", gpus=8, domain=rack) for rack, ns in RACKS.items() for n in ns),
        domains=(DomainSpec("zone", 3), DomainSpec("rack-1", 2, "zone"), DomainSpec("rack-2", 2, "zone")),
        queues=(QueueSpec(name="q", team="team-q", quotas={"H100": (0, 64, None)}),),
    )
    services.load_cluster_spec(spec)
    return Team.objects.get(name="team-q"), Queue.objects.get(name="q")


def submit(racks, **topology):
    from gpuplatform import services

    team, queue = racks
    return services.submit_job(command=SLEEP, team=team, queue=queue, name="g", roles=[
        {"name": "worker", "tasks": 4, "gpus_per_task": 8, "min_available": 4}], **topology)


@pytest.mark.parametrize("topology, field, rule", [
    ({"topology_mode": "hard", "highest_tier": 2, "preferred_tier": 3}, "preferred_tier", "highest_tier"),
    ({"topology_mode": "hard", "highest_tier": 7}, "highest_tier", "no such tier"),
])
def test_refused_at_submission(racks, topology, field, rule):
    from gpuplatform import services
    from gpuplatform.models import Event, Job, Task

    before = (Job.objects.count(), Task.objects.count(), Event.objects.count())
    with pytest.raises(services.ValidationError) as info:
        submit(racks, **topology)
    assert field in info.value.errors and rule in info.value.errors[field]
    assert (Job.objects.count(), Task.objects.count(), Event.objects.count()) == before


@pytest.mark.parametrize("topology", [
    {"topology_mode": "hard", "highest_tier": 2, "preferred_tier": 2},
    {"topology_mode": "hard", "highest_tier": 3, "preferred_tier": 2},
    {"topology_mode": "hard", "highest_tier": 2},
    {"topology_mode": "soft", "preferred_tier": 2},
])
def test_valid_rows_run_inside_one_rack(racks, topology):
    from gpuplatform.models import Allocation
    from gpuplatform.scheduling.store import run_cycle_once

    job = submit(racks, **topology)
    run_cycle_once()
    job.refresh_from_db()
    assert job.state == "running" and job.placement_tier == 2
    nodes = set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name", flat=True))
    assert len(nodes) == 4 and any(nodes <= set(ns) for ns in RACKS.values())
