"""Fair share by hierarchical water-filling, per GPU flavor.

At every level of the queue tree, the parent's amount A (the cluster's schedulable GPUs of the flavor at
the top) is split among its children:
  1. each child first gets min(quota, demand), scaled down proportionally if those exceed A;
  2. the rest is poured by weight into the children still below min(limit, demand), repeatedly, until it
     is used up or every child is capped (water-filling);
then each child's amount is split among its own children the same way. demand = GPUs in use + GPUs
requested by pending jobs, summed over the subtree.

Sources: Volcano's proportion plugin (deserved = min(quota-like share, request), remainder by weight,
capped by capability) and Kueue's fair sharing (weighted share of borrowable capacity); the dominant
share used to order queues follows DRF (Ghodsi et al., "Dominant Resource Fairness", NSDI 2011).
"""
from __future__ import annotations

import threading
from collections import defaultdict

from ..cache import PendingChanges
from .predicates import allowed_flavors
from .quota import INF, QueueTree

EPS = 1e-9


def water_fill(amount: float, children: list[tuple[str, float, float, float, float]]) -> dict[str, float]:
    """Split `amount` among children given as (name, quota, cap, weight, demand); cap = min(limit, demand).
    Returns name -> share. Pure; exposed for tests."""
    first = {}
    for name, quota, cap, _, _ in children:
        first[name] = min(quota, cap)
    total = sum(first.values())
    scale = min(1.0, amount / total) if total > EPS else 0.0
    share = {name: value * scale for name, value in first.items()}  # every child's key, in the children's order
    remaining = amount - sum(share.values())
    active = [(name, cap, weight) for name, _, cap, weight, _ in children if share[name] < cap - EPS and weight > 0]
    while remaining > EPS and active:
        weights = sum(w for _, _, w in active)
        poured = 0.0
        still = []
        for name, cap, weight in active:
            give = min(remaining * weight / weights, cap - share[name])
            share[name] += give
            poured += give
            if share[name] < cap - EPS:
                still.append((name, cap, weight))
        remaining -= poured
        if poured <= EPS:
            break
        active = still
    return share


def fair_shares(queues: QueueTree, capacity: dict[str, int], pending_demand: dict[str, dict[str, int]],
                memo: dict | None = None) -> dict[str, dict[str, float]]:
    """queue -> flavor -> fair share in GPUs. capacity: schedulable GPUs per flavor; pending_demand:
    leaf queue -> flavor -> GPUs requested by its pending jobs (a job that may take several flavors counts
    on each). memo: the engine cache's job memo, or None: the last answer is kept there (key ("fair shares",
    thread)) and given again (a copy) when its inputs are the same: the queues' static key (names, parents,
    weights, quotas), the capacity, and each queue's min(limit, demand) per flavor, all the water-filling reads
    of the demand (a queue's demand above its limit does not move its share)."""
    demand: dict[str, dict[str, float]] = {}  # queue -> flavor -> GPUs (float sums from 0.0, in this order)
    chain = queues.chain
    for q, per_flavor in pending_demand.items():
        levels = chain(q)
        for flavor, gpus in per_flavor.items():
            for chain_q in levels:
                per = demand.get(chain_q)
                if per is None:
                    per = demand[chain_q] = {}
                per[flavor] = per.get(flavor, 0.0) + gpus
    for q, per_flavor in queues.usage.items():  # usage is already charged up the chain
        per = demand.get(q)
        if per is None:
            per = demand[q] = {}
        for flavor, gpus in per_flavor.items():
            per[flavor] = per.get(flavor, 0.0) + gpus
    if memo is not None:
        slot = ("fair shares", threading.get_ident())
        kept = memo.get(slot)
        flavors = tuple(capacity)
        # per queue (in the queues' order) its limit per flavor, INF for none: kept with the answer while the
        # queues' static fields and the flavors are the same
        if kept is not None and kept[2] is queues.static_key and kept[3] == flavors:
            limits = kept[4]
        else:
            limits = []
            for q, info in queues.queues.items():
                quotas = info.quotas
                for flavor in flavors:
                    quota = quotas.get(flavor)
                    limits.append((q, flavor, quota.limit if quota and quota.limit is not None else INF))
        caps = []
        for q, flavor, limit in limits:  # min(limit, demand): all the water-filling reads of the demand
            per = demand.get(q)
            d = per.get(flavor, 0.0) if per is not None else 0.0
            caps.append(d if d < limit else limit)
        key = (queues.static_key, tuple(capacity.items()), caps)
        if kept is not None and kept[0] == key:
            return {q: dict(per) for q, per in kept[1].items()}
    out = _fill(queues, capacity, demand)
    if memo is not None:
        memo[slot] = (key, {q: dict(per) for q, per in out.items()}, queues.static_key, flavors, limits)
    return out


