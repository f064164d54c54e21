"""Trial 20, F10: a gang broken by a fault keeps the GPUs of its survivors until their processes end.

A gang requeued at once (a task failed with restarts left; a node lost under it; a node lost before it started; a
GPU failed under it) released its GPUs on the healthy nodes while the agents there were still stopping its
processes (SIGTERM, SIGKILL after the stop grace): the scheduler and the quota counted those GPUs free and bound
another job there, which then waited on the agent. Now the gang goes preempting toward its restart ("restart") or
requeue ("recover") at the fault, its survivors are told to stop with the agents' stop grace, tasks on a lost node
are counted ended at once, and it is requeued when the last survivor's process ends or at the deadline, its backoff
counted from the fault. A job run without agents is requeued at once, as before. docs/execution.md, "Faults".
"""
from __future__ import annotations

from gpuplatform import services
from gpuplatform.execution import expire_stops
from gpuplatform.lifecycle import evict_job
from gpuplatform.models import Attempt, Event, Job, Queue, Task, Team
from gpuplatform.queries import queue_usage
from gpuplatform.scheduling import store
from gpuplatform.scheduling.failures import detect_failures
from tests.platform.test_execution import (  # noqa: F401  (agents: a fixture)
    EIGHT, SLEEP, agents, assignments, at, bind, live, report, start_all, tasks_of,
)


def beta_job(name="other", tasks=1, gpus=8):
    team, queue = Team.objects.get(name="beta"), Queue.objects.get(name="beta")
    return services.submit_job(command=SLEEP, team=team, queue=queue, name=name,
                               roles=[{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}])


def used(queue: str) -> float:
    return next(u.used for u in queue_usage() if u.queue == queue)


def beat(*names, t: float) -> None:
    for name in names:
        services.record_heartbeat(name, gpus=[], at=at(t))


def test_a_failed_task_with_restarts_left_keeps_the_survivors_gpus_until_their_process_ends(submit, agents):
    job = submit("gang", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    filler = submit("filler", tasks=2, gpus=8)  # n2 and n3 are busy: only the gang's GPUs could take another job
    bind(filler, ("n2", EIGHT), ("n3", EIGHT))
    start_all(job)
    start_all(filler)
    other = beta_job()
    t0, t1 = tasks_of(job)
    assert report(t1, "exited", 50, exit_code=1) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "restart", at(80))
    stop = assignments("n0", 51)[t0.pk]  # stopped at once: SIGTERM now, SIGKILL at the agents' stop grace
    assert (stop["action"], stop["stop_deadline"]) == ("stop", at(80).isoformat())
    assert len(live(job)) == 16 and used("alpha") == 32  # the quota counts them while the process runs
    store.run_cycle_once(clock=at(55))
    assert Job.objects.get(pk=other.pk).state == "pending"  # nothing free for it: worker[0] still runs on n0
    assert not Event.objects.filter(job=job, kind="restarted").exists()

    assert report(t0, "exited", 60, signal=15) == (True, "")  # the survivor quit on SIGTERM
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 1, 1, at(110))  # backoff from 50
    assert live(job) == [] and used("alpha") == 16
    restarted = Event.objects.get(job=job, kind="restarted")
    assert restarted.time == at(60) and restarted.data["not_before"] == at(110).isoformat()
    a = Attempt.objects.get(job=job, number=0)
    assert (a.fault_at, a.ended_at, a.failed_task, a.exit_code) == (at(50), at(60), "worker[1]", 1)
    assert Task.objects.filter(job=job, state="failed").count() == 0  # reset for attempt 1
    store.run_cycle_once(clock=at(61))
    assert Job.objects.get(pk=other.pk).state == "admitted"  # now the GPUs are free


def test_the_survivor_of_a_restart_is_released_not_failed(submit, agents):
    """Its end in the stop's grace (SIGTERM, exit 143) is the platform's stop, not its own failure: the attempt's
    failed task stays the one that failed."""
    job = submit("gang", tasks=3, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT), ("n2", EIGHT))
    start_all(job)
    t0, t1, t2 = tasks_of(job)
    report(t2, "exited", 50, exit_code=1)
    report(t0, "exited", 52, exit_code=143)
    t0.refresh_from_db()
    assert (t0.state, t0.exit_code, t0.ended_at) == ("released", 143, at(52))
    assert Job.objects.get(pk=job.pk).state == "preempting" and len(live(job)) == 24  # worker[1] still runs
    report(t1, "exited", 53, signal=15)
    a = Attempt.objects.get(job=job, number=0)
    assert (a.failed_task, a.exit_code) == ("worker[2]", 1)
    assert Job.objects.get(pk=job.pk).state == "pending"


