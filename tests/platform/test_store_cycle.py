"""store.py: snapshot from the database, apply a CycleResult, stale decisions dropped, crashes harmless."""
from __future__ import annotations

import threading
from datetime import datetime, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import (
    Allocation, ClusterSample, Event, Gpu, Job, Node, QueueSample, SchedulerCycle, Task,
)
from gpuplatform.scheduling import store
from gpuplatform.scheduling.locks import single_flight
from scheduler.core.snapshot import Binding, CycleResult, PendingReason, TaskPlacement
from tests.platform.helpers_platform import first_fit

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def db_state():
    return (list(Job.objects.order_by("id").values_list("id", "state", "pending_reason", "never_fits")),
            list(Task.objects.order_by("id").values_list("id", "state", "node_id")),
            list(Allocation.objects.order_by("id").values_list("id", "gpu_id", "released_at")),
            Event.objects.count(), ClusterSample.objects.count(), QueueSample.objects.count())


def bind(job, *placements, domain="nvl-a1", tier=1):
    return Binding(job.pk, tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements)),
                   domain, tier)


def test_snapshot_of_a_small_cluster(submit):
    running = submit("running", tasks=1, gpus=2)
    store.apply_result(CycleResult(bindings=[bind(running, ("n1", (0, 1)))]), clock=CLOCK, cycle_number=1)
    pending = submit("pending", tasks=3, gpus=4, topology_mode="soft", highest_tier=2, time_limit_seconds=600)
    Gpu.objects.filter(node__name="n2", index=5).update(health="unhealthy")
    Node.objects.filter(name="n3").update(state="not_ready")

    snap, index = store.build_snapshot(now=CLOCK.timestamp())
    assert snap.now == CLOCK.timestamp()
    nodes = {n.name: n for n in snap.nodes}
    assert set(nodes) == {"n0", "n1", "n2", "n3"} and nodes["n3"].state == "not_ready"
    assert nodes["n0"].gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1) and nodes["n0"].domain == "nvl-a1"
    assert nodes["n1"].used == frozenset({0, 1}) and nodes["n2"].unhealthy == frozenset({5})
    assert {(d.name, d.tier, d.parent) for d in snap.domains} == {
        ("leaf-a", 2, None), ("nvl-a1", 1, "leaf-a"), ("nvl-a2", 1, "leaf-a")}
    queues = {q.name: q for q in snap.queues}
    assert queues["alpha"].parent == "root" and queues["alpha"].quotas["H100"].guarantee == 4
    assert queues["beta"].weight == 2 and queues["beta"].quotas["H100"].limit is None
    jobs = {j.id: j for j in snap.jobs}
    p = jobs[pending.pk]
    assert p.state == "pending" and p.roles[0].tasks == 3 and p.roles[0].gpus_per_task == 4
    assert p.topology_mode == "soft" and p.highest_tier == 2 and p.time_limit == 600.0
    r = jobs[running.pk]
    assert r.state == "running" and r.placement == (TaskPlacement("worker", 0, "n1", (0, 1)),)
    assert r.start_time == CLOCK.timestamp()
    assert index.node_ids["n0"] == Node.objects.get(name="n0").pk and index.job_queue[pending.pk] == "alpha"


