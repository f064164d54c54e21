"""store.build_snapshot builds the engine's frozen objects with positional calls, one RoleInfo tuple per job shape and
the placements as plain tuples until a JobInfo is built (issue 16, session 10, branch snap10). The objects must be
exactly what the dataclasses' keyword constructors make from the same values (same fields, same types, equal, same
hash), whatever the memo holds, on a seeded mix of pending, running, multi-role, flavored and excluded-node jobs."""
from __future__ import annotations

import random
from dataclasses import fields
from datetime import datetime, timezone as dt_timezone

from gpuplatform.models import Gpu, Job
from gpuplatform.scheduling import store
from scheduler.core import run_cycle
from scheduler.core.snapshot import CycleConfig, JobInfo, NodeInfo, RoleInfo, TaskPlacement

CLOCK = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)


def _rebuilt(obj):
    """`obj` built again through its class's keyword constructor from its own field values."""
    return type(obj)(**{f.name: getattr(obj, f.name) for f in fields(obj)})


def _same(obj) -> None:
    again = _rebuilt(obj)
    assert again == obj and hash(again) == hash(obj) and repr(again) == repr(obj)
    assert [type(getattr(again, f.name)) for f in fields(obj)] == [type(getattr(obj, f.name)) for f in fields(obj)]


def _seeded_world(submit) -> None:
    rng = random.Random(16)
    for i in range(24):
        roles = [{"name": "worker", "tasks": rng.choice([1, 2, 4]), "gpus_per_task": rng.choice([1, 2, 4])}]
        if i % 5 == 0:
            roles.append({"name": "ps", "tasks": 1, "gpus_per_task": 1, "cpu_milli": 2000, "memory_mib": 4096,
                          "flavor": "H100|A100"})
        submit(f"job{i}", roles=roles, priority=rng.choice([0, 0, 5]),
               topology_mode=rng.choice(["none", "soft"]), numa=rng.choice(["prefer", "single"]))
    # some of them start (placements from the engine, written by the apply), the rest stay pending
    snap, _ = store.build_snapshot(CLOCK.timestamp())
    result = run_cycle(snap, CycleConfig())
    result.bindings[:] = result.bindings[:8]
    store.apply_result(result, clock=CLOCK, cycle_number=1)
    for i in range(6):  # jobs of one shape (shared RoleInfo tuples), one with nodes to avoid
        submit(f"same{i}", tasks=2, gpus=1)
    Job.objects.filter(name="same0").update(excluded_nodes=["n1"])
    Gpu.objects.filter(node__name="n3", index=7).update(health="unhealthy")


def test_objects_are_what_the_keyword_constructors_make(submit):
    _seeded_world(submit)
    memo = store.SnapshotMemo()
    cold, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    warm, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    plain, _ = store.build_snapshot(CLOCK.timestamp())
    assert cold == warm == plain and repr(cold) == repr(plain)
    assert all(a is b for a, b in zip(cold.jobs, warm.jobs))  # nothing written between: the memo's objects
    assert all(a is b for a, b in zip(cold.nodes, warm.nodes))

    running = [j for j in cold.jobs if j.state == "running"]
    pending = [j for j in cold.jobs if j.state == "pending"]
    assert len(running) == 8 and len(pending) == 22
    for node in cold.nodes:
        assert type(node) is NodeInfo
        _same(node)
    assert next(n for n in cold.nodes if n.name == "n3").unhealthy == frozenset({7})
    assert all(n.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1) for n in cold.nodes)
    assert sum(len(n.used) for n in cold.nodes) == sum(j.gpus_requested for j in running)
    for job in cold.jobs:
        assert type(job) is JobInfo and type(job.roles) is tuple and type(job.placement) is tuple
        _same(job)
        for role in job.roles:
            assert type(role) is RoleInfo
            _same(role)
        for p in job.placement:
            assert type(p) is TaskPlacement and type(p.gpus) is tuple
            _same(p)
        assert list(job.placement) == sorted(job.placement, key=lambda p: (p.role, p.index))
        assert [p.gpus for p in job.placement] == [tuple(sorted(p.gpus)) for p in job.placement]
    for job in running:
        assert len(job.placement) == sum(r.tasks for r in job.roles) and job.start_time == CLOCK.timestamp()
    same = {j.name: j for j in cold.jobs if j.name.startswith("same")}
    assert len(same) == 6 and all(j.roles is same["same1"].roles for j in same.values())  # one tuple per shape
    assert same["same0"].avoid_nodes == frozenset({"n1"}) and same["same1"].avoid_nodes == frozenset()
    ps = [j for j in cold.jobs if len(j.roles) == 2]
    assert ps and all({r.name: r.flavors for r in j.roles} == {"worker": (), "ps": ("H100", "A100")} for j in ps)


def test_a_node_is_the_same_object_until_its_inputs_change(submit):
    memo = store.SnapshotMemo()
    submit("one", tasks=1, gpus=2)
    first, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    result = run_cycle(first, CycleConfig())
    store.apply_result(result, clock=CLOCK, cycle_number=1)
    second, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    (placed,) = result.bindings[0].tasks
    for a, b in zip(first.nodes, second.nodes):
        assert (a is b) == (a.name != placed.node) and a.name == b.name
    assert next(n for n in second.nodes if n.name == placed.node).used == frozenset(placed.gpus)
    Gpu.objects.filter(node__name="n0", index=5).update(health="unhealthy")
    third, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    for b, c in zip(second.nodes, third.nodes):
        assert (b is c) == (b.name != "n0")
    assert third.nodes[[n.name for n in third.nodes].index("n0")].unhealthy == frozenset({5})
    plain, _ = store.build_snapshot(CLOCK.timestamp())
    assert plain == third
