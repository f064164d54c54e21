"""The pages' JSON endpoints answer unknown, invalid and repeated query parameters as the REST API does: a
400 naming the parameter and the rule, never the default data (new-user trial 7, F2/F3). The parameters the
pages' own JavaScript sends stay accepted."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

ENDPOINTS = ["/utilization/data.json", "/cluster/metrics.json", "/queues/data.json", "/topology.json",
             "/fragmentation/data.json", "/queueing/data.json", "/failures/data.json"]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_an_unknown_parameter_is_a_400_naming_it(client, world, url):
    client.force_login(world["admin"])
    r = client.get(url + "?foo=1")
    assert r.status_code == 400, (r.status_code, r.content[:200])
    assert list(r.json()) == ["foo"] and "unknown query parameter" in r.json()["foo"][0]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_a_repeated_parameter_is_a_400_naming_it(client, world, url):
    client.force_login(world["admin"])
    since = "2026-12-01T00:00:00%2B00:00"
    r = client.get(f"{url}?since={since}&since={since}")
    assert r.status_code == 400 and "more than once" in r.json()["since"][0], r.content[:200]


@pytest.mark.parametrize("query,param", [
    ("step=0", "step"), ("scope=bogus", "scope"), ("until=2017-09-10T00:00:00Z", "until"),
    ("window=2d", "window"), ("window=6h&window=7d", "window"),
])
def test_utilization_data_refuses_what_the_page_does_not_read(client, world, query, param):
    client.force_login(world["admin"])
    r = client.get("/utilization/data.json?" + query)
    assert r.status_code == 400 and param in r.json(), r.content[:200]
    page = client.get("/utilization/?" + query)
    assert page.status_code == 400 and param in page.content.decode()


@pytest.mark.parametrize("query,param", [("team=nosuch", "team"), ("flavor=nosuch", "flavor")])
def test_topology_refuses_an_unknown_team_or_flavor(client, world, query, param):
    client.force_login(world["admin"])
    r = client.get("/topology.json?" + query)
    assert r.status_code == 400 and param in r.json(), r.content[:200]


@pytest.mark.parametrize("query,param,words", [
    ("foo=1", "foo", "unknown query parameter"), ("team=red&team=blue", "team", "more than once"),
    ("zoom=nosuch", "zoom", "no domain named 'nosuch'"), ("zoom=node:nosuch", "zoom", "no domain named"),
    ("team=nosuch", "team", "no team named"), ("flavor=nosuch", "flavor", "no node has flavor"),
    ("job=abc", "job", "job id"),
])
def test_the_topology_page_refuses_a_filter_naming_nothing_or_not_its_own(client, world, query, param, words):
    """New-user trial 10, F11: the topology page (HTML) took an unknown parameter, a repeated one and a zoom naming
    no domain with a 200 (the map then failed to load or showed everything); a 400 naming the parameter and the
    rule now, as topology.json and the utilization page answer."""
    client.force_login(world["admin"])
    page = client.get("/topology/?" + query)
    text = page.content.decode()
    assert page.status_code == 400 and text.startswith(f"{param}:") and words in text, text[:200]
    data = client.get("/topology.json?" + query)
    assert data.status_code == 400 and words in data.json()[param][0]


def test_what_the_pages_send_is_accepted(client, world):
    """The query strings of the pages' scripts: dashboard.js (the page's own query and `since`), topology.js
    (zoom, team, flavor, job, format=csv), cluster.js (since), and the CSV links (format, table)."""
    client.force_login(world["admin"])
    since = "2026-12-01T00:00:00%2B00:00"
    job = world["jobs"]["red-running"].pk
    # (the utilization page passes its query to data.json without its empty fields: trial 20, F3)
    for url in ["/utilization/data.json?window=6h", f"/utilization/data.json?&since={since}",
                f"/utilization/data.json?window=7d&since={since}",
                "/utilization/?window=6h&flavor=&queue=&team=",
                f"/cluster/metrics.json?since={since}", "/cluster/metrics.json",
                f"/queues/data.json?since={since}", "/queues/data.json?format=csv",
                f"/topology.json?zoom=nvl-0&team=red&job={job}", "/topology.json?flavor=P100&format=csv",
                f"/topology/?zoom=nvl-0&team=red&job={job}", "/topology/?flavor=P100", "/topology/?zoom=&team=",
                f"/fragmentation/data.json?since={since}", "/fragmentation/data.json?format=csv&table=groups",
                f"/queueing/data.json?since={since}", "/queueing/data.json?format=csv&table=pending",
                f"/failures/data.json?since={since}"]:
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code, r.content[:200])


@pytest.mark.parametrize("query,param", [("state=bogus", "state"), ("sort=bogus", "sort"),
                                         ("sort=name&sort=team", "sort"), ("state=running&state=bogus", "state")])
def test_the_jobs_page_shows_a_bad_filter_instead_of_every_job(client, world, query, param):
    client.force_login(world["admin"])
    r = client.get("/jobs/?" + query)
    assert r.status_code == 400
    text = r.content.decode()
    assert 'id="filter-errors"' in text and f"{param}:" in text
    assert 'data-job="' not in text  # no job listed
    ok = client.get("/jobs/?state=running&sort=-duration")
    assert ok.status_code == 200 and 'id="filter-errors"' not in ok.content.decode()


@pytest.mark.parametrize("url,line", [
    ("/jobs/?team=nope", "team: unknown team &#x27;nope&#x27;"),
    ("/jobs/?queue=nope", "queue: unknown queue &#x27;nope&#x27;"),
    ("/jobs/?submitter=nope", "submitter: unknown user &#x27;nope&#x27;"),
    ("/jobs/?cursor=garbage", "cursor: not a page of this list sorted by submitted"),
    ("/nodes/?state=bogus", "state: unknown query parameter; this page takes: health, page"),
    ("/nodes/?health=bogus", "health: unknown filter &#x27;bogus&#x27;"),
    ("/nodes/?page=x", "page: a page number is a whole number from 1"),
])
def test_page_filters_naming_nothing_are_a_400_saying_so(client, world, url, line):
    """New-user trial 9, F7: /jobs/?team=nope and ?queue=nope answered 200 "0 shown", ?cursor=garbage page 1
    and /nodes/?state=bogus every node. Each is a 400 naming the parameter and the rule (the API's wording)
    above an empty list; the names that exist still filter."""
    client.force_login(world["admin"])
    r = client.get(url)
    text = r.content.decode()
    assert r.status_code == 400 and 'id="filter-errors"' in text and line in text, (url, r.status_code)
    assert 'data-job="' not in text and 'data-node="' not in text
    for ok in ("/jobs/?team=red&queue=red&submitter=", "/nodes/?health=ready", "/nodes/?page=1"):
        r = client.get(ok)
        assert r.status_code == 200 and 'id="filter-errors"' not in r.content.decode(), ok
