"""Issue 12 (browser): the Content-Security-Policy has no 'unsafe-eval', the browser enforces it, and every
chart still draws with no console error: the pages load plotly.js's strict bundle, whose WebGL traces
(the topology zoom's and the queueing page's scattergl) need no `new Function`."""
from __future__ import annotations

import pytest

from tests.frontend.test_browser import SLEEP, Page, browser, cluster, login  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# page -> the chart containers that must hold a drawn plot
CHARTS = {
    "/": ["#fig-rates", "#fig-queues"],
    "/topology/": ["#topology"],
    "/topology/?zoom=nvl00": ["#topology"],  # GPU level: scattergl
    "/queues/": [".fig[data-points]"],
    "/fragmentation/": [".fig[data-points]"],
    "/queueing/": [".fig[data-points]"],
}


def test_charts_draw_under_a_csp_without_unsafe_eval(browser, live_server, cluster):  # noqa: F811
    p = Page(browser, live_server.url)
    login(p)
    for path, selectors in CHARTS.items():
        response = p.page.goto(p.base + path)
        policy = response.headers["content-security-policy"]
        script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src")).split()[1:]
        assert script_src == ["'self'"], policy
        p.page.wait_for_load_state("networkidle")
        for sel in selectors:
            p.page.wait_for_selector(f"{sel} .main-svg")
        # the policy is in force in this document: eval-like code is refused
        refused = p.page.evaluate("() => { try { return String(new Function('return 1')()); } catch (e) { return e.name; } }")
        assert refused == "EvalError", (path, refused)
        assert p.page.evaluate("() => typeof Plotly === 'object' && Plotly.version") == _plotly_version()
        p.assert_clean()  # no console error, no CSP violation report, no uncaught exception
    # the GPU-level map really drew with WebGL (the trace the normal bundle compiles with `new Function`)
    p.page.goto(p.base + "/topology/?zoom=nvl00")
    p.page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    assert p.page.evaluate("() => document.getElementById('topology').data.some(t => t.type === 'scattergl')")
    assert p.page.locator("#topology canvas").count() >= 1
    p.assert_clean()
    p.context.close()


def _plotly_version() -> str:
    import re
    from pathlib import Path

    head = (Path(__file__).resolve().parents[2] / "frontend/static/vendor/plotly-strict.min.js").read_text()[:300]
    return re.search(r"v(\d+\.\d+\.\d+)", head).group(1)
