"""New-user trial 14, F14: the pages follow the README's parameter rules. The submit form refuses a key given
twice (it took the last: `roles-0-tasks=1&roles-0-tasks=64` submitted 64 tasks), and the jobs page and the
dashboard pages refuse a query parameter they do not read (the jobs page listed every job for
`?submitted_after=`, a jobs API filter), as the topology and nodes pages do."""
from __future__ import annotations

import html as html_lib
from urllib.parse import urlencode

import pytest

from gpuplatform.models import Job

from tests.frontend.test_dashboards import roles_post


@pytest.mark.parametrize("key, values", [("roles-0-tasks", ["1", "64"]), ("name", ["a1", "b1"]),
                                         ("queue", ["red", "red"])])
def test_the_submit_form_refuses_a_key_given_twice(client, world, key, values):
    client.force_login(world["alice"])
    jobs = Job.objects.count()
    data = roles_post()
    body = urlencode([(k, v) for k, v in data.items() if k != key] + [(key, v) for v in values])
    r = client.post("/jobs/new/", body, content_type="application/x-www-form-urlencoded")
    page = html_lib.unescape(r.content.decode())
    assert r.status_code == 200 and f"{key}: given more than once: send it once" in page, page[:500]
    assert Job.objects.count() == jobs
    # the same form once each is submitted
    r = client.post("/jobs/new/", roles_post())
    assert r.status_code == 302 and Job.objects.count() == jobs + 1


def test_the_estimate_refuses_a_key_given_twice(client, world):
    client.force_login(world["alice"])
    body = urlencode(list(roles_post().items()) + [("roles-0-tasks", "64")])
    r = client.post("/jobs/new/estimate/", body, content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and r.json()["errors"]["roles-0-tasks"] == "given more than once: send it once"


@pytest.mark.parametrize("query", ["foo=bar", "submitted_after=abc", "limit=0", "offset=5"])
def test_the_jobs_page_refuses_a_parameter_it_does_not_read(client, world, query):
    client.force_login(world["alice"])
    r = client.get(f"/jobs/?{query}")
    page = html_lib.unescape(r.content.decode())
    name = query.split("=")[0]
    assert r.status_code == 400 and f"{name}: unknown query parameter; this page takes: cursor, q, queue" in page


def test_the_jobs_page_takes_its_own_parameters(client, world):
    client.force_login(world["alice"])
    assert client.get("/jobs/?q=&team=red&state=pending&state=running&queue=&submitter=&sort=-name").status_code == 200


@pytest.mark.parametrize("url", ["/", "/cluster/", "/queues/", "/fragmentation/", "/queueing/", "/failures/", "job"])
def test_the_dashboard_pages_refuse_an_unknown_or_repeated_parameter(client, world, url):
    client.force_login(world["admin"])
    if url == "job":
        url = f"/jobs/{world['jobs']['red-running'].pk}/"
    r = client.get(url + "?foo=1")
    assert r.status_code == 400 and r.content.decode().startswith("foo: unknown query parameter"), r.content[:200]
    r = client.get(url + "?foo=1&foo=2")  # (`since` is the JSON endpoint's; a page refuses it: trial 22, F2)
    assert r.status_code == 400 and "foo: unknown query parameter" in r.content.decode()
    assert client.get(url).status_code == 200
