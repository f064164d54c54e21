"""Migration 0023_e2e9: allocation.task_id / job_id and event.job_id have no database constraint; their one
writers check them in bulk (gpuplatform.allocations.write_allocations, gpuplatform.audit). Migration 0024_e2e10: nor
allocation.gpu_id nor task.node_id (write_allocations and allocations.check_nodes check them; deferred constraint
triggers on the GPU and node tables refuse the delete of a GPU an allocation names, of a node a task names).
Migration 0033_deferred_fk: nor allocation.mig_instance_id, event.actor_id, queue_id, node_id (the same two halves). A missing row fails the write as the constraint did; deletions still cascade, protect and
set null (Django's on_delete)."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from gpuplatform import audit, services
from gpuplatform.allocations import write_allocations
from gpuplatform.models import Allocation, Event, Gpu, Job, Node, Task
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def _fks(table: str) -> dict[str, str]:
    """{column: referenced table} of the table's foreign-key constraints in the database."""
    with connection.cursor() as cur:
        found = connection.introspection.get_constraints(cur, table)
    return {c["columns"][0]: c["foreign_key"][0] for c in found.values() if c["foreign_key"]}


def _fails_whole(a, b, match: str) -> None:
    """Starting jobs a and b (one 1-GPU task each, on n0's GPUs 0 and 1) raises IntegrityError matching `match`
    and leaves the jobs, tasks, allocations and Events as they were (the cycle rolls back whole)."""
    result = CycleResult(bindings=[Binding(j.pk, (TaskPlacement("worker", 0, "n0", (i,)),), "nvl-a1", 1)
                                   for i, j in enumerate((a, b))])
    before = (list(Job.objects.values_list("id", "state")), list(Task.objects.values_list("id", "state")),
              Event.objects.count())
    with pytest.raises(IntegrityError, match=match):
        store.apply_result(result, clock=CLOCK, cycle_number=1)
    assert not Allocation.objects.exists()
    assert (list(Job.objects.values_list("id", "state")), list(Task.objects.values_list("id", "state")),
            Event.objects.count()) == before


def test_the_checked_columns_have_no_constraint_and_the_others_keep_theirs(db):
    assert _fks("gpuplatform_allocation") == {}  # mig_instance_id: 0033_deferred_fk
    assert _fks("gpuplatform_event") == {}  # actor_id, queue_id, node_id: 0033_deferred_fk
    assert _fks("gpuplatform_task") == {"job_id": "gpuplatform_job",  # what makes allocation.job_id implied
                                        "role_id": "gpuplatform_jobrole"}  # node_id: 0024_e2e10


def _row(task, gpu, job=None):
    return (task.pk, gpu.pk if isinstance(gpu, Gpu) else gpu, (job or task.job_id), CLOCK, 0, 0, None)


@pytest.mark.parametrize("wrong", ["task", "job", "gpu"])
def test_an_allocation_naming_a_missing_row_fails(submit, wrong):
    job, other = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    task, gpu = Task.objects.get(job=job), Gpu.objects.get(node__name="n0", index=0)
    row = {"task": (10**9, gpu.pk, job.pk, CLOCK, 0, 0, None),
           "job": _row(task, gpu, job=other.pk),  # a real job, but not the task's
           "gpu": _row(task, 10**9)}[wrong]
    with pytest.raises(IntegrityError, match="allocation"):
        with transaction.atomic():
            write_allocations([_row(Task.objects.get(job=other), Gpu.objects.get(node__name="n0", index=1)), row])
    assert not Allocation.objects.exists()


def test_allocations_of_existing_rows_are_written(submit):
    job = submit("a", tasks=2, gpus=1)
    t0, t1 = Task.objects.filter(job=job).order_by("index")
    gpus = list(Gpu.objects.filter(node__name="n1").order_by("index")[:2])
    assert write_allocations([_row(t0, gpus[0]), _row(t1, gpus[1])]) == 2
    assert sorted(Allocation.objects.values_list("task_id", "gpu_id", "job_id")) == sorted(
        [(t0.pk, gpus[0].pk, job.pk), (t1.pk, gpus[1].pk, job.pk)])


