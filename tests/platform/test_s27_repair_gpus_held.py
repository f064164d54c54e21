"""Repair and validation wait until no job holds the node's GPUs (session 27): a cordoned node with a 3-GPU job went
in_repair, then validating, and its check ran while the job ran (the documented check, dcgmi diag -r 2, is a GPU
diagnostic). Now the admin's .../repair/ and .../validate/ (and the admin actions, through the same service
functions) are a 400 on `state` naming the rule, the jobs and what to do; once the jobs are gone (drained or ended)
the path is as before. A failed validation (validating -> in_repair) stays the platform's own move."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Node
from tests.platform.test_execution import agents, at, bind, report, start_all, tasks_of  # noqa: F401

URL = "/api/v1/nodes/n0/"
RULE = "a node goes into repair only once no job holds its GPUs (drained or empty)"
VALIDATE_RULE = "a node is validated only once no job holds its GPUs"


@pytest.fixture
def admin_client(db):
    user = get_user_model().objects.create_superuser("root", password="pw-root-123")
    client = APIClient()
    client.force_authenticate(user)
    return client


def post(client, step: str, body: dict | None = None):
    return client.post(URL + step, body or {}, format="json")


def running(submit, name: str, gpus=(0, 1, 2), node: str = "n0"):
    job = submit(name, tasks=1, gpus=len(gpus))
    bind(job, (node, tuple(gpus)))
    start_all(job)
    return job


def repair_events() -> int:
    return Event.objects.filter(node__name="n0", kind__in=("repair_started", "validation_started")).count()


def test_repair_refused_while_a_job_holds_gpus_then_accepted_once_drained(submit, agents, admin_client):
    job = running(submit, "a1")
    assert post(admin_client, "cordon/").status_code == 200
    r = post(admin_client, "repair/", {"reason": "GPU 3 reseated"})
    assert r.status_code == 400, r.content
    (msg,) = r.json()["state"]
    assert RULE in msg and f"job {job.pk} (a1)" in msg and "3 of its GPUs" in msg, msg
    assert "drain it first (POST /api/v1/nodes/n0/drain/" in msg and "cancel it" in msg, msg
    assert Node.objects.get(name="n0").state == "cordoned" and repair_events() == 0
    # drained: its job is stopped with grace; until its process has stopped the GPUs are still held
    assert post(admin_client, "drain/").status_code == 200
    r = post(admin_client, "repair/")
    assert r.status_code == 400 and "it is draining: start the repair once its jobs have stopped" in r.json()["state"][0]
    (task,) = tasks_of(job)
    assert report(task, "exited", 5, signal=15) == (True, "")
    assert not Allocation.objects.filter(gpu__node__name="n0", released_at__isnull=True).exists()
    r = post(admin_client, "repair/", {"reason": "GPU 3 reseated"})
    assert r.status_code == 200 and r.json()["state"] == "in_repair", r.content
    r = post(admin_client, "validate/", {"check_command": ["/bin/true"]})
    assert r.status_code == 200 and r.json()["state"] == "validating", r.content


def test_repair_accepted_after_the_job_ended(submit, agents, admin_client):
    job = running(submit, "a1")
    post(admin_client, "cordon/")
    assert post(admin_client, "repair/").status_code == 400
    (task,) = tasks_of(job)
    assert report(task, "exited", 5, exit_code=0) == (True, "")
    r = post(admin_client, "repair/")
    assert r.status_code == 200 and r.json()["state"] == "in_repair", r.content


def test_a_node_without_jobs_goes_to_repair_and_validation_as_before(submit, agents, admin_client):
    running(submit, "elsewhere", node="n1")  # another node's job does not count
    assert post(admin_client, "repair/").json() == {"state": ["node n0 is ready; cannot start a repair"]}
    post(admin_client, "cordon/")
    assert post(admin_client, "repair/").json()["state"] == "in_repair"
    assert post(admin_client, "validate/", {"check_command": ["/bin/true"]}).json()["state"] == "validating"
    r = post(admin_client, "validation/", {"passed": False, "detail": "dcgmi diag -r 2: memory test failed"})
    assert r.json()["state"] == "in_repair"  # the platform's own move back: no rule on it


def test_validate_refused_while_a_job_holds_gpus(submit, agents, admin_client):
    # a node that went in_repair with a job on it (before this rule): validating it would run the check beside it
    job = running(submit, "a1", gpus=(4,))
    Node.objects.filter(name="n0").update(state="in_repair")
    r = post(admin_client, "validate/", {"check_command": ["/bin/true"]})
    assert r.status_code == 400, r.content
    (msg,) = r.json()["state"]
    assert VALIDATE_RULE in msg and f"job {job.pk} (a1)" in msg and "1 of its GPUs" in msg, msg
    assert Node.objects.get(name="n0").state == "in_repair" and repair_events() == 0
    (task,) = tasks_of(job)
    report(task, "exited", 5, exit_code=0)
    r = post(admin_client, "validate/", {"check_command": ["/bin/true"]})
    assert r.status_code == 200 and r.json()["state"] == "validating", r.content


def test_the_refusal_names_a_few_jobs_and_counts_the_rest(submit, agents):
    jobs = [running(submit, f"j{i}", gpus=(i,)) for i in range(5)]
    node = Node.objects.get(name="n0")
    services.cordon_node(node)
    with pytest.raises(services.ValidationError) as err:  # the service function the admin's action calls
        services.start_repair(node)
    msg = err.value.errors["state"]
    assert "5 of its GPUs are held by 5 live jobs: jobs " in msg and "and 2 more" in msg and "cancel them" in msg, msg
    assert all(f"{j.pk} (j{i})" in msg for i, j in enumerate(jobs[:3])) and f"{jobs[3].pk} (j3)" not in msg
    assert Node.objects.get(name="n0").state == "cordoned"


def test_the_admin_action_is_refused_too(submit, agents, admin_client):
    job = running(submit, "a1")
    services.cordon_node(Node.objects.get(name="n0"))
    client = APIClient()
    client.force_login(get_user_model().objects.get(username="root"))
    r = client.post("/admin/gpuplatform/node/", {"action": "action_start_repair",
                                                 "_selected_action": [Node.objects.get(name="n0").pk]}, follow=True)
    assert r.status_code == 200
    text = " ".join(str(m) for m in r.context["messages"])
    assert RULE in text and f"job {job.pk} (a1)" in text, text
    assert Node.objects.get(name="n0").state == "cordoned"
