"""The apply's statements sent together (issue 16, session 11, branch e2e11): bulk.together (the task update, the GPU
and node checks and the job update in one psycopg pipeline) and bulk.insert_batches (the allocations' COPY fed batch
by batch while the next batch is built). Same rows, same checks, same errors as the one-by-one statements, on
PostgreSQL and on SQLite; a cycle whose rows go in many batches writes what it wrote in one, and a racing cycle's GPU
met in a later batch still sends the cycle job by job."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest
from django.db import IntegrityError, connection, transaction

from gpuplatform import bulk
from gpuplatform.allocations import ALLOCATION_FIELDS, check_gpus, check_nodes, write_allocation_batches
from gpuplatform.models import Allocation, Event, Gpu, Job, Node, Task
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def bind(job, *placements):
    return Binding(job.pk, tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements)),
                   "nvl-a1", 1)


def _row(task, gpu):
    return (task.pk, gpu.pk, task.job_id, CLOCK, 0, 0, None)


def test_together_updates_and_counts_as_the_one_by_one_statements(submit):
    jobs = [submit(f"j{i}") for i in range(3)]
    tasks = [Task.objects.get(job=j) for j in jobs]
    node = Node.objects.get(name="n1")
    with transaction.atomic():
        with bulk.together() as batch:
            placed = batch.update_rows(Task, [(t.pk, node.pk, "running", t.job_id) for t in tasks], ["node_id", "state"],
                                       {}, match=("job_id",))
            wrong = batch.update_rows(Task, [(tasks[0].pk, node.pk, "bound", jobs[1].pk)], ["node_id", "state"], {},
                                      match=("job_id",))  # not a task of that job: not updated, not counted
            nodes = check_nodes([node.pk], batch)
            started = batch.update_rows(Job, [(j.pk, "running") for j in jobs], ["state"], {"placement_tier": 2},
                                        where={"state": "pending"})
            none = batch.update_rows(Job, [], ["state"], {})
            assert batch.pipelined == (connection.vendor == "postgresql")
        assert (placed.value, wrong.value, started.value, none.value) == (3, 0, 3, 0)
        nodes.check()
    assert set(Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("state", "node_id")) == \
        {("running", node.pk)}
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", "placement_tier")) == \
        {("running", 2)}


def test_together_lock_refusals_are_raised_by_check_in_the_callers_order(submit):
    job = submit("a")
    gpu = Gpu.objects.get(node__name="n0", index=0)
    rows = [(Task.objects.get(job=job).pk, gpu.pk, job.pk, CLOCK, 0, 0, None)]
    bad = [(r[0], 10**9, *r[2:]) for r in rows]
    with transaction.atomic():
        with bulk.together() as batch:
            fine = check_gpus(rows, batch)
            missing_gpu = check_gpus(bad, batch)
            missing_node = check_nodes([10**9], batch)
        fine.check()
        with pytest.raises(bulk.MissingReference, match=r"allocation\.gpu_id"):
            missing_gpu.check()
        with pytest.raises(bulk.MissingReference, match=r"task\.node_id"):
            missing_node.check()


@pytest.mark.django_db(transaction=True)
def test_together_locks_the_rows_it_checks(cluster):
    """PostgreSQL: the checks sent in the pipeline lock their rows FOR KEY SHARE until the transaction ends, as
    lock_keys does (another connection cannot take them FOR UPDATE)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    import psycopg

    gpu = Gpu.objects.get(node__name="n0", index=0)
    params = connection.get_connection_params()
    with transaction.atomic():
        with bulk.together() as batch:
            locked = batch.lock_keys(Gpu, [gpu.pk], what="allocation.gpu_id")
        locked.check()
        with psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")},
                             autocommit=True) as other:
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute("SELECT 1 FROM gpuplatform_gpu WHERE id = %s FOR UPDATE NOWAIT", [gpu.pk])
            other.execute("SELECT 1 FROM gpuplatform_gpu WHERE id = %s FOR KEY SHARE NOWAIT", [gpu.pk])


def test_an_error_in_the_pipeline_is_raised_by_the_block_and_nothing_after_it_runs(submit):
    a, b = submit("a"), submit("b")
    before = list(Job.objects.order_by("id").values_list("id", "state", "pending_position"))
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            with bulk.together() as batch:
                batch.update_rows(Job, [(a.pk, "running")], ["state"], {})
                batch.update_rows(Job, [(b.pk, -1)], ["pending_position"], {})  # CHECK (pending_position >= 0)
                batch.update_rows(Job, [(b.pk, "running")], ["state"], {})
    assert list(Job.objects.order_by("id").values_list("id", "state", "pending_position")) == before


