"""The allocate action: walk pending jobs in fair-share order and place each gang, or say why not.

    allocate(session, pending, reservations, shares=) -> Allocation

Order: jobs holding a nomination (the beneficiaries of earlier evictions, or starving jobs with a drain
reservation) first; then, across queues, a queue whose next job fits inside its entitlement for the
flavor it asks for (it would not borrow: QueueTree.within_entitlement) before any whose next job would
borrow, and among those the lowest share of that flavor (usage, decayed when usage_half_life is set, over
its water-filled fair share; the flavor the job asks for, not the maximum over flavors, so a queue's heavy
use of one GPU model does not push its job for another model back), re-evaluated after every admission
(a queue's own, and a within-entitlement key again when it comes up: a charge to a queue sharing an ancestor
can make its next job borrow);
inside a queue higher priority, then earlier submission. A job started before the borrowers borrows nothing
while a job of another queue may still wait within its own entitlement for the flavor (docs/quotas.md,
"Order"): an elastic job's tasks past its entitlement are added to its binding after every other job was
tried (Admission._within_first, _extend), and a job of several flavors tries first those it does not borrow
on (Admission._unborrowed_first).
A job that cannot start does not block the jobs behind it; its failed attempt is rolled back first. The
first job that cannot start for lack of room gets a backfill reservation (actions/backfill.py,
`Reservations`). Once a shape (flavor, roles, topology) fails for lack of room, later jobs of the same
shape fail without a search: the cluster only gets fuller here.

Speed (issue 16, the same decisions): with the engine cache's job memo, the queues' sorted pending lists
are kept across cycles and brought up to date from the jobs that came and went (_PendingOrder); a job
refused from the cycle's table of refusals skips the call chain; and a queue's run of next jobs whose
refusals and keys are all known is refused in one step (_Bulk), in the order trying them one by one gives.
A job of one task with no backfill reservation in force takes Admission.lane (place's checks in their order and
the one-task shortcut, without the call chain); a queue's share, headroom and key are kept while no charge
reached its chain (Admission.charge / unchanged), not only while no charge at all was made. A queue whose whole
list was refused by its limits in an earlier cycle, at the same headroom and entitlement room, takes that
outcome in one step at its first turn (_QueueOutcome, kept across cycles and patched as its jobs come and go).
"""
from __future__ import annotations

import heapq
import itertools
import threading
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field, replace
from operator import attrgetter

from ..cache import PendingChanges
from ..domain_tree import common_domain
from ..jobindex import tally
from ..plugins.fairshare import EPS, dominant_share, usage_offset
from ..plugins.feasibility import mixed_never_fits
from ..plugins.predicates import flavor_plans, role_flavors
from ..plugins.quota import INF, borrow_refusal, job_order_key, never_within_quota, queue_order_key
from ..session import Session
from ..snapshot import Binding, JobInfo, PendingReason, TaskPlacement, utc_iso
from .backfill import BACKFILL, ROOM_CODES, Reservations

_UNSET = object()
_code, _id, _terminal = attrgetter("code"), attrgetter("id"), attrgetter("terminal")
_LIMIT_CODES = frozenset(("queue_limit", "never_fits_queue_limit"))  # refusals by the queue's limits alone


@dataclass(slots=True)
class Allocation:
    """What the allocate action decided: the bindings in the order they were made, a PendingReason per
    job that did not start (job id -> reason), and the jobs that could not start in the order they were
    tried (the eviction phase's candidates)."""

    bindings: list[Binding] = field(default_factory=list)
    reasons: dict = field(default_factory=dict)
    failed_order: list[JobInfo] = field(default_factory=list)
    # the ids of the jobs given a terminal reason here, at least every one whose reason in `reasons` is terminal
    # (a later writer may have replaced it: CycleResult.terminal keeps those still terminal)
    terminal: list = field(default_factory=list)
    retry_at: float = INF  # the earliest requeue backoff still in force (JobInfo.not_before, seconds), INF: none
    # the pending jobs' lists kept across cycles (_PendingOrder) as this cycle brought them up to date, None: not
    # kept this cycle (no job memo, fair share off, or a job listed twice)
    kept: object = None


def backoff_reason(attempts: int, not_before: float) -> str:
    """The pending reason of a gang waiting out its requeue backoff: `attempts` is the number of the attempt to
    come (Job.attempts), so the attempt that ended is `attempts - 1`, numbered from 0 as everywhere else."""
    if attempts < 1:
        return f"waiting for its first attempt; starts at {utc_iso(not_before)} at the earliest"
    return f"requeued after attempt {attempts - 1}; attempt {attempts} retries at {utc_iso(not_before)}"


