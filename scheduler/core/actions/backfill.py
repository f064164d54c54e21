"""Backfill without starvation (Slurm's backfill scheduler, EASY backfilling: Lifka 1995; Mu'alem and
Feitelson, IEEE TPDS 2001), and drain reservations for jobs that starve anyway.

`Reservations` is the cycle's reservation book, used by the allocate action:

- EASY shadow: the first job in order that cannot start for lack of room gets a reservation: running jobs
  are released, in order of their expected end (start + time_limit; a job being stopped, state "preempting",
  at the earlier of that and its stop_deadline, when its GPUs come free for sure), on a Trial until the job fits; that
  time is its estimated start and that placement its reserved GPUs. The reserved GPUs that are free now
  are held out of the pool for the rest of the cycle; a later job may use them only if it declares a time
  limit that ends before the reservation starts (`attempt`). Jobs with no time limit never use reserved
  GPUs. Running jobs without a time limit (and not being stopped by a deadline) have no known end, so a
  reservation behind them cannot be computed (no reservation is made).
- Drain: a job that has waited `starvation_seconds` while no EASY shadow exists this cycle gets the GPUs
  it will start on, in the domain quickest to drain, held for it from now on (a Nomination), so smaller
  jobs stop taking them as they free up. At most one new drain per cycle, at most `max_drains` drains in
  force (default 1: one target job at a time, as Volcano's reservation elects one; each drain holds GPUs
  idle while its nodes empty, and on whole Philly days 20-40 a second and third drain raised the mean wait
  of every size but the largest: benchmarks/RESULTS.md, session 21), and at most `max_reservations` jobs
  holding reservations at once (eviction beneficiaries and drains). A drain never counts GPUs another hold
  wants as drained (they stay taken on its Trial), so no two holds want the same GPU through a drain.

Times are seconds of the cluster clock.
"""
from __future__ import annotations

from dataclasses import replace
from itertools import compress, repeat
from operator import attrgetter, eq, is_not
from typing import Callable

from ..jobindex import FactTuple
from ..plugins.quota import INF
from ..session import Session
from ..snapshot import Binding, JobInfo, PendingReason, Snapshot, utc_iso
from ..trial import Trial, release_binding

BACKFILL = "backfill"  # the hold key of the EASY reservation's GPUs
ROOM_CODES = {"insufficient_gpus", "no_domain", "no_packing"}  # waiting for GPUs may help: worth a reservation
DRAIN_CANDIDATES = 4  # domains tried per drain reservation
_time_limit = attrgetter("time_limit")
_state = attrgetter("state")

Place = Callable[..., "Binding | PendingReason"]  # Admission.place(job, backfill_open=...)


