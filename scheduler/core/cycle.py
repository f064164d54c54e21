"""One scheduling cycle over a frozen snapshot (DESIGN section 5; Volcano's action pipeline).

    run_cycle(snapshot, config, cache=None) -> CycleResult

Phases, each timed in CycleResult.timings (seconds):
  1. open: index the domain tree, free capacity and queue usage; water-fill every queue's fair share;
     open the cycle's Session (session.py: the state, holds and placement search the actions share);
  2. allocate: nominated beneficiaries start on their held GPUs; pending jobs in fair-share order get
     gang + topology + binpack placement; the first job that cannot start gets a backfill reservation
     and a starving one a drain reservation (actions/allocate.py, actions/backfill.py: Reservations);
  3. preempt / reclaim: jobs still waiting may evict lower-priority gangs of their queue, or take back
     GPUs other queues borrowed; the freed GPUs are held for them (actions/evict.py, preempt.py, reclaim.py).
     The jobs within their queue's entitlement that could not start do so before the first job that would
     borrow is tried (allocate's `before_borrowers`), the rest after allocate;
     then running elastic jobs not evicted this cycle grow into what is left (actions/grow.py), and evictions
     still in their grace period whose beneficiary no longer holds the victim's GPUs (it left, started elsewhere, or its
     hold moved) are withdrawn (`withdrawals`); every `reschedule_every` cycles, jobs blocked by fragmentation alone
     may have migratable jobs moved out of their way, or get advice (actions/reschedule.py);
  4. metrics: allocation rate, largest runnable job per tier, fragmentation rate, domain completeness;
  5. spares (only when the snapshot has ready hot spares): pending interruptible jobs that did not start are
     placed on the spares, which nothing else sees (spares.spare_pass; timing "spares").
The snapshot is never mutated; the same input gives the same result, with or without a cache.
`cache` (cache.EngineCache) is the caller's: what this engine reuses from its previous cycle while the
cluster's shape is unchanged; None = nothing reused (a one-off or what-if run).
"""
from __future__ import annotations

import time
from functools import partial
from operator import attrgetter

from .actions.allocate import allocate
from .actions.backfill import Reservations
from .actions.evict import Probe, run_evictions, running_jobs, withdrawals
from .actions.reclaim import anyone_borrowing, reclaim_may_help
from .actions.grow import grow
from .actions.reschedule import due as reschedule_due, hold_moving, reschedule
from .cache import ClusterStatic, EngineCache, PendingChanges
from .domain_tree import label_bindings
from .jobindex import FactTuple
from .metrics import cluster_metrics, metrics_by_group
from .plugins.fairshare import cycle_fair_shares, fair_shares, pending_demand, schedulable_gpus
from .plugins.quota import QueueTree
from .session import Session
from .sharing import has_sharing, run_cycle_sharing
from .snapshot import CycleConfig, CycleResult, Nomination, Snapshot
from .spares import has_spares, spare_pass
from .state import ClusterState


def run_cycle(snapshot: Snapshot, config: CycleConfig | None = None, *, cache: EngineCache | None = None,
              whole_only: bool = False, share_hook=None) -> CycleResult:
    """Decide which pending jobs start and where, and whom to evict for whom.
    cache: the caller's EngineCache (one per engine), or None to reuse nothing. With shared or MIG GPUs or
    sharing jobs in the snapshot, this cycle runs on sharing.whole_view and the shares are placed after it
    (sharing.run_cycle_sharing); whole_only: skip that (sharing's own call). share_hook: sharing's own call too,
    a function of the cycle's Session returning sharing's walk hook (Session.sharing), so that the allocate walk
    takes whole-GPU and sharing jobs in one fair-share order.
    Raises TopologyError on an inconsistent domain tree."""
    try:
        if not whole_only and has_sharing(snapshot, cache):
            result = run_cycle_sharing(snapshot, config, partial(run_cycle, whole_only=True), cache=cache)
            result.terminal = None  # sharing's own reasons are not listed (CycleResult.terminal)
            result.settled_until = None  # shown for the whole-GPU path alone (settled_until)
        else:
            result = _run_cycle(snapshot, config or CycleConfig(), cache, share_hook)
        if not whole_only and (cache.scan(snapshot).spares if cache is not None else has_spares(snapshot)):
            t0 = time.perf_counter()
            spare_pass(snapshot, config or CycleConfig(), result, cache)
            result.timings["spares"] = time.perf_counter() - t0
            result.timings["total"] = result.timings.get("total", 0.0) + result.timings["spares"]
    except BaseException:
        if not whole_only and cache is not None:
            cache.drop_lent()  # the cycle's half-changed capacity: not kept, the next cycle computes it anew
        raise
    if not whole_only and cache is not None:
        cache.settle()  # the capacity the cycle's ClusterState worked on, back to the cache (EngineCache.lend)
    if not whole_only and not snapshot.domains and result.bindings:  # a cluster without domains (domain_tree)
        static = cache.static_for(snapshot) if cache is not None else ClusterStatic(snapshot)
        result.bindings = label_bindings(static.tree, static.node_index, result.bindings)
    return result