def _fill(queues: QueueTree, capacity: dict[str, int], demand: dict[str, dict[str, float]]) -> dict:
    """fair_shares' water-filling down the queue tree, per flavor: queue -> flavor -> GPUs. demand: queue -> flavor
    -> GPUs in use and asked for, summed over the subtree (a queue or flavor missing reads 0.0)."""
    children, infos = queues.children, queues.queues  # parent (None: the top) -> its queues, in the queues' order
    out: dict[str, dict[str, float]] = defaultdict(dict)

    def split(parent: str | None, flavor: str, amount: float) -> None:
        kids = children(parent)
        if not kids:
            return
        rows = []
        for q in kids:
            info = infos[q]
            quota = info.quotas.get(flavor)
            per = demand.get(q)
            d = per.get(flavor, 0.0) if per is not None else 0.0
            limit = quota.limit if quota and quota.limit is not None else INF
            rows.append((q, quota.quota if quota else 0, min(limit, d), info.weight, d))
        for q, value in water_fill(amount, rows).items():
            out[q][flavor] = value
            split(q, flavor, value)

    for flavor, amount in capacity.items():
        split(None, flavor, float(amount))
    return dict(out)


def dominant_share(queues: QueueTree, shares: dict[str, dict[str, float]], queue: str,
                   offset: dict[str, dict[str, float]] | None = None) -> float:
    """max over flavors of usage / fair share; usage above a zero share counts as 1e6 + usage.
    offset: per queue and flavor, added to the live usage (decayed history minus usage at snapshot)."""
    best = 0.0
    fair = shares.get(queue, {})
    usage = queues.usage.get(queue)
    extra = offset.get(queue) if offset else None
    if (not usage or len(usage) == 1) and (not extra or len(extra) == 1):
        # at most one flavor in each (one call per start): the same sum and comparisons as below, without the
        # dict copy and the loops; two different flavors go below
        (flavor, used), = usage.items() if usage else ((None, 0),)
        if extra:
            (other, more), = extra.items()
            if flavor is None or other == flavor:
                flavor, used = other, used + more
            else:
                flavor = None
        if flavor is not None or not extra:
            if flavor is None or not used > EPS:
                return best
            f = fair.get(flavor, 0.0)
            return max(best, used / f if f > EPS else 1e6 + used)
    used_by_flavor = dict(usage or {})
    for flavor, extra in (offset or {}).get(queue, {}).items():
        used_by_flavor[flavor] = used_by_flavor.get(flavor, 0) + extra
    for flavor, used in used_by_flavor.items():
        if used > EPS:
            f = fair.get(flavor, 0.0)
            best = max(best, used / f if f > EPS else 1e6 + used)
    return best


def decay_usage(recent: dict[str, float], current: dict[str, float], elapsed: float, half_life: float
                ) -> dict[str, float]:
    """Exponentially decayed average usage, per flavor, in GPUs: r' = r * 2^(-dt/h) + c * (1 - 2^(-dt/h)).
    Slurm's fair-share factor decays historical usage with PriorityDecayHalfLife the same way; a queue that
    used the cluster heavily `half_life` seconds ago weighs half as much as one using it now."""
    keep = 0.5 ** (max(elapsed, 0.0) / half_life) if half_life > 0 else 0.0
    if len(current) == 1 and (not recent or (len(recent) == 1 and recent.keys() == current.keys())):
        for f in current:  # one flavor (the set below would hold it alone): the same expression
            return {f: recent.get(f, 0.0) * keep + current[f] * (1 - keep)}
    flavors = set(recent) | set(current)
    return {f: recent.get(f, 0.0) * keep + current.get(f, 0.0) * (1 - keep) for f in flavors}


