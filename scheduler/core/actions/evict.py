"""The eviction phase: preempt, then reclaim, for the jobs that could not start (DESIGN section 5).

    run_evictions(session, failed_order, reasons) -> (evictions, decisions)

Jobs are taken in the order allocate tried them, at most `config.max_preemptors` of them, after a cheap
screen (a lower-priority preemptible job runs in the queue, or someone borrows and the job is entitled
to reclaim). For each, preempt (actions/preempt.py) and then reclaim (actions/reclaim.py) are tried per
flavor; a success evicts its victims (never evicted twice in one cycle), charges the queues as if the
victims were gone and the job placed, holds the job's GPUs for it (a Nomination: it starts on them once
the victims have released them) and records an audit decision with the queues' usage before and after.
GPUs that evictions still in their grace period free beyond their beneficiaries' holds (a 4-GPU gang evicted
for a 1-GPU job; this cycle's evictions, and earlier cycles' that stand) are handed to the searches as already
freed (`_releasing`): a job that fits on them gets a hold on them with no eviction of its own (a decision with
no victims in CycleResult.decisions, and the pending reason "nominated ... holds N GPUs that evicted jobs are
releasing"; the platform writes decision Events only for decisions with victims), instead of a second eviction.
"""
from __future__ import annotations

from dataclasses import replace
from itertools import compress, islice, repeat
from math import inf as INF
from operator import attrgetter, is_, itemgetter

from ..jobindex import FactTuple
from ..plugins.victims import victim_units
from ..session import Session
from ..snapshot import Eviction, JobInfo, PendingReason, Snapshot, Withdrawal
from .preempt import preempt
from .reclaim import anyone_borrowing, reclaim, reclaim_may_help

_priority = attrgetter("priority")
EVICT_CODES = {"insufficient_gpus", "no_domain", "no_packing", "queue_limit"}  # reasons an eviction may cure