def test_a_lost_node_under_a_running_gang_stops_the_survivor_and_requeues_at_its_end(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)  # n0 went silent at 0; n1 still beats
    found = detect_failures(at(190))  # 60 + 120 s: n0 failed
    assert (found.stopping, found.requeued) == ([job.pk], [])
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "recover", at(220))
    t0, t1 = tasks_of(job)
    assert (t0.state, t1.state) == ("released", "running")  # n0's task is counted ended: its node cannot report
    assert t0.end_message.startswith("node n0 lost (not ready, no heartbeat since 12:00:00)")
    assert assignments("n1", 191)[t1.pk]["action"] == "stop"
    assert len(live(job)) == 16 and not Event.objects.filter(job=job, kind="requeued_after_failure").exists()
    stopping = Event.objects.get(job=job, kind="stopping")
    assert stopping.data["target"] == "recover" and stopping.data["survivors"] == ["worker[1] on n1"]
    from frontend.job_run import stop_text

    assert stop_text(job).startswith("ends as requeue after a fault by ")  # the job page
    assert "node lost: 1 task(s) failed on n0" in stopping.message

    again = detect_failures(at(195))  # the next pass changes nothing and writes nothing
    assert again.requeued == [] and Event.objects.filter(job=job, kind="stopping").count() == 1

    assert report(t1, "exited", 200, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.attempts, job.restarts, job.not_before) == ("pending", 1, 0, at(250))  # from 190
    assert live(job) == []
    ev = Event.objects.get(job=job, kind="requeued_after_failure")
    assert ev.time == at(200) and ev.data["failed_tasks"] == [["worker", 0, "n0"]] and ev.data["cause"] == "node lost"
    assert ev.data["reason"].startswith("node lost: 1 task(s) failed on n0; the job's other tasks (worker[1] on n1) "
                                        "were stopped with it")
    a = Attempt.objects.get(job=job, number=0)
    assert (a.outcome, a.failed, a.diagnosis["rule"], a.diagnosis["node"]) == ("requeued", True, "platform:node_lost",
                                                                               "n0")
    assert a.fault_at == at(0)  # n0's last heartbeat: recovery counts from there, as before
    store.run_cycle_once(clock=at(250))
    start_all(job, 252)
    a.refresh_from_db()
    assert a.recovery_seconds == 252.0


def test_a_survivor_that_ignores_sigterm_is_waited_for_until_the_deadline_only(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    detect_failures(at(190))
    assert expire_stops(at(219)) == [] and len(live(job)) == 16
    assert expire_stops(at(220)) == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.attempts, job.not_before, live(job)) == ("pending", 1, at(250), [])
    assert job.pending_reason.endswith("the job's other tasks (worker[1] on n1) were stopped with it; those still "
                                       "running at the stop's deadline were killed")
    assert Attempt.objects.get(job=job, number=0).diagnosis["rule"] == "platform:node_lost"


def test_a_gang_whose_every_task_was_on_the_lost_node_is_requeued_at_once(submit, agents):
    job = submit("gang", tasks=2, gpus=4)
    bind(job, ("n0", (0, 1, 2, 3)), ("n0", (4, 5, 6, 7)))
    start_all(job)
    beat("n0", t=0)
    assert detect_failures(at(190)).requeued == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.not_before, live(job)) == ("pending", at(250), [])
    assert not Event.objects.filter(job=job, kind="stopping").exists()


