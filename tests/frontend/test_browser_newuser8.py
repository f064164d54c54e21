"""Browser tests of new-user trial 8 (Playwright, Debian's Chromium, as test_browser.py): the Queues page's
"Try a quota change" shows the quota service's refusal (F2) in the form's own words (F9)."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.frontend.test_browser import Page, browser, cluster, login, wait_js  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _try(page, **values):
    for k in ("guarantee", "quota", "limit"):
        # a text input, so a value a number input would refuse ("abc") reaches the script as typed
        page.evaluate(f"(() => {{ const e = document.getElementById('qt-{k}'); e.type = 'text'; "
                      f"e.value = {values.get(k, '')!r}; }})()")
    page.evaluate("document.getElementById('quota-try-status').textContent = ''")
    page.evaluate("document.getElementById('quota-try-form').requestSubmit()")
    wait_js(page, "(t => t !== '' && t !== 'forecasting…')(document.getElementById('quota-try-status').textContent)")
    return page.inner_text("#quota-try-status")


def test_quota_try_shows_the_quota_rules_refusal_in_the_forms_words(browser, live_server, cluster):  # noqa: F811
    from gpuplatform.models import Quota

    quotas = list(Quota.objects.values_list())
    get_user_model().objects.create_user("boss", password="pw-boss-123", is_staff=True, is_superuser=True)
    admin = Page(browser, live_server.url)
    login(admin, "boss", "pw-boss-123")
    page = admin.go("/queues/")
    page.select_option("#qt-queue", "red")
    # root 128 = red 48 + blue 32 + room 48: red at 100 sums the children to 132 (F2: the what-if forecast it)
    status = _try(page, quota="100")
    assert status == ("cannot try this: quota: children's quotas would sum to 132, above the parent queue's "
                      "quota (128) for H100: lower another queue's quota first, or raise root's"), status
    assert page.locator("#quota-try-result").is_hidden()
    # F9: "abc" is not a whole number (it was sent as null: "changes[0].quota: This field may not be null.")
    status = _try(page, guarantee="-1", quota="abc")
    assert "changes[0]" not in status and "null" not in status, status
    assert "quota: must be a whole number of GPUs" in status, status
    status = _try(page, guarantee="-1")
    assert status.startswith("cannot try this: guarantee: ") and "changes[0]" not in status, status
    assert list(Quota.objects.values_list()) == quotas
    admin.context.close()


def test_a_pending_jobs_log_box_says_no_log_yet(browser, live_server, cluster):  # noqa: F811
    """F5: the Logs box of a pending job said "worker-0 · attempt 0 · 0 B · running, updating every 2 s"."""
    from gpuplatform import services
    from gpuplatform.models import Team

    job = services.submit_job(command=["sleep", "60"], team=Team.objects.get(name="red"), queue="red",
                              name="waits", roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    p = Page(browser, live_server.url)
    login(p)
    page = p.go(f"/jobs/{job.pk}/")
    wait_js(page, "document.getElementById('log-status').textContent.indexOf('attempt') >= 0")
    status = page.inner_text("#log-status")
    assert "running" not in status, status
    assert status == "worker-0 · attempt 0 · 0 B · no log yet: the task is pending (not placed yet), checking every 2 s"
    p.assert_clean()
    p.context.close()


def test_mixed_job_list_fits_a_1400_px_window_with_the_pending_reason_on_screen(browser, live_server, cluster):  # noqa: F811
    """F16: on the unfiltered jobs page (running and pending rows, every column) a long job name and a
    pending job's start estimate kept the table 1,526 px wide in a 1,358 px card: the pending reason was
    behind the horizontal scroll. Names and estimates wrap now."""
    from django.utils import timezone

    from gpuplatform import services
    from gpuplatform.models import Team
    from gpuplatform.scheduling.forecast import run_forecast_once

    red = Team.objects.get(name="red")
    for i in range(3):
        services.submit_job(command=["sleep", "60"], team=red, queue="red",
                            name=f"red-wide-{i}-pretraining-sweep-lr3e-4-bs2048",
                            roles=[{"name": "worker", "tasks": 16, "gpus_per_task": 8}])
    cluster["run_cycle"](clock=timezone.now())
    run_forecast_once()
    p = Page(browser, live_server.url)
    p.context.close()
    p.context = browser.new_context(viewport={"width": 1400, "height": 900})
    p.page = p.context.new_page()
    login(p)
    page = p.go("/jobs/")
    text = page.inner_text("#job-table")
    assert "estimated in" in text and "placement" in text and "nodes" in text  # every column, an estimate
    scroll_width, client_width, reason_right, box_right = page.evaluate(
        "(() => { var t = document.getElementById('job-table'), c = t.parentElement;"
        " var r = t.querySelector('td.reason').getBoundingClientRect(), b = c.getBoundingClientRect();"
        " return [t.scrollWidth, c.clientWidth, r.right, b.right]; })()")
    assert scroll_width <= client_width and reason_right <= box_right + 1, (scroll_width, client_width)
    p.shot("jobs-mixed-1400")
    p.assert_clean()
    p.context.close()
