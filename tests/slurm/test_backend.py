"""The Slurm backend against a fake Slurm CLI (tests/slurm/fake.py, built on outputs recorded from a real
Slurm 22.05): what it submits for a gang the cycle bound, and what it does with what Slurm reports -- the
same service functions the node agents' reports go through. The launcher's files (started / exit / output)
are written here as the real launcher writes them (tests/slurm/test_script.py runs that launcher)."""
from __future__ import annotations

import re
from pathlib import Path
from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import execution, services
from gpuplatform.models import Allocation, Event, Job, Node, SchedulerCycle, Task, TaskLog
from gpuplatform.scheduling import store
from gpuplatform.slurm.backend import NEVER_STARTED, SlurmBackend
from gpuplatform.slurm.cli import SlurmCLI
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement
from tests.slurm.fake import FakeSlurm

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=tz.utc)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


@pytest.fixture
def slurm(cluster, tmp_path):
    fake = FakeSlurm(nodes=("gpn1", "gpn2"), gpus=2)
    backend = SlurmBackend(SlurmCLI(fake, partition="gpuplatform"), output_dir=str(tmp_path / "out"),
                           mode="placement", start_timeout=60, jobcomp_file="", flavor="H100")
    backend.sync_nodes(T0)
    return fake, backend


def bind(job, *placements):
    tasks = tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=T0,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale


def out_dir(backend, job) -> "Path":
    job.refresh_from_db()
    return backend._dir(job.pk, job.attempts)


def tasks_of(job):
    return list(Task.objects.filter(job=job).order_by("index"))


def finish(backend, task, text: str) -> None:
    d = out_dir(backend, task.job)
    (d / f"task-{task.pk}.exit").write_text(text + "\n")


def test_slurm_nodes_become_platform_nodes_run_by_slurm(slurm):
    nodes = {n.name: n for n in Node.objects.filter(name__startswith="gpn")}
    assert set(nodes) == {"gpn1", "gpn2"}
    assert all(n.executor == "slurm" and n.gpu_count == 2 and n.gpus.count() == 2 and n.address == "127.0.0.1"
               for n in nodes.values())


def test_a_bound_gang_becomes_one_slurm_job_on_exactly_its_nodes(slurm, submit):
    fake, backend = slurm
    job = submit("ddp", tasks=2, gpus=1, time_limit_seconds=600)
    bind(job, ("gpn2", (1,)), ("gpn1", (0,)))
    assert {t.state for t in tasks_of(job)} == {"bound"}
    stats = backend.sync(at(1))
    assert stats.submitted == [job.pk]
    jid = fake.only(f"gpp-{job.pk}-a0")
    opts = dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", fake.scripts[jid], re.M))
    grace = job.queue.preemption_grace_seconds
    assert (opts["nodelist"], opts["nodes"], opts["ntasks-per-node"], opts["gres"]) == ("gpn2,gpn1", "2", "1", "gpu:1")
    assert int(opts["time"]) * 60 >= 600 + grace
    job.refresh_from_db()
    assert job.slurm_job_id == jid and job.slurm["attempt"] == 0
    launch = (out_dir(backend, job) / "launch.sh").read_text()
    t0, t1 = tasks_of(job)
    assert f"gpn2/0) T={t0.pk};" in launch and f"gpn1/0) T={t1.pk};" in launch
    assert "GPUPLATFORM_JOB_ID=" + str(job.pk) in launch
    assert backend.sync(at(2)).submitted == []  # pending in Slurm: never submitted twice
    assert len(fake.commands("sbatch")) == 1
    assert Event.objects.filter(job=job, kind="slurm_submitted").count() == 1

    fake.set_state(jid, "RUNNING", gpus=["gpu:1(IDX:1)", "gpu:1(IDX:1)"])  # Slurm chose GPU 1 on gpn1
    d = out_dir(backend, job)
    for t in (t0, t1):
        (d / f"task-{t.pk}.started").write_text("4242\n")
    (d / f"task-{t0.pk}.out").write_text("rank 0 says hi\n")
    stats = backend.sync(at(3))
    assert stats.started == 2
    job.refresh_from_db()
    assert job.state == "running"
    assert TaskLog.objects.get(task=t0).data == "rank 0 says hi\n"
    # Slurm's GPU choice is recorded: task 1 holds gpn1 GPU 1 now, not GPU 0
    assert sorted(Allocation.objects.filter(job=job, released_at__isnull=True)
                  .values_list("gpu__node__name", "gpu__index")) == [("gpn1", 1), ("gpn2", 1)]
    assert Event.objects.filter(job=job, kind="slurm_placement").exists()

    finish(backend, t0, "exit 0")
    finish(backend, t1, "exit 0")
    backend.sync(at(4))
    job.refresh_from_db()
    assert job.state == "succeeded"


