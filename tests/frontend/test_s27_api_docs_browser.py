"""Session 27 (found in a real browser): /api/docs/ (drf-spectacular's Swagger UI) rendered a blank page. Its HTML
loads `<script src="/api/docs/?script=">`, the input guard refused the empty `script=` with a 400 JSON, and Chromium
would not run it (MIME application/json). In Chromium: the page renders its operations, with no console error and no
failed request (inputs.py, takes_no_blank_params; the client-side checks are tests/api/test_s27_api_docs.py)."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.frontend.test_browser import Page, browser, login  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alice(settings):
    settings.REDIS_URL = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.mark.parametrize("signed_in", [False, True], ids=["visitor", "signed-in"])
def test_swagger_ui_renders_with_no_console_error_and_no_failed_request(browser, live_server, alice, signed_in):  # noqa: F811
    p = Page(browser, live_server.url)
    failed = []
    p.page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    p.page.on("requestfailed", lambda r: failed.append(f"failed {r.url}: {r.failure}"))
    if signed_in:
        login(p)
    p.page.goto(p.base + "/api/docs/")
    p.page.wait_for_selector(".swagger-ui .info .title")  # the schema's title, drawn by Swagger UI
    assert "GPU platform control plane API" in p.page.inner_text(".swagger-ui .info .title")
    p.page.wait_for_selector(".opblock")  # the operations
    assert p.page.locator(".opblock").count() >= 20
    assert p.page.locator(".opblock-summary-path[data-path='/api/v1/jobs/']").count() >= 1
    p.page.wait_for_load_state("networkidle")
    assert failed == [], failed
    p.assert_clean()  # no console error, no uncaught exception
    p.context.close()