def test_an_event_naming_a_missing_job_fails(submit):
    job = submit("a")
    before = Event.objects.count()
    with pytest.raises(IntegrityError, match="event.job_id"):
        with transaction.atomic():
            audit.record_events([{"time": CLOCK, "kind": "x", "message": "ok", "job_id": job.pk},
                                 {"time": CLOCK, "kind": "x", "message": "no such job", "job_id": 10**9}])
    with pytest.raises(IntegrityError, match="event.job_id"):
        with transaction.atomic():
            audit.record_event("x", "no such job", job_id=10**9)
    assert Event.objects.count() == before
    audit.record_events([{"time": CLOCK, "kind": "x", "message": "ok", "job_id": job.pk},
                         {"time": CLOCK, "kind": "y", "message": "no job"}])
    assert Event.objects.filter(kind__in=("x", "y")).count() == 2


def test_a_cycle_whose_allocation_names_a_task_of_another_job_is_rolled_back_whole(submit, monkeypatch):
    a, b = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    rows_for = store._rows_for

    def wrong_task(binding, *args):
        allocations, tasks = rows_for(binding, *args)
        if binding.job_id == b.pk:
            allocations = [(Task.objects.get(job=a).pk, *rest) for _, *rest in allocations]
        return allocations, tasks

    monkeypatch.setattr(store, "_rows_for", wrong_task)
    _fails_whole(a, b, r"allocation\.(task|job)_id")


def test_deletions_still_cascade_protect_and_set_null(submit):
    job = submit("a", tasks=1, gpus=1)
    store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, "n2", (3,)),), "nvl-a2", 1)]),
                       clock=CLOCK, cycle_number=1)
    assert Allocation.objects.filter(job=job).count() == 1 and Event.objects.filter(job=job).exists()
    node = Node.objects.get(name="n2")
    gpus = [{"index": g.index} for g in Gpu.objects.filter(node=node).exclude(index=3)]
    services.register_node("n2", flavor=node.flavor, gpus=gpus)  # GPU 3 not reported: kept, unhealthy (_lost_gpus)
    assert Gpu.objects.get(node=node, index=3).health == "unhealthy"
    with pytest.raises(ProtectedError):  # its allocation protects it
        with transaction.atomic():
            Gpu.objects.filter(node=node, index=3).delete()
    assert Gpu.objects.filter(node=node, index=3).exists()
    Job.objects.filter(pk=job.pk).delete()
    assert not Allocation.objects.exists() and not Task.objects.exists()
    assert Event.objects.filter(kind="admitted", job__isnull=True).count() == 1


