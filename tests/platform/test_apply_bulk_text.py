"""The apply's bulk writes as text (issue 16, branch apply16b): COPY rows and update_rows' arrays formatted by
gpuplatform.bulk itself (escaping, NULL, JSON, times), the admission Events formatted in a worker thread while the
server runs the task update, the foreign-key checks run before the job update. Same rows as the ORM would write, on
PostgreSQL and on SQLite."""
from __future__ import annotations

import threading
from datetime import datetime, timezone as tz

import pytest
from django.db import connection

from gpuplatform import audit, bulk
from gpuplatform.models import Allocation, Event, Job, Task
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=tz.utc)
# every character COPY's text format or an array literal must escape, and text that looks like their syntax
ODD = ["plain", "tab\there", "new\nline", "cr\rx", "back\\slash", 'quote"x', "apos'x", "{brace,comma}", "NULL", "",
       " spaced ", "ünï€😀", "\\N", "\\", '"']


def _written(kind):
    return list(Event.objects.filter(kind=kind).order_by("id").values_list("time", "message", "data", "cycle"))


@pytest.mark.django_db
def test_insert_rows_writes_odd_text_json_and_null_as_given():
    rows = [(CLOCK, "odd", m, {"m": m, "list": [1, 2.5, None, True, m]}, i if i % 3 else None, None, None, None, None)
            for i, m in enumerate(ODD)]
    bulk.insert_rows(Event, audit.EVENT_FIELDS, rows)
    assert _written("odd") == [(CLOCK, m, {"m": m, "list": [1, 2.5, None, True, m]}, i if i % 3 else None)
                               for i, m in enumerate(ODD)]


@pytest.mark.django_db
def test_update_rows_writes_odd_values_through_array_literals():
    bulk.insert_rows(Event, audit.EVENT_FIELDS, [(CLOCK, "before", "x", {}, 0, None, None, None, None) for _ in ODD])
    ids = list(Event.objects.filter(kind="before").order_by("id").values_list("id", flat=True))
    later = datetime(2024, 3, 2, 1, 2, 3, 4, tzinfo=tz.utc)
    rows = [(pk, m, {"m": m} if i % 2 else [m], None if i % 3 == 1 else i * 7, later if i % 2 else CLOCK)
            for i, (pk, m) in enumerate(zip(ids, ODD))]
    assert bulk.update_rows(Event, rows, ["message", "data", "cycle", "time"], {"kind": "after"},
                            where={"kind": "before"}) == len(ODD)
    assert _written("after") == [(t, m, d, c) for _, m, d, c, t in rows]
    # a column equal in every row is written as one constant: the same outcome
    assert bulk.update_rows(Event, [(pk, "same", 5) for pk in ids], ["message", "cycle"], {}) == len(ODD)
    assert set(Event.objects.filter(pk__in=ids).values_list("message", "cycle")) == {("same", 5)}
    # the compare-and-set: rows that no longer match `where` are left alone
    assert bulk.update_rows(Event, [(ids[0], "no", 1)], ["message", "cycle"], {}, where={"kind": "before"}) == 0


def test_copy_text_and_array_literals_escape_what_they_must():
    assert bulk._copy_column("text", ["a\tb", "c\\d", "e\nf", "g\rh", None, "plain"]) == [
        "a\\tb", "c\\\\d", "e\\nf", "g\\rh", "\\N", "plain"]
    assert bulk._copy_column("json", [{"a": 'q"\\'}]) == ['{"a": "q\\\\"\\\\\\\\"}']
    assert bulk._array_literal("text", ['a"b', "c\\d", None, "NULL", "x,y"]) == \
        '{"a\\"b","c\\\\d",NULL,"NULL","x,y"}'
    assert bulk._array_literal("int", [1, None, 3]) == "{1,NULL,3}"
    assert bulk._array_literal("bool", [True, False]) == "{t,f}"
    assert bulk._array_literal("datetime", [CLOCK]) == '{"2024-03-01T12:00:00.123456+00:00"}'
    rows = bulk.copy_rows(Event, audit.EVENT_FIELDS, [(CLOCK, "k", "m\t", {"x": 1}, None, 7, None, None, None)])
    assert rows.chunks == ['2024-03-01T12:00:00.123456+00:00\tk\tm\\t\t{"x": 1}\t\\N\t7\t\\N\t\\N\t\\N\n']
    assert bulk.copy_rows(Event, audit.EVENT_FIELDS, rows.rows, "sqlite").chunks is None  # other databases: rows


def test_many_is_taken_as_it_is_by_filter(submit):
    jobs = [submit(f"j{i}") for i in range(3)]
    ids = [j.pk for j in jobs[:2]]
    assert sorted(Job.objects.filter(pk__any=bulk.Many(ids)).values_list("id", flat=True)) == ids
    assert list(Job.objects.filter(pk__any=bulk.Many([]))) == []
    assert list(Job.objects.filter(name__any=bulk.Many(['j"1', "j2"])).values_list("name", flat=True)) == ["j2"]


def test_the_events_of_a_cycle_are_formatted_in_a_worker_thread(submit, monkeypatch):
    """The fast path with the worker (the threshold lowered to these two starts): the same rows as without it,
    the admission Events built in another thread, and an error there fails the cycle with nothing written."""
    jobs = [submit(f"j{i}", tasks=2, gpus=2) for i in range(2)]
    Job.objects.filter(pk=jobs[1].pk).update(excluded_nodes=["n1"])
    result = CycleResult(bindings=[Binding(j.pk, (TaskPlacement("worker", 0, node, (0, 1)),
                                                  TaskPlacement("worker", 1, node, (2, 3))), "nvl-a1", 1)
                                   for j, node in zip(jobs, ("n0", "n1"))])
    monkeypatch.setattr(store, "PARALLEL_FORMAT_MIN", 1)
    threads = []
    made = store._admitted_event

    def admitted(*args):
        threads.append(threading.current_thread())
        return made(*args)

    def broken(*args):
        threads.append(threading.current_thread())
        raise ZeroDivisionError

    worker = connection.vendor == "postgresql"  # elsewhere no thread: the same code in this one
    monkeypatch.setattr(store, "_admitted_event", broken)
    with pytest.raises(ZeroDivisionError):
        store.apply_result(result, clock=CLOCK, cycle_number=1)
    assert threads and (threads[0] is not threading.main_thread()) == worker
    assert not Allocation.objects.exists() and not Event.objects.filter(kind="admitted").exists()
    assert set(Job.objects.values_list("state", flat=True)) == {"pending"}

    threads.clear()
    monkeypatch.setattr(store, "_admitted_event", admitted)
    stats = store.apply_result(result, clock=CLOCK, cycle_number=1)
    assert (stats.binds, stats.stale_skipped) == (2, 0)
    assert len(threads) == 2 and all((t is not threading.main_thread()) == worker for t in threads)
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}
    assert set(Task.objects.values_list("state", flat=True)) == {"running"}
    assert Allocation.objects.filter(released_at__isnull=True).count() == 8
    events = list(Event.objects.filter(kind__in=("admitted", "excluded_node_used")).order_by("id")
                  .values_list("kind", "job_id", "cycle", "data"))
    assert [(k, j, c) for k, j, c, _ in events] == [("admitted", jobs[0].pk, 1), ("admitted", jobs[1].pk, 1),
                                                    ("excluded_node_used", jobs[1].pk, 1)]
    assert events[0][3]["placement"] == [["worker", 0, "n0", [0, 1]], ["worker", 1, "n0", [2, 3]]]
    assert events[2][3] == {"nodes": ["n1"]}
