"""Fluent, keyword-only builders for test worlds (kube-scheduler's MakePod().Obj(), Kueue's wrappers).

    world = (World()
             .nodes(count=4, gpus=8, flavor="H100")
             .queue(name="q", quota={"H100": 32})
             .job(name="big", queue="q", tasks=3, gpus_per_task=4, submit=0))
    result = world.cycle()
    check_result(world.snapshot(), result)

A World yields a frozen Snapshot for one cycle (`snapshot`, `cycle`), and the pieces a multi-cycle
scenario runner needs: nodes, domains, queues, jobs with their durations. The runner itself,
`scheduler.sim.scenario.ScenarioRunner`, steps a World through simulated time on the simulator's state;
it is re-exported here (`from scheduler.core.testing import ScenarioRunner`) and imported only when
asked for. `check_result` asserts one cycle's safety invariants. Units: GPUs, millicores, MiB, seconds.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Iterable, Mapping

from .cycle import run_cycle
from .snapshot import (
    CycleConfig, CycleResult, DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot,
    TaskPlacement,
)


def role(*, name: str = "worker", tasks: int = 1, gpus_per_task: int = 1, min_available: int | None = None,
         cpu_milli: int = 0, memory_mib: int = 0, flavors: Iterable[str] = (), group_size: int = 0,
         group_highest_tier: int | None = None, group_mode: str = "hard") -> RoleInfo:
    return RoleInfo(name=name, tasks=tasks, gpus_per_task=gpus_per_task,
                    min_available=tasks if min_available is None else min_available,
                    cpu_milli=cpu_milli, memory_mib=memory_mib, flavors=tuple(flavors), group_size=group_size,
                    group_highest_tier=group_highest_tier, group_mode=group_mode)


class World:
    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._domains: dict[str, DomainInfo] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._jobs: dict[str, JobInfo] = {}
        self.durations: dict[str, float] = {}

    # -- cluster ----------------------------------------------------------------------------------------
    def node(self, *, name: str, gpus: int, flavor: str = "H100", domain: str | None = None, used: int = 0,
             numa: Iterable[int] = (), cpu_milli: int = 0, memory_mib: int = 0, state: str = "ready",
             unhealthy: Iterable[int] = (), spare: bool = False) -> World:
        """One node; `used` marks its first GPUs as held by something outside the scheduler's queues; `spare`:
        a hot spare (NodeInfo.spare)."""
        self._nodes[name] = NodeInfo(name=name, flavor=flavor, gpus=gpus, domain=domain, gpu_numa=tuple(numa),
                                     cpu_milli=cpu_milli, memory_mib=memory_mib, state=state,
                                     unhealthy=frozenset(unhealthy), used=frozenset(range(used)), spare=spare)
        return self

    def nodes(self, *, gpus: int, count: int | None = None, names: Iterable[str] | None = None,
              flavor: str = "H100", prefix: str = "n", domain: str | None = None, start: int = 1,
              **node_kwargs) -> World:
        names = list(names) if names is not None else [f"{prefix}{i}" for i in range(start, start + (count or 0))]
        for n in names:
            self.node(name=n, gpus=gpus, flavor=flavor, domain=domain, **node_kwargs)
        return self

    def domain(self, *, name: str, tier: int, parent: str | None = None, nodes: Iterable[str] = (),
               children: Iterable[str] = ()) -> World:
        """A domain; `nodes` are (re)attached to it, `children` get it as parent."""
        self._domains[name] = DomainInfo(name=name, tier=tier, parent=parent)
        for n in nodes:
            self._nodes[n] = replace(self._nodes[n], domain=name)
        for c in children:
            self._domains[c] = replace(self._domains[c], parent=name)
        return self

    def racks(self, *, count: int, nodes_per_rack: int, gpus: int, flavor: str = "H100", tier: int = 1,
              prefix: str = "rack", spine: str | None = "spine", spine_tier: int | None = None) -> World:
        """`count` scale-up domains of `nodes_per_rack` nodes (named rack{r}-n{i}), under one spine."""
        rack_names = []
        for r in range(1, count + 1):
            rack = f"{prefix}{r}"
            self.nodes(count=nodes_per_rack, gpus=gpus, flavor=flavor, prefix=f"{rack}-n")
            self.domain(name=rack, tier=tier, nodes=[f"{rack}-n{i}" for i in range(1, nodes_per_rack + 1)])
            rack_names.append(rack)
        if spine:
            self.domain(name=spine, tier=spine_tier or tier + 1, children=rack_names)
        return self

    # -- queues -----------------------------------------------------------------------------------------
    def queue(self, *, name: str, quota: Mapping[str, int] | None = None, guarantee: Mapping[str, int] | None = None,
              limit: Mapping[str, int] | None = None, parent: str | None = None, weight: float = 1.0,
              state: str = "open", recent_usage: Mapping[str, float] | None = None) -> World:
        flavors = set(quota or {}) | set(guarantee or {}) | set(limit or {})
        quotas = {f: QuotaInfo(guarantee=(guarantee or {}).get(f, 0), quota=(quota or {}).get(f, 0),
                               limit=(limit or {}).get(f)) for f in flavors}
        self._queues[name] = QueueInfo(name=name, parent=parent, weight=weight, quotas=quotas, state=state,
                                       recent_usage=dict(recent_usage or {}))
        return self

    # -- jobs -------------------------------------------------------------------------------------------
    def job(self, *, name: str, queue: str = "q", tasks: int = 1, gpus_per_task: int = 1,
            min_available: int | None = None, roles: Iterable[RoleInfo] | None = None, priority: int = 0,
            submit: float = 0.0, preemptible: bool = True, topology_mode: str = "none",
            highest_tier: int | None = None, preferred_tier: int | None = None, time_limit: float | None = None,
            flavors: Iterable[str] = (), cpu_milli: int = 0, memory_mib: int = 0,
            duration: float | None = None, reserved: Iterable[TaskPlacement] = (),
            avoid_nodes: Iterable[str] = (), numa: str = "prefer", interruptible: bool = False) -> World:
        """A pending job: one role from tasks / gpus_per_task / min_available, or explicit `roles`;
        `reserved`: GPUs held for it by an earlier cycle (a nomination); `avoid_nodes`: nodes its earlier
        attempts failed on (placed there only when nothing else fits); `numa`: "prefer" | "single";
        `interruptible`: it may be stopped at once (and run on hot spares)."""
        roles = tuple(roles) if roles is not None else (
            role(tasks=tasks, gpus_per_task=gpus_per_task, min_available=min_available, cpu_milli=cpu_milli,
                 memory_mib=memory_mib, flavors=flavors),)
        self._jobs[name] = JobInfo(id=name, name=name, queue=queue, roles=roles, priority=priority,
                                   submit_time=submit, preemptible=preemptible, topology_mode=topology_mode,
                                   highest_tier=highest_tier, preferred_tier=preferred_tier, time_limit=time_limit,
                                   reserved=tuple(reserved), avoid_nodes=frozenset(avoid_nodes), numa=numa,
                                   interruptible=interruptible)
        if duration is not None:
            self.durations[name] = duration
        return self

    def running(self, *, name: str, queue: str = "q", nodes: Iterable[str], gpus_per_task: int,
                min_available: int | None = None, started: float = 0.0, priority: int = 0,
                preemptible: bool = True, time_limit: float | None = None, duration: float | None = None,
                gpus: Iterable[Iterable[int]] | None = None, migratable: bool = False,
                min_run_before_move: float = 0.0, checkpoint_grace: float | None = None,
                interruptible: bool = False) -> World:
        """A job already running with one task on each of `nodes` (a node may repeat), on the lowest free GPUs
        (or, with `gpus`, on those GPU indices: one tuple per task); migratable / min_run_before_move /
        checkpoint_grace: whether rescheduling may move it (JobInfo)."""
        placements = []
        taken: dict[str, set[int]] = {}
        chosen = [tuple(g) for g in gpus] if gpus is not None else None
        for i, n in enumerate(nodes):
            node = self._nodes[n]
            busy = set(node.used) | taken.setdefault(n, set())
            picked = chosen[i] if chosen is not None else \
                tuple(g for g in range(node.gpus) if g not in busy)[:gpus_per_task]
            assert len(picked) == gpus_per_task and not busy & set(picked), f"node {n} has no room for task {i}"
            taken[n].update(picked)
            placements.append(TaskPlacement(role="worker", index=i, node=n, gpus=picked))
        for n, gpus in taken.items():
            self._nodes[n] = replace(self._nodes[n], used=self._nodes[n].used | gpus)
        count = len(placements)
        self._jobs[name] = JobInfo(
            id=name, name=name, queue=queue, roles=(role(tasks=count, gpus_per_task=gpus_per_task,
                                                         min_available=min_available),),
            priority=priority, submit_time=started, preemptible=preemptible, time_limit=time_limit,
            state="running", placement=tuple(placements), start_time=started, migratable=migratable,
            min_run_before_move=min_run_before_move, checkpoint_grace=checkpoint_grace, interruptible=interruptible)
        if duration is not None:
            self.durations[name] = duration
        return self

    def __repr__(self) -> str:  # hypothesis prints failing worlds with this
        return (f"World(nodes={list(self._nodes.values())!r}, domains={list(self._domains.values())!r}, "
                f"queues={list(self._queues.values())!r}, jobs={list(self._jobs.values())!r})")

    # -- outputs ----------------------------------------------------------------------------------------
    @property
    def node_infos(self) -> tuple[NodeInfo, ...]:
        return tuple(self._nodes.values())

    @property
    def domain_infos(self) -> tuple[DomainInfo, ...]:
        return tuple(self._domains.values())

    @property
    def queue_infos(self) -> tuple[QueueInfo, ...]:
        return tuple(self._queues.values())

    @property
    def jobs(self) -> tuple[JobInfo, ...]:
        return tuple(self._jobs.values())

    def snapshot(self, *, now: float = 0.0, submitted_by: float | None = None) -> Snapshot:
        """All jobs (or only those submitted by `submitted_by`) in one frozen snapshot."""
        jobs = tuple(j for j in self._jobs.values()
                     if j.state != "pending" or submitted_by is None or j.submit_time <= submitted_by)
        return Snapshot(nodes=self.node_infos, domains=self.domain_infos, queues=self.queue_infos, jobs=jobs, now=now)

    def cycle(self, *, now: float = 0.0, config: CycleConfig | None = None) -> CycleResult:
        return run_cycle(self.snapshot(now=now), config)


# -- invariants ---------------------------------------------------------------------------------------------
def check_result(snapshot: Snapshot, result: CycleResult) -> None:
    """Assert the cycle's safety invariants; raises AssertionError naming the first violation.

    Bindings: only pending jobs, each at most once; no GPU bound twice (against the snapshot and within
    the result), none on a node that is not ready, none on a hot spare unless the job is interruptible
    (rule "on_spare"), none unhealthy or out of range, each task with its
    role's GPU count and on an allowed flavor; every gang at or above each role's min_available and at most
    its tasks; no node over its CPU / memory capacity; no hard topology constraint crossed (the binding's
    domain within highest_tier, every task inside it). Evictions: only running preemptible jobs, never
    one bound in the same cycle, only tasks it runs, each for a pending beneficiary holding GPUs (a
    Nomination), and a partial eviction leaves every role at or above its min_available. Growths: only
    running jobs, tasks they do not run, on free GPUs, inside a hard topology. Withdrawals: only jobs being
    evicted for that beneficiary.
    """
    from .domain_tree import build_tree

    tree = build_tree(snapshot)
    nodes = {n.name: n for n in snapshot.nodes}
    jobs = {j.id: j for j in snapshot.jobs}
    taken: dict[str, set[int]] = {n: set(info.used) for n, info in nodes.items()}
    cpu = {n: info.cpu_used for n, info in nodes.items()}
    mem = {n: info.memory_used for n, info in nodes.items()}
    bound: set = set()
    for b in result.bindings:
        job = jobs[b.job_id]
        assert job.state == "pending", f"{b.job_id}: bound but not pending"
        assert b.job_id not in bound, f"{b.job_id}: bound twice"
        bound.add(b.job_id)
        roles = {r.name: r for r in job.roles}
        counts = dict.fromkeys(roles, 0)
        for t in b.tasks:
            node = nodes[t.node]
            role_info = roles[t.role]
            counts[t.role] += 1
            assert node.state == "ready", f"{b.job_id}: task on {node.state} node {t.node}"
            assert not node.spare or (job.interruptible and b.rule == "on_spare"), (
                f"{b.job_id}: placed on spare {t.node} but not interruptible")
            assert len(t.gpus) == role_info.gpus_per_task, f"{b.job_id}: wrong GPU count on {t.node}"
            for g in t.gpus:
                assert 0 <= g < node.gpus and g not in node.unhealthy, f"{b.job_id}: bad GPU {t.node}/{g}"
                assert g not in taken[t.node], f"GPU {t.node}/{g} bound twice ({b.job_id})"
                taken[t.node].add(g)
            cpu[t.node] += role_info.cpu_milli
            mem[t.node] += role_info.memory_mib
            assert not node.cpu_milli or cpu[t.node] <= node.cpu_milli, f"node {t.node} over CPU"
            assert not node.memory_mib or mem[t.node] <= node.memory_mib, f"node {t.node} over memory"
            if role_info.gpus_per_task and role_info.flavors:
                assert node.flavor in role_info.flavors, f"{b.job_id}: flavor {node.flavor} not allowed"
            if job.topology_mode == "hard" and job.highest_tier is not None:
                d = tree.index[b.domain]
                assert tree.tiers[d] <= job.highest_tier, f"{b.job_id}: placed in tier {tree.tiers[d]}"
                k = next(i for i, n in enumerate(snapshot.nodes) if n.name == t.node)
                assert d in tree.node_chain[k], f"{b.job_id}: task on {t.node} outside domain {b.domain}"
        for name, r in roles.items():
            assert r.effective_min <= counts[name] <= r.tasks, (
                f"{b.job_id}: role {name} got {counts[name]} tasks, needs {r.effective_min}..{r.tasks}")
    for b in result.growths:  # new tasks of running elastic jobs: free GPUs, tasks it does not run yet
        job = jobs[b.job_id]
        assert job.state == "running", f"{b.job_id}: grown but not running"
        assert b.job_id not in bound, f"{b.job_id}: grown twice"
        bound.add(b.job_id)
        roles = {r.name: r for r in job.roles}
        have = {(t.role, t.index) for t in job.placement}
        for t in b.tasks:
            r = roles[t.role]
            assert 0 <= t.index < r.tasks and (t.role, t.index) not in have, f"{b.job_id}: bad new task {t}"
            have.add((t.role, t.index))
            assert nodes[t.node].schedulable and len(t.gpus) == r.gpus_per_task, f"{b.job_id}: bad new task {t}"
            for g in t.gpus:
                assert g not in taken[t.node] and g not in nodes[t.node].unhealthy, f"GPU {t.node}/{g} bound twice"
                taken[t.node].add(g)
            if job.topology_mode == "hard" and job.highest_tier is not None:
                assert tree.tiers[tree.index[b.domain]] <= job.highest_tier, f"{b.job_id}: grew past its tier"
    for w in result.withdrawals:
        assert jobs[w.job_id].state == "preempting" and jobs[w.job_id].evicted_for == w.beneficiary, (
            f"{w.job_id}: withdrawn but not being evicted for {w.beneficiary}")
    held = {n.job_id for n in result.nominations}
    for e in result.evictions:
        victim = jobs[e.job_id]
        assert victim.state == "running" and victim.preemptible, f"{e.job_id}: not an evictable job"
        assert e.job_id not in bound, f"{e.job_id}: bound and evicted"
        placed = {(t.role, t.index) for t in victim.placement}
        assert set(e.tasks) <= placed, f"{e.job_id}: evicts tasks it does not run"
        assert jobs[e.beneficiary].state == "pending" and e.beneficiary in held, f"{e.beneficiary}: no hold"
        if e.tasks:  # a partial eviction keeps every role at or above its minimum
            left = defaultdict(int)
            for t in victim.placement:
                if (t.role, t.index) not in e.tasks:
                    left[t.role] += 1
            for r in victim.roles:
                assert left[r.name] >= r.min_available, f"{e.job_id}: partial eviction breaks the gang"


def __getattr__(name: str):
    """ScenarioRunner lives in scheduler.sim.scenario (it runs on the simulator's state, and the engine must
    not import its simulator at import time); it is still importable from here, where tests import it."""
    if name == "ScenarioRunner":
        from scheduler.sim.scenario import ScenarioRunner

        return ScenarioRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
