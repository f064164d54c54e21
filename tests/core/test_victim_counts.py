"""The victim search counts the GPUs its chosen victims would free before freeing any (victim_search._Freed),
and the reclaim ledger keeps its levels and bounds per search (plugins.victims.ReclaimLedger): whole cycles
decide exactly as the search and ledger did before (copied below as the reference: every chosen unit freed
in the Trial at once, the slot bound read from the state after each, the ledger rebuilding its levels and
per-flavor sums per call), on random worlds with borrowing queues (two flavors, nested queues with
guarantees, elastic gangs whose surplus tasks go first, unhealthy GPUs, nodes that are not ready, a queue
whose jobs also preempt) and on the contended Philly replay slice (every cycle's digest)."""
from __future__ import annotations

import random
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

from scheduler.core import CycleConfig, run_cycle
from scheduler.core.actions import preempt as preempt_mod
from scheduler.core.actions import reclaim as reclaim_mod
from scheduler.core.actions import victim_search
from scheduler.core.plugins.victims import Unit
from scheduler.core.snapshot import Binding
from scheduler.core.testing import World, role
from scheduler.core.trial import Trial, release_binding
from tests.sim.test_replay_digest import run


class OldLedger:
    """plugins.victims.ReclaimLedger before this change (levels and per-flavor sums rebuilt per call)."""

    def __init__(self, queues, shared: set, flavor_of):
        self.queues, self.shared, self.flavor_of = queues, shared, flavor_of
        self.delta = defaultdict(int)

    def _levels(self, queue):
        return [q for q in self.queues.chain(queue) if q not in self.shared]

    def _per_flavor(self, tasks):
        out = defaultdict(int)
        for t in tasks:
            out[self.flavor_of[t.node]] += len(t.gpus)
        return out

    def allows(self, job, tasks):
        levels = self._levels(job.queue)
        if not levels:
            return False
        for flavor, gpus in self._per_flavor(tasks).items():
            borrowing = False
            for q in levels:
                info = self.queues.queues.get(q)
                quota = info.quotas.get(flavor) if info else None
                guarantee = quota.guarantee if quota else 0
                now = self.queues.usage[q][flavor] - self.delta[(q, flavor)]
                if now - gpus < guarantee:
                    return False
                if now > self.queues.entitlement(q, flavor):
                    borrowing = True
            if not borrowing:
                return False
        return True  # the shared levels are not checked (trial 21, F16)

    def take(self, job, tasks):
        for flavor, gpus in self._per_flavor(tasks).items():
            for q in self.queues.chain(job.queue):
                self.delta[(q, flavor)] += gpus

    def give_back(self, job, tasks):
        for flavor, gpus in self._per_flavor(tasks).items():
            for q in self.queues.chain(job.queue):
                self.delta[(q, flavor)] -= gpus


def old_find_victims(session, job, flavor, *, target, units, allows, take, give_back, room=float("inf"),
                     releasing=()):
    """victim_search.find_victims before this change: each chosen unit freed in the Trial at once (the GPUs
    being released, `releasing`, freed first)."""
    state = session.state
    _gpus, _short_of_slots = victim_search._gpus, victim_search._short_of_slots

    def fits(placed, freed):
        return isinstance(placed, Binding) and _gpus(placed) <= room + freed

    root = session.tree.root
    need = job.gpus_min
    needs = victim_search._slot_needs(job)
    trial = Trial(state)
    chosen, chosen_gpus, taken, best = [], 0, {}, None
    for victim, tasks in releasing:
        trial.free_tasks(victim, tasks)
    if releasing and not (state.domain_free(root, flavor) < need or _short_of_slots(session, flavor, needs)):
        placed = session.try_place(job, flavor, target=min(target, room))
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
            if fits(placed, 0):
                best = placed
    for unit in units[:victim_search.MAX_VICTIM_UNITS] if best is None or _gpus(best) < target else ():
        done = taken.setdefault(unit.job.id, set())
        tasks = tuple(t for t in unit.tasks if (t.role, t.index) not in done)
        if not tasks:
            continue
        unit = Unit(unit.job, tasks, whole=unit.whole)
        if not allows(unit):
            continue
        trial.free_tasks(unit.job, unit.tasks)
        take(unit)
        done.update((t.role, t.index) for t in unit.tasks)
        chosen.append(unit)
        chosen_gpus += unit.gpus
        if state.domain_free(root, flavor) < need or _short_of_slots(session, flavor, needs):
            continue
        placed = session.try_place(job, flavor, target=min(target, room + chosen_gpus))
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
            if fits(placed, chosen_gpus):
                best = placed
                if _gpus(placed) >= target:
                    break
    if best is None:
        trial.undo()
        for unit in chosen:
            give_back(unit)
        return None
    size = _gpus(best)
    kept = list(chosen)
    kept_gpus = chosen_gpus
    for unit in reversed(chosen):
        if not unit.whole and any(u.whole and u.job.id == unit.job.id for u in kept):
            continue
        trial.unfree_tasks(unit.job, unit.tasks)
        rest = [u for u in kept if u is not unit]
        placed = None if _short_of_slots(session, flavor, needs) else session.try_place(job, flavor, target=size)
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
        if fits(placed, kept_gpus - unit.gpus) and _gpus(placed) >= size:
            give_back(unit)
            kept = rest
            kept_gpus -= unit.gpus
            continue
        trial.free_tasks(unit.job, unit.tasks)
    final = session.try_place(job, flavor, target=size)
    assert fits(final, kept_gpus)
    release_binding(state, job, final)
    trial.undo()
    if not kept:
        mine = {(t.node, g) for _, tasks in releasing for t in tasks for g in t.gpus}
        return (final, kept) if any((t.node, g) in mine for t in final.tasks for g in t.gpus) else None
    return final, kept


