"""Discrete-event trace replay in simulated time, driving the same engine as production.

Events are job arrivals (trace `submit`) and completions (start + `duration`). Events are batched: a
scheduling cycle runs at the time of the next event, but never sooner than `cycle_interval` seconds after
the previous cycle, so a busy trace runs at most one cycle per interval and an idle cluster jumps straight
to its next event (empty time is never stepped through). A cycle that started jobs while others still
wait is followed by another one an interval later, since starting them changed the state.

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

Pure: no Django, no I/O. Units: seconds of simulated time, GPUs; wall times in seconds / milliseconds.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import asdict, replace
from functools import partial
from typing import Callable, NamedTuple

from clusterspec.spec import ClusterSpec, Trace
from scheduler.core import EngineCache, run_cycle
from scheduler.core.snapshot import CycleConfig, CycleResult, Snapshot
from scheduler.sim.fairness import FairnessMeter, leaf_teams, snapshot_fair_share
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.report import (
    SIZE_BUCKETS, ReplayReport, lowest_feasible_tier, queueing_summary, size_bucket, tier_capacity,
)
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
    engine: Engine | None = None,
    cycle_interval: float = 60.0,
    until: float | None = None,
    grace_period: float = 30.0,
    time_limit_factor: float | None = None,
    failures: FailureModel | None = None,
    checkpoint: Checkpointing | None = None,
    fairness: bool = True,
    progress: Callable[[Progress], None] | None = None,
) -> ReplayReport:
    """Replay `trace` on `cluster` with `engine` and return what was measured.

    engine: the scheduling engine, called as engine(snapshot, config) once per cycle; None = the real one
        (run_cycle) with an EngineCache of this replay's own, so replays never share engine caches.
    until: stop at this many seconds of trace time (jobs submitted later are never seen).
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
    """
    wall0 = time.perf_counter()
    config = config or CycleConfig()
    if engine is None or engine is run_cycle:
        engine = partial(run_cycle, cache=EngineCache())
    ckpt = checkpoint or Checkpointing()
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
        config=asdict(config),
    )
    if missing:
        report.notes.append(f"queues used by the trace but absent from the cluster, added without quota: "
                            f"{sorted(missing)}")
    meter = None
    if fairness:
        teams = leaf_teams(cluster.queues)
        teams.update({name: name for name in missing})
        meter = FairnessMeter(teams)

    start = jobs[0].submit if jobs else 0.0
    last_event = start  # time of the latest arrival, completion, release or detection processed
    clock = start  # time up to which the GPU-seconds integral has been taken
    gpu_seconds = 0.0
    frag_integral, frag_span, frag_now, frag_since = 0.0, 0.0, None, start
    waits: dict[str, list[float]] = {}
    team_seconds: dict[str, float] = {}
    # Job events (time, seq, kind, job id, payload): "done" (a completion, stale unless seq == live[job]),
    # "grace" (end of a grace period; payload = evicted tasks, () = whole gang), "detect" (a failure is
    # noticed; payload = the attempt that failed). Node events (time, seq, kind, node): "fail", "repair".
    events: list[tuple] = []
    node_events: list[tuple] = []
    live: dict[str, int] = {}
    left: dict[str, float] = {}  # job id -> seconds of work still to do when (re)started
    attempt_no: dict[str, int] = {}  # job id -> number of its current (or last) attempt
    evicted_at: dict[str, float] = {}  # job id -> time of its whole-gang eviction, during the grace period
    failed: dict[str, dict] = {}  # job id -> interruption record, while the failure is undetected
    awaiting_requeue: dict[str, dict] = {}  # released after a failure, not yet seen pending by a cycle
    awaiting_restart: dict[str, dict] = {}  # requeued after a failure, not yet started again
    interruptions: list[dict] = []
    waste = {"lost_work": 0.0, "undetected": 0.0, "checkpoint": 0.0, "grace": 0.0}  # GPU-seconds
    useful = 0.0  # GPU-seconds of work that counts towards completion
    node_failures = node_failures_hitting_jobs = 0
    seq = 0
    arrival = 0
    last_cycle = -math.inf
    rerun = False
    engine_ms: list[float] = []
    snapshot_ms = apply_ms = 0.0
    last_pending: dict = {}

    streams = failures.streams(cluster.nodes) if failures is not None and failures.rate > 0 else {}
    for node in cluster.nodes:
        if node.name in streams:
            seq += 1
            heapq.heappush(node_events, (streams[node.name].next_failure(start), seq, "fail", node.name))

    def advance(to: float) -> None:
        nonlocal clock, gpu_seconds
        if to > clock:
            gpu_seconds += state.used_gpus * (to - clock)
            clock = to

    def gpus_of(info) -> int:
        return sum(len(t.gpus) for t in info.placement)

    def account(info, gpus: int, end: float) -> None:
        team = team_of.get(info.queue, info.queue)
        team_seconds[team] = team_seconds.get(team, 0.0) + gpus * (end - info.start_time)

    def finish(job_id: str, end: float) -> None:
        info = state.release(job_id)
        live.pop(job_id, None)
        account(info, gpus_of(info), end)

    def credit(info, gpus: int, work: float, elapsed: float) -> None:
        """An attempt ended after `elapsed` s with `work` s of its work kept: useful GPU-seconds and
        checkpoint stalls."""
        nonlocal useful
        useful += gpus * work
        waste["checkpoint"] += gpus * ckpt.stall(elapsed)

    def requeue_failed(job_id: str, when: float) -> None:
        record = failed.pop(job_id)
        info = state.running[job_id]
        waste["undetected"] += gpus_of(info) * (when - record["failed"])
        record["detected"] = when
        finish(job_id, when)
        state.requeue(info)
        awaiting_requeue[job_id] = record

    def handle(when: float, kind: str, job_id: str, payload) -> None:
        nonlocal last_event
        last_event = max(last_event, when)
        info = state.running.get(job_id)
        if kind == "done":
            credit(info, gpus_of(info), left[job_id], when - info.start_time)
            finish(job_id, when)
            report.jobs_finished += 1
            return
        if kind == "detect":
            if job_id in failed and info is not None and attempt_no[job_id] == payload:
                requeue_failed(job_id, when)
            return
        # kind == "grace"
        if info is None:
            return  # it completed during its grace period
        whole = not payload or {(t.role, t.index) for t in info.placement} <= set(payload)
        if job_id in failed:  # its node failed during the grace period: it leaves now, without its work
            if whole:
                requeue_failed(job_id, when)
            else:
                state.shrink(job_id, set(payload))
            return
        if whole:
            elapsed = evicted_at.pop(job_id, when - grace_period) - info.start_time
            done = ckpt.progress(elapsed)
            credit(info, gpus_of(info), done, elapsed)
            waste["grace"] += gpus_of(info) * (when - info.start_time - elapsed)
            left[job_id] = max(0.0, left[job_id] - done)
            finish(job_id, when)
            state.requeue(info)
            report.jobs_requeued += 1
        else:
            _, freed = state.shrink(job_id, set(payload))
            account(info, freed, when)
            credit(info, freed, ckpt.progress(when - info.start_time), when - info.start_time)

    def fail_node(when: float, node: str) -> None:
        nonlocal seq, node_failures, node_failures_hitting_jobs
        node_failures += 1
        state.set_node_state(node, "not_ready")
        hit = [j for j in state.jobs_on(node) if j not in failed]
        node_failures_hitting_jobs += bool(hit)
        for job_id in hit:
            info = state.running[job_id]
            gpus = gpus_of(info)
            elapsed = (evicted_at[job_id] if job_id in evicted_at else when) - info.start_time
            saved = ckpt.saved(elapsed)
            credit(info, gpus, saved, elapsed)
            waste["lost_work"] += gpus * (ckpt.progress(elapsed) - saved)
            left[job_id] = max(0.0, left[job_id] - saved)
            evicted_at.pop(job_id, None)
            live.pop(job_id, None)  # it will not complete
            record = {"job": job_id, "node": node, "failed": when, "gpus": gpus,
                      "detected": None, "requeued": None, "restarted": None}
            failed[job_id] = record
            interruptions.append(record)
            seq += 1
            heapq.heappush(events, (when + failures.detection_timeout, seq, "detect", job_id, attempt_no[job_id]))
        seq += 1
        heapq.heappush(node_events, (when + failures.repair_time, seq, "repair", node))

    def process_until(now: float) -> None:
        """Apply every job and node event up to `now`, in time order."""
        nonlocal seq
        while True:
            t_job = events[0][0] if events else math.inf
            t_node = node_events[0][0] if node_events else math.inf
            if min(t_job, t_node) > now:
                return
            if t_node < t_job:
                when, _, kind, node = heapq.heappop(node_events)
                advance(when)
                if kind == "fail":
                    fail_node(when, node)
                else:
                    state.set_node_state(node, "ready")
                    seq += 1
                    heapq.heappush(node_events, (streams[node].next_failure(when), seq, "fail", node))
                continue
            when, s, kind, job_id, payload = heapq.heappop(events)
            if kind == "done" and live.get(job_id) != s:
                continue  # the completion of a job evicted or failed since
            advance(when)
            handle(when, kind, job_id, payload)

    while True:
        next_job = min(
            jobs[arrival].submit if arrival < len(jobs) else math.inf,
            events[0][0] if events else math.inf,
            last_cycle + cycle_interval if rerun else math.inf,
        )
        next_node = node_events[0][0] if node_events else math.inf
        if next_job == math.inf and not state.running:
            # Nothing left to run: node events matter only to pending jobs waiting for a repair, and
            # only until every node down at the last job event is back.
            if not (state.pending and state.down_gpus) or next_node > last_event + failures.repair_time:
                next_node = math.inf
        next_event = min(next_job, next_node)
        if next_event == math.inf:
            break
        now = max(next_event, last_cycle + cycle_interval)
        if until is not None and now > until:
            break
        process_until(now)
        while arrival < len(jobs) and jobs[arrival].submit <= now:
            job = jobs[arrival]
            limit = None if time_limit_factor is None else job.duration * time_limit_factor
            state.submit(job_info(job, limit))
            left[job.id] = job.duration
            last_event = max(last_event, job.submit)
            arrival += 1
        advance(now)
        for job_id, record in awaiting_requeue.items():
            record["requeued"] = now
            awaiting_restart[job_id] = record
        awaiting_requeue.clear()

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
            attempt_no[job.id] = attempt_no.get(job.id, 0) + 1
            heapq.heappush(events, (now + ckpt.wall(left[job.id]), seq, "done", job.id, None))
            if state.running[job.id].attempts:
                report.restarts += 1
                record = awaiting_restart.pop(job.id, None)
                if record is not None:
                    record["restarted"] = now
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
            if whole and ev.job_id not in failed:
                evicted_at[ev.job_id] = now
                if ckpt.wall(left[ev.job_id]) - (now - info.start_time) > grace_period:
                    live.pop(ev.job_id, None)  # it will not complete; it is requeued after the grace period
            seq += 1
            heapq.heappush(events, (now + grace_period, seq, "grace", ev.job_id, tuple(ev.tasks)))
            report.evictions_by_rule[ev.rule] = report.evictions_by_rule.get(ev.rule, 0) + 1
        state.set_holds({n.job_id: n.tasks for n in getattr(result, "nominations", ())})
        for job_id, reason in result.pending.items():
            if reason.terminal and job_id in state.pending:
                state.drop(job_id)
                awaiting_restart.pop(job_id, None)
                report.jobs_rejected += 1
                report.rejected_by_code[reason.code] = report.rejected_by_code.get(reason.code, 0) + 1
        t3 = time.perf_counter()
        if meter is not None:
            fair = result.fair_share or snapshot_fair_share(snapshot)
            demand = state.used_gpus + sum(j.gpus_requested for j in state.pending.values())
            meter.observe(now, fair, state.queue_used, demand, state.capacity - state.down_gpus)
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

    # Close the books at `until`, or at the last arrival, completion, release or detection.
    end = last_event if until is None else max(until, clock)
    process_until(end)
    advance(end)
    if meter is not None:
        meter.close(end)
    report.jobs_running_at_end = len(state.running)
    for job_id in list(state.running):
        info = state.running[job_id]
        if job_id in failed:  # failed, not yet detected: its saved work was counted at the failure
            waste["undetected"] += gpus_of(info) * (end - failed[job_id]["failed"])
        else:
            elapsed = evicted_at.get(job_id, end) - info.start_time
            credit(info, gpus_of(info), ckpt.progress(elapsed), elapsed)
            waste["grace"] += gpus_of(info) * (end - info.start_time - elapsed)
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
    report.evictions = sum(report.evictions_by_rule.values())
    report.evictions_per_started_job = report.evictions / report.jobs_started if report.jobs_started else None
    if meter is not None:
        report.fairness = meter.summary()
    report.allocated_gpu_hours = gpu_seconds / 3600.0
    report.useful_gpu_hours = useful / 3600.0
    report.goodput = useful / gpu_seconds if gpu_seconds > 0 else None
    report.waste_gpu_hours = {k: v / 3600.0 for k, v in waste.items()}
    report.waste_gpu_hours["other"] = (gpu_seconds - useful - sum(waste.values())) / 3600.0
    report.checkpoint = asdict(ckpt)
    if failures is not None:
        report.failures = failure_summary(failures, interruptions, node_failures, node_failures_hitting_jobs)
    report.sim_start, report.sim_end = start, end
    report.span_seconds, report.span_days = span, span / 86400.0
    if engine_ms:
        report.engine_mean_ms = sum(engine_ms) / len(engine_ms)
        report.engine_max_ms = max(engine_ms)
        report.snapshot_mean_ms = snapshot_ms / len(engine_ms)
        report.apply_mean_ms = apply_ms / len(engine_ms)
    report.wall_seconds = time.perf_counter() - wall0
    return report


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
