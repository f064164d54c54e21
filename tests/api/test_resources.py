"""CRUD and actions per resource, optimistic concurrency (ETag / If-Match), throttling, auth styles,
the OpenAPI schema and docs, and the Prometheus exposition."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.helpers_api import job_body

pytestmark = pytest.mark.django_db


def events(kind):
    from gpuplatform.models import Event

    return list(Event.objects.filter(kind=kind).order_by("id"))


# --- teams and memberships --------------------------------------------------------------------------

def test_team_create_and_duplicate(admin):
    r = admin.post("/api/v1/teams/", {"name": "Gamma-Ray", "description": "new"}, format="json")
    assert r.status_code == 201 and r.json()["slug"] == "gamma-ray"
    assert admin.get("/api/v1/teams/gamma-ray/").json()["description"] == "new"
    dup = admin.post("/api/v1/teams/", {"name": "Gamma-Ray"}, format="json")
    assert dup.status_code == 400 and "already exists" in dup.json()["name"][0]
    assert events("team_created")[-1].actor.username == "admin"


def test_team_admin_manages_members(client_for, users):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("newbie")
    team_admin = client_for("team_admin")
    r = team_admin.post("/api/v1/memberships/", {"team": "alpha", "user": "newbie", "role": "member"}, format="json")
    assert r.status_code == 201, r.content
    mid = r.json()["id"]
    assert team_admin.patch(f"/api/v1/memberships/{mid}/", {"role": "viewer"}, format="json").json()["role"] == "viewer"
    bad = team_admin.patch(f"/api/v1/memberships/{mid}/", {"role": "owner"}, format="json")
    assert bad.status_code == 400 and "role" in bad.json()
    moved = team_admin.patch(f"/api/v1/memberships/{mid}/", {"team": "beta"}, format="json")
    assert moved.status_code == 400 and "team" in moved.json()
    assert team_admin.delete(f"/api/v1/memberships/{mid}/").status_code == 204
    assert [e.data["user"] for e in events("member_removed")] == ["newbie"]
    assert team_admin.get("/api/v1/memberships/?team=alpha&role=viewer").json()["count"] == 1  # vera


def test_adding_a_member_twice_is_200_the_second_time_and_records_nothing(client_for, users):
    """New-user report item 15: the same POST twice answered 201 both times. Adding is idempotent: 201 when
    the membership is created, 200 with the same one after (no second event); a new role is a 200 too."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("twice")
    team_admin = client_for("team_admin")
    body = {"team": "alpha", "user": "twice", "role": "member"}
    first = team_admin.post("/api/v1/memberships/", body, format="json")
    again = team_admin.post("/api/v1/memberships/", body, format="json")
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json() == first.json()
    assert [e.data["user"] for e in events("member_added")].count("twice") == 1
    viewer = team_admin.post("/api/v1/memberships/", {**body, "role": "viewer"}, format="json")
    assert viewer.status_code == 200 and (viewer.json()["id"], viewer.json()["role"]) == (first.json()["id"], "viewer")


# --- queues and quotas ------------------------------------------------------------------------------

