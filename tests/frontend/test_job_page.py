"""The job page's execution parts (docs/execution.md): what the job runs, restarts, a stop in progress, how
it ended, the tasks' exit reports and the log view's markup. Rows are set with the ORM directly."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from frontend import job_run
from gpuplatform.models import Job, JobRole, Task, TaskLog

pytestmark = pytest.mark.django_db

T0 = datetime(2017, 10, 9, 8, 0, tzinfo=timezone.utc)  # the `world` fixture's submit time (conftest.T0)
STATIC = Path(__file__).resolve().parents[2] / "frontend" / "static" / "frontend"


def _page(client, world, job) -> str:
    client.force_login(world["alice"])
    response = client.get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def _failed_job(world):
    """red-running, now failed: worker-1 exited 3, worker-0 was stopped by SIGTERM, with some output."""
    job = world["jobs"]["red-running"]
    role = job.roles.get()
    role.command = ["python3", "train.py", "--name", "run one"]
    role.env = {"NCCL_DEBUG": "INFO", "NOTE": "<b>x</b>"}
    role.working_dir = "/srv/run"
    role.save()
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.FAILED, finished_at=T0 + timedelta(minutes=9), max_restarts=2, restarts=2,
        end_reason="task worker[1] exited with code 3; no restarts left", failed_task="worker[1]", exit_code=3)
    w0, w1 = job.tasks.order_by("index")
    for task, pid, code, sig, message in ((w0, 4242, None, 15, "stopped with the gang"),
                                          (w1, 4243, 3, None, "")):
        task.state = Task.State.FAILED
        task.pid, task.exit_code, task.exit_signal, task.end_message = pid, code, sig, message
        task.started_at, task.ended_at = T0 + timedelta(minutes=2), T0 + timedelta(minutes=8)
        task.save()
    TaskLog.objects.create(task=w1, attempt=2, offset=0, size=13, data="epoch 1 <ok>\n", created_at=T0)
    job.refresh_from_db()
    return job


def test_exit_text_and_signal_names():
    assert job_run.exit_text(3, None) == "exit code 3"
    assert job_run.exit_text(0, None) == "exit code 0"
    assert job_run.exit_text(None, 9) == "signal 9 (SIGKILL)"
    assert job_run.exit_text(None, 200) == "signal 200"
    assert job_run.exit_text(None, None) == ""
    assert job_run.command_line(["python3", "-c", "print('hi there')"]) == "python3 -c 'print('\"'\"'hi there'\"'\"')'"


def test_ended_job_shows_command_env_exit_and_tasks(client, world):
    job = _failed_job(world)
    html = _page(client, world, job)
    end = re.search(r'<p class="error-box" id="job-end">(.*?)</p>', html, re.S).group(1)
    assert "failed: task worker[1] exited with code 3; no restarts left" in end
    assert "failed task <code>worker[1]</code>" in end and "exit code 3" in end
    # What it runs: the command as one pasteable line, env names and values (escaped), the working dir.
    assert "<code class=\"cmd\">python3 train.py --name &#x27;run one&#x27;</code>" in html
    assert "<code>NCCL_DEBUG</code>" in html and "<code>INFO</code>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "<code>/srv/run</code>" in html and "none (a plain process)" in html
    assert '<dd id="job-restarts">2 of 2 used</dd>' in html
    # The tasks table: pid, times, exit code or signal, message; the job's exit status reads the same.
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<tr data-task="\d+"><th scope="row">([\w-]+)</th>(.*?)</tr>',
                                                          html, re.S)}
    assert set(rows) == {"worker-0", "worker-1"}
    assert "4242" in rows["worker-0"] and "signal 15 (SIGTERM)" in rows["worker-0"]
    assert "stopped with the gang" in rows["worker-0"]
    assert "4243" in rows["worker-1"] and '<td class="exit">exit code 3</td>' in rows["worker-1"]
    assert "10-09 08:02:00" in rows["worker-1"] and "10-09 08:08:00" in rows["worker-1"]


def test_log_panel_markup_has_no_inline_script(client, world):
    job = _failed_job(world)
    html = _page(client, world, job)
    tasks = list(job.tasks.order_by("index"))
    panel = html[html.index('<section class="card" id="logs">'):]
    panel = panel[:panel.index("</section>")]
    options = re.findall(r'<option value="(\d+)">([^<]*)</option>', panel)
    assert options == [(str(tasks[0].pk), "worker-0 on node-a"), (str(tasks[1].pk), "worker-1 on node-a")]
    assert f'data-url="/api/v1/jobs/{job.pk}/logs/"' in panel and 'data-interval-ms="2000"' in panel
    assert '<pre id="log-output"' in panel and 'id="log-trimmed"' in panel and "(older output trimmed)" in panel
    assert f'href="#logs" data-log-task="{tasks[1].pk}"' in html
    # The polling lives in static files (a CSP without 'unsafe-inline' keeps working) and writes text nodes.
    assert '<script src="/static/frontend/task_log.js"></script>' in html
    scripts = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert all('type="application/json"' in s for s in scripts), scripts
    js = (STATIC / "task_log.js").read_text()
    assert "innerHTML" not in js and "createTextNode" in js and "gpuplatformPoll" in js
    assert "offset=" in js and "next_offset" in js and "complete" in js and "trimmed" in js
    poll = (STATIC / "poll.js").read_text()
    assert "typeof url === \"function\"" in poll and "stop:" in poll


def test_simulated_job_has_no_log_panel(client, world):
    job = world["jobs"]["blue-done"]
    Job.objects.filter(pk=job.pk).update(simulated=True, duration_seconds=600)
    client.force_login(world["admin"])
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="logs"' not in html and "task_log.js" not in html and "replayed trace workload" in html


def test_roles_that_run_different_things_are_shown_per_role(client, world):
    job = world["jobs"]["red-pending"]
    JobRole.objects.filter(job=job).update(command=["python3", "train.py"], env={"A": "1"})
    evaluator = JobRole.objects.create(job=job, name="eval", tasks=1, gpus_per_task=1, min_available=1,
                                       command=["python3", "eval.py"], image="nvcr.io/nvidia/pytorch:24.05-py3")
    Task.objects.create(job=job, role=evaluator, index=0)
    html = _page(client, world, job)
    runs = html[html.index('id="runs"'):]
    runs = runs[:runs.index("</section>")]
    assert '<h3 class="run-roles">worker</h3>' in runs and '<h3 class="run-roles">eval</h3>' in runs
    assert "python3 train.py" in runs and "python3 eval.py" in runs
    assert "<code>nvcr.io/nvidia/pytorch:24.05-py3</code>" in runs
    # Same command in every role: one block, labelled "all roles".
    evaluator.command, evaluator.env, evaluator.image = ["python3", "train.py"], {"A": "1"}, ""
    evaluator.save()
    runs = _page(client, world, job)
    assert runs.count('class="run-roles"') == 1 and '<h3 class="run-roles">all roles</h3>' in runs


def test_preempting_job_shows_the_stop_in_progress(client, world):
    job = world["jobs"]["red-running"]
    Job.objects.filter(pk=job.pk).update(state=Job.State.PREEMPTING, stop_target="cancelled",
                                         stop_reason="cancelled by alice", preempt_deadline=T0 + timedelta(seconds=30))
    html = _page(client, world, job)
    assert ('<p class="reason-box" role="status" id="job-stop">stopping: ends as cancelled by 2017-10-09 08:00:30 '
            '(cancelled by alice)</p>') in html
    # Without a target (an older row) nothing is claimed about how it ends.
    Job.objects.filter(pk=job.pk).update(stop_target="")
    assert 'id="job-stop"' not in _page(client, world, job)


def test_running_job_after_a_restart_shows_why(client, world):
    job = world["jobs"]["red-running"]
    Job.objects.filter(pk=job.pk).update(max_restarts=3, restarts=1,
                                         end_reason="task worker[0] was killed by signal 9; restarted")
    html = _page(client, world, job)
    assert '<dd id="job-restarts">1 of 3 used</dd>' in html
    assert "<dt>last restart</dt><dd>task worker[0] was killed by signal 9; restarted</dd>" in html
    assert 'id="job-end"' not in html


def test_the_log_views_url_answers_the_signed_in_user(client, world):
    """The page's data-url, as task_log.js calls it (session cookie, no token): the shape it reads."""
    job = _failed_job(world)
    Job.objects.filter(pk=job.pk).update(attempts=2)  # the chunk above is attempt 2's
    html = _page(client, world, job)
    url = re.search(r'data-url="([^"]+)"', html).group(1)
    task = job.tasks.order_by("index")[1]
    answer = client.get(f"{url}?task={task.pk}&limit=65536", HTTP_ACCEPT="application/json").json()
    assert answer["task"] == task.pk and answer["name"] == "worker-1" and answer["attempt"] == 2
    assert answer["data"] == "epoch 1 <ok>\n" and answer["next_offset"] == answer["size"] == 13
    assert answer["complete"] is True and answer["trimmed"] is False
    more = client.get(f"{url}?task={task.pk}&offset=13&limit=65536").json()
    assert (more["data"], more["next_offset"], more["complete"]) == ("", 13, True)


