"""The incremental metrics (metrics.MetricsBook, kept in the EngineCache) give exactly the figures of the
full walk (cluster_metrics without a cache), cycle after cycle, as nodes' free and healthy GPU counts
change at random, for the whole cluster and for each node group (metrics_by_group)."""
from __future__ import annotations

import random

from clusterspec.importers import load_cluster
from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec
from scheduler.core.cache import EngineCache
from scheduler.core.metrics import cluster_metrics, metrics_by_group
from scheduler.core.state import ClusterState
from scheduler.sim.state import ClusterState as SimState, queue_infos


def test_metrics_book_matches_the_full_walk():
    cluster = load_cluster("philly", scale=0.1)  # 8-GPU and smaller machines: several node groups
    snapshot = SimState(cluster, queue_infos(cluster)).snapshot(0.0)
    cache = EngineCache()
    state = ClusterState(snapshot, cache.static_for(snapshot))
    size = [len(f) for f in state.free]
    rng = random.Random(7)
    seen_partial = False
    for step in range(120):
        for k in rng.sample(range(len(size)), k=rng.choice((1, 3, len(size)))):
            healthy = size[k] if rng.random() < 0.9 else rng.randint(0, size[k])  # some GPUs go bad, or a node down
            state.healthy_gpus[k] = healthy
            state.free[k] = list(range(rng.choice((0, healthy, rng.randint(0, healthy)))))
        held = rng.randint(0, 4)
        got = cluster_metrics(state, held=held, cache=cache)
        assert got == cluster_metrics(state, held=held), step
        assert metrics_by_group(state, got, cache=cache) == metrics_by_group(state), step
        seen_partial |= 0 < got["domain_completeness"] < 1
    assert seen_partial  # the random states exercised partly complete domains
    assert len(metrics_by_group(state)) > 1  # and several node groups


def test_one_group_reuses_the_cluster_figures_and_counts_free_nodes():
    """A cluster of one node group: metrics_by_group takes the cluster's figures and still counts its free
    nodes right with the cache, although cluster_metrics did not fill the cache first."""
    nodes = tuple(NodeSpec(f"n{k}", "A100", 8, domain=f"leaf{k // 2}") for k in range(6))
    domains = (DomainSpec("spine", 3), *(DomainSpec(f"leaf{i}", 2, "spine") for i in range(3)))
    cluster = ClusterSpec("one-group", nodes, domains, (QueueSpec("q"),))
    snapshot = SimState(cluster, queue_infos(cluster)).snapshot(0.0)
    cache = EngineCache()
    state = ClusterState(snapshot, cache.static_for(snapshot))
    for k in (0, 3, 4):
        state.free[k] = state.free[k][:3]
    whole = cluster_metrics(state)
    expected = metrics_by_group(state, whole)
    assert list(expected) == ["A100 x8"] and expected["A100 x8"]["free_nodes"] == 3
    assert metrics_by_group(state, whole, cache=cache) == expected
    state.free[1] = []
    expected = metrics_by_group(state, cluster_metrics(state))
    assert expected["A100 x8"]["free_nodes"] == 2
    assert metrics_by_group(state, cluster_metrics(state, cache=cache), cache=cache) == expected