def run_evictions(session: Session, failed_order: list[JobInfo], reasons: dict, *, taken: dict | None = None,
                  limit: int | None = None, facts=None,
                  memo: dict | None = None, searched: list | None = None) -> tuple[list[Eviction], list[dict]]:
    """Evictions made for the jobs of `failed_order` (module docstring), and one audit decision per
    beneficiary: {rule, beneficiary, queue, victims: [{job, tasks, gpus}], usage_before, usage_after}.
    reasons: job id -> PendingReason, updated in place for each beneficiary ("nominated"), and for a job whose
    reclaim search a rule of reclaim refused (its reason's message gets "; reclaim: ..." naming the queue and the
    rule: actions.reclaim.refusal_clause). taken: (job id, role,
    index) -> rule ("preempt" or "reclaim") of the tasks already evicted this cycle (by an earlier call),
    updated in place; limit: how many jobs may evict (default config.max_preemptors). facts: the session snapshot's jobindex.Facts
    (EngineCache.scan) or None: with nobody borrowing, when no running preemptible job has a lower priority
    than the highest of `failed_order`, no job may preempt and none is screened (the same empty answer).
    memo: the cycle's job memo (EngineCache.job_memo, which allocate filled: actions.allocate.Admission.facts),
    read for each job's minimum GPUs and, on a one-flavor cluster, its flavors; None: worked out here.
    searched: a list extended with the jobs that passed the screen, whose victim searches ran (in that order; the
    searches after a success ran on the state it changed), or None."""
    config, queues, state = session.config, session.queues, session.state
    if not (config.preemption or config.reclaim):
        return [], []
    limit = config.max_preemptors if limit is None else limit
    if limit <= 0 or not failed_order:
        return [], []
    borrowing = config.reclaim and anyone_borrowing(queues)
    # with the facts, when no running preemptible job is below the highest waiting priority no job may
    # preempt: the per-queue lowest priorities are not needed (each would be >= every waiting job's priority)
    # (failed_order's jobs are pending jobs of the snapshot: none is above the highest of them, kept by the facts)
    low = facts.lowest_preemptible if facts is not None else None
    may_any_preempt = config.preemption and (facts is None or (
        low is not None and (facts.highest_pending is None or low < facts.highest_pending)
        and low < max(map(_priority, failed_order))))
    if facts is not None and not borrowing and not may_any_preempt:
        return [], []  # only preemption could help, and no running job is below any waiting one
    running = running_jobs(session.snapshot.jobs) if may_any_preempt else None
    lowest_priority: dict[str, int] = {}
    for j in running if may_any_preempt else ():
        if j.preemptible:
            lowest_priority[j.queue] = min(lowest_priority.get(j.queue, j.priority), j.priority)
    helps: dict[tuple, bool] = {}  # (queue, flavor, GPUs needed) -> reclaim_may_help; usage is fixed here
    one_flavor = len(state.flavors) == 1
    preemptors = None
    if memo is not None and one_flavor and not (config.preemption and lowest_priority):
        preemptors = _screen(queues, next(iter(state.flavors)), failed_order, reasons, memo, borrowing, helps,
                             limit)
    if preemptors is None:
        preemptors = _screen_each(session, failed_order, reasons, memo, borrowing, helps, limit, lowest_priority,
                                  one_flavor)
    if not preemptors:
        return [], []
    if searched is not None:
        searched.extend(preemptors)
    if running is None:  # the victims' candidates: only once some job passed the screen
        running = running_jobs(session.snapshot.jobs)
    flavor_of = state.static.node_flavor  # node name -> flavor
    units = victim_units(running)
    victims_by_id = {j.id: j for j in running}
    evictions: list[Eviction] = []
    decisions: list[dict] = []
    evicted: dict[tuple, str] = taken if taken is not None else {}
    earlier = _standing(session, facts)  # evictions of earlier cycles still releasing GPUs for a holder
    releasing: list = []  # (victim, its tasks' GPUs no hold wants, rule), of those and this cycle's evictions
    if evicted:
        units = _unevicted(units, evicted)
    if evicted or earlier:
        releasing = _releasing(session, victims_by_id, evicted, earlier)
    walks: dict = {}  # reclaim's victim walks that never passed (victim_search.find_victims), while units and usage hold
    for job in preemptors:
        found = None
        why: list = []  # the clause saying which rule of reclaim refused it (reclaim's `why`), first flavor first
        for flavor in session.flavors(job):
            if config.preemption:
                found = preempt(session, job, flavor, units,
                                [(v, ts) for v, ts, rule in releasing if rule == "preempt"] if releasing else ())
                rule = "preempt"
            if found is None and config.reclaim and reclaim_may_help(queues, job, flavor):
                found = reclaim(session, job, flavor, units, flavor_of, walks,
                                [(v, ts) for v, ts, _ in releasing] if releasing else (), why)
                rule = "reclaim"
            if found is not None:
                break
        if found is None:
            if why:  # its reclaim search ran and a rule refused it: said after allocate's reason
                was = reasons.get(job.id)
                if was is not None:
                    reasons[job.id] = PendingReason(was.code, f"{was.message}; {why[0]}", was.terminal)
            continue
        placement, evs = found
        walks.clear()  # units, GPUs being released and usage change: the walks kept so far no longer hold
        for ev in evs:
            evicted.update(((ev.job_id, t.role, t.index), ev.rule) for t in placement_of(victims_by_id, ev))
        units = _unevicted(units, evicted)
        involved = {job.queue} | {victims_by_id[e.job_id].queue for e in evs}  # (the victims are running jobs)
        before = _usage(queues, involved)
        for ev in evs:
            for t in placement_of(victims_by_id, ev):
                if t.gpus:
                    queues.charge(victims_by_id[ev.job_id].queue, flavor_of[t.node], -len(t.gpus))
        session.nominate(job, placement.tasks, all_gpus=True)  # charged to the holder's queue
        releasing = _releasing(session, victims_by_id, evicted, earlier)  # the hold and the victims change them
        evictions.extend(evs)
        if evs:
            gpus = sum(e.gpus for e in evs)
            reasons[job.id] = PendingReason("nominated", f"{rule}: {len(evs)} victim(s) releasing {gpus} GPUs for "
                                                         f"it (grace period); it starts on them next")
        else:
            reasons[job.id] = PendingReason("nominated", f"{rule}: holds {sum(len(t.gpus) for t in placement.tasks)} "
                                                         f"GPUs that evicted jobs are releasing (grace period); it "
                                                         f"starts on them next")
        decisions.append({"rule": rule, "beneficiary": job.id, "queue": job.queue,
                          "victims": [{"job": e.job_id, "tasks": list(e.tasks), "gpus": e.gpus} for e in evs],
                          "usage_before": before, "usage_after": _usage(queues, involved)})
    return evictions, decisions