def allocate(session: Session, pending: list[JobInfo], reservations: Reservations, *,
             shares: dict | None = None, before_borrowers=None, memo: dict | None = None) -> Allocation:
    """Start what fits of `pending` (the snapshot's pending jobs) on the session's state, charging their
    queues. shares: queue -> flavor -> fair share in GPUs (plugins.fairshare.fair_shares), or None to
    order queues by their quota share. before_borrowers(allocation): called once, when every job within
    its queue's entitlement has been tried and the first job that would borrow comes next (the eviction
    phase runs there for the jobs that failed so far, so a borrower never takes the GPUs a within-quota
    job could reclaim into: no start-then-preempt). memo: the engine cache's job memo
    (EngineCache.job_memo: what is derived from each JobInfo alone, kept across cycles), or None."""
    out = Allocation()
    admission = Admission(session, reservations, memo)
    order = _QueueOrder(session, shares, admission)
    fair = session.config.fair_share
    kept = _PendingOrder.of(memo) if memo is not None and fair else None
    if kept is not None:  # the queues' sorted lists kept across cycles: only the jobs that came or went move
        by_queue, special = kept.update(pending, session.queues, admission)
        if by_queue is None:
            kept = None
    else:
        by_queue, special = None, sorted(pending, key=job_order_key)
    rest, holders, mixed = [], [], set()
    held = session.queues.held  # pending job id -> hold charged at snapshot time
    for job in special:
        if job.not_before is not None and job.not_before > session.now:
            if job.not_before < out.retry_at:
                out.retry_at = job.not_before
            session.queues.drop_hold(job.id)
            # job.attempts is the attempt to come; the one that ended is the one before, numbered from 0 as the
            # API's attempts list and the job page number them (new-user trial 13, F9: "after attempt 1" when
            # attempt 0 had failed)
            out.reasons[job.id] = PendingReason("backoff", backoff_reason(job.attempts, job.not_before))
        elif job.reserved and _reservation_valid(session, job):
            holders.append(job)
        else:
            if held:
                session.queues.drop_hold(job.id)  # charged at snapshot time (QueueTree); the hold is not kept
            rest.append(job)
    for job in holders:  # every hold first, so no holder's attempt elsewhere takes another's GPUs
        session.holds.hold(job.id, job.reserved)
    for job in holders:
        _serve_nomination(session, admission, order, job, out)
    if by_queue is None:
        by_queue = defaultdict(list)
        for job in rest:
            by_queue[job.queue].append(job)
        for q, jobs in by_queue.items():
            if fair:  # job_key is job_order_key: `rest` is in that order already
                jobs.reverse()  # pop() from the end = next job (keys end with the job id: no ties)
            else:
                jobs.sort(key=order.job_key, reverse=True)
    else:
        for job in rest:  # the few jobs kept out of the lists (backoff, reservations) that are tried now
            mixed.add(job.queue)
            jobs = by_queue.get(job.queue)
            if jobs is None:
                by_queue[job.queue] = [job]
            else:  # descending order: the next job at the end
                jobs.insert(len(jobs) - bisect_left(jobs[::-1], job_order_key(job), key=job_order_key), job)
    heap = [(order.queue_key(q, jobs[-1]), q) for q, jobs in by_queue.items()]
    heapq.heapify(heap)
    nominated, entitled = session.nominated, admission._headroom

    def waits(job: JobInfo, flavor: str, tried_only: bool = False) -> bool:
        """Whether a job of another queue than `job`'s waits within its own entitlement for `flavor`: tried and
        refused (not for good, holding nothing), or (unless tried_only) not tried yet."""
        mine = job.queue
        for other in out.failed_order:
            if other.queue != mine and other.id not in nominated and flavor in admission.flavors(other) \
                    and entitled(other.queue, flavor, True)[0] >= other.gpus_min:
                reason = out.reasons.get(other.id)
                if reason is None or not reason.terminal:
                    return True
        if not tried_only:
            for q, jobs in by_queue.items():
                if q != mine:
                    for other in jobs:
                        if flavor in admission.flavors(other) and entitled(q, flavor, True)[0] >= other.gpus_min:
                            return True
        return False

    admission.rival = waits
    deferred = admission.deferred  # (Admission._within_first)
    attempt, place, waiting = reservations.attempt, admission.place, reservations.waiting
    queue_key, share = order.queue_key, order.share
    failed, reasons, terminal = out.failed_order, out.reasons, out.terminal
    heappop, heappush = heapq.heappop, heapq.heappush
    # The common case taken without the call chain (same answers): a job refused from Admission's table of
    # refusals (the same shape at the same QueueTree.version), and the queue key from _QueueOrder's table;
    # only on a one-flavor cluster with no GPU shares, where both tables are keyed by the shape id alone
    quick = (memo is not None and fair and session.sharing is None and len(session.state.flavors) == 1)
    queues, memo_get, refused, keys = session.queues, admission.memo.get, admission._refused, order._keys
    holds, now = session.holds, session.now
    bulk = _Bulk(session, reservations, admission, order, terminal) if quick and kept is not None else None
    lasting = _KeptRefusals.of(memo, queues, next(iter(session.state.flavors))) if quick else None
    lane, bindings, unchanged = admission.lane, out.bindings, admission.unchanged
    holding = holds.holding
    if bulk is not None:
        flavor = next(iter(session.state.flavors))
        headroom = admission._headroom

        def queue_state(q: str) -> tuple:
            """What a queue_limit refusal of the queue's jobs reads of the usage (_PendingOrder.keep)."""
            return headroom(q, flavor), headroom(q, flavor, True)
    names, tiers = session.tree.names, session.tree.tiers
    while heap:
        key, q = heappop(heap)
        jobs = by_queue[q]
        if key[0] is False and jobs:  # a charge to a queue sharing an ancestor may have made its next job borrow
            fresh = queue_key(q, jobs[-1])
            if fresh != key:
                heappush(heap, (fresh, q))
                continue
        if before_borrowers is not None and key[0] is True:  # (borrows?, share, queue): the borrowers begin
            before_borrowers(out)
            before_borrowers = None
            if jobs and queue_key(q, jobs[-1]) != key:  # the evictions moved usage
                heappush(heap, (queue_key(q, jobs[-1]), q))
                continue
        index = start = None
        if bulk is not None and q not in mixed:
            if len(jobs) == len(kept.lists[q][0]):  # the queue's whole list: its outcome may be the last cycle's
                if not holding(BACKFILL) or reservations.until is None:
                    start = (queue_state(q), len(failed), len(reasons), len(bindings))
                    done = kept.outcomes.get(q)
                    if done is not None and done.state == start[0] and done.static_key is queues.static_key:
                        # every next job's key is the head's (keep): the walk would try them all in one run
                        # unless that key is not the least, or the borrowers' turn begins with it
                        head = queue_key(q, jobs[-1])
                        if not ((heap and heap[0] < (head, q)) or (before_borrowers is not None and head[0] is True)):
                            given = kept.given(q, done)
                            if given is not None:
                                failed.extend(done.run)  # what trying them one by one gives (_QueueOutcome)
                                reasons.update(given)
                                if done.terminal:
                                    terminal.extend(i for i, r in zip(done.ids, done.reasons) if r.terminal)
                                jobs.clear()
                                continue
            index = kept.index(q)
        while True:
            # (with no refusal in the table, the run's next job's answer is unknown: bulk.run would say so)
            if index is not None and refused and bulk.run(jobs, index, key, failed, reasons):
                if not jobs:
                    break
                key = queue_key(q, jobs[-1])
                if (heap and heap[0] < (key, q)) or (before_borrowers is not None and key[0] is True):
                    heappush(heap, (key, q))
                    break
                continue
            job = jobs.pop()
            outcome = shape = None
            if quick:
                entry = memo_get(id(job))
                if entry is not None and entry[0] is job and not job.avoid_nodes:
                    until = reservations.until  # Reservations.attempt's backfill_open
                    if until is None or not holds.holding(BACKFILL):
                        opened = None
                    else:
                        opened = (now + job.time_limit if job.time_limit is not None else INF) <= until
                    if opened is not True:  # (a backfill attempt releases the reserved GPUs: the long way)
                        shape = (entry[5], opened)
                        cached = refused.get(shape)
                        if cached is not None and cached[0] == queues.version:
                            outcome = cached[1]
                        else:  # refused by its queue's limit in an earlier cycle at the same usage of its chain
                            outcome = lasting.get(shape, job.queue) if lasting.table else None
                            if outcome is not None:  # what _place writes for that refusal
                                refused[shape] = (queues.version, outcome)
                                admission.writes += 1
            if outcome is None:
                before = share(q)
                # no backfill window in force (shape[1] None): a one-task job's short lane, else the long way
                taken = lane(job, entry) if shape is not None and shape[1] is None else None
                if taken is not None:
                    name, picked, d, role = taken
                    bindings.append(Binding(job.id, (TaskPlacement(role, 0, name, picked),), names[d], tiers[d],
                                            "allocate", before, share(q)))
                else:
                    outcome = attempt(job, place)
                    if isinstance(outcome, Binding):
                        bindings.append(Binding(outcome.job_id, outcome.tasks, outcome.domain, outcome.tier,
                                                outcome.rule, before, share(q)) if type(outcome) is Binding
                                        else replace(outcome, share_before=before, share_after=share(q)))
                        outcome = None
                    elif shape is not None:
                        lasting.put(shape, job.queue, outcome, refused.get(shape))
            if outcome is not None:
                failed.append(job)
                if outcome.code in ROOM_CODES:
                    outcome = waiting(job, outcome)
                reasons[job.id] = outcome
                if outcome.terminal:
                    terminal.append(job.id)
            if not jobs:
                break
            head = jobs[-1]
            key = None
            if quick:
                entry = memo_get(id(head))
                if entry is not None and entry[0] is head:
                    cached = keys.get(entry[5])
                    if cached is not None and (cached[0] == queues.version or unchanged(q, cached[0])):
                        key = cached[1]
            if key is None:
                key = queue_key(q, head)
            # pushing (key, q) back would pop it again at once when it is still the least entry: go on with
            # the queue's next job without the round trip (the same order); the borrowers' turn goes through it
            if (heap and heap[0] < (key, q)) or (before_borrowers is not None and key[0] is True):
                heappush(heap, (key, q))
                break
        if start is not None and not jobs:
            kept.keep(q, start, failed, reasons, len(bindings), queues.static_key)
    out.kept = kept
    if deferred:  # the tasks past the entitlement kept back (Admission._within_first), after every other job
        _extend(session, admission, order, out.bindings, lambda j, f: waits(j, f, True))
    admission.rival = None
    return out


class _KeptRefusals:
    """Refusals by a queue's limit kept across cycles (the engine cache's job memo, key ("kept refusals",
    thread)), on a one-flavor cluster without GPU shares (allocate's quick path). A refusal that _place decided
    without a search with code "queue_limit" or "never_fits_queue_limit" is a function of the job's shape id
    (its queue, roles, preemptible, ...: its need), the backfill window (`shape` = (shape id, backfill_open)),
    the queues' limits and entitlements (QueueTree.static_key, the same cluster: the memo's) and the usage of
    the flavor at each level of its queue's chain; it is given again while all of these are the same. Other
    refusals (static feasibility, a shape that failed a search this cycle) are not kept."""

    __slots__ = ("static_key", "flavor", "table", "queues")
    CODES = ("queue_limit", "never_fits_queue_limit")

    def __init__(self, static_key, flavor: str):
        self.static_key, self.flavor = static_key, flavor
        self.table: dict[tuple, tuple] = {}  # (shape id, backfill_open) -> (chain usage, PendingReason)

    @staticmethod
    def of(memo: dict, queues, flavor: str) -> "_KeptRefusals":
        key = ("kept refusals", threading.get_ident())
        kept = memo.get(key)
        if kept is None or kept.flavor != flavor or (kept.static_key is not queues.static_key
                                                     and kept.static_key != queues.static_key):
            kept = memo[key] = _KeptRefusals(queues.static_key, flavor)
        kept.queues = queues
        return kept

    def _usage(self, queue: str) -> tuple:
        usage, flavor = self.queues.usage, self.flavor
        out = []
        for level in self.queues.chain(queue):
            per = usage.get(level)
            out.append(per.get(flavor, 0) if per is not None else 0)
        return tuple(out)

    def get(self, shape: tuple, queue: str):
        kept = self.table.get(shape)
        if kept is None or kept[0] != self._usage(queue):
            return None
        return kept[1]

    def put(self, shape: tuple, queue: str, outcome: PendingReason, written) -> None:
        """Keep `outcome` when _place wrote it to Admission's table at this version (decided without a search)."""
        if outcome.code in self.CODES and written is not None and written[1] is outcome \
                and written[0] == self.queues.version:
            self.table[shape] = (self._usage(queue), outcome)


