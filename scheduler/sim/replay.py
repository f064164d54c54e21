"""Discrete-event trace replay in simulated time, driving the same engine as production.

Events are job arrivals (trace `submit`) and completions (start + `duration`). Events are batched: a
scheduling cycle runs at the time of the next event, but never sooner than `cycle_interval` seconds after
the previous cycle, so a busy trace runs at most one cycle per interval and an idle cluster jumps straight
to its next event (empty time is never stepped through). A cycle that started jobs while others still
wait is followed by another one an interval later, since starting them changed the state. When nothing happened
in that interval (no arrival, job or node event) and the engine said its result was a fixed point until later
(CycleResult.settled_until, core.cycle.settled_until), that re-run is settled: it is counted, measured and
decayed like any cycle, but the engine is not called (it would start, evict and hold nothing new;
`Replay.settled_cycle`, tests/sim/test_settled_cycles.py).

Also measured (issue #3): per-team fairness, Jain's index of usage / fair share each cycle averaged over
time (scheduler.sim.fairness), and evictions per started job. Optional (issue #6): injected node
failures and checkpointing (scheduler.sim.failures). A failed node's jobs lose the work since their last
checkpoint, keep their GPUs (hung) until the failure is detected `detection_timeout` seconds later, and
are then released and requeued whole (original submit time, attempts + 1); the node comes back after
`repair_time`. Per job interruption the report gives time to detect (failure -> GPUs released), to
requeue (failure -> first cycle that sees the job pending again) and to restart (failure -> started
again); goodput = useful GPU-seconds / allocated GPU-seconds, where useful = work that counts towards
completion (completed work, work kept through evictions and checkpoints, progress of jobs still running
at the end) and allocated = GPU-seconds held by jobs (the allocation-rate integral).

Structure: `Replay` holds the simulated cluster (scheduler.sim.state.ClusterState), the event queues and
the per-job bookkeeping, and has one handler per event (arrival, completion, end of a grace period,
failure detection, node failure, node repair, scheduling cycle); what is measured goes to its `Ledger`
(scheduler.sim.ledger), which builds the report. `replay(...)` is `Replay(...).run()`.

Pure: no Django, no I/O. Units: seconds of simulated time, GPUs; wall times in seconds / milliseconds.
"""
from __future__ import annotations

import gc
import heapq
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, fields, replace
from functools import partial
from itertools import compress
from operator import attrgetter
from typing import Callable, NamedTuple

from clusterspec.spec import ClusterSpec, Trace
from scheduler.core import EngineCache, run_cycle
from scheduler.core.cycle import run_cycle as cycle_run
from scheduler.core.plugins.fairshare import decay_usage, queue_demand
from scheduler.core.plugins.feasibility import never_fits
from scheduler.core.plugins.quota import least_limit, queue_chain
from scheduler.core.snapshot import CycleConfig, CycleResult, QueueInfo, Snapshot
from scheduler.core.spares import plan_restart
from scheduler.sim.fairness import FairnessMeter, leaf_teams, snapshot_fair_share
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.ledger import Ledger
from scheduler.sim.report import ReplayReport, queueing_summary, tier_capacity
from scheduler.sim.state import ClusterState, job_info, queue_infos

Engine = Callable[[Snapshot, CycleConfig], CycleResult]
_terminal = attrgetter("terminal")

# Replay._decay builds QueueInfo positionally (dataclasses.replace costs ~3x as much, once per queue per
# cycle): a field added to QueueInfo must be added there too, and this says so at import
assert [f.name for f in fields(QueueInfo)] == ["name", "parent", "weight", "quotas", "state", "recent_usage"]
# ... through its slots' descriptors (the frozen dataclass's __init__ calls object.__setattr__ per field: 1.4 vs
# 0.7 us a QueueInfo); the same fields, values and equality as QueueInfo(name, ..., recent_usage)
_queue_slots = tuple(getattr(QueueInfo, f.name).__set__ for f in fields(QueueInfo))


def _with_usage(q: QueueInfo, recent: dict) -> QueueInfo:
    """A copy of `q` whose recent_usage is `recent` (QueueInfo(q.name, ..., q.state, recent))."""
    new = object.__new__(QueueInfo)
    name, parent, weight, quotas, state, usage = _queue_slots
    name(new, q.name)
    parent(new, q.parent)
    weight(new, q.weight)
    quotas(new, q.quotas)
    state(new, q.state)
    usage(new, recent)
    return new


class Progress(NamedTuple):
    """Passed to the `progress` callback after every cycle. now: simulated seconds."""

    now: float
    submitted: int
    started: int
    finished: int
    pending: int
    cycles: int


