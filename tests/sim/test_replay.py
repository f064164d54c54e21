"""Trace replay in simulated time, against a tiny first-fit stand-in engine defined here.

Cluster: two 4-GPU nodes, each its own tier-1 domain under one tier-2 domain (so the largest tier-1
domain holds 4 GPUs and the tier-2 one 8).
"""
from __future__ import annotations

import json

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.core.snapshot import Binding, CycleResult, PendingReason, TaskPlacement
from scheduler.sim.replay import replay
from scheduler.sim.report import percentile, size_bucket, tier_capacity

DAY = 86400.0


def cluster() -> ClusterSpec:
    return ClusterSpec(
        name="tiny",
        nodes=(NodeSpec("n0", "A100", 4, domain="nv0"), NodeSpec("n1", "A100", 4, domain="nv1")),
        domains=(DomainSpec("leaf", 2), DomainSpec("nv0", 1, "leaf"), DomainSpec("nv1", 1, "leaf")),
        queues=(QueueSpec("qa", team="alpha", quotas={"A100": (0, 8, None)}), QueueSpec("qb", team="beta")),
    )


def job(id, submit, duration, tasks=1, gpus=1, queue="qa", **kw) -> TraceJob:
    return TraceJob(id=id, queue=queue, submit=submit, duration=duration, tasks=tasks, gpus_per_task=gpus, **kw)


def first_fit(snapshot, config=None) -> CycleResult:
    """Stand-in engine: pending jobs in order, each task on the first ready node with room, whole gang
    or nothing; a job larger than the cluster is rejected as terminal."""
    free = {n.name: [g for g in range(n.gpus) if g not in n.used] for n in snapshot.nodes if n.schedulable}
    total = sum(n.gpus for n in snapshot.nodes)
    domain = {n.name: n.domain for n in snapshot.nodes}
    result = CycleResult()
    for j in snapshot.jobs:
        if j.state != "pending":
            continue
        if j.gpus_requested > total:
            result.pending[j.id] = PendingReason("too_big", "larger than the cluster", terminal=True)
            continue
        trial = {k: list(v) for k, v in free.items()}
        tasks = []
        for role in j.roles:
            for i in range(role.tasks):
                node = next((k for k, v in trial.items() if len(v) >= role.gpus_per_task), None)
                if node is None:
                    break
                gpus, trial[node] = trial[node][:role.gpus_per_task], trial[node][role.gpus_per_task:]
                tasks.append(TaskPlacement(role.name, i, node, tuple(gpus)))
        if len(tasks) < sum(r.tasks for r in j.roles):
            result.pending[j.id] = PendingReason("no_room", "waiting for GPUs")
            continue
        free = trial
        nodes = {t.node for t in tasks}
        where = (domain[tasks[0].node], 1) if len(nodes) == 1 else ("leaf", 2)
        result.bindings.append(Binding(j.id, tuple(tasks), *where))
    result.metrics["fragmentation_rate"] = 0.0
    return result


class Recorder:
    """Wraps an engine; remembers each cycle's time and the start and end time of every job."""

    def __init__(self, engine=first_fit):
        self.engine, self.cycles, self.starts, self.running_at = engine, [], {}, {}

    def __call__(self, snapshot, config):
        self.cycles.append(snapshot.now)
        self.running_at[snapshot.now] = {j.id for j in snapshot.jobs if j.state == "running"}
        result = self.engine(snapshot, config)
        for b in result.bindings:
            self.starts[b.job_id] = snapshot.now
        return result