class _PendingOrder:
    """The pending jobs of the last cycle, per queue in descending job_order_key (the next job last),
    kept in the engine cache's job memo (key ("pending order", thread)) and brought up to date from the jobs that
    came and went (cache.PendingChanges): the replay passes the same frozen JobInfo objects cycle after
    cycle, so most cycles move a few jobs instead of sorting and grouping every pending job. Jobs in
    requeue backoff or holding a reservation are kept apart (`special`, classified by allocate every
    cycle). Beside each queue's list, each job's refusal key and id (`index`). Holds its jobs, so an id
    is never reused while it is kept."""

    __slots__ = ("epoch", "lists", "special", "positions", "codes", "shapes", "needs", "outcomes", "ordinary", "kinds")

    def __init__(self):
        self.epoch = -1  # PendingChanges.epoch of the list this is up to date with
        # queue -> (its ordinary jobs, descending job_order_key; their refusal keys; their ids)
        self.lists: dict[str, tuple[list, list, list]] = {}
        self.special: dict[int, JobInfo] = {}  # id(job) -> job in backoff or with a reservation
        self.positions: dict[str, tuple] = {}  # queue -> (its distinct refusal keys, its refusal keys reversed)
        self.codes: dict[tuple, int] = {}  # (shape id, avoid_nodes) -> its refusal key, a small number
        self.shapes: list[tuple] = []  # refusal key -> (shape id, avoid_nodes)
        self.needs: list[int] = []  # refusal key -> the minimum GPUs of its jobs
        # queue -> its whole list's outcome when every job of it was refused by the queue's limits (`keep`)
        self.outcomes: dict[str, _QueueOutcome] = {}
        self.ordinary: dict = {}  # job id -> how many of the ordinary jobs (those in `lists`) have it
        self.kinds: dict[str, dict[int, int]] = {}  # queue -> refusal key -> how many of its ordinary jobs have it

    @staticmethod
    def of(memo: dict) -> "_PendingOrder":
        key = ("pending order", threading.get_ident())  # one per thread, like cache.PendingChanges
        kept = memo.get(key)
        if kept is None:
            kept = memo[key] = _PendingOrder()
        return kept

    def _shape(self, job: JobInfo, admission: Admission) -> int:
        """The job's refusal key: a number for (shape id, avoid_nodes), what Admission's table of refusals
        reads of a job when no backfill reservation is in force (with one, its time limit too: _Bulk
        stands aside then)."""
        facts = admission.facts(job)
        shape = (facts[5], job.avoid_nodes)
        code = self.codes.get(shape)
        if code is None:
            code = self.codes[shape] = len(self.shapes)
            self.shapes.append(shape)
            self.needs.append(facts[1])
        return code

    def update(self, pending: list[JobInfo], queues, admission: Admission) -> tuple:
        """(queue -> a fresh list of its ordinary jobs, next last; the special jobs in job_order_key order)
        for `pending`, or (None, every job in job_order_key order) when a job is in the list twice; the holds
        charged at snapshot time for ordinary jobs are dropped here (allocate does so for every job it tries)."""
        changes = PendingChanges.of(admission.memo).advance(pending)
        if len(changes.ids) != len(pending):  # the same object twice: never from a snapshot, but keep the old way
            self.__init__()
            return None, sorted(pending, key=job_order_key)
        lists, special, positions, outcomes = self.lists, self.special, self.positions, self.outcomes
        came, gone = changes.came, changes.gone
        if self.epoch == changes.epoch:
            pass  # the same list again
        elif not changes.valid or self.epoch != changes.epoch - 1 or len(gone) + len(came) > len(pending) // 4 + 8:
            lists.clear()  # many changes: sort them all
            self.kinds.clear()
            special.clear()
            positions.clear()
            self.outcomes.clear()
            ordinary = self.ordinary = {}
            for job in sorted(pending, key=job_order_key):
                if job.not_before is not None or job.reserved:
                    special[id(job)] = job
                else:
                    line = lists.get(job.queue)
                    if line is None:
                        line = lists[job.queue] = ([], [], [])
                    line[0].append(job)
                    ordinary[job.id] = ordinary.get(job.id, 0) + 1
            for q, (jobs, shapes, ids) in lists.items():
                jobs.reverse()
                shapes.extend(self._shape(j, admission) for j in jobs)
                kinds = self.kinds[q] = {}
                for c in shapes:
                    kinds[c] = kinds.get(c, 0) + 1
                ids.extend(j.id for j in jobs)
        else:
            ordinary = self.ordinary
            for job in gone:
                if special.pop(id(job), None) is None:
                    left = ordinary[job.id] - 1
                    if left:
                        ordinary[job.id] = left
                    else:
                        del ordinary[job.id]
                    jobs, shapes, ids = lists[job.queue]
                    at = len(jobs) - 1 - bisect_left(jobs[::-1], job_order_key(job), key=job_order_key)
                    assert jobs[at] is job
                    done = outcomes.get(job.queue)
                    if done is not None and not done.drop(len(jobs) - 1 - at, job):  # (run: the list reversed)
                        del outcomes[job.queue]
                    tally(self.kinds[job.queue], shapes[at], -1)
                    del jobs[at], shapes[at], ids[at]
                    positions.pop(job.queue, None)
                    if not jobs:
                        del lists[job.queue], self.kinds[job.queue]
            for job in came:
                if job.not_before is not None or job.reserved:
                    special[id(job)] = job
                    continue
                positions.pop(job.queue, None)
                ordinary[job.id] = ordinary.get(job.id, 0) + 1
                line = lists.get(job.queue)
                if line is None:
                    code = self._shape(job, admission)
                    lists[job.queue] = ([job], [code], [job.id])
                    self.kinds[job.queue] = {code: 1}
                    outcomes.pop(job.queue, None)
                else:
                    jobs, shapes, ids = line
                    at = len(jobs) - bisect_left(jobs[::-1], job_order_key(job), key=job_order_key)
                    code = self._shape(job, admission)
                    jobs.insert(at, job)
                    shapes.insert(at, code)
                    tally(self.kinds[job.queue], code, 1)
                    ids.insert(at, job.id)
                    done = outcomes.get(job.queue)
                    if done is not None and not done.add(len(jobs) - 1 - at, job, code, self.needs[code]):
                        del outcomes[job.queue]
        self.epoch = changes.epoch
        held = queues.held
        if held:
            ordinary = self.ordinary  # the ids of the jobs not in `special`, counted as they came and went
            for job_id in [j for j in held if j in ordinary]:
                queues.drop_hold(job_id)
        return ({q: line[0][:] for q, line in lists.items()},
                sorted(special.values(), key=job_order_key) if special else [])

    def least_needs(self) -> dict:
        """queue -> the least minimum GPUs (JobInfo.gpus_min) of a job of its pending list as `update` last brought
        it up to date (those kept apart included: in backoff or holding a reservation)."""
        needs, out = self.needs, {}
        for q, kinds in self.kinds.items():
            out[q] = min(needs[c] for c in kinds)
        for job in self.special.values():
            need = job.gpus_min
            if need < out.get(job.queue, need + 1):
                out[job.queue] = need
        return out

    def keep(self, queue: str, start: tuple, failed: list, reasons: dict, bound: int, static_key) -> None:
        """Keep the outcome of the queue's turn that just ended (_QueueOutcome) when trying its whole list (as
        `update` returned it, in one run from the queue's first turn: `start` = (its state, len(failed),
        len(reasons), len(bindings)) then) bound nothing and no job of it has avoid_nodes (allocate checks that no
        backfill window was in force, the reasons' codes are checked when the outcome is first used)."""
        state, at, known, bindings = start
        run = failed[at:]
        if bound != bindings or len(run) != len(self.lists[queue][0]) or len(reasons) - known != len(run):
            return
        shapes, needs = self.shapes, self.needs
        _, ids, distinct, backwards, _ = self.index(queue)
        if any(shapes[c][1] for c in distinct):  # a job with avoid_nodes
            return
        # every job's queue key the same at this state: the entitlement room covers all of their needs or none
        room = state[1][0]
        within = room >= max(needs[c] for c in distinct)
        if not within and room >= min(needs[c] for c in distinct):
            return
        # the run's reasons in its order (each job of it wrote one new key: its id, as the count says)
        given = list(itertools.islice(reasons.values(), known, None))
        answers = {c: given[backwards.index(c)] for c in distinct}
        self.outcomes[queue] = _QueueOutcome(state, static_key, run, ids[::-1], given, answers, within)

    def given(self, queue: str, outcome: "_QueueOutcome"):
        """The reasons of a kept outcome for dict.update ((job id, reason) pairs in the run's order: a dict once the
        outcome is used a second time unchanged), or None (and the outcome dropped) when one of them is not a
        refusal by the queue's limits."""
        given = outcome.given
        if given is None:
            if not outcome.checked:
                if not set(map(_code, outcome.reasons)) <= _LIMIT_CODES:
                    del self.outcomes[queue]
                    return None
                outcome.checked = True
            if not outcome.used:  # a queue patched every cycle: the pairs alone (a dict made and merged costs more)
                outcome.used = True
                return zip(outcome.ids, outcome.reasons)
            given = outcome.given = dict(zip(outcome.ids, outcome.reasons))
        return given

    def index(self, queue: str) -> tuple:
        """(refusal key per job, job id per job, the queue's distinct refusal keys, the refusal keys reversed
        (next job first), refusal key -> (shape id, avoid_nodes)) of the queue's list as `update` returned it."""
        _, shapes, ids = self.lists[queue]
        at = self.positions.get(queue)
        if at is None:  # C-level: a dict of the distinct keys (in first-seen order) and a reversed copy
            at = self.positions[queue] = (dict.fromkeys(shapes), shapes[::-1])
        return shapes, ids, at[0], at[1], self.shapes