def replay(
    cluster: ClusterSpec,
    trace: Trace,
    *,
    config: CycleConfig | None = None,
    engine: Engine | None = None,
    cycle_interval: float = 60.0,
    until: float | None = None,
    grace_period: float = 30.0,
    time_limit_factor: float | None = None,
    failures: FailureModel | None = None,
    checkpoint: Checkpointing | None = None,
    fairness: bool = True,
    progress: Callable[[Progress], None] | None = None,
    migratable: Callable | None = None,
    restart_cost: float = 0.0,
    spares: int = 0,
    interruptible: Callable | None = None,
    start: float | None = None,
) -> ReplayReport:
    """Replay `trace` on `cluster` with `engine` and return what was measured.

    engine: the scheduling engine, called as engine(snapshot, config) once per cycle; None = the real one
        (run_cycle) with an EngineCache of this replay's own, so replays never share engine caches.
    until: stop at this many seconds of trace time (jobs submitted later are never seen); the span ends there.
    start: where the span begins, in seconds of trace time: the simulated span (until - start), the allocation
        rate and the GPU-hour ledger count from it (the cluster is idle up to the first arrival; the mean
        fragmentation rate is the cycles' own, from the first cycle on). None = the first arrival. `manage.py
        replay` passes 0, its window's start (--start, re-based), so that `--until 2` is a span of 2 days, not 2
        days less the time to the first arrival (new-user trial 13, F14a: "1.85 days"). A start after the first
        arrival counts as the first arrival.
    cycle_interval: the least simulated time between two cycles, in seconds.
    grace_period: seconds an evicted job keeps its GPUs (state "preempting") before they are freed; a
        whole-gang victim is then requeued with its original submit time and resumes with the work it
        had left when evicted (it checkpointed in the grace period).
    time_limit_factor: None = jobs declare no time limit (backfill cannot reserve); x = every job
        declares x times its trace duration (1.0 = exact estimates).
    failures: inject node failures (rate, detection timeout, repair time, seed); None = none.
    checkpoint: periodic checkpoints (interval, cost per checkpoint); None = none (a failed job loses its
        whole attempt; without failures, checkpoints only cost their stalls).
    fairness: measure Jain's index of usage / fair share per cycle (costs a fair-share computation per
        cycle when the engine does not report one, e.g. plain FIFO).
    migratable: trace job -> JobInfo fields for rescheduling ({"migratable": True, "min_run_before_move":
        s, "checkpoint_grace": s}) or None (no job may be moved). A moved job's eviction lasts its
        checkpoint grace (or `grace_period`); it restarts on the place held for it.
    restart_cost: seconds of work a moved job redoes when it restarts (reading its checkpoint back).
    spares: hot spare nodes per rack (spare_groups: the domain above a node's own NVLink domain). The
        engine places only interruptible jobs on a spare (scheduler.core.spares); when a failure is
        detected, the failed gang restarts at once on its old placement with each failed node replaced
        by a spare (core.spares.plan_restart: same flavor, its rack's first, idle before occupied),
        without waiting for a cycle, and the interruptible jobs holding the GPUs it needs there are stopped
        at once (no grace: the work since their last checkpoint is lost_work) and requeued whole; the spare
        joins the ready nodes and the first repaired node of that rack becomes a spare in its place (the
        pool keeps its size). The spares' idle GPUs are `held` in the GPU-hour ledger (reserved for
        recovery); GPUs running interruptible jobs there are used.
    interruptible: trace job -> whether it may be stopped at once (JobInfo.interruptible: it may run on
        spares); None = no job is.
    Raises AssertionError when the engine binds a GPU twice, a job that is not pending or part of a gang
    (scheduler.sim.state), or evicts a job that is not running.
    """
    return Replay(cluster, trace, config=config, engine=engine, cycle_interval=cycle_interval, until=until,
                  grace_period=grace_period, time_limit_factor=time_limit_factor, failures=failures,
                  checkpoint=checkpoint, fairness=fairness, progress=progress, migratable=migratable,
                  restart_cost=restart_cost, spares=spares, interruptible=interruptible, start=start).run()


