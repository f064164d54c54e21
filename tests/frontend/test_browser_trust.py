"""Browser tests of issue 13 (Playwright, Debian's Chromium, as test_browser.py): the job page updates live,
search and sort on the jobs page, cursor paging, a 390 px phone with no horizontal overflow, an empty queue's
chart says so, and every number shown twice on the cluster page agrees."""
from __future__ import annotations

import re

import pytest

from tests.frontend.test_browser import SLEEP, Page, browser, cluster, login, wait_js  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _team(name):
    from gpuplatform.models import Team

    return Team.objects.get(name=name)


def test_job_page_updates_live(browser, live_server, cluster):  # noqa: F811
    """A pending job's page turns `running` without a reload after the cycle binds it."""
    from gpuplatform import services

    job = services.submit_job(command=SLEEP, team=_team("red"), queue="red", name="live-1",
                              roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 2}])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go(f"/jobs/{job.pk}/")
    assert page.locator("h1 .badge").inner_text() == "pending"
    page.evaluate("window.__marker = 1")
    cluster["run_cycle"]()
    wait_js(page, "document.querySelector('h1 .badge').textContent.trim() === 'running'", timeout=15_000)
    assert page.evaluate("window.__marker") == 1  # the same document, updated in place
    assert page.locator("#job-tasks tbody tr").count() == 1
    p.assert_clean()
    p.context.close()


def test_job_list_search_sort_and_live(browser, live_server, cluster):  # noqa: F811
    from gpuplatform import services

    for name in ("zeta-run", "alpha-run", "mid-run"):
        services.submit_job(command=SLEEP, team=_team("red"), queue="red", name=name,
                            roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/jobs/")
    page.fill("#job-search", "-run")
    with page.expect_navigation():
        page.press("#job-search", "Enter")
    page.wait_for_load_state("networkidle")
    names = page.locator("#job-rows th a").all_inner_texts()
    assert sorted(names) == ["alpha-run", "mid-run", "zeta-run"]
    with page.expect_navigation():
        page.click("a.sort[data-sort=name]")
    assert page.locator("#job-rows th a").all_inner_texts() == ["alpha-run", "mid-run", "zeta-run"]
    with page.expect_navigation():
        page.click("a.sort[data-sort=name]")  # again: descending
    assert page.locator("#job-rows th a").all_inner_texts() == ["zeta-run", "mid-run", "alpha-run"]
    # Live: a job submitted meanwhile appears without a reload.
    page.evaluate("window.__marker = 1")
    services.submit_job(command=SLEEP, team=_team("red"), queue="red", name="beta-run",
                        roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    wait_js(page, "document.getElementById('job-rows').textContent.indexOf('beta-run') >= 0",
                           timeout=15_000)
    assert page.evaluate("window.__marker") == 1
    p.assert_clean()
    p.context.close()


def test_job_list_cursor_paging(browser, live_server, cluster, monkeypatch):  # noqa: F811
    """Next pages continue after the last row shown, even when jobs are submitted in between."""
    from frontend import views
    from gpuplatform import services
    from gpuplatform.models import Job

    monkeypatch.setattr(views, "JOBS_PER_PAGE", 4)
    for i in range(9):
        services.submit_job(command=SLEEP, team=_team("red"), queue="red", name=f"page-{i}",
                            roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/jobs/")
    seen = []
    while True:
        seen += page.locator("#job-rows tr").evaluate_all("rows => rows.map(r => r.dataset.job)")
        services.submit_job(command=SLEEP, team=_team("red"), queue="red", name=f"late-{len(seen)}",
                            roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
        if page.locator("#page-next").count() == 0:
            break
        assert "cursor=" in page.get_attribute("#page-next", "href")
        with page.expect_navigation():
            page.click("#page-next")
        page.wait_for_load_state("networkidle")
    assert len(seen) == len(set(seen)) == 9  # alice sees red jobs only: the 9, none of the late ones
    assert not Job.objects.filter(pk__in=seen, name__startswith="late-").exists()
    p.assert_clean()
    p.context.close()


PAGES = ["/", "/jobs/", "/jobs/new/", "/topology/", "/queues/", "/fragmentation/", "/queueing/", "/docs/concepts/"]


def test_narrow_phone_has_no_horizontal_overflow(browser, live_server, cluster):  # noqa: F811
    p = Page(browser, live_server.url)
    login(p)
    p.page.set_viewport_size({"width": 390, "height": 844})
    for path in PAGES:
        page = p.go(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
        right = page.eval_on_selector_all("header nav a", "els => els.map(a => a.getBoundingClientRect().right)")
        assert right and max(right) <= 390, (path, right)
        if path == "/":
            p.shot("phone-cluster")
    p.assert_clean()
    p.context.close()


def test_empty_queue_chart_says_so(browser, live_server, cluster):  # noqa: F811
    from gpuplatform import services

    services.create_queue("green", parent="root", team=services.create_team("green"), quotas={"H100": (0, 8, 16)})
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/queues/")
    green = page.locator(".fig", has_text="No usage recorded for queue green")
    green.wait_for()
    assert green.locator(".main-svg").count() == 0
    red = page.locator("#fig-q%d" % _queue_id("red"))
    red.locator(".main-svg").first.wait_for()
    p.assert_clean()
    p.context.close()


def _queue_id(name):
    from gpuplatform.models import Queue

    return Queue.objects.get(name=name).pk


def test_numbers_shown_twice_on_the_cluster_page_agree(browser, live_server, cluster):  # noqa: F811
    """Job totals (stat vs the team table's footer and rows), the allocation rate (stat vs the chart's last
    point) and allocated GPUs (stat vs the queue-usage table) agree, before and after a live update."""
    from gpuplatform import services

    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/")

    def check():
        stat = {k: page.inner_text(f"[data-metric={k}]") for k in ("jobs_running", "jobs_pending", "allocation_rate",
                                                                    "allocated_gpus")}
        foot = page.locator("#team-counts tfoot td").all_inner_texts()
        assert [stat["jobs_pending"], stat["jobs_running"]] == foot[:2], (stat, foot)
        rows = page.locator("#team-counts tbody tr").evaluate_all(
            "rows => rows.map(r => Array.from(r.querySelectorAll('td')).map(td => +td.textContent.trim()))")
        assert sum(r[0] for r in rows) == int(stat["jobs_pending"]) and sum(r[1] for r in rows) == int(stat["jobs_running"])
        last = page.evaluate("(() => { const d = document.getElementById('fig-rates').data[0]; return d.y[d.y.length - 1]; })()")
        assert abs(float(stat["allocation_rate"]) - last) < 0.051, (stat, last)
        used = page.locator("#queue-usage tbody tr").evaluate_all(
            "rows => rows.map(r => +(r.querySelectorAll('td')[1] || {textContent: '0'}).textContent.trim() || 0)")
        return stat, used

    page.wait_for_selector("#fig-rates .main-svg")
    stat, _ = check()
    services.submit_job(command=SLEEP, team=_team("red"), queue="red", name="twice",
                        roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    cluster["run_cycle"]()
    wait_js(page, f"document.querySelector('[data-metric=allocated_gpus]').textContent.trim() !== '{stat['allocated_gpus']}'",
                           timeout=15_000)
    check()
    p.assert_clean()
    p.context.close()
