"""New-user trial 22, F3: a submission's what-if showed other teams' jobs starting up to 14.7 h EARLIER, with 8
evictions, and said nothing of why. Reproduced on the Philly demo data (a replay to day 26.5, 44 jobs pending) it
had two causes:

- a fault of the forecast: a job evicted (reclaimed for the new job, or drained) was requeued and forecast as a
  fresh job: its run time restarted from the estimator's median for a new job (1.1 h for the reclaimed 2869ce jobs,
  which were expected to run 45 h more), so its GPUs came free days early and jobs behind it started sooner. A
  requeued job now resumes with the work it has left (forecast.forecast: runtime(job, done) - done), as the replay's
  jobs do;
- real effects, now named per job (whatif.explain / Why): the new job's reclaim frees whole nodes another gang
  then takes ("eviction", for the new job), and the new job's demand moves the water-filled fair shares, which
  swaps two other queues whose usage over share were nearly equal ("reordered"), with what follows from it.
"""
from __future__ import annotations

from dataclasses import replace

from scheduler.core.snapshot import CycleConfig
from scheduler.core.testing import World
from scheduler.forecast import RuntimeEstimator
from scheduler.forecast.whatif import describe, what_if

SUBMIT = {"kind": "submit", "id": "h", "queue": "a", "tasks": 1, "gpus_per_task": 8, "time_limit": 600}


def by_limit(job, elapsed):
    t = job.time_limit or 3600.0
    return t, t