def test_exit_3_in_one_task_fails_the_gang_and_the_stop_goes_to_slurm(slurm, submit):
    fake, backend = slurm
    job = submit("bad", tasks=2, gpus=1)
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(at(2))
    t0, t1 = tasks_of(job)
    finish(backend, t1, "exit 3")
    stats = backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "preempting" and job.stop_target == "failed"
    assert (job.exit_code, job.failed_task) == (3, "worker[1]")
    assert stats.signalled == [job.pk]
    assert fake.commands("scancel") == [f"scancel --signal=TERM {jid}"]
    backend.sync(at(4))  # TERM once
    assert len(fake.commands("scancel")) == 1
    deadline = job.preempt_deadline
    stats = backend.sync(deadline + timedelta(seconds=1))
    assert stats.killed == [job.pk]
    # SIGKILL to the step (a job's --signal=KILL is Slurm's cancel: TERM again, trial 19 F3), then the cancel
    assert fake.commands("scancel")[1:] == [f"scancel --signal=KILL {jid}.0", f"scancel {jid}"]
    backend.sync(deadline + timedelta(seconds=2))  # Slurm says CANCELLED: the last task was killed
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 3
    assert Task.objects.get(pk=t0.pk).exit_signal == 9


def test_cancel_while_slurm_has_not_started_it(slurm, submit):
    fake, backend = slurm
    job = submit("c", tasks=1, gpus=2)
    bind(job, ("gpn1", (0, 1)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    services.cancel_job(job)
    backend.sync(at(2))
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert fake.jobs[jid]["job_state"] == "CANCELLED"
    assert Task.objects.get(job=job).end_message == NEVER_STARTED


def test_slurm_not_starting_it_in_time_requeues_the_gang_with_slurms_reason(slurm, submit):
    fake, backend = slurm
    job = submit("wait", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(0))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "PENDING", reason="ReqNodeNotAvail")
    assert backend.sync(at(30)).requeued == []
    stats = backend.sync(at(61))
    assert stats.requeued == [job.pk]
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and "ReqNodeNotAvail" in job.pending_reason
    assert f"scancel {jid}" in fake.commands("scancel")


def test_node_fail_requeues_the_gang_whole_without_using_a_restart(slurm, submit):
    fake, backend = slurm
    job = submit("nf", tasks=2, gpus=1)
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(at(2))
    fake.set_state(jid, "NODE_FAIL")
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and job.restarts == 0
    assert Event.objects.filter(job=job, kind="node_failed").exists()
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_slurm_preempted_requeues_the_gang_whole_like_a_platform_preemption(slurm, submit):
    fake, backend = slurm
    job = submit("pre", tasks=2, gpus=1)
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(at(2))
    fake.set_state(jid, "PREEMPTED", reason="None")
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and job.restarts == 0
    assert job.not_before is None or job.not_before <= at(3)  # a preemption: no backoff
    ev = Event.objects.filter(job=job, kind="preempted").get()
    assert "PREEMPTED" in ev.message and jid in ev.message
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert set(Node.objects.filter(name__in=["gpn1", "gpn2"]).values_list("state", flat=True)) == {"ready"}
    # the next attempt is a new Slurm job, submitted once
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(at(4))
    assert fake.only(f"gpp-{job.pk}-a1") != jid


def test_slurm_boot_fail_requeues_the_gang_and_holds_the_node_not_ready_with_slurms_reason(slurm, submit):
    fake, backend = slurm
    job = submit("bf", tasks=2, gpus=1)
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING", nodes=["gpn1", "gpn2"])
    fake.jobs[jid]["nodes"] = "gpn2"  # Slurm's node list of the failed job: the node that did not boot
    fake.jobs[jid].update(job_state="BOOT_FAIL", state_reason="NodeDown")
    backend.sync(at(2))
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and job.restarts == 0
    assert "BOOT_FAIL" in Event.objects.get(job=job, kind="node_failed").message
    gpn1, gpn2 = Node.objects.get(name="gpn1"), Node.objects.get(name="gpn2")
    assert gpn1.state == "ready"
    assert gpn2.state == "not_ready" and gpn2.health_reason == f"Slurm: BOOT_FAIL job {jid}, NodeDown"
    assert Event.objects.filter(kind="node_not_ready", node=gpn2).exists()
    backend.sync(at(10))  # Slurm still shows it up: the hold stays (no heartbeat readies it)
    assert Node.objects.get(name="gpn2").state == "not_ready"
    fake.nodes["gpn2"].update(state="down", reason="boot failure")
    backend.sync(at(20))
    gpn2 = Node.objects.get(name="gpn2")
    assert gpn2.state == "not_ready" and gpn2.health_reason == "Slurm: boot failure"
    fake.nodes["gpn2"].update(state="idle", reason="")
    backend.sync(at(30))  # back in service in Slurm: ready here
    gpn2 = Node.objects.get(name="gpn2")
    assert gpn2.state == "ready" and gpn2.health_reason == ""


def test_slurm_timeout_ends_the_job_as_a_time_limit(slurm, submit):
    fake, backend = slurm
    job = submit("tl", tasks=1, gpus=1, time_limit_seconds=60)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(at(2))
    fake.set_state(jid, "TIMEOUT")
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "failed" and job.end_reason.startswith("time limit")


def test_a_restarted_backend_finds_its_jobs_and_never_submits_twice(slurm, submit, tmp_path):
    fake, backend = slurm
    job = submit("r", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    Job.objects.filter(pk=job.pk).update(slurm={}, slurm_job_id="")  # as if it died between sbatch and the write
    fresh = SlurmBackend(SlurmCLI(fake, partition="gpuplatform"), output_dir=backend.output_dir, mode="placement",
                         start_timeout=60, jobcomp_file="", flavor="H100")
    fake.set_state(jid, "RUNNING")
    fresh.sync(at(2))
    assert len(fake.commands("sbatch")) == 1
    job.refresh_from_db()
    assert job.slurm_job_id == jid and job.state == "running"


def test_a_job_ended_while_the_backend_was_down_is_found_in_the_completion_records(slurm, submit, tmp_path):
    fake, backend = slurm
    job = submit("gone", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(at(2))
    del fake.jobs[jid]  # past MinJobAge: squeue forgot it
    comp = tmp_path / "jobcomp.txt"
    comp.write_text(f"JobId={jid} UserId=root(0) Name=gpp-{job.pk}-a0 JobState=OUT_OF_MEMORY NodeList=gpn1 "
                    "ExitCode=0:125\n")
    backend.jobcomp_file = str(comp)
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "failed"
    assert "host out of memory" in Task.objects.get(job=job).end_message


def test_jobs_the_platform_no_longer_lists_are_cancelled(slurm):
    fake, backend = slurm
    fake._sbatch([], "#SBATCH --job-name=gpp-999-a0\n")
    fake._sbatch([], "#SBATCH --job-name=someone-elses\n")
    stats = backend.sync(at(1))
    assert stats.orphans_cancelled == [fake.only("gpp-999-a0")]
    assert fake.jobs[fake.only("someone-elses")]["job_state"] == "PENDING"


def test_drains_flow_both_ways(slurm):
    fake, backend = slurm
    fake.nodes["gpn2"].update(state_flags=["DRAIN"], reason="bad dimm")
    backend.sync_nodes(at(1))
    gpn2 = Node.objects.get(name="gpn2")
    assert gpn2.state == "draining" and gpn2.health_reason == "Slurm: bad dimm"
    fake.nodes["gpn2"].update(state_flags=[], reason="")
    backend.sync_nodes(at(2))
    assert Node.objects.get(name="gpn2").state == "ready"
    services.cordon_node(Node.objects.get(name="gpn1"), reason="maintenance")
    out = backend.sync_nodes(at(3))
    assert out["drained_in_slurm"] == ["gpn1"]
    assert fake.nodes["gpn1"]["reason"].startswith("gpuplatform: ")
    assert Node.objects.get(name="gpn1").state == "cordoned"  # our own drain does not come back as Slurm's
    services.uncordon_node(Node.objects.get(name="gpn1"))
    assert backend.sync_nodes(at(4))["resumed"] == ["gpn1"]
    assert fake.nodes["gpn1"]["state_flags"] == []


def test_the_job_page_and_the_api_show_the_slurm_job_id(slurm, submit, client):
    from django.contrib.auth import get_user_model

    fake, backend = slurm
    job = submit("shown", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789"))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(rf'id="job-slurm"><code>{jid}</code>.*attempt 0, placement mode', html)
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["slurm_job_id"] == jid


def test_a_submission_slurm_keeps_refusing_fails_the_job_with_slurms_words(slurm, submit):
    fake, backend = slurm
    job = submit("refused", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    fake.fail["sbatch"] = "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    for i in range(2):
        stats = backend.sync(at(1 + i))
        assert stats.errors and Job.objects.get(pk=job.pk).state == "admitted"
    assert Job.objects.get(pk=job.pk).slurm["sbatch_refusals"] == 2
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "failed" and "Requested node configuration is not available" in job.end_reason
    assert "refused the job 3 times" in job.end_reason


def test_a_refused_submission_that_then_succeeds_is_submitted_once(slurm, submit):
    fake, backend = slurm
    job = submit("flaky", tasks=1, gpus=1)
    bind(job, ("gpn1", (0,)))
    fake.fail["sbatch"] = "sbatch: error: Socket timed out on send/recv operation"
    backend.sync(at(1))
    del fake.fail["sbatch"]
    assert backend.sync(at(2)).submitted == [job.pk]
    backend.sync(at(3))
    assert len([c for c in fake.calls if c[0] == "sbatch"]) == 2  # 1 refused + 1 accepted, none after


def test_slurm_answers_for_its_nodes_liveness(slurm):
    fake, backend = slurm
    backend.sync_nodes(at(10))
    assert Node.objects.get(name="gpn1").last_heartbeat == at(10)
    backend.sync_nodes(at(12))  # at most every 5 s
    assert Node.objects.get(name="gpn1").last_heartbeat == at(10)
    fake.nodes["gpn2"]["state"] = "down"
    backend.sync_nodes(at(16))
    assert Node.objects.get(name="gpn1").last_heartbeat == at(16)
    assert Node.objects.get(name="gpn2").last_heartbeat == at(10)  # down in Slurm: no heartbeat


TOPOLOGY = Path(__file__).parent / "topology.conf"


def test_the_clusters_topology_conf_becomes_the_domain_tree(slurm, tmp_path):
    from gpuplatform.models import Domain

    fake, _ = slurm
    conf = tmp_path / "topology.conf"
    conf.write_text(TOPOLOGY.read_text())
    backend = SlurmBackend(SlurmCLI(fake, partition="gpuplatform"), output_dir=str(tmp_path / "out"),
                           mode="placement", start_timeout=60, jobcomp_file="", flavor="H100",
                           topology_conf=str(conf))
    out = backend.sync_nodes(at(1))
    assert "re-attach node gpn1: - -> leaf1" in out["topology"]
    doms = {d.name: d for d in Domain.objects.filter(name__in=["leaf1", "leaf2", "spine"]).select_related("parent")}
    assert {n: (d.tier, d.parent.name if d.parent else None) for n, d in doms.items()} == \
        {"leaf1": (2, "spine"), "leaf2": (2, "spine"), "spine": (3, None)}
    assert dict(Node.objects.filter(name__startswith="gpn").values_list("name", "domain__name")) == \
        {"gpn1": "leaf1", "gpn2": "leaf2"}  # gpn9 (another partition) skipped
    assert Event.objects.filter(kind="topology_applied").count() == 1
    assert backend.sync_nodes(at(2))["topology"] == []  # unchanged file: nothing applied again
    assert Event.objects.filter(kind="topology_applied").count() == 1
    # Slurm's admin moves gpn2 under leaf1: the next round follows
    conf.write_text(TOPOLOGY.read_text().replace("Nodes=gpn1", "Nodes=gpn[1-2]").replace("Nodes=gpn[2,9]", "Nodes=gpn9"))
    assert "re-attach node gpn2: leaf2 -> leaf1" in backend.sync_nodes(at(3))["topology"]
    assert Node.objects.get(name="gpn2").domain.name == "leaf1"
    # a malformed file changes nothing and is reported once
    conf.write_text("SwitchName=leaf1 Nodes=gpn1\nSwitchName=leaf1 Nodes=gpn2\n")
    backend.sync_nodes(at(4))
    backend.sync_nodes(at(5))
    refused = Event.objects.filter(kind="slurm_topology_refused")
    assert refused.count() == 1 and "topology.conf" in refused.get().message
    assert Node.objects.get(name="gpn2").domain.name == "leaf1"
    # the round itself goes on: nodes still synced (heartbeat recorded)
    assert Node.objects.get(name="gpn1").last_heartbeat == at(5)


# -- heterogeneous gangs: roles of different shapes ----------------------------------------------------------------
@pytest.fixture
def slurm3(cluster, tmp_path):
    fake = FakeSlurm(nodes=("gpn1", "gpn2", "gpn3"), gpus=2)
    backend = SlurmBackend(SlurmCLI(fake, partition="gpuplatform"), output_dir=str(tmp_path / "out"),
                           mode="placement", start_timeout=60, jobcomp_file="", flavor="H100")
    backend.sync_nodes(T0)
    return fake, backend


def launcher_and_workers(submit):
    """A launcher role (1 task, 1 GPU) bound on gpn1 GPU 1 and a worker role (2 tasks, 2 GPUs each) on gpn2, gpn3."""
    job = submit("het", roles=[{"name": "launcher", "tasks": 1, "gpus_per_task": 1},
                               {"name": "worker", "tasks": 2, "gpus_per_task": 2}])
    tasks = (TaskPlacement("launcher", 0, "gpn1", (1,)), TaskPlacement("worker", 0, "gpn2", (0, 1)),
             TaskPlacement("worker", 1, "gpn3", (0, 1)))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=T0,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale
    return job


def test_a_gang_whose_roles_differ_runs_as_one_heterogeneous_slurm_job(slurm3, submit):
    fake, backend = slurm3
    job = launcher_and_workers(submit)
    assert backend.sync(at(1)).submitted == [job.pk]
    leader = fake.only(f"gpp-{job.pk}-a0")
    parts = fake.components(leader)
    assert [(p["requested"], p["het_job_offset"]) for p in parts] == [("gpn1", 0), ("gpn2,gpn3", 1)]
    gres = [re.search(r"^#SBATCH --gres=(.*)$", fake.scripts[str(p["job_id"])], re.M).group(1) for p in parts]
    assert gres == ["gpu:1", "gpu:2"]
    job.refresh_from_db()
    assert job.slurm_job_id == leader
    ev = Event.objects.get(job=job, kind="slurm_submitted")
    assert "heterogeneous job of 2 components" in ev.message and len(ev.data["components"]) == 2

    # Slurm starts both components; on gpn1 it picks GPU 0 (the plan said 1)
    fake.set_state(leader, "RUNNING", gpus={0: ["gpu:1(IDX:0)"]})
    d = out_dir(backend, job)
    launcher, w0, w1 = sorted(tasks_of(job), key=lambda t: (t.role.name != "launcher", t.index))
    for t in (launcher, w0, w1):
        (d / f"task-{t.pk}.started").write_text("4242\n")
    stats = backend.sync(at(2))
    assert stats.started == 3 and stats.orphans_cancelled == []  # the second component is no orphan
    job.refresh_from_db()
    assert job.state == "running"
    assert sorted(Allocation.objects.filter(job=job, released_at__isnull=True)
                  .values_list("task__role__name", "gpu__node__name", "gpu__index")) == \
        [("launcher", "gpn1", 0), ("worker", "gpn2", 0), ("worker", "gpn2", 1), ("worker", "gpn3", 0),
         ("worker", "gpn3", 1)]

    # cancel: TERM to the leader (every component's step), then the kill and scancel of the leader
    services.cancel_job(job)
    backend.sync(at(3))
    assert fake.commands("scancel") == [f"scancel --signal=TERM {leader}"]
    job.refresh_from_db()
    backend.sync(job.preempt_deadline + timedelta(seconds=1))
    assert fake.commands("scancel")[1:] == [f"scancel --signal=KILL {c}.0" for c in sorted(
        str(p["job_id"]) for p in fake.components(leader))] + [f"scancel {leader}"]  # each component's step
    assert {p["job_state"] for p in fake.components(leader)} == {"CANCELLED"}
    backend.sync(job.preempt_deadline + timedelta(seconds=2))
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert {t.exit_signal for t in tasks_of(job)} == {9}


def test_a_lost_node_in_one_component_requeues_the_whole_heterogeneous_gang(slurm3, submit):
    fake, backend = slurm3
    job = launcher_and_workers(submit)
    backend.sync(at(1))
    leader = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(leader, "RUNNING")
    backend.sync(at(2))
    # Slurm ends the worker component NODE_FAIL and cancels the launcher's with it
    first, second = fake.components(leader)
    first["job_state"], second["job_state"] = "CANCELLED", "NODE_FAIL"
    backend.sync(at(3))
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1 and job.restarts == 0
    assert Event.objects.filter(job=job, kind="node_failed", message__contains="NODE_FAIL").exists()


def test_admission_mode_records_where_slurm_put_each_component(slurm3, submit):
    fake, backend = slurm3
    backend.mode = "admission"
    job = launcher_and_workers(submit)  # planned: launcher on gpn1, workers on gpn2 and gpn3
    backend.sync(at(1))
    leader = fake.only(f"gpp-{job.pk}-a0")
    assert all(not p["requested"] for p in fake.components(leader))  # no --nodelist: Slurm decides where
    fake.set_state(leader, "RUNNING", nodes={0: ["gpn3"], 1: ["gpn1", "gpn2"]},
                   gpus={0: ["gpu:1(IDX:1)"], 1: ["gpu:2(IDX:0-1)", "gpu:2(IDX:0-1)"]})
    backend.sync(at(2))
    placed = {(t.role.name, t.index): t.node.name for t in tasks_of(job)}
    assert placed == {("launcher", 0): "gpn3", ("worker", 0): "gpn1", ("worker", 1): "gpn2"}
    assert sorted(Allocation.objects.filter(job=job, released_at__isnull=True, task__role__name="launcher")
                  .values_list("gpu__node__name", "gpu__index")) == [("gpn3", 1)]
    ev = Event.objects.get(job=job, kind="slurm_placement")
    assert {c["node"] for c in ev.data["changes"]} == {"gpn3", "gpn1", "gpn2"}
    assert all(c["recorded"] for c in ev.data["changes"])
