"""End to end on PostgreSQL + Redis + a real Celery worker: submissions through services, cycles through
the Celery task, and concurrent cycles that never bind one GPU twice."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.db.models import Count, F, Sum

from gpuplatform import services
from gpuplatform.models import Allocation, Job, JobRole, Queue, SchedulerCycle, Team
from gpuplatform.scheduling import store
from gpuplatform.scheduling.tasks import run_scheduling_cycle
from tests.platform.helpers_platform import small_spec

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def _load_and_submit(shapes, alpha_limit=None):
    services.load_cluster_spec(small_spec())
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    if alpha_limit is not None:
        services.set_quota(queue, "H100", 4, 16, alpha_limit)
    return [services.submit_job(command=SLEEP, team=team, queue=queue, name=f"job{i}",
                                roles=[{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}])
            for i, (tasks, gpus) in enumerate(shapes)]


def assert_consistent():
    """No GPU has two live allocations; every running job holds exactly its whole gang; nothing else holds GPUs."""
    doubled = (Allocation.objects.filter(released_at__isnull=True).values("gpu_id")
               .annotate(n=Count("id")).filter(n__gt=1))
    assert not doubled.exists()
    want = dict(JobRole.objects.filter(job__state="running").values("job_id")
                .annotate(n=Sum(F("tasks") * F("gpus_per_task"))).values_list("job_id", "n"))
    held = dict(Allocation.objects.filter(released_at__isnull=True).values("job_id")
                .annotate(n=Count("id")).values_list("job_id", "n"))
    assert held == want


def test_celery_task_binds_submitted_jobs(celery_worker):
    jobs = _load_and_submit([(2, 8), (1, 4), (4, 2), (4, 8)], alpha_limit=30)
    summary = run_scheduling_cycle.delay().get(timeout=60)
    if summary["skipped"]:  # a cycle requested by a submission held the lock; ask again
        time.sleep(1)
        summary = run_scheduling_cycle.delay().get(timeout=60)
    assert summary["number"] >= 1
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"job0": "running", "job1": "running", "job2": "running", "job3": "pending"}
    assert Job.objects.get(pk=jobs[3].pk).never_fits  # 32 GPUs fit the cluster, never alpha's limit of 30
    assert Allocation.objects.filter(released_at__isnull=True).count() == 16 + 4 + 8
    assert_consistent()
    assert SchedulerCycle.objects.filter(error="").exists()


def test_concurrent_cycles_never_bind_a_gpu_twice(celery_worker):
    _load_and_submit([(1, 8)] * 3 + [(2, 4)] * 4 + [(1, 2)] * 6)  # 52 GPUs asked, 32 exist
    results = [run_scheduling_cycle.delay() for _ in range(2)]
    errors: list[BaseException] = []

    def cycle():
        try:
            store.run_cycle_once()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    summaries = [r.get(timeout=60) for r in results]
    assert not errors and all("skipped" in s for s in summaries)
    assert_consistent()
    assert Allocation.objects.filter(released_at__isnull=True).count() == 32  # the cluster is full


def test_two_cycles_without_the_lock_are_kept_safe_by_the_database(celery_worker, monkeypatch):
    """Bypass single-flight: two cycles snapshot at the same time, each sees a different job and picks
    the same GPUs for it. The unique index refuses the second binding; it is skipped, not forced."""
    jobs = _load_and_submit([(4, 8), (4, 8)])  # each job fills the whole cluster
    from contextlib import contextmanager

    @contextmanager
    def no_lock(*args, **kwargs):
        yield True

    monkeypatch.setattr(store, "single_flight", no_lock)
    real_build = store.build_snapshot
    barrier = threading.Barrier(2, timeout=30)
    keep = {}

    def build(now=None, **kwargs):
        snap, index = real_build(now, **kwargs)
        mine = keep[threading.get_ident()]
        snap = type(snap)(nodes=snap.nodes, domains=snap.domains, queues=snap.queues,
                          jobs=tuple(j for j in snap.jobs if j.id == mine), now=snap.now)
        barrier.wait()
        return snap, index

    monkeypatch.setattr(store, "build_snapshot", build)
    cycles, errors = [], []

    def cycle(job):
        keep[threading.get_ident()] = job.pk
        try:
            cycles.append(store.run_cycle_once())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(c.binds for c in cycles) == [0, 1] and sorted(c.stale_skipped for c in cycles) == [0, 1]
    assert sorted(c.number for c in cycles) == [1, 2]
    assert sorted(Job.objects.values_list("state", flat=True)) == ["pending", "running"]
    assert_consistent()
