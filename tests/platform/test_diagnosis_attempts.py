"""Attempts, diagnosis and its actions, health rules, repair path and topology audit at the database level
(docs/diagnosis.md). No agent process: reports and logs are applied with execution.report_task_event /
append_log, heartbeats with services.record_heartbeat, cycles with store.run_cycle_once at explicit times."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from gpuplatform import execution, services
from gpuplatform.models import Attempt, DiagnosisRule, Event, Gpu, Job, Node, Task
from gpuplatform.scheduling import store
from tests.platform.test_execution import EIGHT, agents, at, bind, live, report, start_all, tasks_of  # noqa: F401

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 1.02 GiB is free.")
WATCHDOG = ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.")


def log(task: Task, text: str, attempt: int | None = None, offset: int = 0):
    task = Task.objects.select_related("node").get(pk=task.pk)
    attempt = Job.objects.get(pk=task.job_id).attempts if attempt is None else attempt
    ok, detail, _ = execution.append_log(task.node, task_id=task.pk, attempt=attempt, offset=offset, data=text)
    assert ok, detail


@pytest.fixture
def admin_client(db):
    user = get_user_model().objects.create_superuser("root", password="pw-root-123")
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_oom_rank_is_the_root_cause_and_the_gang_is_requeued_once_its_survivor_ends(submit, agents, admin_client):
    job = submit("oom", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    log(t1, "epoch 0 step 10\n" + OOM + "\n")
    assert report(t1, "exited", 30, exit_code=1) == (True, "")
    job.refresh_from_db()  # stopped now; requeued when worker[0]'s process has ended (trial 20, F10)
    assert (job.state, job.stop_target) == ("preempting", "restart") and len(live(job)) == 16
    assert report(t0, "exited", 32, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.attempts, job.restarts) == ("pending", 1, 1) and live(job) == []
    a = Attempt.objects.get(job=job, number=0)
    assert (a.outcome, a.failed, a.category, a.nodes, a.gpus) == ("restarted", True, "cuda_oom", ["n0", "n1"], 16)
    assert a.fault_at == at(30) and a.ended_at == at(32) and a.gpu_seconds == 16 * 32
    d = a.diagnosis
    assert (d["task"], d["node"], d["action"]) == ("worker[1]", "n1", "retry")
    assert d["evidence"][0] == {"task": "worker[1]", "source": "log", "line": 2, "offset": 16, "text": OOM}
    body = admin_client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["attempt"] == 1 and body["diagnosis"]["category"] == "cuda_oom"
    assert [x["number"] for x in body["attempts"]] == [0] and body["attempts"][0]["nodes"] == ["n0", "n1"]
    assert Event.objects.filter(job=job, kind="diagnosed").get().data["category"] == "cuda_oom"
    # the next attempt runs: recovery time = fault -> every task running again
    store.run_cycle_once(clock=at(95))
    start_all(job, 97)
    a.refresh_from_db()
    assert (a.recovered_at, a.recovery_seconds) == (at(97), 67.0)
    assert admin_client.get(f"/api/v1/jobs/{job.pk}/").json()["attempts"][0]["recovery_seconds"] == 67.0


def two_ranks_one_failed(submit, name: str, line: str, **exit_kw):
    """A 2-task gang without restarts on n0 and n1, running; worker[1] printed `line` and exited at t=30 (exit_kw):
    the gang is stopped toward failed, worker[0] still on its node. Returns (job, worker[0], worker[1])."""
    job = submit(name, tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    log(t1, line)
    report(t1, "exited", 30, **exit_kw)
    return job, t0, t1


def test_multi_rank_watchdog_after_oom_is_diagnosed_cuda_oom_when_the_last_attempt_ends(submit, agents):
    """No restarts: the gang is stopped toward failed, the timed-out rank ends later; cuda_oom on worker[1]."""
    job, t0, t1 = two_ranks_one_failed(submit, "oom", OOM, exit_code=1)
    log(t0, WATCHDOG)
    report(t0, "exited", 33, signal=6)
    job.refresh_from_db()
    assert job.state == "failed"
    a = Attempt.objects.get(job=job)
    assert (a.category, a.diagnosis["task"], a.outcome, a.failed_task) == ("cuda_oom", "worker[1]", "failed", "worker[1]")
    assert any(e["text"] == WATCHDOG for e in a.diagnosis["evidence"])  # the consequence is kept as evidence


def test_a_rank_whose_last_lines_arrive_after_the_stop_deadline_still_counts_as_evidence(submit, agents):
    """The gang is stopped toward failed; the surviving rank's agent is slow, the stop deadline passes and the
    job ends without its log; its last lines (and its exit, refused: the task ended) arrive later. The
    attempt's diagnosis is read again with them (the flake of session 12's CI run, made deterministic)."""
    job, t0, t1 = two_ranks_one_failed(submit, "oom", OOM, exit_code=1)
    store.run_cycle_once(clock=at(30 + 3600))  # far past any stop grace: ended without t0's exit
    job.refresh_from_db()
    assert job.state == "failed"
    a = Attempt.objects.get(job=job)
    assert a.category == "cuda_oom" and not any(e["text"] == WATCHDOG for e in a.diagnosis["evidence"])
    first = dict(a.diagnosis)
    log(t0, "step 9\n")  # output that matches nothing changes nothing
    a.refresh_from_db()
    assert a.diagnosis == first
    log(t0, WATCHDOG + "\n", offset=7)
    # the exit is kept on the released task (how it ended: trial 13, F19), nothing else changes
    assert report(t0, "exited", 3700, signal=6) == (True, "")
    assert Task.objects.filter(pk=t0.pk).values_list("state", "exit_signal").get() == ("released", 6)
    assert Job.objects.get(pk=job.pk).state == "failed"
    a.refresh_from_db()
    assert (a.category, a.diagnosis["task"]) == ("cuda_oom", "worker[1]")
    assert any(e["text"] == WATCHDOG and e["task"] == "worker[0]" for e in a.diagnosis["evidence"]), a.diagnosis
    e = Event.objects.get(job=job, kind="diagnosis_updated")  # the change is audited, once
    assert (e.data["category"], e.data["was"]) == ("cuda_oom", "cuda_oom") and "more evidence" in e.message


def test_a_late_hardware_line_changes_the_category_and_is_audited(submit, agents):
    job, t0, t1 = two_ranks_one_failed(submit, "late-xid", WATCHDOG.replace("rank0", "rank1") + "\n", signal=6)
    store.run_cycle_once(clock=at(30 + 3600))
    a = Attempt.objects.get(job=job)
    assert a.category == "nccl_timeout"
    log(t0, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    a.refresh_from_db()
    assert (a.category, a.diagnosis["node"]) == ("gpu_hardware", "n0")
    e = Event.objects.get(job=job, kind="diagnosis_updated")
    assert (e.data["category"], e.data["was"]) == ("gpu_hardware", "nccl_timeout")
    job.refresh_from_db()
    assert job.state == "failed"


XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def test_a_late_hardware_line_counts_toward_the_repeat_offender_rule(submit, agents):
    """Review 13, R3: two jobs failed gpu_hardware on n0 in time; a third one's XID line arrives after it ended. Its
    attempt then reads gpu_hardware on n0, and n0 (3 jobs: the shipped rule cordons) is taken out as it would have
    been with the line in time."""
    for k in range(3):
        job, t0, t1 = two_ranks_one_failed(submit, f"hw{k}", "step\n", exit_code=1)
        if k < 2:
            log(t0, XID79)  # in time
        store.run_cycle_once(clock=at(30 + 3600 * (k + 1)))
        assert Job.objects.get(pk=job.pk).state == "failed"
    assert Node.objects.get(name="n0").state == "ready"  # the third job's attempt: unknown so far
    log(t0, XID79)  # late
    assert (Attempt.objects.get(job=job).category, Attempt.objects.get(job=job).diagnosis["node"]) == ("gpu_hardware", "n0")
    assert Node.objects.get(name="n0").state == "cordoned"


def test_a_late_chunk_that_matches_no_rule_reads_nothing_else(submit, agents, monkeypatch):
    """Review 13, R5: every late chunk re-read every rank's 256 KiB tail. A chunk with no line a rule matches cannot
    change the diagnosis: the gang's logs are not read; a line cut between two chunks is still read whole."""
    from gpuplatform.diagnosis import attempts as attempts_module

    job, t0, t1 = two_ranks_one_failed(submit, "quiet", OOM + "\n", exit_code=1)
    store.run_cycle_once(clock=at(30 + 3600))
    reads = []
    real = attempts_module._evidence
    monkeypatch.setattr(attempts_module, "_evidence", lambda *a, **kw: reads.append(a) or real(*a, **kw))
    log(t0, "step 9 of 10\n" * 50)
    assert reads == []
    head, tail = WATCHDOG[:40], WATCHDOG[40:] + "\n"  # the watchdog's line split across two chunks
    log(t0, head, offset=650)
    log(t0, tail, offset=650 + len(head))
    assert len(reads) == 1
    assert any(e["text"] == WATCHDOG for e in Attempt.objects.get(job=job).diagnosis["evidence"])


