"""Fixtures for platform tests: a small loaded cluster (2 NVLink domains under one leaf, 4 x 8 H100)."""
from __future__ import annotations

import pytest

from tests.platform.helpers_platform import small_spec

__all__ = ["small_spec"]
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


@pytest.fixture
def cluster(db):
    from gpuplatform import services

    services.load_cluster_spec(small_spec())
    return small_spec()


@pytest.fixture
def alpha(cluster):
    from gpuplatform.models import Queue, Team

    return Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")


@pytest.fixture
def submit(alpha):
    """submit(name, tasks=1, gpus=1, **kwargs) -> Job in queue alpha."""
    from gpuplatform import services

    team, queue = alpha

    def _submit(name="job", tasks=1, gpus=1, **kwargs):
        roles = kwargs.pop("roles", None) or [{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}]
        return services.submit_job(command=SLEEP, team=team, queue=queue, name=name, roles=roles, **kwargs)

    return _submit
