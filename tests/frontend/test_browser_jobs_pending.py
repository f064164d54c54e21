"""The jobs page filtered to pending jobs in a 1400 px window (new-user report 7, F8): the pending reason
column is on screen, not behind a horizontal scroll."""
from __future__ import annotations

import pytest
from django.utils import timezone

from gpuplatform import services
from gpuplatform.models import Job, Team
from tests.frontend.test_browser import SLEEP, Page, browser, cluster, login  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_pending_reason_is_visible_at_1400_px(browser, live_server, cluster):
    red = Team.objects.get(name="red")
    for i in range(3):
        services.submit_job(command=SLEEP, team=red, queue="red", name=f"red-wide-{i}-pretraining-sweep-lr3e-4-bs2048",
                            roles=[{"name": "worker", "tasks": 16, "gpus_per_task": 8}])
    cluster["run_cycle"](clock=timezone.now())
    assert Job.objects.filter(name__startswith="red-wide", state="pending").exclude(pending_reason="").exists()
    p = Page(browser, live_server.url)
    p.context.close()
    p.context = browser.new_context(viewport={"width": 1400, "height": 900})
    p.page = p.context.new_page()
    login(p)
    page = p.go("/jobs/?state=pending")
    table = page.evaluate("(() => { var t = document.getElementById('job-table'), c = t.parentElement;"
                          " var r = t.querySelector('td.reason').getBoundingClientRect(), b = c.getBoundingClientRect();"
                          " return [t.scrollWidth, c.clientWidth, r.right, b.right]; })()")
    scroll_width, client_width, reason_right, box_right = table
    assert scroll_width <= client_width and reason_right <= box_right + 1, table
    p.shot("jobs-pending-1400")
    p.assert_clean()