class _QueueOutcome:
    """What trying a queue's whole list gave in one run when every job of it was refused (_PendingOrder.keep),
    kept across cycles in _PendingOrder.outcomes and brought up to date as jobs of the queue come and go.

    Why it holds: a refusal by the queue's limits ("queue_limit", "never_fits_queue_limit") is _place_flavor's,
    decided before any search from the job's shape (its queue, need, preemptible: the static limit) and from the
    queue's headroom and entitlement room (room and binding level; that level's usage is its limit or
    entitlement less the room): `state`. Under the same state and the same limits (`static_key`) a job of the
    same refusal key gets the same refusal (`answers`), and the queue key of each next job is (whether its need
    fits the entitlement room: `within`, the same for all of them, the queue's share, the queue): constant along
    the run. So allocate, finding the queue at the same state with no backfill window in force, its next key the
    least and not the borrowers' turn, takes `run` as its failed_order run and `reasons` as their reasons, in
    one step: what trying them one by one gives."""

    __slots__ = ("state", "static_key", "run", "ids", "reasons", "answers", "within", "given", "checked", "used",
                 "terminal")

    def __init__(self, state, static_key, run: list, ids: list, reasons: list, answers: dict, within: bool):
        self.state, self.static_key, self.run, self.ids, self.reasons = state, static_key, run, ids, reasons
        self.answers, self.within = answers, within  # refusal key -> its refusal at `state`; the jobs' key[0]
        self.terminal = any(map(_terminal, reasons))  # whether a reason of the run may be terminal (Allocation.terminal)
        self.given: dict | None = None  # job id -> reason, made when used a second time unchanged
        self.checked = False  # whether every reason's code was found a refusal by the limits
        self.used = False  # whether it was taken since it was made or last changed

    def drop(self, i: int, job: JobInfo) -> bool:
        """The job at position i of the run left the queue (False: it is not there)."""
        if self.run[i] is not job:
            return False
        del self.run[i], self.ids[i], self.reasons[i]
        self.given, self.used = None, False
        return True

    def add(self, i: int, job: JobInfo, code: int, need: int) -> bool:
        """A job of refusal key `code` and minimum GPUs `need` joined the queue at position i of the run: False
        when its answer is not known (a refusal key not in the run) or its queue key would differ."""
        reason = self.answers.get(code)
        if reason is None or (self.state[1][0] >= need) is not self.within:
            return False
        self.run.insert(i, job)
        self.ids.insert(i, job.id)
        self.reasons.insert(i, reason)
        self.terminal = self.terminal or reason.terminal
        self.given, self.used = None, False
        return True


class _Bulk:
    """Refuses, in one step, the run of a queue's next jobs whose answers are all in the cycle's tables:
    each job's refusal (Admission's table: its shape at this QueueTree.version, under the backfill window
    its time limit gets, with no reservation or drain that its refusal could make) and its queue key equal
    to the key the queue was taken with. Trying them one by one would give each that refusal, charge
    nothing, and keep the queue the least in the order (its key unchanged) until the run ends: the same
    failed_order and reasons, in the same order."""

    __slots__ = ("session", "reservations", "admission", "refused", "keys", "token", "answers", "terminal", "seen")

    def __init__(self, session: Session, reservations: Reservations, admission: Admission, order: _QueueOrder,
                 terminal: list):
        self.session, self.reservations = session, reservations
        self.refused, self.keys, self.admission = admission._refused, order._keys, admission
        self.token = None  # (version, table writes, reservation window, whether waiting() changes nothing, queue key)
        self.answers: dict = {}  # refusal key -> its refusal or None, under `token`
        self.terminal = terminal  # Allocation.terminal: the ids of a run refused with a terminal reason join it
        self.seen = False  # whether an answer this cycle was a terminal reason

    def _answer(self, shape: tuple, key: tuple, quiet: bool):
        sid, avoid = shape
        if avoid:
            return None
        session = self.session
        if self.reservations.until is not None and session.holds.holding(BACKFILL):
            return None  # a job's answer depends on its time limit (Reservations.attempt): one by one
        version = session.queues.version
        cached = self.refused.get((sid, None))
        if cached is None or cached[0] != version:
            return None
        outcome = cached[1]
        if outcome.code in ROOM_CODES and not quiet:
            return None
        head = self.keys.get(sid)
        if head is None or head[0] != version or head[1] != key:
            return None
        return outcome

    def run(self, jobs: list, index: tuple, key: tuple, failed: list, reasons: dict) -> bool:
        """Refuse the run at the end of `jobs` (the queue's list, next job last; `index` its
        _PendingOrder.index) when its next job's answer is known; False when it is not (try it)."""
        shapes, ids, distinct, backwards, decode = index
        n = len(jobs)
        sid, avoid = decode[shapes[n - 1]]
        cached = self.refused.get((sid, None))
        if avoid or cached is None or cached[0] != self.session.queues.version:
            return False  # what _answer finds for the next job whatever the token (the table has no refusal for it)
        reservations, config = self.reservations, self.session.config
        quiet = not config.backfill or (reservations._tried and (  # Reservations.waiting changes nothing
            reservations.until is not None or reservations.closed()))
        token = (self.session.queues.version, self.admission.writes, reservations.until,
                 self.session.holds.holding(BACKFILL), quiet, key)
        answers = self.answers
        if token != self.token:
            self.token = token
            answers.clear()
        head = shapes[n - 1]
        outcome = answers.get(head, _UNSET)
        if outcome is _UNSET:
            outcome = answers[head] = self._answer(decode[head], key, quiet)
            if outcome is not None and outcome.terminal:
                self.seen = True
        if outcome is None:
            return False
        # the nearest job to the end whose answer is not known: in the reversed keys (the list's jobs already
        # taken this cycle first, len(backwards) - n of them) the first of each unknown key from there on
        skip = len(backwards) - n
        first = len(backwards)
        for shape in distinct:
            found = answers.get(shape, _UNSET)
            if found is _UNSET:
                found = answers[shape] = self._answer(decode[shape], key, quiet)
                if found is not None and found.terminal:
                    self.seen = True
            if found is None:
                try:
                    i = backwards.index(shape, skip, first)
                except ValueError:
                    continue
                first = i
        stop = len(backwards) - 1 - first
        lo = stop + 1
        run = jobs[lo:]
        run.reverse()
        failed.extend(run)
        get = answers.__getitem__
        reasons.update(zip(ids[n - 1:lo - 1 if lo else None:-1], map(get, shapes[n - 1:lo - 1 if lo else None:-1])))
        if self.seen:  # a terminal answer was given this cycle: the run's jobs that got one
            self.terminal.extend(i for i, c in zip(ids[n - 1:lo - 1 if lo else None:-1],
                                                   shapes[n - 1:lo - 1 if lo else None:-1]) if answers[c].terminal)
        del jobs[lo:]
        return True


