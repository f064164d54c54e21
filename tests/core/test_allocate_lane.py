"""allocate's shortcuts for a busy cycle (issue 16) decide exactly what the plain path decides: whole cycles on random
worlds (a queue tree with limits and quotas, preemptible and non-preemptible jobs, one-task jobs of 1-8 GPUs with and
without CPU and memory, gangs, running jobs with time limits so reservations, backfill and reclaim happen, avoided
nodes, one or two flavors) with and without

- Admission.lane (a one-task job placed without the call chain place -> _place -> _place_flavor -> search),
- Admission.unchanged (a queue's share, headroom and key kept while no charge reached its chain; off: kept only at
  the same QueueTree.version),
- Session._one_task_take's reuse of the node the last task of the same size went to,

give the same bindings (with their shares), reasons, evictions, nominations, reservations and metrics, on a new
engine cache and on a second cycle over copies of the same objects with that cache (a platform's next snapshot:
every job and node object new, so the snapshot index and the pending diff start over), as without a cache."""
from __future__ import annotations

import copy
import dataclasses
import random

import pytest

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.actions.allocate import Admission
from scheduler.core.session import Session
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, \
    TaskPlacement


def _world(rng: random.Random) -> Snapshot:
    racks = [f"rack{i}" for i in range(rng.randint(2, 6))]
    domains = [DomainInfo("spine", 2)] + [DomainInfo(r, 1, "spine") for r in racks]
    two = rng.random() < 0.3
    nodes, used = [], {}
    for i in range(rng.randint(6, 30)):
        gpus = rng.choice([4, 4, 8, 8, 2])
        nodes.append(dict(name=f"n{i:02d}", flavor="A100" if two and rng.random() < 0.3 else "H100", gpus=gpus,
                          domain=rng.choice(racks + [None] if rng.random() < 0.1 else racks),
                          gpu_numa=rng.choice([(), tuple(g * 2 // gpus for g in range(gpus))]),
                          cpu_milli=rng.choice([0, 0, 64000]), memory_mib=rng.choice([0, 0, 262144])))
        used[nodes[-1]["name"]] = set()
    flavors = ("H100", "A100")
    capacity = sum(n["gpus"] for n in nodes)
    queues = []
    if rng.random() < 0.6:  # a parent over the queues: a grouping node, or one with its own quota and limit
        top = rng.randint(capacity // 4, capacity)
        queues.append(QueueInfo("org", quotas={} if rng.random() < 0.4 else {
            f: QuotaInfo(guarantee=0, quota=top, limit=rng.choice([None, rng.randint(top // 2, capacity)]))
            for f in flavors}))
    parent = "org" if queues else None
    for q in ("a", "b", "c"):
        quota = rng.randint(0, capacity // 2)
        limit = rng.choice([None, rng.randint(quota, max(quota, capacity // 3)), rng.randint(quota, capacity), capacity])
        queues.append(QueueInfo(q, parent=parent, weight=rng.choice([1.0, 1.0, 2.0]),
                                quotas={f: QuotaInfo(guarantee=quota // 2, quota=quota, limit=limit) for f in flavors}))
    jobs = []
    for j in range(rng.randint(0, 12)):  # running jobs, some with a time limit (reservations, backfill, reclaim)
        node = rng.choice(nodes)
        free = [g for g in range(node["gpus"]) if g not in used[node["name"]]]
        if not free:
            continue
        gpus = tuple(free[:rng.randint(1, len(free))])
        used[node["name"]].update(gpus)
        jobs.append(JobInfo(id=f"r{j}", queue=rng.choice("abc"), roles=(RoleInfo("w", 1, len(gpus), 1),),
                            state="running", placement=(TaskPlacement("w", 0, node["name"], gpus),),
                            start_time=-rng.randint(0, 7200), priority=rng.choice([0, 0, 1]),
                            time_limit=rng.choice([None, 3600.0, 14400.0]), preemptible=rng.random() < 0.8,
                            submit_time=-8000.0))
    for j in range(rng.randint(1, 80)):
        if rng.random() < 0.8:
            roles = (RoleInfo("w", 1, rng.choice([1, 1, 1, 2, 4, 8]), 1, cpu_milli=rng.choice([0, 0, 0, 8000]),
                              memory_mib=rng.choice([0, 0, 0, 32768]), flavors=rng.choice([(), (), ("A100",)])),)
        else:
            tasks = rng.randint(1, 4)
            roles = (RoleInfo("w", tasks, rng.choice([1, 2, 4]), rng.randint(1, tasks)),)
        jobs.append(JobInfo(id=f"j{j}", queue=rng.choice("abc"), roles=roles, priority=rng.choice([0, 0, 0, 1, 2]),
                            submit_time=float(rng.randint(-7200, 0)), preemptible=rng.random() < 0.8,
                            time_limit=rng.choice([None, None, 600.0, 7200.0]),
                            avoid_nodes=frozenset([rng.choice(nodes)["name"]]) if rng.random() < 0.05 else frozenset(),
                            preferred_tier=rng.choice([None, None, None, 1])))
    infos = tuple(NodeInfo(**n, used=frozenset(used[n["name"]])) for n in nodes)
    return Snapshot(nodes=infos, domains=tuple(domains), queues=tuple(queues), jobs=tuple(jobs), now=0.0)


def _copies(s: Snapshot) -> Snapshot:
    return dataclasses.replace(s, nodes=tuple(copy.copy(n) for n in s.nodes), jobs=tuple(copy.copy(j) for j in s.jobs))


def _decisions(result) -> tuple:
    return (result.bindings, result.pending, result.evictions, result.nominations, result.estimated_start,
            result.fair_share, result.metrics)


def _cycles(snapshot: Snapshot, config: CycleConfig) -> list:
    cache = EngineCache()
    return [_decisions(run_cycle(snapshot, config, cache=cache)),
            _decisions(run_cycle(_copies(snapshot), config, cache=cache)),
            _decisions(run_cycle(snapshot, config))]


def _plain(monkeypatch) -> None:
    monkeypatch.setattr(Admission, "lane", lambda self, job, entry: None)
    monkeypatch.setattr(Admission, "unchanged", lambda self, queue, since: since == self.session.queues.version)
    take = Session._one_task_take

    def forgetful(self, *args):
        self._last_take = None
        return take(self, *args)

    monkeypatch.setattr(Session, "_one_task_take", forgetful)


@pytest.mark.parametrize("seed", range(60))
def test_shortcuts_decide_as_the_plain_path(seed: int, monkeypatch) -> None:
    rng = random.Random(seed)
    snapshot = _world(rng)
    config = CycleConfig(binpack=rng.random() < 0.9, topology=rng.random() < 0.9, backfill=rng.random() < 0.8)
    fast = _cycles(snapshot, config)
    assert fast[0] == fast[1] == fast[2]  # a new cache, the same cache on new objects, no cache
    _plain(monkeypatch)
    assert _cycles(snapshot, config) == fast


def test_the_worlds_exercise_the_shortcuts(monkeypatch) -> None:
    """Across the seeds above, jobs take the lane, shares are kept across other queues' charges, the last node is
    taken again, jobs are refused, and some cycles make a backfill reservation."""
    seen = {"lane": 0, "kept": 0, "again": 0, "refused": 0, "reserved": 0}
    lane, unchanged, take = Admission.lane, Admission.unchanged, Session._one_task_take

    def counted_lane(self, job, entry):
        placed = lane(self, job, entry)
        seen["lane"] += placed is not None
        return placed

    def counted_unchanged(self, queue, since):
        kept = unchanged(self, queue, since)
        seen["kept"] += kept and since != self.session.queues.version
        return kept

    def counted_take(self, gpus, cpu, mem, flavor, tier):
        last = self._last_take
        again = last is not None and last[0] == self.state.moves and last[1:4] == (gpus, tier, flavor)
        placed = take(self, gpus, cpu, mem, flavor, tier)
        seen["again"] += again and placed is not None
        return placed

    monkeypatch.setattr(Admission, "lane", counted_lane)
    monkeypatch.setattr(Admission, "unchanged", counted_unchanged)
    monkeypatch.setattr(Session, "_one_task_take", counted_take)
    for seed in range(60):
        rng = random.Random(seed)
        snapshot = _world(rng)
        config = CycleConfig(binpack=rng.random() < 0.9, topology=rng.random() < 0.9, backfill=rng.random() < 0.8)
        result = run_cycle(snapshot, config, cache=EngineCache())
        seen["refused"] += len(result.pending)
        seen["reserved"] += len(result.estimated_start)
    assert seen["reserved"] >= 5 and all(seen[k] > 20 for k in ("lane", "kept", "again", "refused")), seen
