"""Find the fewest victims whose eviction lets a pending job start, and the Evictions that say so
(shared by preempt and reclaim).

Victim units are added in least-work-lost order (plugins/victims.py) until the job can be placed with
`target` GPUs (or, failing that, at least its minimum), then every victim that turns out unneeded is
given back (Kueue's fill-back). Everything runs on a Trial and is undone: the state the caller sees is
unchanged, and the returned placement is what the job will start on once the victims have released
their GPUs. No eviction is ever proposed for a job that would not start on the freed GPUs.
"""
from __future__ import annotations

from ..plugins.victims import ReclaimLedger, Unit
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo, TaskPlacement
from ..state import ClusterState
from ..trial import Trial, release_binding

MAX_VICTIM_UNITS = 256  # bounds the search's cost per preemptor


def _gpus(binding: Binding) -> int:
    return sum(len(t.gpus) for t in binding.tasks)


def _slot_needs(job: JobInfo) -> tuple[tuple[int, int], ...] | None:
    """(GPUs per task, minimum tasks) of each whole-GPU role with a minimum, for `_short_of_slots`; None when a
    role takes shares of a GPU or MIG instances (a share fits a GPU that is not free: no slot bound)."""
    if any(r.shares for r in job.roles):
        return None
    return tuple((r.gpus_per_task, r.effective_min) for r in job.roles if r.gpus_per_task and r.effective_min)


def _short_of_slots(session: Session, flavor: str, needs: tuple[tuple[int, int], ...] | None) -> bool:
    """Whether some role's minimum cannot fit the cluster's free `flavor` GPUs taken whole tasks at a time
    (state.pack_slots at the root: an upper bound over every domain below it). Then Session.try_place fails
    whatever the job's topology: its search skips every domain on the same bound (or its packing fails
    there), and a one-task job's shortcut needs a node with a free slot. So a try_place this says is hopeless
    is skipped, with the same outcome and without the search (on the whole Philly replay, 97 % of the victim
    search's placement attempts, each a full search, ended so)."""
    if needs is None:
        return False
    state, root = session.state, session.tree.root
    return any(state.pack_slots(root, flavor, gpus) < tasks for gpus, tasks in needs)


class _Freed:
    """What the root's aggregates would say once some victims' tasks are freed, counted without freeing
    them: the free `flavor` GPUs below the root (domain_free) and, per (GPUs per task) of `needs`, the
    pack_slots bound (sum over nodes of free // GPUs per task), from the state's figures plus, per node, the
    GPUs the tasks would free (Trial.free_tasks: the healthy GPUs of tasks on schedulable nodes)."""

    __slots__ = ("state", "flavor", "need", "needs", "free", "slots", "added")

    def __init__(self, state: ClusterState, root: int, flavor: str, need: int, needs):
        self.state, self.flavor, self.need, self.needs = state, flavor, need, needs
        self.free = state.domain_free(root, flavor)
        self.slots = {} if needs is None else {g: state.pack_slots(root, flavor, g) for g, _ in needs}
        self.added: dict[int, int] = {}  # node index -> GPUs the chosen tasks free there

    def add(self, tasks) -> bool:
        """Count the tasks as freed; whether the cluster could then hold the job (not domain_free < need and
        not _short_of_slots)."""
        state, slots, added = self.state, self.slots, self.added
        node_index, nodes = state.node_index, state.nodes
        for t in tasks:
            k = node_index.get(t.node)
            if k is None:
                continue
            node = nodes[k]
            if not node.schedulable or node.flavor != self.flavor:
                continue
            bad = node.unhealthy
            n = len(t.gpus) if not bad else sum(1 for g in t.gpus if g not in bad)
            if not n:
                continue
            self.free += n
            was = len(state.free[k]) + added.get(k, 0)
            added[k] = added.get(k, 0) + n
            for g in slots:
                slots[g] += (was + n) // g - was // g
        return self.free >= self.need and not _short_of_counted_slots(slots, self.needs)

    def passes_with(self, added: dict[int, int]) -> bool:
        """Whether the cluster could hold the job with `added` (node index -> GPUs, another _Freed's `added`)
        freed on top of the state (this one's counts are left as they are)."""
        free, slots = self.free + sum(added.values()), dict(self.slots)
        if free < self.need:
            return False
        state_free = self.state.free
        for k, n in added.items():
            was = len(state_free[k])
            for g in slots:
                slots[g] += (was + n) // g - was // g
        return not _short_of_counted_slots(slots, self.needs)


