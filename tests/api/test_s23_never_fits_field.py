"""A job that can never fit this cluster is refused naming the field at fault, in the API's one error shape
(docs/api.md, "Errors: one shape": `roles[0].gpus_per_task`, as every other role field error), not under `roles`
whatever it was about; the message is the engine's, unchanged. The rule stays the engine's (scheduler.core's
feasibility rule says which role; platform fit_check.refusal_errors only maps its code to the field).

World: tests/api/conftest.py's small cluster: 4 nodes x 8 H100 (64000 milli-CPU, 512000 MiB, NUMA nodes of 4 GPUs),
two tier-1 NVLink domains of 16 GPUs under one tier-2 leaf."""
from __future__ import annotations

import pytest

from tests.api.conftest import SLEEP


def _post(api, roles, **job):
    return api.post("/api/v1/jobs/", {"queue": "alpha", "name": "never", "command": SLEEP, "roles": roles, **job},
                    format="json")


@pytest.mark.parametrize("roles, job, key, message", [
    ([{"name": "w", "gpus_per_task": 16}], {}, "roles[0].gpus_per_task",
     "can never fit this cluster: role w: 16 GPUs per task exceeds every H100 node (largest has 8)"),
    ([{"name": "w", "gpus_per_task": 1, "cpu_milli": 64001}], {}, "roles[0].cpu_milli",
     "can never fit this cluster: role w: 64001 milli-CPU per task exceeds every H100 node (largest has 64000)"),
    ([{"name": "w", "gpus_per_task": 1, "memory_mib": 512001}], {}, "roles[0].memory_mib",
     "can never fit this cluster: role w: 512001 MiB of memory per task exceeds every H100 node (largest has "
     "512000)"),
    ([{"name": "w", "tasks": 5, "gpus_per_task": 0, "cpu_milli": 64000}], {}, "roles[0].tasks",
     "can never fit this cluster: role w: needs 5 x 64000 milli-CPU at once, the cluster's nodes hold at most 4 "
     "such tasks"),
    ([{"name": "w", "tasks": 8, "min_available": 5, "gpus_per_task": 0, "cpu_milli": 1, "memory_mib": 512000}], {},
     "roles[0].min_available", "can never fit this cluster: role w: needs 5 x 512000 MiB of memory at once, the "
     "cluster's nodes hold at most 4 such tasks"),
    ([{"name": "ps", "gpus_per_task": 1}, {"name": "w", "gpus_per_task": 16}], {}, "roles[1].gpus_per_task",
     "can never fit this cluster: role w: 16 GPUs per task exceeds every H100 node (largest has 8)"),
    ([{"name": "ps", "gpus_per_task": 1}, {"name": "w", "flavor": "B200"}], {}, "roles[1].flavor",
     "can never fit this cluster: role w: no node of flavor B200 in this cluster"),
    ([{"name": "w", "gpus_per_task": 6}], {"numa": "single"}, "roles[0].gpus_per_task",
     "can never fit this cluster: role w: 6 GPUs per task exceed every H100 node's NUMA node (largest holds 4; "
     "numa: single)"),
    ([{"name": "w", "tasks": 3, "gpus_per_task": 8, "group_size": 3, "group_highest_tier": 1}], {},
     "roles[0].group_size", "can never fit this cluster: role w: a group of 3 tasks x 8 H100 GPUs exceeds every "
                            "tier-1 domain"),
    ([{"name": "w", "tasks": 3, "gpus_per_task": 8}],
     {"subgroups": [{"role": "w", "group_size": 3, "group_highest_tier": 1}]}, "subgroups[0].group_size",
     "can never fit this cluster: role w: a group of 3 tasks x 8 H100 GPUs exceeds every tier-1 domain"),
    ([{"name": "w", "tasks": 5, "gpus_per_task": 8}], {}, "roles[0].tasks",
     "can never fit: needs 40 H100 GPUs, this cluster has 32"),  # the job's total is its only role's
    ([{"name": "a", "tasks": 3, "gpus_per_task": 8}, {"name": "b", "tasks": 2, "gpus_per_task": 8}], {}, "roles",
     "can never fit: needs 40 H100 GPUs, this cluster has 32"),  # no one role is at fault: the roles together
])
def test_a_never_fitting_job_is_refused_under_the_field_at_fault(client_for, roles, job, key, message):
    from gpuplatform.models import Job

    r = _post(client_for("member"), roles, **job)
    assert r.status_code == 400, r.content
    assert r.json() == {key: [message]}, r.json()
    assert not Job.objects.filter(name="never").exists()


def test_the_shape_check_names_the_same_field(client_for):
    r = client_for("member").post("/api/v1/shape-check/", {"queue": "alpha", "roles": [
        {"name": "ps", "tasks": 1, "gpus_per_task": 1}, {"name": "w", "tasks": 1, "gpus_per_task": 16}]},
        format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"roles[1].gpus_per_task": ["can never fit this cluster: role w: 16 GPUs per task exceeds "
                                                   "every H100 node (largest has 8)"]}, r.json()
