"""The database itself refuses impossible states, whatever code path tries to write them."""
from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuplatform.models import Allocation, Event, Gpu, Job, JobRole, Queue, Quota, Task


def _job_with_task(submit):
    job = submit("j", tasks=2, gpus=1)
    return job, list(Task.objects.filter(job=job).order_by("index"))


def test_second_live_allocation_on_one_gpu_is_refused(submit):
    job, (t0, t1) = _job_with_task(submit)
    gpu = Gpu.objects.first()
    now = timezone.now()
    Allocation.objects.create(task=t0, gpu=gpu, job=job, created_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(task=t1, gpu=gpu, job=job, created_at=now)


def test_released_allocation_does_not_block_the_gpu(submit):
    job, (t0, t1) = _job_with_task(submit)
    gpu = Gpu.objects.first()
    now = timezone.now()
    Allocation.objects.create(task=t0, gpu=gpu, job=job, created_at=now, released_at=now)
    Allocation.objects.create(task=t1, gpu=gpu, job=job, created_at=now)
    assert Allocation.objects.filter(gpu=gpu).count() == 2


def test_min_available_above_tasks_is_refused(submit):
    job = submit("j")
    with pytest.raises(IntegrityError), transaction.atomic():
        JobRole.objects.create(job=job, name="extra", tasks=2, gpus_per_task=1, min_available=3)


def test_role_requesting_nothing_is_refused(submit):
    job = submit("j")
    with pytest.raises(IntegrityError), transaction.atomic():
        JobRole.objects.create(job=job, name="idle", tasks=1, gpus_per_task=0, cpu_milli=0, min_available=1)


@pytest.mark.parametrize("values", [
    {"guarantee": -1, "quota": 0, "limit": None},
    {"guarantee": 0, "quota": -1, "limit": None},
    {"guarantee": 0, "quota": 1, "limit": -1},
    {"guarantee": 5, "quota": 4, "limit": None},  # guarantee > quota
    {"guarantee": 0, "quota": 5, "limit": 4},  # quota > limit
])
def test_bad_quota_is_refused(cluster, values):
    queue = Queue.objects.get(name="beta")
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(queue=queue, flavor="A100", **values)


def test_preferred_tier_above_highest_is_refused(submit):
    job = submit("j")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(highest_tier=1, preferred_tier=2)


# Issue 16 (migration 0021_e2e2): the tables a scheduling cycle writes in bulk carry no index that another index
# already covers, and keep every foreign key constraint but the three that migration 0023_e2e9 moved to their one
# writer (allocations.write_allocations, audit: checked in bulk, tests/platform/test_references.py), the two of
# 0024_e2e10 (allocation.gpu_id, task.node_id: checked in bulk by their writers, deletes refused by triggers) and the
# four of 0033_deferred_fk (allocation.mig_instance_id, event.actor_id / queue_id / node_id: the same).
_CYCLE_MODELS = ("Job", "Task", "Allocation", "Event")
_WRITER_CHECKED = {"Allocation": {"task_id", "job_id", "gpu_id", "mig_instance_id"},
                   "Event": {"job_id", "actor_id", "queue_id", "node_id"},
                   "Task": {"node_id"}}  # gpu_id, node_id: 0024_e2e10; mig_instance_id and the Event's: 0033_deferred_fk


def _constraints(model):
    from django.db import connection

    with connection.cursor() as cur:
        return connection.introspection.get_constraints(cur, model._meta.db_table)


@pytest.mark.django_db
@pytest.mark.parametrize("name", _CYCLE_MODELS)
def test_cycle_tables_keep_every_foreign_key(name):
    from django.apps import apps

    model = apps.get_model("gpuplatform", name)
    constrained = {c["columns"][0] for c in _constraints(model).values() if c["foreign_key"]}
    fks = {f.column for f in model._meta.concrete_fields if f.is_relation}
    checked = _WRITER_CHECKED.get(name, set())
    assert checked <= fks and not checked & constrained
    assert fks - checked <= constrained, fks - checked - constrained
    if name in ("Job", "Task"):  # rows the cycle updates keeping their keys: PostgreSQL queues no check for those
        assert fks - checked


@pytest.mark.django_db
@pytest.mark.parametrize("name", _CYCLE_MODELS)
def test_cycle_tables_have_no_index_that_another_leads_with(name):
    """Each index is one more entry per row a cycle writes: an index whose columns lead another is redundant."""
    from django.apps import apps

    model = apps.get_model("gpuplatform", name)
    indexes = [tuple(c["columns"]) for c in _constraints(model).values()
               if (c["index"] or c["unique"]) and c["columns"]]
    redundant = [(a, b) for a in indexes for b in indexes if len(a) < len(b) and b[:len(a)] == a]
    assert not redundant, redundant


@pytest.mark.django_db
def test_allocation_of_a_missing_job_is_refused(submit):
    """(by its one writer since migration 0023_e2e9: the task must be a task of the allocation's job)"""
    from gpuplatform.allocations import write_allocations

    job, (t0, _) = _job_with_task(submit)
    with pytest.raises(IntegrityError), transaction.atomic():
        write_allocations([(t0.pk, Gpu.objects.first().pk, job.pk + 10_000, timezone.now(), 0, 0, None)])
    assert not Allocation.objects.exists()


# Issue 16 (migration 0025_e2eschema): job.submitter indexed only where set, event.kind for every kind but
# "admitted" (one per started job), gpu.node by the unique (node, index) index alone. The queries that filter on them
# still find an index: `= x` / `IN (...)` imply the partial indexes' conditions.
_PARTIAL_INDEX_QUERIES = [
    ("job_submitter_set", lambda: Job.objects.filter(submitter_id=1)),
    ("job_submitter_set", lambda: Job.objects.filter(submitter__username="someone")),
    ("event_kind_not_admitted", lambda: Event.objects.filter(kind="moved")),
    ("event_kind_not_admitted", lambda: Event.objects.filter(kind__in=("evicted", "preempted"))),
    ("gpu_unique_node_index", lambda: Gpu.objects.filter(node_id=1)),
]


@pytest.mark.django_db
@pytest.mark.postgresql("the plans are PostgreSQL's")
@pytest.mark.parametrize("index,query", _PARTIAL_INDEX_QUERIES, ids=[f"{i}-{n}" for n, (i, _) in
                                                                     enumerate(_PARTIAL_INDEX_QUERIES)])
def test_the_cycle_tables_partial_indexes_serve_their_queries(index, query):
    from django.db import connection

    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # tiny tables: the planner would read them whole
        plan = query().explain()
    assert index in plan, plan


@pytest.mark.django_db
def test_the_partial_indexes_leave_the_rows_found_unchanged(submit):
    from django.contrib.auth import get_user_model

    from gpuplatform import audit

    user = get_user_model().objects.create(username="someone")
    mine, other = submit("mine", submitter=user), submit("other")
    assert list(Job.objects.filter(submitter=user)) == [mine] and other.submitter_id is None
    assert set(Job.objects.filter(submitter__isnull=True)) >= {other}
    audit.record_event("admitted", "a", job=mine)
    audit.record_event("moved", "m", job=mine)
    assert Event.objects.filter(kind="admitted", job=mine).count() == 1
    assert Event.objects.filter(kind__in=("admitted", "moved"), job=mine).count() == 2
