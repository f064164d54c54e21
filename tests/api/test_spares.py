"""Hot spare nodes on the live platform (scheduling/spares.py): an admin marks a spare over REST, the
engine places only interruptible jobs on it, and a gang requeued because its node was lost restarts on the
spare in the same failure-detection pass (not at the next cycle), stopping the interruptible jobs there at
once, the failed node taking its place in the pool."""
from __future__ import annotations

from datetime import timedelta

import pytest

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
    msg = r.json()["spare"][0]
    assert r.status_code == 400 and "not interruptible" in msg and "alpha-job" in msg and "drain it first" in msg
    r = admin.post("/api/v1/nodes/n3/spare/", {"spare": True}, format="json")
    assert r.status_code == 200 and r.json()["spare"] is True
    assert Event.objects.get(kind="node_spare", node__name="n3").data == {"spare": True}
    snap, _ = build_snapshot(T0.timestamp())
    n3 = {n.name: n for n in snap.nodes}["n3"]
    assert n3.spare and n3.state == "ready" and not n3.schedulable  # only interruptible jobs go there
    assert admin.post("/api/v1/nodes/n3/spare/", {"spare": False}, format="json").json()["spare"] is False
    snap, _ = build_snapshot(T0.timestamp())
    assert {n.name: n.schedulable for n in snap.nodes}["n3"] is True


