"""The Slurm backend against a real Slurm (Debian's munge, slurmctld and two `slurmd -N` on loopback ports,
started by gpuplatform.slurm.local.LocalSlurm): gangs the platform binds run as Slurm jobs whose processes
slurmd starts, watches and kills. Marked `services`: skipped without Slurm (or PostgreSQL/Redis) on a
laptop, FAILS in CI (CI=1), where .ci/run installs and starts what is missing. Needs root (slurmd).

Each test drives the backend's rounds (SlurmBackend.sync, what `manage.py slurm_backend` loops) in this
process until what it checks has happened; the cluster clock is wall time."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from gpuplatform import clock, services
from gpuplatform.execution import enforce_time_limits
from gpuplatform.models import Event, Job, Node, SchedulerCycle, Task, TaskLog
from gpuplatform.scheduling import store
from gpuplatform.slurm.backend import SlurmBackend
from gpuplatform.slurm.cli import SlurmCLI, SubprocessRunner
from gpuplatform.slurm.local import LocalSlurm, SlurmSetupError, slurm_installed
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

pytestmark = pytest.mark.services


def need_slurm() -> None:
    """Skip without Slurm (or root, for slurmd) on a laptop; fail under CI=1, where .ci/run installs it."""
    missing = slurm_installed()
    problem = f"Slurm is not installed (missing {', '.join(missing)})" if missing else None
    if not problem and os.geteuid() != 0:
        problem = "slurmd needs root"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and Slurm is missing: {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="module")
def local_slurm(tmp_path_factory):
    need_slurm()
    ls = LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=("gpn1", "gpn2"), gpus=2, cpus=4, slurmd_timeout=6)
    try:
        ls.start()
    except SlurmSetupError as exc:
        ls.stop()
        pytest.fail(str(exc))
    yield ls
    ls.stop()


@pytest.fixture
def backend(local_slurm, db, tmp_path):
    from tests.platform.helpers_platform import small_spec

    from gpuplatform.models import Queue

    services.load_cluster_spec(small_spec())  # teams and queues (its own simulated nodes are not used)
    Queue.objects.update(preemption_grace_seconds=3)  # stops: SIGTERM, SIGKILL 3 s later
    for n in local_slurm.nodes:  # every node back in service (an earlier test may have drained or killed one)
        if local_slurm._procs.get(f"slurmd-{n}") is None:
            local_slurm.start_slurmd(n)
        local_slurm.run("scontrol", "update", f"nodename={n}", "state=resume")
    local_slurm.wait_idle(local_slurm.nodes, 60)
    be = SlurmBackend(SlurmCLI(SubprocessRunner(str(local_slurm.conf)), partition="gpuplatform"),
                      output_dir=str(tmp_path / "out"), mode="placement", start_timeout=60,
                      jobcomp_file=str(local_slurm.jobcomp), flavor="H100")
    be.sync_nodes(clock.now())
    return be


def submit(name, command, tasks=2, gpus=1, **kw):
    from gpuplatform.models import Queue, Team

    return services.submit_job(command=command, team=Team.objects.get(name="alpha"),
                               queue=Queue.objects.get(name="alpha"), name=name,
                               roles=[{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}], **kw)


def bind(job, *placements):
    tasks = tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=clock.now(),
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale


def drive(backend, until, timeout=40.0, what=""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        backend.sync()
        if until():
            return
        time.sleep(0.3)
    raise AssertionError(f"not reached within {timeout} s: {what}")


def state(job) -> str:
    return Job.objects.get(pk=job.pk).state


def log_of(task) -> str:
    return "".join(TaskLog.objects.filter(task=task).order_by("offset").values_list("data", flat=True))


PRINT_ENV = ["bash", "-c", "echo node=$SLURMD_NODENAME rank=$RANK node_rank=$NODE_RANK local=$LOCAL_RANK "
                           "world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT job=$GPUPLATFORM_JOB_ID "
                           "idx=$GPUPLATFORM_TASK_INDEX slurm=$SLURM_JOB_ID cuda=$CUDA_VISIBLE_DEVICES"]


def test_a_two_node_gang_runs_on_exactly_the_chosen_nodes_with_each_ranks_variables(backend):
    job = submit("ddp", PRINT_ENV)
    bind(job, ("gpn2", (0,)), ("gpn1", (1,)))  # worker 0 on gpn2, worker 1 on gpn1
    drive(backend, lambda: state(job) == "succeeded", what="the gang succeeds")
    job.refresh_from_db()
    t0, t1 = Task.objects.filter(job=job).order_by("index")
    lines = {t.index: dict(kv.split("=", 1) for kv in log_of(t).split()) for t in (t0, t1)}
    assert lines[0]["node"] == "gpn2" and lines[1]["node"] == "gpn1"  # exactly where the cycle put them
    assert lines[0]["slurm"] == lines[1]["slurm"] == job.slurm_job_id != ""
    # Slurm's node order is gpn1, gpn2: rank 0 is on gpn1 (the step's first node, MASTER_ADDR)
    assert (lines[1]["rank"], lines[1]["node_rank"], lines[0]["rank"], lines[0]["node_rank"]) == ("0", "0", "1", "1")
    assert lines[0]["world"] == lines[1]["world"] == "2" and lines[0]["local"] == lines[1]["local"] == "0"
    assert lines[0]["master"] == lines[1]["master"] and lines[0]["master"].startswith("127.0.0.1:")
    assert lines[0]["job"] == str(job.pk) and lines[0]["idx"] == "0" and lines[1]["idx"] == "1"
    assert lines[0]["cuda"] in ("0", "1") and lines[1]["cuda"] in ("0", "1")
    assert {t.state for t in (t0, t1)} == {"succeeded"}


def test_exit_3_in_one_task_fails_the_gang_with_that_code(backend):
    job = submit("bad", ["bash", "-c", 'if [ "$GPUPLATFORM_TASK_INDEX" = 1 ]; then sleep 1; exit 3; fi; sleep 120'])
    bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    drive(backend, lambda: state(job) in ("failed", "succeeded"), timeout=60, what="the gang fails")
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 3 and job.failed_task == "worker[1]"
    other = Task.objects.get(job=job, index=0)
    assert other.exit_signal == 15, (other.state, other.exit_code, other.end_message)  # the other rank was stopped with SIGTERM by scancel --signal=TERM


def _processes_with(marker: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                continue
    return pids


def cancel_and_expect_no_process(backend, job, marker: str) -> None:
    """Cancel the job, wait until it reads cancelled, then up to 15 s for every process named with `marker`
    to be gone; none may be left."""
    services.cancel_job(job)
    drive(backend, lambda: state(job) == "cancelled", timeout=90, what="cancelled")
    end = time.monotonic() + 15
    while _processes_with(marker) and time.monotonic() < end:
        time.sleep(0.3)
    assert _processes_with(marker) == []


def test_cancel_leaves_no_process_behind(backend):
    marker = f"gpp-marker-{os.getpid()}-{time.monotonic_ns()}"
    # a task that ignores SIGTERM and leaves a grandchild: only the KILL at the deadline ends it
    job = submit("c", ["bash", "-c", f"trap '' TERM; (exec -a {marker} sleep 300) & exec -a {marker}-main sleep 300"],
                 tasks=1)
    bind(job, ("gpn1", (0,)))
    drive(backend, lambda: state(job) == "running" and len(_processes_with(marker)) >= 2, what="it runs")
    cancel_and_expect_no_process(backend, job, marker)


def test_a_time_limit_ends_as_time_limit(backend):
    job = submit("tl", ["sleep", "120"], tasks=1, time_limit_seconds=2)
    bind(job, ("gpn2", (0,)))
    drive(backend, lambda: state(job) == "running", what="it runs")
    time.sleep(2.5)
    assert enforce_time_limits(clock.now()) == [job.pk]  # the release step of the cycle
    drive(backend, lambda: state(job) == "failed", what="it ends")
    job.refresh_from_db()
    assert job.end_reason.startswith("time limit")
    assert Task.objects.get(job=job).exit_signal == 15


def test_a_slurmd_killed_mid_run_gives_node_fail_and_the_gang_runs_again_on_the_other_node(backend, local_slurm):
    job = submit("nf", ["bash", "-c", "echo attempt=$GPUPLATFORM_ATTEMPT on $SLURMD_NODENAME; sleep $((30 - 27 * GPUPLATFORM_ATTEMPT))"], tasks=1)
    bind(job, ("gpn2", (0,)))
    drive(backend, lambda: state(job) == "running", what="it runs")
    local_slurm.kill_slurmd("gpn2")
    drive(backend, lambda: state(job) == "pending", timeout=60, what="NODE_FAIL requeues it")
    job.refresh_from_db()
    assert job.attempts == 1 and job.restarts == 0
    assert Event.objects.filter(job=job, kind="node_failed", message__contains="NODE_FAIL").exists(), list(Event.objects.filter(job=job).values_list("kind", "message"))
    assert Node.objects.get(name="gpn2").state == "draining"  # down in Slurm: drained here with Slurm's reason
    assert Node.objects.get(name="gpn2").health_reason.startswith("Slurm: ")
    bind(job, ("gpn1", (0,)))  # what the next cycle does: gpn2 takes no work
    drive(backend, lambda: state(job) == "succeeded", what="attempt 1 succeeds on gpn1")
    assert "attempt=1 on gpn1" in log_of(Task.objects.get(job=job))


def test_a_node_drained_in_slurm_shows_drained_here(backend, local_slurm):
    local_slurm.run("scontrol", "update", "nodename=gpn1", "state=drain", "reason=fan failure")
    backend.sync()
    node = Node.objects.get(name="gpn1")
    assert node.state == "draining" and node.health_reason == "Slurm: fan failure"


def test_admission_mode_records_slurms_placement(backend, local_slurm):
    blocker = local_slurm.run("sbatch", "--parsable", "--partition=gpuplatform", "--nodelist=gpn1", "-N1",
                              "--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 60").stdout.strip()
    try:
        backend.mode = "admission"
        job = submit("adm", ["bash", "-c", "echo on $SLURMD_NODENAME; sleep 1"], tasks=1)
        bind(job, ("gpn1", (0,)))  # the platform's plan; Slurm decides where (gpn1's GPUs are all taken there)
        drive(backend, lambda: state(job) == "succeeded", what="it runs where Slurm put it")
        task = Task.objects.get(job=job)
        assert "on gpn2" in log_of(task)
        assert task.node.name == "gpn2"  # Slurm's placement recorded
        ev = Event.objects.get(job=job, kind="slurm_placement")
        assert ev.data["changes"][0]["node"] == "gpn2" and ev.data["changes"][0]["recorded"]
    finally:
        local_slurm.run("scancel", blocker)


def test_a_backend_restarted_mid_run_finds_its_jobs(backend):
    job = submit("r", ["bash", "-c", "sleep 3; echo done"], tasks=1)
    bind(job, ("gpn1", (0,)))
    drive(backend, lambda: state(job) == "running", what="it runs")
    slurm_id = Job.objects.get(pk=job.pk).slurm_job_id
    fresh = SlurmBackend(backend.cli, output_dir=str(backend.output_dir), mode="placement", start_timeout=60,
                         jobcomp_file=backend.jobcomp_file, flavor="H100")
    drive(fresh, lambda: state(job) == "succeeded", what="the new backend sees it end")
    job.refresh_from_db()
    assert job.slurm_job_id == slurm_id
    assert Event.objects.filter(job=job, kind="slurm_submitted").count() == 1
    assert "done" in log_of(Task.objects.get(job=job))


def test_a_cordon_here_drains_the_node_in_slurm_and_uncordon_resumes_it(backend, local_slurm):
    services.cordon_node(Node.objects.get(name="gpn2"), reason="maintenance")
    backend.sync()

    def slurm_node():
        line = local_slurm.run("sinfo", "-h", "-N", "-n", "gpn2", "-o", "%T|%E").stdout.strip()
        return line.split("|", 1)

    state, reason = slurm_node()
    assert state.startswith("drain") and reason.startswith("gpuplatform: ")
    assert Node.objects.get(name="gpn2").state == "cordoned"  # our own drain does not come back as Slurm's
    services.uncordon_node(Node.objects.get(name="gpn2"))
    backend.sync()
    assert slurm_node()[0].startswith("idle")  # no longer drained ("idle*": not responding yet, after a restart)


def test_a_gang_whose_roles_differ_runs_as_one_heterogeneous_job_and_cancel_leaves_no_process(backend):
    from gpuplatform.models import Queue, Team

    marker = f"gpp-het-{os.getpid()}-{time.monotonic_ns()}"
    # a launcher role (1 task, 1 GPU) and a worker role (2 tasks, 1 GPU each): node shapes (1 task, 1 GPU) and
    # (2 tasks, 2 GPUs) -> two components. Each task prints its variables, then ignores SIGTERM with a grandchild
    command = ["bash", "-c", PRINT_ENV[2] + " role=$GPUPLATFORM_ROLE lws=$LOCAL_WORLD_SIZE "
               "leader=$SLURM_JOB_ID_HET_GROUP_0; "
               f"trap '' TERM; (exec -a {marker} sleep 300) & exec -a {marker}-main sleep 300"]
    job = services.submit_job(command=command, team=Team.objects.get(name="alpha"),
                              queue=Queue.objects.get(name="alpha"), name="het", roles=[{"name": "launcher", "tasks": 1, "gpus_per_task": 1},
                                                 {"name": "worker", "tasks": 2, "gpus_per_task": 1}])
    placements = (TaskPlacement("launcher", 0, "gpn2", (1,)), TaskPlacement("worker", 0, "gpn1", (0,)),
                  TaskPlacement("worker", 1, "gpn1", (1,)))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, placements, "", 0)]), clock=clock.now(),
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale
    tasks = sorted(Task.objects.filter(job=job), key=lambda t: (t.role.name != "launcher", t.index))
    drive(backend, lambda: state(job) == "running" and all("leader=" in log_of(t) for t in tasks)
          and len(_processes_with(marker)) >= 6, timeout=60, what="every rank runs and has printed")
    job.refresh_from_db()
    het = {j.job_id: j for j in backend.cli.jobs()}[job.slurm_job_id]
    assert [(c.node_list, c.het_job_offset) for c in het.components] == [(["gpn2"], 0), (["gpn1"], 1)]  # one hetjob
    lines = [dict(kv.split("=", 1) for kv in log_of(t).split()) for t in tasks]
    launcher, w0, w1 = lines
    assert [x["node"] for x in lines] == ["gpn2", "gpn1", "gpn1"]  # exactly where the cycle put them
    assert {x["leader"] for x in lines} == {job.slurm_job_id}  # one Slurm job, seen from every component
    assert [x["role"] for x in lines] == ["launcher", "worker", "worker"] and [w0["idx"], w1["idx"]] == ["0", "1"]
    # one step across the gang: the launcher's component first, so it is rank 0 and the rendezvous node
    assert (launcher["rank"], launcher["node_rank"], launcher["local"], launcher["lws"]) == ("0", "0", "0", "1")
    assert sorted((w["rank"], w["local"]) for w in (w0, w1)) == [("1", "0"), ("2", "1")]
    assert {w["node_rank"] for w in (w0, w1)} == {"1"} and {w["lws"] for w in (w0, w1)} == {"2"}
    assert {x["world"] for x in lines} == {"3"} and len({x["master"] for x in lines}) == 1
    assert {w0["cuda"], w1["cuda"]} == {"0", "1"}  # each worker its own GPU of gpn1's two
    cancel_and_expect_no_process(backend, job, marker)
    assert {c.state for c in {j.job_id: j for j in backend.cli.jobs()}[job.slurm_job_id].components} == {"CANCELLED"}
