"""A re-run is settled while the drains in force are at CycleConfig.max_drains (session 22, issue 16).

core.cycle.settled_until bounded a re-run's fixed point by the earliest time a refused job starves
(Reservations.starves_at) whenever fewer than max_reservations jobs held GPUs. Since max_drains (default 1) caps the
drains in force, a cycle with that many drains standing makes no new one, starving jobs or not
(Reservations.closed), so the bound was in the past on most busy re-runs of Philly and none settled. Here each
settled cycle is checked against a fresh engine on the same state (tests/sim/test_settled_cycles._Verified), the
reports with and without settling must agree, and cycles settled with a drain standing and a starving job waiting
are counted: there must be some, with max_drains 1 and 2."""
from __future__ import annotations

import random

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.core.actions.backfill import ROOM_CODES
from scheduler.core.snapshot import CycleConfig

from tests.sim.test_settled_cycles import _Verified, _both


class _Counting(_Verified):
    at_cap = 0  # settled cycles with max_drains holds standing and a starving job refused for lack of room

    def settled_cycle(self, now: float) -> None:
        last, config = self.last_result, self.config
        starving = [j for j, r in last.pending.items() if r.code in ROOM_CODES and j not in last.held
                    and now - self.state.pending[j].submit_time >= config.starvation_seconds]
        if len(last.nominations) >= config.max_drains and starving:
            type(self).at_cap += 1
        super().settled_cycle(now)


def _busy(rng: random.Random) -> tuple[ClusterSpec, Trace]:
    """6 nodes x 8 GPUs in 3 leaves, two queues that share it without borrowing (each quota and limit is its half),
    one priority, no time limits: many 1-2 GPU jobs and some 2-node gangs that starve and get drains."""
    nodes = tuple(NodeSpec(f"n{i}", "H100", 8, domain=f"leaf{i // 2}") for i in range(6))
    domains = (DomainSpec("spine", 2), *(DomainSpec(f"leaf{i}", 1, "spine") for i in range(3)))
    queues = (QueueSpec("qa", quotas={"H100": (24, 24, 24)}), QueueSpec("qb", quotas={"H100": (24, 24, 24)}))
    jobs, t = [], 0.0
    for i in range(200):
        t += rng.expovariate(1 / 60)
        gang = rng.random() < 0.15
        jobs.append(TraceJob(f"j{i}", rng.choice(("qa", "qb")), round(t), rng.uniform(300, 3 * 3600),
                             2 if gang else 1, 8 if gang else rng.choice((1, 1, 2))))
    return ClusterSpec("busy", nodes=nodes, domains=domains, queues=queues), Trace("busy", tuple(jobs))


@pytest.mark.parametrize("max_drains", [1, 2])
def test_reruns_settle_with_the_drains_at_their_cap(monkeypatch, max_drains):
    import tests.sim.test_settled_cycles as settled
    monkeypatch.setattr(settled, "_Verified", _Counting)
    _Counting.at_cap = 0
    total = 0
    for seed in range(3):
        cluster, trace = _busy(random.Random(seed))
        config = CycleConfig(starvation_seconds=600.0, max_drains=max_drains)
        total += _both(cluster, trace, config=config, fairness=False, cycle_interval=20.0)
    assert total > 0
    assert _Counting.at_cap > 0
