"""Issue #3 (Jain's index of usage / fair share, FIFO vs the full policy, evictions per started job) and
issue #6 (injected node failures, checkpoints, detection timeout, goodput) in the replay."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.core.snapshot import CycleConfig
from scheduler.sim.fairness import FairnessMeter, jain_index, leaf_teams
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.replay import replay

from test_replay import cluster as tiny_cluster
from test_replay import first_fit, job

FIFO = CycleConfig(fair_share=False, backfill=False, preemption=False, reclaim=False)


# -- Jain's index ---------------------------------------------------------------------------------------

def test_jain_index_on_hand_made_values():
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([0.5, 0.5]) == pytest.approx(1.0)  # equal shares of the fair share, even if low
    assert jain_index([1.0, 0.0, 0.0]) == pytest.approx(1 / 3)  # one team has it all: 1/n
    assert jain_index([1.0, 2.0]) == pytest.approx(9 / 10)  # (1+2)^2 / (2 * (1+4))
    assert jain_index([]) is None and jain_index([0.0, 0.0]) is None


def test_fairness_meter_weights_cycles_by_time_and_skips_teams_without_demand():
    meter = FairnessMeter({"qa": "alpha", "qb": "beta", "qc": "gamma"})
    fair = {"qa": {"X": 4.0}, "qb": {"X": 4.0}}  # gamma has no demand: left out
    # 0..100 s: alpha uses 8 of its fair 4, beta 0 of 4 -> x = (2, 0), J = 4 / (2 * 4) = 0.5, contended.
    assert meter.observe(0, fair, {"qa": 8}, demand=12, capacity=8) == pytest.approx(0.5)
    # 100..400 s: 4 / 4 each -> J = 1, still contended.
    assert meter.observe(100, fair, {"qa": 4, "qb": 4}, demand=12, capacity=8) == pytest.approx(1.0)
    meter.close(400)
    s = meter.summary()
    assert s["jain_mean"] == pytest.approx((0.5 * 100 + 1.0 * 300) / 400)
    assert s["jain_contended_mean"] == s["jain_mean"] and s["hours_contended"] == pytest.approx(400 / 3600)
    assert s["teams"]["alpha"]["mean_usage_over_fair_share"] == pytest.approx((2 * 100 + 1 * 300) / 400)
    assert s["teams"]["beta"]["mean_usage_over_fair_share"] == pytest.approx(300 / 400)
    assert s["teams"]["alpha"]["gpu_hours_used"] == pytest.approx((8 * 100 + 4 * 300) / 3600)
    assert "gamma" not in s["teams"]


def test_leaf_teams_leave_inner_queues_out():
    queues = (QueueSpec("root"), QueueSpec("a", "root", "alpha"), QueueSpec("b", "root"))
    assert leaf_teams(queues) == {"a": "alpha", "b": "b"}


# -- FIFO vs the full policy on the production engine ---------------------------------------------------

def contended_world():
    """8 GPUs, two teams with quota 4 each. alpha fills the cluster with 8 long 1-GPU jobs at t=0 (4
    borrowed); beta submits 4 short ones at t=100."""
    c = ClusterSpec(
        "two-teams", (NodeSpec("n0", "X", 4), NodeSpec("n1", "X", 4)),
        queues=(QueueSpec("root", quotas={"X": (0, 8, None)}),
                QueueSpec("qa", "root", "alpha", quotas={"X": (0, 4, None)}),
                QueueSpec("qb", "root", "beta", quotas={"X": (0, 4, None)})),
    )
    jobs = [TraceJob(f"a{i}", "qa", 0.0, 10_000.0, 1, 1) for i in range(8)]
    jobs += [TraceJob(f"b{i}", "qb", 100.0, 500.0, 1, 1) for i in range(4)]
    return c, Trace("t", tuple(jobs))


def test_fifo_never_evicts_and_is_less_fair_than_the_full_policy():
    c, trace = contended_world()
    full = replay(c, trace, cycle_interval=10)
    fifo = replay(c, trace, config=FIFO, cycle_interval=10)
    assert fifo.evictions == 0 and fifo.evictions_per_started_job == 0 and fifo.restarts == 0
    assert full.evictions_by_rule.get("reclaim", 0) >= 4 and full.evictions_per_started_job == full.evictions / 12
    # beta waits for alpha's 10,000 s jobs under FIFO, a grace period or so under the full policy.
    assert fifo.queueing_by_size["1"]["p99"] > 9000 > 300 > full.queueing_by_size["1"]["p99"]
    assert fifo.config["reclaim"] is False and full.config["reclaim"] is True
    assert full.fairness["jain_contended_mean"] > 0.9 > 0.6 > fifo.fairness["jain_contended_mean"]
    assert fifo.fairness["teams"]["alpha"]["mean_usage_over_fair_share"] > 1.5


# -- failures, checkpoints, goodput ---------------------------------------------------------------------

@dataclass(frozen=True)
class Scripted(FailureModel):
    """Failures at given times per node (for exact tests): next_failure(after) = the first scripted
    time >= after."""

    script: dict = field(default_factory=dict)

    def streams(self, nodes):
        return {n.name: _Script(sorted(self.script.get(n.name, ()))) for n in nodes}


class _Script:
    def __init__(self, times):
        self.times = times

    def next_failure(self, after):
        return next((t for t in self.times if t >= after), float("inf"))


def one_node():
    return ClusterSpec("one", (NodeSpec("n0", "X", 4),), queues=(QueueSpec("q", team="t"),))


def test_goodput_is_one_without_failures_and_checkpoint_stalls_cost():
    trace = Trace("t", tuple(job(f"j{i}", i * 50.0, 250.0, gpus=2) for i in range(6)))
    plain = replay(tiny_cluster(), trace, engine=first_fit)
    assert plain.goodput == pytest.approx(1.0) and plain.failures == {}
    # checkpoint every 100 s of work, 10 s each: a 250 s job writes 2 and runs 270 s.
    ck = replay(tiny_cluster(), trace, engine=first_fit, checkpoint=Checkpointing(100, 10))
    assert ck.goodput == pytest.approx(250 / 270)
    assert ck.waste_gpu_hours["checkpoint"] == pytest.approx(6 * 2 * 20 / 3600)


def test_a_failure_loses_work_since_the_checkpoint_and_detection_delays_requeue():
    """Job a (4 GPUs, 1,000 s) on the only node; the node fails at t=500 and is repaired at 600.
    Checkpoints every 300 s (free), so 300 s of work are kept and 200 s lost."""
    trace = Trace("t", (TraceJob("a", "q", 0.0, 1000.0, 1, 4),))
    times = {}
    for timeout in (60.0, 300.0):
        model = Scripted(rate=1.0, detection_timeout=timeout, repair_time=100.0, script={"n0": [500.0]})
        rep = replay(one_node(), trace, engine=first_fit, cycle_interval=10, failures=model,
                     checkpoint=Checkpointing(300.0))
        f = rep.failures
        assert (f["node_failures"], f["job_interruptions"], f["restarted"]) == (1, 1, 1)
        assert f["time_to_detect"]["p50"] == timeout and f["time_to_requeue"]["p50"] == timeout
        times[timeout] = f["time_to_restart"]["p50"]
        held = timeout  # GPUs stay held by the failed job until detection
        assert rep.jobs_finished == 1 and rep.restarts == 1
        assert rep.sim_end == pytest.approx(max(500 + timeout, 600) + 700)
        assert rep.allocated_gpu_hours == pytest.approx(4 * (500 + held + 700) / 3600)
        assert rep.useful_gpu_hours == pytest.approx(4 * 1000 / 3600)
        assert rep.goodput == pytest.approx(1000 / (1200 + held))
        assert rep.waste_gpu_hours["lost_work"] == pytest.approx(4 * 200 / 3600)
        assert rep.waste_gpu_hours["undetected"] == pytest.approx(4 * held / 3600)
        assert abs(rep.waste_gpu_hours["other"]) < 1e-9
    # restart waits for the repair (t=600) with a 60 s timeout, for the detection (t=800) with 300 s.
    assert times == {60.0: 100.0, 300.0: 300.0}


def busy_trace():
    return Trace("t", tuple(job(f"j{i}", i * 600.0, 7200.0, gpus=2 if i % 3 else 4) for i in range(60)))


def test_failure_injection_is_deterministic_for_a_seed_and_checkpoints_help():
    model = FailureModel(rate=2000.0, detection_timeout=120.0, repair_time=1800.0, seed=7)
    a = replay(tiny_cluster(), busy_trace(), engine=first_fit, failures=model)
    b = replay(tiny_cluster(), busy_trace(), engine=first_fit, failures=model)
    ta, tb = a.to_dict(), b.to_dict()
    for d in (ta, tb):
        d.pop("wall_seconds"), d.pop("engine_mean_ms"), d.pop("engine_max_ms")
        d.pop("snapshot_mean_ms"), d.pop("apply_mean_ms")
    assert ta == tb
    assert a.failures["node_failures"] >= 5 and a.failures["job_interruptions"] >= 3
    other = replay(tiny_cluster(), busy_trace(), engine=first_fit,
                   failures=FailureModel(rate=2000.0, detection_timeout=120.0, repair_time=1800.0, seed=8))
    assert other.failures["node_failures"] != a.failures["node_failures"] or other.goodput != a.goodput
    assert a.goodput < 0.95
    ckpt = replay(tiny_cluster(), busy_trace(), engine=first_fit, failures=model, checkpoint=Checkpointing(600.0))
    assert ckpt.failures["node_failures"] > 0  # the same failure times, over a shorter span
    assert a.goodput < ckpt.goodput < 1.0
    assert ckpt.jobs_finished == a.jobs_finished == 60
    json.dumps(ckpt.to_dict(), allow_nan=False)


def test_failure_streams_depend_on_seed_and_node_only():
    nodes = tiny_cluster().nodes
    model = FailureModel(rate=10.0, seed=3)
    a, b = model.streams(nodes), model.streams(nodes)
    first = [a["n0"].next_failure(0.0), a["n0"].next_failure(1e6), a["n1"].next_failure(0.0)]
    assert first == [b["n0"].next_failure(0.0), b["n0"].next_failure(1e6), b["n1"].next_failure(0.0)]
    assert first[0] != first[2]
    # rate 10 per 1,000 GPU-days on a 4-GPU node: mean up-time 25 days.
    draws = [FailureModel(rate=10.0, seed=s).streams(nodes)["n0"].next_failure(0.0) for s in range(2000)]
    assert sum(draws) / len(draws) / 86400 == pytest.approx(25, rel=0.1)
    assert FailureModel(rate=0.0).streams(nodes)["n0"].next_failure(0.0) == float("inf")


def test_checkpoint_arithmetic():
    c = Checkpointing(10, 1)
    assert (c.checkpoints(25), c.wall(25), c.progress(27), c.saved(27), c.stall(27)) == (2, 27, 25, 20, 2)
    assert (c.checkpoints(20), c.wall(20), c.progress(21), c.progress(10.5)) == (1, 21, 20, 10)
    none = Checkpointing()
    assert (none.wall(25), none.progress(25), none.saved(25)) == (25, 25, 0)


def test_failures_with_the_production_engine_and_an_idle_tail_terminate():
    model = FailureModel(rate=5000.0, detection_timeout=30.0, repair_time=600.0, seed=1)
    trace = Trace("t", tuple(job(f"j{i}", i * 300.0, 1800.0, gpus=4) for i in range(10)))
    rep = replay(tiny_cluster(), trace, failures=model, checkpoint=Checkpointing(300.0), cycle_interval=30)
    assert rep.jobs_finished == 10 and rep.failures["job_interruptions"] >= 1
    assert 0 < rep.goodput < 1


def test_failure_sweep_benchmark_runs_in_its_tiny_setting():
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench))
    import failure_sweep

    out = failure_sweep.main(["--tiny", "--rate", "200"])
    runs = out["runs"]
    assert len(runs) == 4 and runs["baseline_no_failures"]["goodput"] == pytest.approx(1.0, abs=1e-3)
    assert all(r["goodput"] <= 1.0 for r in runs.values())


def rack_of_three():
    nodes = tuple(NodeSpec(f"n{i}", "X", 4, domain=f"nv{i}") for i in range(3))
    domains = (DomainSpec("rack", 2), *(DomainSpec(f"nv{i}", 1, "rack") for i in range(3)))
    return ClusterSpec("rack3", nodes, domains=domains, queues=(QueueSpec("q", team="t"),))


def test_a_hot_spare_restarts_the_failed_gang_at_detection_and_takes_no_other_work():
    """Gang a (2 x 4 GPUs, 1,000 s) on n0 + n1; b (4 GPUs, 5,000 s) arrives at 100. n0 fails at 500, is
    repaired at 1,500, detection 60 s, checkpoints every 300 s. Without spares b runs on n2 and a waits for
    the repair (restart 1,000 s after the failure); with n2 a spare, b waits, a restarts on n1 + n2 at
    detection (60 s), and the repaired n0 becomes the rack's spare."""
    trace = Trace("t", (TraceJob("a", "q", 0.0, 1000.0, 2, 4), TraceJob("b", "q", 100.0, 5000.0, 1, 4)))
    model = Scripted(rate=1.0, detection_timeout=60.0, repair_time=1000.0, script={"n0": [500.0]})
    plain = replay(rack_of_three(), trace, engine=first_fit, cycle_interval=10, failures=model,
                   checkpoint=Checkpointing(300.0))
    assert plain.failures["time_to_restart"]["p50"] == pytest.approx(1000.0)
    assert plain.spares["restarts_on_spare"] == 0 and plain.gpu_hours["held"] == pytest.approx(0.0)
    spare = replay(rack_of_three(), trace, engine=first_fit, cycle_interval=10, failures=model,
                   checkpoint=Checkpointing(300.0), spares=1)
    assert spare.spares == {"per_rack": 1, "racks": 1, "nodes": 1, "gpus": 4, "restarts_on_spare": 1,
                            "restarts_without_spare": 0, "stopped_on_spare": 0, "stopped_gpu_hours": 0.0,
                            "interruptible_gpu_hours_on_spares": 0.0}
    f = spare.failures
    assert f["time_to_restart"]["p50"] == pytest.approx(60.0) and f["restarted"] == 1
    assert spare.jobs_finished == 2
    # a: 300 s kept at the failure, 700 s left from 560 -> done at 1,260; b could not use the spare before
    assert spare.queueing["mean"] == pytest.approx((0.0 + 1260.0 - 100.0) / 2)  # a at once, b waited 1,160 s
    # the spare's idle GPUs are held (reserved for recovery): n2 from 0 to 560, n0 from its repair on
    assert spare.gpu_hours["held"] >= 4 * 560 / 3600 - 1e-9
    total = sum(spare.gpu_hours[b] for b in ("down", "useful", "idle_allocated", "lost_to_failure",
                                              "grace_and_startup", "held", "free_fragmented", "free"))
    assert total == pytest.approx(spare.gpu_hours["capacity"])