def _one_gpu_job():
    """(job, its task, GPU n0/0): a 1-GPU job submitted to queue alpha, for the row-lock tests."""
    from gpuplatform.models import Queue, Team

    job = services.submit_job(command=["sleep", "1"], team=Team.objects.get(name="alpha"),
                              queue=Queue.objects.get(name="alpha"), name="a",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    return job, Task.objects.get(job=job), Gpu.objects.get(node__name="n0", index=0)


@pytest.mark.services
@pytest.mark.postgresql("row locks: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_checked_rows_are_locked_for_key_share_until_the_commit(cluster):
    """PostgreSQL: the task and job rows a write names stay locked as the constraint's check kept them: another
    transaction cannot delete them (FOR UPDATE NOWAIT fails) until this one ends."""
    import psycopg

    job, task, gpu = _one_gpu_job()
    params = connection.get_connection_params()
    with transaction.atomic():
        write_allocations([_row(task, gpu)])
        audit.record_event("x", "locked", job_id=job.pk)
        with psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")},
                             autocommit=True) as other:
            for table, pk in (("gpuplatform_task", task.pk), ("gpuplatform_job", job.pk)):
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE NOWAIT", [pk])
                other.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR KEY SHARE NOWAIT", [pk])  # readers pass


def test_a_cycle_naming_a_missing_gpu_is_rolled_back_whole(submit, monkeypatch):
    """The cycle's bulk path checks the GPUs it writes (allocations.check_gpus, with its task update): a GPU id that
    names no GPU fails the cycle, nothing of it is left."""
    a, b = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    rows_for = store._rows_for

    def missing_gpu(binding, *args):
        allocations, tasks = rows_for(binding, *args)
        if binding.job_id == b.pk:
            allocations = [(task, 10**9, *rest) for task, _, *rest in allocations]
        return allocations, tasks

    monkeypatch.setattr(store, "_rows_for", missing_gpu)
    _fails_whole(a, b, r"allocation\.gpu_id")


@pytest.mark.services
@pytest.mark.postgresql("the trigger is PostgreSQL's")
def test_the_database_refuses_deleting_a_gpu_an_allocation_names(submit):
    """PostgreSQL (migration 0024_e2e10): without Django's PROTECT (a raw DELETE), the GPU table's deferred trigger
    refuses the delete at the commit, as the foreign key did; a GPU no allocation names is deleted."""
    job = submit("a", tasks=1, gpus=1)
    gpu, free = Gpu.objects.get(node__name="n0", index=0), Gpu.objects.get(node__name="n0", index=1)
    write_allocations([_row(Task.objects.get(job=job), gpu)])
    with pytest.raises(IntegrityError, match="gpuplatform_allocation"):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("DELETE FROM gpuplatform_gpu WHERE id = %s", [gpu.pk])
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # what the commit runs
    with pytest.raises(IntegrityError, match="gpuplatform_allocation"):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("UPDATE gpuplatform_gpu SET id = %s WHERE id = %s", [10**9, gpu.pk])
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert Gpu.objects.filter(pk=gpu.pk).exists()
    with transaction.atomic(), connection.cursor() as cur:  # unnamed: deleted; the named one's own row rewritten
        cur.execute("DELETE FROM gpuplatform_gpu WHERE id = %s", [free.pk])
        cur.execute("UPDATE gpuplatform_gpu SET health = health WHERE id = %s", [gpu.pk])
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert not Gpu.objects.filter(pk=free.pk).exists()


@pytest.mark.services
@pytest.mark.postgresql("row locks: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_gpu_delete_racing_a_write_waits_and_fails(cluster):
    """PostgreSQL: a GPU row a write names stays locked FOR KEY SHARE until it commits (another transaction's delete
    cannot take it); a delete that waited for the commit then fails at the trigger, as it did at the foreign key."""
    import psycopg

    job, task, gpu = _one_gpu_job()
    params = {k: v for k, v in connection.get_connection_params().items()
              if k in ("dbname", "user", "password", "host", "port")}
    with psycopg.connect(**params, autocommit=True) as other:
        with transaction.atomic():
            write_allocations([_row(task, gpu)])
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute("SELECT 1 FROM gpuplatform_gpu WHERE id = %s FOR UPDATE NOWAIT", [gpu.pk])
        with pytest.raises(psycopg.errors.ForeignKeyViolation):  # committed: the delete now fails at its check
            other.execute("DELETE FROM gpuplatform_gpu WHERE id = %s", [gpu.pk])
    assert Gpu.objects.filter(pk=gpu.pk).exists()
    Allocation.objects.all().delete()


@pytest.mark.services
@pytest.mark.postgresql("row locks: PostgreSQL")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("what", ["gpu", "node"])
def test_a_write_racing_a_delete_in_flight_waits_and_fails(cluster, what):
    """PostgreSQL, the other order (review 10 #8): the deleter goes first (its DELETE done, not committed, its deferred
    trigger not yet run), the writer inserts and checks (write_allocations / check_nodes: FOR KEY SHARE), which waits
    for the deleter; the deleter commits (its trigger passes: the insert is not committed); the writer's check then
    finds the row gone and fails. No allocation or task is left naming the deleted row."""
    import threading
    import time

    import psycopg

    from gpuplatform.allocations import check_nodes
    from gpuplatform.models import Queue, Team

    job = services.submit_job(command=["sleep", "1"], team=Team.objects.get(name="alpha"),
                              queue=Queue.objects.get(name="alpha"), name="a",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    task = Task.objects.get(job=job)
    node = Node.objects.get(name="n3")
    gpu = Gpu.objects.filter(node=node).first()
    params = {k: v for k, v in connection.get_connection_params().items()
              if k in ("dbname", "user", "password", "host", "port")}
    other = psycopg.connect(**params)
    try:
        if what == "gpu":
            other.execute("DELETE FROM gpuplatform_gpu WHERE id = %s", [gpu.pk])
        else:
            other.execute("DELETE FROM gpuplatform_gpu WHERE node_id = %s", [node.pk])
            other.execute("DELETE FROM gpuplatform_node WHERE id = %s", [node.pk])
        committer = threading.Timer(1.0, other.commit)
        committer.start()
        started = time.monotonic()
        with pytest.raises(IntegrityError, match=r"allocation\.gpu_id" if what == "gpu" else r"task\.node_id"):
            with transaction.atomic():
                if what == "gpu":
                    write_allocations([_row(task, gpu)])
                else:
                    Task.objects.filter(pk=task.pk).update(node_id=node.pk)
                    check_nodes([node.pk])
        waited = time.monotonic() - started
        committer.join()
    finally:
        other.close()
    assert waited >= 0.5, waited  # the check waited for the deleter's commit
    assert not Gpu.objects.filter(pk=gpu.pk).exists()
    assert not Allocation.objects.filter(gpu_id=gpu.pk).exists()
    if what == "node":
        assert not Node.objects.filter(pk=node.pk).exists() and not Task.objects.filter(node_id=node.pk).exists()


def test_a_cycle_placing_a_task_on_a_missing_node_is_rolled_back_whole(submit, monkeypatch):
    """task.node_id (migration 0024_e2e10): the cycle's bulk path checks the nodes it places tasks on
    (allocations.check_nodes): a node id that names no node fails the cycle, nothing of it is left."""
    a, b = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    rows_for = store._rows_for

    def missing_node(binding, *args):
        allocations, tasks = rows_for(binding, *args)
        if binding.job_id == b.pk:
            tasks = [(task, 10**9, state) for task, _, state in tasks]
        return allocations, tasks

    monkeypatch.setattr(store, "_rows_for", missing_node)
    result = CycleResult(bindings=[Binding(j.pk, (TaskPlacement("worker", 0, "n0", (i,)),), "nvl-a1", 1)
                                   for i, j in enumerate((a, b))])
    before = (list(Job.objects.values_list("id", "state")), list(Task.objects.values_list("id", "state", "node_id")),
              Event.objects.count())
    with pytest.raises(IntegrityError, match=r"task\.node_id"):
        store.apply_result(result, clock=CLOCK, cycle_number=1)
    assert not Allocation.objects.exists()
    assert (list(Job.objects.values_list("id", "state")), list(Task.objects.values_list("id", "state", "node_id")),
            Event.objects.count()) == before


@pytest.mark.services
@pytest.mark.postgresql("the trigger is PostgreSQL's")
def test_the_database_refuses_deleting_a_node_a_task_names(submit):
    """PostgreSQL (migration 0024_e2e10): a raw DELETE of a node a task still names fails at the node table's deferred
    trigger; Django's delete sets the node's tasks' node to null first and passes."""
    job = submit("a", tasks=1, gpus=1)
    node = Node.objects.get(name="n3")
    Task.objects.filter(job=job).update(node=node)
    with pytest.raises(IntegrityError, match="gpuplatform_task"):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("DELETE FROM gpuplatform_gpu WHERE node_id = %s", [node.pk])
            cur.execute("DELETE FROM gpuplatform_node WHERE id = %s", [node.pk])
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # what the commit runs
    assert Node.objects.filter(pk=node.pk).exists()
    node.delete()  # Django's SET_NULL first
    assert Task.objects.get(job=job).node_id is None


# Migration 0033_deferred_fk: allocation.mig_instance_id and event.actor_id / queue_id / node_id


def _mig_instance(node="n0", index=0):
    from gpuplatform.models import MigInstance

    gpu = Gpu.objects.get(node__name=node, index=index)
    return MigInstance.objects.create(gpu=gpu, uuid=f"MIG-test-{node}-{index}", profile="1g.18gb", memory_mib=16384,
                                      slices=1)


def test_an_allocation_naming_a_missing_mig_instance_fails(submit):
    job = submit("a", tasks=1, gpus=1)
    task, gpu = Task.objects.get(job=job), Gpu.objects.get(node__name="n0", index=0)
    with pytest.raises(IntegrityError, match=r"allocation\.mig_instance_id"):
        with transaction.atomic():
            write_allocations([(task.pk, gpu.pk, job.pk, CLOCK, 0, 0, 10**9)])
    assert not Allocation.objects.exists()
    inst = _mig_instance()
    assert write_allocations([(task.pk, gpu.pk, job.pk, CLOCK, 0, 0, inst.pk)]) == 1
    assert Allocation.objects.get().mig_instance_id == inst.pk


def test_a_cycle_naming_a_missing_mig_instance_is_rolled_back_whole(submit, monkeypatch):
    """The cycle's bulk path checks the MIG instances its allocations name (allocations.check_mig_instances, in its
    pipeline): one that names no instance fails the cycle, nothing of it is left."""
    a, b = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    rows_for = store._rows_for

    def missing_instance(binding, *args):
        allocations, tasks = rows_for(binding, *args)
        if binding.job_id == b.pk:
            allocations = [(*row[:6], 10**9) for row in allocations]
        return allocations, tasks

    monkeypatch.setattr(store, "_rows_for", missing_instance)
    _fails_whole(a, b, r"allocation\.mig_instance_id")


@pytest.mark.parametrize("what", ["actor", "queue", "node"])
def test_an_event_naming_a_missing_actor_queue_or_node_fails(cluster, what):
    from django.contrib.auth import get_user_model

    from gpuplatform.models import Queue

    real = {"actor": lambda: get_user_model().objects.create(username="auditor").pk,
            "queue": lambda: Queue.objects.get(name="alpha").pk,
            "node": lambda: Node.objects.get(name="n0").pk}[what]()
    before = Event.objects.count()
    with pytest.raises(IntegrityError, match=f"event.{what}_id"):
        with transaction.atomic():
            audit.record_events([{"time": CLOCK, "kind": "x", "message": "ok", f"{what}_id": real},
                                 {"time": CLOCK, "kind": "x", "message": "no such row", f"{what}_id": 10**9}])
    with pytest.raises(IntegrityError, match=f"event.{what}_id"):
        with transaction.atomic():
            if what == "actor":
                audit.record_event("x", "no such user", actor=get_user_model()(pk=10**9))
            else:
                audit.record_event("x", "no such row", **{f"{what}_id": 10**9})
    assert Event.objects.count() == before
    audit.record_events([{"time": CLOCK, "kind": "x", "message": "ok", f"{what}_id": real}])
    audit.record_event("y", "ok", **({"actor": get_user_model().objects.get(pk=real)} if what == "actor"
                                      else {f"{what}_id": real}))
    assert Event.objects.filter(kind__in=("x", "y"), **{f"{what}_id": real}).count() == 2


@pytest.mark.services
@pytest.mark.postgresql("the triggers are PostgreSQL's")
@pytest.mark.parametrize("what", ["actor", "queue", "node", "mig_instance"])
def test_the_database_refuses_deleting_a_row_an_event_or_allocation_names(submit, what):
    """PostgreSQL (migration 0033_deferred_fk): a raw DELETE (or re-keying) of a user, queue or node an Event names, of
    a MIG instance an allocation names, fails at the deferred trigger, as the foreign key did; Django's delete sets the
    reference null first and passes (a user an Event names: Django's PROTECT refuses it, session 27)."""
    from django.contrib.auth import get_user_model

    from gpuplatform.models import Queue

    if what == "mig_instance":
        job = submit("a", tasks=1, gpus=1)
        inst = _mig_instance()
        write_allocations([(Task.objects.get(job=job).pk, inst.gpu_id, job.pk, CLOCK, 0, 0, inst.pk)])
        row, referencing = inst, "gpuplatform_allocation"
    else:
        row = {"actor": lambda: get_user_model().objects.create(username="auditor"),
               "queue": lambda: Queue.objects.create(name="spare-q", team=Queue.objects.get(name="alpha").team),
               "node": lambda: Node.objects.create(name="spare-n", flavor="H100", gpu_count=0)}[what]()
        audit.record_event("x", "names it", **{what: row})
        referencing = "gpuplatform_event"
    table = row._meta.db_table
    for sql in (f"DELETE FROM {table} WHERE id = %s", f"UPDATE {table} SET id = {10**9} WHERE id = %s"):
        with pytest.raises(IntegrityError, match=referencing):
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql, [row.pk])
                cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # what the commit runs
        assert type(row).objects.filter(pk=row.pk).exists()
    if what == "actor":  # session 27 (migration 0034): an Event's actor is PROTECTed, deactivated rather than deleted
        with pytest.raises(ProtectedError):
            row.delete()
        assert Event.objects.get(kind="x").actor_id == row.pk
        return
    row.delete()  # Django's SET_NULL first
    assert not type(row).objects.filter(pk=row.pk).exists()
    if what == "mig_instance":
        assert Allocation.objects.get().mig_instance_id is None
    else:
        assert Event.objects.get(kind="x").__dict__[f"{what}_id"] is None


@pytest.mark.services
@pytest.mark.postgresql("the pipeline and row locks: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_an_events_checks_go_in_one_round_trip_and_lock_their_rows(cluster, monkeypatch):
    """record_event naming a job, a queue, a node and an actor checks the four ids in one round trip (bulk.together's
    pipeline: it was one statement, and one round trip, per id), each row locked FOR KEY SHARE until the commit as
    before; with two ids missing the error names the first column checked (event.job_id), as before."""
    import psycopg
    from django.contrib.auth import get_user_model

    from gpuplatform import bulk
    from gpuplatform.models import Queue

    job, _, _ = _one_gpu_job()
    queue, node = Queue.objects.get(name="alpha"), Node.objects.get(name="n0")
    actor = get_user_model().objects.create(username="auditor")
    runs, alone = [], []
    real_run, real_lock = bulk.Together.run, bulk.lock_keys
    monkeypatch.setattr(bulk.Together, "run", lambda self: (runs.append(len(self.queued)), real_run(self))[1])
    monkeypatch.setattr(bulk, "lock_keys", lambda *a, **k: (alone.append(a), real_lock(*a, **k))[1])
    params = connection.get_connection_params()
    with transaction.atomic():
        audit.record_event("x", "names four rows", job=job, queue=queue, node=node, actor=actor)
        assert runs == [4] and alone == []  # four statements, one pipeline
        with psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")},
                             autocommit=True) as other:
            for table, pk in (("gpuplatform_job", job.pk), ("gpuplatform_queue", queue.pk),
                              ("gpuplatform_node", node.pk), (get_user_model()._meta.db_table, actor.pk)):
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE NOWAIT", [pk])
    with pytest.raises(IntegrityError, match=r"^event\.job_id"):
        with transaction.atomic():
            audit.record_event("x", "two missing", job_id=10**9, node_id=10**9, queue=queue)
    assert Event.objects.filter(kind="x").count() == 1
