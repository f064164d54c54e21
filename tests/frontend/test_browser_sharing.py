"""Issue 14 (browser): the fragmentation page draws the FGD measure per flavor with no console error, and the
topology map zoomed to a node writes a fractional job's share on its GPU's cell and draws the MIG instances."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.frontend.test_browser import ARTIFACTS, Page, browser, login, wait_js  # noqa: F401 (fixtures)
from tests.frontend.test_sharing_dashboards import build_mixed, run_sharing_cycles

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shared(settings):
    """The mixed node (2 shared, 2 MIG, 4 exclusive H200 GPUs), a 0.25-GPU notebook, a 0.5-GPU job and a MIG job,
    three cycles; an admin "boss"."""
    from gpuplatform import services
    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    build_mixed(services)
    run_sharing_cycles(services, store, clock=timezone.now() - timedelta(minutes=5))
    get_user_model().objects.create_user("boss", password="pw-boss-123", is_staff=True, is_superuser=True)


def test_fragmentation_page_draws_the_fgd_chart(browser, live_server, shared):
    p = Page(browser, live_server.url)
    login(p, "boss", "pw-boss-123")
    page = p.go("/fragmentation/")
    page.wait_for_selector("#fig-fgd .main-svg")
    ys = page.evaluate("document.getElementById('fig-fgd').data.map(t => [t.name, t.y])")
    assert [name for name, _ in ys] == ["H200"]
    points = [y for y in ys[0][1] if y is not None]
    assert len(points) == 3
    # the table under the chart shows the chart's last number
    assert float(page.inner_text("[data-fgd=H200]")) == points[-1]
    assert page.locator("#fig-fgd .scatterlayer .trace").count() == 1
    assert "MIG instances used 2 of 9" in page.inner_text("#sharing-totals")
    page.locator("#sharing").scroll_into_view_if_needed()
    p.shot("fragmentation-fgd")
    # the next cycle's point arrives through the page's `since` poll (no reload), the table follows it
    from gpuplatform.scheduling import store

    page.evaluate("window.__marker = 1")
    store.run_cycle_once(clock=timezone.now())
    wait_js(page, "document.getElementById('fig-fgd').data[0].x.length === 4", timeout=20_000)
    last = page.evaluate("(() => { const y = document.getElementById('fig-fgd').data[0].y; return y[y.length - 1]; })()")
    assert page.evaluate("window.__marker") == 1 and float(page.inner_text("[data-fgd=H200]")) == last
    p.assert_clean()
    p.context.close()


def test_fractional_job_shows_its_share_on_the_map_zoomed_to_its_node(browser, live_server, shared):
    from gpuplatform.models import Allocation, Job

    job = Job.objects.get(name="notebook")
    gpu = Allocation.objects.get(job=job, released_at__isnull=True).gpu
    on_gpu = sum(Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list("gpu_milli", flat=True))
    p = Page(browser, live_server.url)
    login(p, "boss", "pw-boss-123")
    page = p.go("/topology/?zoom=node:mixed")
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    assert page.input_value("#f-zoom") == "node:mixed"  # the form keeps the node's zoom ("Show" would not lose it)
    # the label on the notebook's GPU is drawn (SVG text over the WebGL squares) and says the share used
    label = page.locator("#topology .annotation", has_text=f"{on_gpu // 10}%")
    assert label.count() == 1 and label.is_visible()
    names = page.evaluate("document.getElementById('topology').layout.annotations.map(a => [a.name, a.text])")
    assert [f"share:mixed:{gpu.index}", f"{on_gpu // 10}%"] in names
    hover = page.evaluate("document.getElementById('topology').data.map(t => (t.hovertext || []).join(' ')).join(' ')")
    assert f"GPU {gpu.index}" in hover and f"shared, {on_gpu / 1000:g} used" in hover and "notebook" in hover
    # the MIG GPUs' instances: 2 of 1g.18gb bound to the inference job, 7 free
    traces = dict(page.evaluate("document.getElementById('topology').data.map(t => [t.name, t.x.length])"))
    assert traces["MIG instance, used (2)"] == 2 and traces["MIG instance, free (7)"] == 7
    p.shot("topology-shared-mig")
    page.locator("#topology").screenshot(path=str(ARTIFACTS / "topology-shared-mig-map.png"))
    # a real hover on the notebook's cell shows its share and its job
    box = page.evaluate("""(() => { const el = document.getElementById('topology'), L = el._fullLayout;
        const t = el.data.find(t => (t.hovertext || []).some(h => h.includes('notebook')));
        const i = t.hovertext.findIndex(h => h.includes('notebook'));
        const r = el.getBoundingClientRect();
        return [r.left + L.xaxis._offset + L.xaxis.l2p(t.x[i]), r.top + L.yaxis._offset + L.yaxis.l2p(t.y[i])]; })()""")
    page.mouse.move(box[0], box[1])
    page.wait_for_selector("#topology .hoverlayer .hovertext")
    assert "notebook" in page.text_content("#topology .hoverlayer")
    p.shot("topology-shared-hover")
    # from the whole cluster (nodes without a domain: one square per GPU under each node's name, trial 23), a click
    # on a free GPU of the node zooms to it, and "Show" then keeps that zoom
    page = p.go("/topology/")
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    page.evaluate("document.getElementById('topology').emit('plotly_click', {points: [{customdata: [null, 'node:mixed']}]})")
    page.wait_for_function("location.search.includes('zoom=node%3Amixed')")
    page.wait_for_selector("#topology[data-level=gpus]")
    page.click("#topology-filters button[type=submit]")
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    assert page.input_value("#f-zoom") == "node:mixed" and "zoom=node%3Amixed" in page.url
    p.assert_clean()
    p.context.close()
