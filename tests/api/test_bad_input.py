"""Issue #12's list of bad inputs that answered 500, each now a 400 (413 for an oversized body) from the one
input normaliser (gpuplatform/inputs.py + api/parsers.py), plus variants of each kind the issue did not
list (a NUL in another parameter, another oversized number, another non-finite spelling)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db

ROLE = [{"tasks": 1, "gpus_per_task": 1}]


@pytest.fixture
def api(client_for):
    client = client_for("staff")
    client.raise_request_exception = False  # a 500 must show as a status, not as a raised error
    return client


@pytest.mark.parametrize("path,field", [
    ("/api/v1/nodes/%00/", "path"),
    ("/api/v1/queues/a%00/", "path"),  # variant
    ("/api/v1/jobs/?team=%00", "team"),
    ("/api/v1/jobs/?queue=x%00y&state=pending", "queue"),  # variant
    ("/api/v1/events/?kind=%00", "kind"),  # variant
    ("/api/v1/jobs/?limit=999999999999999999999", "limit"),
    ("/api/v1/jobs/?offset=99999999999999999999", "offset"),  # variant
    ("/api/v1/nodes/?limit=-99999999999999999999", "limit"),  # variant
])
def test_bad_path_or_query_is_a_400_naming_it(api, jobs, path, field):
    r = api.get(path)
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert field in r.json(), r.json()


def test_a_64_bit_limit_above_the_page_cap_is_a_400_naming_it_and_the_cap_pages(api, jobs):
    # The cursor pages take 1-500 (docs/api.md): a larger whole number is refused naming the rule, never a 500.
    r = api.get("/api/v1/jobs/?limit=9223372036854775807")
    assert r.status_code == 400 and "limit" in r.json() and "500" in r.json()["limit"][0]
    r = api.get("/api/v1/jobs/?limit=500")
    assert r.status_code == 200 and r.json()["count"] == 2


@pytest.mark.parametrize("page", ["/topology.json?flavor=%00", "/topology.json?flavor=H100&domain=a%00",
                                  "/jobs/?team=%00"])
def test_pages_refuse_nul_in_the_query(client, users, page):
    client.raise_request_exception = False
    client.force_login(users["staff"])
    r = client.get(page)
    assert r.status_code == 400, (page, r.status_code)


@pytest.mark.parametrize("body,field", [
    ({"team": "\x00"}, "team"),
    ({"queue": "\x00"}, "queue"),  # variant
    ({"labels": {"k": ["a", {"b\x00": 1}]}}, "labels"),  # variant: a NUL key deep inside
    ({"priority": 10**30}, "priority"),  # variant: an integer no column holds
])
def test_bad_json_values_are_a_400_naming_the_field(api, jobs, body, field):
    payload = {"name": "j", "queue": "alpha", "command": "echo", "roles": ROLE, **body}
    r = api.post("/api/v1/jobs/", payload, format="json")
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert field in r.json(), r.json()


@pytest.mark.parametrize("text", ['{"weight": 1e999}', '{"weight": -1e400}'])
def test_json_numbers_that_overflow_to_infinity_are_a_400(api, cluster, text):
    from gpuplatform.models import Queue

    q = Queue.objects.get(name="alpha")
    r = api.generic("PATCH", "/api/v1/queues/alpha/", text, content_type="application/json",
                    HTTP_IF_MATCH=api.get("/api/v1/queues/alpha/")["ETag"])
    assert r.status_code == 400 and "weight" in r.json(), (r.status_code, r.content[:300])


@pytest.mark.parametrize("depth", [100_000, 65])
def test_json_nested_deeper_than_the_limit_is_a_400(api, cluster, depth):
    body = "[" * depth + "]" * depth
    r = api.generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert r.status_code == 400, r.content[:200]


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "NaN"])
def test_form_encoded_non_finite_weight_is_a_400(api, cluster, value):
    """`weight=nan` from a form-encoded admin request (NaN passes PostgreSQL's `weight > 0`)."""
    from gpuplatform.models import Queue

    q = Queue.objects.get(name="alpha")
    etag = api.get("/api/v1/queues/alpha/")["ETag"]
    r = api.generic("PATCH", "/api/v1/queues/alpha/", f"weight={value}",
                    content_type="application/x-www-form-urlencoded", HTTP_IF_MATCH=etag)
    assert r.status_code == 400 and "weight" in r.json(), (r.status_code, r.content[:300])
    q.refresh_from_db()
    assert q.weight == 1.0


def test_admin_form_nan_weight_is_refused(client, users):
    """The Django admin's queue form with weight=nan: the form refuses it, nothing stored."""
    from gpuplatform.models import Queue

    client.raise_request_exception = False
    users["staff"].is_superuser = True
    users["staff"].save()
    client.force_login(users["staff"])
    q = Queue.objects.get(name="alpha")
    r = client.post(f"/admin/gpuplatform/queue/{q.pk}/change/",
                    {"name": "alpha", "parent": q.parent_id or "", "team": q.team_id, "weight": "nan",
                     "state": q.state, "preemption_grace_seconds": 0})
    assert r.status_code in (200, 400)  # the form again with its error, or the normaliser's 400
    q.refresh_from_db()
    assert q.weight == 1.0


def test_service_refuses_non_finite_weight(cluster):
    from gpuplatform import services
    from gpuplatform.models import Queue

    for bad in (float("nan"), float("inf")):
        with pytest.raises(services.ValidationError) as err:
            services.update_queue(Queue.objects.get(name="alpha"), weight=bad)
        assert "weight" in err.value.errors


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/nodes/register/", "/accounts/login/",
                                  "/api/v1/auth-token/"])
def test_oversized_body_is_a_413_before_parsing(api, cluster, path, settings):
    settings.REQUEST_BODY_MAX_BYTES = 4096
    body = json.dumps({"name": "x" * 10_000})
    r = api.generic("POST", path, body, content_type="application/json")
    assert r.status_code == 413, (path, r.status_code)
    assert "larger than 4096 bytes" in r.json()["detail"]