class Replay:
    """One replay (arguments as `replay`'s). `run()` plays every event and returns the report; each event
    has its handler: `arrive`, `complete`, `end_grace`, `detect`, `fail_node`, `repair_node`, `cycle`.

    Job events are (time, seq, kind, job id, payload): "done" (a completion, stale unless seq ==
    live[job]), "grace" (end of a grace period; payload = evicted tasks, () = whole gang), "detect" (a
    failure is noticed; payload = the attempt that failed). Node events are (time, seq, kind, node):
    "fail", "repair". seq orders events of equal time by when they were scheduled."""

    def __init__(self, cluster: ClusterSpec, trace: Trace, *, config: CycleConfig | None = None,
                 engine: Engine | None = None, cycle_interval: float = 60.0, until: float | None = None,
                 grace_period: float = 30.0, time_limit_factor: float | None = None,
                 failures: FailureModel | None = None, checkpoint: Checkpointing | None = None,
                 fairness: bool = True, progress: Callable[[Progress], None] | None = None,
                 migratable: Callable | None = None, restart_cost: float = 0.0, spares: int = 0,
                 interruptible: Callable | None = None, start: float | None = None):
        self.wall0 = time.perf_counter()
        self.config = config = config or CycleConfig()
        if engine is None or engine is run_cycle:  # the engine's own function (scheduler.core's defers its import)
            engine = partial(cycle_run, cache=EngineCache())
        self.engine = engine
        self.ckpt = checkpoint or Checkpointing()
        self.gang = getattr(engine, "gang", True)  # False: the engine may bind part of a job (ClusterState.bind)
        # True: the engine is called every cycle, a settled one too (Replay.settled; sim.digest's recording engine)
        self.every_cycle = getattr(engine, "every_cycle", False)
        self.cycle_interval, self.until, self.grace_period = cycle_interval, until, grace_period
        self.time_limit_factor, self.failures, self.progress = time_limit_factor, failures, progress
        self.migratable, self.restart_cost = migratable, restart_cost
        self.interruptible = interruptible
        self.moves: list = []  # rescheduling's moves (core.snapshot.Move), fed back to the engine
        self.moved: set = set()  # jobs being moved (evicted by "reschedule", not yet released)
        self.resched = {"moves": 0, "moved_gpus": 0, "grace_gpu_hours": 0.0, "restart_gpu_hours": 0.0,
                        "waits_32_plus": [], "largest_runnable": {}, "span": 0.0, "last": None}
        jobs = sorted(trace.jobs, key=lambda j: (j.submit, j.id))
        if until is not None:
            jobs = [j for j in jobs if j.submit <= until]
        self.jobs = jobs
        self.by_id = {j.id: j for j in jobs}
        assert len(self.by_id) == len(jobs), "trace job ids must be unique"
        known = {q.name for q in cluster.queues}
        missing = {j.queue for j in jobs} - known
        team_of = {q.name: (q.team or q.name) for q in cluster.queues}
        self.state = state = ClusterState(cluster, queue_infos(cluster, missing))
        capacity = tier_capacity(cluster)
        report = ReplayReport(
            cluster=cluster.name, trace=trace.name, cluster_gpus=state.capacity, cluster_nodes=len(cluster.nodes),
            cycle_interval=cycle_interval, until=until, jobs_in_trace=len(trace.jobs), tier_capacity=capacity,
            config=asdict(config),
        )
        if missing:
            report.notes.append(f"queues used by the trace but absent from the cluster, added without quota: "
                                f"{sorted(missing)}")
        self.report = report
        self.meter = None
        if fairness:
            teams = leaf_teams(cluster.queues)
            teams.update({name: name for name in missing})
            self.meter = FairnessMeter(teams)
        # several GPU models: a job's demand counts on each flavor it may take, so the meter caps each queue's fair
        # share at its demand in GPUs (fairshare.queue_demand); one model needs no cap (and no pass over the jobs)
        self.multi_flavor = len({n.flavor for n in cluster.nodes}) > 1
        self.capped = _capped_leaves(state.queues, {n.flavor for n in cluster.nodes})
        self.may_fit: dict[tuple, bool] = {}  # a job's shape -> not statically never-fitting (refused_by_limits)
        first = jobs[0].submit if jobs else 0.0
        self.start = start = first if start is None else min(start, first)  # where the span begins (`replay`)
        self.ledger = Ledger(report, start=start, team_of=team_of, checkpoint=self.ckpt, tier_capacity=capacity)
        self.last_event = start  # time of the latest arrival, completion, release or detection processed
        self.events: list[tuple] = []
        self.node_events: list[tuple] = []
        self.seq = 0
        self.live: dict[str, int] = {}  # job id -> seq of its pending completion event
        self.left: dict[str, float] = {}  # job id -> seconds of work still to do when (re)started
        self.attempt_no: dict[str, int] = {}  # job id -> number of its current (or last) attempt
        self.decayed_at: float | None = None  # when recent_usage was last folded (seconds)
        self.grace_seq: dict[str, int] = {}  # job id -> seq of its pending "grace" event (the eviction in force)
        self.evict_rule: dict[str, str] = {}  # job id -> rule of the eviction in its grace period
        self.evicted_at: dict[str, float] = {}  # job id -> time of its whole-gang eviction, during the grace period
        self.failed: dict[str, dict] = {}  # job id -> interruption record, while the failure is undetected
        self.awaiting_requeue: dict[str, dict] = {}  # released after a failure, not yet seen pending by a cycle
        self.awaiting_restart: dict[str, dict] = {}  # requeued after a failure, not yet started again
        self.arrival = 0  # index in jobs of the next arrival
        self.last_cycle = -math.inf
        self.rerun = False
        self.last_pending: dict | None = {}  # None: the last cycle was settled (`settled`): worked out at the close
        self.last_result: CycleResult | None = None
        self.last_fair: dict | None = None  # the last engine cycle's fair shares, for the fairness meter
        self.settled_until: float | None = None  # the last engine cycle's CycleResult.settled_until
        self.settled_at: tuple | None = None  # (time, queues) of the last settled cycle's state
        self.streams = failures.streams(cluster.nodes) if failures is not None and failures.rate > 0 else {}
        for node in cluster.nodes:
            if node.name in self.streams:
                self._push_node(self.streams[node.name].next_failure(start), "fail", node.name)
        if spares < 0:
            raise ValueError(f"spares must be >= 0 per rack, got {spares}")
        self.group_of = spare_groups(cluster)
        self.flavor_of = {n.name: n.flavor for n in cluster.nodes}
        self.node_gpus = {n.name: n.gpus for n in cluster.nodes}
        self.spare_pool: dict[str, list[str]] = {}  # rack -> its spares, in cluster order
        self.spare_target = spares
        self.spare_clock = self.start  # the last time _advance counted the spares' busy GPUs
        self.spare_stats = {"per_rack": spares, "racks": len(set(self.group_of.values())), "nodes": 0, "gpus": 0,
                            "restarts_on_spare": 0, "restarts_without_spare": 0, "stopped_on_spare": 0,
                            "stopped_gpu_hours": 0.0, "interruptible_gpu_hours_on_spares": 0.0}
        if spares:
            members: dict[str, list[str]] = {}
            for n in cluster.nodes:
                members.setdefault(self.group_of[n.name], []).append(n.name)
            for group, names in members.items():
                for name in names[-spares:] if len(names) > spares else []:  # a rack keeps a working node
                    self.state.set_spare(name, True)
                    self.spare_pool.setdefault(group, []).append(name)
            self.spare_stats["nodes"] = len(self.state.spare_nodes)
            self.spare_stats["gpus"] = self.state.spare_gpus
        report.spares = self.spare_stats

    # -- the event queues -------------------------------------------------------------------------
    def _push(self, when: float, kind: str, job_id: str, payload) -> int:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, job_id, payload))
        return self.seq

    def _push_node(self, when: float, kind: str, node: str) -> None:
        self.seq += 1
        heapq.heappush(self.node_events, (when, self.seq, kind, node))

    def _advance(self, to: float) -> None:
        state = self.state
        if state.spare_nodes:  # GPU-seconds of interruptible jobs on the spares (the capacity spares give back)
            busy = state.spare_gpus - state.spare_idle_gpus()
            self.spare_stats["interruptible_gpu_hours_on_spares"] += busy * max(0.0, to - self.spare_clock) / 3600.0
        self.spare_clock = to
        self.ledger.advance(to, state.used_gpus, down=state.down_unallocated_gpus() if state.down_nodes else 0,
                            held=state.partial_gpus + state.reserved_gpus() + (
                                state.spare_idle_gpus() if state.spare_nodes else 0),
                            waiting=bool(state.pending))

    def process_until(self, now: float) -> None:
        """Apply every job and node event up to `now`, in time order."""
        events, node_events = self.events, self.node_events
        while True:
            t_job = events[0][0] if events else math.inf
            t_node = node_events[0][0] if node_events else math.inf
            if min(t_job, t_node) > now:
                return
            if t_node < t_job:
                when, _, kind, node = heapq.heappop(node_events)
                self._advance(when)
                if kind == "fail":
                    self.fail_node(when, node)
                else:
                    self.repair_node(when, node)
                continue
            when, s, kind, job_id, payload = heapq.heappop(events)
            if kind == "done" and self.live.get(job_id) != s:
                continue  # the completion of a job evicted or failed since
            self._advance(when)
            self.last_event = max(self.last_event, when)
            if kind == "done":
                self.complete(when, job_id)
            elif kind == "detect":
                self.detect(when, job_id, payload)
            elif self.grace_seq.get(job_id) == s:  # else the eviction was withdrawn (or made again since)
                del self.grace_seq[job_id]
                self.end_grace(when, job_id, payload)

    # -- job events -------------------------------------------------------------------------------
    def arrive(self, job) -> None:
        """A trace job is submitted (TraceJob); it declares time_limit_factor x its duration, if set."""
        limit = None if self.time_limit_factor is None else job.duration * self.time_limit_factor
        info = job_info(job, limit)
        if self.migratable is not None:
            info = replace(info, **(self.migratable(job) or {}))
        if self.interruptible is not None and self.interruptible(job):
            info = replace(info, interruptible=True)
        self.state.submit(info)
        self.left[job.id] = job.duration
        self.last_event = max(self.last_event, job.submit)

    def complete(self, when: float, job_id: str) -> None:
        """A running job's work is done: its GPUs are freed."""
        info = self.state.running.get(job_id)
        self.ledger.credit(_gpus(info), self.left[job_id], when - info.start_time, info.start_time)
        self._finish(job_id, when)
        self.ledger.finished()

    def detect(self, when: float, job_id: str, attempt: int) -> None:
        """A failure of attempt `attempt` is noticed: the job is released and requeued whole (unless it
        was already, or has started again since)."""
        info = self.state.running.get(job_id)
        if job_id in self.failed and info is not None and self.attempt_no[job_id] == attempt:
            self._requeue_failed(job_id, when)

    def end_grace(self, when: float, job_id: str, tasks: tuple) -> None:
        """An eviction's grace period ends: a whole gang is released and requeued with the work it had left
        (it checkpointed in the grace period); evicted surplus tasks are released and the job runs on."""
        state, ledger = self.state, self.ledger
        info = state.running.get(job_id)
        if info is None:
            return  # it completed during its grace period
        whole = not tasks or {(t.role, t.index) for t in info.placement} <= set(tasks)
        if job_id in self.failed:  # its node failed during the grace period: it leaves now, without its work
            if whole:
                self._requeue_failed(job_id, when)
            else:
                state.shrink(job_id, set(tasks))
            return
        if whole:
            elapsed = self.evicted_at.pop(job_id, when - self.grace_period) - info.start_time
            done = self.ckpt.progress(elapsed)
            ledger.credit(_gpus(info), done, elapsed, info.start_time)
            ledger.lose("grace", _gpus(info) * (when - info.start_time - elapsed), _gpus(info), when)
            self.left[job_id] = max(0.0, self.left[job_id] - done)
            if job_id in self.moved:  # a move: it checkpointed in its grace, and reads the checkpoint back
                self.moved.discard(job_id)
                self.left[job_id] += self.restart_cost
                self.resched["grace_gpu_hours"] += _gpus(info) * (when - info.start_time - elapsed) / 3600.0
                self.resched["restart_gpu_hours"] += _gpus(info) * self.restart_cost / 3600.0
            self._finish(job_id, when)
            state.requeue(info)
            ledger.requeued()
        else:
            _, freed = state.shrink(job_id, set(tasks))
            ledger.account(info, freed, when)
            ledger.credit(freed, self.ckpt.progress(when - info.start_time), when - info.start_time, info.start_time)

    def _finish(self, job_id: str, end: float) -> None:
        info = self.state.release(job_id)
        self.live.pop(job_id, None)
        self.ledger.account(info, _gpus(info), end)

    def _requeue_failed(self, job_id: str, when: float) -> None:
        record = self.failed.pop(job_id)
        info = self.state.running[job_id]
        self.ledger.lose("undetected", _gpus(info) * (when - record["failed"]), _gpus(info), when)
        record["detected"] = when
        self._finish(job_id, when)
        self.state.requeue(info)
        if self.spare_target and self._restart_on_spare(job_id, info.placement, when):
            record["requeued"] = record["restarted"] = when
            self.spare_stats["restarts_on_spare"] += 1
            return
        if self.spare_target:
            self.spare_stats["restarts_without_spare"] += 1
        self.awaiting_requeue[job_id] = record

    def _restart_on_spare(self, job_id: str, placement: tuple, when: float) -> bool:
        """Bind the requeued gang at once on its old placement, each down node replaced by a spare
        (scheduler.core.spares.plan_restart), stopping at once the interruptible jobs holding the GPUs it
        needs there. False, changing nothing, when no plan fits."""
        state = self.state
        if not any(t.node in state.down_nodes for t in placement):
            return False
        snap = state.snapshot(when)
        running = [replace(j, interruptible=False) if j.id in self.failed or j.state == "preempting" else j
                   for j in state.running.values()]  # a job failed or being evicted is not stopped again
        plan = plan_restart(job_id, placement, state.down_nodes, snap.nodes, running, self.group_of)
        if plan is None:
            return False
        for victim in plan.stop:
            self._stop_now(victim, when)
        for spare in plan.swap.values():
            self.spare_pool[self.group_of[spare]].remove(spare)
            state.set_spare(spare, False)
        self._start(plan.binding, when)
        return True

    def _stop_now(self, job_id: str, when: float) -> None:
        """Stop an interruptible job at once (no grace) for a gang's restart on its spare: it keeps the work
        of its last checkpoint, loses the rest (lost_work) and is requeued whole."""
        info = self.state.running[job_id]
        gpus = _gpus(info)
        elapsed = when - info.start_time
        saved = self.ckpt.saved(elapsed)
        self.ledger.credit(gpus, saved, elapsed, info.start_time)
        lost = gpus * (self.ckpt.progress(elapsed) - saved)
        self.ledger.lose("lost_work", lost, gpus, when)
        self.left[job_id] = max(0.0, self.left[job_id] - saved)
        self.spare_stats["stopped_on_spare"] += 1
        self.spare_stats["stopped_gpu_hours"] += lost / 3600.0
        self.moved.discard(job_id)
        self._finish(job_id, when)
        self.state.requeue(info)
        self.ledger.requeued()
        self.ledger.evicted("spare")

    # -- node events ------------------------------------------------------------------------------
    def fail_node(self, when: float, node: str) -> None:
        """A node fails: its jobs lose the work since their last checkpoint and hold their GPUs until the
        failure is detected `detection_timeout` s later; the node is repaired `repair_time` s later."""
        state, ledger, ckpt = self.state, self.ledger, self.ckpt
        if node in state.spare_nodes:  # a spare that fails leaves the pool; a repaired node refills it
            self.spare_pool[self.group_of[node]].remove(node)
            state.set_spare(node, False)
        state.set_node_state(node, "not_ready")
        hit = [j for j in state.jobs_on(node) if j not in self.failed]
        ledger.node_failed(bool(hit))
        for job_id in hit:
            info = state.running[job_id]
            gpus = _gpus(info)
            elapsed = (self.evicted_at[job_id] if job_id in self.evicted_at else when) - info.start_time
            saved = ckpt.saved(elapsed)
            ledger.credit(gpus, saved, elapsed, info.start_time)
            ledger.lose("lost_work", gpus * (ckpt.progress(elapsed) - saved), gpus, info.start_time + elapsed)
            self.left[job_id] = max(0.0, self.left[job_id] - saved)
            self.evicted_at.pop(job_id, None)
            self.live.pop(job_id, None)  # it will not complete
            self.failed[job_id] = ledger.interrupted({"job": job_id, "node": node, "failed": when, "gpus": gpus,
                                                      "detected": None, "requeued": None, "restarted": None})
            self._push(when + self.failures.detection_timeout, "detect", job_id, self.attempt_no[job_id])
        self._push_node(when + self.failures.repair_time, "repair", node)

    def repair_node(self, when: float, node: str) -> None:
        """A failed node is back; its next failure is drawn from its stream. It refills its rack's spare
        pool when that is short (a spare used for a restart, or one that failed)."""
        self.state.set_node_state(node, "ready")
        pool = self.spare_pool.setdefault(self.group_of[node], [])
        if len(pool) < self.spare_target and not self.state._used[node]:
            self.state.set_spare(node, True)
            pool.append(node)
        self._push_node(self.streams[node].next_failure(when), "fail", node)

    # -- cycles -----------------------------------------------------------------------------------
    def cycle(self, now: float) -> CycleResult:
        """Run the engine on the state at `now` and apply its result: starts, evictions, holds, rejections."""
        state = self.state
        self._seen_requeued(now)
        t0 = time.perf_counter()
        snapshot = state.snapshot(now)
        if self.config.reschedule or self.config.reschedule_advice:
            window = self.config.reschedule_window
            self.moves = [m for m in self.moves if now - m.time < window]
            snapshot = replace(snapshot, cycle=self.report.cycles, recent_moves=tuple(self.moves))
        t1 = time.perf_counter()
        result = self.engine(snapshot, self.config)
        t2 = time.perf_counter()
        for binding in result.bindings:
            self._start(binding, now)
        for binding in getattr(result, "growths", ()):
            self._grow(binding, now)
        for ev in getattr(result, "evictions", ()):
            self._evict(ev, now)
        for w in getattr(result, "withdrawals", ()):
            self._withdraw(w, now)
        for move in getattr(result, "moves", ()):
            self.moves.append(move)
            self.resched["moves"] += 1
            self.resched["moved_gpus"] += move.gpus
        state.set_holds({n.job_id: n.tasks for n in getattr(result, "nominations", ())})
        pending = result.pending
        terminal = getattr(result, "terminal", None)  # the engine's list, else every reason read (C level)
        rejected = set()
        for job_id in compress(pending, map(_terminal, pending.values())) if terminal is None else terminal:
            if job_id in state.pending:
                job = state.drop(job_id)
                self.awaiting_restart.pop(job_id, None)
                self.ledger.rejected(pending[job_id].code, job.queue)
                rejected.add(job_id)
        fair = None
        if self.meter is not None:
            # the shares that hold from now to the next cycle: a job rejected now has no demand after it (new-user
            # trial 13, F14b: a team whose only job was rejected kept its share of the cluster until the next cycle)
            fair = snapshot_fair_share(snapshot, rejected) if rejected else (
                result.fair_share or snapshot_fair_share(snapshot))
        self._cycle_done(now, result, fair, (t1 - t0) * 1e3, (t2 - t1) * 1e3, t2)
        self.rerun = bool(result.bindings) and bool(state.pending)
        self.last_pending = result.pending
        self.last_result, self.last_fair = result, fair
        self.settled_until = getattr(result, "settled_until", None)
        return result

    def _seen_requeued(self, now: float) -> None:
        """The jobs released after a failure are seen pending again by the cycle at `now` (time to requeue)."""
        for job_id, record in self.awaiting_requeue.items():
            record["requeued"] = now
            self.awaiting_restart[job_id] = record
        self.awaiting_requeue.clear()

    def _cycle_done(self, now: float, result: CycleResult, fair: dict | None, snapshot_ms: float,
                    engine_ms: float | None, t2: float) -> None:
        """What every cycle at `now` ends with, its result applied: the queues' usage decayed, the fairness meter
        (fair: the cycle's fair shares, None with the meter off), the ledger's cycle (engine_ms None: a settled
        cycle, no engine call; apply time from t2, a perf_counter reading) and the largest runnable job."""
        state = self.state
        self._decay(now, result)
        t3 = time.perf_counter()
        if fair is not None:
            demand = state.used_gpus + state.counts.pending_gpus  # + GPUs requested by the pending jobs
            caps = queue_demand(state.pending.values(), state.queue_used) if self.multi_flavor else None
            self.meter.observe(now, fair, state.queue_used, demand, state.capacity - state.down_gpus, caps)
        self.ledger.cycle(now, result.metrics.get("fragmentation_rate"), snapshot_ms, engine_ms, (t3 - t2) * 1e3)
        self._observe_largest(now, result.metrics.get("largest_runnable"))
        self.last_cycle = now

    def settled(self, now: float) -> bool | str:
        """Whether the cycle due at `now` is the last one's fixed point: nothing happened since it (no arrival, job
        or node event up to `now`) and `now` is before its CycleResult.settled_until, so the engine would start,
        evict and hold nothing new (core.cycle.settled_until). "arrivals": the same but for jobs that arrive up to
        `now`, settled too when `refused_by_limits` holds for them once they are in. Never for an engine that is
        to see every cycle (`every_cycle`)."""
        until = self.settled_until
        if until is None or now >= until or self.every_cycle:
            return False
        if self.events and self.events[0][0] <= now or self.node_events and self.node_events[0][0] <= now:
            return False
        if self.arrival < len(self.jobs) and self.jobs[self.arrival].submit <= now:
            return "arrivals" if self.capped is not None and self.meter is None else False
        return True

    def refused_by_limits(self, arrived: list) -> bool:
        """Whether a cycle on the last engine cycle's fixed point (`settled`) plus the pending jobs `arrived` (trace
        jobs, arrived since) still decides nothing new: each new job is refused by its own queue's limit at the
        usage that cycle left (CycleResult.metrics["queue_usage"]: running tasks and standing holds; nothing started
        or ended since), and adds nothing a rule of core.cycle.settled_until reads:
        - its queue is a leaf whose limit for the cluster's one flavor is set and at most its quota, as every leaf's
          (`capped`, a static property: no queue can borrow, so no reclaim acts, for this job or another);
        - its minimum GPUs fit within every limit of its chain (not never_fits_queue_limit) and the cluster may hold
          it (feasibility.never_fits, the engine's static rule, checked before the headroom): no terminal reason;
        - no sharing, no time limit, no elastic role, and with preemption on, every pending job still has one
          priority and no running preemptible job is below it (jobindex.JobCounts after the arrivals);
        the fairness meter is off (its shares would take the new demand) and the cluster has one flavor.
        A refused job changes no free GPU, usage or hold, and the order of the other (all refused) attempts changes
        no refusal; the pending reasons of a settled last cycle are worked out at the close (`_close`)."""
        counts, capped = self.state.counts, self.capped
        if counts.sharing_jobs or counts.pending_timed or counts.pending_elastic or self.last_result is None:
            return False
        if self.config.preemption:
            priorities = counts.pending_priorities
            if len(priorities) != 1:
                return False
            if counts.preemptible_priorities and min(counts.preemptible_priorities) < next(iter(priorities)):
                return False
        usage = self.last_result.metrics.get("queue_usage")
        if usage is None:
            return False
        flavor, limits = capped
        pending = self.state.pending
        for trace_job in arrived:
            job = pending.get(trace_job.id)
            bounds = limits.get(job.queue) if job is not None else None
            if bounds is None or job.not_before is not None or job.reserved:
                return False
            own, chain = bounds
            need = job.gpus_min
            if need > chain or usage.get(job.queue, {}).get(flavor, 0) + need <= own:
                return False
            shape = (job.roles, job.topology_mode, job.highest_tier, job.numa)
            fits = self.may_fit.get(shape)
            if fits is None:
                fits = self.may_fit[shape] = never_fits(
                    self.state.static_nodes(), self.state.domains, job.roles, topology_mode=job.topology_mode,
                    highest_tier=job.highest_tier, numa=job.numa) is None
            if not fits:
                return False
        return True

    def settled_cycle(self, now: float) -> None:
        """The cycle at `now` when `settled(now)`: what `cycle` does with the engine's answer, without the engine.
        The engine would start, evict, grow, withdraw and nominate nothing (its holds are the standing ones) and give
        no terminal reason; its state is the last cycle's end state (that cycle dropped no job: settled_until), so
        its fair shares and metrics are the last cycle's, taken on that state. Only its pending reasons may word a
        refusal otherwise (a job refused by its queue's limit where the last cycle found no room first): those are
        worked out at the close if it is the last cycle (`_close`), from its state. A subclass whose `cycle` does
        more (forecast.accuracy's sampling) says when in `settled`."""
        self._seen_requeued(now)
        self.settled_at = (now, self.state.queues)
        self._cycle_done(now, self.last_result, self.last_fair, 0.0, None, time.perf_counter())
        self.rerun = False
        self.last_pending = None

    def _decay(self, now: float, result: CycleResult) -> None:
        """Keep every queue's decayed usage (QueueInfo.recent_usage) as the platform does after each cycle
        (gpuplatform.scheduling.usage_decay), so the next snapshot orders queues by it; off when the config's
        usage_half_life is None."""
        half_life = self.config.usage_half_life
        if not half_life:
            return
        usage = result.metrics.get("queue_usage", {})
        elapsed = now - self.decayed_at if self.decayed_at is not None else half_life * 50
        self.decayed_at = now
        # decay_usage's factors, once per cycle (the same expressions: the same floats)
        keep = 0.5 ** (max(elapsed, 0.0) / half_life) if half_life > 0 else 0.0
        fresh = 1 - keep
        queues = []
        for q in self.state.queues:
            old = q.recent_usage
            current = usage.get(q.name)
            if not old and not current:  # decay_usage gives {}: the same QueueInfo
                queues.append(q)
                continue
            if current and len(current) == 1 and (not old or (len(old) == 1 and old.keys() == current.keys())):
                for f in current:  # decay_usage's one-flavor branch, inlined
                    recent = {f: old.get(f, 0.0) * keep + current[f] * fresh}
            else:
                recent = decay_usage(old, current or {}, elapsed, half_life)
            # the same figures in the same order (an idle queue's, or a fixed point): the same QueueInfo
            same = recent == old and (len(recent) < 2 or list(recent) == list(old))
            queues.append(q if same else _with_usage(q, recent))
        self.state.queues = tuple(queues)

    def _start(self, binding, now: float) -> None:
        state = self.state
        if state.bind(binding, now, gang=self.gang) is None:
            return  # some tasks bound, holding their GPUs; the job starts when all are
        if not self.gang:  # the whole placement, earlier partial bindings included
            binding = replace(binding, tasks=state.running[binding.job_id].placement)
        job = self.by_id[binding.job_id]
        self.live[job.id] = self._push(now + self.ckpt.wall(self.left[job.id]), "done", job.id, None)
        self.attempt_no[job.id] = self.attempt_no.get(job.id, 0) + 1
        if state.running[job.id].attempts:
            self.ledger.restarted()
            record = self.awaiting_restart.pop(job.id, None)
            if record is not None:
                record["restarted"] = now
            return
        self.ledger.started(job.tasks * job.gpus_per_task, now - job.submit, binding.tasks, binding.tier)
        if job.tasks * job.gpus_per_task >= 32:
            self.resched["waits_32_plus"].append(now - job.submit)

    def _observe_largest(self, now: float, largest: dict | None) -> None:
        """Time-weight the largest runnable job per tier (the value a cycle reports holds until the next)."""
        r = self.resched
        if r["last"] is not None:
            at, values = r["last"]
            for tier, v in values.items():
                r["largest_runnable"][tier] = r["largest_runnable"].get(tier, 0.0) + v * (now - at)
            r["span"] += now - at
        r["last"] = (now, dict(largest or {}))

    def rescheduling_summary(self) -> dict:
        """Moves, GPUs moved, GPU-hours lost to their checkpoint grace and restarts, the time-weighted mean
        largest runnable job per tier (GPUs) and the queueing of jobs of 32 GPUs and more (seconds)."""
        r = self.resched
        span = r["span"]
        return {"moves": r["moves"], "moved_gpus": r["moved_gpus"], "grace_gpu_hours": r["grace_gpu_hours"],
                "restart_gpu_hours": r["restart_gpu_hours"],
                "largest_runnable_mean": {t: v / span for t, v in sorted(r["largest_runnable"].items())} if span else {},
                "queueing_32_plus": queueing_summary(r["waits_32_plus"])}

    def _evict(self, ev, now: float) -> None:
        state = self.state
        info = state.running.get(ev.job_id)
        assert info is not None, f"engine evicted job {ev.job_id!r}, which is not running"
        if info.state == "preempting":
            return
        grace = self.grace_period if getattr(ev, "grace", None) is None else ev.grace
        state.mark_preempting(ev.job_id, ev.beneficiary, deadline=now + grace)  # a forecast from here reads it
        self.evict_rule[ev.job_id] = ev.rule
        whole = not ev.tasks or {(t.role, t.index) for t in info.placement} <= set(ev.tasks)
        if whole and ev.job_id not in self.failed:
            self.evicted_at[ev.job_id] = now
            if self.ckpt.wall(self.left[ev.job_id]) - (now - info.start_time) > grace:
                self.live.pop(ev.job_id, None)  # it will not complete; it is requeued after the grace period
                if ev.rule == "reschedule":
                    self.moved.add(ev.job_id)
        self.grace_seq[ev.job_id] = self._push(now + grace, "grace", ev.job_id, tuple(ev.tasks))
        self.ledger.evicted(ev.rule)

    def _withdraw(self, w, now: float) -> None:
        """An eviction in its grace period is taken back (its beneficiary left): the job runs on, its
        completion is due again when its work is done, and the eviction is not counted."""
        state = self.state
        info = state.running.get(w.job_id)
        if info is None or info.state != "preempting":
            return
        state.withdraw(w.job_id)
        self.grace_seq.pop(w.job_id, None)
        self.evicted_at.pop(w.job_id, None)
        if w.job_id not in self.live and w.job_id not in self.failed:
            due = max(now, info.start_time + self.ckpt.wall(self.left[w.job_id]))
            self.live[w.job_id] = self._push(due, "done", w.job_id, None)
        self.ledger.withdrawn(self.evict_rule.pop(w.job_id, "reclaim"))

    def _grow(self, binding, now: float) -> None:
        """New tasks of a running elastic job (the engine's growths): their GPU-seconds count from now."""
        info = self.state.grow(binding)
        self.ledger.account(info, -sum(len(t.gpus) for t in binding.tasks), now)

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> ReplayReport:
        """Play every event up to `until` (or until nothing is left to happen) and return the report."""
        with _long_run_gc():
            return self._run()

    def _run(self) -> ReplayReport:
        jobs, state, interval = self.jobs, self.state, self.cycle_interval
        while True:
            next_job = min(
                jobs[self.arrival].submit if self.arrival < len(jobs) else math.inf,
                self.events[0][0] if self.events else math.inf,
                self.last_cycle + interval if self.rerun else math.inf,
            )
            next_node = self.node_events[0][0] if self.node_events else math.inf
            if next_job == math.inf and not state.running:
                # Nothing left to run: node events matter only to pending jobs waiting for a repair, and
                # only until every node down at the last job event is back.
                if not (state.pending and state.down_gpus) or next_node > self.last_event + self.failures.repair_time:
                    next_node = math.inf
            next_event = min(next_job, next_node)
            if next_event == math.inf:
                break
            now = max(next_event, self.last_cycle + interval)
            if self.until is not None and now > self.until:
                break
            settled = self.settled(now)  # (before this interval's events: settled when there are none)
            first = self.arrival
            self.process_until(now)
            if self.arrival < len(jobs) and self.ledger.clock < jobs[self.arrival].submit <= now:
                # the books up to this batch's first arrival, before it: nothing of it waited earlier (the time
                # from the span's start to the first arrival is free, not free_fragmented: replay(start=))
                self._advance(jobs[self.arrival].submit)
            while self.arrival < len(jobs) and jobs[self.arrival].submit <= now:
                self.arrive(jobs[self.arrival])
                self.arrival += 1
            self._advance(now)
            if settled == "arrivals":
                settled = self.refused_by_limits(jobs[first:self.arrival])
            if settled:
                self.settled_cycle(now)
            else:
                self.cycle(now)
            if self.progress is not None:
                report = self.report
                self.progress(Progress(now, self.arrival, report.jobs_started, report.jobs_finished,
                                       len(state.pending), report.cycles))
        return self._close()

    def _close(self) -> ReplayReport:
        """Close the books at `until`, or at the last arrival, completion, release or detection: jobs still
        running are credited with their progress and released, then the ledger fills the report."""
        state, ledger = self.state, self.ledger
        if self.last_pending is None:  # the last cycle was settled: its reasons, from the state it saw
            at, queues = self.settled_at
            decayed, state.queues = state.queues, queues
            snapshot = state.snapshot(at)
            state.queues = decayed
            self.last_pending = self.engine(snapshot, self.config).pending
        end = self.last_event if self.until is None else max(self.until, ledger.clock)
        self.process_until(end)
        self._advance(end)
        if self.meter is not None:
            self.meter.close(end)
        self.report.jobs_running_at_end = len(state.running)
        for job_id in list(state.running):
            info = state.running[job_id]
            if job_id in self.failed:  # failed, not yet detected: its saved work was counted at the failure
                ledger.lose("undetected", _gpus(info) * (end - self.failed[job_id]["failed"]), _gpus(info), end)
            else:
                elapsed = self.evicted_at.get(job_id, end) - info.start_time
                ledger.credit(_gpus(info), self.ckpt.progress(elapsed), elapsed, info.start_time)
                ledger.lose("grace", _gpus(info) * (end - info.start_time - elapsed), _gpus(info), end)
            self._finish(job_id, end)
        failures = None
        if self.failures is not None:
            failures = failure_summary(self.failures, ledger.interruptions, ledger.node_failures,
                                       ledger.node_failures_hitting_jobs)
        self._observe_largest(end, None)
        report = ledger.close(end, submitted=self.arrival, pending=state.pending, last_pending=self.last_pending,
                              capacity_gpus=state.capacity, fairness=self.meter.summary() if self.meter else None,
                              failures=failures, wall_seconds=time.perf_counter() - self.wall0)
        report.rescheduling = self.rescheduling_summary()
        return report