def _run_cycle(snapshot: Snapshot, config: CycleConfig, cache: EngineCache | None, share_hook=None) -> CycleResult:
    """run_cycle's phases 1-4 on whole GPUs (module docstring)."""
    result = CycleResult()
    t0 = time.perf_counter()
    # the tree and shape indexes: the cache's while the cluster is unchanged
    static = cache.static_for(snapshot) if cache is not None else ClusterStatic(snapshot)
    state = ClusterState(snapshot, static, cache=cache)
    facts = cache.scan(snapshot) if cache is not None else None  # what scans of every job and node would find
    # the pending jobs in snapshot order: a producer that keeps its jobs apart hands where they begin (FactTuple)
    start = snapshot.jobs.pending_from if facts is not None and type(snapshot.jobs) is FactTuple else None
    pending = list(snapshot.jobs[start:]) if start is not None else [j for j in snapshot.jobs if j.state == "pending"]
    memo = cache.job_memo(static, config, len(pending)) if cache is not None else None
    if start is not None and memo is not None:  # the producer's changes to the pending list, for its users
        PendingChanges.of(memo).advance(pending, snapshot.jobs.pending_changes)
    queues = QueueTree(snapshot, static, facts, memo)
    if config.fair_share and snapshot.queues:
        capacity = facts.schedulable if facts is not None and facts.schedulable is not None \
            else schedulable_gpus(snapshot.nodes)
        result.fair_share = fair_shares(queues, capacity, pending_demand(pending, state.flavors), None) \
            if memo is None else cycle_fair_shares(queues, capacity, pending, state.flavors, memo)
    session = Session(state, queues, config, snapshot, cache=cache)
    if share_hook is not None:
        session.sharing = share_hook(session)
    if facts is None or facts.moving:
        hold_moving(session)  # new places of jobs being moved by rescheduling stay held
    # the pending jobs holding a reservation: counted by the snapshot's index (all of its pending jobs are `pending`)
    reservations = Reservations(session, pending, facts.holding if facts is not None else None)
    t1 = time.perf_counter()
    taken: dict = {}  # (job id, role, index) of the tasks evicted this cycle -> the rule
    early: list = []  # (evictions, decisions, jobs tried) of the phase run before the first borrower

    def before_borrowers(so_far) -> None:
        tried = list(so_far.failed_order)
        early.append((*run_evictions(session, tried, so_far.reasons, taken=taken, facts=facts, memo=memo),
                      len(tried)))

    allocation = allocate(session, pending, reservations, shares=result.fair_share, before_borrowers=before_borrowers,
                          memo=memo)
    result.bindings, result.pending = allocation.bindings, allocation.reasons
    t2 = time.perf_counter()
    evictions, decisions, tried = early[0] if early else ([], [], 0)
    rest = _after(allocation.failed_order, tried, start is not None and snapshot.jobs.unique_ids)
    searched: list = []  # the jobs whose victim searches this second round ran, on the state the cycle ends in
    more, more_decisions = run_evictions(session, rest, result.pending, taken=taken,
                                         limit=config.max_preemptors - len(decisions), facts=facts, memo=memo,
                                         searched=searched)
    result.evictions, result.decisions = evictions + more, decisions + more_decisions
    if reschedule_due(session):
        moved = reschedule(session, allocation.failed_order, result.pending, {e.job_id for e in result.evictions})
        result.evictions += moved.evictions
        result.decisions += moved.decisions
        result.moves, result.advice = moved.moves, moved.advice
    if facts is not None and not facts.short:
        result.growths = []  # no running job misses a task: none grows (grow's first test), no waiting list built
    else:
        nominated = session.nominated
        waiting = [j for j in allocation.failed_order if j.id not in nominated] if nominated \
            else allocation.failed_order
        result.growths = grow(session, waiting, facts, {e.job_id for e in result.evictions})  # the evicted never grow
    result.nominations = [Nomination(job_id=j, tasks=tasks, rule="hold") for j, tasks in session.nominated.items()]
    result.withdrawals = withdrawals(snapshot, session.nominated, facts)
    result.estimated_start = reservations.estimated_start
    pending_reasons = result.pending  # every writer of a reason has run: allocate listed the terminal ones it gave
    result.terminal = [j for j in allocation.terminal if pending_reasons[j].terminal] if allocation.terminal else []
    t3 = time.perf_counter()
    holds = session.holds
    result.metrics = cluster_metrics(state, held=sum(map(holds.gpus_held, holds.held)), cache=cache)
    result.held = holds.by_node()
    result.metrics["by_group"] = metrics_by_group(state, result.metrics, cache=cache)
    result.metrics["pending_jobs"] = len(result.pending)
    live = facts.live if facts is not None else None
    result.metrics["running_jobs"] = (sum(1 for j in snapshot.jobs if j.state != "pending") if live is None else live) \
        + len(result.bindings)
    result.metrics["grown_tasks"] = sum(len(b.tasks) for b in result.growths)
    result.metrics["queue_usage"] = {q: dict(u) for q, u in queues.usage.items()}
    result.settled_until = settled_until(session, facts, reservations, allocation, result, pending,
                                         searched)  # (reads add usage keys)
    t4 = time.perf_counter()
    result.timings = {"open": t1 - t0, "allocate": t2 - t1, "preempt": t3 - t2, "metrics": t4 - t3, "total": t4 - t0}
    return result