class _QueueOrder:
    """The order of queues and of jobs inside a queue, for one cycle (module docstring)."""

    def __init__(self, session: Session, shares: dict | None, admission: Admission | None = None):
        self.session = session
        self.admission = admission or Admission(session, None)  # its facts and flavors (memoised)
        self._keys: dict = {}  # head's shape id (and flavors) -> (QueueTree.version, queue_key)
        self.queues, self.config = session.queues, session.config
        self.shares = shares or {}
        self.offset = usage_offset(self.queues) if self.config.usage_half_life else None
        self._shares_at: dict[str, tuple[int, float]] = {}  # queue -> (QueueTree.version, share)

    def job_key(self, job: JobInfo) -> tuple:
        return queue_order_key(job, self.config.fair_share)

    def share(self, q: str) -> float:
        """The queue's dominant share (of its fair share, or of its quota without shares), recomputed only
        after usage changed (QueueTree.version): most attempts in a busy cycle charge nothing. Recorded on
        bindings (share_before / share_after)."""
        version = self.queues.version
        cached = self._shares_at.get(q)
        if cached is not None and (cached[0] == version or self.admission.unchanged(q, cached[0])):
            return cached[1]
        value = dominant_share(self.queues, self.shares, q, self.offset) if self.shares else self.queues.share(q)
        self._shares_at[q] = (version, value)
        return value

    def flavor_share(self, q: str, flavor: str) -> float:
        """The queue's share of one flavor: (usage + decayed-history offset) / fair share, or usage /
        entitlement without fair shares; usage above a zero share counts as 1e6 + usage."""
        if not self.shares:
            return self.queues.flavor_share(q, flavor)
        used = self.queues.usage.get(q, {}).get(flavor, 0)
        if self.offset:
            used += self.offset.get(q, {}).get(flavor, 0.0)
        if used <= EPS:
            return 0.0
        fair = self.shares.get(q, {}).get(flavor, 0.0)
        return used / fair if fair > EPS else 1e6 + used

    def queue_key(self, q: str, head: JobInfo) -> tuple:
        """(whether the head job would borrow, its flavor's share, the queue); plain FIFO: (submit, id, queue)."""
        if not self.config.fair_share:  # plain FIFO across queues
            return (head.submit_time, str(head.id), q)
        facts = self.admission.facts(head)
        flavors = facts[6] if facts[6] is not None else self.admission.flavors(head)
        if not flavors:
            return (True, INF, q)
        queues, need = self.queues, facts[1]
        # a function of the queue's and its chain's usage (QueueTree.version) and the head's need and flavors
        # (its shape id: its queue and roles; with several flavors, their order too): most pops of a busy
        # cycle follow a failed attempt, which charged nothing
        ck = facts[5] if facts[6] is not None else (facts[5], flavors)
        cached = self._keys.get(ck)
        if cached is not None and (cached[0] == queues.version or self.admission.unchanged(q, cached[0])):
            return cached[1]
        # QueueTree.within_entitlement, from the entitlement room kept per (queue, flavor) at this version
        room = self.admission._headroom
        if len(flavors) == 1:  # the same as below, without the generators
            within = room(q, flavors[0], True)[0] >= need
            share = self.flavor_share(q, flavors[0])
        else:
            within = any(room(q, f, True)[0] >= need for f in flavors)
            share = min(self.flavor_share(q, f) for f in flavors)
        key = (not within, share, q) if self.shares else (not within, share / queues.weight(q), q)
        self._keys[ck] = (queues.version, key)
        self.admission.writes += 1
        return key


