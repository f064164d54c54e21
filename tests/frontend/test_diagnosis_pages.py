"""The diagnosis on the pages (docs/diagnosis.md), in a real browser: the job page shows why a job failed
with the evidence highlighted in the log view, the failure page draws its charts and its numbers agree with
its JSON, the nodes page filters by health. A job on a node agent's node fails through the agent's report
path (execution.report_task_event / append_log), as in tests/platform/test_diagnosis_attempts.py."""
from __future__ import annotations

import pytest
from django.utils import timezone

from gpuplatform import execution, services
from gpuplatform.models import Attempt, Job, Node, Task, Team
from tests.frontend.test_browser import Page, browser, cluster, login, wait_js  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 1.10 GiB is free.")


def failed_red_job(run_cycle) -> Job:
    Node.objects.update(executor="agent")
    red = Team.objects.get(name="red")
    job = services.submit_job(command=["python3", "train.py"], team=red, queue="red", name="red-oom",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    run_cycle(clock=timezone.now())
    task = Task.objects.select_related("node").get(job=job)
    assert task.node is not None
    execution.report_task_event(task.node, task_id=task.pk, attempt=0, event="started", pid=77)
    text = "".join(f"step {i} loss 2.{i}\n" for i in range(40)) + "Traceback (most recent call last):\n" + OOM + "\n"
    assert execution.append_log(task.node, task_id=task.pk, attempt=0, offset=0, data=text)[0]
    execution.report_task_event(task.node, task_id=task.pk, attempt=0, event="exited", exit_code=1)
    job.refresh_from_db()
    assert job.state == "failed" and Attempt.objects.get(job=job).category == "cuda_oom"
    return job


def test_job_page_shows_the_diagnosis_and_highlights_the_evidence(browser, live_server, cluster):
    job = failed_red_job(cluster["run_cycle"])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go(f"/jobs/{job.pk}/")
    assert page.text_content("#diagnosis-category") == "cuda_oom"
    assert "worker[0]" in page.text_content("#diagnosis-summary")
    assert page.text_content("#diagnosis-action") == "retry"
    mark = page.wait_for_selector("pre#log-output mark.evidence")
    assert mark.text_content() == OOM
    assert page.locator("pre#log-output mark.evidence").count() == 1
    assert "step 39 loss" in page.text_content("pre#log-output")  # the rest of the log is there, unmarked
    assert page.text_content("#attempts tbody tr[data-attempt='0'] td:nth-child(7)").strip() == "cuda_oom"
    p.shot("job-diagnosis")
    p.assert_clean()


def test_failure_page_charts_and_numbers_agree(browser, live_server, cluster):
    job = failed_red_job(cluster["run_cycle"])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/failures/")
    wait_js(page, "document.getElementById('fig-by_category').dataset.points > 0")
    wait_js(page, "document.getElementById('fig-gpu_hours').dataset.points > 0")
    # the bar is drawn (on a category axis; a date axis drew nothing, new-user report 7 F21)
    assert page.evaluate("document.getElementById('fig-gpu_hours')._fullLayout.xaxis.type") == "category"
    wait_js(page, "Array.from(document.querySelectorAll('#fig-gpu_hours .xtick text'))"
                  ".some(function (t) { return t.textContent === 'cuda_oom'; })")
    assert page.locator("#fig-gpu_hours .bars .point").count() == 1
    assert page.text_content("#failed-attempts").strip() == "1 of 1"
    summary = page.evaluate("fetch('/failures/data.json').then(r => r.json())")["summary"]
    lost = Attempt.objects.get(job=job).gpu_seconds / 3600
    assert summary["failed_attempts"] == 1 and abs(summary["gpu_hours_lost"] - round(lost, 3)) < 1e-9
    # Numerically equal (JSON read by the browser turns 0.0 into 0).
    assert float(page.text_content("#gpu-hours-lost").strip()) == summary["gpu_hours_lost"]
    row = page.text_content("#by-category tbody tr")
    assert "cuda_oom" in row and str(summary["gpu_hours_lost"]) in row  # the table says what the summary says
    # a user's OOM is not its node's fault: the nodes table charges no node with it (new-user trial 19, F4)
    assert page.text_content("#failure-nodes tbody").strip() == "None."
    p.shot("failures")
    p.assert_clean()


def test_failure_page_without_failed_attempts_says_so_instead_of_empty_charts(browser, live_server, cluster):
    """No failed attempt: both charts show the tables' text, not empty axes around Jan 2000 (F15)."""
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/failures/")
    for key in ("by_category", "gpu_hours"):
        wait_js(page, f"document.getElementById('fig-{key}').dataset.empty !== undefined")
        assert page.text_content(f"#fig-{key}").strip() == "No failed attempt."
        assert page.locator(f"#fig-{key} .main-svg").count() == 0
    p.shot("failures-empty")
    p.assert_clean()


def test_nodes_page_filters_by_health_and_shows_reason_and_since(browser, live_server, cluster):
    services.cordon_node(Node.objects.get(name="n000"))
    # a node goes into repair only once no job holds its GPUs (s27): its jobs end first
    for job in Job.objects.filter(allocations__gpu__node__name="n000", allocations__released_at__isnull=True).distinct():
        services.finish_job(job)
    services.start_repair(Node.objects.get(name="n000"), reason="XID 79 on GPU 3: reseat")
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/nodes/")
    assert page.locator("#nodes tbody tr").count() == 16
    page.select_option("#health", "in_repair")
    page.wait_for_url("**/nodes/?health=in_repair")
    rows = page.locator("#nodes tbody tr")
    assert rows.count() == 1 and "n000" in rows.first.text_content()
    assert page.text_content("#nodes tbody tr .reason") == "XID 79 on GPU 3: reseat"
    assert page.text_content("#nodes tbody tr .state") == "in repair"
    p.assert_clean()