def _short_of_counted_slots(slots: dict[int, int], needs: tuple[tuple[int, int], ...] | None) -> bool:
    """_short_of_slots on counted figures: slots = GPUs per task -> the pack_slots bound at the root."""
    return needs is not None and any(slots[gpus] < tasks for gpus, tasks in needs)


def find_victims(session: Session, job: JobInfo, flavor: str, *, target: int, units: list[Unit],
                 ledger: ReclaimLedger | None = None, room: float = float("inf"), walks: dict | None = None,
                 walk=None, releasing: list[tuple[JobInfo, tuple[TaskPlacement, ...]]] = ()
                 ) -> tuple[Binding, list[Unit]] | None:
    """The placement the job gets on `flavor` GPUs (aiming at `target` GPUs) and the fewest victim units,
    taken in `units` order, that make room for it; None when no prefix of `units` does (or none is needed).
    releasing: (victim, tasks) whose GPUs evictions in their grace period already free and no hold wants
    (the caller's choice of those the rule lets this job use): counted as freed before any unit, at no cost
    (neither a victim nor a ledger claim; their queues were uncharged when they were evicted, so `room`
    already counts them). A placement that needs no unit but uses some of those GPUs is returned with no
    victims (a hold on GPUs being released: a second eviction never evicts more while they suffice).
    ledger: the rule's veto on a unit and its bookkeeping as units are chosen (reclaim's
    plugins.victims.ReclaimLedger.claim; a new ledger per search: the fill-back and a failed search leave it as it
    is, since nothing reads it afterwards); None = every unit allowed, no bookkeeping (preempt). room: the queue
    headroom before evictions when victims come from the job's own queue (preempt): a placement counts only if it
    fits room + the victims' GPUs. The session's state is left unchanged.

    Units are chosen in order (those the ledger refuses skipped) and, after each, a placement is tried once
    the cluster could hold the job: the root domain has its minimum GPUs free and `_short_of_slots` does not
    refuse it. Until that first happens nothing is freed in the state: the free GPUs per node that freeing
    the chosen units would give are counted instead (`_Freed`: the same figures the state's root aggregates
    would hold, since a Trial frees exactly a task's healthy GPUs on a schedulable node), and the units are
    freed in the Trial at once when the counts first pass. The ledger sees the same calls in the same order
    (which units are chosen depends on it alone, never on the state), so the choice, every placement
    attempt and the result are those of freeing unit by unit; a search whose counts never pass (on the whole
    Philly replay most of them: the victims' GPUs never empty a node or two for the job) returns None
    without touching the state.

    walks, walk: the caller's memo of walks that never passed and the key of this one, which must stand for
    `units` and the ledger's starting point (the beneficiary's queue chain, the queues' usage): the units
    chosen depend on those alone, not on the job or the state, so the GPUs per node a walk under the same key
    would free are those kept; when they do not let this job pass either (the counts only grow along a walk,
    so its last counts are its highest), None at once. The caller empties the memo when the units or the
    usage change."""
    state = session.state

    def fits(placed, freed: int) -> bool:  # freed: the victims' GPUs
        return isinstance(placed, Binding) and _gpus(placed) <= room + freed

    root = session.tree.root
    need = job.gpus_min
    needs = _slot_needs(job)
    claim = ledger.claim if ledger is not None else None
    counts: _Freed | None = _Freed(state, root, flavor, need, needs)  # None once the Trial holds the victims
    if walks is not None:
        freed = walks.get(walk)
        if freed is not None and not counts.passes_with(freed):
            return None
    trial = Trial(state)
    chosen: list[Unit] = []
    chosen_gpus = 0
    taken: dict[object, list] = {}  # victim job id -> the tasks chosen of it so far, per unit
    best: Binding | None = None
    pre = list(releasing)
    if pre:  # GPUs already being released: freed first, then a placement on them alone is tried
        passed = False
        for _, tasks in pre:
            passed = counts.add(tasks)
        if passed:
            counts = None
            trial.free_many(pre)
            placed = session.try_place(job, flavor, target=min(target, room))
            if isinstance(placed, Binding):
                release_binding(state, job, placed)
                if fits(placed, 0):
                    best = placed
    for unit in units[:MAX_VICTIM_UNITS] if best is None or _gpus(best) < target else ():
        vjob = unit.job
        prior = taken.get(vjob.id)
        if prior is None:
            tasks = unit.tasks
        else:  # the rest of a job some of whose tasks were chosen (surplus units, then its whole unit)
            done = {(t.role, t.index) for ts in prior for t in ts}
            tasks = tuple(t for t in unit.tasks if (t.role, t.index) not in done)
            unit = Unit(vjob, tasks, whole=unit.whole)
        if not tasks:
            continue
        if claim is not None and not claim(vjob, tasks):
            continue
        if prior is None:
            taken[vjob.id] = [tasks]
        else:
            prior.append(tasks)
        chosen.append(unit)
        chosen_gpus += unit.gpus
        if counts is not None:
            if not counts.add(tasks):
                continue
            counts = None
            trial.free_many(pre + [(u.job, u.tasks) for u in chosen])
        else:
            trial.free_tasks(vjob, tasks)
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
        if counts is not None and walks is not None:  # a walk that never passed: its GPUs per node, kept
            walks[walk] = counts.added
        trial.undo()
        return None
    size = _gpus(best)
    kept = list(chosen)
    kept_gpus = chosen_gpus
    for unit in reversed(chosen):  # fill-back: drop victims the placement does not need
        if not unit.whole and any(u.whole and u.job.id == unit.job.id for u in kept):
            continue  # the rest of that gang goes anyway; keeping part of it would break the gang
        trial.unfree_tasks(unit.job, unit.tasks)
        rest = [u for u in kept if u is not unit]
        placed = None if _short_of_slots(session, flavor, needs) else session.try_place(job, flavor, target=size)
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
        if fits(placed, kept_gpus - unit.gpus) and _gpus(placed) >= size:
            kept = rest
            kept_gpus -= unit.gpus
            continue
        trial.free_tasks(unit.job, unit.tasks)
    final = session.try_place(job, flavor, target=size)
    assert fits(final, kept_gpus), "fill-back left a victim set that no longer fits"
    release_binding(state, job, final)
    trial.undo()
    if not kept:  # it fits without evicting anyone: a hold on GPUs being released, or nothing to do here
        mine = {(t.node, g) for _, tasks in pre for t in tasks for g in t.gpus}
        if mine and any((t.node, g) in mine for t in final.tasks for g in t.gpus):
            return final, kept
        return None
    return final, kept


