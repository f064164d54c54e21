"""scheduler.forecast.whatif: the forecast before and after each kind of change; the input is untouched."""
from __future__ import annotations

import pytest

from scheduler.core.snapshot import CycleConfig
from scheduler.core.testing import World
from scheduler.forecast.whatif import WhatIfError, what_if

RUN = {"r1": 3600.0, "r2": 7200.0}


def est(job, elapsed):
    t = RUN.get(job.id, 1800.0)
    return t, 2 * t


def _world() -> World:
    w = World().racks(count=1, nodes_per_rack=2, gpus=8)  # rack1-n1, rack1-n2: 16 GPUs
    w.queue(name="a", quota={"H100": 8}, limit={"H100": 16})
    w.queue(name="b", quota={"H100": 8}, limit={"H100": 8})
    w.running(name="r1", queue="a", nodes=["rack1-n1"], gpus_per_task=8)
    w.running(name="r2", queue="b", nodes=["rack1-n2"], gpus_per_task=8)
    w.job(name="pa", queue="a", tasks=1, gpus_per_task=8, submit=1.0)
    return w


def test_nothing_changed_means_the_same_forecast_and_the_snapshot_is_untouched():
    snap = _world().snapshot()
    out = what_if(snap, [], est, resolution=0.0)
    assert out.before == out.after and out.before["pa"].start == 3600.0
    assert out.evictions == [] and all(q["change_s"] == 0 if q["jobs"] else q["change_s"] is None
                                                  for q in out.queues.values())
    assert snap == _world().snapshot()


def test_hypothetical_submission_gets_its_own_start_and_delays_no_one_ahead_of_it():
    out = what_if(_world().snapshot(), [{"kind": "submit", "id": "h", "queue": "a", "tasks": 1, "gpus_per_task": 8}],
                  est, resolution=0.0)
    assert out.hypothetical == ["h"] and "h" not in out.before
    assert out.after["pa"].start == 3600.0  # pa was first
    # pa runs 1800 s from 3600; r2 ends at 7200 but b's 8 GPUs of n2 are then free for a (limit 16)
    assert out.after["h"].start == 5400.0


def test_cancel_a_running_job_and_add_nodes_start_the_waiting_job_now():
    for change in ({"kind": "cancel", "job": "r1"}, {"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "H100",
                                                    "domain": "rack1"}):
        out = what_if(_world().snapshot(), [change], est, resolution=0.0)
        assert out.before["pa"].start == 3600.0 and out.after["pa"].start == 0.0
        assert out.queues["a"]["change_s"] == -3600.0


def test_quota_limit_change_lets_a_capped_queue_borrow():
    w = World().racks(count=1, nodes_per_rack=2, gpus=8)
    w.queue(name="a", quota={"H100": 8}, limit={"H100": 16})
    w.queue(name="b", quota={"H100": 8}, limit={"H100": 8})
    w.running(name="r2", queue="b", nodes=["rack1-n2"], gpus_per_task=8)  # rack1-n1 is free
    w.job(name="pb", queue="b", tasks=1, gpus_per_task=8, submit=2.0)
    snap = w.snapshot()
    out = what_if(snap, [{"kind": "set_quota", "queue": "b", "flavor": "H100", "limit": 16}], est, resolution=0.0)
    assert out.before["pb"].start == 7200.0  # b is at its limit until r2 ends
    assert out.after["pb"].start == 0.0
    assert out.queues["b"] == {"jobs": 1, "mean_wait_before_s": 7200.0, "mean_wait_after_s": 0.0, "change_s": -7200.0,
                               "no_start_before": 0, "no_start_after": 0, "hypothetical": 0}


def test_drain_evicts_and_requeues_the_jobs_on_the_nodes():
    out = what_if(_world().snapshot(), [{"kind": "drain_nodes", "nodes": ["rack1-n2"]}], est, resolution=0.0)
    assert out.evictions == [(0.0, "r2", "drain", None)]
    # r2 is pending again; pa still takes n1 when r1 ends; r2 then waits behind it (one node left)
    assert out.after["pa"].start == 3600.0 and out.after["r2"].start == 5400.0


def test_priority_change_reorders_a_queue():
    w = _world()
    w.job(name="pa2", queue="a", tasks=1, gpus_per_task=8, submit=5.0)
    out = what_if(w.snapshot(), [{"kind": "set_priority", "job": "pa2", "priority": 5}], est, resolution=0.0)
    assert (out.before["pa"].start, out.before["pa2"].start) == (3600.0, 5400.0)
    # priority 5 preempts r1 (priority 0, same queue): pa2 starts after r1's 30 s grace, at the next cycle
    assert out.after["pa2"].start == 60.0 and out.after["pa"].start > 3600.0
    assert [(victim, rule, ben) for _, victim, rule, ben in out.evictions] == [("r1", "preempt", "pa2")]
    # a variant without preemption: it only goes first
    out = what_if(w.snapshot(), [{"kind": "set_priority", "job": "pa2", "priority": 5}], est, resolution=0.0,
                  config=CycleConfig(preemption=False))
    assert (out.after["pa2"].start, out.after["pa"].start) == (3600.0, 5400.0) and out.evictions == []


@pytest.mark.parametrize("change, field", [
    ({"kind": "explode"}, "kind"),
    ({"kind": "submit", "queue": "nope", "tasks": 1, "gpus_per_task": 1}, "queue"),
    ({"kind": "set_quota", "queue": "a", "flavor": "B200", "quota": 1}, "flavor"),
    ({"kind": "set_quota", "queue": "a", "flavor": "H100", "guarantee": 9, "quota": 8}, "quota"),
    ({"kind": "set_weight", "queue": "a", "weight": 0}, "weight"),
    ({"kind": "drain_nodes", "nodes": ["ghost"]}, "nodes"),
    ({"kind": "add_nodes", "count": 0, "gpus": 8}, "count"),
    ({"kind": "add_nodes", "count": 1, "gpus": 8, "domain": "nowhere"}, "domain"),
    ({"kind": "cancel", "job": "ghost"}, "job"),
    ({"kind": "submit", "id": "pa", "queue": "a", "tasks": 1, "gpus_per_task": 1}, "id"),
])
def test_bad_changes_name_the_index_and_field(change, field):
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), [{"kind": "set_weight", "queue": "a", "weight": 2}, change], est)
    assert err.value.index == 1 and err.value.field == field


@pytest.mark.parametrize("field, value", [("guarantee", -1), ("quota", 2**31), ("limit", 10**30), ("quota", 2.5),
                                          ("limit", True)])
def test_a_quota_outside_the_quota_apis_range_is_refused_naming_the_field_and_the_rule(field, value):
    """New-user trial 13: the quota API takes 0 to 2147483647 GPUs, the what-if took any number (its API 0 to
    10,000,000); one rule now (scheduler.forecast.variants.quota_error), on the field it breaks."""
    change = {"kind": "set_quota", "queue": "a", "flavor": "H100", field: value}
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), [change], est)
    assert (err.value.index, err.value.field) == (0, field)
    assert err.value.message == f"{field} must be a whole number of GPUs from 0 to 2147483647"
    top = {"kind": "set_quota", "queue": "a", "flavor": "H100", "limit": 2**31 - 1}  # the API's largest: taken
    assert what_if(_world().snapshot(), [top], est).after
