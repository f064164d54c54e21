"""Issue 13: `?since=` polls send only the charts' new points (frontend/delta.py), the pages' JSON carries
the cursor to send back, and a malformed `since` is a 400 naming it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from frontend import delta
from gpuplatform.models import ClusterSample, QueueSample

T0 = datetime(2017, 10, 9, 8, 0, tzinfo=timezone.utc)  # conftest.world's samples: T0, +10, +20 minutes


def _ts(fig_x):
    return {"data": [{"name": "a", "x": fig_x, "y": list(range(len(fig_x)))},
                     {"name": "b", "x": fig_x, "y": [10 * v for v in range(len(fig_x))]}]}


def test_cursor_and_cut_of_a_time_series_figure():
    x = [(T0 + timedelta(minutes=i)).isoformat() for i in range(4)]
    figures = {"ts": _ts(x), "bars": {"data": [{"name": "team", "x": [1, 2], "y": ["red", "blue"]}]},
               "empty": {"data": [], "empty": "no data"}}
    assert delta.cursor(figures) == x[-1]
    cut = delta.since_figures(figures, T0 + timedelta(minutes=1))
    assert cut["ts"] == {"extend": {"x": [x[2:], x[2:]], "y": [[2, 3], [20, 30]]}, "names": ["a", "b"], "points": 4}
    assert cut["bars"] is figures["bars"] and cut["empty"] is figures["empty"]  # not time series: whole
    assert delta.since_figures(figures, T0 + timedelta(hours=1))["ts"]["extend"]["x"] == [[], []]


@pytest.mark.parametrize("bad", ["yesterday", "2017-10-09T08:00:00", "2017-13-01T00:00:00+00:00"])
def test_a_malformed_since_names_the_rule(bad):
    with pytest.raises(delta.BadSince, match="since must"):
        delta.parse_since(bad)


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/cluster/metrics.json", "/queues/data.json", "/fragmentation/data.json"])
def test_polling_with_the_cursor_sends_only_new_points(client, world, url):
    client.force_login(world["admin"])
    full = client.get(url)
    cursor = full.json()["cursor"]
    assert cursor == (T0 + timedelta(minutes=20)).isoformat()
    unchanged = client.get(url, {"since": cursor})
    assert unchanged.status_code == 200
    figs = unchanged.json()["figures"]
    extended = [f for f in figs.values() if "extend" in f]
    assert extended and all(x == [] for f in extended for x in f["extend"]["x"])
    assert len(unchanged.content) < len(full.content)
    # one more cycle's samples: exactly that point comes back, for every trace
    t = T0 + timedelta(minutes=30)
    ClusterSample.objects.create(time=t, cycle=4, schedulable_gpus=8, allocated_gpus=6, free_gpus=2,
                                 allocation_rate=0.75, fragmentation_rate=0.5, largest_runnable={"1": 2, "2": 2, "3": 2},
                                 domain_completeness=0.0, pending_jobs=1, running_jobs=2)
    for q in world["queues"].values():
        QueueSample.objects.create(time=t, queue=q, used=5, guarantee=0, quota=4, limit=8, pending_demand=0)
    after = client.get(url, {"since": cursor}).json()
    assert after["cursor"] == t.isoformat() and after["since"] == cursor
    extended = [f for f in after["figures"].values() if "extend" in f]
    assert extended
    for f in extended:
        assert all(x == [t.isoformat()] for x in f["extend"]["x"]), f
        assert len(f["extend"]["y"]) == len(f["names"]) and f["points"] >= 4


@pytest.mark.django_db
def test_the_same_since_twice_is_a_304(client, world):
    client.force_login(world["admin"])
    cursor = client.get("/queues/data.json").json()["cursor"]
    first = client.get("/queues/data.json", {"since": cursor})
    again = client.get("/queues/data.json", {"since": cursor}, HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/cluster/metrics.json", "/queues/data.json"])
def test_a_bad_since_is_a_400_naming_it(client, world, url):
    client.force_login(world["admin"])
    r = client.get(url, {"since": "yesterday"})
    assert r.status_code == 400 and "since must" in r.json()["since"][0]
