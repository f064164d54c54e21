"""Trial 22, F2: /queues/?format=json answered the page's HTML (as did /, /cluster/, /topology/, /fragmentation/,
/queueing/, /failures/, /utilization/ and a job's page), while /nodes/ and /jobs/ refused `format` as an unknown
parameter of a list. Every page now answers `?format=` the same way: a 400 naming `format` and where the page's
data is as JSON (JSON when JSON was asked for). The pages' own JSON endpoints keep `format` (json / csv), and a
page no longer takes its JSON endpoint's `table` / `since` silently."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

PAGES = {
    "/": ["/cluster/metrics.json", "/api/v1/cluster-metrics/"],
    "/cluster/": ["/cluster/metrics.json", "/api/v1/cluster-metrics/"],
    "/topology/": ["/topology.json", "/api/v1/nodes/"],
    "/queues/": ["/api/v1/queues/", "/queues/data.json"],
    "/fragmentation/": ["/fragmentation/data.json"],
    "/queueing/": ["/queueing/data.json"],
    "/failures/": ["/failures/data.json"],
    "/utilization/": ["/api/v1/utilization/", "/utilization/data.json"],
    "/nodes/": ["/api/v1/nodes/"],
    "/jobs/": ["/api/v1/jobs/"],
    "job": ["/api/v1/jobs/{pk}/"],
    "/jobs/new/": ["POST /api/v1/jobs/"],
    "/federation/": ["/api/v1/federation/jobs/"],
}


def _url(url, world):
    return f"/jobs/{world['jobs']['red-running'].pk}/" if url == "job" else url


@pytest.mark.parametrize("url", list(PAGES))
def test_format_json_on_a_page_is_a_json_400_saying_where_the_json_is(client, world, url):
    client.force_login(world["admin"])
    pk = world["jobs"]["red-running"].pk
    r = client.get(_url(url, world) + "?format=json")
    assert r.status_code == 400 and r["Content-Type"] == "application/json", (url, r.status_code, r["Content-Type"])
    body = r.json()
    assert list(body) == ["format"], body
    message = body["format"][0]
    assert message.startswith("this page is HTML only (it takes no format); its data as JSON: "), message
    for twin in PAGES[url]:
        assert twin.format(pk=pk) in message, (url, message)


@pytest.mark.parametrize("url", ["/queues/", "/nodes/", "/jobs/", "job", "/docs/"])
@pytest.mark.parametrize("value", ["csv", "api", "", "json&format=json"])
def test_any_other_format_is_the_same_400_in_text(client, world, url, value):
    client.force_login(world["admin"])
    r = client.get(_url(url, world) + "?format=" + value)
    text = r.content.decode()
    assert r.status_code == 400 and r["Content-Type"].startswith("text/plain"), (url, value, r.status_code)
    assert text.startswith("format: this page is HTML only (it takes no format)"), text
    if url == "/docs/":
        assert text.endswith("and has no JSON form"), text


@pytest.mark.parametrize("url", ["/", "/queues/", "/fragmentation/", "/queueing/", "/failures/", "/topology/",
                                 "/utilization/", "job"])
@pytest.mark.parametrize("param", ["table=rows", "since=2026-12-01T00:00:00%2B00:00"])
def test_a_page_does_not_take_its_json_endpoints_parameters(client, world, url, param):
    client.force_login(world["admin"])
    r = client.get(_url(url, world) + "?" + param)
    name = param.split("=")[0]
    text = r.content.decode()
    assert r.status_code == 400 and text.startswith(f"{name}: unknown query parameter; this page takes"), (url, text)
    assert "format" not in text  # the page's list of what it takes no longer names its JSON endpoint's parameters


def test_the_json_endpoints_and_the_api_keep_format(client, world):
    client.force_login(world["admin"])
    for url, kind in [("/queues/data.json?format=json", "application/json"), ("/queues/data.json?format=csv", "text/csv"),
                      ("/cluster/metrics.json?format=json", "application/json"),
                      ("/topology.json?format=csv", "text/csv"), ("/utilization/data.json?format=csv", "text/csv"),
                      ("/api/v1/queues/?format=json", "application/json"), ("/api/v1/nodes/?format=json", "application/json")]:
        r = client.get(url)
        assert r.status_code == 200 and r["Content-Type"].startswith(kind), (url, r.status_code, r["Content-Type"])
    for url in PAGES:
        assert client.get(_url(url, world)).status_code == 200, url


def test_a_visitor_is_sent_to_sign_in_first(client, world):
    r = client.get("/queues/?format=json")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
