"""New-user trial 9, F12: method handling on the pages. DELETE /jobs/ with a CSRF token rendered the job list
(200); a POST to a page's JSON endpoint without a session got Django's HTML CSRF page (403), not the JSON 401
docs/api.md promises. Pages answer GET / HEAD only (405 otherwise); the JSON endpoints check the session
first and then CSRF, both answered in JSON."""
from __future__ import annotations

import pytest
from django.test import Client


PAGES = ["/", "/cluster/", "/jobs/", "/nodes/", "/topology/", "/queues/", "/fragmentation/", "/queueing/",
         "/failures/", "/utilization/"]


@pytest.mark.parametrize("url", PAGES)
def test_a_page_answers_get_and_head_only(world, url):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["admin"])
    client.get("/jobs/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    assert client.get(url).status_code == 200 and client.head(url).status_code == 200
    for method in ("delete", "post", "put", "patch"):
        r = getattr(client, method)(url, HTTP_X_CSRFTOKEN=token)
        assert r.status_code == 405 and "GET" in r["Allow"], (method, url, r.status_code)


def test_page_json_without_a_session_is_a_json_401_and_without_csrf_a_json_403(world):
    """A method the endpoint takes: the session check, then CSRF, both in JSON (trial 9, F12)."""
    anonymous = Client(enforce_csrf_checks=True)
    for url in ("/topology.json", "/cluster/metrics.json", "/queues/data.json"):
        r = anonymous.get(url)
        assert r.status_code == 401 and r.json() == {"detail": "Authentication credentials were not provided."}, url
    r = anonymous.post("/jobs/new/estimate/")
    assert r.status_code == 401 and r.json() == {"detail": "Authentication credentials were not provided."}
    signed_in = Client(enforce_csrf_checks=True)
    signed_in.force_login(world["admin"])
    r = signed_in.post("/jobs/new/estimate/")
    assert r.status_code == 403 and r.json()["detail"].startswith("CSRF Failed"), r.content
    assert signed_in.get("/topology.json").status_code == 200


@pytest.mark.parametrize("method", ["delete", "put", "patch", "post"])
@pytest.mark.parametrize("signed_in", [False, True])
def test_a_wrong_method_on_page_json_is_a_405_before_the_session_and_csrf_checks(world, method, signed_in):
    """New-user trial 12, F12: DELETE /cluster/metrics.json without a CSRF token answered 403 "CSRF Failed" (401
    without a session); a method the endpoint does not take changes nothing, so it is the 405 with Allow first."""
    client = Client(enforce_csrf_checks=True)  # as curl: no CSRF token
    if signed_in:
        client.force_login(world["admin"])
    for url in ("/cluster/metrics.json", "/topology.json", "/queues/data.json", "/utilization/data.json"):
        r = getattr(client, method)(url)
        assert r.status_code == 405 and "GET" in r["Allow"], (method, url, r.status_code, r.content[:200])
        assert r.json()["detail"] == f'Method "{method.upper()}" not allowed.'
    r = client.get("/jobs/new/estimate/")
    assert r.status_code == 405 and "POST" in r["Allow"], r.content[:200]


@pytest.mark.parametrize("url", ["/metrics", "/healthz", "/readyz"])
def test_metrics_and_health_answer_get_and_head_only(db, url):
    """New-user trial 11, F15: POST /metrics answered the metrics text and POST /healthz `ok` (200)."""
    client = Client(enforce_csrf_checks=True)  # as curl: no CSRF token, still the 405 (not the CSRF page)
    assert client.get(url).status_code in (200, 503) and client.head(url).status_code in (200, 503)
    for method in ("post", "put", "delete", "patch"):
        r = getattr(client, method)(url)
        assert r.status_code == 405 and "GET" in r["Allow"], (method, url, r.status_code)
        assert r.content.decode().startswith(f'Method "{method.upper()}" not allowed.'), r.content


@pytest.mark.parametrize("method, url", [("post", "/cluster/metrics.json"), ("delete", "/topology.json"),
                                         ("put", "/queues/data.json"), ("patch", "/failures/data.json"),
                                         ("post", "/utilization/data.json")])
def test_a_page_json_endpoint_answers_405_in_json_with_allow(world, method, url):
    """New-user trial 11, F15: the pages' JSON endpoints answered 405 with an empty body; the API answers
    {"detail": "Method \\"PUT\\" not allowed."}. The same words now, with the Allow header; the pages' 405 has a
    line of text."""
    client = Client()
    client.force_login(world["admin"])
    r = getattr(client, method)(url)
    assert r.status_code == 405 and "GET" in r["Allow"] and r["Content-Type"] == "application/json", r
    assert r.json()["detail"] == f'Method "{method.upper()}" not allowed.' and "GET" in r.json()["allowed"]
    page = client.delete("/jobs/")
    assert page.status_code == 405 and "GET" in page["Allow"]
    assert page.content.decode().startswith('Method "DELETE" not allowed. Allowed: ')
