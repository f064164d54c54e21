"""The forecast frees a victim's GPUs when its stop really ends (trial 21, F1): a job already being evicted at its
stored stop deadline (JobInfo.stop_deadline: the platform's preempt_deadline, a releasing entry's latest
release_deadline), a job the forecast evicts after its queue's grace period (`queue_grace`) or its move's own
checkpoint grace, not after a fixed 30 s."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core.snapshot import JobInfo
from scheduler.core.testing import World
from scheduler.forecast import forecast
from scheduler.forecast.whatif import what_if


def _preempting_world(deadline: float | None) -> World:
    """One node of 8 GPUs held by `v`, being evicted (its stop ends at `deadline`) for the pending `b` (8 GPUs)."""
    w = World().nodes(count=1, gpus=8)
    w.queue(name="q", quota={"H100": 8})
    w.running(name="v", nodes=["n1"], gpus_per_task=8, started=0.0)
    v = w._jobs["v"]
    w.job(name="b", tasks=1, gpus_per_task=8, submit=50.0, reserved=v.placement)  # the victim's GPUs held for it
    w._jobs["v"] = replace(v, state="preempting", evicted_for="b", stop_deadline=deadline)
    return w


def test_a_victim_being_evicted_frees_its_gpus_at_its_stored_stop_deadline():
    # a checkpoint grace of one hour: the stop began at t=100, its GPUs come free at t=3700
    out = forecast(_preempting_world(3700.0).snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0)
    assert out.starts == {"b": 3700.0}
    # a deadline already past: at the first step
    out = forecast(_preempting_world(40.0).snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0)
    assert out.starts == {"b": 100.0}
    # no deadline known (a replay's snapshot): the default grace period from now, as before
    out = forecast(_preempting_world(None).snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0,
                   grace_period=30.0)
    assert out.starts == {"b": 160.0}  # released at 130, seen at the next step (60 s after now)


def test_what_if_reads_the_stored_deadline_too():
    """The what-if's before and after runs start the beneficiary when the victim's long grace ends."""
    snap = _preempting_world(3700.0).snapshot(now=100.0)
    out = what_if(snap, [{"kind": "set_weight", "queue": "q", "weight": 2.0}], lambda job, el: (7200.0, 7200.0),
                  resolution=0.0)
    assert out.before["b"].start == 3700.0 and out.after["b"].start == 3700.0


def test_surplus_tasks_being_released_free_their_gpus_at_their_release_deadline():
    """A releasing entry (surplus tasks of an elastic job evicted for `b`): its GPUs at its stop_deadline."""
    w = World().nodes(count=1, gpus=8)
    w.queue(name="q", quota={"H100": 8})
    w.running(name="e", nodes=["n1"] * 8, gpus_per_task=1, min_available=4, started=0.0)
    w.job(name="b", tasks=4, gpus_per_task=1, submit=50.0)
    e = w._jobs["e"]
    kept, surplus = e.placement[:4], e.placement[4:]
    w._jobs["e"] = replace(e, placement=kept, roles=(replace(e.roles[0], tasks=4),))
    four = replace(e.roles[0], tasks=4, min_available=4)
    w._jobs["e:releasing"] = JobInfo(id="e:releasing", queue="q", roles=(four,), state="preempting", placement=surplus,
                                     evicted_for="b", part_of="e", stop_deadline=1900.0)
    out = forecast(w.snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0)
    assert out.starts == {"b": 1900.0}


def _reclaim_world() -> World:
    """`t` borrows the whole node; `own`'s job, within its quota, reclaims it in the forecast's first cycle."""
    w = World().nodes(count=1, gpus=8)
    w.queue(name="own", quota={"H100": 8})
    w.queue(name="t", quota={"H100": 0})
    w.running(name="borrower", queue="t", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.job(name="b", queue="own", tasks=1, gpus_per_task=8, submit=50.0)
    return w


def test_a_victim_the_forecast_evicts_keeps_its_gpus_for_its_queues_grace_period():
    snap = _reclaim_world().snapshot(now=100.0)
    out = forecast(snap, lambda job, el: 7200.0, resolution=0.0, queue_grace={"t": 900.0})
    assert [(e[1], e[2], e[3]) for e in out.evictions] == [("borrower", "reclaim", "b")]
    assert out.starts == {"b": 1000.0}  # evicted at 100, released after t's 900 s
    # a queue not named: the default grace period
    out = forecast(snap, lambda job, el: 7200.0, resolution=0.0, queue_grace={}, grace_period=30.0)
    assert out.starts == {"b": 160.0}  # released at 130, seen at the next step (60 s after the eviction)


def test_the_forecasts_own_evictions_carry_their_deadline_into_later_snapshots():
    """A job the forecast evicts is seen by the next cycles as preempting with its stop_deadline (the state's
    mark_preempting), and the deadline is gone once it is requeued."""
    from scheduler.core import run_cycle

    seen = []

    def engine(snapshot, config, cache=None):
        seen.extend((snapshot.now, j.state, j.stop_deadline) for j in snapshot.jobs if j.id == "borrower")
        return run_cycle(snapshot, config, cache=cache)

    forecast(_reclaim_world().snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0, engine=engine,
             queue_grace={"t": 900.0})
    assert seen[0] == (100.0, "running", None)
    assert (160.0, "preempting", 1000.0) in seen
    assert all(d is None for _, state, d in seen if state == "pending")


def test_a_job_whose_stop_ends_it_is_not_requeued():
    """A job being cancelled (preempting, stop_ends) frees its GPUs at its deadline and never comes back: the job
    behind it starts then, not after the cancelled job ran again (it was submitted first)."""
    w = World().nodes(count=1, gpus=8)
    w.queue(name="q", quota={"H100": 8})
    w.running(name="c", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.job(name="p", tasks=1, gpus_per_task=8, submit=50.0)
    w._jobs["c"] = replace(w._jobs["c"], state="preempting", stop_deadline=600.0, stop_ends=True)
    out = forecast(w.snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0)
    assert out.starts == {"p": 600.0}
    # the same stop toward a requeue: c (submitted first) runs again before p
    w._jobs["c"] = replace(w._jobs["c"], stop_ends=False)
    out = forecast(w.snapshot(now=100.0), lambda job, el: 7200.0, resolution=0.0)
    # c resumes with the work it has left (it ran 100 s of its 7200 s before its stop: new-user trial 22, F3)
    assert out.starts == {"p": 600.0 + 7200.0 - 100.0}
