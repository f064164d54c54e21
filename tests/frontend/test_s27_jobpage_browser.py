"""Browser test (Playwright, system Chromium; see test_browser.py), new-user trial 27: a job cancelled from its page
while its processes stop on a node agent (preempting) ends live on the page, and its "Placement on the map" section
goes with it (as a reload shows) instead of reading "preempting (1) · live: GPUs as they are now"; the page's
"updated" stamp is 24-hour UTC as the other pages; a dashboard page's 400 is a page of the site (no console error,
no /favicon.ico 404)."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from tests.frontend.test_browser import Page, browser, cluster, login, wait_js  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _watch_requests(p: Page) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    p.page.on("response", lambda r: seen.append((r.url, r.status)))
    return seen


def test_cancelled_job_page_drops_its_live_map_when_the_job_ends(browser, live_server, cluster):  # noqa: F811
    from django.db import transaction
    from django.utils import timezone

    from gpuplatform.execution.stops import finalize_stop
    from gpuplatform.models import Job, Node, Task

    get_user_model().objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    job = Job.objects.get(name="blue-small")
    assert job.state == "running" and job.placement_domain
    # its process runs on a node agent: a cancel waits for it to exit (preempting toward cancelled)
    Node.objects.filter(pk__in=job.tasks.values("node")).update(executor=Node.Executor.AGENT)

    p = Page(browser, live_server.url)
    seen = _watch_requests(p)
    login(p, "root", "pw-root-123")
    page = p.go(f"/jobs/{job.pk}/")
    wait_js(page, "document.getElementById('topology-totals').textContent.indexOf('live') >= 0")
    page.click("#cancel-job")  # the confirm dialog is accepted (Page)
    page.wait_for_load_state("networkidle")
    job.refresh_from_db()
    assert job.state == "preempting" and job.stop_target == "cancelled"
    assert page.locator("h1 .badge").inner_text() == "preempting"
    wait_js(page, "document.getElementById('topology-totals').textContent.indexOf('live') >= 0")
    assert page.locator("#job-map").count() == 1  # still live: its process has not exited yet

    # The agent reports the process gone: the job ends cancelled, its GPUs released.
    with transaction.atomic():
        Task.objects.filter(job=job).update(state=Task.State.RELEASED, ended_at=timezone.now())
        assert finalize_stop(job.pk, at=timezone.now())
    job.refresh_from_db()
    assert job.state == "cancelled"
    page.evaluate("window.__marker = 1")
    wait_js(page, "document.querySelector('h1 .badge').textContent.trim() === 'cancelled'", timeout=20_000)
    wait_js(page, "document.getElementById('job-map') === null", timeout=10_000)
    assert page.evaluate("window.__marker") == 1  # updated in place, not reloaded
    assert "Placement on the map" not in page.content()
    assert page.locator("#topology-totals").count() == 0
    assert "(0 live)" in page.inner_text("#job-allocations h2")
    # the stamp: 24-hour UTC, as the other pages ("Y-m-d H:i:s", the cluster clock's "UTC")
    stamp = page.inner_text("#live-updated")
    assert re.fullmatch(r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp), stamp
    # the map's poll stopped with it: no request for topology.json once it is gone
    before = sum(1 for url, _ in seen if "/topology.json" in url)
    page.wait_for_timeout(6_000)  # longer than the map's 5 s poll
    assert sum(1 for url, _ in seen if "/topology.json" in url) == before

    # A reload shows the same: no map.
    page = p.go(f"/jobs/{job.pk}/")
    assert page.locator("#job-map").count() == 0
    p.assert_clean()
    assert [s for s in seen if s[1] >= 400] == [], seen
    p.context.close()


def test_a_dashboard_pages_400_is_a_page_of_the_site(browser, live_server, cluster):  # noqa: F811
    p = Page(browser, live_server.url)
    seen = _watch_requests(p)
    login(p)
    resp = p.page.goto(live_server.url + "/topology/?domain=local-0")
    p.page.wait_for_load_state("networkidle")
    assert resp.status == 400
    assert p.page.inner_text("#bad-request").startswith("domain: unknown query parameter; this page takes: ")
    assert p.page.locator("nav[aria-label=Main] a").count() > 3  # the site's navigation
    p.page.click("#bad-request-plain")
    p.page.wait_for_load_state("networkidle")
    assert p.page.url.endswith("/topology/")
    # the one error the console shows is the 400 itself (the browser logs a failed page load); no favicon 404
    assert all("400" in e for e in p.errors), p.errors
    assert not [s for s in seen if "favicon" in s[0] and s[1] >= 400], seen
    assert [s for s in seen if s[1] >= 400] == [(live_server.url + "/topology/?domain=local-0", 400)], seen
    p.context.close()
