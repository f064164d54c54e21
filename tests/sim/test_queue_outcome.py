"""A queue's outcome kept across cycles (actions.allocate._QueueOutcome, issue 16 sixth round) gives what the walk
gives: replays in which allocate takes a refused queue's run in one step decide, cycle by cycle, exactly as the
same replays with no outcome ever kept (the walk tries every job): the same bindings, the same failed_order (the
eviction phase's candidates, in order) and the same reasons in the same order. The outcome must be taken in a
good share of the queue turns (else this checks nothing)."""
from __future__ import annotations

import pytest

import scheduler.core.cycle as cycle_module
from clusterspec.importers import load_cluster, load_trace
from scheduler.core import CycleConfig
from scheduler.core.actions import allocate as allocate_module
from scheduler.sim.replay import replay
from tests.sim.test_replay_digest import helios_slice


def _recorded(name: str, keep: bool) -> tuple[list, int]:
    """(per cycle: (bindings, failed_order ids, reasons' items in order), outcomes taken) of one replay."""
    cycles: list = []
    taken = [0]
    real_allocate, real_keep, real_given = (allocate_module.allocate, allocate_module._PendingOrder.keep,
                                            allocate_module._PendingOrder.given)

    def recording(*args, **kw):
        out = real_allocate(*args, **kw)
        cycles.append(([(b.job_id, b.tasks, b.domain, b.share_before, b.share_after) for b in out.bindings],
                       [j.id for j in out.failed_order], list(out.reasons.items())))
        return out

    def given(self, queue, outcome):
        found = real_given(self, queue, outcome)
        taken[0] += found is not None
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cycle_module, "allocate", recording)
        mp.setattr(allocate_module._PendingOrder, "given", given)
        if not keep:
            mp.setattr(allocate_module._PendingOrder, "keep", lambda *a, **k: None)
        if name == "helios":
            cluster, trace = helios_slice(0.5, borrow=False, start=30.0, max_hours=24.0)
            replay(cluster, trace, config=CycleConfig(), cycle_interval=1.0, fairness=False)
        elif name == "helios-borrow":
            cluster, trace = helios_slice(0.3, borrow=True, start=30.0, max_hours=24.0)
            replay(cluster, trace, config=CycleConfig(), cycle_interval=1.0, fairness=False)
        else:
            replay(load_cluster("philly", scale=0.05), load_trace("philly", start_days=40.0, until_days=40.3),
                   time_limit_factor=1.0 if name == "philly-limits" else None)
    assert real_keep is allocate_module._PendingOrder.keep
    return cycles, taken[0]


@pytest.mark.parametrize("name", ["helios", "helios-borrow", "philly", "philly-limits"])
def test_kept_queue_outcomes_decide_as_the_walk(name: str) -> None:
    kept, taken = _recorded(name, keep=True)
    walked, none = _recorded(name, keep=False)
    assert none == 0
    assert len(kept) == len(walked)
    for i, (a, b) in enumerate(zip(kept, walked)):
        assert a == b, f"cycle {i} differs"
    if name == "helios":
        assert taken > len(kept)  # most cycles take several queues' outcomes