class Reservations:
    """The cycle's EASY reservation and drain reservations (module docstring).

    until: the EASY reservation's start (seconds), None while none is in force; estimated_start: job id ->
    estimated start of the job holding it; count: jobs holding a reservation (those of earlier cycles,
    `JobInfo.reserved`, included)."""

    def __init__(self, session: Session, pending: list[JobInfo], holding: int | None = None):
        """holding: how many of `pending` hold a reservation (`reserved`), when the caller knows it
        (jobindex.Facts.holding of the snapshot whose pending jobs these are), else None: counted when asked."""
        self.session = session
        self.until: float | None = None
        self.estimated_start: dict = {}
        self._pending = pending
        self._count: int | None = holding  # counted when first asked (most cycles never ask)
        self._tried = False  # one EASY reservation per cycle: for the first job that waits
        self._drained = False  # at most one new drain reservation per cycle
        self._drains: int | None = None  # drains in force (holders no eviction is for), counted when first asked
        # the earliest time (seconds) at which a job refused here for lack of room starves (its submit time +
        # starvation_seconds): from then on a cycle may make a drain reservation for it (cycle.settled_until)
        self.starves_at = INF

    @property
    def drained(self) -> bool:
        """Whether this cycle made a drain reservation (at most one a cycle)."""
        return self._drained

    @property
    def count(self) -> int:
        if self._count is None:
            self._count = sum(1 for j in self._pending if j.reserved)
        return self._count

    @count.setter
    def count(self, value: int) -> None:
        self._count = value

    def attempt(self, job: JobInfo, place: Place) -> Binding | PendingReason:
        """place(job) under the reservation in force: a job that ends before it starts may use its GPUs
        (a success is then a "backfill" binding), any other job must fit outside them."""
        holds, until = self.session.holds, self.until
        if until is None or not holds.holding(BACKFILL):
            return place(job)
        ends = self.session.now + job.time_limit if job.time_limit is not None else INF
        if ends > until:
            return place(job, backfill_open=False)
        holds.release(BACKFILL)
        try:
            outcome = place(job, backfill_open=True)
        finally:
            holds.retake(BACKFILL)
        return replace(outcome, rule="backfill") if isinstance(outcome, Binding) else outcome

    def waiting(self, job: JobInfo, reason: PendingReason) -> PendingReason:
        """The job could not start (`reason`): reserve for it if it is the first to wait for room, or drain
        for it if it starves with no EASY reservation this cycle. Returns the reason, its message extended
        with the reservation made."""
        config = self.session.config
        if reason.code not in ROOM_CODES or not config.backfill:
            return reason
        starves = job.submit_time + config.starvation_seconds
        if starves < self.starves_at:
            self.starves_at = starves
        if not self._tried:
            self._tried = True
            reason = self._reserve(job, reason)
        if self.until is None and self._starving(job):
            reason = self._drain_for(job, reason)
        return reason

    def _reserve(self, job: JobInfo, reason: PendingReason) -> PendingReason:
        session = self.session
        flavors = session.flavors(job)
        found = shadow_reservation(session, job, flavors[0], session.snapshot) if flavors else None
        if found is None:
            return reason
        start, placement = found
        self.until = start
        self.estimated_start[job.id] = start
        session.holds.hold(BACKFILL, placement.tasks)
        # the start as a time people read (new-user trial 22b: "estimated start t=1796360762s"), as backoff's retry
        return PendingReason(reason.code, f"{reason.message}; reserved, estimated start {utc_iso(start)}")

    @property
    def drains(self) -> int:
        """Drain reservations in force: pending jobs holding GPUs (`reserved`) that no eviction is for (no job
        being evicted names them in `evicted_for`), those made this cycle included."""
        if self._drains is None:
            targets = {j.evicted_for for j in _not_pending(self.session.snapshot.jobs)
                       if j.state == "preempting" and j.evicted_for is not None}
            self._drains = sum(1 for j in self._pending if j.reserved and j.id not in targets)
        return self._drains

    def closed(self) -> bool:
        """Whether no new drain reservation can be made this cycle: one was made already, `max_reservations`
        jobs hold GPUs, or `max_drains` drains are in force."""
        config = self.session.config
        return self._drained or self.count >= config.max_reservations or self.drains >= config.max_drains

    def _starving(self, job: JobInfo) -> bool:
        return (self.session.now - job.submit_time >= self.session.config.starvation_seconds
                and not self.closed())

    def _drain_for(self, job: JobInfo, reason: PendingReason) -> PendingReason:
        """A persistent reservation for a starving job: the GPUs it will get in the domain quickest to
        drain are held for it from now on (Nomination). Needed when running jobs declare no time limit
        (no EASY shadow)."""
        session = self.session
        for flavor in session.flavors(job):
            placement = drain_reservation(session, job, flavor)
            if placement is not None:
                self._drained = True
                self.count += 1
                self._drains = self.drains + 1
                session.nominate(job, placement.tasks)
                waited = (session.now - job.submit_time) / 3600
                return PendingReason(reason.code, f"{reason.message}; waited {waited:.1f} h: GPUs in "
                                                  f"{placement.domain} reserved, draining for it")
        return reason