def settled_until(session: Session, facts, reservations: Reservations, allocation, result: CycleResult,
                  pending: list | None = None, searched: list | None = None) -> float | None:
    """Until when (seconds of cluster time) a cycle on the state this one leaves would decide nothing new
    (CycleResult.settled_until), or None when that is not shown. Shown, conservatively, when no rule of the
    cycle can act on that state before then:

    - a placement: every job refused here was refused with at least the free GPUs and queue headroom it would
      find then (within a cycle GPUs are only taken, never freed, and usage only grows; a search that fails
      fails on fewer free GPUs too, as allocate's failed shapes already assume within a cycle), and the order of
      the attempts (the queues' decayed usage) changes no refusal; the holders of standing reservations were
      served first here and their reserved GPUs are not free: so every refusal holds again. Not shown when a
      holder started or lost its hold (its held GPUs came free during the cycle), or the cluster has several
      flavors or GPU shares (the rival rule of _unborrowed_first), or a pending job is elastic (_within_first,
      grow);
    - an eviction: no waiting job may reclaim (nobody borrows after this cycle's charges, or reclaim_may_help, the
      eviction phase's screen, passes no queue's least need at that usage, or `_searched_here`: every waiting job
      it passes failed its victim search on that very state here) and no preemptible job runs below the
      priority of a waiting job (every pending job has one priority, no running preemptible job is below it);
    - a reservation: no job has a known end (a time limit, or a stopping job's stop deadline: no EASY shadow), no
      drain or eviction was made here, and no job refused for lack of room starves before the bound
      (Reservations.starves_at) while fewer than max_reservations jobs hold GPUs and fewer than max_drains drains
      are in force (with no eviction releasing GPUs, every holder is a drain: at max_drains, Reservations.closed
      refuses a starving job a new drain); no requeue backoff ends before it (Allocation.retry_at);
    - nothing else: no growth, withdrawal, move, rescheduling, hot spare or eviction in its grace period.

    Worked out only after a cycle of the whole-GPU path that started a job while others still wait and gave no job a
    terminal reason: the cycle after which a caller runs the next one on the same state (the replay's re-run; with
    no job dropped, that state's pending demand plus usage per queue is this cycle's, so its fair shares and
    metrics are this cycle's too); None after any other.
    facts: the snapshot's jobindex.Facts (EngineCache.scan), None: not shown (nothing counted). pending: the
    snapshot's pending jobs (the cycle's list); searched: the jobs whose victim searches the eviction phase's
    second round ran (run_evictions' `searched`); None: the reclaim screen alone decides."""
    config = session.config
    if not result.bindings or not result.pending or result.terminal:
        return None
    if (facts is None or facts.pending_elastic is None or facts.sharing or facts.spares or facts.moving or facts.short
            or facts.evicting or facts.timed or facts.pending_timed or facts.pending_elastic
            or config.reschedule or config.reschedule_advice or len(session.state.flavors) != 1):
        return None
    if (result.evictions or result.growths or result.withdrawals or result.decisions or result.moves
            or reservations.until is not None or reservations.drained
            or len(result.nominations) != (facts.holding or 0)):
        return None  # (a nomination here is a standing hold served again: none new, none started or dropped)
    highest = facts.highest_pending
    if config.preemption and highest is not None and (facts.lowest_pending != highest or (
            facts.lowest_preemptible is not None and facts.lowest_preemptible < highest)):
        return None
    queues = session.queues
    if config.reclaim and anyone_borrowing(queues):
        kept = allocation.kept
        if kept is None:
            return None
        (flavor,) = session.state.flavors
        # the queues some of whose waiting jobs reclaim_may_help passes (it passes a job of a queue iff its minimum GPUs
        # are at most a bound of the queue's: those of its least need, when any)
        open_ = {q for q, need in kept.least_needs().items() if reclaim_may_help(queues, Probe(q, need), flavor)}
        if open_ and (searched is None or pending is None
                      or not _searched_here(session, allocation, result, pending, searched, flavor, open_)):
            return None
    until = allocation.retry_at
    if config.backfill and len(result.nominations) < min(config.max_reservations, config.max_drains):
        until = min(until, reservations.starves_at)
    return until if until > session.now else None


