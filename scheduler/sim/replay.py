"""Discrete-event trace replay in simulated time, driving the same engine as production.

Events are job arrivals (trace `submit`) and completions (start + `duration`). Events are batched: a
scheduling cycle runs at the time of the next event, but never sooner than `cycle_interval` seconds after
the previous cycle, so a busy trace runs at most one cycle per interval and an idle cluster jumps straight
to its next event (empty time is never stepped through). A cycle that started jobs while others still
wait is followed by another one an interval later, since starting them changed the state.

Pure: no Django, no I/O. Units: seconds of simulated time, GPUs; wall times in seconds / milliseconds.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import replace
from typing import Callable, NamedTuple

from scheduler.core import run_cycle
from scheduler.core.snapshot import CycleConfig, CycleResult, Snapshot
from scheduler.sim.report import (
    SIZE_BUCKETS, ReplayReport, lowest_feasible_tier, queueing_summary, size_bucket, tier_capacity,
)
from scheduler.sim.spec import ClusterSpec, Trace
from scheduler.sim.state import ClusterState, job_info, queue_infos

Engine = Callable[[Snapshot, CycleConfig], CycleResult]


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
    engine: Engine = run_cycle,
    cycle_interval: float = 60.0,
    until: float | None = None,
    grace_period: float = 30.0,
    time_limit_factor: float | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> ReplayReport:
    """Replay `trace` on `cluster` with `engine` and return what was measured.

    until: stop at this many seconds of trace time (jobs submitted later are never seen).
    cycle_interval: the least simulated time between two cycles, in seconds.
    grace_period: seconds an evicted job keeps its GPUs (state "preempting") before they are freed; a
        whole-gang victim is then requeued with its original submit time and resumes with the work it
        had left when evicted (it checkpointed in the grace period).
    time_limit_factor: None = jobs declare no time limit (backfill cannot reserve); x = every job
        declares x times its trace duration (1.0 = exact estimates).
    """
    wall0 = time.perf_counter()
    config = config or CycleConfig()
    gang = getattr(engine, "gang", True)  # False: the engine may bind part of a job (ClusterState.bind)
    jobs = sorted(trace.jobs, key=lambda j: (j.submit, j.id))
    if until is not None:
        jobs = [j for j in jobs if j.submit <= until]
    by_id = {j.id: j for j in jobs}
    assert len(by_id) == len(jobs), "trace job ids must be unique"
    known = {q.name for q in cluster.queues}
    missing = {j.queue for j in jobs} - known
    team_of = {q.name: (q.team or q.name) for q in cluster.queues}
    state = ClusterState(cluster, queue_infos(cluster, missing))
    capacity = tier_capacity(cluster)
    report = ReplayReport(
        cluster=cluster.name, trace=trace.name, cluster_gpus=state.capacity, cluster_nodes=len(cluster.nodes),
        cycle_interval=cycle_interval, until=until, jobs_in_trace=len(trace.jobs), tier_capacity=capacity,
    )
    if missing:
        report.notes.append(f"queues used by the trace but absent from the cluster, added without quota: "
                            f"{sorted(missing)}")

    start = jobs[0].submit if jobs else 0.0
    last_event = start  # time of the latest arrival, completion or release processed
    clock = start  # time up to which the GPU-seconds integral has been taken
    gpu_seconds = 0.0
    frag_integral, frag_span, frag_now, frag_since = 0.0, 0.0, None, start
    waits: dict[str, list[float]] = {}
    team_seconds: dict[str, float] = {}
    # (time, seq, job id, tasks): a completion when tasks is None, else the end of a grace period
    # (tasks = () for the whole gang). A completion is stale unless seq == live[job id].
    events: list[tuple[float, int, str, tuple | None]] = []
    live: dict[str, int] = {}
    left: dict[str, float] = {}  # job id -> seconds of work still to do when (re)started
    seq = 0
    arrival = 0
    last_cycle = -math.inf
    rerun = False
    engine_ms: list[float] = []
    snapshot_ms = apply_ms = 0.0
    last_pending: dict = {}

    def advance(to: float) -> None:
        nonlocal clock, gpu_seconds
        if to > clock:
            gpu_seconds += state.used_gpus * (to - clock)
            clock = to

    def account(info, gpus: int, end: float) -> None:
        team = team_of.get(info.queue, info.queue)
        team_seconds[team] = team_seconds.get(team, 0.0) + gpus * (end - info.start_time)

    def finish(job_id: str, end: float) -> None:
        info = state.release(job_id)
        live.pop(job_id, None)
        account(info, sum(len(t.gpus) for t in info.placement), end)

    def handle(when: float, job_id: str, tasks: tuple | None) -> None:
        if tasks is None:  # completion
            finish(job_id, when)
            report.jobs_finished += 1
            return
        info = state.running.get(job_id)
        if info is None:
            return  # it completed during its grace period
        whole = not tasks or {(t.role, t.index) for t in info.placement} <= set(tasks)
        if whole:
            left[job_id] = max(0.0, left[job_id] - (when - grace_period - info.start_time))
            finish(job_id, when)
            state.requeue(info)
            report.jobs_requeued += 1
        else:
            _, freed = state.shrink(job_id, set(tasks))
            account(info, freed, when)

    while True:
        next_event = min(
            jobs[arrival].submit if arrival < len(jobs) else math.inf,
            events[0][0] if events else math.inf,
            last_cycle + cycle_interval if rerun else math.inf,
        )
        if next_event == math.inf:
            break
        now = max(next_event, last_cycle + cycle_interval)
        if until is not None and now > until:
            break
        while events and events[0][0] <= now:
            when, s, job_id, tasks = heapq.heappop(events)
            if tasks is None and live.get(job_id) != s:
                continue  # the completion of a job evicted since
            advance(when)
            handle(when, job_id, tasks)
            last_event = max(last_event, when)
        while arrival < len(jobs) and jobs[arrival].submit <= now:
            job = jobs[arrival]
            limit = None if time_limit_factor is None else job.duration * time_limit_factor
            state.submit(job_info(job, limit))
            left[job.id] = job.duration
            last_event = max(last_event, job.submit)
            arrival += 1
        advance(now)

        t0 = time.perf_counter()
        snapshot = state.snapshot(now)
        t1 = time.perf_counter()
        result = engine(snapshot, config)
        t2 = time.perf_counter()
        for binding in result.bindings:
            if state.bind(binding, now, gang=gang) is None:
                continue  # some tasks bound, holding their GPUs; the job starts when all are
            if not gang:  # the whole placement, earlier partial bindings included
                binding = replace(binding, tasks=state.running[binding.job_id].placement)
            job = by_id[binding.job_id]
            seq += 1
            live[job.id] = seq
            heapq.heappush(events, (now + left[job.id], seq, job.id, None))
            if state.running[job.id].attempts:
                report.restarts += 1
                continue
            report.jobs_started += 1
            waits.setdefault(size_bucket(job.tasks * job.gpus_per_task), []).append(now - job.submit)
            nodes = {t.node for t in binding.tasks}
            if len(nodes) > 1:
                report.multi_node_jobs += 1
                lowest = lowest_feasible_tier(capacity, sum(len(t.gpus) for t in binding.tasks))
                if lowest is None:
                    report.multi_node_beyond_largest_domain += 1
                elif binding.tier == lowest:
                    report.multi_node_aligned += 1
        for ev in getattr(result, "evictions", ()):
            info = state.running.get(ev.job_id)
            assert info is not None, f"engine evicted job {ev.job_id!r}, which is not running"
            if info.state == "preempting":
                continue
            state.mark_preempting(ev.job_id)
            whole = not ev.tasks or {(t.role, t.index) for t in info.placement} <= set(ev.tasks)
            if whole and left[ev.job_id] - (now - info.start_time) > grace_period:
                live.pop(ev.job_id, None)  # it will not complete; it is requeued after the grace period
            seq += 1
            heapq.heappush(events, (now + grace_period, seq, ev.job_id, tuple(ev.tasks)))
            report.evictions_by_rule[ev.rule] = report.evictions_by_rule.get(ev.rule, 0) + 1
        state.set_holds({n.job_id: n.tasks for n in getattr(result, "nominations", ())})
        for job_id, reason in result.pending.items():
            if reason.terminal and job_id in state.pending:
                state.drop(job_id)
                report.jobs_rejected += 1
                report.rejected_by_code[reason.code] = report.rejected_by_code.get(reason.code, 0) + 1
        t3 = time.perf_counter()
        snapshot_ms += (t1 - t0) * 1e3
        engine_ms.append((t2 - t1) * 1e3)
        apply_ms += (t3 - t2) * 1e3

        if frag_now is not None:
            frag_integral += frag_now * (now - frag_since)
            frag_span += now - frag_since
        frag_now, frag_since = result.metrics.get("fragmentation_rate"), now
        report.cycles += 1
        last_cycle = now
        rerun = bool(result.bindings) and bool(state.pending)
        last_pending = result.pending
        if progress is not None:
            progress(Progress(now, arrival, report.jobs_started, report.jobs_finished, len(state.pending),
                              report.cycles))

    # Close the books at `until`, or at the last arrival or completion.
    end = last_event if until is None else max(until, clock)
    while events and events[0][0] <= end:
        when, s, job_id, tasks = heapq.heappop(events)
        if tasks is None and live.get(job_id) != s:
            continue
        advance(when)
        handle(when, job_id, tasks)
    advance(end)
    report.jobs_running_at_end = len(state.running)
    for job_id in list(state.running):
        finish(job_id, end)
    if frag_now is not None and end > frag_since:
        frag_integral += frag_now * (end - frag_since)
        frag_span += end - frag_since

    span = end - start
    report.jobs_submitted = arrival
    report.jobs_pending_at_end = len(state.pending)
    if report.cycles:
        for job_id in state.pending:
            reason = last_pending.get(job_id)
            code = reason.code if reason is not None else "not_seen_by_engine"
            report.pending_by_code[code] = report.pending_by_code.get(code, 0) + 1
    report.mean_allocation_rate = gpu_seconds / (state.capacity * span) if span > 0 and state.capacity else 0.0
    if frag_span > 0:
        report.mean_fragmentation_rate = frag_integral / frag_span
    report.queueing = queueing_summary([w for ws in waits.values() for w in ws])
    report.queueing_by_size = {
        label: queueing_summary(waits[label]) for label, _, _ in SIZE_BUCKETS if label in waits
    }
    feasible = report.multi_node_jobs - report.multi_node_beyond_largest_domain
    report.topology_alignment = report.multi_node_aligned / feasible if feasible else None
    report.team_gpu_hours = {t: s / 3600.0 for t, s in sorted(team_seconds.items())}
    report.sim_start, report.sim_end = start, end
    report.span_seconds, report.span_days = span, span / 86400.0
    if engine_ms:
        report.engine_mean_ms = sum(engine_ms) / len(engine_ms)
        report.engine_max_ms = max(engine_ms)
        report.snapshot_mean_ms = snapshot_ms / len(engine_ms)
        report.apply_mean_ms = apply_ms / len(engine_ms)
    report.wall_seconds = time.perf_counter() - wall0
    return report

