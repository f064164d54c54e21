"""A federation manager answers as a worker does (new-user trial 17): a job body every member would refuse is a
400 naming the field at the manager, with nothing stored (F3); a GPU share shows its GPU-equivalents and request
as on a worker (F4); cancels sent at once act once (F5); the federated job lists follow the API's query-parameter
rules (F15)."""
from __future__ import annotations

import threading
import time

import pytest
from rest_framework.test import APIClient

from gpuplatform.federation import dispatch
from gpuplatform.models import Event, FederatedJob, Queue

from tests.api.helpers_api import at_once, table_counts

BASE = {"name": "f", "queue": "alpha", "command": ["sleep", "30"], "roles": [{"name": "w", "tasks": 1, "gpus_per_task": 1}]}

# (the field the 400 names, what the body changes): each refused by every member (services.jobs.submit_job)
REFUSED = [
    ("time_limit_seconds", {"time_limit_seconds": 0}),
    ("time_limit_seconds", {"time_limit_seconds": -5}),
    ("working_dir", {"working_dir": "rel"}),
    ("env.1A", {"env": {"1A": "x"}}),
    ("max_restarts", {"max_restarts": -1}),
    ("max_restarts", {"max_restarts": 1000}),
    ("topology_mode", {"topology_mode": "bogus"}),
    ("completion_role", {"completion_role": "nope"}),
    ("command", {"command": ""}),
    ("command", {"command": []}),
    ("highest_tier", {"highest_tier": 0}),
    ("highest_tier", {"highest_tier": "nope"}),
    ("external_id", {"external_id": "a\nb"}),
    ("name", {"name": "bad name"}),
    ("subgroups[0].role", {"subgroups": [{"role": "nope", "group_size": 1, "group_highest_tier": 1}]}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("field,change", REFUSED, ids=[f"{f}={list(c.values())[0]!r}" for f, c in REFUSED])
def test_a_body_every_worker_refuses_is_refused_at_the_manager_naming_the_field(client_for, members, settings,
                                                                               field, change):
    member = client_for("member")
    body = {**BASE, **change}
    settings.FEDERATION_ROLE = "worker"  # this instance as a member cluster: the answer the manager must match
    worker = member.post("/api/v1/jobs/", body, format="json")
    assert worker.status_code == 400 and field in worker.json(), worker.content
    settings.FEDERATION_ROLE = "manager"
    before = table_counts()
    for door in ("/api/v1/jobs/", "/api/v1/federation/jobs/"):
        r = member.post(door, body, format="json")
        assert r.status_code == 400, (door, r.content)
        assert field in r.json(), (door, r.json())
    assert table_counts() == before  # nothing stored: no FederatedJob, no Event
    assert member.post("/api/v1/federation/jobs/", BASE, format="json").status_code == 201  # the body without it


@pytest.mark.django_db
def test_the_job_rules_at_the_manager_keep_what_members_decide(client_for, members):
    """Tier names resolve as on a worker; an image is taken (a member's container runtime is its own to check)."""
    member = client_for("member")
    r = member.post("/api/v1/federation/jobs/", {**BASE, "topology_mode": "hard", "highest_tier": "leaf",
                                                  "image": "nvcr.io/nvidia/pytorch:24.05-py3"}, format="json")
    assert r.status_code == 201, r.content
    assert FederatedJob.objects.get(pk=r.json()["id"]).highest_tier == 2
    r = member.post("/api/v1/federation/jobs/", {**BASE, "image": "bad image!"}, format="json")
    assert r.status_code == 400 and "image" in r.json()
    Queue.objects.filter(name="alpha").update(state="closed")  # the manager's queue: closed to new jobs
    r = member.post("/api/v1/federation/jobs/", BASE, format="json")
    assert r.status_code == 400 and "closed" in str(r.json()["queue"]), r.content


@pytest.mark.django_db
def test_a_gpu_share_shows_its_gpu_equivalents_and_request_as_on_a_worker(client_for, members):
    member = client_for("member")
    cases = [({"name": "w", "tasks": 1, "gpu_fraction": 0.5}, 0.5, "1x0.5", 1),
             ({"name": "w", "tasks": 3, "gpus_per_task": 0.25}, 0.75, "3x0.25", 3),
             ({"name": "w", "tasks": 1, "mig_profile": "1g.18gb", "mig_count": 2}, 2, "2x1g.18gb", 2),
             ({"name": "w", "tasks": 2, "gpus_per_task": 4}, 8, "8", 8)]
    for role, gpus, request, whole in cases:
        r = member.post("/api/v1/federation/jobs/", {**BASE, "roles": [role]}, format="json")
        assert r.status_code == 201, r.content
        assert (r.json()["gpus"], r.json()["gpu_request"]) == (gpus, request), (role, r.json())
        got = member.get(f"/api/v1/jobs/{r.json()['id']}/").json()
        assert (got["gpus"], got["gpu_request"]) == (gpus, request)
        assert FederatedJob.objects.get(pk=r.json()["id"]).gpus == whole  # what the dispatcher places: whole GPUs
    listed = member.get("/api/v1/federation/jobs/").json()["results"]
    assert sorted(j["gpus"] for j in listed) == [0.5, 0.75, 2, 8]
    event = Event.objects.filter(kind="federation.submitted").order_by("id").first()
    assert "0.5 GPU-equivalents (1x0.5)" in event.message, event.message
    import re

    from django.test import Client

    web = Client()
    web.force_login(FederatedJob.objects.first().submitter)
    html = web.get("/federation/").content.decode()  # the page's GPUs column: the API's numbers
    rows = re.findall(r'<tr id="fed-job-(\d+)">(?:<td>[^<]*</td>){4}<td>([^<]*)</td>', html)
    assert sorted(float(g) for _, g in rows) == [0.5, 0.75, 2, 8], rows


@pytest.mark.django_db
def test_the_federated_job_lists_refuse_unknown_query_parameters_and_values(client_for, members):
    member = client_for("member")
    jid = member.post("/api/v1/federation/jobs/", BASE, format="json").json()["id"]
    for door in ("/api/v1/federation/jobs/", "/api/v1/jobs/"):
        r = member.get(door, {"foo": "1"})
        assert r.status_code == 400 and "unknown query parameter" in r.json()["foo"][0], r.content
        r = member.get(door, {"state": "bogus"})
        assert r.status_code == 400 and "bogus" in r.json()["state"][0], r.content
        for param, value in (("queue", "nope"), ("team", "nope"), ("cluster", "nowhere")):
            r = member.get(door, {param: value})
            assert r.status_code == 400 and value in r.json()[param][0], (param, r.content)
        r = member.get(door + "?state=pending&queue=alpha&queue=beta")
        assert r.status_code == 400 and "queue" in r.json(), r.content  # a single-valued parameter given twice
        # the filters that name something still filter
        assert [j["id"] for j in member.get(door, {"state": "pending"}).json()["results"]] == [jid]
        assert member.get(door + "?state=running&state=cancelled").json()["results"] == []
        assert [j["id"] for j in member.get(door, {"queue": "alpha", "team": "alpha", "limit": 1}).json()["results"]] \
            == [jid]
        assert member.get(door, {"queue": "beta"}).json()["results"] == []
        assert member.get(door, {"cluster": "east"}).json()["results"] == []
        assert member.get(door, {"ordering": "name"}).status_code == 200


@pytest.mark.django_db
def test_a_priority_change_of_a_federated_job_is_a_400_naming_priority_not_a_404(client_for, members):
    """Trial 17, F15: PATCH /api/v1/jobs/<id>/ {"priority": -5} on a manager answered 404 "No Job matches the given
    query." for the federated job GET had just shown. A federated job's priority is given at submission: a 400 on
    `priority` saying so; a job the user may not see is still a 404."""
    admin = client_for("team_admin")
    jid = admin.post("/api/v1/federation/jobs/", BASE, format="json").json()["id"]
    assert admin.get(f"/api/v1/jobs/{jid}/").status_code == 200
    r = admin.patch(f"/api/v1/jobs/{jid}/", {"priority": -5}, format="json")
    assert r.status_code == 400 and "set at submission" in r.json()["priority"][0], r.content
    assert client_for("other").patch(f"/api/v1/jobs/{jid}/", {"priority": -5}, format="json").status_code == 404


@pytest.mark.services
@pytest.mark.postgresql("row locks under concurrent requests: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_cancels_at_once_act_once(users, members, factory, monkeypatch):
    monkeypatch.setattr(dispatch, "client_for", factory)  # what the API's cancel reaches: the fake members
    clients = []
    for _ in range(10):
        c = APIClient()
        c.force_authenticate(users["member"])
        clients.append(c)
    r = clients[0].post("/api/v1/federation/jobs/", BASE, format="json")
    assert r.status_code == 201, r.content
    jid = r.json()["id"]
    dispatch.run_round(client_for=factory)
    for fake in members.values():
        fake.start_all()
    dispatch.run_round(client_for=factory)
    job = FederatedJob.objects.get(pk=jid)
    assert job.state == "running", (job.state, job.reason)
    fake = members[job.cluster.name]
    stops, lock = [], threading.Lock()
    real_cancel = fake.cancel

    def slow_cancel(remote_id, reason=""):  # a worker's answer takes a while, as over the network
        with lock:
            stops.append(remote_id)
        time.sleep(0.2)
        return real_cancel(remote_id, reason)

    monkeypatch.setattr(fake, "cancel", slow_cancel)
    answers = at_once([lambda c=c: c.post(f"/api/v1/federation/jobs/{jid}/cancel/", {}, format="json")
                       for c in clients])
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [400] * 9, codes
    for a in answers:
        if a.status_code == 400:
            assert a.json() == {"state": ["job is cancelled, not pending or running"]}
    assert Event.objects.filter(kind="federation.cancelled").count() == 1
    assert stops == [job.remote_id]  # one stop sent to the worker's copy
    assert FederatedJob.objects.get(pk=jid).state == "cancelled"
    assert [j["state"] for j in fake.jobs.values()] == ["cancelled"]