def test_apply_binds_gpus_and_records_the_cycle(submit):
    job = submit("gang", tasks=2, gpus=4)
    waiting = submit("big", tasks=4, gpus=8)  # fits the cluster; the hand-made result calls it terminal
    result = CycleResult(bindings=[bind(job, ("n0", (0, 1, 2, 3)), ("n0", (4, 5, 6, 7)))],
                         pending={waiting.pk: PendingReason("never_fits", "needs 64 GPUs in one node", terminal=True)},
                         metrics={"allocation_rate": 0.25, "free_gpus": 24, "allocated_gpus": 8,
                                  "schedulable_gpus": 32, "largest_runnable": {1: 16, 2: 24}},
                         timings={"allocate_ms": 1.5})
    stats = store.apply_result(result, clock=CLOCK, cycle_number=7)
    assert (stats.binds, stats.stale_skipped, stats.pending_updated) == (1, 0, 1)
    job.refresh_from_db()
    assert (job.state, job.started_at, job.placement_domain, job.placement_tier) == ("running", CLOCK, "nvl-a1", 1)
    assert sorted(Allocation.objects.filter(job=job).values_list("gpu__node__name", "gpu__index")) == \
        [("n0", i) for i in range(8)]
    assert set(Task.objects.filter(job=job).values_list("state", "node__name")) == {("running", "n0")}
    waiting.refresh_from_db()
    assert waiting.never_fits and waiting.pending_reason == "needs 64 GPUs in one node"
    admitted = Event.objects.get(kind="admitted")
    assert admitted.job_id == job.pk and admitted.cycle == 7 and admitted.data["domain"] == "nvl-a1"
    cycle = SchedulerCycle.objects.get(number=7)
    assert (cycle.binds, cycle.pending, cycle.timings) == (1, 1, {"allocate_ms": 1.5})
    sample = ClusterSample.objects.get(cycle=7)
    assert (sample.allocation_rate, sample.free_gpus, sample.largest_runnable) == (0.25, 24, {"1": 16, "2": 24})
    assert sample.running_jobs == 1 and sample.fragmentation_rate == 0.0
    used = dict(QueueSample.objects.values_list("queue__name", "used"))
    demand = dict(QueueSample.objects.values_list("queue__name", "pending_demand"))
    assert used == {"alpha": 8, "beta": 0, "root": 8} and demand == {"alpha": 32, "beta": 0, "root": 32}


def test_stale_bindings_are_skipped_not_forced(submit):
    holder, cancelled, racer, fine = (submit(n, tasks=1, gpus=2) for n in ("holder", "cancelled", "racer", "fine"))
    store.apply_result(CycleResult(bindings=[bind(holder, ("n0", (0, 1)))]), clock=CLOCK, cycle_number=1)
    services.cancel_job(cancelled)
    Node.objects.filter(name="n3").update(state="cordoned")
    cordoned = submit("cordoned", tasks=1, gpus=1)
    result = CycleResult(bindings=[bind(cancelled, ("n1", (0, 1))),
                                   bind(racer, ("n0", (1, 2))),  # GPU n0/1 is bound to holder
                                   bind(cordoned, ("n3", (0,))),
                                   bind(fine, ("n2", (0, 1)))])
    stats = store.apply_result(result, clock=CLOCK, cycle_number=2)
    assert (stats.binds, stats.stale_skipped) == (1, 3)
    assert {j for j, _ in stats.stale} == {cancelled.pk, racer.pk, cordoned.pk}
    assert Job.objects.get(pk=racer.pk).state == "pending" and not Allocation.objects.filter(job=racer).exists()
    assert set(Task.objects.filter(job=racer).values_list("state", flat=True)) == {"pending"}
    assert Job.objects.get(pk=cancelled.pk).state == "cancelled"
    assert Job.objects.get(pk=fine.pk).state == "running"
    assert Allocation.objects.filter(released_at__isnull=True).count() == 4
    assert SchedulerCycle.objects.get(number=2).stale_skipped == 3


