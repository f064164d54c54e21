"""Trial 23: on a cluster of nodes without a domain (the local mode) the topology map drew one unlabelled column per
node under "(no leaf)" ("4 GPUs shown" over 2 squares); it draws one square per GPU grouped by node, as a zoom into
a domain does, on the overview and on a job's map. A cluster with domains keeps its per-domain overview."""
from __future__ import annotations

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec

pytestmark = pytest.mark.django_db


def load(nodes, domains=()):
    from gpuplatform import services

    services.load_cluster_spec(ClusterSpec(name="c", domains=domains, nodes=nodes,
                                           queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 4, 4)}),)))


def test_domainless_nodes_are_drawn_gpu_by_gpu_with_their_names(client, django_user_model):
    load(tuple(NodeSpec(f"local-{i}", "H100", 2) for i in (0, 1)))
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True))
    data = client.get("/topology.json").json()
    assert data["gpus"] == 4 and data["shown_gpus"] == 4
    assert data["level"] == "gpus"
    assert sorted((r["domain"], r["node"], r["gpu"]) for r in data["rows"]) == [
        ("node:local-0", "local-0", 0), ("node:local-0", "local-0", 1),
        ("node:local-1", "local-1", 0), ("node:local-1", "local-1", 1)]
    markers = sum(len(t.get("x") or ()) for t in data["figure"]["data"])
    assert markers >= 4  # a cell per GPU, not a column per node
    assert "(no leaf)" not in str(data["figure"]["layout"])


def test_a_cluster_with_domains_keeps_its_domain_overview(client, django_user_model):
    load((NodeSpec("a", "H100", 2, domain="nv1"), NodeSpec("b", "H100", 2, domain="nv2")),
         (DomainSpec("leaf", 2), DomainSpec("nv1", 1, "leaf"), DomainSpec("nv2", 1, "leaf")))
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True))
    data = client.get("/topology.json").json()
    assert data["level"] == "domains" and {r["domain"] for r in data["rows"]} == {"nv1", "nv2"}
