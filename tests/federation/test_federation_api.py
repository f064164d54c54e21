"""Federation REST: the manager's clusters/ and jobs/ (who sees and does what, the token never shown) and the
worker's member/ endpoints for the manager's scoped service account (idempotent create, withdraw only while
pending, summary)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from gpuplatform.federation import dispatch
from gpuplatform.federation.worker_api import make_service_account
from gpuplatform.models import FederatedJob, Job, MemberCluster

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}


@pytest.fixture
def service(users):
    """The manager's account on this (worker) instance: in federation-managers, no team, not staff."""
    _user, token = make_service_account()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_clusters_admin_writes_token_is_encrypted_and_never_returned(client_for):
    admin, member = client_for("staff"), client_for("member")
    body = {"name": "east", "api_url": "http://east.test:8000", "token": "s3cret-token-value",
            "labels": {"region": "eu", "data-site": "lyon"}, "cost_per_gpu_hour": 2.5}
    assert member.post("/api/v1/federation/clusters/", body, format="json").status_code == 403
    r = admin.post("/api/v1/federation/clusters/", body, format="json")
    assert r.status_code == 201, r.content
    assert "token" not in r.json() and r.json()["token_status"] == "set (encrypted)"
    row = MemberCluster.objects.get(name="east")
    assert "s3cret" not in row.token_encrypted and row.token() == "s3cret-token-value"
    page = member.get("/api/v1/federation/clusters/").json()  # docs/api.md: every list is paginated
    assert set(page) == {"count", "next", "previous", "results"} and page["count"] == 1, page
    listed = page["results"]
    assert [c["name"] for c in listed] == ["east"] and listed[0]["state"] == "new"
    assert "s3cret" not in member.get("/api/v1/federation/clusters/").content.decode()
    bad = admin.post("/api/v1/federation/clusters/", {**body, "name": "west", "labels": {"bad key!": "x"}}, format="json")
    assert bad.status_code == 400 and "labels" in bad.json()
    dup = admin.post("/api/v1/federation/clusters/", body, format="json")
    assert dup.status_code == 400 and "name" in dup.json()
    r = admin.patch(f"/api/v1/federation/clusters/{row.pk}/", {"cost_per_gpu_hour": -1}, format="json")
    assert r.status_code == 400 and "cost_per_gpu_hour" in r.json()