def test_a_gpu_deleted_mid_cycle_is_reported_as_deleted_not_as_a_racing_cycle(submit, monkeypatch):
    """Review 10 #9: in the job-by-job path a GPU deleted after the cycle read it fails write_allocations' reference
    check (bulk.MissingReference); it was reported as "a GPU is already bound (racing cycle)". The racer (a GPU
    bound by another job: a unique index) keeps that reason; the deleted GPU's job says what happened."""
    holder, racer, orphan = (submit(n, tasks=1, gpus=2) for n in ("holder", "racer", "orphan"))
    store.apply_result(CycleResult(bindings=[bind(holder, ("n0", (0, 1)))]), clock=CLOCK, cycle_number=1)
    gone = Gpu.objects.get(node__name="n2", index=0)
    real = store._bind_all

    def delete_then_bind(*args, **kwargs):  # after the cycle read the GPU ids: the GPU goes meanwhile
        Gpu.objects.filter(pk=gone.pk).delete()
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "_bind_all", delete_then_bind)
    result = CycleResult(bindings=[bind(racer, ("n0", (1, 2))), bind(orphan, ("n2", (0, 1)))])
    stats = store.apply_result(result, clock=CLOCK, cycle_number=2)
    why = dict(stats.stale)
    assert (stats.binds, set(why)) == (0, {racer.pk, orphan.pk})
    assert why[racer.pk] == "a GPU is already bound (racing cycle)"
    assert "deleted meanwhile" in why[orphan.pk] and "allocation.gpu_id" in why[orphan.pk], why
    assert not Allocation.objects.filter(job__in=[racer, orphan]).exists()


def test_crashed_cycle_leaves_the_database_unchanged(submit, monkeypatch):
    submit("a", tasks=2, gpus=4)

    def boom(snapshot, config=None, *, cache=None):
        raise RuntimeError("engine bug")

    monkeypatch.setattr("scheduler.core.run_cycle", boom)
    before = db_state()
    with pytest.raises(RuntimeError, match="engine bug"):
        store.run_cycle_once(clock=CLOCK)
    assert db_state() == before
    cycle = SchedulerCycle.objects.get()
    assert "engine bug" in cycle.error and cycle.binds == 0


def test_crash_while_applying_rolls_back_every_binding(submit, monkeypatch):
    submit("a", tasks=1, gpus=1)
    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    monkeypatch.setattr("gpuplatform.scheduling.samples.write_samples", lambda *a, **k: 1 / 0)
    before = db_state()
    with pytest.raises(ZeroDivisionError):
        store.run_cycle_once(clock=CLOCK)
    assert db_state() == before
    assert SchedulerCycle.objects.get().error


def test_run_cycle_once_with_a_stand_in_engine(submit, monkeypatch):
    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    jobs = [submit(f"j{i}", tasks=2, gpus=4) for i in range(5)]  # 40 GPUs asked, 32 exist
    first = store.run_cycle_once(clock=CLOCK)
    assert (first.number, first.binds, first.pending) == (1, 4, 1)
    services.finish_job(jobs[0], at=CLOCK)
    second = store.run_cycle_once(clock=CLOCK)
    assert (second.number, second.binds, second.pending) == (2, 1, 0)
    assert Job.objects.filter(state="running").count() == 4


def test_single_flight_skips_a_concurrent_cycle(cluster, monkeypatch):
    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    held, release = threading.Event(), threading.Event()

    def hold():
        from django.db import connection

        try:
            with single_flight() as acquired:
                assert acquired
                held.set()
                release.wait(5)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    try:
        assert store.run_cycle_once(clock=CLOCK) is None
    finally:
        release.set()
        thread.join()
    assert store.run_cycle_once(clock=CLOCK) is not None


def test_run_cycle_once_with_the_real_engine(submit):
    """The production path: snapshot -> scheduler.core.run_cycle -> apply, on the small cluster."""
    gang = submit("gang", tasks=2, gpus=8, topology_mode="hard", highest_tier=1)
    small = submit("small", tasks=1, gpus=2)
    from gpuplatform import services
    from gpuplatform.models import Queue

    services.set_quota(Queue.objects.get(name="alpha"), "H100", 4, 16, 20)
    huge = submit("huge", tasks=3, gpus=8)  # fits the cluster, never alpha's limit of 20
    cycle = store.run_cycle_once(clock=CLOCK)
    assert cycle.error == "" and cycle.binds == 2
    gang.refresh_from_db()
    assert gang.state == "running" and gang.placement_tier == 1
    nodes = set(Task.objects.filter(job=gang).values_list("node__domain__name", flat=True))
    assert len(nodes) == 1  # the whole gang inside one NVLink domain
    assert Job.objects.get(pk=small.pk).state == "running"
    huge.refresh_from_db()
    assert huge.state == "pending" and huge.never_fits and huge.pending_reason
    sample = ClusterSample.objects.get(cycle=cycle.number)
    assert sample.allocated_gpus == 18 and sample.schedulable_gpus == 32


