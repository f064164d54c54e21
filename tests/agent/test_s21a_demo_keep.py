"""New-user trial 21, F4, end to end: `manage.py demo --local-agents 1` killed with SIGKILL while its task runs, then
started again with --keep. Before the fix the new agents had lost their task records (start_agents removed them) and
started the kept running task a second time ("server did not accept started of task ...: task is running, not bound",
and that copy ran on). Now the agent reports how the task ended with its old agent, never starts it again, and when
the demo stops nothing of it is left. Real processes on a SQLite file in tmp_path, checked through /proc."""
from __future__ import annotations

import re
import signal

from tests.agent.proc_helpers import wait_for
from tests.agent.test_demo_processes import Demo, _call, _processes_under, _task_processes, demo_dir  # noqa: F401
from tests.agent.test_demo_processes import pytestmark  # noqa: F401  (Linux only)


def test_a_killed_local_demo_restarted_with_keep_does_not_start_its_running_task_again(demo_dir):
    tmp, made = demo_dir
    root = tmp / "agents"
    first = Demo(tmp, "--local-agents", "1")
    made.append(first)
    first.wait_up()
    job = first.submit()
    wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes")
    first.proc.kill()  # kill -9 of the demo
    first.proc.wait()
    wait_for(lambda: not _processes_under(root), 20, "the agent and its task to end with the demo")

    second = Demo(tmp, "--local-agents", "1", "--keep")
    made.append(second)
    second.wait_up()
    token = _call(f"{second.api}/api/v1/auth-token/", form={"username": "demo", "password": "pw-demo-123"})["token"]

    def ended():
        state = _call(f"{second.api}/api/v1/jobs/{job}/", token)["state"]
        return state if state not in ("admitted", "running", "preempting") else None

    state = wait_for(ended, 60, "the kept job's end to be reported", 0.5)
    body = _call(f"{second.api}/api/v1/jobs/{job}/", token)
    # its agent kept its record and reported how it ended (not "no record of starting it"): stopped by its supervisor
    # because the agent exited (--stop-tasks-on-exit), a platform fault: the gang is requeued (backoff), no restart
    # spent, the attempt diagnosed platform:agent_exited (trial 21: it read "failed", killed by signal 15)
    (first_attempt,) = body["attempts"]
    diagnosis = first_attempt["diagnosis"]
    assert (diagnosis["rule"], diagnosis["node"]) == ("platform:agent_exited", "local-0"), first_attempt
    assert "no record" not in repr(diagnosis), diagnosis
    log = (root / "local-0.log").read_text(errors="replace")
    starts = re.findall(r"started task (\d+-\d+) ", log)
    assert len(starts) == 1, (starts, log[-3000:])  # the first run's start only
    assert "did not accept started" not in log, log[-3000:]
    # its processes ended with the killed demo: reported, not run again (attempt 1 waits for its backoff)
    assert (state, body["restarts"], body["attempt"]) == ("pending", 0, 1), body
    assert not _task_processes(root), _task_processes(root)  # no second copy runs
    second.proc.send_signal(signal.SIGINT)
    second.proc.wait(timeout=60)
    assert not _processes_under(root), _processes_under(root)
    assert "every process it started is gone, checked" in second.output()