def test_jobs_start_and_finish_at_the_right_simulated_times():
    trace = Trace("t", (job("a", 0, 100, gpus=4), job("b", 10, 50, tasks=2, gpus=4), job("c", 500, 30)))
    rec = Recorder()
    report = replay(cluster(), trace, engine=rec, cycle_interval=60)
    # cycle 0: a starts; 60: b waits (4 free of 8); a ends at 100 -> cycle at 120: b starts, ends at 170;
    # cycle at 180 sees it gone; c arrives at 500 and runs to 530.
    assert rec.starts == {"a": 0, "b": 120, "c": 500}
    assert rec.cycles == [0, 60, 120, 180, 500, 560]
    assert rec.running_at[120] == set() and rec.running_at[180] == set()
    assert (report.jobs_submitted, report.jobs_started, report.jobs_finished) == (3, 3, 3)
    assert report.jobs_pending_at_end == report.jobs_rejected == report.jobs_running_at_end == 0
    assert report.sim_end == 530 and report.span_seconds == 530
    # GPU-seconds: a 4*100 + b 8*50 + c 1*30 = 830 over 8 GPUs * 530 s.
    assert report.mean_allocation_rate == pytest.approx(830 / (8 * 530))
    assert report.team_gpu_hours == {"alpha": pytest.approx(830 / 3600)}


def test_queueing_time_overall_and_by_size():
    trace = Trace("t", (job("a", 0, 100, gpus=4), job("b", 10, 50, tasks=2, gpus=4), job("c", 500, 30)))
    report = replay(cluster(), trace, engine=first_fit, cycle_interval=1)
    # cycle_interval 1: b starts as soon as a frees its GPUs at t=100, so it waited 90 s.
    assert report.queueing_by_size["5-8"]["p50"] == 90
    assert report.queueing_by_size["2-4"]["p50"] == 0 and report.queueing_by_size["1"]["count"] == 1
    assert report.queueing["count"] == 3 and report.queueing["p50"] == 0
    assert report.queueing["p99"] == pytest.approx(90 * 0.98)


def test_idle_time_is_skipped():
    trace = Trace("t", tuple(job(f"j{d}", d * DAY, 600) for d in range(30)))
    rec = Recorder()
    report = replay(cluster(), trace, engine=rec, cycle_interval=60)
    assert report.jobs_finished == 30
    assert report.cycles == 60  # one at each arrival, one at each completion
    assert report.span_days == pytest.approx(29 + 600 / DAY)


def test_busy_trace_runs_at_most_one_cycle_per_interval():
    # 200 one-second jobs arrive over 100 s; 8 GPUs start 8 per cycle, so the backlog drains in 25 cycles.
    trace = Trace("t", tuple(job(f"j{i}", i * 0.5, 1.0) for i in range(200)))
    rec = Recorder()
    report = replay(cluster(), trace, engine=rec, cycle_interval=10)
    gaps = [b - a for a, b in zip(rec.cycles, rec.cycles[1:])]
    assert min(gaps) >= 10 and 25 <= len(rec.cycles) <= 27
    assert report.jobs_finished == 200


def test_engine_binding_a_used_gpu_raises():
    def double_binder(snapshot, config):
        result = CycleResult()
        for j in snapshot.jobs:
            if j.state == "pending":
                result.bindings.append(Binding(j.id, (TaskPlacement("worker", 0, "n0", (0,)),), "nv0", 1))
        return result

    trace = Trace("t", (job("a", 0, 100), job("b", 10, 100)))
    with pytest.raises(AssertionError, match="already bound"):
        replay(cluster(), trace, engine=double_binder)


def test_engine_placing_a_partial_gang_raises():
    def partial(snapshot, config):
        result = CycleResult()
        for j in snapshot.jobs:
            if j.state == "pending":
                result.bindings.append(Binding(j.id, (TaskPlacement("worker", 0, "n0", (0, 1)),), "nv0", 1))
        return result

    with pytest.raises(AssertionError, match="partial gang"):
        replay(cluster(), Trace("t", (job("a", 0, 100, tasks=2, gpus=2),)), engine=partial)


def test_until_stops_early():
    trace = Trace("t", (job("a", 0, 100), job("b", 1000, 5000), job("c", 3000, 10)))
    report = replay(cluster(), trace, engine=first_fit, until=2000)
    assert (report.jobs_submitted, report.jobs_started, report.jobs_finished) == (2, 2, 1)
    assert report.jobs_running_at_end == 1 and report.sim_end == 2000
    assert report.mean_allocation_rate == pytest.approx((100 + 1000) / (8 * 2000))