def test_insert_batches_writes_what_insert_rows_writes(submit):
    jobs = [submit(f"j{i}", tasks=2, gpus=1) for i in range(3)]
    gpus = list(Gpu.objects.filter(node__name="n1").order_by("index"))
    rows = [_row(t, gpus[i]) for i, t in enumerate(Task.objects.filter(job__in=jobs).order_by("id"))]
    reads = []

    def batches():
        reads.append(Gpu.objects.count())  # before the COPY opens: the first batch may still read
        yield rows[:1]
        yield []
        yield rows[1:4]
        yield rows[4:]

    with transaction.atomic():
        assert write_allocation_batches(batches()) == len(rows)
    assert reads == [Gpu.objects.count()]
    assert list(Allocation.objects.order_by("id").values_list(*ALLOCATION_FIELDS)) == rows
    assert write_allocation_batches(iter(())) == 0


def test_insert_batches_refuses_a_bound_gpu_in_a_later_batch_and_leaves_nothing(submit):
    a, b, c = (submit(n) for n in "abc")
    gpu, other = Gpu.objects.get(node__name="n0", index=0), Gpu.objects.get(node__name="n0", index=1)
    ta, tb, tc = (Task.objects.get(job=j) for j in (a, b, c))
    write_allocation_batches([[_row(ta, gpu)]])
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            write_allocation_batches(iter([[_row(tb, other)], [_row(tc, gpu)]]))
    assert list(Allocation.objects.values_list("task_id", flat=True)) == [ta.pk]


def test_a_cycle_in_many_batches_writes_what_one_batch_writes(submit, monkeypatch):
    monkeypatch.setattr(store, "BIND_BATCH", 2)
    jobs = [submit(f"j{i}", tasks=2, gpus=1) for i in range(5)]
    result = CycleResult(bindings=[bind(j, (f"n{i % 4}", (2 * (i // 4),)), (f"n{i % 4}", (2 * (i // 4) + 1,)))
                                   for i, j in enumerate(jobs)])
    stats = store.apply_result(result, clock=CLOCK, cycle_number=1)
    assert (stats.binds, stats.stale_skipped) == (5, 0)
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"running"}
    assert sorted(Allocation.objects.values_list("job_id", "gpu__node__name", "gpu__index")) == sorted(
        (j.pk, f"n{i % 4}", 2 * (i // 4) + k) for i, j in enumerate(jobs) for k in (0, 1))
    assert sorted(Event.objects.filter(kind="admitted").values_list("job_id", flat=True)) == [j.pk for j in jobs]


def test_a_racing_gpu_in_a_later_batch_sends_the_cycle_job_by_job(submit, monkeypatch):
    """The one-live-allocation index refuses the COPY in its third batch: the savepoint rolls back what the earlier
    batches sent, and the job-by-job path binds every job but the racer."""
    monkeypatch.setattr(store, "BIND_BATCH", 1)
    holder, first, second, racer = (submit(n, tasks=1, gpus=2) for n in ("holder", "first", "second", "racer"))
    store.apply_result(CycleResult(bindings=[bind(holder, ("n0", (0, 1)))]), clock=CLOCK, cycle_number=1)
    result = CycleResult(bindings=[bind(first, ("n1", (0, 1))), bind(second, ("n2", (0, 1))),
                                   bind(racer, ("n0", (1, 2)))])
    stats = store.apply_result(result, clock=CLOCK, cycle_number=2)
    assert (stats.binds, dict(stats.stale)) == (2, {racer.pk: "a GPU is already bound (racing cycle)"})
    assert dict(Job.objects.values_list("name", "state")) == {"holder": "running", "first": "running",
                                                              "second": "running", "racer": "pending"}
    assert Allocation.objects.filter(released_at__isnull=True).count() == 6


def test_an_error_while_the_copy_is_open_leaves_nothing_and_the_connection_usable(submit):
    """Review 11, R4/R5: the batches' iterator failing after the first batch went, and a database error that is not a
    unique index's (a NOT NULL column given None), leave no row, come as Django's own errors (the caller's
    `except DatabaseError` sees them) and leave the connection usable for the next statement."""
    from django.db import DatabaseError

    job = submit("copy")
    task = Task.objects.get(job=job)
    gpus = list(Gpu.objects.filter(node__name="n0").order_by("index")[:2])

    def failing():
        yield [_row(task, gpus[0])]
        raise RuntimeError("the caller's iterator failed")

    before = Allocation.objects.count()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            bulk.insert_batches(Allocation, ALLOCATION_FIELDS, failing())
    assert Allocation.objects.count() == before
    with pytest.raises(DatabaseError):  # created_at is NOT NULL
        with transaction.atomic():
            bulk.insert_batches(Allocation, ALLOCATION_FIELDS, [[_row(task, gpus[0])], [(task.pk, gpus[1].pk, job.pk,
                                                                                         None, 0, 0, None)]])
    assert Allocation.objects.count() == before
    assert Job.objects.filter(pk=job.pk).exists()  # the connection answers
