"""Browser test (Playwright, system Chromium; see test_browser.py): the fragmentation page shows the
rescheduling advice, and a platform admin's button asks the job in the way to checkpoint and move."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.frontend.test_browser import Page, browser, login  # noqa: F401 (the browser fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_advice_listed_and_the_admin_button_moves_the_job(browser, live_server, settings):  # noqa: F811
    from gpuplatform import services
    from gpuplatform.models import Event, Job
    from tests.api.test_reschedule_api import _fragmented
    from tests.platform.helpers_platform import small_spec

    settings.REDIS_URL = ""  # no broker: nothing runs a cycle behind the test's back
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    services.load_cluster_spec(small_spec())
    get_user_model().objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    jobs = _fragmented()
    p = Page(browser, live_server.url)
    login(p, "root", "pw-root-123")
    page = p.go("/fragmentation/")
    item = page.locator("#advice li").first
    assert "for job big (16 GPUs, waiting 3 h)" in item.inner_text()
    item.locator("button").click()
    page.wait_for_load_state("networkidle")
    assert "asked to checkpoint and move" in page.content()
    p.assert_clean()
    moved = Event.objects.get(kind="moved")
    assert moved.job_id in (jobs["fixed"].pk, jobs["other"].pk)
    assert Job.objects.get(pk=moved.job_id).state == "preempting" and Job.objects.get(pk=jobs["big"].pk).reserved
    p.context.close()
