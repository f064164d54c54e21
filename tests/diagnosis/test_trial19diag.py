"""New-user trial 19, diagnosis findings (docs/diagnosis.md), at the database level: no agent process, reports applied
with execution.report_task_event, heartbeats with services.record_heartbeat, failure detection with detect_failures
at explicit cluster times.

- F4: a lost node is the node's failure on /failures/ (platform:node_lost names it), a user error, a user's OOM or an
  unknown cause is not charged to the node where the task ran.
- F5: recovery runs from the fault: a lost node's last heartbeat (not the requeue, HEARTBEAT_TIMEOUT +
  NODE_FAILURE_GRACE later), the moment a time limit was reached (not the SIGKILL after the stop's grace).
- F16: a gang whose task fails while others are still bound on a node that is not_ready (or silent) is requeued whole
  as a lost node (platform:node_lost naming that node), without spending a restart; it ended `failed`, `unknown` on
  the healthy node.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Attempt, Event, Job
from gpuplatform.scheduling.failures import detect_failures
from tests.platform.conftest import alpha, cluster, submit  # noqa: F401  (fixtures)
from tests.platform.test_execution import EIGHT, agents, at, bind, live, report, start_all, tasks_of  # noqa: F401


# --- F4 ------------------------------------------------------------------------------------------------------

def test_a_lost_node_is_named_by_the_node_lost_diagnosis(submit, agents):
    """Trial 19, F4: the gang on n0 and n1, n0 silent past the heartbeat-loss rule (60 + 120 s): the attempt's
    diagnosis is platform:node_lost naming n0 (it read node None), with its last heartbeat as evidence."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    for name in ("n0", "n1"):
        services.record_heartbeat(name, gpus=[], at=at(5))
    services.record_heartbeat("n1", gpus=[], at=at(170))  # n1 still beats; n0 went silent at 5
    assert detect_failures(at(190)).stopping == [job.pk]  # worker[1] on n1 still runs: stopped first (trial 20, F10)
    assert report(tasks_of(job)[1], "exited", 191, signal=15) == (True, "")
    assert Job.objects.get(pk=job.pk).state == "pending"
    a = Attempt.objects.get(job=job, number=0)
    d = a.diagnosis
    assert (a.failed, a.outcome, a.category, d["rule"]) == (True, "requeued", "platform", "platform:node_lost")
    assert d["node"] == "n0" and "n0" in d["summary"], d
    assert any(e["text"].startswith("n0: last heartbeat at") for e in d["evidence"]), d["evidence"]


def row(category: str, node: str | None, *, failed: bool = True) -> dict:
    return {"job_id": 1, "team": "t", "ended_at": datetime(2026, 12, 3, 16, 30, tzinfo=tz.utc), "failed": failed,
            "category": category, "gpu_seconds": 3600.0, "node": node, "node_flavor": "H200", "recovery_seconds": None}


def test_the_nodes_table_counts_only_diagnoses_that_are_the_nodes_fault():
    """Trial 19, F4: /failures/ listed `local-0 | 3 | user_error 2, cuda_oom 1` (a bad command, a bad working directory,
    a user's OOM) and not the node lost. Only gpu_hardware, nccl_network and a platform diagnosis naming a node (a
    lost node) point at the node."""
    from frontend.failure_figures import failure_payload

    rows = [row("user_error", "local-0"), row("user_error", "local-0"), row("cuda_oom", "local-0"),
            row("unknown", "local-0"), row("host_oom", "local-0"), row("nccl_timeout", "local-0"),
            row("platform", "local-1"), row("gpu_hardware", "local-1"), row("nccl_network", "local-2"),
            row("platform", None), row("gpu_hardware", "local-3", failed=False)]
    p = failure_payload(rows, nodes_by_flavor={"H200": 4}, now=datetime(2026, 12, 3, 17, 0, tzinfo=tz.utc))
    assert [(n["node"], n["failed_attempts"], n["hardware_or_network"], n["categories"]) for n in p["nodes"]] == [
        ("local-1", 2, 1, "platform 1, gpu_hardware 1"), ("local-2", 1, 1, "nccl_network 1")]
    assert p["summary"]["failed_attempts"] == 10  # every failed attempt still counts on the page


def test_the_failures_page_charges_the_lost_node_not_the_user_errors(submit, agents, django_user_model, monkeypatch):
    """End to end: a user error on n1 (exit 127: command not found) and a node loss of n0: the page's node table lists
    n0 (platform 1) and not n1."""
    from django.test import Client

    from gpuplatform import clock
    from tests.platform.test_execution import report, tasks_of

    monkeypatch.setattr(clock, "_source", lambda: at(300))  # the page shows the last 30 days of the cluster clock

    bad = submit("bad", tasks=1, gpus=8)
    bind(bad, ("n1", EIGHT))
    start_all(bad)
    assert report(tasks_of(bad)[0], "exited", 3, exit_code=127) == (True, "")
    assert Attempt.objects.get(job=bad).category == "user_error"
    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job, 10)
    services.record_heartbeat("n0", gpus=[], at=at(10))
    assert detect_failures(at(200)).requeued == [job.pk]
    admin = django_user_model.objects.create_superuser("root19", password="pw-root-19x")
    client = Client()
    client.force_login(admin)
    body = client.get("/failures/data.json").json()
    html = body["html"]["failure-tables"]
    assert ">n0<" in html and ">n1<" not in html, html


# --- F5 ------------------------------------------------------------------------------------------------------