def test_jobs_are_visible_to_their_team_only_and_cancel_needs_the_team(client_for, members):
    member, other = client_for("member"), client_for("other")
    r = member.post("/api/v1/federation/jobs/", {**JOB, "clusters": ["east"], "data_site": "lyon"}, format="json")
    assert r.status_code == 201, r.content
    jid = r.json()["id"]
    assert r.json()["state"] == "pending" and r.json()["clusters"] == ["east"]
    assert other.post("/api/v1/federation/jobs/", JOB, format="json").status_code == 403  # alpha's queue
    assert [j["id"] for j in member.get("/api/v1/federation/jobs/").json()["results"]] == [jid]
    assert other.get("/api/v1/federation/jobs/").json()["results"] == []
    assert other.get(f"/api/v1/federation/jobs/{jid}/").status_code == 404
    assert other.post(f"/api/v1/federation/jobs/{jid}/cancel/", {}, format="json").status_code == 404
    assert [j["id"] for j in client_for("staff").get("/api/v1/federation/jobs/").json()["results"]] == [jid]
    bad = member.post("/api/v1/federation/jobs/", {**JOB, "clusters": ["nowhere"]}, format="json")
    assert bad.status_code == 400 and "clusters" in bad.json()
    bad = member.post("/api/v1/federation/jobs/", {**JOB, "roles": [{"name": "w", "tasks": 0, "gpus_per_task": 8}]},
                      format="json")
    assert bad.status_code == 400
    r = member.get(f"/api/v1/federation/jobs/{jid}/logs/")
    assert r.status_code == 400 and "state" in r.json()  # not placed yet: no copy to read logs from
    assert other.get(f"/api/v1/federation/jobs/{jid}/logs/").status_code == 404
    r = member.post(f"/api/v1/federation/jobs/{jid}/cancel/", {"reason": "no longer needed"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    again = member.post(f"/api/v1/federation/jobs/{jid}/cancel/", {}, format="json")
    assert again.status_code == 400 and again.json() == {"state": ["job is cancelled, not pending or running"]}


def test_federation_page_lists_clusters_and_own_jobs(client_for, users, members, factory, settings):
    from django.test import Client

    client_for("member").post("/api/v1/federation/jobs/", JOB, format="json")
    dispatch.run_round(client_for=factory)
    web = Client()
    web.force_login(users["member"])
    settings.FEDERATION_ROLE = "worker"
    html = web.get("/federation/").content.decode()
    assert "east" in html and "west" in html and "train" in html and "healthy" in html
    assert ">Federation</a>" not in html  # a worker's nav bar (the default role) has no federation link
    settings.FEDERATION_ROLE = "manager"
    html = web.get("/federation/").content.decode()
    assert '<a href="/federation/" aria-current="page">Federation</a>' in html  # a manager's nav bar does
    settings.FEDERATION_ROLE = "worker"
    web.force_login(users["other"])
    assert "train" not in web.get("/federation/").content.decode()


def test_worker_endpoints_are_for_the_service_account_only(client_for, service):
    assert client_for("member").get("/api/v1/federation/member/summary/").status_code == 403
    s = service.get("/api/v1/federation/member/summary/")
    assert s.status_code == 200
    assert s.json()["flavors"]["H100"]["total"] == 32 and s.json()["queues"]["alpha"]["H100"]["limit"] == 32
    # the service account sees nothing of the ordinary API
    assert service.get("/api/v1/jobs/").json()["results"] == []


def test_worker_create_is_idempotent_and_withdraw_only_while_pending(service):
    body = {**JOB, "external_id": "fed:7:g0"}
    r1 = service.post("/api/v1/federation/member/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="fed-7-g0")
    r2 = service.post("/api/v1/federation/member/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="fed-7-g0")
    assert r1.status_code == r2.status_code == 201 and r1.json()["id"] == r2.json()["id"]
    assert r2["Idempotent-Replayed"] == "true" and Job.objects.filter(external_id="fed:7:g0").count() == 1
    assert service.get("/api/v1/federation/member/jobs/?external_id=fed:7:g0").json()[0]["id"] == r1.json()["id"]
    copies = service.get("/api/v1/federation/member/summary/").json()["jobs"]
    assert copies == [{"id": r1.json()["id"], "external_id": "fed:7:g0", "state": "pending"}]
    no_prefix = service.post("/api/v1/federation/member/jobs/", {**JOB, "external_id": "x"}, format="json")
    assert no_prefix.status_code == 400 and "external_id" in no_prefix.json()

    running = service.post("/api/v1/federation/member/jobs/", {**JOB, "external_id": "fed:8:g0"}, format="json").json()
    Job.objects.filter(pk=running["id"]).update(state="running")
    r = service.post(f"/api/v1/federation/member/jobs/{running['id']}/withdraw/", {}, format="json")
    assert r.status_code == 409 and Job.objects.get(pk=running["id"]).state == "running"
    r = service.post(f"/api/v1/federation/member/jobs/{r1.json()['id']}/withdraw/", {}, format="json")
    assert r.status_code == 200 and r.json()["withdrawn"] is True
    assert Job.objects.get(pk=r1.json()["id"]).state == "cancelled"


def test_worker_forecast_answers_a_start(service):
    r = service.post("/api/v1/federation/member/forecast/", {"queue": "alpha", "tasks": 1, "gpus_per_task": 8},
                     format="json")
    assert r.status_code == 200 and r.json()["start_s"] == 0.0  # the empty cluster starts it now
    r = service.post("/api/v1/federation/member/forecast/", {"queue": "alpha", "tasks": 1, "gpus_per_task": 8,
                                                              "colour": "red"}, format="json")
    assert r.status_code == 400 and "colour" in r.json()
    r = service.post("/api/v1/federation/member/forecast/", {"queue": "nope", "tasks": 1, "gpus_per_task": 8},
                     format="json")
    assert r.status_code == 400


def test_a_cluster_with_jobs_on_record_is_disabled_not_deleted(client_for, users, members, factory):
    client_for("member").post("/api/v1/federation/jobs/", JOB, format="json")
    dispatch.run_round(client_for=factory)
    where = FederatedJob.objects.get().cluster
    admin = client_for("staff")
    r = admin.delete(f"/api/v1/federation/clusters/{where.pk}/")
    assert r.status_code == 400 and "disable it instead" in r.json()["name"][0]
    r = admin.patch(f"/api/v1/federation/clusters/{where.pk}/", {"enabled": False}, format="json")
    assert r.status_code == 200 and r.json()["enabled"] is False
    empty = MemberCluster.objects.exclude(pk=where.pk).get()
    assert admin.delete(f"/api/v1/federation/clusters/{empty.pk}/").status_code == 204