class Admission:
    """Whether one job may start now, and where: the queue's limits (and quota, for a job that may not
    borrow), static feasibility, then the session's search; a success is charged to the queue. Remembers
    for the cycle the queues' static limits and the shapes that failed for lack of room."""

    def __init__(self, session: Session, reservations: Reservations | None, memo: dict | None = None):
        self.session, self.reservations = session, reservations
        self.failed_shapes: dict[tuple, PendingReason] = {}
        self._static_limits: dict[tuple, tuple] = {}
        self.memo = {} if memo is None else memo  # EngineCache.job_memo, or this cycle's own
        self._room: dict[tuple, tuple] = {}  # (queue, flavor, kind) -> (QueueTree.version, room, binding level)
        self._refused: dict[tuple, tuple] = {}  # (shape id, [flavors,] backfill_open) -> (version, PendingReason)
        self._searched = False  # whether the current place() ran a search
        self.writes = 0  # entries written to _refused and to the queue order's table of keys (_Bulk)
        self._flavors: dict = {}  # job id -> its flavors this cycle (clusters of several flavors)
        self._never: dict = {}  # (shape id, flavor) -> capacity.never_fits of the shape's jobs, this cycle
        # shape id -> what `lane` reads of its jobs, or None (not for the lane): kept across cycles (_kept_lanes)
        self._lanes: dict | None = None
        # charges through `charge`: queue level -> QueueTree.version after the last one that reached it, for every
        # charge from version _tracked_from to _tracked_to (any charge made elsewhere starts it over)
        self._touched: dict[str, int] = {}
        self._tracked_from = self._tracked_to = -1
        # an elastic job's tasks past its queue's entitlement are a borrow: while `rival(job, flavor)` (set by
        # allocate) says a job of another queue may still wait within its own entitlement for that flavor, the
        # job starts with its tasks within the entitlement only (job id -> (job, flavor): the rest is placed
        # after every other job was tried, allocate's _extend)
        self.rival = None
        self.deferred: dict = {}
        # called once just before a search, when set (then None again): a holder's hold given back for its own
        # attempt only if that attempt reaches a search (allocate's _serve_nomination)
        self.opening = None

    def facts(self, job: JobInfo) -> tuple:
        """The job's JobFacts entry, derived from the frozen JobInfo alone and memoised by identity (`memo`):
        (job, gpus_min, tier cap, roles' shape key, flavor -> static feasibility (capacity.never_fits; one dict per
        shape), shape id (`_shape_id`), the flavors it may run on when the cluster has one flavor (Session.flavors;
        None with several: their order follows the free GPUs))."""
        entry = self.memo.get(id(job))
        if entry is None or entry[0] is not job:
            # what follows from the fields below alone, kept per their values in the memo (jobs of one shape share
            # it): one dict lookup per new job instead of deriving each value again
            key = (job.queue, job.roles, job.numa, job.preemptible, job.topology_mode, job.highest_tier,
                   job.preferred_tier)
            shapes = self.memo.get("shape facts")
            if shapes is None:
                shapes = self.memo.setdefault("shape facts", {})
            known = shapes.get(key)
            if known is None:
                known = shapes.setdefault(key, self._shape_facts(job))
            entry = self.memo[id(job)] = (job, *known)
        return entry

    def _shape_facts(self, job: JobInfo) -> tuple:
        """facts' entry but for the job itself: (gpus_min, tier cap, the roles' shape key, flavor -> static
        feasibility (shared by the jobs of the shape: never_fits reads only what makes the shape), shape id, the
        flavors on a one-flavor cluster or None)."""
        session = self.session
        cap = session.tier_cap(job)
        key = (job.queue, job.roles, job.numa, job.preemptible, cap, job.preferred_tier)
        ids = self.memo.get("shape ids")
        if ids is None:
            ids = self.memo.setdefault("shape ids", ({}, itertools.count()))
        return (job.gpus_min, cap,
                tuple((r.gpus_per_task, r.effective_min, r.cpu_milli, r.memory_mib, r.group_size,
                       r.group_highest_tier, r.group_mode) for r in job.roles), {},
                # numbers from a counter: two shapes never share one, even from two threads
                ids[0].setdefault(key, next(ids[1])),
                tuple(session.flavors(job)) if len(session.state.flavors) == 1 else None)

    def flavors(self, job: JobInfo) -> tuple:
        """Session.flavors(job) as a tuple: the memoised one on a one-flavor cluster, else as first asked
        this cycle (the queue order's view; `place` asks again at its attempt)."""
        single = self.facts(job)[6]
        if single is not None:
            return single
        flavors = self._flavors.get(job.id)
        if flavors is None:
            flavors = self._flavors[job.id] = tuple(self.session.flavors(job))
        return flavors

    def charge(self, queue: str, flavor: str, gpus: int) -> None:
        """QueueTree.charge, noting the levels of the queue's chain it reached (`unchanged`)."""
        queues = self.session.queues
        if queues.version != self._tracked_to:  # a charge made elsewhere since the last one here: start over
            self._touched.clear()
            self._tracked_from = queues.version
        queues.charge(queue, flavor, gpus)
        version = self._tracked_to = queues.version
        touched = self._touched
        for level in queues.chain(queue):
            touched[level] = version

    def unchanged(self, queue: str, since: int) -> bool:
        """Whether the usage of every level of the queue's chain is what it was at QueueTree.version `since`: the
        same version, or every charge since went through `charge` and none reached the chain. (A value derived
        from those usages at `since` still holds: the share of a busy cycle's queue after other queues' starts.)"""
        touched = self._touched
        if touched.get(queue, -1) > since:  # a charge since reached the queue itself (the usual answer)
            return False
        queues = self.session.queues
        version = queues.version
        if since == version:
            return True
        if version != self._tracked_to or since < self._tracked_from:
            return False
        for level in queues.chain(queue):
            if touched.get(level, -1) > since:
                return False
        return True

    def _headroom(self, queue: str, flavor: str, entitled: bool = False) -> tuple:
        """QueueTree.headroom (entitled: entitlement_room), recomputed only after the usage of its chain changed."""
        queues = self.session.queues
        key = (queue, flavor, entitled)
        cached = self._room.get(key)
        if cached is not None and (cached[0] == queues.version or self.unchanged(queue, cached[0])):
            return cached[1]
        value = queues.entitlement_room(queue, flavor) if entitled else queues.headroom(queue, flavor)
        self._room[key] = (queues.version, value)
        return value

    def place(self, job: JobInfo, *, backfill_open: bool | None = None) -> Binding | PendingReason:
        """Start the job if it fits (Binding, applied and charged), else why not (PendingReason).
        backfill_open: None = no backfill reservation in force; True = the job ends before the reservation
        starts and may use its GPUs; False = it may not (Reservations.attempt)."""
        session = self.session
        if not session.queues.known(job.queue):
            return PendingReason("unknown_queue", f"queue {job.queue} does not exist", terminal=True)
        if not job.roles:
            return PendingReason("invalid", "job has no roles", terminal=True)
        sharing = session.sharing
        if sharing is not None:  # GPU shares in this cycle (sharing.py's walk hook)
            if any(r.shares for r in job.roles):
                return sharing.place(job)  # fractions / MIG instances: the sharing placer
            if job.id in sharing.mixed:  # a mixed job's whole-GPU roles: its shares right after, or neither
                outcome = self._place(job, backfill_open)
                return sharing.complete(job, outcome) if isinstance(outcome, Binding) else outcome
        return self._place(job, backfill_open)

    def lane(self, job: JobInfo, entry: tuple):
        """`place(job)` for a job of one task of one role (Session._one_task's shortcut) with no backfill reservation
        in force, on allocate's quick path (a one-flavor cluster, no GPU shares; the job has no avoid_nodes and
        no refusal in the table at this version): the same checks as place / _place / _place_flavor in their
        order (queue known, roles, static limit, static feasibility, headroom, quota room when not preemptible,
        a failed shape) and the shortcut's placement, charged to the queue, without building the call chain and
        a Binding the caller would copy. (node name, GPU indices, lead domain index, role name) when it placed
        the task; None when any of this does not hold, with the state and the usage unchanged: `place` then
        decides the long way (and reaches the same refusal, or its full search). entry: the job's facts."""
        sid = entry[5]
        lanes = self._lanes
        if lanes is None:
            lanes = self._lanes = self._kept_lanes()
        lane = lanes.get(sid, _UNSET)
        if lane is _UNSET:
            lane = lanes[sid] = self._lane(job, entry)
        if lane is None:
            return None
        flavor, need, gpus, cpu, mem, tier, shape, role, preemptible, capped = lane
        queue = job.queue
        if capped and need > self._headroom(queue, flavor)[0]:
            return None
        if not preemptible and need > self._headroom(queue, flavor, True)[0]:
            return None
        if shape in self.failed_shapes:
            return None
        taken = self.session._one_task_take(gpus, cpu, mem, flavor, tier)
        if taken is None:
            return None
        self.charge(queue, flavor, gpus)
        return (*taken, role)

    def _kept_lanes(self) -> dict:
        """The table of `_lane`'s answers (shape id -> answer), kept in the job memo across cycles (key ("lanes",
        thread)) while what `_lane` reads besides the job's shape id is the same: the queues' names, parents and
        quotas (QueueTree's kept statics, `static_key`: known queues, static limits), the cluster's shape and the
        config (the memo's own key: capacity per flavor, static feasibility, tier levels, the largest NUMA node)
        and whether any node reports its GPUs' NUMA layout (Session.numa_known: the search passes). Without
        kept statics (no memo) the table is this cycle's alone."""
        session = self.session
        statics = session.queues._statics
        if statics is None:
            return {}
        key = ("lanes", threading.get_ident())
        token = (statics, session.numa_known())
        kept = self.memo.get(key)
        if kept is None or kept[0] is not token[0] or kept[1] != token[1]:
            kept = self.memo[key] = (*token, {})
        return kept[2]

    def _lane(self, job: JobInfo, entry: tuple):
        """What `lane` reads of a job's shape id (the same for every job of it: its queue, roles, numa, preemptible,
        tier cap and preferred tier), checked and filled as _place_flavor would: None when the lane never applies
        to the shape this cycle (place decides those jobs)."""
        session = self.session
        flavors = entry[6]
        if not session.queues.known(job.queue) or not job.roles or len(job.roles) != 1 or flavors is None \
                or len(flavors) != 1:
            return None
        flavor, need, cap, role = flavors[0], entry[1], entry[2], job.roles[0]
        limits = self._static_limits.get((job.queue, flavor))
        if limits is None:
            limits = self._static_limits[(job.queue, flavor)] = session.queues.static_limit(job.queue, flavor)
        if need > limits[0]:
            return None
        # no limit on the chain below the flavor's whole capacity: QueueTree.headroom is (INF, None) at any usage
        capped = limits[0] < session.queues.capacity[flavor]
        never = self._never.get((entry[5], flavor), _UNSET)
        if never is _UNSET:
            never = self._never[(entry[5], flavor)] = session.capacity.never_fits(
                job, flavor, cap if session.config.topology else None)
        if never is not None:
            return None
        tier = session._quick.get((entry[5], flavor))
        if tier is None:
            tier = session._quick[(entry[5], flavor)] = session._one_task_tier(job, flavor,
                                                                               session._tier_levels(job, cap))
        if not tier:
            return None
        shape = (flavor, cap, job.preferred_tier, None, job.numa, entry[3])
        return (flavor, need, role.gpus_per_task, role.cpu_milli, role.memory_mib, tier, shape, role.name,
                job.preemptible, capped)

    def _place(self, job: JobInfo, backfill_open: bool | None) -> Binding | PendingReason:
        session = self.session
        facts = self.facts(job)
        flavors = facts[6] if facts[6] is not None else tuple(session.flavors(job))  # most free first, now
        if not flavors:
            return self._place_mixed(job)
        if len(flavors) > 1 and self.rival is not None:
            flavors = self._unborrowed_first(job, flavors, facts[1])
        if job.avoid_nodes:
            avoided = self._place_avoiding(job, flavors, backfill_open)
            if avoided is not None:
                return avoided
            key = None
        else:
            # A refusal decided without a search (the queue's limits, static feasibility, or a shape that
            # already failed this cycle: failed_shapes only grows) depends on the job's shape, the
            # backfill window and the queues' usage alone: a job of the same shape refused at the same
            # QueueTree.version gets the same answer (in a busy cycle, most jobs of a queue at its limit)
            key = (facts[5], backfill_open) if facts[6] is not None else (facts[5], flavors, backfill_open)
            cached = self._refused.get(key)
            if cached is not None and cached[0] == session.queues.version:
                return cached[1]
        self._searched = False
        reasons: list[PendingReason] = []
        for flavor in flavors:
            outcome = self._place_flavor(job, flavor, backfill_open, facts)
            if isinstance(outcome, Binding):
                return outcome
            reasons.append(outcome)
        live = [r for r in reasons if not r.terminal]
        outcome = live[0] if live else reasons[0]
        if key is not None and not self._searched:
            self._refused[key] = (session.queues.version, outcome)
            self.writes += 1
        return outcome

    def _shape_id(self, job: JobInfo) -> int:
        """A small number per (queue, roles, numa, preemptible, tier cap, preferred tier): everything
        _place_flavor reads of the job before its search (JobFacts entry)."""
        return self.facts(job)[5]

    def _place_avoiding(self, job: JobInfo, flavors, backfill_open: bool | None) -> Binding | None:
        """Try the job with the free GPUs of its avoid_nodes held out of the pool (a hold of the session,
        released afterwards); None when nothing fits that way (the caller then places it normally, on an
        avoided node if that is the only fit). Failures here are not remembered as failed shapes."""
        session, state = self.session, self.session.state
        key = ("avoid", job.id)
        out = []
        for name in job.avoid_nodes:
            k = state.node_index.get(name)
            if k is not None and state.free[k]:
                out.append(TaskPlacement("", 0, name, tuple(state.free[k])))
        session.holds.hold(key, tuple(out))
        saved, self.failed_shapes = self.failed_shapes, {}
        try:
            for flavor in flavors:
                outcome = self._place_flavor(job, flavor, backfill_open)
                if isinstance(outcome, Binding):
                    return outcome
            return None
        finally:
            self.failed_shapes = saved
            session.holds.drop(key)

    def _place_mixed(self, job: JobInfo) -> Binding | PendingReason:
        """A heterogeneous job (its GPU roles share no flavor): each role on a flavor it accepts, the gang
        in one domain of its tier levels (Session.search_mixed), the queue's limits checked and charged
        per flavor. Plans (role -> flavor) are tried with each role's flavors most free first."""
        session = self.session
        queues, state = session.queues, session.state
        root = session.tree.root
        plans = flavor_plans(job.roles, state.flavors,
                             rank=lambda fs: sorted(fs, key=lambda f: (-state.domain_free(root, f), f)))
        if not plans:
            missing = next(r for r in job.roles if r.gpus_per_task and not role_flavors(r, state.flavors))
            return PendingReason("never_fits_flavor", f"role {missing.name}: no node of flavor "
                                 f"{'|'.join(missing.flavors)} in this cluster", terminal=True)
        cap = session.tier_cap(job)
        never = mixed_never_fits(session.capacity, job, state.flavors, cap if session.config.topology else None)
        if never is not None:
            return never
        reasons: list[PendingReason] = []
        for plan in plans:
            need_by: dict[str, int] = {}
            for r in job.roles:
                if r.name in plan:
                    need_by[plan[r.name]] = need_by.get(plan[r.name], 0) + r.effective_min * r.gpus_per_task
            blocked = None
            for flavor, need in sorted(need_by.items()):
                limit, limiter = queues.static_limit(job.queue, flavor)
                room, at = queues.headroom(job.queue, flavor)
                if not job.preemptible:  # it could never be reclaimed, so it may not borrow (as _place_flavor)
                    within, level = queues.entitlement_room(job.queue, flavor)
                    if within < room:
                        room, at = within, level
                if need > limit:
                    why = f"above queue {limiter} limit of {int(limit)}"
                    blocked = session.capacity.beyond_cluster(need, flavor, why) or PendingReason(
                        "never_fits_queue_limit", f"needs {need} {flavor} GPUs, {why}", terminal=True)
                elif not job.preemptible:
                    blocked = self._never_within_quota(job.queue, flavor, need)
                if blocked is None and need > room:
                    blocked = PendingReason("queue_limit", f"queue {at} has room for {int(room)} more {flavor} "
                                            f"GPUs, job needs {need}")
                if blocked is not None:
                    break
            if blocked is not None:
                reasons.append(blocked)
                continue
            # tasks above the minimum only while every flavor's headroom allows: bounded by the tightest
            # (a non-preemptible job's within its entitlement too)
            room = min(min(queues.headroom(job.queue, f)[0],
                           INF if job.preemptible else queues.entitlement_room(job.queue, f)[0]) - n
                       for f, n in need_by.items()) + job.gpus_min
            outcome = session.search_mixed(job, plan, cap=cap, room=room)
            if isinstance(outcome, Binding):
                for t in outcome.tasks:
                    if t.gpus:
                        queues.charge(job.queue, state.nodes[state.node_index[t.node]].flavor, len(t.gpus))
                return outcome
            reasons.append(outcome)
        live = [r for r in reasons if not r.terminal]
        return live[0] if live else reasons[0]

    def _never_within_quota(self, queue: str, flavor: str, need: int) -> PendingReason | None:
        """Why a non-preemptible job needing `need` GPUs of `flavor` can never start in `queue` (a terminal
        never_fits_queue_quota naming the level of the chain and its entitlement), or None. Such a job may not borrow
        (it could never be reclaimed): it runs only within the entitlement of every level of its queue's chain
        (QueueTree.static_entitlement: its quota plus what its parents leave unassigned), which no wait raises. A
        queue with a quota of 0 under a parent with unassigned quota is entitled to that part, and is not refused."""
        session = self.session
        entitled, level = session.queues.static_entitlement(queue, flavor)
        if need <= entitled:
            return None
        why = never_within_quota(level, entitled)
        return session.capacity.beyond_cluster(need, flavor, why) or PendingReason(
            "never_fits_queue_quota", f"can never start: needs {need} {flavor} GPUs; {why}", terminal=True)

    def _place_flavor(self, job: JobInfo, flavor: str, backfill_open: bool | None, facts: tuple | None = None
                      ) -> Binding | PendingReason:
        """facts: the job's facts entry when the caller has it (Admission.facts)."""
        session = self.session
        queues, config = session.queues, session.config
        if facts is None:
            facts = self.facts(job)
        need = facts[1]
        limits = self._static_limits.get((job.queue, flavor))
        if limits is None:  # the queues' limits do not change within a cycle
            limits = self._static_limits[(job.queue, flavor)] = queues.static_limit(job.queue, flavor)
        limit, limiter = limits
        if need > limit:
            why = f"above queue {limiter} limit of {int(limit)}"
            return session.capacity.beyond_cluster(need, flavor, why) or PendingReason(
                "never_fits_queue_limit", f"needs {need} {flavor} GPUs, {why}", terminal=True)
        if not job.preemptible:
            never = self._never_within_quota(job.queue, flavor, need)
            if never is not None:
                return never
        cap = facts[2]
        never = facts[4].get(flavor, _UNSET)
        if never is _UNSET:  # the same for every job of its shape id (never_fits reads its roles, numa and cap)
            never = self._never.get((facts[5], flavor), _UNSET)
            if never is _UNSET:
                never = self._never[(facts[5], flavor)] = session.capacity.never_fits(
                    job, flavor, cap if config.topology else None)
            facts[4][flavor] = never
        if never is not None:
            return never
        room, limiter = self._headroom(job.queue, flavor)
        if need > room:
            used = queues.usage[limiter][flavor]
            return PendingReason("queue_limit", f"queue {limiter} limit: uses {used} of {int(used + room)} "
                                 f"{flavor} GPUs, job needs {need}")
        if not job.preemptible:  # it could never be reclaimed, so it may not borrow (the sharing pass's rule too)
            within = self._headroom(job.queue, flavor, True)
            why = borrow_refusal(queues, job.queue, flavor, need, within)
            if why is not None:
                return PendingReason("queue_limit", why)
            room = min(room, within[0])
        elif room > need and self.rival is not None:
            room = self._within_first(job, flavor, need, room)
        shape = (flavor, cap, job.preferred_tier, backfill_open, job.numa, facts[3])
        cached = self.failed_shapes.get(shape)
        if cached is not None:
            return cached
        self._searched = True
        if self.opening is not None:  # a holder's own attempt: its hold is given back for the search
            opening, self.opening = self.opening, None
            opening()
        outcome = session.search(job, flavor, cap=cap, need=need, room=room, shape=facts[5])  # room >= need here
        if isinstance(outcome, PendingReason):
            until = self.reservations.until
            if backfill_open is False and until is not None:
                outcome = PendingReason(outcome.code, f"{outcome.message} outside GPUs reserved until "
                                                      f"t={until:.0f}s (no time limit ending before)")
            self.failed_shapes[shape] = outcome
        else:
            for t in outcome.tasks:
                if t.gpus:
                    self.charge(job.queue, flavor, len(t.gpus))
        return outcome


    def _unborrowed_first(self, job: JobInfo, flavors: tuple, need: int) -> tuple:
        """The job's flavors (most free first) with those it would not borrow on first when the first one would
        borrow while a job of another queue may wait within its own entitlement for it (`rival`): a job within
        its entitlement on one flavor goes before the borrowers (the queue order) and does not borrow another
        flavor's GPUs there when it fits where it does not. Otherwise `flavors` unchanged."""
        room = self._headroom
        if room(job.queue, flavors[0], True)[0] >= need:
            return flavors
        within = tuple(f for f in flavors if room(job.queue, f, True)[0] >= need)
        if not within or not self.rival(job, flavors[0]):
            return flavors
        return within + tuple(f for f in flavors if f not in within)

    def _within_first(self, job: JobInfo, flavor: str, need: int, room: float) -> float:
        """The room of an elastic job whose minimum fits its queue's entitlement (it starts in the walk's first
        part, before every borrower) but whose tasks above the minimum would borrow: its entitlement room
        while a job of another queue may still wait within its own entitlement for the flavor (`rival`), the
        job then noted in `deferred`; else `room` unchanged. Units: GPUs."""
        within = self._headroom(job.queue, flavor, True)[0]
        if within >= room or within < need:
            return room  # nothing past the entitlement, or the job borrows anyway (a borrower's turn)
        if job.gpus_requested <= within or not self.rival(job, flavor):
            return room
        self.deferred[job.id] = (job, flavor)
        return within


