"""The search's early stop when no domain can hold a gang (issue 16, session 20: Session.search, STOP_WHEN_HOPELESS)
decides exactly what the full walk decides: when the whole cluster has fewer slots than the job's first GPU role needs
(pack_slots at the root: free GPUs taken whole tasks at a time), every domain is short too, and the refusal is the
first domain the walk found short, so the walk stops there instead of sorting and checking every other domain of
every tier. Whole cycles on random clusters (tier-1 domains under leaves under a spine, nodes off higher domains or
off none, NUMA layouts or none, CPU and memory limits, nodes not ready, two flavors, GPUs already used, hard tier
caps, preferred tiers, gangs of one to three roles with sub-groups) give the same bindings, reasons (their messages
too), evictions, nominations and metrics with the stop and without it."""
from __future__ import annotations

import random

import pytest

import scheduler.core.session as session_module
from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot
from scheduler.core.state import ClusterState


def _world(rng: random.Random) -> Snapshot:
    domains = [DomainInfo("spine", 3)]
    leaves = [f"leaf{i}" for i in range(rng.randint(1, 3))]
    domains += [DomainInfo(name, 2, "spine") for name in leaves]
    racks = [f"rack{i}" for i in range(rng.randint(2, 8))]
    domains += [DomainInfo(name, 1, rng.choice(leaves)) for name in racks]
    homes = racks * 3 + leaves + ["spine", None]
    nodes = []
    busy = rng.random()  # how full the cluster is: from nearly empty to nearly full
    for i in rng.sample(range(1000), rng.randint(3, 30)):
        gpus = rng.choice([2, 4, 8, 8])
        used = frozenset(g for g in range(gpus) if rng.random() < busy)
        numa = rng.choice([(), (), tuple(g * 2 // gpus for g in range(gpus))])
        cpu = rng.choice([0, 0, 64000])
        nodes.append(NodeInfo(name=f"n{i:03d}", flavor="H100" if rng.random() < 0.85 else "A100", gpus=gpus,
                              domain=rng.choice(homes), gpu_numa=numa, cpu_milli=cpu,
                              cpu_used=rng.randint(0, cpu) if cpu else 0, used=used,
                              state="ready" if rng.random() < 0.9 else "not_ready"))
    queues = tuple(QueueInfo(q, quotas={f: QuotaInfo(guarantee=0, quota=rng.randint(8, 96), limit=None)
                                        for f in ("H100", "A100")}) for q in ("a", "b"))
    jobs = []
    for j in range(rng.randint(1, 40)):
        roles = []
        for r in range(rng.choice([1, 1, 1, 2, 3])):
            tasks = rng.randint(1, 6)
            grouped = rng.random() < 0.15
            roles.append(RoleInfo(f"r{r}", tasks, rng.choice([0, 1, 2, 4, 8]) if r else rng.choice([1, 2, 4, 8]),
                                  rng.randint(1, tasks), cpu_milli=rng.choice([0, 0, 8000]),
                                  group_size=2 if grouped else 0, group_highest_tier=1 if grouped else None,
                                  group_mode=rng.choice(["hard", "soft"])))
        hard = rng.random() < 0.3
        jobs.append(JobInfo(id=f"j{j}", queue=rng.choice("ab"), roles=tuple(roles), priority=rng.choice([0, 1]),
                            submit_time=float(j), topology_mode="hard" if hard else "none",
                            highest_tier=rng.choice([1, 2]) if hard else None,
                            preferred_tier=rng.choice([None, None, 1, 2]), numa=rng.choice(["prefer", "single"])))
    return Snapshot(nodes=tuple(nodes), domains=tuple(domains), queues=queues, jobs=tuple(jobs))


def _decisions(result) -> tuple:
    return (result.bindings, sorted((k, r.code, r.message, r.terminal) for k, r in result.pending.items()),
            result.evictions, result.nominations, result.metrics, result.estimated_start)


@pytest.fixture
def slots_asked(monkeypatch) -> list:
    """ClusterState.pack_slots calls counted (one list item per call): the early stop makes fewer."""
    asked: list = []
    slots = ClusterState.pack_slots

    def counted(self, d, flavor, gpus_per_task):
        asked.append(d)
        return slots(self, d, flavor, gpus_per_task)

    monkeypatch.setattr(ClusterState, "pack_slots", counted)
    return asked


@pytest.mark.parametrize("seed", range(12))
def test_the_early_stop_decides_as_the_full_walk(seed, slots_asked, monkeypatch):
    rng = random.Random(seed)
    asked = {True: 0, False: 0}
    for _ in range(40):
        snapshot = _world(rng)
        config = CycleConfig(topology=rng.random() < 0.9, binpack=rng.random() < 0.9)
        results = {}
        for stop in (True, False):
            monkeypatch.setattr(session_module, "STOP_WHEN_HOPELESS", stop)
            slots_asked.clear()
            results[stop] = _decisions(run_cycle(snapshot, config, cache=EngineCache()))
            asked[stop] += len(slots_asked)
        assert results[True] == results[False]
    assert asked[True] < asked[False]  # the stop was taken: walks cut short


def test_the_early_stop_is_taken_and_names_the_first_short_domain(monkeypatch):
    """Two racks of four 8-GPU nodes, each node with 4 GPUs used: 16 GPUs free per rack but no whole node, so a gang of
    two 8-GPU tasks is short everywhere. The refusal names the first rack of the walk (best fit: equal free, then name),
    with the stop and without it, and the stop skipped the rest of the walk (the second rack's slots never counted)."""
    nodes = tuple(NodeInfo(name=f"n{i}", flavor="H100", gpus=8, domain=f"rack{i // 4}", used=frozenset(range(4)))
                  for i in range(8))
    domains = (DomainInfo("spine", 2), DomainInfo("rack0", 1, "spine"), DomainInfo("rack1", 1, "spine"))
    job = JobInfo(id="gang", queue="q", roles=(RoleInfo("w", 2, 8, 2),), priority=0, submit_time=0.0)
    snapshot = Snapshot(nodes=nodes, domains=domains, queues=(QueueInfo("q", quotas={}),), jobs=(job,))
    asked: list = []
    slots = ClusterState.pack_slots

    def recorded(self, d, flavor, gpus_per_task):
        asked.append(self.tree.names[d])
        return slots(self, d, flavor, gpus_per_task)

    monkeypatch.setattr(ClusterState, "pack_slots", recorded)
    results = {}
    for stop in (True, False):
        monkeypatch.setattr(session_module, "STOP_WHEN_HOPELESS", stop)
        asked.clear()
        result = run_cycle(snapshot, CycleConfig(), cache=EngineCache())
        results[stop] = (result.pending["gang"].code, result.pending["gang"].message, list(asked))
    assert results[True][:2] == results[False][:2]
    assert results[True][0] == "no_packing" and "rack0" in results[True][1]
    assert "rack1" in results[False][2] and "rack1" not in results[True][2]


def test_too_few_free_gpus_anywhere_refused_without_the_walk(monkeypatch):
    """Eight free GPUs in the whole cluster and a gang needing sixteen: the same insufficient_gpus refusal with the
    shortcut and without it, and with it no domain is listed for the walk (candidate_domains never called)."""
    nodes = tuple(NodeInfo(name=f"n{i}", flavor="H100", gpus=8, domain=f"rack{i // 2}", used=frozenset(range(6)))
                  for i in range(4))
    domains = (DomainInfo("spine", 2), DomainInfo("rack0", 1, "spine"), DomainInfo("rack1", 1, "spine"))
    job = JobInfo(id="gang", queue="q", roles=(RoleInfo("w", 2, 8, 2),), priority=0, submit_time=0.0)
    snapshot = Snapshot(nodes=nodes, domains=domains, queues=(QueueInfo("q", quotas={}),), jobs=(job,))
    walks: list = []
    listed = session_module.candidate_domains

    def recorded(*args, **kwargs):
        walks.append(args[1])
        return listed(*args, **kwargs)

    monkeypatch.setattr(session_module, "candidate_domains", recorded)
    results = {}
    for stop in (True, False):
        monkeypatch.setattr(session_module, "STOP_WHEN_HOPELESS", stop)
        walks.clear()
        result = run_cycle(snapshot, CycleConfig(), cache=EngineCache())
        results[stop] = (result.pending["gang"].code, result.pending["gang"].message, len(walks))
    assert results[True][:2] == results[False][:2] == ("insufficient_gpus", "needs 16 H100 GPUs at once; 8 free")
    assert results[True][2] == 0 and results[False][2] > 0