def test_queue_create_tree_and_filters(admin):
    r = admin.post("/api/v1/queues/", {"name": "alpha-dev", "parent": "root", "team": "alpha", "weight": 2,
                                       "quotas": [{"flavor": "H100", "guarantee": 0, "quota": 0, "limit": 8}]},
                   format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["parent"] == "root" and body["team"] == "alpha" and body["quotas"][0]["limit"] == 8
    assert r["ETag"]
    tree = admin.get("/api/v1/queues/tree/").json()
    assert [q["name"] for q in tree] == ["root"]
    assert [c["name"] for c in tree[0]["children"]] == ["alpha", "alpha-dev", "beta"]
    assert [q["name"] for q in admin.get("/api/v1/queues/?team=alpha").json()["results"]] == ["alpha", "alpha-dev"]
    assert [q["name"] for q in admin.get("/api/v1/queues/?root=true").json()["results"]] == ["root"]
    dup = admin.post("/api/v1/queues/", {"name": "alpha-dev"}, format="json")
    assert dup.status_code == 400 and "name" in dup.json()
    twice = admin.post("/api/v1/queues/", {"name": "x", "quotas": [{"flavor": "H100"}, {"flavor": "H100"}]}, format="json")
    assert twice.status_code == 400 and "quotas[1].flavor" in twice.json()


def test_queue_update_needs_current_etag(admin):
    url = "/api/v1/queues/alpha/"
    etag = admin.get(url)["ETag"]
    missing = admin.patch(url, {"state": "closed"}, format="json")
    assert missing.status_code == 428
    stale = admin.patch(url, {"state": "closed"}, format="json", HTTP_IF_MATCH='"not-the-etag"')
    assert stale.status_code == 412
    ok = admin.patch(url, {"state": "closed", "weight": 3}, format="json", HTTP_IF_MATCH=etag)
    assert ok.status_code == 200 and ok.json()["state"] == "closed" and ok.json()["weight"] == 3
    assert ok["ETag"] != etag
    again = admin.patch(url, {"state": "open"}, format="json", HTTP_IF_MATCH=etag)
    assert again.status_code == 412  # the first write changed it
    bad = admin.patch(url, {"weight": 0}, format="json", HTTP_IF_MATCH=ok["ETag"])
    assert bad.status_code == 400 and "weight" in bad.json()
    unknown_state = admin.patch(url, {"state": "paused"}, format="json", HTTP_IF_MATCH=ok["ETag"])
    assert unknown_state.status_code == 400 and "state" in unknown_state.json()


def test_two_admins_cannot_overwrite_each_others_quota(client_for, users):
    from django.contrib.auth import get_user_model
    from gpuplatform.services import issue_api_token

    from gpuplatform.models import Quota

    second = get_user_model().objects.create_user("admin2", is_staff=True)
    a = client_for("staff")
    b = APIClient()
    b.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(second)[0]}")
    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='alpha').pk}/"
    etag_a, etag_b = a.get(url)["ETag"], b.get(url)["ETag"]
    assert etag_a == etag_b
    assert a.put(url, {"guarantee": 2, "quota": 12, "limit": 24}, format="json", HTTP_IF_MATCH=etag_a).status_code == 200
    lost = b.put(url, {"guarantee": 0, "quota": 8, "limit": 8}, format="json", HTTP_IF_MATCH=etag_b)
    assert lost.status_code == 412
    assert Quota.objects.filter(queue__name="alpha").values_list("guarantee", "quota", "limit").get() == (2, 12, 24)
    assert b.put(url, {"guarantee": 0, "quota": 8, "limit": 8}, format="json").status_code == 428
    fresh = b.get(url)["ETag"]
    partial = b.patch(url, {"quota": 10}, format="json", HTTP_IF_MATCH=fresh)
    assert partial.status_code == 200 and (partial.json()["guarantee"], partial.json()["quota"]) == (2, 10)
    change = events("quota_changed")[-1]
    assert change.actor.username == "admin2" and change.data["old"] == [2, 12, 24]


def test_quota_errors_name_the_field_the_request_changed(admin):
    """PATCH {"limit": 1} under quota 16: the broken rule (quota <= limit) is reported on `limit`, the only
    value the request sent; {"quota": 40} above limit 32 on `quota`; a PUT of all three keeps `quota`."""
    from gpuplatform.models import Quota

    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='alpha').pk}/"
    r = admin.patch(url, {"limit": 1}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 400 and list(r.json()) == ["limit"], r.content
    assert "must not exceed limit (1)" in r.json()["limit"][0]
    r = admin.patch(url, {"quota": 40}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 400 and list(r.json()) == ["quota"], r.content
    r = admin.patch(url, {"guarantee": 20}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 400 and list(r.json()) == ["guarantee"], r.content
    r = admin.patch(url, {"quota": 2}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 400 and list(r.json()) == ["quota"], r.content  # below guarantee 4: quota changed
    r = admin.put(url, {"guarantee": 0, "quota": 8, "limit": 4}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])
    assert r.status_code == 400 and list(r.json()) == ["quota"], r.content


def test_quota_create_and_filters(admin):
    unknown_flavor = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "nope", "guarantee": 0, "quota": 2},
                                format="json")
    assert unknown_flavor.status_code == 400, unknown_flavor.content
    assert list(unknown_flavor.json()) == ["flavor"] and "unknown flavor 'nope'" in unknown_flavor.json()["flavor"][0]
    assert "H100" in unknown_flavor.json()["flavor"][0]  # the flavors the cluster has
    from gpuplatform.models import Node

    Node.objects.create(name="a100-0", flavor="A100", gpu_count=8)  # now A100 is a flavor of this cluster
    above = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "A100", "guarantee": 0, "quota": 2}, format="json")
    assert above.status_code == 400 and "parent queue's quota (0) for A100" in above.json()["quota"][0]
    r = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "A100", "guarantee": 0, "quota": 0}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["limit"] is None
    again = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "A100", "quota": 3}, format="json")
    assert again.status_code == 400 and "If-Match" in again.json()["flavor"][0]
    unknown = admin.post("/api/v1/quotas/", {"queue": "nope", "flavor": "A100"}, format="json")
    assert unknown.status_code == 400 and "queue" in unknown.json()
    assert [q["flavor"] for q in admin.get("/api/v1/quotas/?queue=alpha").json()["results"]] == ["A100", "H100"]


