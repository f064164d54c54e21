"""metrics-held-gpus-not-allocated.yaml at platform level: GPUs held for a job that has not started are
counted apart (held), never as allocated, in the stored sample, the cluster page's numbers, the API and
/metrics; and the cluster page and the API answer show one snapshot."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec


def test_metrics_held_gpus_not_allocated(held_world):
    """metrics-held-gpus-not-allocated.yaml: allocated 6, rate 0.75, held 2, free 0 in the stored sample,
    the cluster page's numbers, the API's current sample and the Prometheus gauges."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpuplatform.models import Allocation, ClusterSample

    sample = ClusterSample.objects.order_by("-time", "-id").first()
    assert (sample.allocated_gpus, sample.held_gpus, sample.free_gpus, sample.schedulable_gpus) == (6, 2, 0, 8)
    assert sample.allocation_rate == pytest.approx(0.75)
    assert Allocation.objects.filter(released_at__isnull=True).count() == sample.allocated_gpus

    client = APIClient()
    client.force_login(held_world)
    numbers = client.get("/cluster/metrics.json").json()["numbers"]
    assert (numbers["allocated_gpus"], numbers["held_gpus"], numbers["free_gpus"]) == (6, 2, 0)
    assert numbers["allocation_rate"] == 75.0
    page = client.get("/cluster/").content.decode()
    assert 'data-metric="held_gpus">2<' in page
    current = client.get("/api/v1/cluster-metrics/current/").json()["sample"]
    assert (current["allocated_gpus"], current["held_gpus"], current["free_gpus"]) == (6, 2, 0)

    text = APIClient().get("/metrics").content.decode()
    gauges = {s.labels.get("state"): s.value for f in text_string_to_metric_families(text)
              if f.name == "gpuplatform_cluster_gpus" for s in f.samples}
    assert (gauges["allocated"], gauges["held"], gauges["free"], gauges["schedulable"]) == (6, 2, 0, 8)
    rate = next(s.value for f in text_string_to_metric_families(text) if f.name == "gpuplatform_allocation_rate"
                for s in f.samples)
    assert rate == pytest.approx(0.75)


def test_topology_map_shows_domainless_nodes(held_world):
    """topology-nodes-without-domain.yaml (pages): a node without a domain is shown as its own tier-1 domain
    (node:<name>), and zooming into it answers 200, not 404."""
    client = APIClient()
    client.force_login(held_world)
    payload = client.get("/topology.json").json()
    assert {r["domain"] for r in payload["rows"]} == {"node:n1"}  # a row per GPU: domainless nodes only (trial 23)
    assert payload["level"] == "gpus" and len(payload["rows"]) == 8
    zoomed = client.get("/topology.json", {"zoom": "node:n1"})
    assert zoomed.status_code == 200 and zoomed.json()["zoom"] == {"name": "node:n1", "tier": 1}
    assert zoomed.json()["gpus"] == 8
    # a zoom naming no domain (nor a domainless node) is a 400 naming zoom (new-user trial 10, F11: a 404)
    nope = client.get("/topology.json", {"zoom": "node:nope"})
    assert nope.status_code == 400 and "no domain named" in nope.json()["zoom"][0]


def test_api_shows_domainless_nodes_as_their_own_domain(db, django_user_model):
    """topology-nodes-without-domain.yaml (API): in a cluster with a rack, the nodes without a domain are
    listed in the domain tree as tier-1 domains node:<name>, and each node says where the scheduler places."""
    from clusterspec.spec import DomainSpec

    from gpuplatform import services

    services.load_cluster_spec(ClusterSpec(
        name="mixed", domains=(DomainSpec("r1", 1),),
        nodes=(NodeSpec("n1", "H100", 8, domain="r1"), NodeSpec("n2", "H100", 8, domain="r1"),
               NodeSpec("n3", "H100", 8), NodeSpec("n4", "H100", 8)),
        queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 32, 32)}),)))
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True))
    tree = client.get("/api/v1/domains/tree/").json()
    assert [(d["name"], d["tier"], d["nodes"]) for d in tree] == [
        ("r1", 1, ["n1", "n2"]), ("node:n3", 1, ["n3"]), ("node:n4", 1, ["n4"])]
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes/").json()["results"]}
    assert (nodes["n3"]["domain"], nodes["n3"]["scheduling_domain"]) == (None, "node:n3")
    assert nodes["n1"]["scheduling_domain"] == "r1"