def test_a_lost_node_before_the_gang_started_waits_for_the_rank_running_elsewhere(submit, agents):
    """The F16 path (execution/reports.py): worker[2] never started on n2, silent; worker[0] fails on n0 while
    worker[1] runs on n1: requeued as a lost node (no restart spent) once worker[1] has ended."""
    job = submit("gang", tasks=3, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT), ("n2", EIGHT))
    beat("n0", "n1", "n2", t=0)
    t0, t1, t2 = tasks_of(job)
    assert report(t0, "started", 1, pid=10) == (True, "") and report(t1, "started", 1, pid=11) == (True, "")
    beat("n0", "n1", t=100)
    assert report(t0, "exited", 120, exit_code=3) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.restarts) == ("preempting", "recover", 0) and len(live(job)) == 24
    assert [t.state for t in tasks_of(job)] == ["failed", "running", "released"]
    assert assignments("n1", 121)[t1.pk]["action"] == "stop"
    assert report(t1, "exited", 125, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before, live(job)) == ("pending", 0, 1, at(180), [])
    ev = Event.objects.get(job=job, kind="requeued_after_failure")
    assert ev.data["reason"].startswith("node lost before the gang started: worker[2] never started on n2")
    a = Attempt.objects.get(job=job, number=0)
    assert (a.diagnosis["rule"], a.diagnosis["node"]) == ("platform:node_lost", "n2")


def test_a_gang_without_agents_is_requeued_at_once_as_before(alpha):
    """Simulated nodes (imported inventories, the trace demo): no process to wait for."""
    team, queue = alpha
    job = services.submit_job(command=None, duration_seconds=3600, team=team, queue=queue, name="replayed",
                              roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 8}])
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    assert Job.objects.get(pk=job.pk).state == "running"
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    assert detect_failures(at(190)).requeued == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.attempts, job.not_before, live(job)) == ("pending", 1, at(250), [])
    assert not Event.objects.filter(job=job, kind="stopping").exists()
    assert Event.objects.get(job=job, kind="requeued_after_failure").time == at(190)


def test_a_lost_node_with_a_spare_restarts_the_gang_there_once_the_survivor_ended(submit, agents):
    services.set_spare("n2", True)
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    assert detect_failures(at(190)).stopping == [job.pk]
    assert not Event.objects.filter(kind="restarted_on_spare").exists()  # n1's GPUs are not free yet
    t1 = tasks_of(job)[1]
    assert report(t1, "exited", 195, signal=15) == (True, "")
    job.refresh_from_db()
    assert job.state == "admitted" and job.not_before is None
    assert sorted({t.node.name for t in tasks_of(job)}) == ["n1", "n2"]
    assert Event.objects.get(job=job, kind="restarted_on_spare").time == at(195)


