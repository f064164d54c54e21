"""New-user trial 19: the queues page's chart (F8) and the queueing page's accuracy chart (F15)."""
from __future__ import annotations

import pytest

from tests.frontend.test_browser import browser, cluster  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

HELD = "held (reserved, not started)"


def _series(figure, name):
    return next(t for t in figure["data"] if t["name"] == name)["y"]


def test_a_preemptors_hold_on_gpus_its_victim_still_uses_is_not_stacked_twice(client, world):
    """F8: during the victim's grace the preemptor's queue sample had held 2 (its Job.reserved) on top of the
    4 GPUs still used: the stacked chart showed 6 GPUs in a 4-GPU queue while the cluster said held 0. held
    counts GPUs reserved and not allocated, as the cluster card does."""
    from gpuplatform.models import ClusterSample, QueueSample

    red = world["queues"]["red"]
    QueueSample.objects.filter(queue=red).update(used=4, quota=2, limit=4, held=2)
    ClusterSample.objects.update(held_gpus=0)
    client.force_login(world["alice"])
    payload = client.get("/queues/data.json").json()
    figure = payload["figures"][f"q{red.pk}"]
    stacked = [sum(v) for v in zip(_series(figure, "used within quota"), _series(figure, "borrowed (above quota)"),
                                   _series(figure, HELD))]
    assert _series(figure, HELD) == [0, 0, 0] and stacked == [4, 4, 4]  # was 6, above the limit line (4)
    lines = client.get("/queues/data.json?format=csv").content.decode().splitlines()
    header = lines[0].split(",")
    held = {line.split(",")[header.index("held")] for line in lines[1:] if line.startswith("red,")}
    assert held == {"0"}  # the CSV rows agree
    # a hold on GPUs no job uses is still drawn (at most the cluster's held GPUs at that cycle)
    ClusterSample.objects.update(held_gpus=1)
    figure = client.get("/queues/data.json").json()["figures"][f"q{red.pk}"]
    assert _series(figure, HELD) == [1, 1, 1]


def test_the_accuracy_charts_legend_clears_its_x_axis_title(browser, live_server, cluster):  # noqa: F811
    """F15: at 1400 px the /queueing/ accuracy chart's legend line was drawn over the x-axis title."""
    from tests.frontend.test_browser import Page, login

    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/queueing/")
    page.wait_for_selector("#fig-forecast_accuracy .legend")
    boxes = page.evaluate("""() => {
        const fig = document.getElementById("fig-forecast_accuracy");
        const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return {legend: box(fig.querySelector(".legend")), xtitle: box(fig.querySelector(".g-xtitle")),
                title: box(fig.querySelector(".gtitle")), plot: box(fig.querySelector(".nsewdrag")),
                ticks: box(fig.querySelector(".xaxislayer-above")), fig: box(fig)};
    }""")
    lx0, ly0, lx1, ly1 = boxes["legend"]
    for other in ("xtitle", "ticks", "title", "plot"):  # nor over the title or the points
        ox0, oy0, ox1, oy1 = boxes[other]
        apart = ly1 <= oy0 or oy1 <= ly0 or lx1 <= ox0 or ox1 <= lx0
        assert apart, (other, boxes)
    assert boxes["fig"][1] <= ly0 and ly1 <= boxes["fig"][3], boxes  # the legend is inside its card
    page.locator("#fig-forecast_accuracy").screenshot(path="/tmp/t19_accuracy.png")
    p.assert_clean()
