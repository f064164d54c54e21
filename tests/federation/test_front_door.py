"""One front door on a federation manager (FEDERATION_ROLE = "manager"): the ordinary job form,
POST /api/v1/jobs/ and gpuctl submit FederatedJobs through federation.manager.submit_as, with the jobs API's
validation and error shapes and its Idempotency-Key semantics; the jobs list/detail/cancel/logs act on the
federated jobs; the nav bar links /federation/. A worker (the default role) is unchanged."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from gpuplatform.models import FederatedJob, Job, MemberCluster

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}
BAD = {**JOB, "roles": [{"name": "w", "tasks": 0, "gpus_per_task": 8}]}


@pytest.fixture
def as_manager(settings):
    settings.FEDERATION_ROLE = "manager"
    return settings


def test_post_jobs_on_a_manager_makes_a_federated_job_with_idempotency(client_for, members, as_manager):
    member = client_for("member")
    r = member.post("/api/v1/jobs/", {**JOB, "clusters": ["east"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["state"] == "pending" and body["clusters"] == ["east"] and body["team"] == "alpha"
    assert r["Location"] == f"/api/v1/federation/jobs/{body['id']}/"
    assert FederatedJob.objects.filter(pk=body["id"], submitter__username="mike").exists()
    assert not Job.objects.exists()  # nothing local on a manager
    again = member.post("/api/v1/jobs/", {**JOB, "clusters": ["east"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 201 and again.json()["id"] == body["id"] and again["Idempotent-Replayed"] == "true"
    assert FederatedJob.objects.count() == 1
    other_body = member.post("/api/v1/jobs/", {**JOB, "name": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert other_body.status_code == 409 and FederatedJob.objects.count() == 1


def test_manager_refusals_have_the_jobs_api_shape(client_for, members, settings):
    member = client_for("member")
    settings.FEDERATION_ROLE = "worker"
    on_worker = member.post("/api/v1/jobs/", BAD, format="json")
    settings.FEDERATION_ROLE = "manager"
    on_manager = member.post("/api/v1/jobs/", BAD, format="json")
    assert on_worker.status_code == on_manager.status_code == 400
    assert on_manager.json() == on_worker.json() and "roles[0].tasks" in on_manager.json()
    fed = member.post("/api/v1/federation/jobs/", BAD, format="json")  # the federation's own door: same shape
    assert fed.status_code == 400 and fed.json() == on_manager.json()
    r = member.post("/api/v1/jobs/", {**JOB, "clusters": ["nowhere"]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["clusters"]
    r = member.post("/api/v1/jobs/", {**JOB, "queue": "nope"}, format="json")
    assert r.status_code == 400 and "queue" in r.json()
    r = member.post("/api/v1/jobs/", {**JOB, "team": "beta"}, format="json")
    assert r.status_code == 400 and "team" in r.json()
    assert client_for("other").post("/api/v1/jobs/", JOB, format="json").status_code == 403  # alpha's queue
    assert client_for("viewer").post("/api/v1/jobs/", JOB, format="json").status_code == 403
    assert not FederatedJob.objects.exists() and not Job.objects.exists()


def test_jobs_list_detail_cancel_logs_on_a_manager_are_the_federated_ones(client_for, members, as_manager):
    member, other = client_for("member"), client_for("other")
    jid = member.post("/api/v1/jobs/", JOB, format="json").json()["id"]
    assert [j["id"] for j in member.get("/api/v1/jobs/").json()["results"]] == [jid]
    assert other.get("/api/v1/jobs/").json()["results"] == []
    assert [j["id"] for j in member.get("/api/v1/jobs/?team=alpha&state=pending").json()["results"]] == [jid]
    assert member.get("/api/v1/jobs/?team=beta").json()["results"] == []
    r = member.get(f"/api/v1/jobs/{jid}/")
    assert r.status_code == 200 and r.json()["name"] == "train" and "decision" in r.json()
    assert other.get(f"/api/v1/jobs/{jid}/").status_code == 404
    r = member.get(f"/api/v1/jobs/{jid}/logs/")
    assert r.status_code == 400 and "state" in r.json()  # not placed yet
    assert other.post(f"/api/v1/jobs/{jid}/cancel/", {}, format="json").status_code == 404
    r = member.post(f"/api/v1/jobs/{jid}/cancel/", {"reason": "done"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert FederatedJob.objects.get(pk=jid).state == "cancelled"


def test_a_worker_keeps_its_local_jobs_api(client_for, members, settings):
    settings.FEDERATION_ROLE = "worker"
    r = client_for("member").post("/api/v1/jobs/", JOB, format="json")
    assert r.status_code == 201 and Job.objects.filter(pk=r.json()["id"]).exists()
    assert not FederatedJob.objects.exists()


def form_post(**over):
    data = {"name": "train-1", "team": "alpha", "queue": "alpha", "priority": "0", "preemptible": "on",
            "topology_mode": "none", "highest_tier": "", "preferred_tier": "", "time_limit_minutes": "30",
            "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
            "roles-MAX_NUM_FORMS": "16", "roles-0-name": "worker", "roles-0-tasks": "2",
            "roles-0-gpus_per_task": "4", "roles-0-cpu_milli": "0", "roles-0-memory_mib": "0",
            "roles-0-min_available": "", "roles-0-flavor": "", "roles-0-command": "",
            "command": "python3 train.py --epochs 3", "env": "NCCL_DEBUG=INFO", "working_dir": "", "image": "",
            "max_restarts": "0", "completion_role": ""}
    data.update(over)
    return data


def test_the_job_form_on_a_manager_submits_to_the_federation(users, members, as_manager):
    web = Client()
    web.force_login(users["member"])
    r = web.post("/jobs/new/", form_post())
    assert r.status_code == 302, r.content.decode()[:2000]
    job = FederatedJob.objects.get(name="train-1")
    assert r["Location"] == f"/federation/#fed-job-{job.pk}"
    assert (job.gpus, job.task_gpus, job.team.name, job.submitter.username) == (8, 4, "alpha", "mike")
    assert job.spec["time_limit_seconds"] == 1800 and job.spec["env"] == {"NCCL_DEBUG": "INFO"}
    assert not Job.objects.exists()
    page = web.get(r["Location"].split("#")[0]).content.decode()
    assert f'id="fed-job-{job.pk}"' in page and "submitted to the federation" in page
    # jobs list and detail on a manager lead to the federated jobs
    assert web.get("/jobs/")["Location"] == "/federation/"
    assert web.get(f"/jobs/{job.pk}/")["Location"] == f"/federation/#fed-job-{job.pk}"
    web.force_login(users["other"])
    assert web.get(f"/jobs/{job.pk}/").status_code == 404  # another team's federated job
    # a refused submission comes back with the field's error, nothing stored
    web.force_login(users["member"])
    r = web.post("/jobs/new/", form_post(name="train-2", **{"roles-0-min_available": "5"}))
    assert r.status_code == 200 and not FederatedJob.objects.filter(name="train-2").exists()


def test_nav_links_the_federation_page_on_a_manager_only(users, members, settings):
    web = Client()
    web.force_login(users["member"])
    settings.FEDERATION_ROLE = "worker"
    assert 'href="/federation/"' not in web.get("/federation/").content.decode()
    settings.FEDERATION_ROLE = "manager"
    html = web.get("/federation/").content.decode()
    assert '<a href="/federation/" aria-current="page">Federation</a>' in html
    assert 'href="/federation/"' in web.get("/jobs/new/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_gpuctl_against_a_manager_submits_lists_and_cancels_federated_jobs(live_server, users, members, as_manager,
                                                                           capsys):
    from gpuplatform.cli import main
    from gpuplatform.services import issue_api_token

    token = issue_api_token(users["member"])[0]

    def gpuctl(*argv):
        code = main(["--api", live_server.url, "--token", token, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = gpuctl("--json", "submit", "--queue", "alpha", "--name", "cli-train", "--tasks", "2", "--gpus",
                            "8", "--command", "python3 train.py")
    assert code == 0, err
    job = json.loads(out)
    assert FederatedJob.objects.filter(pk=job["id"], name="cli-train", gpus=16).exists() and not Job.objects.exists()
    code, out, _ = gpuctl("list")
    assert code == 0 and "cli-train" in out and "alpha" in out
    code, out, _ = gpuctl("get", str(job["id"]))
    assert code == 0 and "cli-train" in out
    code, _, err = gpuctl("submit", "--queue", "alpha", "--name", "x", "--tasks", "4", "--min-available", "5",
                          "--command", "true")
    assert code == 1 and "roles[0].min_available" in err
    code, out, _ = gpuctl("cancel", str(job["id"]), "--reason", "test")
    assert code == 0 and "cancelled" in out and FederatedJob.objects.get(pk=job["id"]).state == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_gpuctl_logs_against_a_manager_shows_the_member_jobs_logs(live_server, users, members, as_manager, capsys,
                                                                    monkeypatch):
    """New-user trial 14, F7: `gpuctl logs 1` on a manager said "job 1 has no tasks" and exited 0 for a federated job
    running 2 tasks. It follows the job's member placement (the manager's logs proxy, the first task by default);
    before the job has a copy on a member it says so and exits non-zero."""
    from gpuplatform.cli import main
    from gpuplatform.federation import dispatch
    from gpuplatform.services import issue_api_token

    asked = []

    def logs(remote_id, params):
        asked.append((remote_id, params))
        return {"task": 7, "name": "worker-0", "attempt": 0, "offset": 0, "next_offset": 6, "size": 6,
                "trimmed": False, "data": "hello\n", "complete": True, "state": "running"}

    members["east"].logs = logs
    monkeypatch.setattr(dispatch, "client_for", lambda c: members[c.name])
    token = issue_api_token(users["member"])[0]

    def gpuctl(*argv):
        code = main(["--api", live_server.url, "--token", token, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = gpuctl("--json", "submit", "--queue", "alpha", "--name", "fed-logs", "--tasks", "2", "--gpus",
                            "1", "--command", "true")
    assert code == 0, err
    job_id = json.loads(out)["id"]
    code, out, err = gpuctl("logs", str(job_id))  # not placed yet: no copy, no logs
    assert code == 2 and "is a federated job (pending) with no copy on a member cluster yet" in err, (code, err)
    FederatedJob.objects.filter(pk=job_id).update(state="running", cluster=MemberCluster.objects.get(name="east"),
                                                  remote_id=41)
    code, out, err = gpuctl("logs", str(job_id))
    assert code == 0 and out == "hello\n", (code, out, err)
    assert asked == [(41, {"offset": 0, "limit": 65536})], asked  # the member job's first task (no task given)