def running_jobs(jobs) -> list[JobInfo]:
    """The running jobs of a snapshot's jobs, in their order (of those not pending alone when the producer lists
    them first: jobindex.FactTuple.pending_from)."""
    if type(jobs) is FactTuple and jobs.pending_from is not None:
        jobs = jobs[:jobs.pending_from]
    return [j for j in jobs if j.state == "running"]


def _unevicted(units: list, evicted: dict) -> list:
    """The units none of whose tasks is evicted (`evicted`: (job id, role, index) -> rule), in order; a unit of a
    job with no task evicted is kept without a look at its tasks."""
    hit = {key[0] for key in evicted}
    return [u for u in units if u.job.id not in hit
            or not any((u.job.id, t.role, t.index) in evicted for t in u.tasks)]


def _screen_each(session: Session, failed_order: list, reasons: dict, memo, borrowing: bool, helps: dict, limit: int,
                 lowest_priority: dict, one_flavor: bool) -> list:
    """run_evictions' cheap screen before any victim search, one job at a time: the first `limit` jobs of
    failed_order refused for a reason an eviction may cure (EVICT_CODES) that may preempt (a lower-priority
    preemptible job runs in their queue: `lowest_priority`) or reclaim (someone borrows, and reclaim_may_help for
    one of their flavors; `helps` memoises it per (queue, flavor, GPUs needed))."""
    config, queues = session.config, session.queues
    preemptors = []
    for job in failed_order:  # cheap screening before any victim search
        reason = reasons.get(job.id)
        if reason is None or reason.code not in EVICT_CODES:
            continue
        may_preempt = config.preemption and lowest_priority.get(job.queue, job.priority) < job.priority
        may_reclaim = False
        if borrowing:
            entry = memo.get(id(job)) if memo is not None else None  # Admission.facts: (job, gpus_min, .., flavors)
            if entry is not None and entry[0] is job:
                need, flavors = entry[1], entry[6] if one_flavor else None
            else:
                need, flavors = job.gpus_min, None
            for f in flavors if flavors is not None else session.flavors(job):
                key = (job.queue, f, need)
                helps_f = helps.get(key)
                if helps_f is None:
                    helps_f = helps[key] = reclaim_may_help(queues, job, f)
                if helps_f:
                    may_reclaim = True
                    break
        if may_preempt or may_reclaim:
            preemptors.append(job)
            if len(preemptors) >= limit:
                break
    return preemptors


class Probe:
    """What reclaim_may_help reads of a job (its queue and minimum GPUs), for _screen's table and
    cycle.settled_until."""

    __slots__ = ("queue", "gpus_min")

    def __init__(self, queue: str, gpus_min: int):
        self.queue, self.gpus_min = queue, gpus_min


class _Answers(dict):
    """(reason code, queue, GPUs needed, flavors) -> whether a job of those passes the screen (a missing key
    is worked out on first use: C-level lookups for every job after the first of its kind)."""

    __slots__ = ("queues", "borrowing", "helps")

    def __missing__(self, key) -> bool:
        code, queue, need, flavors = key
        ok = False
        if code in EVICT_CODES and self.borrowing:
            probe = None
            for f in flavors:
                helps_f = self.helps.get((queue, f, need))
                if helps_f is None:
                    if probe is None:
                        probe = Probe(queue, need)
                    helps_f = self.helps[(queue, f, need)] = reclaim_may_help(self.queues, probe, f)
                if helps_f:
                    ok = True
                    break
        self[key] = ok
        return ok


class _NoReason:
    code = None


_NO_REASON = _NoReason()
_entry_job, _entry_need, _entry_flavors = itemgetter(0), itemgetter(1), itemgetter(6)
_code, _job_id, _job_queue = attrgetter("code"), attrgetter("id"), attrgetter("queue")