def usage_offset(queues: QueueTree) -> dict[str, dict[str, float]]:
    """recent_usage - usage at snapshot, per queue and flavor, so ordering by usage + offset orders by the
    decayed history while admissions made during the cycle still count."""
    out: dict[str, dict[str, float]] = {}
    usage = queues.usage
    for name, info in queues.queues.items():
        recent = info.recent_usage
        if recent:
            now = usage.get(name, {})
            if len(recent) == 1 and (not now or (len(now) == 1 and now.keys() == recent.keys())):
                for f in recent:  # one flavor (the set below would hold it alone): the same expression
                    out[name] = {f: recent.get(f, 0.0) - now.get(f, 0)}
                continue
            out[name] = {f: recent.get(f, 0.0) - now.get(f, 0) for f in set(recent) | set(now)}
    return out


def schedulable_gpus(nodes) -> dict[str, int]:
    """flavor -> healthy GPUs of ready nodes (the capacity fair shares split)."""
    out: dict[str, int] = defaultdict(int)
    for n in nodes:
        if n.schedulable:
            out[n.flavor] += n.gpus - len(n.unhealthy)
    return dict(out)


def _add_whole(sums: dict, jobs, flavors) -> bool:
    """Add the jobs' whole-GPU demand to sums (queue -> flavor -> GPUs); False (sums then partly added) at the
    first job asking for a fraction, whose float sums depend on their order."""
    for job in jobs:
        q, gpus, allowed = _one(job, flavors)
        if gpus.__class__ is not int:
            return False
        per = sums.get(q)
        if per is None:
            per = sums[q] = {}
        for f in allowed:
            per[f] = per.get(f, 0) + gpus
    return True


def pending_demand(pending, flavors, memo: dict | None = None) -> dict[str, dict[str, int]]:
    """queue -> flavor -> GPUs requested by its pending jobs; a job that may take several flavors counts
    on each (fair_shares' `pending_demand`). A fraction counts as its GPU-equivalents (gpu_milli / 1000; a
    memory request as one GPU at most), MIG instances not at all (resources of their own).
    memo: the engine cache's job memo (EngineCache.job_memo), or None (sum the list). With a memo the
    sums are kept there (key ("pending demand", thread)) and brought up to date from the jobs that came and went
    since the last call (cache.PendingChanges), for whole GPUs only: integer sums are exact in any order;
    with any fraction the whole list is summed, in its order."""
    if memo is None:
        return _demand(pending, flavors)
    sums = _kept_sums(pending, flavors, memo)
    if sums is None:  # a fraction: floats, whose sums depend on their order
        return _demand(pending, flavors)
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for q, per in sums.items():
        for f, gpus in per.items():
            if gpus:  # a zero sum and a missing one read the same (fair_shares: demand.get(f, 0.0))
                out[q][f] = gpus
    return out


def _kept_sums(pending, flavors, memo: dict) -> dict | None:
    """pending_demand's sums kept in the memo, brought up to date with `pending`: queue -> flavor -> GPUs
    (integers; a sum may be 0), or None when a pending job asks for a fraction (pending_demand then sums the list)."""
    changes = PendingChanges.of(memo).advance(pending)
    key = ("pending demand", threading.get_ident())  # one per thread, like PendingChanges
    kept = memo.get(key)  # [PendingChanges.epoch, queue -> flavor -> GPUs, flavors]
    if kept is not None and kept[0] == changes.epoch and kept[2] == flavors:
        pass  # the same list again
    elif kept is not None and changes.valid and kept[0] == changes.epoch - 1 and kept[2] == flavors:
        sums = kept[1]
        for job in changes.gone:
            q, gpus, allowed = _one(job, flavors)
            per = sums[q]
            for f in allowed:
                per[f] -= gpus
        if not _add_whole(sums, changes.came, flavors):
            del memo[key]
            return None
        kept[0] = changes.epoch
    else:  # start over
        memo.pop(key, None)
        sums = {}
        if not _add_whole(sums, pending, flavors):
            return None
        kept = memo[key] = [changes.epoch, sums, frozenset(flavors)]
    return kept[1]


