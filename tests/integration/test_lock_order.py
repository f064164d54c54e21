"""Lock order on PostgreSQL: every write that ends or requeues a job takes the job's row first.

The fault (seen in CI, tests/integration/test_agents.py): the cycle's release step ended a cancelled job
(end_job) while an agent's report of the last exit did the same. The cycle inserted the job's Attempt
row first and then waited for the job row, which the report held (it locks the job first) while it
inserted the same Attempt: PostgreSQL found the deadlock and aborted the cycle. Here two real
connections replay that interleaving, and the other writers of a job's dependent rows (requeue,
release of surplus tasks) are run against a held job lock the same way.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone as tz

import pytest
from django.db import connection, connections, transaction

from gpuplatform import lifecycle, services
from gpuplatform.models import Attempt, Event, Job, Queue, Task, Team
from gpuplatform.scheduling import store
from tests.platform.helpers_platform import small_spec

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


@pytest.fixture
def running_job():
    services.load_cluster_spec(small_spec())
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    job = services.submit_job(command=["sleep", "60"], team=team, queue=queue, name="long",
                              roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 2}])
    store.run_cycle_once(clock=CLOCK)
    job.refresh_from_db()
    assert job.state == "running"
    return job


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cur:  # inside a transaction the statistics views are a snapshot: clear it
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
        return cur.fetchone()[0]


def _race(job_id: int, second) -> tuple[list, list]:
    """The report's side holds the job row (as execution/reports.py does), `second` runs in another
    connection until it blocks on a lock, then the report's side ends the job and commits.
    Returns (errors, what `second` returned)."""
    held, errors, out = threading.Event(), [], []

    def other():
        try:
            held.wait(10)
            with transaction.atomic():
                out.append(second())
        except Exception as exc:  # noqa: BLE001 - the test asserts there is none
            errors.append(repr(exc))
        finally:
            connections.close_all()

    thread = threading.Thread(target=other)
    thread.start()
    try:
        with transaction.atomic():
            Job.objects.select_for_update(no_key=True).filter(pk=job_id).first()
            held.set()
            deadline = time.monotonic() + 10
            while _waiting_on_a_lock() < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _waiting_on_a_lock() >= 1, "the second writer never waited for the job row"
            time.sleep(0.3)  # past deadlock_timeout's check in a default server (1 s is its default; both are fine)
            lifecycle.end_job(job_id, "cancelled", at=CLOCK, kind="cancelled", message="long cancelled: report")
    except Exception as exc:  # noqa: BLE001
        errors.append(repr(exc))
    thread.join(30)
    return errors, out


def test_cycle_end_and_report_end_of_one_job_do_not_deadlock(running_job):
    errors, out = _race(running_job.pk, lambda: lifecycle.end_job(
        running_job.pk, "cancelled", at=CLOCK, kind="cancelled", message="long cancelled: cycle",
        from_states=("running", "preempting")))
    assert errors == []
    assert out == [False]  # the report ended it first; the cycle's compare-and-set changed nothing
    assert Job.objects.get(pk=running_job.pk).state == "cancelled"
    assert Attempt.objects.filter(job_id=running_job.pk).count() == 1
    assert Event.objects.filter(job_id=running_job.pk, kind="cancelled").count() == 1


def test_requeue_waits_for_the_job_row_before_writing(running_job):
    errors, out = _race(running_job.pk, lambda: lifecycle.requeue_job(
        running_job.pk, at=CLOCK, kind="requeued", reason="node lost", backoff=True))
    assert errors == [] and out == [False]
    assert Attempt.objects.filter(job_id=running_job.pk).count() == 1


def test_surplus_release_waits_for_the_job_row(running_job):
    task = Task.objects.filter(job=running_job).order_by("index").last()
    Task.objects.filter(pk=task.pk).update(state=Task.State.RELEASING)
    errors, out = _race(running_job.pk, lambda: lifecycle.release_tasks([task.pk], at=CLOCK))
    assert errors == []
    assert out == [0]  # the job ended meanwhile: the task was released with it, nothing left to move