def _reclaim_world() -> World:
    """n1, n2 held by b's v1 and v2 (b borrows n2 beyond its quota of 8), n3 by a's r (ends at 36000 s); c (no quota)
    waits with p. A submission to a (quota 16) reclaims one of b's jobs."""
    w = World().nodes(count=3, gpus=8)
    w.queue(name="a", quota={"H100": 16}, limit={"H100": 24})
    w.queue(name="b", quota={"H100": 8}, limit={"H100": 24})
    w.queue(name="c", quota={"H100": 0}, limit={"H100": 24})
    w.running(name="v1", queue="b", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.running(name="v2", queue="b", nodes=["n2"], gpus_per_task=8, started=0.0)
    w.running(name="r", queue="a", nodes=["n3"], gpus_per_task=8, started=0.0)
    w._jobs["r"] = replace(w._jobs["r"], time_limit=36000.0)
    w.job(name="p", queue="c", tasks=1, gpus_per_task=8, submit=1.0, time_limit=200000.0)
    return w


def test_a_reclaimed_job_resumes_with_the_work_it_has_left():
    """b's jobs are expected to run 90000 s in all (the estimator, given they have run 20000 s), a fresh b job 3600 s.
    v1, reclaimed for the submission, restarts when r ends (36000 s) and runs its 70000 s left: q, behind p, still
    starts when v2 ends (90000 s). It read 39600 s: v1 rerun as a fresh 1-h job freed n3 14 h early."""
    est = RuntimeEstimator(window=50, min_samples=3)
    for secs in [3600.0] * 7 + [90000.0] * 3:
        est.observe("u", "b", 8, secs)

    def estimate(job, elapsed):
        e = est.estimate("u", job.queue, job.gpus_requested, elapsed=elapsed, time_limit=job.time_limit)
        return e.median, e.median

    w = _reclaim_world()
    w.job(name="q", queue="c", tasks=1, gpus_per_task=8, submit=2.0, time_limit=200000.0)
    out = what_if(w.snapshot(now=20000.0), [SUBMIT], estimate, resolution=0.0)
    assert [(v, rule, ben) for _, v, rule, ben in out.evictions] == [("v1", "reclaim", "h")]
    assert out.before["q"].start == 90000.0
    assert out.after["q"].start == 90000.0
    assert "q" not in out.why


def test_a_drained_job_resumes_with_the_work_it_has_left():
    """d ran 4000 s of its 10000 s when n1 is drained; it restarts on n2 when r ends (20000 s) for the 6000 s left,
    and p (behind it in its queue) starts at 26000 s, not 30000 s. p says why: n1 is drained."""
    w = World().nodes(count=2, gpus=8)
    w.queue(name="a", quota={"H100": 16}, limit={"H100": 16})
    w.running(name="d", queue="a", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.running(name="r", queue="a", nodes=["n2"], gpus_per_task=8, started=0.0)
    w._jobs["d"] = replace(w._jobs["d"], time_limit=10000.0)
    w._jobs["r"] = replace(w._jobs["r"], time_limit=20000.0)
    w.job(name="p", queue="a", tasks=1, gpus_per_task=8, submit=1.0, time_limit=5000.0)
    out = what_if(w.snapshot(now=4000.0), [{"kind": "drain_nodes", "nodes": ["n1"]}], by_limit, resolution=0.0)
    assert out.before["p"].start == 10000.0
    assert out.after["d"].start == 20000.0 and out.after["p"].start == 26000.0
    assert (out.why["p"].moved, out.why["p"].cause) == ("later", "drained_nodes")


def test_a_job_that_starts_earlier_names_the_eviction_the_submission_makes():
    """p waits for r (36000 s) without the submission; with it, v1 is reclaimed for h, h runs 600 s, and p takes
    n1 at 760 s: its Why names v1's reclaim for h, and the eviction says it is for the change's job."""
    w = _reclaim_world()
    for v in ("v1", "v2"):
        w._jobs[v] = replace(w._jobs[v], time_limit=72000.0)
    out = what_if(w.snapshot(now=100.0), [SUBMIT], by_limit, resolution=0.0)
    assert (out.before["p"].start, out.after["p"].start) == (36000.0, 760.0)
    why = out.why["p"]
    assert (why.moved, why.cause, why.job, why.rule, why.beneficiary, why.at) == (
        "earlier", "eviction", "v1", "reclaim", "h", 760.0)
    assert describe(why) == ("starts earlier: the GPUs it starts on at 760 s are freed by the reclaim of job v1 for "
                             "job h, which happens only with the change")
    assert out.evictions == [(100.0, "v1", "reclaim", "h")]
    assert [e.cause for e in out.eviction_why] == ["for_change"] and out.avoided == []


def test_a_submission_to_a_third_queue_can_swap_two_queues_and_both_jobs_say_so():
    """x and y wait for n1 (free at 3600 s); by decayed usage over fair share y goes first (10/9 < 9.5/8). A 1-GPU
    job of z (on n3 for 10 h) takes one GPU of the water-filled shares: y's falls to 8 and x goes first
    (9.5/8 < 10/8). Neither is evicted nor takes the other's GPUs by force: they swap, and each names the other."""
    w = World().nodes(names=["n1", "n2"], gpus=8).node(name="n3", gpus=1)
    w.queue(name="x", quota={"H100": 4}, limit={"H100": 17}, recent_usage={"H100": 9.5})
    w.queue(name="y", quota={"H100": 0}, limit={"H100": 17}, recent_usage={"H100": 10.0})
    w.queue(name="z", quota={"H100": 0}, limit={"H100": 17})
    w.running(name="r", queue="x", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.running(name="s", queue="y", nodes=["n2"], gpus_per_task=8, started=0.0)
    w._jobs["r"] = replace(w._jobs["r"], time_limit=3600.0)
    w._jobs["s"] = replace(w._jobs["s"], time_limit=36000.0)
    w.job(name="px", queue="x", tasks=1, gpus_per_task=8, submit=1.0, time_limit=7200.0)
    w.job(name="py", queue="y", tasks=1, gpus_per_task=8, submit=2.0, time_limit=7200.0)
    out = what_if(w.snapshot(now=100.0), [{"kind": "submit", "id": "h", "queue": "z", "tasks": 1, "gpus_per_task": 1,
                                           "time_limit": 36000}],
                  by_limit, resolution=0.0, config=CycleConfig(usage_half_life=7 * 86400.0))
    assert (out.before["px"].start, out.before["py"].start) == (10800.0, 3600.0)
    assert (out.after["px"].start, out.after["py"].start) == (3600.0, 10800.0)
    assert out.evictions == []
    assert (out.why["px"].moved, out.why["px"].cause, out.why["px"].job) == ("earlier", "reordered", "py")
    assert (out.why["py"].moved, out.why["py"].cause, out.why["py"].job) == ("later", "reordered", "px")
    assert "fair shares" in describe(out.why["px"])


def test_nothing_moves_nothing_to_explain_and_a_cancel_is_named():
    w = _reclaim_world()
    out = what_if(w.snapshot(now=100.0), [], by_limit, resolution=0.0)
    assert out.why == {} and out.eviction_why == [] and out.avoided == []
    out = what_if(w.snapshot(now=100.0), [{"kind": "cancel", "job": "r"}], by_limit, resolution=0.0)
    assert out.after["p"].start == 100.0
    assert (out.why["p"].cause, out.why["p"].job) == ("cancelled", "r")
