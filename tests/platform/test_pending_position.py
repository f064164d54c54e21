"""The pending order is written once, by the cycle (Job.pending_position / queue_position from the order
the engine considered the jobs in), and the API and the pages read it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

from gpuplatform import dashboard_queries, services
from gpuplatform.models import Job, Queue, Team
from gpuplatform.scheduling import store
from scheduler.core.snapshot import CycleResult, PendingReason

SLEEP = ["sleep", "3600"]
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def _submit(queue: str, name: str, gpus: int, *, priority: int = 0, at: float = 0) -> Job:
    q = Queue.objects.get(name=queue)
    return services.submit_job(team=Team.objects.get(name=queue), queue=q, name=name, command=SLEEP, priority=priority,
                               roles=[{"name": "worker", "tasks": gpus // 8 or 1, "gpus_per_task": min(gpus, 8)}],
                               submitted_at=T0 + timedelta(seconds=at))


def positions() -> dict[str, tuple]:
    return {name: (pos, qpos) for name, pos, qpos in
            Job.objects.filter(state="pending").values_list("name", "pending_position", "queue_position")}


def test_positions_follow_the_engines_order_not_priority_or_submission(cluster):
    for i in range(4):  # alpha fills the cluster (32 GPUs, above its quota of 16)
        _submit("alpha", f"alpha-run{i}", 8, at=i)
    store.run_cycle_once(clock=T0 + timedelta(seconds=10))
    assert Job.objects.filter(state="running").count() == 4
    _submit("alpha", "alpha-old", 8, priority=10, at=20)
    _submit("alpha", "alpha-urgent", 8, priority=20, at=30)
    _submit("beta", "beta-late", 8, at=40)
    assert set(positions().values()) == {(None, None)}  # no cycle has seen them yet
    store.run_cycle_once(clock=T0 + timedelta(seconds=50))
    # beta is furthest below its fair share, so the engine considers its job first, whatever the
    # priorities and submit times of alpha's jobs; inside alpha, the higher priority first.
    assert positions() == {"beta-late": (1, 1), "alpha-urgent": (2, 1), "alpha-old": (3, 2)}
    # the page's table and CSV: `position` is the API's (in the queue), the overall order `overall_position`
    assert [(j["name"], j["overall_position"], j["position"]) for j in dashboard_queries.pending_jobs()] == \
        [("beta-late", 1, 1), ("alpha-urgent", 2, 1), ("alpha-old", 3, 2)]


def test_a_job_in_backoff_keeps_its_place_and_a_job_that_leaves_pending_loses_its_place(submit):
    """a (submitted first) waits out its requeue backoff; the cycle considered c, then b: a stands before them, as it
    is considered again in its place once the backoff ends (new-user trial 24, F3: it was put last, #3, and started
    first). A job submitted after every considered one still goes after them."""
    a, b, c = submit("a"), submit("b"), submit("c")
    d = submit("d")
    result = CycleResult(pending={a.pk: PendingReason("backoff", "requeued"), d.pk: PendingReason("backoff", "requeued"),
                                  c.pk: PendingReason("no_fit", "full"), b.pk: PendingReason("no_fit", "full")})
    store.apply_result(result, clock=T0, cycle_number=1)
    assert positions() == {"a": (1, 1), "c": (2, 2), "b": (3, 3), "d": (4, 4)}
    services.cancel_job(Job.objects.get(pk=b.pk))
    assert Job.objects.filter(pk=b.pk).values_list("pending_position", "queue_position").get() == (None, None)


def test_a_job_in_backoff_stands_at_its_queues_turn_of_the_fair_share_walk(cluster):
    """beta's considered job comes first in the walk, then alpha's; alpha's job in backoff (higher priority than its
    considered one) stands at alpha's turn, before it, not before beta's job; without fair share (FIFO) the queue's
    order is submission alone, so the later-submitted job in backoff stands after it."""
    old = _submit("alpha", "alpha-old", 8, at=0)
    urgent = _submit("alpha", "alpha-urgent", 8, priority=20, at=30)
    beta = _submit("beta", "beta-late", 8, at=40)
    result = CycleResult(pending={urgent.pk: PendingReason("backoff", "requeued"),
                                  beta.pk: PendingReason("no_fit", "full"), old.pk: PendingReason("no_fit", "full")})
    store.apply_result(result, clock=T0 + timedelta(seconds=50), cycle_number=1)
    assert positions() == {"beta-late": (1, 1), "alpha-urgent": (2, 1), "alpha-old": (3, 2)}
    store.apply_result(result, clock=T0 + timedelta(seconds=60), cycle_number=2, fair_share=False)
    assert positions() == {"beta-late": (1, 1), "alpha-old": (2, 1), "alpha-urgent": (3, 2)}