def shadow_reservation(session: Session, job: JobInfo, flavor: str, snapshot: Snapshot
                       ) -> tuple[float, Binding] | None:
    """(estimated start in seconds of cluster time, the placement then), or None when the job fits no
    time at which running jobs with a time limit, and stopping jobs with a stop deadline, have ended. The state is
    left unchanged."""
    # the jobs with a time limit first (C-level: a trace without limits makes no Python loop over its jobs); a
    # producer that counts them (FactTuple.timed, which counts the stopping jobs with a stop deadline too) says when
    # there is none, without a pass over the jobs. A job being stopped (state "preempting") frees its GPUs by its
    # stop_deadline for sure (the forecast reads it too): at the earlier of that and its time limit's end; one
    # without a time limit has that end alone (before, a stopping job was read as running to its limit, or, without
    # one, as never ending: the estimate late, or no reservation behind it)
    jobs = snapshot.jobs
    if type(jobs) is FactTuple and jobs.timed == 0:
        return None
    jobs = _not_pending(jobs)
    ends = []
    for j in compress(jobs, map(is_not, map(_time_limit, jobs), repeat(None))):
        if j.state != "pending" and j.start_time is not None:
            end = j.start_time + j.time_limit
            if j.state == "preempting" and j.stop_deadline is not None and j.stop_deadline < end:
                end = j.stop_deadline
            ends.append((end, str(j.id), j))
    ends += [(j.stop_deadline, str(j.id), j) for j in compress(jobs, map(eq, map(_state, jobs), repeat("preempting")))
             if j.time_limit is None and j.stop_deadline is not None]
    ends.sort()
    if not ends:
        return None
    state, root = session.state, session.tree.root
    trial = Trial(state)
    found = None
    # GPUs that holds want (drains, eviction beneficiaries) do not come free for this job when their jobs end
    others = session.holds.wanted_by_others(job.id) if session.holds.wanted else None
    for end, _, running in ends:
        if others:
            trial.free_tasks(running, tuple(t for t in map(_without, running.placement, repeat(others))
                                            if t is not None))
        else:
            trial.free_tasks(running, running.placement)
        if state.domain_free(root, flavor) < job.gpus_min:
            continue
        placed = session.try_place(job, flavor, target=job.gpus_min)
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
            found = (max(end, snapshot.now), placed)
            break
    trial.undo()
    return found


def _without(task, others: dict[str, frozenset]):
    """The running task with only the GPUs no other hold wants (others: Holds.wanted_by_others); None when none
    is left."""
    held = others.get(task.node)
    if not held:
        return task
    gpus = tuple(g for g in task.gpus if g not in held)
    if len(gpus) == len(task.gpus):
        return task
    return replace(task, gpus=gpus) if gpus else None


def _not_pending(jobs):
    """`jobs` (a snapshot's), or only those before its pending ones when a producer's FactTuple says where
    those begin (jobindex.FactTuple.pending_from): every job not pending either way."""
    start = jobs.pending_from if type(jobs) is FactTuple else None
    return jobs if start is None else jobs[:start]


def drain_reservation(session: Session, job: JobInfo, flavor: str) -> Binding | None:
    """Where a starving job should wait: in the first of its tier levels (Session.tier_levels) whose
    domains could hold it once emptied, the domains with the most free GPUs (least to drain) are tried in
    turn; in each, every running task is released on a Trial and the job placed. Returns that placement,
    or None (the state is left unchanged)."""
    state, tree, capacity, topology = session.state, session.tree, session.capacity, session.config.topology
    for tier in session.tier_levels(job):
        domains = [d for d in (tree.by_tier[tier] if topology else [tree.root])
                   if capacity.domain_fits(job, flavor, d)]
        if not domains:
            continue
        domains.sort(key=lambda d: (-state.domain_free(d, flavor), tree.names[d]))
        chosen = domains[:DRAIN_CANDIDATES]
        # the running tasks on the nodes of the chosen domains, per node in the snapshot's job order (a job not
        # pending holds its placement; a producer's FactTuple lists those jobs first)
        nodes = state.nodes
        wanted = {nodes[k].name for d in chosen for k in tree.nodes_under[d]}
        # GPUs another hold wants (an earlier drain, an eviction's beneficiary) stay taken on the trial: a drain
        # that counted them as drained would hold the same GPUs as that one, and both would wait on each other
        # (trial 20, F2: two starving gangs held 144 GPUs for hours on the same 16 machines)
        others = session.holds.wanted_by_others(job.id)
        by_node: dict[str, list] = {}
        for running in _not_pending(session.snapshot.jobs):
            if running.state != "pending":
                for t in running.placement:
                    if t.node in wanted:
                        t = _without(t, others)
                        if t is not None:
                            by_node.setdefault(t.node, []).append((running, t))
        for d in chosen:
            trial = Trial(state)
            for k in tree.nodes_under[d]:
                for running, t in by_node.get(state.nodes[k].name, ()):
                    trial.free_tasks(running, (t,))
            placed = session.try_place(job, flavor, target=job.gpus_min, within=d)
            if isinstance(placed, Binding):
                release_binding(state, job, placed)
            trial.undo()
            if isinstance(placed, Binding):
                return placed
        return None
    return None