def _extend(session: Session, admission: Admission, order, bindings: list, waits) -> None:
    """Place the tasks past their queue's entitlement that Admission kept back (`deferred`) once every other job
    has been tried (the end of the walk: they borrow, after the borrowers, like grow's): each started job takes
    the tasks that fit within its queue's limits, added to its binding (one per job), unless a job of another
    queue still waits within its entitlement for the flavor (`waits(job, flavor)`: it would reclaim them at
    once; the grow action places them in a later cycle, under the same rule)."""
    deferred = admission.deferred
    at = {b.job_id: i for i, b in enumerate(bindings) if b.job_id in deferred}
    items = sorted(((at[j], job, flavor) for j, (job, flavor) in deferred.items() if j in at), key=lambda x: x[0])
    deferred.clear()
    state, tree = session.state, session.tree
    for i, job, flavor in items:
        if waits(job, flavor):
            continue
        b = bindings[i]
        budget = admission._headroom(job.queue, flavor)[0]
        d = tree.index[b.domain]
        new = session.add_tasks(job, flavor, b.tasks, d, cap=session.tier_cap(job), budget=budget)
        if not new:
            continue
        admission.charge(job.queue, flavor, sum(len(t.gpus) for t in new))
        d = session.enclosing(d, [state.node_index[t.node] for t in new])
        bindings[i] = replace(b, tasks=b.tasks + new, domain=tree.names[d], tier=tree.tiers[d],
                              share_after=order.share(job.queue))


