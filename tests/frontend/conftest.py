"""A small world for the page tests, built with the ORM directly (the services have their own tests)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.contrib.auth import get_user_model

from gpuplatform.models import (
    Allocation, ClusterSample, Domain, Gpu, Job, JobRole, Membership, Node, Queue, QueueSample, Quota,
    SchedulerCycle, Task, Team,
)

T0 = datetime(2017, 10, 9, 8, 0, tzinfo=timezone.utc)


def make_job(team, queue, name, state, *, tasks=1, gpus=1, at=T0, node=None, gpus_on_node=(), reason=""):
    job = Job.objects.create(
        team=team, queue=queue, name=name, state=state, submitted_at=at, pending_reason=reason,
        started_at=at + timedelta(minutes=1) if state != Job.State.PENDING else None,
        placement_domain=node.domain.name if node else "", placement_tier=node.domain.tier if node else None,
    )
    role = JobRole.objects.create(job=job, name="worker", tasks=tasks, gpus_per_task=gpus, min_available=tasks)
    for i in range(tasks):
        task = Task.objects.create(job=job, role=role, index=i, node=node,
                                   state=Task.State.RUNNING if node else Task.State.PENDING)
        for gpu in gpus_on_node[i * gpus:(i + 1) * gpus]:
            Allocation.objects.create(task=task, gpu=gpu, job=job, created_at=at,
                                      released_at=None if state == Job.State.RUNNING else at + timedelta(hours=1))
    return job


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(name="make_job")
def make_job_fixture():
    return make_job


@pytest.fixture
def world(db):
    """Two teams, one node of 8 GPUs in an NVLink domain, jobs in each state, and a few samples."""
    User = get_user_model()
    spine = Domain.objects.create(name="spine", tier=3)
    leaf = Domain.objects.create(name="leaf-0", tier=2, parent=spine)
    nvl = Domain.objects.create(name="nvl-0", tier=1, parent=leaf)
    node = Node.objects.create(name="node-a", flavor="P100", gpu_count=8, domain=nvl)
    gpus = [Gpu.objects.create(node=node, index=i) for i in range(8)]
    red = Team.objects.create(name="red", slug="red")
    blue = Team.objects.create(name="blue", slug="blue")
    root = Queue.objects.create(name="root")
    q_red = Queue.objects.create(name="red", parent=root, team=red)
    q_blue = Queue.objects.create(name="blue", parent=root, team=blue)
    Quota.objects.create(queue=q_red, flavor="P100", guarantee=2, quota=4, limit=8)
    Quota.objects.create(queue=q_blue, flavor="P100", guarantee=0, quota=4, limit=None)
    jobs = {
        "red-running": make_job(red, q_red, "red-running", Job.State.RUNNING, tasks=2, gpus=2, node=node,
                                gpus_on_node=gpus[:4]),
        "red-pending": make_job(red, q_red, "red-pending", Job.State.PENDING, tasks=4, gpus=8,
                                reason="needs 32 GPUs in one tier-2 domain; largest free block is 4"),
        "blue-done": make_job(blue, q_blue, "blue-done", Job.State.SUCCEEDED, node=node, gpus_on_node=gpus[4:5]),
        "blue-pending": make_job(blue, q_blue, "blue-pending", Job.State.PENDING, gpus=2),
    }
    for i in range(3):
        t = T0 + timedelta(minutes=10 * i)
        SchedulerCycle.objects.create(number=i + 1, started_at=t, clock=t, duration_ms=12.5, binds=1, pending=2)
        ClusterSample.objects.create(
            time=t, cycle=i + 1, schedulable_gpus=8, allocated_gpus=4, free_gpus=4, allocation_rate=0.5,
            fragmentation_rate=0.25 * i, largest_runnable={"1": 4, "2": 4, "3": 4}, domain_completeness=0.0,
            pending_jobs=2, running_jobs=1,
        )
        QueueSample.objects.create(time=t, queue=q_red, used=4, guarantee=2, quota=4, limit=8, pending_demand=32)
        QueueSample.objects.create(time=t, queue=q_blue, used=i % 2, guarantee=0, quota=4, limit=None, pending_demand=2)
    admin = User.objects.create_user("admin", password="pw-admin-123", is_staff=True, is_superuser=True)
    alice = User.objects.create_user("alice", password="pw-alice-123")
    Membership.objects.create(user=alice, team=red)
    return {"admin": admin, "alice": alice, "red": red, "blue": blue, "node": node, "jobs": jobs,
            "queues": {"red": q_red, "blue": q_blue}}
