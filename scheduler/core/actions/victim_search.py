"""Find the fewest victims whose eviction lets a pending job start, and the Evictions that say so
(shared by preempt and reclaim).

Victim units are added in least-work-lost order (plugins/victims.py) until the job can be placed with
`target` GPUs (or, failing that, at least its minimum), then every victim that turns out unneeded is
given back (Kueue's fill-back). Everything runs on a Trial and is undone: the state the caller sees is
unchanged, and the returned placement is what the job will start on once the victims have released
their GPUs. No eviction is ever proposed for a job that would not start on the freed GPUs.
"""
from __future__ import annotations

from typing import Callable

from ..plugins.victims import Unit
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo
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


def find_victims(session: Session, job: JobInfo, flavor: str, *, target: int, units: list[Unit],
                 allows: Callable[[Unit], bool], take: Callable[[Unit], None],
                 give_back: Callable[[Unit], None], room: float = float("inf")) -> tuple[Binding, list[Unit]] | None:
    """The placement the job gets on `flavor` GPUs (aiming at `target` GPUs) and the fewest victim units,
    taken in `units` order, that make room for it; None when no prefix of `units` does (or none is needed).
    allows / take / give_back: the rule's veto on a unit, and its bookkeeping as a unit is chosen and
    given back (reclaim's ledger). room: the queue headroom before evictions when victims come from the
    job's own queue (preempt): a placement counts only if it fits room + the victims' GPUs. The session's
    state is left unchanged."""
    state = session.state

    def fits(placed, freed: int) -> bool:  # freed: the victims' GPUs
        return isinstance(placed, Binding) and _gpus(placed) <= room + freed

    root = session.tree.root
    need = job.gpus_min
    needs = _slot_needs(job)
    trial = Trial(state)
    chosen: list[Unit] = []
    chosen_gpus = 0
    taken: dict[object, set] = {}
    best: Binding | None = None
    for unit in units[:MAX_VICTIM_UNITS]:
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
    for unit in reversed(chosen):  # fill-back: drop victims the placement does not need
        if not unit.whole and any(u.whole and u.job.id == unit.job.id for u in kept):
            continue  # the rest of that gang goes anyway; keeping part of it would break the gang
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
    assert fits(final, kept_gpus), "fill-back left a victim set that no longer fits"
    release_binding(state, job, final)
    trial.undo()
    if not kept:  # it fits without evicting anyone: nothing to do here
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
