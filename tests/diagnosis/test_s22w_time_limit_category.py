"""New-user trial 22, F7: a job failed by its own time limit was diagnosed `category: platform`, though the user set
the limit (time_limit_seconds). The platform still stops it, and the evidence is still the platform's own event
(rule `platform:time_limit`, never logs), but the cause is the user's side: `user_error`, with `cancel_retries`
(the job ends, as Slurm's TIMEOUT). A preemption and a gang start timeout stay `platform`; a cancel is `cancelled` (trial 23)."""
from __future__ import annotations

from gpuplatform.diagnosis import engine
from gpuplatform.models import Attempt, Event, Job
from tests.platform.conftest import alpha, cluster, submit  # noqa: F401  (fixtures)
from tests.platform.test_execution import EIGHT, agents, at, bind, report, start_all, tasks_of  # noqa: F401


def test_a_time_limit_is_the_users_side_and_the_other_platform_stops_are_not():
    none = engine.RuleSet(version="", rules=())
    tasks = [engine.TaskEvidence("worker[0]", "n1", 10.0, signal=15, own_end=False,
                                 log="RuntimeError: CUDA error: an illegal memory access was encountered\n")]
    d = engine.diagnose(tasks, rules=none, platform={"cause": "time_limit", "text": "time limit of 600 s reached"})
    assert (d.category, d.rule, d.action) == ("user_error", "platform:time_limit", "cancel_retries")
    assert d.evidence[0]["source"] == "event" and d.node is None
    assert "user_error" not in engine.NODE_FAULT_CATEGORIES  # never charged to the node it ran on
    for cause in ("preempted", "gang_start_timeout"):
        assert engine.diagnose(tasks, rules=none, platform={"cause": cause, "text": "x"}).category == "platform", cause


def test_a_job_stopped_by_its_time_limit_is_recorded_as_the_users_side(submit, agents):
    """Through the lifecycle: the cycle stops the job at its limit, the SIGKILL ends it; the attempt, its
    `diagnosed` event say user_error, rule platform:time_limit."""
    from gpuplatform.scheduling import store

    job = submit("capped", tasks=1, gpus=8, time_limit_seconds=600)
    bind(job, ("n0", EIGHT))
    start_all(job, 0)
    store.run_cycle_once(clock=at(610))
    assert report(tasks_of(job)[0], "exited", 640, signal=9) == (True, "")
    assert Job.objects.get(pk=job.pk).state == "failed"
    a = Attempt.objects.get(job=job, number=0)
    assert (a.category, a.diagnosis["category"], a.diagnosis["rule"]) == ("user_error", "user_error",
                                                                           "platform:time_limit")
    assert Event.objects.filter(job=job, kind="diagnosed").get().data["category"] == "user_error"
