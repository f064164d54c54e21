"""Queue lifecycle: closed and draining queues take no new jobs but keep scheduling and running theirs;
a queue with jobs or children cannot be deleted (a clear ValidationError, nothing changed)."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Job, Queue, Quota, Team
from gpuplatform.services import ValidationError
from gpuplatform.scheduling import store

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


@pytest.mark.parametrize("state, shown", [("closed", "closing"), ("closing", "closing"), ("draining", "draining")])
def test_closed_or_draining_queue_refuses_submissions_but_schedules_its_jobs(submit, alpha, state, shown):
    """Closing (asked as closed while jobs remain) and draining queues refuse new jobs and schedule theirs."""
    team, queue = alpha
    running = submit("running", tasks=1, gpus=8)
    store.run_cycle_once(clock=CLOCK)
    waiting = submit("waiting", tasks=1, gpus=8)
    services.update_queue(queue, state=state)
    with pytest.raises(ValidationError) as exc:
        submit("new", tasks=1, gpus=1)
    assert f"is {shown} and accepts no new jobs" in exc.value.errors["queue"]
    store.run_cycle_once(clock=CLOCK)
    assert dict(Job.objects.values_list("name", "state")) == {"running": "running", "waiting": "running"}
    assert Job.objects.get(pk=running.pk).started_at == CLOCK


def test_delete_queue_with_jobs_or_children_is_refused(submit, alpha, cluster):
    team, queue = alpha
    job = submit("j", tasks=1, gpus=1)
    with pytest.raises(ValidationError) as exc:
        services.delete_queue(queue)
    assert "1 pending or running job(s)" in exc.value.errors["jobs"]
    services.cancel_job(job)
    with pytest.raises(ValidationError) as exc:
        services.delete_queue(queue)
    assert "close the queue instead" in exc.value.errors["jobs"]
    with pytest.raises(ValidationError) as exc:
        services.delete_queue(Queue.objects.get(name="root"))
    assert "child queues" in exc.value.errors["children"]
    assert Queue.objects.filter(name__in=("alpha", "root")).count() == 2


def test_delete_empty_queue(cluster):
    empty = services.create_queue("spare", parent="root", team=Team.objects.get(name="beta"),
                                  quotas={"H100": (0, 0, 4)})
    services.delete_queue(empty)
    assert not Queue.objects.filter(name="spare").exists() and not Quota.objects.filter(queue_id=empty.pk).exists()
    assert Event.objects.get(kind="queue_deleted").data["queue"] == "spare"


def test_closing_queue_closes_when_its_last_job_ends(submit, alpha):
    """Queue lifecycle open -> closing -> closed: a queue closed while it has jobs is closing (no new jobs,
    its jobs run on) and becomes closed when the last one ends, with a queue_closed Event."""
    team, queue = alpha
    first = submit("first", tasks=1, gpus=8)
    second = submit("second", tasks=1, gpus=1)
    store.run_cycle_once(clock=CLOCK)
    services.update_queue(queue, state="closed")
    assert Queue.objects.get(pk=queue.pk).state == "closing"
    services.finish_job(Job.objects.get(pk=first.pk))
    assert Queue.objects.get(pk=queue.pk).state == "closing"
    services.cancel_job(Job.objects.get(pk=second.pk))
    assert Queue.objects.get(pk=queue.pk).state == "closed"
    assert Event.objects.filter(kind="queue_closed", queue_id=queue.pk).count() == 1
    services.update_queue(queue, state="open")  # reopened: takes jobs again
    submit("again", tasks=1, gpus=1)


def test_closing_an_idle_queue_closes_it_at_once(alpha):
    team, queue = alpha
    assert services.update_queue(queue, state="closing").state == "closed"


def test_closing_a_parent_waits_for_its_subtree_and_its_leaves_take_no_jobs(submit, alpha):
    """New-user trial 11, F7: closing root (an inner queue) while alpha below it has jobs was `closed` at once
    and alpha kept taking jobs. It is `closing` until the last job of its subtree ends, then closed; meanwhile
    no queue below it takes a new job (a 400 naming the queue and the closed ancestor)."""
    team, queue = alpha
    first = submit("first", tasks=1, gpus=8)
    second = submit("second", tasks=1, gpus=1)
    store.run_cycle_once(clock=CLOCK)
    root = services.update_queue(Queue.objects.get(name="root"), state="closed")
    assert root.state == "closing" and Queue.objects.get(name="alpha").state == "open"
    with pytest.raises(ValidationError) as exc:
        submit("new", tasks=1, gpus=1)
    assert exc.value.errors["queue"] == "queue alpha is under queue root, which is closing: it accepts no new jobs"
    services.finish_job(Job.objects.get(pk=first.pk))
    assert Queue.objects.get(name="root").state == "closing"  # second is still pending in alpha
    services.cancel_job(Job.objects.get(pk=second.pk))
    assert Queue.objects.get(name="root").state == "closed"
    assert Event.objects.filter(kind="queue_closed", queue__name="root").count() == 1
    with pytest.raises(ValidationError) as exc:
        submit("later", tasks=1, gpus=1)
    assert "under queue root, which is closed" in exc.value.errors["queue"]
    services.update_queue(Queue.objects.get(name="root"), state="open")  # reopened: its leaves take jobs again
    submit("again", tasks=1, gpus=1)


def test_closing_an_idle_parent_closes_it_at_once(cluster):
    assert services.update_queue(Queue.objects.get(name="root"), state="closed").state == "closed"


def test_closing_parent_of_a_replayed_subtree_closes_in_the_cycle(submit, alpha):
    """A closing parent whose subtree's last job ended outside end_job is closed by the cycle's sweep."""
    team, queue = alpha
    job = submit("only", tasks=1, gpus=1)
    services.update_queue(Queue.objects.get(name="root"), state="closed")
    Job.objects.filter(pk=job.pk).update(state="cancelled")  # ended without end_job (as a trace replay may)
    store.run_cycle_once(clock=CLOCK)
    assert Queue.objects.get(name="root").state == "closed"


def test_a_queue_with_live_jobs_cannot_move_under_a_closed_queue(submit, alpha):
    team, queue = alpha
    shut = services.create_queue("shut", parent="root", quotas={"H100": (0, 0, None)})
    services.update_queue(shut, state="closed")
    submit("live", tasks=1, gpus=1)
    services.set_quota(queue, "H100", 0, 0, 32)
    with pytest.raises(ValidationError) as exc:
        services.update_queue(queue, parent=shut)
    assert "queue shut is closed" in exc.value.errors["parent"]
    assert Queue.objects.get(pk=queue.pk).parent.name == "root"
