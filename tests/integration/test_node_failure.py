"""End to end on PostgreSQL + Redis + a real Celery worker: a running gang loses a node (its heartbeats stop),
the worker's failure detection requeues the gang whole and a later cycle restarts it on healthy nodes; no
GPU is ever counted twice. Clocks are explicit (ISO times passed to the tasks), so no test waits out the
heartbeat timeout, the failure grace or the backoff in wall time."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Job, Node, Queue, Team
from gpuplatform.scheduling.tasks import detect_node_failures, run_scheduling_cycle
from tests.integration.test_celery_cycle import assert_consistent
from tests.platform.helpers_platform import small_spec

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
T = datetime(2024, 6, 1, 9, 0, tzinfo=tz.utc)
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def at(seconds: float) -> str:
    return (T + timedelta(seconds=seconds)).isoformat()


def cycle(seconds: float) -> dict:
    summary = run_scheduling_cycle.delay(clock=at(seconds)).get(timeout=60)
    assert not summary["skipped"]
    return summary


def beat(names, lost, seconds: float) -> None:
    for n in names:
        if n != lost:
            services.record_heartbeat(n, gpus=[], at=T + timedelta(seconds=seconds))


def nodes_of(job) -> set[str]:
    return set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name", flat=True))


def test_gang_on_a_lost_node_is_requeued_whole_and_restarts_on_healthy_nodes(celery_worker):
    services.load_cluster_spec(small_spec())
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    job = services.submit_job(command=SLEEP, team=team, queue=queue, name="gang", submitted_at=T,
                              roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 8}])
    names = list(Node.objects.values_list("name", flat=True))
    for n in names:
        services.record_heartbeat(n, gpus=[], at=T)
    assert cycle(0)["binds"] == 1
    first = nodes_of(job)
    assert len(first) == 2
    lost = sorted(first)[0]
    for n in names:  # everyone but `lost` keeps reporting
        if n != lost:
            services.record_heartbeat(n, gpus=[], at=T + timedelta(seconds=190))
    report = detect_node_failures.delay(now=at(200)).get(timeout=60)  # 200 s silent > 60 s timeout + 120 s grace
    assert report["not_ready"] == [lost] and report["failed_nodes"] == [lost] and report["requeued"] == [job.pk]
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and job.submitted_at == T
    assert nodes_of(job) == set() and job.not_before == T + timedelta(seconds=260)
    assert_consistent()
    # Cycles run failure detection first (at their clock): the live nodes keep reporting meanwhile.
    beat(names, lost, 225)
    assert cycle(230)["binds"] == 0  # backoff
    beat(names, lost, 255)
    assert cycle(260)["binds"] == 1
    job.refresh_from_db()
    assert job.state == "running" and len(nodes_of(job)) == 2 and lost not in nodes_of(job)
    assert Node.objects.get(name=lost).state == "not_ready"
    assert_consistent()
    assert Allocation.objects.filter(released_at__isnull=True).count() == 16
    kinds = set(Event.objects.values_list("kind", flat=True))
    assert {"node_not_ready", "node_failed", "requeued_after_failure"} <= kinds