def _reservation_valid(session: Session, job: JobInfo) -> bool:
    """False when a reserved GPU's node is gone or not ready, or the GPU is unhealthy: the job is then
    scheduled like any other."""
    state = session.state
    node_index, nodes = state.node_index, state.nodes
    for t in job.reserved:
        k = node_index.get(t.node)
        if k is None:
            return False
        node = nodes[k]
        if not node.schedulable:
            return False
        unhealthy = node.unhealthy
        if unhealthy and any(g in unhealthy for g in t.gpus):
            return False
    return True


def _serve_nomination(session: Session, admission: Admission, order: _QueueOrder, job: JobInfo,
                      out: Allocation) -> None:
    """Start a job on the GPUs reserved for it (an eviction's beneficiary, or a starving job's drain
    reservation) once they are all free (held for it); meanwhile it may start anywhere else that fits,
    and the reserved GPUs that are free stay held for it."""
    holds, queues = session.holds, session.queues
    total = 0
    for t in job.reserved:
        total += len(t.gpus)
    waiting = total - holds.gpus_held(job.id)
    charged = queues.held.get(job.id)  # (queue, flavor -> GPUs): its hold as QueueTree.charge_hold charged it
    # The hold is given back for the job's own attempt only when the attempt reads the free GPUs: on a one-flavor
    # cluster without GPU shares, for a job with no avoid_nodes, `place` reads them in its search alone (most
    # attempts are refused before one: by the queue's limits, or a shape that failed this cycle), so the release
    # waits there (Admission.opening). An attempt refused without a search changes no free GPU, and its
    # release + retake would give back and take again the same GPUs: the same free lists, aggregates and holds,
    # unless a GPU it wants that it does not hold is free now (another holder started elsewhere): then both run.
    # The queue's share before the start (Binding.share_before) is read at the same point: only a search can
    # start such a job, and no charge comes between the hold's uncharge and the search.
    lazy = bool(waiting and session.sharing is None and session.state.touched is None and not job.avoid_nodes
                and admission.facts(job)[6])
    if lazy:
        before = []

        def opening() -> None:
            holds.release(job.id)
            before.append(order.share(job.queue))

        admission.opening = opening
    else:
        holds.release(job.id)
    queues.drop_hold(job.id)  # its placement is charged instead, or the hold again
    if not lazy:
        before = order.share(job.queue)
    outcome = _bind_exactly(session, job) if not waiting else admission.place(job)
    if lazy:
        if admission.opening is not None:  # no search: nothing was released
            admission.opening = None
            assert not isinstance(outcome, Binding), "a holder started without a search"
            if _wants_free(holds, session.state.free, job.id):
                holds.release(job.id)
                lazy = False
        else:
            before = before[0]
    if isinstance(outcome, Binding):
        holds.drop(job.id)
        out.bindings.append(replace(outcome, rule="reservation" if not waiting else "allocate",
                                    share_before=before, share_after=order.share(job.queue)))
        return
    if lazy and job.id in holds.held:  # its hold as it was: nominated again on it, charged as at snapshot time
        session.nominated[job.id] = job.reserved
        if charged is not None and charged[0] == job.queue:
            charge, per_flavor = queues.charge, charged[1]
            for flavor, gpus in per_flavor.items():
                charge(job.queue, flavor, gpus)
            queues.held[job.id] = (job.queue, dict(per_flavor))
        else:
            queues.charge_hold(job.id, job.queue, job.reserved)
    elif charged is not None and charged[0] == job.queue and job.id in holds.wanted:
        # session.nominate(job, job.reserved) without deriving the hold again: Holds.hold would want the same
        # tasks on the same nodes (kept by release), and QueueTree.charge_hold on the same tasks (no victims:
        # all_gpus False, as every charge of a job's reserved tasks before this point) charges the same GPUs
        # per flavor again. (retake, not the GPUs just released: another holder's GPUs freed since count too)
        holds.retake(job.id)
        session.nominated[job.id] = job.reserved
        charge, per_flavor = queues.charge, charged[1]
        for flavor, gpus in per_flavor.items():
            charge(job.queue, flavor, gpus)
        queues.held[job.id] = (job.queue, dict(per_flavor))
    else:
        session.nominate(job, job.reserved)
    waiting = total - holds.gpus_held(job.id)  # (another holder may have started or given GPUs back meanwhile)
    others = holds.taken_by_others(job.id) if waiting else ()
    out.reasons[job.id] = _nominated(admission.memo, outcome.message, waiting, others)


def _nominated(memo: dict, message: str, waiting: int, others: tuple = ()) -> PendingReason:
    """A waiting holder's reason: its attempt's message and the reserved GPUs it does not hold yet: those other
    holds have taken (`others`: Holds.taken_by_others), and the rest, still in use by running jobs. The same (frozen,
    equal) object for the same values, kept in the job memo (key ("nominated reasons", thread); at most 4,096, then
    started over): a holder waits with the same reason cycle after cycle."""
    key = ("nominated reasons", threading.get_ident())
    kept = memo.get(key)
    if kept is None or len(kept) > 4096:
        kept = memo[key] = {}
    reason = kept.get((message, waiting, others))
    if reason is None:
        by_others = sum(n for _, n in others)
        in_use = waiting - by_others
        parts = []
        if in_use > 0:
            parts.append(f"{in_use} GPUs reserved for it are still in use (evicted jobs releasing, or jobs draining)")
        if by_others:
            held = ", ".join(f"{n} for job {other}" if other != BACKFILL else f"{n} for this cycle's backfill "
                             f"reservation" for other, n in others)
            parts.append(f"{by_others} GPUs reserved for it are held for another reservation ({held})")
        reason = kept[(message, waiting, others)] = PendingReason("nominated", "; ".join([message] + parts))
    return reason


def _wants_free(holds, free: list, key) -> bool:
    """Whether a GPU the hold of `key` wants is free now (`free`: ClusterState.free; the GPUs it holds are
    taken, so not free): its retake would take more than it holds."""
    for k, gpus in holds.wanted.get(key, ()):
        on = free[k]
        if on:
            for g in gpus:
                if g in on:
                    return True
    return False


def _bind_exactly(session: Session, job: JobInfo) -> Binding:
    """Start the job on exactly its reserved tasks (all of their GPUs are free), charging its queue."""
    state, tree, roles = session.state, session.tree, {r.name: r for r in job.roles}
    ks = []
    for t in job.reserved:
        k = state.node_index[t.node]
        state.take(k, t.gpus, roles[t.role].cpu_milli, roles[t.role].memory_mib)
        ks.append(k)
        if t.gpus:
            session.queues.charge(job.queue, state.nodes[k].flavor, len(t.gpus))
    d = common_domain(tree, ks)
    return Binding(job_id=job.id, tasks=tuple(job.reserved), domain=tree.names[d], tier=tree.tiers[d])