def _closed(queues, flavor: str) -> set:
    """The known queues none of whose jobs reclaim_may_help says may reclaim `flavor` GPUs, whatever their minimum
    (>= 0): a job passes when its minimum is at most the queue's claim room and, when the queue's own limit binds
    its headroom, at most that headroom too, so a queue where that bound is below 0 passes none. Worked out from the
    usage as it stands, without adding a key to it (QueueTree.usage is a defaultdict: reclaim_may_help's reads add
    the levels and flavor it reads; a queue whose chain is not all there is left open, for those reads to happen)."""
    usage, capacity, out = queues.usage, queues.capacity[flavor], set()
    for q in queues.queues:
        here = usage.get(q)
        if here is None or flavor not in here:
            continue
        bound = queues.entitlement(q, flavor) - here[flavor]  # claim_room((q,), flavor)
        best, who, known = INF, None, True  # headroom(q, flavor)
        for level in queues.chain(q):
            info = queues.queues.get(level)
            quota = info.quotas.get(flavor) if info else None
            if quota is not None and quota.limit is not None and quota.limit < capacity:
                per = usage.get(level)
                if per is None or flavor not in per:
                    known = False
                    break
                room = quota.limit - per[flavor]
                if room < best:
                    best, who = room, level
        if not known:
            continue
        if who == q:
            bound = min(bound, best)
        if bound < 0:
            out.add(q)
    return out


def _screen(queues, flavor: str, failed_order: list, reasons: dict, memo: dict, borrowing: bool, helps: dict,
            limit: int):
    """_screen_each's answer with no job able to preempt (no lower-priority preemptible job runs in any queue) on a
    one-flavor cluster (`flavor`), without a Python step per job: only reclaim can help, so the jobs of queues that
    may not reclaim (_closed) are left out, and of the others a job passes by its reason's code, queue, minimum GPUs
    and flavors alone (the job memo's entries: Admission.facts), each kind worked out once (_Answers); None when one
    of those jobs has no entry in the memo (then one job at a time)."""
    if not borrowing:
        return []
    closed = _closed(queues, flavor)
    if closed:  # the jobs of the other known queues (reclaim_may_help passes no job of an unknown queue)
        open_ = queues.queues.keys() - closed
        if not open_:
            return []
        failed_order = list(compress(failed_order, map(open_.__contains__, map(_job_queue, failed_order))))
        if not failed_order:
            return []
    entries = list(map(memo.get, map(id, failed_order)))
    if None in entries or not all(map(is_, map(_entry_job, entries), failed_order)):
        return None
    answers = _Answers()
    answers.queues, answers.borrowing, answers.helps = queues, borrowing, helps
    keys = zip(map(_code, map(reasons.get, map(_job_id, failed_order), repeat(_NO_REASON))),
               map(_job_queue, failed_order), map(_entry_need, entries), map(_entry_flavors, entries))
    return list(islice(compress(failed_order, map(answers.__getitem__, keys)), limit))


def _standing(session: Session, facts) -> list:
    """(job, rule) of the snapshot's jobs being evicted by an earlier cycle ("preempting" with `evicted_for`)
    whose beneficiary holds some of their GPUs in this cycle (the eviction stands: `withdrawals` keeps it), in
    snapshot order; rule: "preempt" when the beneficiary is of the victim's queue, else "reclaim". Jobs on GPU
    shares or MIG instances are left out (a shared GPU is not released with one of its jobs)."""
    nominated = session.nominated
    if not nominated or (facts is not None and facts.evicting == 0):
        return []
    out, queue_of = [], None
    for job in session.snapshot.jobs:
        if job.state != "preempting" or job.evicted_for is None:
            continue
        held = nominated.get(job.evicted_for)
        if not held or any(t.gpu_milli or t.mig for t in job.placement):
            continue
        mine = {(t.node, g) for t in job.placement for g in t.gpus}
        if not any((t.node, g) in mine for t in held for g in t.gpus):
            continue
        if queue_of is None:
            queue_of = {j.id: j.queue for j in session.snapshot.jobs if j.state == "pending"}
        out.append((job, "preempt" if queue_of.get(job.evicted_for) == job.queue else "reclaim"))
    return out


