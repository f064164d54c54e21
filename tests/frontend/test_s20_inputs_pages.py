"""Session 20, F3 (browser): a page JSON endpoint refuses a parameter sent empty (docs/api.md, "Query parameters: one
rule"), so the pages must not send one. The utilization page passed its own query, its filter form's empty fields
included (`?window=6h&flavor=&queue=&team=`), to its data.json poller; it now passes only the fields given, and its
poll answers 200 with no console error. (The server-side checks of its links: tests/api/test_s20_inputs.py.)"""
from __future__ import annotations

import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.frontend.test_browser import Page, browser, cluster, login  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_utilization_page_polls_its_data_without_an_empty_parameter(browser, live_server, cluster):  # noqa: F811
    p = Page(browser, live_server.url)
    login(p)
    polls = []
    p.page.on("response", lambda r: polls.append((r.url, r.status)) if "/utilization/data.json" in r.url else None)
    page = p.go("/utilization/?window=6h&flavor=&queue=&team=red")
    page.wait_for_selector("#fig-ledger .main-svg")
    deadline = time.monotonic() + 25
    while not polls and time.monotonic() < deadline:  # the page polls every 15 s
        page.wait_for_timeout(250)
    assert polls, "the utilization page did not poll its data.json"
    for url, status in polls:
        assert status == 200, (url, status)
        params = parse_qsl(urlsplit(url).query, keep_blank_values=True)
        assert params and all(value for _, value in params), url
        assert dict(params)["team"] == "red" and dict(params)["window"] == "6h", url
    p.assert_clean()  # a 400 would show as "Failed to load resource" in the console
    p.context.close()
