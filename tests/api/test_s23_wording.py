"""New-user trial 23, wording: an Event said "quota of demo/H200: 0/3/None"; errors listed their choices as a Python
list ("state must be one of ['open', 'closing', 'closed', 'draining']"); the jobs page read "estimated no estimate:
can never start: ..."; a member reading a node's assignments was told only agents "may report nodes"."""
from __future__ import annotations

from gpuplatform import services
from gpuplatform.models import Event, Job, Queue


def test_a_quota_change_event_names_its_numbers(users):
    beta = Queue.objects.get(name="beta")
    services.set_quota(beta, "H100", 0, 3, None, actor=users["staff"])
    services.set_quota(beta, "H100", 1, 3, 8, actor=users["staff"])
    said = list(Event.objects.filter(kind="quota_changed").order_by("id").values_list("message", flat=True))
    assert said[-2:] == ["quota of beta/H100: guarantee 0, quota 3, no limit",
                         "quota of beta/H100: guarantee 1, quota 3, limit 8"]


def test_a_queue_state_and_a_gpu_health_list_their_choices_in_words(admin, client_for):
    etag = admin.get("/api/v1/queues/alpha/")["ETag"]
    r = admin.patch("/api/v1/queues/alpha/", {"state": "bogus"}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400, r.content
    assert r.json()["state"] == ["state must be one of " + ", ".join(Queue.State.values)]
    assert "[" not in r.json()["state"][0] and "open, closing, closed" in r.json()["state"][0]
    agent = client_for("agent")
    r = agent.post("/api/v1/nodes/n0/heartbeat/", {"gpus": [{"index": 0, "health": "broken"}]}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["gpus[0].health"] == ["health must be one of healthy, unhealthy"]


def test_a_member_reading_a_nodes_assignments_is_told_it_is_a_read(client_for):
    r = client_for("member").get("/api/v1/nodes/n0/assignments/")
    assert r.status_code == 403
    assert r.json()["detail"] == "only platform admins and node agents may read a node's assignments"
    r = client_for("member").post("/api/v1/nodes/n0/heartbeat/", {"gpus": []}, format="json")
    assert r.status_code == 403 and r.json()["detail"] == "only platform admins and node agents may report nodes"


def test_the_jobs_list_says_estimated_before_a_time_only(client, users, jobs):
    from datetime import timedelta

    from gpuplatform import clock

    Job.objects.filter(pk=jobs["own"].pk).update(estimate_note="can never start: needs 64 GPUs, the cluster has 32")
    Job.objects.filter(pk=jobs["other"].pk).update(estimated_start=clock.now() + timedelta(hours=2),
                                                    estimated_start_p90=clock.now() + timedelta(hours=2))
    client.force_login(users["staff"])
    listing = client.get("/jobs/").content.decode()
    assert "no estimate: can never start: needs 64 GPUs" in listing
    assert "estimated no estimate" not in listing
    assert "estimated in about 2 h" in listing
