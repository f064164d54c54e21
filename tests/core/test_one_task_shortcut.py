"""The one-task shortcut of the search (Session._one_task, issue 16: a job of one task placed without the lead
domain's node order) decides exactly what the full search decides: whole cycles on random clusters (leaf and
non-leaf tier-1 domains, nodes hanging off higher domains or off no domain, names not in index order, NUMA
layouts or none, CPU and memory limits, nodes not ready, two flavors, GPUs already used) and random job mixes
(one-task jobs of 1..8 GPUs with CPU and memory, hard tier caps, preferred tiers, multi-task gangs) give the
same bindings, reasons, evictions and metrics with the shortcut and with it turned off."""
from __future__ import annotations

import random

import pytest

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.session import Session
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot


def _world(rng: random.Random) -> Snapshot:
    domains = [DomainInfo("spine", 3)]
    leaves = [f"leaf{i}" for i in range(rng.randint(1, 3))]
    domains += [DomainInfo(name, 2, "spine") for name in leaves]
    racks = []
    for i in range(rng.randint(2, 8)):
        name = f"rack{i}"
        racks.append(name)
        domains.append(DomainInfo(name, 1, rng.choice(leaves)))
    homes = racks * 3 + leaves + ["spine", None]
    if rng.random() < 0.4:  # a tier-1 domain with a domain below it (named to sort before the nodes): not a leaf
        domains.append(DomainInfo("a-sub", 0 if rng.random() < 0.5 else 1, racks[0]))
        homes += ["a-sub"] * 4 + [racks[0]] * 4
    nodes = []
    count = rng.randint(4, 40)
    for i in rng.sample(range(1000), count):  # names out of index order
        gpus = rng.choice([1, 2, 4, 4, 8, 8])
        flavor = "H100" if rng.random() < 0.8 else "A100"
        numa = rng.choice([(), tuple(g * 2 // gpus for g in range(gpus)), tuple(g % 2 for g in range(gpus)),
                           tuple(g * 2 // gpus for g in range(gpus))[: max(1, gpus - 1)]])
        used = frozenset(rng.sample(range(gpus), rng.randint(0, gpus)))
        cpu = rng.choice([0, 0, 16000, 64000])
        mem = rng.choice([0, 0, 65536, 262144])
        nodes.append(NodeInfo(name=f"n{i:03d}", flavor=flavor, gpus=gpus, domain=rng.choice(homes), gpu_numa=numa,
                              cpu_milli=cpu, memory_mib=mem, cpu_used=rng.randint(0, cpu) if cpu else 0,
                              memory_used=rng.randint(0, mem) if mem else 0, used=used,
                              state="ready" if rng.random() < 0.9 else "not_ready",
                              unhealthy=frozenset([0]) if rng.random() < 0.05 else frozenset()))
    queues = tuple(QueueInfo(q, quotas={f: QuotaInfo(guarantee=0, quota=rng.randint(4, 64), limit=None)
                                        for f in ("H100", "A100")}) for q in ("a", "b", "c"))
    jobs = []
    for j in range(rng.randint(1, 60)):
        if rng.random() < 0.8:
            roles = (RoleInfo("w", 1, rng.choice([1, 1, 1, 2, 4, 8]), 1, cpu_milli=rng.choice([0, 0, 8000, 40000]),
                              memory_mib=rng.choice([0, 0, 32768, 200000]),
                              flavors=rng.choice([(), (), ("A100",)])),)
        else:
            tasks = rng.randint(1, 4)
            roles = (RoleInfo("w", tasks, rng.choice([1, 2, 4]), rng.randint(1, tasks)),)
        hard = rng.random() < 0.2
        jobs.append(JobInfo(id=f"j{j}", queue=rng.choice("abc"), roles=roles, priority=rng.choice([0, 0, 1]),
                            submit_time=float(j), topology_mode="hard" if hard else "none",
                            highest_tier=rng.choice([1, 2]) if hard else None,
                            preferred_tier=rng.choice([None, None, None, 1, 2]),
                            numa=rng.choice(["prefer", "prefer", "single"]),
                            preemptible=rng.random() < 0.9))
    return Snapshot(nodes=tuple(nodes), domains=tuple(domains), queues=queues, jobs=tuple(jobs))


def _decisions(result) -> tuple:
    return result.bindings, result.pending, result.evictions, result.nominations, result.metrics


@pytest.fixture
def calls(monkeypatch) -> dict:
    """Session._one_task counted: {"taken": placed by the shortcut, "declined": left to the full search}."""
    calls = {"taken": 0, "declined": 0}
    shortcut = Session._one_task

    def counted(self, *args):
        placed = shortcut(self, *args)
        calls["taken" if placed is not None else "declined"] += 1
        return placed

    monkeypatch.setattr(Session, "_one_task", counted)
    return calls


@pytest.mark.parametrize("seed", range(40))
def test_shortcut_decides_as_the_full_search(seed: int, monkeypatch, calls) -> None:
    rng = random.Random(seed)
    snapshot = _world(rng)
    config = CycleConfig(binpack=rng.random() < 0.9, topology=rng.random() < 0.9)
    fast = [_decisions(run_cycle(snapshot, config)), _decisions(run_cycle(snapshot, config, cache=EngineCache()))]
    monkeypatch.setattr(Session, "_one_task_tier", lambda self, job, flavor, levels: 0)  # the shortcut off
    taken = calls["taken"]
    full = [_decisions(run_cycle(snapshot, config)), _decisions(run_cycle(snapshot, config, cache=EngineCache()))]
    assert calls["taken"] == taken  # really off
    assert fast == full


def test_the_worlds_exercise_both_ways(calls) -> None:
    """Across the seeds above the shortcut both places jobs and declines (then the full search runs)."""
    for seed in range(40):
        rng = random.Random(seed)
        snapshot = _world(rng)
        run_cycle(snapshot, CycleConfig(binpack=rng.random() < 0.9, topology=rng.random() < 0.9))
    assert calls["taken"] > 100 and calls["declined"] > 10, calls


def test_a_lead_domain_with_a_domain_below_it_is_left_to_the_full_search() -> None:
    """A tier-1 domain with a tier-0 domain below it, searched from tier 1 (preferred tier): the node order puts
    the sub-domain first (least free, then its name), so the task goes to the node inside it, not to the
    domain's own node with as few free GPUs."""
    snapshot = Snapshot(
        nodes=(NodeInfo(name="n1", flavor="H100", gpus=4, domain="a-sub", used=frozenset({0, 1, 2})),
               NodeInfo(name="n2", flavor="H100", gpus=4, domain="rack0", used=frozenset({0, 1, 2}))),
        domains=(DomainInfo("rack0", 1), DomainInfo("a-sub", 0, "rack0")),
        queues=(QueueInfo("a", quotas={"H100": QuotaInfo(guarantee=0, quota=8, limit=None)}),),
        jobs=(JobInfo(id="j", queue="a", roles=(RoleInfo("w", 1, 1, 1),), preferred_tier=1),))
    (binding,) = run_cycle(snapshot, CycleConfig()).bindings
    assert (binding.tasks[0].node, binding.tasks[0].gpus, binding.domain) == ("n1", (3,), "rack0")