def eviction_records(units: list[Unit], rule: str, job: JobInfo) -> list[Eviction]:
    """One Eviction per victim job, for beneficiary `job` under `rule` ("preempt" or "reclaim"): its chosen
    units merged; all of its tasks = the whole gang (also when the rest would fall below a role's minimum)."""
    by_job: dict = {}
    for u in units:
        victim, tasks = by_job.get(u.job.id, (u.job, ()))
        by_job[u.job.id] = (victim, tasks + u.tasks)
    out = []
    for victim, tasks in by_job.values():
        gone = {(t.role, t.index) for t in tasks}
        left = {r.name: sum(1 for t in victim.placement if t.role == r.name and (t.role, t.index) not in gone)
                for r in victim.roles}
        if any(0 < left[r.name] < r.min_available for r in victim.roles):
            tasks = victim.placement  # never leave a gang below its minimum: evict it whole
        whole = len(tasks) == len(victim.placement)
        keys = () if whole else tuple(sorted((t.role, t.index) for t in tasks))
        what = "gang" if whole else f"{len(keys)} surplus task(s)"
        out.append(Eviction(job_id=victim.id, tasks=keys, gpus=sum(len(t.gpus) for t in tasks), rule=rule,
                            beneficiary=job.id,
                            message=f"{rule}: {what} of {victim.name or victim.id} (queue {victim.queue}, priority "
                                    f"{victim.priority}) evicted for {job.name or job.id} (queue {job.queue})"))
    return out
