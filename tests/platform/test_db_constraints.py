"""The database itself refuses impossible states, whatever code path tries to write them."""
from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuplatform.models import Allocation, Gpu, Job, JobRole, Queue, Quota, Task


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