def _reference(session, job, flavor, *, target, units, ledger=None, room=float("inf"), walks=None, walk=None,
               releasing=()):
    if ledger is None:
        return old_find_victims(session, job, flavor, target=target, units=units, allows=lambda u: True,
                                take=lambda u: None, give_back=lambda u: None, room=room, releasing=releasing)
    old = OldLedger(ledger.queues, ledger.shared, ledger.flavor_of)
    return old_find_victims(session, job, flavor, target=target, units=units,
                            allows=lambda u: old.allows(u.job, u.tasks), take=lambda u: old.take(u.job, u.tasks),
                            give_back=lambda u: old.give_back(u.job, u.tasks), room=room, releasing=releasing)


@contextmanager
def reference_search():
    with mock.patch.object(reclaim_mod, "find_victims", _reference), \
            mock.patch.object(preempt_mod, "find_victims", _reference):
        yield


@contextmanager
def counted_searches():
    """{"searches": find_victims calls, "none": those that returned None, "tried": those that tried a placement}."""
    real, real_place = victim_search.find_victims, victim_search.Session.try_place
    real_passes = victim_search._Freed.passes_with
    seen = {"searches": 0, "none": 0, "tried": 0, "walks kept": 0}
    tries = [0]

    def passes_with(self, added):
        answer = real_passes(self, added)
        seen["walks kept"] += not answer
        return answer

    def place(self, *args, **kwargs):
        tries[0] += 1
        return real_place(self, *args, **kwargs)

    def search(*args, **kwargs):
        before = tries[0]
        found = real(*args, **kwargs)
        seen["searches"] += 1
        seen["none"] += found is None
        seen["tried"] += tries[0] > before
        return found

    with mock.patch.object(reclaim_mod, "find_victims", search), mock.patch.object(preempt_mod, "find_victims", search), \
            mock.patch.object(victim_search.Session, "try_place", place), \
            mock.patch.object(victim_search._Freed, "passes_with", passes_with):
        yield seen


def _decisions(result) -> tuple:
    """The cycle's decisions and pending reasons, each reason without the clause saying which rule of reclaim refused
    it (actions.reclaim.refusal_clause: read from the ledger's refusals, which the reference's ledger does not
    keep)."""
    pending = {k: replace(r, message=r.message.split("; reclaim: ")[0]) for k, r in result.pending.items()}
    return (result.bindings, pending, result.evictions, result.nominations, result.metrics,
            repr(result.decisions))


