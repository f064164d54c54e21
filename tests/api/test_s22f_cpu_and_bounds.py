"""New-user trial 22, G1 and G11, at the API.

G1: a job whose CPU can never be packed on the cluster's nodes (each node 2000 milli-CPU) is refused at submission, as
one asking more GPUs than the cluster has, with the engine's words (fit_check asks scheduler.core.never_fits); one
that fits is taken.
G11: a number beyond 32 bits in a bounded field of the jobs and queue APIs gets the field's real rule (tasks: at most
4096), whatever its size, never "less than or equal to 2147483647"."""
from __future__ import annotations

import pytest

BIG = 99999999999999999999999


@pytest.fixture
def cpu_nodes(cluster):
    from gpuplatform.models import Node

    Node.objects.update(cpu_milli=2000)
    return Node.objects.count() * 2000


def _post(api, **role):
    return api.post("/api/v1/jobs/", {"queue": "alpha", "name": "cpu", "command": "sleep 5",
                                      "roles": [{"name": "w", **role}]}, format="json")


def test_a_job_the_nodes_cpu_can_never_hold_is_refused_at_submission(client_for, cpu_nodes):
    api = client_for("member")
    tasks = cpu_nodes // 1000 + 1
    r = _post(api, tasks=tasks, gpus_per_task=0, cpu_milli=1000)
    assert r.status_code == 400, r.content
    assert r.json()["roles[0].tasks"] == [f"can never fit this cluster: role w: needs {tasks} x 1000 milli-CPU at once, the "
                                 f"cluster's nodes hold at most {tasks - 1} such tasks"]
    r = _post(api, tasks=4096, gpus_per_task=0, cpu_milli=1)  # 4096 tasks of 1 milli-CPU on 8000: fits
    assert r.status_code == 201, r.content
    r = _post(api, tasks=tasks - 1, gpus_per_task=0, cpu_milli=1000)  # exactly the cluster's
    assert r.status_code == 201, r.content


@pytest.mark.parametrize("field, value, rule", [
    ("tasks", BIG, "tasks must be at most 4096"),
    ("tasks", 4097, "tasks must be at most 4096"),
    ("tasks", -BIG, "tasks must be at least 1"),
    ("min_available", BIG, "min_available must not exceed tasks (at most 4096)"),
    ("cpu_milli", BIG, "cpu_milli must be at most 2147483647"),
    ("cpu_milli", -BIG, "cpu_milli must not be negative"),
    ("memory_mib", BIG, "memory_mib must be at most 2147483647"),
    ("group_size", BIG, "group_size must be a whole number from 1 to 4096"),
    ("gpu_memory_mib", BIG, "gpu_memory_mib must be a whole number of MiB from 1 to 2147483647"),
])
def test_a_role_number_beyond_32_bits_gets_the_fields_rule(client_for, cluster, field, value, rule):
    r = _post(client_for("member"), **{"tasks": 2, "gpus_per_task": 1, field: value})
    assert r.status_code == 400 and r.json()[f"roles[0].{field}"] == [rule], r.content


@pytest.mark.parametrize("field, value, rule", [
    ("max_restarts", BIG, "max_restarts must be a whole number from 0 to 100"),
    ("time_limit_seconds", BIG, "time_limit_seconds must be a whole number of seconds from 1 to 31622400 (366 days)"),
])
def test_a_job_number_beyond_32_bits_gets_the_fields_rule(client_for, cluster, field, value, rule):
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "j", "command": "sleep 5", field: value,
                                                    "roles": [{"tasks": 1, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 400 and r.json()[field] == [rule], r.content


def test_a_queues_grace_beyond_32_bits_gets_its_rule(admin, cluster):
    rule = ["preemption_grace_seconds must be a whole number of seconds from 0 to 86400"]
    r = admin.post("/api/v1/queues/", {"name": "g11", "parent": "root", "preemption_grace_seconds": BIG},
                   format="json")
    assert r.status_code == 400 and r.json()["preemption_grace_seconds"] == rule, r.content
    queue = "/api/v1/queues/alpha/"
    r = admin.patch(queue, {"preemption_grace_seconds": -BIG}, format="json",
                    HTTP_IF_MATCH=admin.get(queue)["ETag"])
    assert r.status_code == 400 and r.json()["preemption_grace_seconds"] == rule, r.content
