"""Each page says which moment its GPU counts show (new-user trial 25, F7): the topology map's totals are live (the
database now), the cluster page's cards the last cycle's sample, so their "free" counts differ between cycles. The
JSON says it (topology.json `moment`, metrics.json `numbers.sample_moment` / `sample_time`) and so does each page
where the figure is shown (the map's totals line reads `moment`; the free GPUs card names the cycle and its time)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db


def test_the_cluster_page_says_which_cycle_its_free_count_is_from(client, world):
    client.force_login(world["admin"])
    numbers = client.get("/cluster/metrics.json").json()["numbers"]
    assert numbers["sample_cycle"] == 3
    assert numbers["sample_moment"] == "at cycle 3, 2017-10-09 08:20:00 UTC"
    assert numbers["sample_time"] == "2017-10-09T08:20:00+00:00"
    html = client.get("/cluster/").content.decode()
    card = html[html.index(">free GPUs<"):]
    card = card[:card.index("</div>")]
    assert 'data-metric="sample_moment">at cycle 3, 2017-10-09 08:20:00 UTC</span>' in card
    assert "the topology map&#x27;s counts are live" in card or "the topology map's counts are live" in card


def test_the_topology_map_says_its_totals_are_live(client, world):
    client.force_login(world["admin"])
    payload = client.get("/topology.json").json()
    assert payload["moment"].startswith("live: ") and "last cycle's sample" in payload["moment"]
    # the page's script puts it after the totals it draws
    js = (Path(__file__).resolve().parents[2] / "frontend" / "static" / "frontend" / "topology.js").read_text()
    assert 'totals.textContent += " · " + p.moment' in js
    # a poll of an unchanged map is still a 304: no clock time in the body
    r = client.get("/topology.json")
    assert client.get("/topology.json", HTTP_IF_NONE_MATCH=r["ETag"]).status_code == 304


def test_no_cycle_yet_says_so(client, world):
    from gpuplatform.models import ClusterSample

    ClusterSample.objects.all().delete()
    client.force_login(world["admin"])
    assert client.get("/cluster/metrics.json").json()["numbers"]["sample_moment"] == "no cycle yet"