def _world(rng: random.Random) -> World:
    """Racks of 8-GPU H100 nodes (and sometimes a rack of 4-GPU A100 nodes); queues root > {org > {owner,
    lender}, other, owner2}: lender and other run jobs far above their quotas (some elastic, some not preemptible,
    some on unhealthy GPUs or nodes that are not ready), owner and owner2 wait with gangs (reclaim), and lender's own
    high-priority jobs may preempt its low-priority ones."""
    world = World()
    world.racks(count=2, nodes_per_rack=rng.choice([2, 3, 4]), gpus=8)
    flavors = ["H100"]
    if rng.random() < 0.4:
        world.racks(count=1, nodes_per_rack=2, gpus=4, flavor="A100", prefix="arack", spine="aspine")
        flavors.append("A100")
    nodes = list(world.node_infos)
    for n in rng.sample(nodes, k=rng.randint(0, 2)):  # unhealthy GPUs, a node not ready
        if rng.random() < 0.5:
            world.node(name=n.name, gpus=n.gpus, flavor=n.flavor, domain=n.domain,
                       unhealthy=rng.sample(range(n.gpus), k=rng.randint(1, 2)))
        else:
            world.node(name=n.name, gpus=n.gpus, flavor=n.flavor, domain=n.domain, state="cordoned")
    world.queue(name="root", quota={"H100": 64, "A100": 8})
    world.queue(name="org", parent="root", quota={"H100": rng.choice([48, 56]), "A100": 4},
                guarantee={"H100": rng.choice([0, 8])})
    world.queue(name="owner", parent="org", quota={"H100": rng.choice([32, 40]), "A100": 4},
                guarantee={"H100": rng.choice([0, 16])})
    world.queue(name="lender", parent="org", quota={"H100": rng.choice([0, 4, 8])},
                guarantee={"H100": rng.choice([0, 2, 4])})
    world.queue(name="other", parent="root", quota={"H100": rng.choice([0, 8]), "A100": rng.choice([0, 4])},
                guarantee={"H100": rng.choice([0, 4])})
    world.queue(name="owner2", parent="root", quota={"H100": rng.choice([8, 16])})
    for i in range(rng.randint(4, 16)):
        free = [n for n in world.node_infos if n.gpus - len(n.used) >= 1]
        if not free:
            break
        gpt = rng.choice([1, 1, 2, 4])
        tasks = rng.choice([1, 1, 1, 2, 3])
        picked = [rng.choice(free) for _ in range(tasks)]
        room: dict[str, int] = {}
        ok = []
        for n in picked:
            left = n.gpus - len(n.used) - room.get(n.name, 0)
            if left >= gpt:
                ok.append(n.name)
                room[n.name] = room.get(n.name, 0) + gpt
        if not ok:
            continue
        elastic = rng.random() < 0.3 and len(ok) > 1
        world.running(name=f"run{i}", queue=rng.choice(["lender", "lender", "other"]), nodes=ok, gpus_per_task=gpt,
                      started=float(rng.randint(0, 5)), priority=rng.choice([0, 0, 1]),
                      preemptible=rng.random() < 0.85, min_available=1 if elastic else None)
    for j in range(rng.randint(1, 5)):
        tasks = rng.randint(1, 3)
        world.job(name=f"want{j}", queue=rng.choice(["owner", "owner", "owner2", "lender"]), priority=rng.choice([0, 2]),
                  roles=[role(tasks=tasks, gpus_per_task=rng.choice([1, 2, 4, 8]), min_available=rng.randint(1, tasks),
                              flavors=rng.choice([(), (), ("A100",)]) if len(flavors) > 1 else ())],
                  submit=float(j), topology_mode=rng.choice(["none", "hard"]), highest_tier=1)
    return world


def test_random_worlds_decide_as_the_reference():
    totals = {"searches": 0, "none": 0, "tried": 0, "walks kept": 0}
    evicted = 0
    for seed in range(600):
        snapshot = _world(random.Random(seed)).snapshot()
        config = CycleConfig(max_preemptors=random.Random(seed).choice([1, 8]))
        with counted_searches() as seen:
            fast = _decisions(run_cycle(snapshot, config))
        with reference_search():
            slow = _decisions(run_cycle(snapshot, config))
        assert fast == slow, seed
        for k in totals:
            totals[k] += seen[k]
        evicted += bool(fast[2])
    # both kinds of search are exercised: hopeless ones (None without a placement attempt) and ones that try
    print(totals, evicted)
    assert totals["searches"] - totals["tried"] > 20 and totals["tried"] > 20 and evicted > 20, (totals, evicted)


def test_the_contended_replay_decides_as_the_reference():
    with counted_searches() as seen:
        fast = run("philly")
    with reference_search():
        slow = run("philly")
    assert seen["searches"] > 10, seen
    assert fast[0] == slow[0] and fast[2] == slow[2]


def test_the_counts_are_the_states_figures_after_freeing():
    """Each time the search counts a unit's tasks as freed, its figures equal those of the state with every
    task counted so far freed in a Trial (domain_free and pack_slots at the root)."""
    real_add = victim_search._Freed.add
    checked = [0]
    seen: dict[int, tuple] = {}  # id of a _Freed -> (it, the tasks counted so far)

    class NoRoles:
        roles = ()

    def add(self, tasks):
        answer = real_add(self, tasks)
        counted = seen[id(self)] = (self, seen.get(id(self), (None, ()))[1] + tuple(tasks))
        state = self.state
        root = state.tree.root
        trial = Trial(state)
        trial.free_tasks(NoRoles, counted[1])
        try:
            assert self.free == state.domain_free(root, self.flavor)
            assert self.slots == {g: state.pack_slots(root, self.flavor, g) for g in self.slots}
            assert answer == (state.domain_free(root, self.flavor) >= self.need
                              and not any(state.pack_slots(root, self.flavor, g) < n for g, n in self.needs or ()))
        finally:
            trial.undo()
        checked[0] += 1
        return answer

    with mock.patch.object(victim_search._Freed, "add", add):
        for seed in range(150):
            run_cycle(_world(random.Random(seed)).snapshot())
    assert checked[0] > 300, checked
