"""Issue 13 (browser): the cluster page and the queues page poll with `?since=<cursor>` and append the new
points to their charts (Plotly.extendTraces) with no reload and no console error."""
from __future__ import annotations

import pytest

from tests.frontend.test_browser import Page, browser, cluster, login, wait_js  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POINTS = "(() => { const d = document.getElementById(%r).data; return d ? d[0].x.length : -1; })()"


@pytest.mark.parametrize("path,chart,data_url", [("/", "fig-rates", "/cluster/metrics.json"),
                                                 ("/queues/", None, "/queues/data.json")])
def test_polls_send_since_and_the_chart_gains_the_new_point(browser, live_server, cluster, path, chart, data_url):  # noqa: F811
    from gpuplatform.models import Queue

    chart = chart or "fig-q%d" % Queue.objects.get(name="red").pk
    p = Page(browser, live_server.url)
    login(p)
    polls = []
    p.page.on("response", lambda r: polls.append((r.url, r.status, r.headers.get("content-length")))
              if data_url in r.url else None)
    page = p.go(path)
    page.wait_for_selector(f"#{chart} .main-svg")
    before = page.evaluate(POINTS % chart)
    page.evaluate("window.__marker = 1")
    cluster["run_cycle"]()
    wait_js(page, f"{POINTS % chart} > {before}", timeout=20_000)
    assert page.evaluate(POINTS % chart) == before + 1  # one new point appended, the rest kept
    assert page.evaluate("window.__marker") == 1  # no reload
    sent = [u for u, status, _ in polls if status == 200]
    assert sent and all("since=" in u for u in sent), polls  # every answer with a body was a `since` one
    p.assert_clean()
    p.context.close()