def test_a_node_loss_is_recovered_from_the_last_heartbeat_not_from_its_detection(submit, agents):
    """Trial 19, F5: last heartbeat (processes gone) at 16:30:12, requeue at 16:33:13, running again at 16:34:16:
    recovery read 62.6 s instead of 244 s. Here: n0's last heartbeat at 20, requeued at 200 (backoff 60 s), running
    again at 270: 250 s, not 70."""
    from gpuplatform.scheduling import store

    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job, 2)
    services.record_heartbeat("n0", gpus=[], at=at(20))
    for name in ("n1", "n2", "n3"):
        services.record_heartbeat(name, gpus=[], at=at(262))
    assert detect_failures(at(200)).requeued == [job.pk]
    a = Attempt.objects.get(job=job, number=0)
    assert (a.ended_at, a.fault_at) == (at(200), at(20))
    store.run_cycle_once(clock=at(265))
    job.refresh_from_db()
    assert job.state == "admitted" and live(job) and "n0" not in {n for n, _ in live(job)}
    start_all(job, 270)
    a.refresh_from_db()
    assert (a.recovered_at, a.recovery_seconds) == (at(270), 250.0)


def test_a_node_already_silent_when_the_gang_was_bound_counts_from_the_binding(submit, agents):
    """The fault of this attempt cannot be earlier than the attempt: n0's last heartbeat at -30, the gang bound at 0."""
    services.record_heartbeat("n0", gpus=[], at=at(-30))
    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    assert detect_failures(at(200)).requeued == [job.pk]
    a = Attempt.objects.get(job=job, number=0)
    assert (a.fault_at, a.diagnosis["node"]) == (at(0), "n0")


def test_a_time_limit_fault_is_when_the_limit_was_reached_not_the_sigkill(submit, agents):
    """Trial 19, F5: job 5's limit was reached at 16:29:04, its fault_at read 16:29:35 (the SIGKILL after the grace).
    Here the limit (600 s from the start at 0) is seen by the cycle at 610, the SIGKILL ends the task at 640."""
    from gpuplatform.scheduling import store
    from tests.platform.test_execution import report, tasks_of

    job = submit("capped", tasks=1, gpus=8, time_limit_seconds=600)
    bind(job, ("n0", EIGHT))
    start_all(job, 0)
    store.run_cycle_once(clock=at(610))
    assert Job.objects.get(pk=job.pk).state == "preempting"
    assert report(tasks_of(job)[0], "exited", 640, signal=9) == (True, "")
    job.refresh_from_db()
    assert job.state == "failed" and "time limit" in job.end_reason
    a = Attempt.objects.get(job=job, number=0)
    assert (a.failed, a.diagnosis["rule"], a.ended_at, a.fault_at) == (True, "platform:time_limit", at(640), at(600))


# --- F16 -----------------------------------------------------------------------------------------------------

def frozen_gang(submit, *, detect: bool, n1_beats: bool = False, max_restarts: int = 0):
    """worker[0] on n0 started at 1, worker[1] bound on n1, whose agent froze after its heartbeat at 0 (n1_beats: it
    still beats at 100). detect: failure detection ran at 70 (n1 not_ready). worker[0]'s rendezvous gives up at 121,
    exit 3. Returns the job."""
    from tests.platform.test_execution import report, tasks_of

    for name in ("n0", "n1"):
        services.record_heartbeat(name, gpus=[], at=at(0))
    job = submit("stopgang", tasks=2, gpus=8, max_restarts=max_restarts)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    assert report(t0, "started", 1, pid=100) == (True, "")
    for t in (60, 120):
        services.record_heartbeat("n0", gpus=[], at=at(t))
    if n1_beats:
        services.record_heartbeat("n1", gpus=[], at=at(100))
    if detect:
        assert detect_failures(at(70)).not_ready == ["n1"]
    assert report(t0, "exited", 121, exit_code=3) == (True, "")
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("detect", [True, False], ids=["not_ready", "silent-not-yet-detected"])
def test_a_gang_failing_with_tasks_never_started_on_a_lost_node_is_requeued_as_a_node_loss(submit, agents, detect):
    job = frozen_gang(submit, detect=detect)
    assert (job.state, job.attempts, job.restarts) == ("pending", 1, 0) and live(job) == []  # no restart spent
    a = Attempt.objects.get(job=job, number=0)
    d = a.diagnosis
    assert (a.outcome, a.failed, a.category, d["rule"], d["node"]) == (
        "requeued", True, "platform", "platform:node_lost", "n1"), d
    assert "worker[1] never started on n1" in d["summary"] and "worker[0] exited with code 3" in d["summary"], d
    assert ("not ready" if detect else "silent") in d["summary"]
    e = Event.objects.get(job=job, kind="requeued_after_failure")
    assert e.data["failed_tasks"] == [["worker", 1, "n1"]] and e.data["cause"] == "node lost"
    assert not Event.objects.filter(job=job, kind="stopping").exists()


def test_a_gang_failing_with_tasks_bound_on_a_live_node_still_fails_as_before(submit, agents):
    """n1 still beats: its task is merely slow to start; worker[0]'s exit is the gang's failure (stopped toward
    failed, no restart left), diagnosed from the task."""
    job = frozen_gang(submit, detect=False, n1_beats=True)
    assert (job.state, job.stop_target, job.attempts) == ("preempting", "failed", 0)
    assert not Event.objects.filter(job=job, kind="requeued_after_failure").exists()