def test_a_past_attempts_log_is_taken_only_from_a_node_it_ran_on(submit, agents):
    """Review 13, R8: a past attempt's chunk was accepted from any node (the node check read the task's current
    placement only)."""
    job = submit("restart", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    report(t1, "exited", 30, exit_code=1)
    report(t0, "exited", 31, signal=15)  # the survivor's end requeues the gang (trial 20, F10)
    job.refresh_from_db()
    assert job.attempts == 1
    other = Node.objects.exclude(name__in=("n0", "n1")).order_by("name").first()
    ok, detail, _ = execution.append_log(other, task_id=t1.pk, attempt=0, offset=0, data="forged\n")
    assert not ok and "did not run on node" in detail
    ok, detail, _ = execution.append_log(Node.objects.get(name="n1"), task_id=t1.pk, attempt=0, offset=0,
                                         data="its own last line\n")
    assert ok, detail


def test_user_error_cancels_the_remaining_restarts(submit, agents):
    job = submit("typo", tasks=1, gpus=8, max_restarts=2)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (t0,) = tasks_of(job)
    log(t0, "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
            "ModuleNotFoundError: No module named 'deepspeed'\n")
    report(t0, "exited", 5, exit_code=1)
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts) == ("failed", 0, 0)
    assert "user_error: retrying cannot help" in job.end_reason
    a = Attempt.objects.get(job=job)
    assert (a.category, a.diagnosis["action"]) == ("user_error", "cancel_retries")
    assert Event.objects.get(job=job, kind="task_failed").data["cancel_retries"] == "python-user-exception"