# --- domains and nodes ------------------------------------------------------------------------------

def test_domains_list_and_tree(admin):
    rows = admin.get("/api/v1/domains/?tier=1").json()["results"]
    assert [(d["name"], d["parent"], d["node_count"]) for d in rows] == [("nvl-a1", "leaf-a", 2), ("nvl-a2", "leaf-a", 2)]
    tree = admin.get("/api/v1/domains/tree/").json()
    assert tree[0]["name"] == "leaf-a" and tree[0]["children"][1]["nodes"] == ["n2", "n3"]


def test_node_cordon_drain_uncordon(admin):
    r = admin.post("/api/v1/nodes/n0/cordon/", {"reason": "bad fan"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "cordoned"
    twice = admin.post("/api/v1/nodes/n0/cordon/", {}, format="json")
    assert twice.status_code == 400 and "cannot cordon" in twice.json()["state"][0]
    assert admin.post("/api/v1/nodes/n0/drain/", {}, format="json").json()["state"] == "draining"
    assert admin.post("/api/v1/nodes/n0/uncordon/", {}, format="json").json()["state"] == "ready"
    assert admin.post("/api/v1/nodes/nope/cordon/", {}, format="json").status_code == 404
    assert [e.kind for e in events("cordoned")] == ["cordoned"] and events("cordoned")[0].data["reason"] == "bad fan"
    assert [n["name"] for n in admin.get("/api/v1/nodes/?state=ready&domain=nvl-a1").json()["results"]] == ["n0", "n1"]


def test_agent_register_and_heartbeat_bodies(client_for):
    """The node agent's own bodies (agent/client.py) are accepted as they are."""
    from datetime import datetime, timezone

    from gpuplatform.agent.client import heartbeat_body, register_body
    from gpuplatform.agent.inventory import GpuInventory

    agent = client_for("agent")
    fields = GpuInventory.__dataclass_fields__
    gpu = GpuInventory(**{k: v for k, v in {
        "index": 0, "uuid": "GPU-1", "model": "NVIDIA H200", "memory_mib": 143771, "pci_bus_id": "0:6.0",
        "numa_node": 0}.items() if k in fields})
    r = agent.post("/api/v1/nodes/register/", register_body("gpu-node-01", [gpu], cpu_milli=16000, memory_mib=257000),
                   format="json")
    assert r.status_code == 201, r.content
    node = r.json()
    assert (node["name"], node["flavor"], node["gpu_count"]) == ("gpu-node-01", "H200", 1)
    assert node["labels"]["nvidia.com/gpu.count"] == "1"
    body = heartbeat_body([gpu], at=datetime(2026, 1, 1, 12, tzinfo=timezone.utc))
    body["gpus"][0].update(health="unhealthy", health_reason="XID 79")
    beat = agent.post("/api/v1/nodes/gpu-node-01/heartbeat/", body, format="json")
    assert beat.status_code == 200, beat.content
    # health is judged by the server's receive time; the node's own clock (11 months behind) is only its offset
    received = datetime.fromisoformat(beat.json()["last_heartbeat"])
    assert abs((received - datetime.now(timezone.utc)).total_seconds()) < 60
    assert beat.json()["clock_offset_seconds"] < -86400
    assert (beat.json()["executor"], beat.json()["address"]) == ("simulated", "")  # inventory only: runs nothing
    assert beat.json()["gpus"][0]["health"] == "unhealthy"
    assert agent.post("/api/v1/nodes/unknown/heartbeat/", body, format="json").status_code == 404
    wrong_gpu = agent.post("/api/v1/nodes/gpu-node-01/heartbeat/", {"gpus": [{"index": 5}]}, format="json")
    assert wrong_gpu.status_code == 400 and "gpus[0].index" in wrong_gpu.json()
    empty = agent.post("/api/v1/nodes/register/", {"name": "", "flavor": "", "gpus": []}, format="json")
    assert empty.status_code == 400 and "name" in empty.json()


def test_a_gpu_uuid_belongs_to_one_node(client_for):
    """New-user trial 15, F4: a second node registering a GPU UUID another node holds (a cloned image, a second
    agent on one host under another name) was a 201, and so was one request listing a UUID twice: two jobs could be
    bound to one physical GPU. Both are a 400 naming gpus[i].uuid, and nothing is stored; the node itself
    re-registers its own GPUs as before."""
    from gpuplatform.models import Gpu, Node

    agent = client_for("agent")
    body = {"name": "holder", "flavor": "H200", "gpus": [{"index": 0, "uuid": "GPU-aaa"}, {"index": 1, "uuid": "GPU-bbb"}]}
    assert agent.post("/api/v1/nodes/register/", body, format="json").status_code == 201
    assert agent.post("/api/v1/nodes/register/", body, format="json").status_code == 201  # its own again: fine
    clone = agent.post("/api/v1/nodes/register/", {"name": "clone", "flavor": "H200", "gpus": [
        {"index": 0, "uuid": "GPU-ccc"}, {"index": 1, "uuid": "GPU-bbb"}]}, format="json")
    assert clone.status_code == 400 and clone.json() == {"gpus[1].uuid": [
        "uuid GPU-bbb is GPU 1 of node holder: a GPU belongs to one node (re-register holder without it, or delete "
        "holder, first)"]}, clone.content
    twice = agent.post("/api/v1/nodes/register/", {"name": "twice", "flavor": "H200", "gpus": [
        {"index": 0, "uuid": "GPU-dup"}, {"index": 1, "uuid": "GPU-dup"}]}, format="json")
    assert twice.status_code == 400 and "given twice" in twice.json()["gpus[1].uuid"][0], twice.content
    assert not Node.objects.filter(name__in=("clone", "twice")).exists()
    assert Gpu.objects.filter(uuid="GPU-bbb").count() == 1


# --- jobs -------------------------------------------------------------------------------------------

def test_job_submit_position_list_detail(client_for):
    from gpuplatform.models import Node
    from gpuplatform.scheduling import store

    member = client_for("member")
    first = member.post("/api/v1/jobs/", job_body("first", tasks=2, gpus=8), format="json")
    assert first.status_code == 201, first.content
    j = first.json()
    assert (j["team"], j["queue"], j["submitter"], j["state"], j["gpus"], j["position"]) == \
        ("alpha", "alpha", "mike", "pending", 16, None)  # no cycle has placed it in the order yet
    refused = member.post("/api/v1/jobs/", job_body("urgent", priority=10), format="json")
    assert refused.status_code == 400 and "team admin" in refused.json()["priority"][0]  # a member: 0 or lower
    urgent = client_for("team_admin").post("/api/v1/jobs/", job_body("urgent", priority=10), format="json").json()
    Node.objects.update(state="cordoned")  # nothing starts: the cycle only orders the pending jobs
    store.run_cycle_once()
    assert member.get(f"/api/v1/jobs/{urgent['id']}/").json()["position"] == 1
    assert member.get(f"/api/v1/jobs/{j['id']}/").json()["position"] == 2
    listed = member.get("/api/v1/jobs/?state=pending&queue=alpha&ordering=submitted_at").json()
    assert [r["name"] for r in listed["results"]] == ["first", "urgent"]
    first_page = member.get("/api/v1/jobs/?limit=1").json()
    assert member.get(first_page["next"]).json()["results"][0]["name"] == "first"  # a keyset cursor link
    assert member.get("/api/v1/jobs/?limit=1&offset=1").status_code == 400  # offsets shift under inserts
    multi = member.post("/api/v1/jobs/", {"name": "two-roles", "queue": "alpha", "topology_mode": "hard", "highest_tier": 1,
                                          "command": "sleep 3600", "roles": [{"name": "ps", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 1000},
                                                    {"name": "worker", "tasks": 4, "gpus_per_task": 2, "min_available": 2}]},
                        format="json")
    assert multi.status_code == 201, multi.content
    assert [(r["name"], r["min_available"]) for r in multi.json()["roles"]] == [("ps", 1), ("worker", 2)]


def test_job_runs_then_cancel_and_priority(client_for):
    from gpuplatform.scheduling import store

    member, team_admin = client_for("member"), client_for("team_admin")
    job = member.post("/api/v1/jobs/", job_body("train", tasks=2, gpus=8), format="json").json()
    big = member.post("/api/v1/jobs/", job_body("waits", tasks=4, gpus=8), format="json").json()
    store.run_cycle_once()
    running = member.get(f"/api/v1/jobs/{job['id']}/").json()
    assert running["state"] == "running" and running["position"] is None and len(running["nodes"]) == 2
    waiting = member.get(f"/api/v1/jobs/{big['id']}/").json()
    assert waiting["state"] == "pending" and waiting["pending_reason"] and waiting["position"] == 1
    assert team_admin.patch(f"/api/v1/jobs/{big['id']}/", {"priority": 7}, format="json").json()["priority"] == 7
    assert events("priority_changed")[0].actor.username == "alice"
    cancelled = member.post(f"/api/v1/jobs/{job['id']}/cancel/", {"reason": "done early"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = member.post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert again.status_code == 400 and "state" in again.json()
    late = team_admin.patch(f"/api/v1/jobs/{job['id']}/", {"priority": 1}, format="json")
    assert late.status_code == 400 and "state" in late.json()
    assert member.put(f"/api/v1/jobs/{job['id']}/", {}, format="json").status_code == 405
    assert member.delete(f"/api/v1/jobs/{job['id']}/").status_code == 405


def test_job_submit_team_resolution(client_for, users, admin):
    from gpuplatform import services

    services.create_queue("shared", parent=None)
    member = client_for("member")
    r = member.post("/api/v1/jobs/", job_body(queue="shared"), format="json")  # mike's only team: alpha
    assert r.status_code == 201 and r.json()["team"] == "alpha"
    r = admin.post("/api/v1/jobs/", job_body(queue="shared"), format="json")  # staff in no team
    assert r.status_code == 400 and "team" in r.json()
    r = admin.post("/api/v1/jobs/", job_body(queue="root", team="alpha"), format="json")
    assert r.status_code == 400 and "not a leaf" in r.json()["queue"][0]
    r = member.post("/api/v1/jobs/", {"queue": "alpha"}, format="json")
    assert r.status_code == 400 and {"name", "roles"} <= set(r.json())


# --- events, cycles, cluster metrics ----------------------------------------------------------------

def test_events_cycles_and_cluster_metrics(admin, jobs):
    from gpuplatform.scheduling import store

    store.run_cycle_once()
    kinds = admin.get("/api/v1/events/?kind=admitted").json()
    assert kinds["count"] == 2 and {e["job"] for e in kinds["results"]} == {jobs["own"].pk, jobs["other"].pk}
    mine = admin.get(f"/api/v1/events/?job={jobs['own'].pk}&kind__in=submitted,admitted&ordering=id").json()
    assert [e["kind"] for e in mine["results"]] == ["submitted", "admitted"]
    assert admin.get("/api/v1/events/?since=2999-01-01T00:00:00Z").json()["count"] == 0
    cycle = admin.get("/api/v1/scheduler-cycles/1/").json()
    assert cycle["binds"] == 2 and "allocate" in cycle["timings"] and cycle["error"] == ""
    assert admin.get("/api/v1/scheduler-cycles/?failed=true").json()["count"] == 0
    series = admin.get("/api/v1/cluster-metrics/").json()
    assert series["count"] == 1 and series["results"][0]["allocated_gpus"] == 4
    current = admin.get("/api/v1/cluster-metrics/current/").json()
    assert current["cycle"]["number"] == 1 and current["sample"]["schedulable_gpus"] == 32
    assert {q["queue"]: q["used"] for q in current["queues"]} == {"alpha": 2, "beta": 2, "root": 4}


# --- auth styles, throttling, schema ----------------------------------------------------------------

def test_anonymous_gets_401_with_token_challenge(cluster):
    r = APIClient().get("/api/v1/jobs/")
    assert r.status_code == 401 and r["WWW-Authenticate"] == "Token"


def test_token_from_password_and_session_auth_with_csrf(users):
    r = APIClient().post("/api/v1/auth-token/", {"username": "mike", "password": "pw"}, format="json")
    assert r.status_code == 200 and r.json()["token"]
    browser = APIClient(enforce_csrf_checks=True)
    assert browser.login(username="mike", password="pw")
    assert browser.get("/api/v1/me/").json()["teams"] == [{"team": "alpha", "role": "member"}]
    refused = browser.post("/api/v1/jobs/", job_body(), format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]


def test_job_submission_is_throttled_per_user(client_for, monkeypatch):
    from gpuplatform.api.views.jobs import JobSubmitThrottle

    monkeypatch.setattr(JobSubmitThrottle, "rate", "3/min", raising=False)
    member, other_user = client_for("member"), client_for("team_admin")
    codes = [member.post("/api/v1/jobs/", job_body(f"j{i}"), format="json").status_code for i in range(4)]
    assert codes == [201, 201, 201, 429]
    assert member.get("/api/v1/jobs/").status_code == 200  # reads are not throttled
    assert other_user.post("/api/v1/jobs/", job_body("hers"), format="json").status_code == 201


def test_schema_and_docs(admin):
    schema = admin.get("/api/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for p in ("/api/v1/jobs/", "/api/v1/jobs/{id}/cancel/", "/api/v1/nodes/{name}/cordon/", "/api/v1/quotas/{id}/",
              "/api/v1/queues/tree/", "/api/v1/scheduler-cycles/{number}/", "/api/v1/cluster-metrics/current/"):
        assert p in paths, p
    assert any(p["name"] == "If-Match" for p in paths["/api/v1/quotas/{id}/"]["put"]["parameters"])
    docs = admin.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower() and b"cdn" not in docs.content.lower()
    redoc = admin.get("/api/redoc/")  # offline too: ReDoc from our static files, no web fonts (new-user trial 3)
    assert redoc.status_code == 200 and b"redoc" in redoc.content.lower()
    assert b"https://" not in redoc.content and b"<title>" in redoc.content


# --- Prometheus -------------------------------------------------------------------------------------

def test_metrics_exposition_parses_with_operator_names(jobs, client_for):
    from prometheus_client.parser import text_string_to_metric_families

    from gpuplatform.scheduling import store

    store.run_cycle_once()
    r = APIClient().get("/metrics")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.content.decode())}
    for name in ("gpuplatform_queue_allocated_gpus", "gpuplatform_queue_quota_gpus", "gpuplatform_queue_pending_gpus",
                 "gpuplatform_queue_fair_share_gpus", "gpuplatform_pending_jobs", "gpuplatform_admission_wait_seconds",
                 "gpuplatform_preemptions", "gpuplatform_cycle_duration_seconds", "gpuplatform_allocation_rate",
                 "gpuplatform_fragmentation_rate", "gpuplatform_largest_runnable_job_gpus",
                 "gpuplatform_e2e_cycle_duration_seconds", "gpuplatform_cycles"):
        assert name in families, name

    def value(name, **labels):
        return next(s.value for s in families[name.removesuffix("_total")].samples if s.name == name and labels.items() <= s.labels.items())

    assert value("gpuplatform_queue_allocated_gpus", queue="alpha") == 2
    assert value("gpuplatform_queue_quota_gpus", queue="alpha") == 16
    assert value("gpuplatform_pending_jobs", queue="alpha") == 0
    assert value("gpuplatform_running_jobs", queue="beta") == 1
    assert value("gpuplatform_allocation_rate") == pytest.approx(4 / 32)
    assert {s.labels["action"] for s in families["gpuplatform_cycle_duration_seconds"].samples} >= {"allocate", "e2e"}
    waits = [s for s in families["gpuplatform_admission_wait_seconds"].samples
             if s.name.endswith("_count") and s.labels["queue"] == "alpha"]
    assert waits[0].value == 1
    assert value("gpuplatform_cycles_total") == 1


def test_metrics_bearer_token(cluster, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert APIClient().get("/metrics").status_code == 401
    assert APIClient().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


# --- regressions found by the schema fuzzer ---------------------------------------------------------

@pytest.mark.parametrize("value", ["1371-06-12T06:46:53.30-23:25", "0001-01-01T00:00:00+23:00", "2026-01-01T00:00:00Z"])
def test_odd_utc_offsets_are_a_400_or_a_result_never_a_500(admin, value):
    """PostgreSQL refuses UTC offsets beyond +-15:59; date-times are normalised to UTC first."""
    for url in ("/api/v1/scheduler-cycles/", "/api/v1/cluster-metrics/", "/api/v1/events/"):
        assert admin.get(url, {"since": value}).status_code in (200, 400)
    assert admin.get("/api/v1/jobs/", {"submitted_after": value}).status_code in (200, 400)
    beat = admin.post("/api/v1/nodes/n0/heartbeat/", {"time": value, "gpus": []}, format="json")
    assert beat.status_code in (200, 400), beat.content