def _releasing(session: Session, jobs: dict, evicted: dict, earlier: list = ()) -> list:
    """(victim, tasks, rule) for each job being evicted by an earlier cycle (`earlier`: (job, rule), _standing)
    and each with tasks evicted this cycle (`evicted`: (job id, role, index) -> rule), in that order: its
    (evicted) tasks, each with only the GPUs that no hold wants (Holds.wanted: a beneficiary's hold, a drain or
    backfill reservation) and that are not free already; tasks left with no GPU are left out."""
    state = session.state
    wanted = {(k, g) for taken in session.holds.wanted.values() for k, gpus in taken for g in gpus}
    node_index, free = state.node_index, state.free
    by_job: dict = {}
    for (job_id, role, index), rule in evicted.items():
        by_job.setdefault(job_id, ({}, rule))[0][(role, index)] = True
    out = []
    for victim, rule, keys in [(j, r, None) for j, r in earlier] + [(jobs.get(i), r, keys)
                                                                     for i, (keys, r) in by_job.items()]:
        if victim is None:
            continue
        tasks = []
        for t in victim.placement:
            if (keys is not None and (t.role, t.index) not in keys) or not t.gpus:
                continue
            k = node_index.get(t.node)
            if k is None:
                continue
            gpus = tuple(g for g in t.gpus if (k, g) not in wanted and g not in free[k])
            if gpus:
                tasks.append(t if len(gpus) == len(t.gpus) else replace(t, gpus=gpus))
        if tasks:
            out.append((victim, tuple(tasks), rule))
    return out


def placement_of(jobs: dict, ev: Eviction):
    """The evicted tasks' placements; `jobs`: job id -> JobInfo."""
    victim = jobs[ev.job_id]
    return victim.placement if not ev.tasks else [t for t in victim.placement if (t.role, t.index) in ev.tasks]


def _usage(queues, names: set[str]) -> dict:
    return {q: dict(queues.usage.get(q, {})) for q in sorted(names)}


def withdrawals(snapshot: Snapshot, nominated: dict, facts=None) -> list[Withdrawal]:
    """Evictions to take back: every job (or released tasks) still in its grace period ("preempting", with
    `evicted_for`) whose GPUs are none of those held for its beneficiary after this cycle (`nominated`: job
    id -> TaskPlacements): the beneficiary was cancelled or ended, started elsewhere, or no longer needs
    them. Killing a job for nobody is pure loss; the victim keeps running without a restart. Only the
    beneficiary's own hold keeps an eviction: another job's hold on its GPUs (one that took GPUs the eviction
    frees beyond the beneficiary's hold, run_evictions; a drain reservation; a move) does not, since nothing
    in the snapshot tells those apart, and a drain reservation must never kill a job. Such a hold is then on
    GPUs a running job keeps: its holder tries again from its next cycle.
    facts: the snapshot's jobindex.Facts or None; with no job being evicted (Facts.evicting) none is looked at."""
    if facts is not None and facts.evicting == 0:
        return []
    jobs = None  # job id -> JobInfo, built at the first withdrawal (most cycles have none)
    out = []
    for job in snapshot.jobs:
        if job.state != "preempting" or job.evicted_for is None:
            continue
        held = nominated.get(job.evicted_for, ())
        mine = {(t.node, g) for t in job.placement for g in t.gpus}
        if any((t.node, g) in mine for t in held for g in t.gpus):
            continue
        if jobs is None:
            jobs = {j.id: j for j in snapshot.jobs}
        owner = jobs.get(job.evicted_for)
        if owner is None or owner.state != "pending":
            why = "left (cancelled, finished or started)"
        elif job.evicted_for in nominated:
            why = "holds other GPUs now"
        else:
            why = "no longer holds GPUs (it started elsewhere or its hold was given up)"
        name = owner.name or owner.id if owner is not None else job.evicted_for
        out.append(Withdrawal(job_id=job.id, tasks=tuple(sorted((t.role, t.index) for t in job.placement)),
                              beneficiary=job.evicted_for,
                              message=f"eviction of {job.name or job.id} withdrawn: its beneficiary {name} {why}; "
                                      f"it keeps running"))
    return out