def test_a_cancel_while_the_survivors_stop_ends_the_job_cancelled(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    detect_failures(at(190))
    services.cancel_job(job, at=at(192))
    job.refresh_from_db()
    assert (job.state, job.stop_target) == ("preempting", "cancelled") and len(live(job)) == 16
    report(tasks_of(job)[1], "exited", 194, signal=15)
    job.refresh_from_db()
    assert (job.state, job.attempts, live(job)) == ("cancelled", 0, [])


def test_a_lost_node_under_an_evicted_gang_stops_the_survivor_now(submit, agents):
    """An eviction is a plan until its last 30 s (the agents keep running it); a node lost under it makes it a
    failure: the survivor is stopped now, and the gang requeued with backoff when it has ended."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    evict_job(job.pk, at=at(100), grace_seconds=900, kind="preempted", reason="reclaim", evicted_for=12345)
    assert detect_failures(at(190)).stopping == [job.pk]
    job.refresh_from_db()
    assert (job.stop_target, job.preempt_deadline, job.evicted_for) == ("recover", at(220), None)
    t1 = tasks_of(job)[1]
    assert assignments("n1", 191)[t1.pk]["action"] == "stop"
    report(t1, "exited", 193, signal=15)
    job.refresh_from_db()
    assert (job.state, job.not_before, live(job)) == ("pending", at(250), [])
    assert Event.objects.filter(job=job, kind="requeued_after_failure").exists()


def test_a_gang_start_timeout_waits_for_the_tasks_that_did_start(submit, agents, settings):
    """worker[0] started on n0, worker[1] never did on n1 (its node still beats): at the gang-start timeout the
    started process is stopped and the gang requeued when it has ended, its GPUs held until then."""
    settings.GANG_START_TIMEOUT_SECONDS = 300
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    assert report(t0, "started", 10, pid=10) == (True, "")
    store.run_cycle_once(clock=at(311))
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "recover", at(341))
    assert len(live(job)) == 16
    assert {a["task"]: a["action"] for a in assignments("n0", 312).values()} == {t0.pk: "stop"}
    assert not assignments("n1", 312)  # never started: counted ended (its agent stops it, were it starting now)
    assert Task.objects.get(pk=t1.pk).state == "released"
    assert report(t0, "exited", 313, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.attempts, live(job)) == ("pending", 1, [])
    ev = Event.objects.get(job=job, kind="gang_start_timeout")
    assert ev.time == at(313) and ev.data["not_running"] == [["worker", 1, "n1"]]
    assert Attempt.objects.get(job=job, number=0).diagnosis["rule"] == "platform:gang_start_timeout"


def test_a_gang_start_timeout_with_nothing_started_requeues_at_once(submit, agents, settings):
    settings.GANG_START_TIMEOUT_SECONDS = 300
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    store.run_cycle_once(clock=at(301))
    job.refresh_from_db()
    assert (job.state, job.attempts, live(job)) == ("pending", 1, [])
    assert Event.objects.get(job=job, kind="gang_start_timeout").time == at(301)


def test_a_slurm_gang_restarts_only_once_slurms_job_has_ended(cluster, submit, tmp_path):
    """The Slurm backend (tests/slurm/fake.py): worker[1]'s exit file says 3 with restarts left; the gang is stopped
    (scancel --signal=TERM) and keeps its GPUs while Slurm's job still runs; it restarts when Slurm's job ended
    (the old code requeued it at once and cancelled the Slurm job as no longer listed, its GPUs free meanwhile)."""
    from datetime import timedelta as td

    from gpuplatform.slurm.backend import SlurmBackend
    from gpuplatform.slurm.cli import SlurmCLI
    from tests.slurm.fake import FakeSlurm
    from tests.slurm.test_backend import T0, bind as slurm_bind, finish, tasks_of as slurm_tasks

    fake = FakeSlurm(nodes=("gpn1", "gpn2"), gpus=2)
    backend = SlurmBackend(SlurmCLI(fake, partition="gpuplatform"), output_dir=str(tmp_path / "out"),
                           mode="placement", start_timeout=60, jobcomp_file="", flavor="H100")
    backend.sync_nodes(T0)
    job = submit("flaky", tasks=2, gpus=1, max_restarts=1)
    slurm_bind(job, ("gpn1", (0,)), ("gpn2", (0,)))
    backend.sync(T0 + td(seconds=1))
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING")
    backend.sync(T0 + td(seconds=2))
    t0, t1 = slurm_tasks(job)
    finish(backend, t1, "exit 3")
    backend.sync(T0 + td(seconds=3))
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.restarts) == ("preempting", "restart", 0)
    assert len(live(job)) == 2 and fake.commands("scancel") == [f"scancel --signal=TERM {jid}"]
    fake.set_state(jid, "CANCELLED")  # worker[0] ended on the TERM: Slurm's job is over
    backend.sync(T0 + td(seconds=5))
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, live(job)) == ("pending", 1, 1, [])
    assert job.not_before == T0 + td(seconds=63)  # backoff (60 s) from the failure at 3


def test_a_fatal_xid_requeues_a_task_on_that_gpu_alone_at_once_and_waits_for_one_with_healthy_gpus(submit, agents):
    """XID 79 on n1's GPU 3 (a fail_tasks health rule, in the heartbeat's request): the job whose only GPU it was is
    requeued at once (nothing of it can be offered to another job); the job that also holds GPU 4 keeps it until
    its process has ended."""
    alone = submit("alone", tasks=1, gpus=1)
    bind(alone, ("n1", (3,)))
    wide = submit("wide", tasks=1, gpus=2)
    bind(wide, ("n2", (3, 4)))
    start_all(alone)
    start_all(wide)
    services.record_heartbeat("n1", gpus=[{"index": 3, "health": "healthy", "xids": [79]}], at=at(30))
    services.record_heartbeat("n2", gpus=[{"index": 3, "health": "healthy", "xids": [79]}], at=at(30))
    alone.refresh_from_db()
    wide.refresh_from_db()
    assert (alone.state, live(alone)) == ("pending", [])
    assert (wide.state, wide.stop_target, live(wide)) == ("preempting", "recover", [("n2", 3), ("n2", 4)])
    assert report(tasks_of(wide)[0], "exited", 31, signal=15) == (True, "")
    assert (Job.objects.get(pk=wide.pk).state, live(wide)) == ("pending", [])