def test_snapshot_query_count_does_not_grow_with_jobs(submit, django_assert_max_num_queries):
    for i in range(30):
        submit(f"j{i}", roles=[{"name": "w", "tasks": 2, "gpus_per_task": 1}, {"name": "ps", "tasks": 1, "gpus_per_task": 1}])
    j0 = Job.objects.get(name="j0")
    placement = (TaskPlacement("w", 0, "n0", (0,)), TaskPlacement("w", 1, "n0", (1,)), TaskPlacement("ps", 0, "n1", (0,)))
    assert store.apply_result(CycleResult(bindings=[Binding(j0.pk, placement, "nvl-a1", 1)]),
                              clock=CLOCK, cycle_number=1).binds == 1
    with django_assert_max_num_queries(14):  # 10 reads + transaction/savepoint statements
        snap, _ = store.build_snapshot(CLOCK.timestamp())
    assert len(snap.jobs) == 30
    running = next(j for j in snap.jobs if j.id == j0.pk)
    assert running.state == "running" and {(r.name, r.tasks) for r in running.roles} == {("w", 2), ("ps", 1)}


def test_any_lookup_matches_in_with_one_array_parameter(submit):
    """gpuplatform.bulk.AnyOf (`__any`), which the apply uses for its id lists: the same rows as `__in`, on a
    primary key, a foreign key and a text column, nothing for an empty list, and on PostgreSQL ONE array
    parameter whatever the list's length (not one placeholder per id)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    a, b, c = (submit(name, tasks=2, gpus=1) for name in ("a", "b", "c"))
    ids = [a.pk, c.pk, 10**9]
    assert set(Job.objects.filter(pk__any=ids).values_list("id", flat=True)) == {a.pk, c.pk}
    assert set(Task.objects.filter(job_id__any=ids).values_list("id", flat=True)) == \
        set(Task.objects.filter(job_id__in=ids).values_list("id", flat=True)) and Task.objects.filter(job_id__any=ids).count() == 4
    assert set(Node.objects.filter(name__any=["n0", "n2", "nope"]).values_list("name", flat=True)) == {"n0", "n2"}
    assert not Job.objects.filter(pk__any=[]).exists()
    with CaptureQueriesContext(connection) as q:
        list(Job.objects.filter(pk__any=list(range(5000))).values_list("id", flat=True))
    if connection.vendor == "postgresql":
        sql = q.captured_queries[0]["sql"]
        assert "= ANY(" in sql and " IN (" not in sql  # one array parameter, not 5,000 placeholders


def test_rows_reads_plain_tuples_with_epoch_times(submit):
    """gpuplatform.bulk.rows, the snapshot read's and the apply's reader: the same rows as values_list, the
    `times` as the float that datetime.timestamp() gives (microseconds kept, None kept), JSON columns decoded
    by json_value (text from the raw cursor on PostgreSQL, already decoded elsewhere)."""
    from datetime import timedelta

    from gpuplatform.bulk import json_value, rows

    a, b = submit("a", tasks=1, gpus=1), submit("b", tasks=1, gpus=1)
    at = CLOCK + timedelta(seconds=12, microseconds=345678)
    Job.objects.filter(pk=a.pk).update(not_before=at, excluded_nodes=["n1", "n2"])
    fields = ("id", "queue__name", "submitted_at", "not_before", "excluded_nodes", "preemptible")
    got = rows(Job.objects.filter(pk__in=[a.pk, b.pk]).order_by("id"), fields, times=("submitted_at", "not_before"))
    want = list(Job.objects.filter(pk__in=[a.pk, b.pk]).order_by("id").values_list(*fields))
    assert [r[0] for r in got] == [a.pk, b.pk] and [r[1] for r in got] == [w[1] for w in want]
    for g, w in zip(got, want):
        assert g[2] == w[2].timestamp() and isinstance(g[2], float)
        assert g[3] == (w[3].timestamp() if w[3] is not None else None)
        assert json_value(g[4]) == w[4] and g[5] is w[5]
    assert got[0][3] == at.timestamp() and got[1][3] is None and json_value(got[0][4]) == ["n1", "n2"]


def test_rows_many_reads_as_rows_does_in_one_pipeline(submit):
    """gpuplatform.bulk.rows_many, the snapshot read's reader (one psycopg pipeline on PostgreSQL inside a
    transaction): each read's rows equal `rows`'s, in the order given (times as floats, an empty read empty), and
    the connection reads normally afterwards."""
    from datetime import timedelta

    from django.db import transaction

    from gpuplatform.bulk import rows, rows_many

    a, b = submit("a", tasks=2, gpus=1), submit("b", tasks=1, gpus=1)
    Job.objects.filter(pk=a.pk).update(not_before=CLOCK + timedelta(microseconds=7), excluded_nodes=["n1"])
    reads = [(Job.objects.order_by("id"), ("id", "queue__name", "submitted_at", "not_before", "excluded_nodes"),
              ("submitted_at", "not_before")),
             (Task.objects.order_by("id"), ("id", "job_id", "role__name", "state")),
             (Job.objects.filter(state="running"), ("id",)),
             (Node.objects.order_by("name"), ("name", "gpu_count"))]
    with transaction.atomic():
        got = rows_many(*reads)
        assert got == [rows(*r) for r in reads]
        assert [len(g) for g in got] == [2, 3, 0, Node.objects.count()] and got[0][0][3] is not None
        assert Job.objects.filter(pk=b.pk).exists()  # the connection is out of pipeline mode
    assert rows_many() == [] and rows_many(reads[1]) == [rows(*reads[1])]
    # PostgreSQL (SQLite's division by zero is NULL): a failing read raises Django's error (the transaction rolls
    # back) and the connection reads on afterwards
    from django.db import DatabaseError, connection

    if connection.vendor != "postgresql":
        return
    with pytest.raises(DatabaseError):
        with transaction.atomic():
            rows_many(reads[1], (Job.objects.extra(where=["1 / (id - id) = 1"]), ("id",)), reads[3])
    assert rows_many(reads[1]) == [rows(*reads[1])]


def test_the_cycle_runs_with_the_cyclic_gc_paused_and_restores_it(submit, monkeypatch):
    """run_cycle_once pauses Python's cyclic collector while it runs (store.cyclic_gc_paused) and puts it
    back as it was, also when the cycle fails; a collector the caller had disabled stays disabled."""
    import gc

    seen = []

    def engine(snapshot, config=None, cache=None):
        seen.append(gc.isenabled())
        return first_fit(snapshot, config)

    monkeypatch.setattr("scheduler.core.run_cycle", engine)
    submit("j", tasks=1, gpus=1)
    assert gc.isenabled()
    assert store.run_cycle_once(clock=CLOCK).binds == 1
    assert seen == [False] and gc.isenabled()

    def crash(snapshot, config=None, cache=None):
        raise RuntimeError("engine bug")

    monkeypatch.setattr("scheduler.core.run_cycle", crash)
    with pytest.raises(RuntimeError):
        store.run_cycle_once(clock=CLOCK)
    assert gc.isenabled()
    gc.disable()
    try:
        with store.cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
