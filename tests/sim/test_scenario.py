"""ScenarioRunner runs test worlds on the simulator's own state (scheduler.sim.state.ClusterState)."""
import subprocess
import sys

from scheduler.core.testing import World, role
from scheduler.sim.scenario import ScenarioRunner


def test_runner_is_reexported_by_the_test_builders_without_core_importing_sim():
    import scheduler.core.testing as testing

    assert testing.ScenarioRunner is ScenarioRunner
    code = "import sys, scheduler.core.testing; assert not any(m.startswith('scheduler.sim') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_running_jobs_keep_their_cpu_across_cycles():
    """The state counts a running task's CPU on its node in every later snapshot, so a job that fits the
    node's GPUs but not its remaining CPU waits until the first one ends."""
    world = (World().node(name="n1", gpus=4, cpu_milli=8000)
             .job(name="a", roles=[role(gpus_per_task=1, cpu_milli=6000)], submit=0, duration=30)
             .job(name="b", roles=[role(gpus_per_task=1, cpu_milli=4000)], submit=10, duration=30))
    runner = ScenarioRunner(world).run(until=60, every=10)
    assert runner.started == {"a": 0, "b": 30} and runner.finished == {"a": 30, "b": 60}


def test_partial_eviction_releases_the_surplus_task_while_the_job_runs_on():
    """An evicted surplus task holds its GPUs as a releasing job for the grace period; the rest of its gang
    stays running (as the platform shows it), and the beneficiary starts once they are released."""
    world = (World().node(name="n1", gpus=4)
             .queue(name="a", quota={"H100": 2}).queue(name="b", quota={"H100": 2})
             .running(name="elastic", queue="a", nodes=["n1"] * 4, gpus_per_task=1, min_available=2)
             .job(name="owner", queue="b", tasks=1, gpus_per_task=2, submit=0))
    runner = ScenarioRunner(world, grace=20).run(until=10, every=10)
    (ev,) = runner.evictions
    assert ev.job_id == "elastic" and len(ev.tasks) == 2
    assert len(runner.running["elastic"].placement) == 2
    releasing = [j for j in runner.state.running.values() if j.state == "preempting"]
    assert [len(j.placement) for j in releasing] == [2] and "owner" in runner.pending
    runner.run(start=20, until=30, every=10)
    assert runner.started["owner"] == 20 and len(runner.running["elastic"].placement) == 2