def test_hardware_diagnosis_excludes_the_node_for_the_next_attempt_unless_nothing_else_fits(submit, agents):
    job = submit("hw", tasks=1, gpus=8, max_restarts=2)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (t0,) = tasks_of(job)
    log(t0, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    report(t0, "exited", 5, signal=11)
    job.refresh_from_db()
    assert job.state == "pending" and job.excluded_nodes == ["n0"]
    assert Attempt.objects.get(job=job).category == "gpu_hardware"
    store.run_cycle_once(clock=at(200))
    (t0,) = tasks_of(job)
    assert t0.node.name != "n0"  # n0 was the engine's first choice (binpacking, name order) without the exclusion
    start_all(job, 201)
    log(t0, "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, An uncorrectable double bit error (DBE)\n")
    second = t0.node.name
    report(t0, "exited", 210, exit_code=1)
    job.refresh_from_db()
    assert job.excluded_nodes == ["n0", second]
    for name in {"n0", "n1", "n2", "n3"} - {"n0", second}:  # only the excluded nodes are left
        services.cordon_node(Node.objects.get(name=name))
    store.run_cycle_once(clock=at(600))
    job.refresh_from_db()
    assert job.state == "admitted" and tasks_of(job)[0].node.name in ("n0", second)
    assert Event.objects.filter(job=job, kind="excluded_node_used").exists()


def test_a_node_on_which_three_jobs_failed_with_hardware_is_cordoned(submit, agents):
    for i in range(3):
        job = submit(f"victim-{i}", tasks=1, gpus=8)
        bind(job, ("n2", EIGHT), clock=at(i * 100))
        start_all(job, i * 100)
        (t,) = tasks_of(job)
        log(t, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
        report(t, "exited", i * 100 + 10, exit_code=1)
        state = Node.objects.get(name="n2").state
        assert state == ("cordoned" if i == 2 else "ready"), (i, state)
    node = Node.objects.get(name="n2")
    assert "repeat offender" in node.health_reason and node.health_since == at(210)
    assert Event.objects.filter(node=node, kind="cordoned").get().data["rule"] == "repeat-offender"
    rule = Event.objects.get(node=node, kind="health_rule")  # the rule's own record, like any health rule
    assert (rule.data["rule"], rule.data["signal"], rule.data["value"]) == ("repeat-offender", "repeat_offender_jobs", 3)


def test_repeat_offender_is_a_health_rule_an_admin_can_make_stricter(submit, agents):
    """An admin's rule on repeat_offender_jobs (>= 2 -> drain) acts at the second job, before the shipped 3."""
    from gpuplatform.models import HealthRule

    services.save_health_rule(HealthRule(name="two-strikes", signal="repeat_offender_jobs", op="ge", value=2,
                                         action="drain", category="gpu_hardware", source="our fleet's policy"))
    for i in range(2):
        job = submit(f"victim-{i}", tasks=1, gpus=8)
        bind(job, ("n2", EIGHT), clock=at(i * 100))
        start_all(job, i * 100)
        (t,) = tasks_of(job)
        log(t, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
        report(t, "exited", i * 100 + 10, exit_code=1)
    node = Node.objects.get(name="n2")
    assert node.state == "draining" and "repeat offender" in node.health_reason
    assert Event.objects.filter(node=node, kind="drained").get().data["rule"] == "admin:two-strikes"


def test_the_same_job_failing_three_times_on_a_node_is_not_a_repeat_offender(submit, agents):
    job = submit("flaky", tasks=1, gpus=8, max_restarts=5)
    Node.objects.exclude(name="n3").update(state="cordoned")
    for i in range(3):
        store.run_cycle_once(clock=at(i * 1000))
        start_all(job, i * 1000 + 1)
        (t,) = tasks_of(job)
        assert t.node.name == "n3"  # nothing else fits: the excluded node is used
        log(t, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
        report(t, "exited", i * 1000 + 10, exit_code=1)
    assert Node.objects.get(name="n3").state == "ready"


def test_fatal_xid_in_a_heartbeat_fails_the_gang_now_and_names_gpu_hardware(submit, agents):
    job = submit("victim", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.record_heartbeat("n1", gpus=[{"index": 3, "health": "healthy", "xids": [13]}], at=at(20))
    assert Job.objects.get(pk=job.pk).state == "running"  # XID 13 is recorded only
    assert Event.objects.filter(kind="health_rule", node__name="n1").get().data["rule"] == "xid-record"
    services.record_heartbeat("n1", gpus=[{"index": 3, "health": "healthy", "xids": [13, 79]}], at=at(30))
    job.refresh_from_db()  # stopped in the heartbeat's own request; requeued when its processes have ended
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "recover", at(60))
    assert len(live(job)) == 16  # trial 20, F10: not free while its processes run (they were, at 30)
    t0, t1 = tasks_of(job)
    assert report(t0, "exited", 31, signal=15) == (True, "") and Job.objects.get(pk=job.pk).state == "preempting"
    assert report(t1, "exited", 32, signal=15) == (True, "")
    job.refresh_from_db()
    assert job.state == "pending" and live(job) == [] and job.not_before == at(90)  # backoff from the fault
    assert Gpu.objects.get(node__name="n1", index=3).health == "unhealthy"
    a = Attempt.objects.get(job=job)
    assert (a.category, a.failed, a.diagnosis["node"]) == ("gpu_hardware", True, "n1")
    assert a.diagnosis["evidence"][0]["source"] == "health" and "79" in a.diagnosis["evidence"][0]["text"]
    # the same signal in the next heartbeats does not fire again
    services.record_heartbeat("n1", gpus=[{"index": 3, "health": "unhealthy", "xids": [13, 79]}], at=at(35))
    assert Event.objects.filter(kind="health_rule", node__name="n1", data__rule="xid-fatal").count() == 1


def test_health_rule_actions_cordon_and_drain(submit, agents):
    services.record_heartbeat("n2", gpus=[{"index": 0, "health": "healthy", "row_remap_failure": True}], at=at(1))
    n2 = Node.objects.get(name="n2")
    assert n2.state == "cordoned" and "row-remap-failure" in n2.health_reason and n2.health_since == at(1)
    job = submit("on-n3", tasks=1, gpus=8)
    bind(job, ("n3", EIGHT))
    start_all(job)
    services.record_heartbeat("n3", gpus=[{"index": 1, "health": "healthy", "nvlink_down": 2}], at=at(5))
    assert Node.objects.get(name="n3").state == "draining"
    assert Job.objects.get(pk=job.pk).state == "preempting"  # stopped with grace, then requeued whole


def test_admin_rule_without_code(submit, agents, admin_client):
    r = admin_client.post("/admin/gpuplatform/diagnosisrule/add/", {})  # the admin page exists (login forced)
    assert r.status_code in (200, 302)
    with pytest.raises(services.ValidationError) as err:
        services.save_diagnosis_rule(DiagnosisRule(name="bad", category="cuda_oom", pattern="(", source="x"))
    assert "pattern" in err.value.errors
    services.save_diagnosis_rule(DiagnosisRule(name="lustre", category="storage", pattern=r"LustreError: .* evicted",
                                               source="Lustre client log", action="retry"))
    job = submit("fs", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (t,) = tasks_of(job)
    log(t, "LustreError: 167-0: lustre-OST0001: This client was evicted by lustre-OST0001\n")
    report(t, "exited", 3, exit_code=1)
    report_again = Attempt.objects.get(job=job)
    assert (report_again.category, report_again.diagnosis["rule"]) == ("storage", "admin:lustre")


def test_repair_path_over_rest(agents, admin_client):
    url = "/api/v1/nodes/n3/"
    assert admin_client.post(url + "repair/", {}, format="json").status_code == 400  # ready: cordon first
    assert admin_client.post(url + "cordon/", {"reason": "xid 79"}, format="json").status_code == 200
    r = admin_client.post(url + "repair/", {"reason": "GPU 3 reseated"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "in_repair" and r.json()["health_reason"] == "GPU 3 reseated"
    assert admin_client.post(url + "validate/", {"check_command": "nvidia-smi"}, format="json").status_code == 400
    r = admin_client.post(url + "validate/", {}, format="json")
    assert r.json()["state"] == "validating"
    # a heartbeat that misses a GPU fails validation: back to in_repair
    services.record_heartbeat("n3", gpus=[{"index": i, "health": "healthy"} for i in range(7)], at=at(10))
    node = Node.objects.get(name="n3")
    assert node.state == "in_repair" and "GPUs not reported: [7]" in node.health_reason
    admin_client.post(url + "validate/", {}, format="json")
    services.record_heartbeat("n3", gpus=[{"index": i, "health": "healthy"} for i in range(8)], at=at(20))
    node = Node.objects.get(name="n3")
    assert (node.state, node.health_reason, node.validation["passed"]) == ("ready", "", True)
    kinds = list(Event.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert [k for k in kinds if k in ("cordoned", "repair_started", "validation_started", "validation_failed",
                                      "validation_passed")] == ["cordoned", "repair_started", "validation_started",
                                                                "validation_failed", "validation_started",
                                                                "validation_passed"]
    # with a check command the node waits for its result
    for step in ("cordon/", "repair/"):
        admin_client.post(url + step, {}, format="json")
    admin_client.post(url + "validate/", {"check_command": ["/opt/check/dcgmi-diag.sh", "-r", "2"]}, format="json")
    services.record_heartbeat("n3", gpus=[{"index": i, "health": "healthy"} for i in range(8)], at=at(30))
    assert Node.objects.get(name="n3").state == "validating"
    r = admin_client.post(url + "validation/", {"passed": False, "detail": "dcgmi diag -r 2: memory test failed"},
                          format="json")
    assert r.json()["state"] == "in_repair"
    assert admin_client.post(url + "validation/", {"passed": True}, format="json").status_code == 400


def test_topology_audit_flags_mismatches_and_cordons_a_contradicting_node(db):
    gpus = [{"index": i, "uuid": f"GPU-s-{i}", "model": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"0000:{i:02x}:00.0",
             "nvlink_peers": ["0000:99:00.0"], "numa_node": 0} for i in range(4)]
    node = services.register_node("solo", flavor="H100-80GB-HBM3", gpus=gpus)
    node.refresh_from_db()
    fields = {m["field"] for m in node.topology_mismatches}
    assert "nvlink_peers" in fields and node.state == "cordoned" and "topology audit" in node.health_reason
    assert Event.objects.filter(node=node, kind="topology_audit").exists()
    # agreeing labels: no mismatch, stays ready
    ok = [{**g, "nvlink_peers": [f"0000:{(i + 1) % 4:02x}:00.0"]} for i, g in enumerate(gpus)]
    node2 = services.register_node("solo2", flavor="H100-80GB-HBM3",
                                   gpus=[{**g, "uuid": f"GPU-s2-{i}"} for i, g in enumerate(ok)])  # a GPU has one node
    node2.refresh_from_db()
    assert node2.topology_mismatches == [] and node2.state == "ready"
    node3 = services.register_node("solo3", flavor="A100", gpus=[{**g, "uuid": f"GPU-s3-{i}"} for i, g in enumerate(ok)])
    node3.refresh_from_db()
    assert [m["field"] for m in node3.topology_mismatches] == ["flavor"] and node3.state == "ready"


def test_rules_over_rest(submit, agents, admin_client):
    """Admins add rules over REST without code; a bad rule is a 400 naming the field; members read only."""
    r = admin_client.post("/api/v1/diagnosis-rules/", {"name": "x", "category": "cuda_oom", "pattern": "(",
                                                        "source": "ours"}, format="json")
    assert r.status_code == 400 and "pattern" in r.json(), r.json()
    r = admin_client.post("/api/v1/diagnosis-rules/", {"name": "x", "category": "oom", "pattern": "a",
                                                        "source": "ours"}, format="json")
    assert r.status_code == 400 and "category" in r.json()
    r = admin_client.post("/api/v1/diagnosis-rules/", {"name": "gcs", "category": "storage", "source": "gcsfuse docs",
                                                        "pattern": r"gcsfuse: .*(quota|rate) exceeded"}, format="json")
    assert r.status_code == 201, r.json()
    rule_id = r.json()["id"]
    assert admin_client.patch(f"/api/v1/diagnosis-rules/{rule_id}/", {"action": "reboot"},
                              format="json").status_code == 400
    assert admin_client.patch(f"/api/v1/diagnosis-rules/{rule_id}/", {"action": "exclude_node"},
                              format="json").json()["action"] == "exclude_node"
    assert admin_client.get("/api/v1/diagnosis-rules/shipped/").json()["version"]
    r = admin_client.post("/api/v1/health-rules/", {"name": "hot", "signal": "thermal_slowdown_seconds", "op": "gt",
                                                     "value": 60, "action": "drain", "source": "our SLO"}, format="json")
    assert r.status_code == 201, r.json()
    assert admin_client.post("/api/v1/health-rules/", {"name": "bad", "signal": "fan_speed", "op": "gt", "value": 1,
                                                        "action": "cordon", "source": "s"},
                             format="json").status_code == 400
    services.record_heartbeat("n1", gpus=[{"index": 0, "health": "healthy", "thermal_slowdown_seconds": 90}], at=at(1))
    assert Node.objects.get(name="n1").state == "draining"  # the admin's rule acted on the next heartbeat
    member = get_user_model().objects.create_user("bob")
    client = APIClient()
    client.force_authenticate(member)
    assert client.get("/api/v1/diagnosis-rules/").status_code == 200
    assert client.post("/api/v1/diagnosis-rules/", {"name": "y", "category": "storage", "pattern": "a",
                                                     "source": "s"}, format="json").status_code == 403


def test_rule_tables_are_cached_until_a_rule_row_changes(db, django_assert_num_queries):
    from gpuplatform.diagnosis import tables
    from gpuplatform.models import HealthRule

    first = tables.health_rules()
    with django_assert_num_queries(0):  # a heartbeat judges its signals without reading the table again
        assert tables.health_rules() is first
    rule = services.save_health_rule(HealthRule(name="hot", signal="thermal_slowdown_seconds", op="gt", value=60,
                                                action="record", category="gpu_hardware", source="our cooling"))
    assert "admin:hot" in [r.id for r in tables.health_rules()[1]]  # saved: the next call sees it
    HealthRule.objects.filter(pk=rule.pk).update(enabled=False)  # around the model: no signal...
    assert "admin:hot" in [r.id for r in tables.health_rules()[1]]
    HealthRule.objects.get(pk=rule.pk).delete()  # ...a delete (or save) is one
    assert "admin:hot" not in [r.id for r in tables.health_rules()[1]]


def test_a_failing_report_reads_the_evidence_once_and_tails_come_from_one_query(submit, agents, monkeypatch):
    """The report's preview (cancel_retries?) and the attempt's close at the same instant share one read of
    the logs and health events; each task's tail is the last LOG_TAIL_BYTES, whatever the chunking."""
    from gpuplatform.diagnosis import attempts

    monkeypatch.setattr(attempts, "LOG_TAIL_BYTES", 250)
    job = submit("oom", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    offset = 0
    for i in range(6):  # 6 chunks of 40 bytes, then the OOM line (151): chunks are kept newest first while
        # the ones kept hold less than 250 bytes: OOM, line 05, line 04, line 03 (271 bytes)
        chunk = f"line {i:02d} " + "x" * 31 + "\n"
        log(t1, chunk, offset=offset)
        offset += len(chunk)
    log(t1, OOM + "\n", offset=offset)
    log(t0, "rank 0 fine\n")
    assert report(t0, "exited", 29, exit_code=0) == (True, "")  # no survivor: the failure's request requeues the gang
    tails = attempts._log_tails([t0.pk, t1.pk], 0)
    assert tails[t0.pk] == ("rank 0 fine\n", 0)
    text, start = tails[t1.pk]
    assert text.endswith(OOM + "\n") and text.startswith("line 03") and start == 3 * 40
    calls = []
    real = attempts._evidence
    monkeypatch.setattr(attempts, "_evidence", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert report(t1, "exited", 30, exit_code=1) == (True, "")
    assert len(calls) == 1  # diagnose_now's read is close_attempt's
    assert Attempt.objects.get(job=job, number=0).category == "cuda_oom"
    assert Job.objects.get(pk=job.pk).attempts == 1
