"""New-user trial 25: a what-if that changes nothing (`{"changes": []}`, or a queue's weight set to the weight it has)
answered `"evictions": []`, no job moved, and 7 to 12 `avoided_evictions` on the Philly demo (a member: 1 to 4
`hidden_avoided_evictions`). The two forecasts were identical (same snapshot, same estimate, each run its own engine
cache); the comparison was not: `avoided` was the before-run's evictions missing from the after-run's evictions less
those both make, so every eviction both runs made read as avoided. `avoided` now compares with the whole after-run,
as `evictions` compares with the whole before-run. An empty `changes` is a 400 on `changes`."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core.snapshot import CycleConfig
from scheduler.core.testing import World
from scheduler.forecast.whatif import what_if


def by_limit(job, elapsed):
    t = job.time_limit or 3600.0
    return t, 2 * t


def _world() -> World:
    """n1, n2 held by b's v1 and v2 (b borrows n2 beyond its quota of 8), n3 by a's r; a's w (within a's quota of 16)
    waits and reclaims one of b's jobs in the forecast itself; c's p waits for whole nodes."""
    w = World().nodes(count=3, gpus=8)
    w.queue(name="a", quota={"H100": 16}, limit={"H100": 24})
    w.queue(name="b", quota={"H100": 8}, limit={"H100": 24})
    w.queue(name="c", quota={"H100": 0}, limit={"H100": 24})
    w.running(name="v1", queue="b", nodes=["n1"], gpus_per_task=8, started=0.0)
    w.running(name="v2", queue="b", nodes=["n2"], gpus_per_task=8, started=0.0)
    w.running(name="r", queue="a", nodes=["n3"], gpus_per_task=8, started=0.0)
    for name, limit in (("v1", 72000.0), ("v2", 72000.0), ("r", 36000.0)):
        w._jobs[name] = replace(w._jobs[name], time_limit=limit)
    w.job(name="w", queue="a", tasks=1, gpus_per_task=8, submit=1.0, time_limit=600.0)
    w.job(name="p", queue="c", tasks=1, gpus_per_task=8, submit=2.0, time_limit=7200.0)
    w.job(name="p2", queue="b", tasks=2, gpus_per_task=8, submit=3.0, time_limit=7200.0)
    return w


NOOPS = ([], [{"kind": "set_weight", "queue": "b", "weight": 1.0}],
         [{"kind": "set_quota", "queue": "a", "flavor": "H100", "quota": 16}])


def test_a_what_if_that_changes_nothing_moves_nothing_and_neither_causes_nor_avoids_an_eviction():
    snap = _world().snapshot(now=100.0)
    cfg = CycleConfig(usage_half_life=7 * 86400.0)
    for changes in NOOPS:
        for _ in range(3):
            out = what_if(snap, changes, by_limit, resolution=0.0, config=cfg)
            assert out.before == out.after, changes
            # the forecast itself reclaims (w, within a's quota, takes back a node b borrows): both runs make it,
            # so it is neither caused nor avoided
            assert out.why == {} and out.evictions == [] and out.eviction_why == [], changes
            assert out.avoided == [], (changes, out.avoided)


def test_the_forecast_of_the_world_does_reclaim_so_the_no_op_test_has_evictions_to_report():
    from scheduler.forecast.forecast import forecast_start

    _, info = forecast_start(_world().snapshot(now=100.0), by_limit, resolution=0.0)
    assert (100.0, "v1", "reclaim", "w") in info["evictions"]


def test_an_eviction_a_change_does_avoid_is_still_reported():
    """Cancelling w (the reclaimer): the before-run's reclaim of v1 for w is avoided, and nothing new is caused by
    it (p and p2's turns may move: only what the after-run does not make is listed)."""
    out = what_if(_world().snapshot(now=100.0), [{"kind": "cancel", "job": "w"}], by_limit, resolution=0.0)
    assert (100.0, "v1", "reclaim", "w") in out.avoided
    after = {(v, r) for _, v, r, _ in out.evictions}
    assert all((v, r) not in after for _, v, r, _ in out.avoided)
