"""The happy paths of the services: rows written, events recorded, a cycle requested only after commit."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest
from django.contrib.auth import get_user_model

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Gpu, Job, Membership, Queue, Quota, Task
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def test_submit_creates_job_roles_tasks_and_event_and_requests_a_cycle(alpha, monkeypatch,
                                                                        django_capture_on_commit_callbacks):
    calls = []
    monkeypatch.setattr("gpuplatform.scheduling.tasks.request_cycle", lambda: calls.append(1))
    team, queue = alpha
    at = datetime(2024, 1, 1, tzinfo=tz.utc)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.submit_job(command=SLEEP, team=team, queue="alpha", name="train", submitted_at=at, priority=3,
                                  topology_mode="hard", highest_tier=2, preferred_tier=1,
                                  roles=[{"name": "worker", "tasks": 4, "gpus_per_task": 8, "min_available": 2},
                                         {"name": "ps", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 4000}])
        assert calls == []  # not before commit
    assert calls == [1]
    assert job.state == "pending" and job.submitted_at == at and job.queue == queue
    assert [(r.name, r.tasks, r.min_available) for r in job.roles.order_by("id")] == [("worker", 4, 2), ("ps", 1, 1)]
    assert Task.objects.filter(job=job, state="pending").count() == 5
    event = Event.objects.get(job=job)
    assert event.kind == "submitted" and event.data["gpus"] == 32


def test_create_team_add_member_and_queue(db):
    team = services.create_team("vision-research")
    assert team.slug == "vision-research"
    user = get_user_model().objects.create_user("ana")
    services.add_member(team, user, "admin")
    assert Membership.objects.get(user=user).role == "admin"
    services.create_queue("all", quotas={"H100": (0, 16, 16)})
    queue = services.create_queue("vision", parent="all", team=team, weight=2, quotas={"H100": (2, 8, None)})
    assert queue.parent.name == "all"
    services.set_quota(queue, "H100", 4, 10, 16, actor=user)
    assert Quota.objects.filter(queue=queue).values_list("guarantee", "quota", "limit").get() == (4, 10, 16)
    change = Event.objects.get(kind="quota_changed")
    assert change.actor == user and change.data == {"flavor": "H100", "old": [2, 8, None], "new": [4, 10, 16]}


def test_finish_and_cancel_release_allocations(submit):
    job = submit("j", tasks=2, gpus=1)
    tasks = list(Task.objects.filter(job=job))
    gpus = list(Gpu.objects.order_by("id")[:2])
    start = datetime(2024, 1, 1, tzinfo=tz.utc)
    for task, gpu in zip(tasks, gpus):
        Allocation.objects.create(task=task, gpu=gpu, job=job, created_at=start)
    Job.objects.filter(pk=job.pk).update(state="running")
    end = datetime(2024, 1, 2, tzinfo=tz.utc)
    services.finish_job(job, "succeeded", at=end)
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert set(Allocation.objects.filter(job=job).values_list("released_at", flat=True)) == {end}
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"succeeded"}

    other = submit("k")
    services.cancel_job(other, reason="user asked")
    assert Job.objects.get(pk=other.pk).state == "cancelled"
    assert Event.objects.filter(job=other, kind="cancelled").exists()


def test_load_cluster_spec_creates_everything(cluster):
    from gpuplatform.models import Domain, Node

    assert Domain.objects.get(name="nvl-a1").parent.name == "leaf-a"
    assert Node.objects.count() == 4 and Gpu.objects.count() == 32
    assert list(Gpu.objects.filter(node__name="n0").order_by("index").values_list("numa_node", flat=True)) == \
        [0, 0, 0, 0, 1, 1, 1, 1]
    assert Queue.objects.get(name="alpha").team.name == "alpha"
    assert Event.objects.filter(kind="cluster_loaded").count() == 1


@pytest.mark.parametrize("state", ["draining", "closed"])
def test_update_queue_state(cluster, state):
    queue = services.update_queue(Queue.objects.get(name="beta"), state=state)
    assert Queue.objects.get(pk=queue.pk).state == state


def test_priority_change_losing_to_a_cancel_names_the_state_the_job_is_in(submit):
    """New-user trial 9, F5: a priority change racing a cancel answered "job is pending; a finished job's
    priority cannot change" for a cancelled job (the caller's copy, read before the lock). The message now
    gives the state read after the update found no unfinished row, and nothing is written."""
    from gpuplatform.errors import ValidationError

    stale = submit("racy", tasks=1, gpus=1)
    services.cancel_job(Job.objects.get(pk=stale.pk))  # the cancel commits first; `stale` still says pending
    assert stale.state == Job.State.PENDING
    with pytest.raises(ValidationError) as err:
        services.set_job_priority(stale, 7)
    assert err.value.errors == {"state": "job is cancelled; a finished job's priority cannot change"}
    assert Job.objects.get(pk=stale.pk).priority == 0
    assert not Event.objects.filter(kind="priority_changed", job=stale).exists()
