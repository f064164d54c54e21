"""Hot spare nodes on the live platform (scheduling/spares.py): an admin marks a spare over REST, the
engine never places work on it, and a gang requeued because its node was lost restarts on the spare in
the same failure-detection pass (not at the next cycle), the failed node taking its place in the pool."""
from __future__ import annotations

from datetime import timedelta

from gpuplatform.models import Allocation, Event, Job, Node
from gpuplatform.scheduling import failures, spares
from gpuplatform.scheduling.store import build_snapshot
from tests.api.test_telemetry_api import T0, at, bind  # noqa: F401  (fixture)


def test_spare_over_rest_is_admin_only_and_refuses_a_busy_node(admin, client_for, jobs, at):  # noqa: F811
    r = client_for("member").post("/api/v1/nodes/n3/spare/", {"spare": True}, format="json")
    assert r.status_code == 403
    r = admin.post("/api/v1/nodes/n3/spare/", {"spare": "maybe"}, format="json")
    assert r.status_code == 400 and "spare" in r.json()
    bind(jobs["own"], "n2", (0, 1), T0)
    r = admin.post("/api/v1/nodes/n2/spare/", {"spare": True}, format="json")
    assert r.status_code == 400 and "runs tasks" in r.json()["spare"][0]
    r = admin.post("/api/v1/nodes/n3/spare/", {"spare": True}, format="json")
    assert r.status_code == 200 and r.json()["spare"] is True
    assert Event.objects.get(kind="node_spare", node__name="n3").data == {"spare": True}
    snap, _ = build_snapshot(T0.timestamp())
    assert {n.name: n.state for n in snap.nodes}["n3"] == "cordoned"  # the engine places nothing there
    assert admin.post("/api/v1/nodes/n3/spare/", {"spare": False}, format="json").json()["spare"] is False
    snap, _ = build_snapshot(T0.timestamp())
    assert {n.name: n.state for n in snap.nodes}["n3"] == "ready"


def test_a_gang_whose_node_is_lost_restarts_on_the_spare_in_the_same_pass(jobs, at):  # noqa: F811
    """alpha's gang runs on n0 GPUs 0-1; n3 (another NVLink domain of the same leaf) is a spare. n0 stops
    heartbeating: detection fails it and requeues the gang, which is bound at once on n3 GPUs 0-1."""
    from gpuplatform import services

    services.set_spare("n3", True)
    bind(jobs["own"], "n0", (0, 1), T0)
    assert spares.placement_of(jobs["own"].pk) == [("worker", 0, "n0", (0, 1))]
    Node.objects.filter(name="n0").update(last_heartbeat=T0 - timedelta(minutes=10))
    now = at(60)
    report = failures.detect_failures(now)
    assert report.failed_nodes == ["n0"] and report.requeued == [jobs["own"].pk]
    job = Job.objects.get(pk=jobs["own"].pk)
    assert job.state == "running" and job.attempts == 1  # bound again in the same pass: no wait in the queue
    live = set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name", "gpu__index"))
    assert live == {("n3", 0), ("n3", 1)}
    assert dict(Node.objects.filter(name__in=("n0", "n3")).values_list("name", "spare")) == {"n0": True, "n3": False}
    ev = Event.objects.get(kind="restarted_on_spare", job=job)
    assert ev.data["swap"] == {"n0": "n3"} and ev.time == now
    from gpuplatform.models import Attempt

    a = Attempt.objects.get(job=job, number=0)  # the interruption's recovery: running again at detection
    assert (a.outcome, a.recovered_at, a.recovery_seconds) == ("requeued", now, 0.0)


def test_without_a_fitting_spare_the_gang_waits_for_the_cycle(jobs, at):  # noqa: F811
    from gpuplatform import services
    from gpuplatform.models import Gpu

    services.set_spare("n3", True)
    Gpu.objects.filter(node__name="n3", index=1).update(health="unhealthy")  # the spare lacks GPU 1
    bind(jobs["own"], "n0", (0, 1), T0)
    Node.objects.filter(name="n0").update(last_heartbeat=T0 - timedelta(minutes=10))
    failures.detect_failures(at(60))
    job = Job.objects.get(pk=jobs["own"].pk)
    assert job.state == "pending" and not Event.objects.filter(kind="restarted_on_spare").exists()
    assert Node.objects.get(name="n3").spare is True


def test_a_fatal_xid_in_a_heartbeat_restarts_the_gang_on_the_spare_in_that_request(jobs, at):  # noqa: F811
    from gpuplatform import services

    services.set_spare("n3", True)
    bind(jobs["own"], "n0", (0, 1), T0)
    services.record_heartbeat("n0", gpus=[{"index": 1, "health": "healthy", "xids": [79]}], at=at(30))
    job = Job.objects.get(pk=jobs["own"].pk)
    assert job.state == "running"  # requeued by the xid-fatal rule and bound on the spare, same request
    live = set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name", "gpu__index"))
    assert live == {("n3", 0), ("n3", 1)}
    n0 = Node.objects.get(name="n0")
    assert n0.state == "cordoned" and n0.spare is True  # out for repair; a spare once it is back
    assert Event.objects.get(kind="restarted_on_spare", job=job).data["swap"] == {"n0": "n3"}