def _run_time(html: str) -> str:
    m = re.search(r'<dd id="job-run-time">(.*?)</dd>', html, re.S)
    assert m, "no run time on the page"
    return re.sub(r"<[^>]+>", "", m.group(1)).strip()


def test_run_time_of_a_real_job_and_the_external_id_label(client, world, monkeypatch):
    """New-user report 7, F22 / F18: a job that is not a replayed trace job shows its run time (started ->
    finished, or started -> now while it runs), and its external_id is labelled as the submitter's own id,
    not a "trace id"."""
    from gpuplatform import clock

    job = world["jobs"]["red-running"]
    Job.objects.filter(pk=job.pk).update(duration_seconds=None, started_at=T0, finished_at=None, external_id="ci-4711")
    monkeypatch.setattr(clock, "now", lambda: T0 + timedelta(minutes=5, seconds=30))
    html = _page(client, world, job)
    assert _run_time(html).startswith("5m") and "since it started" in _run_time(html)
    assert ">trace id<" not in html
    assert ">external id<" in html and "ci-4711 <span class=\"muted small\">(the submitter's own id)" in html
    Job.objects.filter(pk=job.pk).update(state=Job.State.SUCCEEDED, finished_at=T0 + timedelta(hours=1, minutes=2))
    assert _run_time(_page(client, world, job)).startswith("1h 2m") and "started to finished" in _run_time(
        _page(client, world, job))
    Job.objects.filter(pk=job.pk).update(started_at=None, finished_at=None, state=Job.State.PENDING)
    assert _run_time(_page(client, world, job)).startswith("—")