def test_an_interruptible_job_runs_on_the_spare_and_is_stopped_at_once_for_the_failed_gang():
    """The real engine, the same story as above but b may be stopped at once: b runs on the spare n2 from its
    arrival; at detection (560) a restarts on n1 + n2 and b is stopped there at once (no grace), keeping its
    checkpoint at 300 s of work, and requeued; the repaired n0 becomes the spare and b runs there."""
    trace = Trace("t", (TraceJob("a", "q", 0.0, 1000.0, 2, 4), TraceJob("b", "q", 100.0, 5000.0, 1, 4)))
    model = Scripted(rate=1.0, detection_timeout=60.0, repair_time=1000.0, script={"n0": [500.0]})
    rep = replay(rack_of_three(), trace, cycle_interval=10, failures=model, checkpoint=Checkpointing(300.0),
                 spares=1, interruptible=lambda job: job.id == "b", fairness=False)
    s = rep.spares
    assert (s["restarts_on_spare"], s["stopped_on_spare"]) == (1, 1)
    assert rep.failures["time_to_restart"]["p50"] == pytest.approx(60.0)
    assert rep.evictions_by_rule == {"spare": 1}
    assert s["stopped_gpu_hours"] == pytest.approx(4 * 160 / 3600)  # 460 s run, 300 s checkpointed
    assert rep.jobs_finished == 2
    # b ran on the spare from 100 to 560; requeued, it restarts on n1 or n2 when a ends (1,260), not on a spare
    assert s["interruptible_gpu_hours_on_spares"] == pytest.approx(4 * 460 / 3600)
    # held counts only a spare's idle GPUs: n2 from 0 to 100 (then b), n0 from its repair (1,500) to the end
    # (b's end: 1,260 + 4,700 s left)
    assert rep.gpu_hours["held"] == pytest.approx(4 * (100 + 5960 - 1500) / 3600, abs=4 * 20 / 3600)