_gc_lock = threading.Lock()
_gc_runs = 0  # replays running in this process (threads): the first freezes, the last unfreezes


@contextmanager
def _long_run_gc():
    """What exists when a replay starts (the trace, the cluster, the process's modules) is frozen for its
    duration (gc.freeze: the collector's full passes no longer traverse it; gc.unfreeze hands it back to the
    oldest generation at the end). Decisions do not depend on it. Philly days 28-39 (10,049 cycles, process
    time in gc.callbacks): collections 0.89 s of 12.7 s -> 0.66 s, full ones 0.46 -> 0.22 s; a young
    generation of 20,000 instead of 700 saved nothing more (fewer but longer young passes), so the thresholds
    stay Python's (benchmarks/RESULTS.md, issue 16, philly16)."""
    global _gc_runs
    with _gc_lock:
        _gc_runs += 1
        if _gc_runs == 1:
            gc.freeze()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_runs -= 1
            if _gc_runs == 0:
                gc.unfreeze()


def spare_groups(cluster: ClusterSpec) -> dict[str, str]:
    """node name -> its rack for the spare pool: the parent of the node's own domain when that is a tier-1
    (NVLink) domain, else the node's domain ("" when it has none)."""
    parent = {d.name: (d.tier, d.parent) for d in cluster.domains}
    out = {}
    for n in cluster.nodes:
        tier, up = parent.get(n.domain, (None, None))
        out[n.name] = (up or n.domain or "") if tier == 1 else (n.domain or "")
    return out