def test_interruptible_over_rest(admin):
    body = {"name": "scav", "queue": "alpha", "roles": [{"tasks": 1, "gpus_per_task": 1}], "command": ["true"]}
    r = admin.post("/api/v1/jobs/", {**body, "interruptible": True}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["interruptible"] is True and Job.objects.get(pk=r.json()["id"]).interruptible is True
    assert admin.get(f"/api/v1/jobs/{r.json()['id']}/").json()["interruptible"] is True
    plain = admin.post("/api/v1/jobs/", {**body, "name": "plain"}, format="json")
    assert plain.status_code == 201 and plain.json()["interruptible"] is False  # the default
    r = admin.post("/api/v1/jobs/", {**body, "interruptible": True, "preemptible": False}, format="json")
    assert r.status_code == 400 and "must be preemptible" in str(r.json()["interruptible"])
    r = admin.post("/api/v1/jobs/", {**body, "interruptible": "sometimes"}, format="json")
    assert r.status_code == 400 and "interruptible" in r.json()


def test_the_service_refuses_a_bad_interruptible_flag(jobs):
    from gpuplatform import services
    from gpuplatform.models import Queue

    team = Queue.objects.get(name="alpha").team
    for value, preemptible in (("yes", True), (True, False)):
        with pytest.raises(services.ValidationError) as exc:
            services.submit_job(command=["true"], team=team, queue="alpha", name="x", preemptible=preemptible,
                                roles=[{"tasks": 1, "gpus_per_task": 1}], interruptible=value)
        assert set(exc.value.errors) == {"interruptible"}


def test_a_node_running_only_interruptible_jobs_may_become_a_spare(jobs, at):  # noqa: F811
    from gpuplatform import services

    Job.objects.filter(pk=jobs["own"].pk).update(interruptible=True)
    bind(jobs["own"], "n2", (0, 1), T0)
    assert services.set_spare("n2", True).spare is True
    assert Job.objects.get(pk=jobs["own"].pk).state == "running"  # it runs on


def test_the_cycle_places_only_the_interruptible_job_on_the_spare(jobs, at):  # noqa: F811
    """Only n3, a spare, can take work: beta's job (not interruptible) waits, alpha's interruptible job runs
    there; the admission says so (rule on_spare)."""
    from gpuplatform import services
    from gpuplatform.scheduling.store import run_cycle_once

    services.set_spare("n3", True)
    Node.objects.filter(name__in=("n0", "n1", "n2")).update(state="cordoned")
    Job.objects.filter(pk=jobs["own"].pk).update(interruptible=True)
    run_cycle_once(clock=at(5))
    own, other = Job.objects.get(pk=jobs["own"].pk), Job.objects.get(pk=jobs["other"].pk)
    assert own.state in ("admitted", "running") and other.state == "pending"
    assert set(Allocation.objects.filter(job=own).values_list("gpu__node__name", flat=True)) == {"n3"}
    assert Event.objects.get(kind="admitted", job=own).data["rule"] == "on_spare"


def test_the_restart_on_the_spare_stops_its_interruptible_job_at_once(jobs, at):  # noqa: F811
    """beta's interruptible job runs on the spare n3 GPUs 0-1; alpha's gang on n0 GPUs 0-1 loses n0: at
    detection beta's job is stopped at once (requeued whole, no backoff, not a fault) and alpha's gang runs
    on n3 GPUs 0-1 in the same pass."""
    from gpuplatform import services
    from gpuplatform.models import Attempt

    services.set_spare("n3", True)
    scav = jobs["other"]
    Job.objects.filter(pk=scav.pk).update(interruptible=True)
    bind(scav, "n3", (0, 1), T0)
    bind(jobs["own"], "n0", (0, 1), T0)
    Node.objects.filter(name="n0").update(last_heartbeat=T0 - timedelta(minutes=10))
    now = at(60)
    report = failures.detect_failures(now)
    assert report.requeued == [jobs["own"].pk]
    own, scav = Job.objects.get(pk=jobs["own"].pk), Job.objects.get(pk=scav.pk)
    assert own.state == "running"
    live = set(Allocation.objects.filter(job=own, released_at__isnull=True).values_list("gpu__node__name", "gpu__index"))
    assert live == {("n3", 0), ("n3", 1)}
    assert scav.state == "pending" and scav.attempts == 1 and scav.not_before is None
    assert not Allocation.objects.filter(job=scav, released_at__isnull=True).exists()
    stop = Event.objects.get(kind="stopped_for_spare", job=scav)
    assert stop.time == now and stop.data["for_job"] == own.pk and stop.data["failed"] == ["n0"]
    assert "stopped at once" in stop.message
    assert Event.objects.get(kind="restarted_on_spare", job=own).data["stopped"] == [scav.pk]
    attempt = Attempt.objects.get(job=scav, number=0)
    assert attempt.outcome == "requeued" and attempt.fault_at is None  # stopped, not failed


def test_a_job_that_is_not_interruptible_on_the_spare_is_never_stopped(jobs, at):  # noqa: F811
    """A spare running a job that is not interruptible (it ran there before the node was a spare: set in
    the database directly) has no room: the gang waits for the cycle and that job runs on."""
    bind(jobs["other"], "n3", (0, 1), T0)
    Node.objects.filter(name="n3").update(spare=True)
    bind(jobs["own"], "n0", (0, 1), T0)
    Node.objects.filter(name="n0").update(last_heartbeat=T0 - timedelta(minutes=10))
    failures.detect_failures(at(60))
    assert Job.objects.get(pk=jobs["own"].pk).state == "pending"
    assert Job.objects.get(pk=jobs["other"].pk).state == "running"
    assert not Event.objects.filter(kind="stopped_for_spare").exists()


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
    requeued = Event.objects.get(kind="requeued_after_failure", job=job)  # newuser2 item 9: no retry time
    assert "retries at" not in requeued.message and requeued.message.endswith("restarted at once on spare n3")
    assert requeued.data["not_before"] is None and job.not_before is None
    from gpuplatform.models import Attempt

    # the interruption's recovery: running again at detection, counted from the fault (n0 was silent before the
    # gang was bound at T0: the attempt's start), not from the detection (new-user trial 19, F5)
    a = Attempt.objects.get(job=job, number=0)
    assert (a.outcome, a.fault_at, a.recovered_at, a.recovery_seconds) == ("requeued", T0, now, 60.0)


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
    assert "retries at" in Event.objects.get(kind="requeued_after_failure", job=job).message  # it waits


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
    assert Event.objects.get(kind="requeued_after_failure", job=job).message.endswith("restarted at once on spare n3")
