"""Fair shares and queue statics kept across cycles in the engine cache's job memo (issue 16): the same answers,
in the same order, as computing them from scratch, over random sequences of queue trees, usage and demand."""
from __future__ import annotations

import random
from dataclasses import replace

from scheduler.core import NodeInfo, QueueInfo, QuotaInfo, Snapshot
from scheduler.core.plugins.fairshare import fair_shares
from scheduler.core.plugins.quota import QueueTree

FLAVORS = ("A", "B")


def _queues(rng: random.Random) -> tuple[QueueInfo, ...]:
    names = [f"q{i}" for i in range(rng.randint(1, 6))]
    out = []
    for i, name in enumerate(names):
        parent = rng.choice([None, *names[:i]]) if i else None
        quotas = {}
        for f in FLAVORS:
            if rng.random() < 0.7:
                quota = rng.randint(0, 8)
                quotas[f] = QuotaInfo(0, quota, rng.choice([None, quota, quota + rng.randint(0, 8)]))
        out.append(QueueInfo(name=name, parent=parent, weight=rng.choice([1.0, 2.0]), quotas=quotas))
    return tuple(out)


def _snapshot(queues) -> Snapshot:
    nodes = (NodeInfo(name="a", flavor="A", gpus=16), NodeInfo(name="b", flavor="B", gpus=8))
    return Snapshot(nodes=nodes, queues=queues)


def test_kept_fair_shares_and_entitlements_match_fresh_ones() -> None:
    rng = random.Random(16)
    memo: dict = {}
    queues = _queues(rng)
    hits = 0
    for step in range(400):
        roll = rng.random()
        if roll < 0.05:
            queues = _queues(rng)  # another tree
        elif roll < 0.1:  # one queue's quotas or weight change; the others are the same objects
            i = rng.randrange(len(queues))
            changed = replace(queues[i], weight=3.0) if rng.random() < 0.5 else \
                replace(queues[i], quotas={f: QuotaInfo(0, 1, 2) for f in FLAVORS})
            queues = (*queues[:i], changed, *queues[i + 1:])
        elif roll < 0.3:  # a new QueueInfo object with the same fields but its recent usage (the replay's decay)
            queues = tuple(replace(q, recent_usage={"A": rng.random()}) for q in queues)
        snapshot = _snapshot(queues)
        kept, fresh = QueueTree(snapshot, memo=memo), QueueTree(snapshot)
        if step == 0 or rng.random() < 0.3:  # usage moves in some cycles only
            charges = [(q.name, f, rng.randint(0, 12)) for q in queues for f in FLAVORS if rng.random() < 0.6]
        charges = [c for c in charges if c[0] in kept.queues]
        for tree in (kept, fresh):
            for name, f, used in charges:
                tree.charge(name, f, used)
        for q in queues:
            for f in FLAVORS:
                assert kept.entitlement(q.name, f) == fresh.entitlement(q.name, f), step
                assert kept.entitlement_room(q.name, f) == fresh.entitlement_room(q.name, f), step
                assert kept.chain(q.name) == fresh.chain(q.name)
        # demand: small changes, often only above some queue's limit (the kept answer is given again then)
        if step == 0 or rng.random() < 0.2:
            demand = {q.name: {f: rng.choice([0, 2, 30]) for f in FLAVORS if rng.random() < 0.8} for q in queues}
        else:  # demand moves above the limits only
            demand = {q: {f: gpus + (gpus >= 30) for f, gpus in per.items()} for q, per in demand.items()
                      if q in kept.queues}
        capacity = {"A": 16, "B": 8} if rng.random() < 0.9 else {"B": 8, "A": 12}
        before = memo.get(next((k for k in memo if k[0] == "fair shares"), None))
        got = fair_shares(kept, capacity, demand, memo)
        want = fair_shares(fresh, capacity, demand)
        assert list(got.items()) == list(want.items()), step
        assert all(list(got[q].items()) == list(want[q].items()) for q in want), step
        after = memo.get(next((k for k in memo if k[0] == "fair shares"), None))
        hits += before is not None and after is before
        got["q0"] = {"A": -1.0}  # the caller's copy: the kept answer does not change
    assert hits > 20  # the kept answer was given again (and right) many times


def test_cycle_fair_shares_on_one_flavor_match_fresh_ones() -> None:
    """cycle_fair_shares (the cycle's call: the last answer checked from the kept pending sums and the usage, the
    water-filling then fed the demand found so) gives what pending_demand + fair_shares give from scratch, on one
    flavor, over random trees, pending lists (jobs coming and going, fractions now and then), usage and capacity;
    both its kept answer and its own water-filling are taken many times."""
    from scheduler.core.plugins.fairshare import cycle_fair_shares, pending_demand
    from scheduler.core.snapshot import JobInfo, RoleInfo

    rng = random.Random(10)
    memo: dict = {}
    queues = _queues(rng)
    pool: list = []
    serial = 0

    def job() -> JobInfo:
        nonlocal serial
        serial += 1
        milli = 500 if rng.random() < 0.03 else 0  # a fraction: the kept sums stand aside
        role = RoleInfo(name="w", tasks=rng.randint(1, 3), gpus_per_task=0 if milli else rng.choice([1, 2, 8]),
                        min_available=1, gpu_milli=milli)
        return JobInfo(id=f"j{serial}", queue=rng.choice([q.name for q in queues] + ["nowhere"]), roles=(role,))

    kept_hits = fills = 0
    for step in range(500):
        if rng.random() < 0.03:
            queues = _queues(rng)
        elif rng.random() < 0.2:
            queues = tuple(replace(q, recent_usage={"A": rng.random()}) for q in queues)
        snapshot = Snapshot(nodes=(NodeInfo(name="a", flavor="A", gpus=16),), queues=queues)
        kept, fresh = QueueTree(snapshot, memo=memo), QueueTree(snapshot)
        if step == 0 or rng.random() < 0.3:
            charges = [(q.name, rng.randint(0, 12)) for q in queues if rng.random() < 0.6]
        for tree in (kept, fresh):
            for name, used in charges:
                if name in tree.queues:
                    tree.charge(name, "A", used)
        roll = rng.random()  # the pending list: a few jobs come or go, or the same list again
        if roll < 0.4:
            pool = [j for j in pool if rng.random() < 0.9] + [job() for _ in range(rng.randint(0, 3))]
        elif roll < 0.45:
            pool = [job() for _ in range(rng.randint(0, 12))]
        pending = list(pool)
        capacity = {"A": 16} if rng.random() < 0.9 else {"A": 12}
        before = memo.get(next((k for k in memo if k[0] == "fair shares"), None))
        got = cycle_fair_shares(kept, capacity, pending, {"A"}, memo)
        want = fair_shares(fresh, capacity, pending_demand(pending, {"A"}))
        assert list(got.items()) == list(want.items()), step
        assert all(list(got[q].items()) == list(want[q].items()) for q in want), step
        assert all(type(v) is float for per in got.values() for v in per.values()), step
        after = memo.get(next((k for k in memo if k[0] == "fair shares"), None))
        if before is not None and after is before:
            kept_hits += 1
        elif before is not None and before[2] is after[2]:
            fills += 1  # a new answer for the same tree: the water-filling of the demand it found
        got.setdefault("q0", {})["A"] = -1.0  # the caller's copy: the kept answer does not change
    assert kept_hits > 50 and fills > 50
