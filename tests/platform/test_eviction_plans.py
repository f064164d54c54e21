"""Evictions are plans with an owner (issue 11): cancel-beneficiary-withdraws-eviction.yaml through the
database, the real engine and the node agents' assignments."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Job, Queue, Team
from gpuplatform.scheduling import store

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
SLEEP = ["sleep", "3600"]


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


def _submit(team, name, tasks, gpus, when, **kwargs):
    team_row, queue = Team.objects.get(name=team), Queue.objects.get(name=team)
    roles = kwargs.pop("roles", None) or [{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}]
    return services.submit_job(command=SLEEP, team=team_row, queue=queue, name=name, roles=roles, submitted_at=when,
                               **kwargs)


@pytest.mark.parametrize("how", ["cancel", "finish"])
def test_cancel_beneficiary_withdraws_eviction(cluster, how):
    """cancel-beneficiary-withdraws-eviction.yaml: victim (beta, borrowing) is reclaimed for beneficiary at t=6
    with a 60 s grace; the beneficiary is cancelled at t=10 (variant: it ends otherwise, finished by an
    admin) and the next cycle withdraws the eviction: victim running again, attempts 0, same GPUs, and an
    "eviction_withdrawn" Event saying why."""
    Queue.objects.filter(name="beta").update(preemption_grace_seconds=60)
    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=60)
    within = _submit("beta", "b-within", 2, 8, at(0), preemptible=False)
    victim = _submit("beta", "victim", 2, 8, at(0))
    store.run_cycle_once(clock=at(0))
    assert set(Job.objects.filter(pk__in=[within.pk, victim.pk]).values_list("state", flat=True)) == {"running"}
    gpus_before = sorted(victim.allocations.filter(released_at__isnull=True).values_list("gpu_id", flat=True))
    ben = _submit("alpha", "beneficiary", 2, 8, at(6))
    store.run_cycle_once(clock=at(6))
    victim.refresh_from_db()
    assert (victim.state, victim.evicted_for) == ("preempting", ben.pk)
    assert Event.objects.filter(kind="reclaimed", job=victim).exists()
    if how == "cancel":
        services.cancel_job(ben, reason="user asked", at=at(10))
    else:
        Job.objects.filter(pk=ben.pk).update(state="cancelled", reserved=None)
    store.run_cycle_once(clock=at(12))
    victim.refresh_from_db()
    assert (victim.state, victim.attempts, victim.preempt_deadline, victim.evicted_for) == ("running", 0, None, None)
    assert sorted(victim.allocations.filter(released_at__isnull=True).values_list("gpu_id", flat=True)) == gpus_before
    event = Event.objects.get(kind="eviction_withdrawn", job=victim)
    assert event.data["beneficiary"] == ben.pk and "withdrawn" in event.message
    for t in range(13, 200, 10):  # nothing is evicted again, nothing requeued
        store.run_cycle_once(clock=at(t))
    victim.refresh_from_db()
    assert (victim.state, victim.attempts) == ("running", 0)
    assert Event.objects.filter(kind="reclaimed", job=victim).count() == 1


def test_a_planned_eviction_is_not_signalled_until_its_last_stop_grace(cluster, settings):
    """Node agents see an eviction for a beneficiary as "run" until AGENT_STOP_GRACE_SECONDS before its deadline
    (so a withdrawal leaves the processes untouched), then "stop" with the deadline; a withdrawal after the
    signal is not applied (the processes were told to stop)."""
    from gpuplatform.execution.assignments import node_assignments
    from gpuplatform.models import Node
    from gpuplatform.scheduling.evict import signal_at

    settings.AGENT_STOP_GRACE_SECONDS = 20
    Queue.objects.filter(name="beta").update(preemption_grace_seconds=60)
    Node.objects.update(executor=Node.Executor.AGENT)
    victim = _submit("beta", "victim", 4, 8, at(0))
    store.run_cycle_once(clock=at(0))
    ben = _submit("alpha", "beneficiary", 2, 8, at(5))
    store.run_cycle_once(clock=at(5))
    victim.refresh_from_db()
    assert victim.state == "preempting" and victim.evicted_for == ben.pk
    assert signal_at(victim.preempt_deadline) == at(45)
    node = Node.objects.get(name=victim.tasks.first().node.name)
    assert {t["action"] for t in node_assignments(node, at(44))["tasks"]} == {"run"}
    assert {t["action"] for t in node_assignments(node, at(45))["tasks"]} == {"stop"}


def test_elastic_job_grows_back(cluster):
    """elastic-job-grows-back.yaml through the database: an elastic job (min_available 1) starts with every
    task that fits across both NVLink domains; another queue reclaims two of its surplus tasks; when that job
    ends, the next cycle places the two tasks again (a "grown" Event), with their GPUs allocated."""
    Queue.objects.filter(name__in=["alpha", "beta"]).update(preemption_grace_seconds=0)
    ja = _submit("alpha", "ja", 0, 0, at(0), roles=[{"name": "worker", "tasks": 4, "gpus_per_task": 8,
                                                     "min_available": 1}])
    store.run_cycle_once(clock=at(0))
    ja.refresh_from_db()
    assert ja.state == "running" and ja.tasks.filter(state="running").count() == 4
    jb = _submit("beta", "jb", 2, 8, at(5))
    store.run_cycle_once(clock=at(5))  # reclaim: 2 surplus tasks of ja releasing (grace 0)
    assert ja.tasks.filter(state="releasing").count() == 2
    store.run_cycle_once(clock=at(10))  # released; jb starts on their GPUs
    jb.refresh_from_db()
    assert jb.state == "running" and ja.tasks.filter(state="running").count() == 2
    assert ja.tasks.filter(state="pending").count() == 2
    services.finish_job(jb, at=at(20))
    store.run_cycle_once(clock=at(21))
    assert ja.tasks.filter(state="running").count() == 4
    assert ja.allocations.filter(released_at__isnull=True).count() == 32
    event = Event.objects.get(kind="grown", job=ja)
    assert len(event.data["placement"]) == 2
    assert Job.objects.get(pk=ja.pk).state == "running"