def test_terminal_jobs_are_rejected_and_others_wait_forever_counted_pending():
    trace = Trace("t", (job("huge", 0, 10, tasks=4, gpus=4), job("ok", 5, 10)))
    report = replay(cluster(), trace, engine=first_fit)
    assert report.jobs_rejected == 1 and report.rejected_by_code == {"too_big": 1}
    assert report.jobs_finished == 1 and report.jobs_pending_at_end == 0


def test_topology_alignment_of_multi_node_jobs():
    assert tier_capacity(cluster()) == {1: 4, 2: 8}
    trace = Trace("t", (job("wide", 0, 10, tasks=2, gpus=4), job("spread", 100, 10, tasks=4, gpus=1),
                        job("single", 200, 10, tasks=1, gpus=2)))

    def spreading(snapshot, config):  # puts the 4 x 1-GPU job across both nodes, at tier 2
        result = CycleResult()
        for j in snapshot.jobs:
            if j.state == "pending":
                role = j.roles[0]
                nodes = ["n0", "n1"] if role.tasks > 1 else ["n0"]
                tasks = tuple(TaskPlacement("worker", i, nodes[i % len(nodes)],
                                            tuple(range((i // len(nodes)) * role.gpus_per_task,
                                                        (i // len(nodes) + 1) * role.gpus_per_task)))
                              for i in range(role.tasks))
                result.bindings.append(Binding(j.id, tasks, "leaf" if len(nodes) > 1 else "nv0", len(nodes)))
        return result

    report = replay(cluster(), trace, engine=spreading)
    # wide (8 GPUs) needs tier 2: aligned; spread (4 GPUs) fits a tier-1 domain but sits at tier 2.
    assert (report.multi_node_jobs, report.multi_node_aligned) == (2, 1)
    assert report.topology_alignment == 0.5


def test_report_is_json_serializable_and_progress_is_called():
    seen = []
    trace = Trace("t", (job("a", 0, 100, gpus=4), job("b", 10, 50, queue="elsewhere")))
    report = replay(cluster(), trace, engine=first_fit, progress=seen.append)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["cluster"] == "tiny" and data["jobs_finished"] == 2
    assert data["tier_capacity"] == {"1": 4, "2": 8}
    assert any("elsewhere" in n for n in data["notes"])
    assert seen and seen[-1].cycles == report.cycles and seen[-1].started == 2


def test_empty_trace():
    report = replay(cluster(), Trace("empty", ()), engine=first_fit)
    assert report.cycles == 0 and report.span_seconds == 0
    json.dumps(report.to_dict(), allow_nan=False)


def test_helpers():
    assert [size_bucket(g) for g in (0, 1, 2, 4, 5, 8, 9, 32, 33, 128, 129)] == [
        "0", "1", "2-4", "2-4", "5-8", "5-8", "9-32", "9-32", "33-128", "33-128", ">128"]
    assert [size_bucket(g) for g in (0.001, 0.5, 0.999, 1.5, 4.25, 8.001)] == ["<1", "<1", "<1", "2-4", "5-8", "9-32"]
    with pytest.raises(ValueError):
        size_bucket(-1)
    assert percentile([], 50) is None and percentile([1.0, 3.0], 50) == 2.0


def test_production_engine_drives_the_replay():
    """The default engine is scheduler.core.run_cycle: same timeline as the stand-in on this trace, the
    oversized job rejected as terminal, the 4 x 1-GPU gang kept on one node."""
    trace = Trace("t", (job("a", 0, 100, gpus=4), job("b", 10, 50, tasks=2, gpus=4), job("c", 500, 30),
                        job("huge", 600, 10, tasks=4, gpus=4), job("d", 700, 10, tasks=4, gpus=1)))
    report = replay(cluster(), trace, cycle_interval=60)
    assert (report.jobs_started, report.jobs_finished, report.jobs_rejected) == (4, 4, 1)
    assert report.queueing_by_size["5-8"]["p50"] == 110
    assert (report.multi_node_jobs, report.topology_alignment) == (1, 1.0)
    assert report.mean_fragmentation_rate is not None


def test_eviction_grace_period_hold_and_requeue():
    """low is evicted for high at t=100 with a 90 s grace period: it keeps its GPUs (state preempting)
    while they are held for high, high starts on them after the release, and low is requeued with its
    original submit time and resumes with the 900 s of work it had left."""
    from scheduler.core.snapshot import Eviction, Nomination

    seen = {}

    def preempting_engine(snapshot, config):
        jobs = {j.id: j for j in snapshot.jobs}
        seen[snapshot.now] = {j.id: (j.state, bool(j.reserved)) for j in snapshot.jobs}
        high, low = jobs.get("high"), jobs.get("low")
        result = CycleResult()
        if high is not None and high.state == "pending":
            if high.reserved:
                used = {(n.name, g) for n in snapshot.nodes for g in n.used}
                if any((t.node, g) in used for t in high.reserved for g in t.gpus):
                    result.nominations.append(Nomination("high", high.reserved, "hold"))
                else:
                    result.bindings.append(Binding("high", high.reserved, "nv0", 1))
                return result
            result.evictions.append(Eviction("low", (), 4, "preempt", "high", "for high"))
            result.nominations.append(Nomination("high", low.placement, "hold"))
            return result
        return first_fit(snapshot, config)

    trace = Trace("t", (job("low", 0, 1000, gpus=4), job("filler", 0, 10000, gpus=4),
                        job("high", 100, 50, gpus=4, priority=1), job("other", 150, 10, gpus=4, queue="qb")))
    rec = Recorder(preempting_engine)
    report = replay(cluster(), trace, engine=rec, grace_period=90)
    # 160: other's arrival; low still holds its GPUs, held for high. 190: released, low requeued.
    # 220: high starts (ends 270). 280: other starts (ends 290). 340: low resumes (900 s left).
    assert seen[160]["low"] == ("preempting", False) and seen[160]["high"] == ("pending", True)
    assert seen[220]["low"] == ("pending", False)
    assert rec.starts == {"low": 340, "filler": 0, "high": 220, "other": 280}
    assert report.evictions_by_rule == {"preempt": 1}
    assert (report.jobs_requeued, report.restarts, report.jobs_started, report.jobs_finished) == (1, 1, 4, 4)
    assert report.queueing_by_size["2-4"]["count"] == 4  # first starts only
    assert report.sim_end == 10000
    assert report.team_gpu_hours["alpha"] == pytest.approx(4 * (190 + 900 + 50 + 10000) / 3600)


def test_time_limit_factor_declares_limits():
    declared = []

    def spy(snapshot, config):
        declared.extend(j.time_limit for j in snapshot.jobs if j.state == "pending")
        return first_fit(snapshot, config)

    replay(cluster(), Trace("t", (job("a", 0, 100),)), engine=spy, time_limit_factor=1.5)
    assert declared == [150]


def test_replay_keeps_decayed_usage_like_the_platform():
    """With a half-life set, the replay folds each cycle's queue usage into QueueInfo.recent_usage (the
    engine's decay_usage), so the next snapshot orders queues by it; with none, recent_usage stays empty."""
    from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec, Trace, TraceJob
    from scheduler.core import CycleConfig
    from scheduler.sim.replay import Replay

    cluster = ClusterSpec(name="c", nodes=(NodeSpec("n0", "H100", 8),),
                          queues=(QueueSpec("a", quotas={"H100": (0, 4, None)}), QueueSpec("b", quotas={"H100": (0, 4, None)})))
    trace = Trace(name="t", jobs=(TraceJob(id="j1", queue="a", submit=0.0, duration=7200.0, tasks=1, gpus_per_task=8),))
    run = Replay(cluster, trace, config=CycleConfig(usage_half_life=3600.0))
    run.run()
    recent = {q.name: dict(q.recent_usage) for q in run.state.queues}
    assert 0 < recent["a"]["H100"] < 8 and recent["b"].get("H100", 0) == 0
    off = Replay(cluster, trace, config=CycleConfig(usage_half_life=None))
    off.run()
    assert all(not q.recent_usage for q in off.state.queues)