def test_spares_must_be_a_count():
    with pytest.raises(ValueError, match="spares"):
        replay(rack_of_three(), Trace("t", ()), engine=first_fit, spares=-1)


# -- several GPU models (new-user trial 15, F1) -----------------------------------------------------------

@pytest.mark.parametrize("flavors", [1, 7])
def test_a_job_of_any_flavor_counts_its_gpus_once_in_the_fair_share(tmp_path, flavors):
    """A job that may take any GPU model counts on each flavor's water-fill, so on openb (7 models) one 1-GPU job
    alone read a fair share of 7 GPUs (usage/fair 0.14) and two uncontended teams J = 0.903. The team's fair share
    is capped at its demand in GPUs: usage/fair 1.00 and J = 1 when nobody waits, whatever the number of models."""
    nodes = tuple(NodeSpec(name=f"n{i}", gpus=8, flavor=f"M{i % flavors}") for i in range(14))
    cluster = ClusterSpec(name="multi", nodes=nodes, queues=(QueueSpec(name="a"), QueueSpec(name="b")))
    jobs = (TraceJob(id="1", submit=0.0, duration=3600.0, queue="a", tasks=1, gpus_per_task=8),
            TraceJob(id="2", submit=0.0, duration=7200.0, queue="b", tasks=2, gpus_per_task=8))
    report = replay(cluster, Trace(name="t", jobs=jobs))
    teams = report.fairness["teams"]
    assert teams["a"]["mean_usage_over_fair_share"] == pytest.approx(1.0), teams
    assert teams["b"]["mean_usage_over_fair_share"] == pytest.approx(1.0), teams
    assert teams["a"]["fair_share_gpu_hours"] == pytest.approx(teams["a"]["gpu_hours_used"])
    assert report.fairness["jain_mean"] == pytest.approx(1.0)