def cycle_fair_shares(queues: QueueTree, capacity: dict[str, int], pending, flavors, memo: dict
                      ) -> dict[str, dict[str, float]]:
    """fair_shares(queues, capacity, pending_demand(pending, flavors, memo), memo): the same answer. On a cluster of
    one flavor, whether the last answer holds (its inputs' min(limit, demand) per queue, the same key) is checked
    first from the kept pending sums and the queues' usage alone, integers exact in any order, without building
    the demand dicts those two calls build (the water-filling, when it does not, reads the demand found so). memo:
    the engine cache's job memo."""
    if len(capacity) == 1:
        kept = memo.get(("fair shares", threading.get_ident()))
        if kept is not None and kept[2] is queues.static_key and kept[3] == tuple(capacity):
            sums = _kept_sums(pending, flavors, memo)
            if sums is not None:
                (flavor,) = capacity
                below: dict[str, int] = {}  # queue -> GPUs asked by the pending jobs of its subtree
                chain = queues.chain
                for q, per in sums.items():
                    gpus = per.get(flavor)
                    if gpus:
                        for level in chain(q):
                            below[level] = below.get(level, 0) + gpus
                usage, limits = queues.usage, kept[4]
                caps, demand = [], {}
                for q, _, limit in limits:  # fair_shares' caps, in its order
                    used = usage.get(q)
                    d = below.get(q, 0) + (used.get(flavor, 0) if used is not None else 0)
                    demand[q] = d
                    caps.append(d if d < limit else limit)
                key = (queues.static_key, tuple(capacity.items()), caps)
                if kept[0] == key:
                    return {q: dict(per) for q, per in kept[1].items()}
                # fair_shares' demand of the queues it reads, as its float sums give them (integers: exact)
                out = _fill(queues, capacity, {q: {flavor: float(d)} for q, d in demand.items()})
                memo[("fair shares", threading.get_ident())] = (key, {q: dict(per) for q, per in out.items()},
                                                                queues.static_key, kept[3], limits)
                return out
    return fair_shares(queues, capacity, pending_demand(pending, flavors, memo), memo)


def _one(job, flavors) -> tuple:
    """(queue, GPUs counted, the flavors they count on) of one pending job (pending_demand)."""
    gpus = job.gpus_requested
    if any(r.shares for r in job.roles):
        gpus = sum(r.tasks * (r.gpu_milli / 1000 if r.gpu_milli else 0 if r.mig_profile else r.gpus_per_task)
                   for r in job.roles)
    return job.queue, gpus, allowed_flavors(job.roles, flavors)


def queue_demand(pending, usage: dict[str, float]) -> dict[str, float]:
    """queue -> its demand in GPUs, each job counted once: GPUs in use (`usage`, queue -> GPUs) plus the GPUs its
    pending jobs request (GPU-equivalents for a fraction, as pending_demand). pending_demand counts a job that may
    take several flavors on each of them (what each flavor's water-fill must see), so a queue's fair shares summed
    over the flavors can exceed what it asks for in all; this is the cap a per-queue figure in GPUs takes
    (scheduler.sim.fairness: new-user trial 15, F1)."""
    out: dict[str, float] = dict(usage)
    for job in pending:
        q, gpus, _ = _one(job, ())
        out[q] = out.get(q, 0.0) + gpus
    return out


def _demand(pending, flavors) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in pending:
        q, gpus, allowed = _one(job, flavors)
        for f in allowed:
            out[q][f] += gpus
    return out
