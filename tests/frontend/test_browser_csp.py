"""Issue 12 (browser): the Content-Security-Policy has no 'unsafe-eval', the browser enforces it, and every
chart still draws with no console error: the pages load plotly.js's strict bundle, whose WebGL traces
(the topology zoom's and the queueing page's scattergl) need no `new Function`."""
from __future__ import annotations

import pytest

from tests.frontend.test_browser import Page, browser, cluster, login, wait_js  # noqa: F401 (fixtures)

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


WATCH = ("window.__csp = []; document.addEventListener('securitypolicyviolation', "
         "e => window.__csp.push(e.effectiveDirective + ' ' + e.blockedURI));")


def test_charts_draw_under_a_csp_without_unsafe_eval(browser, live_server, cluster):  # noqa: F811
    p = Page(browser, live_server.url)
    p.page.add_init_script(WATCH)  # every CSP violation of every page, reported by the browser itself
    login(p)
    for path, selectors in CHARTS.items():
        response = p.page.goto(p.base + path)
        policy = response.headers["content-security-policy"]
        script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src")).split()[1:]
        assert script_src == ["'self'"], policy
        p.page.wait_for_load_state("networkidle")
        for sel in selectors:
            p.page.wait_for_selector(f"{sel} .main-svg")
        assert p.page.evaluate("window.__csp") == [], path
        if path == "/queueing/":  # the wait boxes (precomputed quartiles) are drawn, whiskers included
            assert p.page.locator("#fig-by_size .boxlayer path").count() >= 1
        assert p.page.evaluate("() => typeof Plotly === 'object' && Plotly.version") == _plotly_version()
        p.assert_clean()  # no console error, no CSP violation report, no uncaught exception
    # the GPU-level map really drew with WebGL (the trace the normal bundle compiles with `new Function`)
    p.page.goto(p.base + "/topology/?zoom=nvl00")
    p.page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    assert p.page.evaluate("() => document.getElementById('topology').data.some(t => t.type === 'scattergl')")
    assert p.page.locator("#topology canvas").count() >= 1
    assert p.page.evaluate("window.__csp") == []
    p.assert_clean()
    p.context.close()


def test_the_standard_plotly_bundle_would_break_under_this_policy(browser, live_server, cluster):  # noqa: F811
    """The control: the same GPU-level map with the normal plotly.min.js (what the pages loaded before)
    swapped in for the strict bundle is refused by the browser (an eval violation), so the test above would
    catch a page that needs eval."""
    from pathlib import Path

    import plotly

    normal = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    p = Page(browser, live_server.url)
    p.page.add_init_script(WATCH)
    login(p)
    p.page.route("**/vendor/plotly-strict.min.js",
                 lambda route: route.fulfill(body=normal, content_type="application/javascript"))
    p.page.goto(p.base + "/topology/?zoom=nvl00")
    wait_js(p.page, "window.__csp.length > 0")
    assert any(v.startswith("script-src") and "eval" in v for v in p.page.evaluate("window.__csp")), \
        p.page.evaluate("window.__csp")
    p.context.close()


def _plotly_version() -> str:
    import re
    from pathlib import Path

    head = (Path(__file__).resolve().parents[2] / "frontend/static/vendor/plotly-strict.min.js").read_text()[:300]
    return re.search(r"v(\d+\.\d+\.\d+)", head).group(1)


def test_redoc_loads_with_no_console_error(browser, live_server, cluster):  # noqa: F811
    """New-user trial 14, F20: /api/redoc/ logged a CSP violation (ReDoc's sidebar logo from cdn.redoc.ly, refused
    by img-src) and a 404 (/favicon.ico, the page named no icon). Both gone; nothing is asked of another site."""
    p = Page(browser, live_server.url)
    p.page.add_init_script(WATCH)
    outside, missing = [], []
    p.page.on("request", lambda r: outside.append(r.url) if not r.url.startswith((p.base, "data:", "blob:" + p.base)) else None)
    p.page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    login(p)
    p.page.goto(p.base + "/api/redoc/")
    p.page.wait_for_selector("text=API docs by Redocly")
    logo = p.page.wait_for_selector("img[alt='redocly logo']", state="attached")
    assert logo.get_attribute("src").startswith("data:image/svg+xml")
    p.page.wait_for_load_state("networkidle")
    assert p.page.evaluate("window.__csp") == []
    assert outside == [] and missing == [], (outside, missing)
    p.assert_clean()
    p.context.close()