def _capped_leaves(queues, flavors: set) -> tuple[str, dict[str, tuple[int, int]]] | None:
    """(the flavor, {leaf queue: (its limit, the least limit of its chain)}) when the cluster has one GPU flavor and
    every leaf queue has a limit for it at most its quota: then no queue can ever borrow (usage <= limit <= quota
    <= entitlement at every leaf, and an inner queue's usage is its children's); else None (Replay.refused_by_limits
    is not tried). Units: GPUs."""
    if len(flavors) != 1:
        return None
    (flavor,) = flavors
    by_name = {q.name: q for q in queues}
    parents = {q.parent for q in queues if q.parent is not None}
    out = {}
    for q in queues:
        if q.name in parents:
            continue
        own = q.quotas.get(flavor)
        if own is None or own.limit is None or own.limit > own.quota:
            return None
        out[q.name] = (own.limit, least_limit(by_name, queue_chain(by_name, q.name), flavor)[0])
    return flavor, out


def _gpus(info) -> int:
    return sum(len(t.gpus) for t in info.placement)


def failure_summary(model: FailureModel, interruptions: list[dict], node_failures: int, hitting: int) -> dict:
    """The failure model, counts, and time to detect / requeue / restart (seconds, queueing_summary
    dicts) over job interruptions; an interruption not yet detected, requeued or restarted at the end of
    the replay is left out of that figure (the counts say how many)."""
    def span(key: str) -> list[float]:
        return [r[key] - r["failed"] for r in interruptions if r[key] is not None]

    return {
        **asdict(model),
        "node_failures": node_failures,
        "node_failures_hitting_jobs": hitting,
        "job_interruptions": len(interruptions),
        "gpus_interrupted": sum(r["gpus"] for r in interruptions),
        "detected": sum(r["detected"] is not None for r in interruptions),
        "requeued": sum(r["requeued"] is not None for r in interruptions),
        "restarted": sum(r["restarted"] is not None for r in interruptions),
        "time_to_detect": queueing_summary(span("detected")),
        "time_to_requeue": queueing_summary(span("requeued")),
        "time_to_restart": queueing_summary(span("restarted")),
    }