def _searched_here(session: Session, allocation, result: CycleResult, pending: list, searched: list,
                   flavor: str, open_: set) -> bool:
    """Whether the eviction phase of a cycle on the state this one leaves (no event between) would decide nothing,
    though reclaim_may_help passes some waiting job of the queues `open_` there: every job it passes (read on that
    state's usage: this cycle's end) had its victim search run on that same state in this cycle's second round
    (`searched`, after allocate: the same usage, free GPUs and holds; no decision was made, so no state changed
    between the searches) and found nothing; the only victims that cycle's searches would see in addition are this
    cycle's starts, and each of their queues
    - is within its entitlement at every level (plugins.victims.ReclaimLedger refuses every unit of a queue none of
      whose levels below the shared ancestor borrows, and what a search takes only lowers those levels: the starts'
      units are skipped, and a search walks a prefix of the units it walked here, capped by MAX_VICTIM_UNITS), and
    - had a preemptible running job already (reclaim's circles, the depths it searches, come from the victims'
      queues: a new queue could add a circle, a search of its own).
    Victim order is the JobInfos' alone (victim_units), not the clock's. The caller has checked that no job may
    preempt and that no eviction of an earlier cycle is releasing GPUs. The re-run's jobs are this cycle's failed
    ones (its starts gone, nothing dropped), tried in another order: with every search failing, the order, the
    phase (before the first borrower or after allocate) and max_preemptors change nothing."""
    queues = session.queues
    bound = {b.job_id for b in result.bindings}
    started = {j.queue for j in pending if j.id in bound and j.preemptible}
    if started:
        if queues.open_world or not started <= queues.queues.keys():
            return False
        for q in started:
            if queues.entitlement_room(q, flavor)[0] < 0:
                return False
        victims = {j.queue for j in running_jobs(session.snapshot.jobs) if j.preemptible and j.placement}
        if not started <= victims:
            return False
    mine = set(map(_job_id, searched))
    helps: dict = {}
    for job in allocation.failed_order:
        if job.queue not in open_ or job.id in mine:
            continue
        key = (job.queue, job.gpus_min)
        passes = helps.get(key)
        if passes is None:
            passes = helps[key] = reclaim_may_help(queues, job, flavor)
        if passes:
            return False
    return True


_job_id = attrgetter("id")


def _after(failed_order: list, tried: int, unique: bool = False) -> list:
    """The jobs of failed_order whose ids are none of its first `tried` jobs' (the eviction phase's second
    round: those tried before the first borrower had theirs). failed_order only grows during allocate, so
    these are the jobs past the first `tried`, unless a job id is in the list twice (checked, C-level, unless
    `unique`: the snapshot's job ids are unique, FactTuple.unique_ids, and allocate tries each job once)."""
    if not tried:
        return list(failed_order)
    rest = failed_order[tried:]
    if unique:
        return rest
    seen = set(map(_job_id, failed_order[:tried]))
    if seen.isdisjoint(map(_job_id, rest)):
        return rest
    return [j for j in rest if j.id not in seen]
