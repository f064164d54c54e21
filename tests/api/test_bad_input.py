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
    ({"labels": {"k": ["a", {"b\x00": 1}]}}, "labels.k[1].b"),  # variant: a NUL key deep inside, on its path (trial 13)
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


# --- the new user's report: integers beyond 64 bits, wrong types, HTML 404s under /api/ ----------------

BIG = 99999999999999999999999  # beyond 64 bits


def test_an_integer_beyond_64_bits_is_refused_by_its_own_field_with_its_path_and_bounds(api, jobs):
    """Not the normaliser's generic "-9223372036854775808 .. 9223372036854775807" on the top-level name:
    the field's own path (roles[0].tasks) and its real rule (at most 4096: job_rules.MAX_TASKS_PER_JOB,
    new-user trial 22, G11)."""
    r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "echo",
                                   "roles": [{"tasks": BIG, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["roles[0].tasks"], r.content
    assert r.json()["roles[0].tasks"] == ["tasks must be at most 4096"]
    assert "9223372036854775807" not in r.content.decode()
    job = f"/api/v1/jobs/{jobs['own'].pk}/"
    r = api.patch(job, {"priority": 99999999999999999999}, format="json")
    assert r.status_code == 400 and "2147483647" in r.json()["priority"][0], r.content
    from gpuplatform.models import Quota

    quota = f"/api/v1/quotas/{Quota.objects.get(queue__name='alpha').pk}/"
    r = api.patch(quota, {"quota": BIG}, format="json", HTTP_IF_MATCH=api.get(quota)["ETag"])
    assert r.status_code == 400 and "2147483647" in r.json()["quota"][0], r.content
    r = api.get(f"{job}logs/?offset={BIG}")
    assert r.status_code == 400 and str(2**62) in r.json()["offset"][0], r.content
    r = api.get(f"{job}logs/?task={BIG}")
    assert r.status_code == 400 and "has no task" in r.json()["task"][0], r.content


def test_agent_report_exit_code_beyond_64_bits_names_its_path_and_bounds(client_for, jobs):
    r = client_for("agent").post("/api/v1/nodes/n0/reports/", {"tasks": [{"task": 1, "attempt": 0, "event": "exited",
                                                                           "exit_code": BIG}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["tasks[0].exit_code"], r.content
    assert "255" in r.json()["tasks[0].exit_code"][0]


def test_dashboard_since_beyond_64_bits_is_its_own_rule(client, users):
    client.force_login(users["staff"])
    r = client.get(f"/cluster/metrics.json?since={BIG}")
    assert r.status_code == 400 and "ISO 8601" in r.json()["since"][0], r.content


def test_an_oversized_integer_reaching_a_column_without_bounds_is_a_400_naming_its_path(api, jobs):
    """The backstop (api/exceptions.py): a DataError "out of range" names the body's oversized field."""
    from django.db import DataError
    from rest_framework.test import APIRequestFactory

    from gpuplatform.api.exceptions import exception_handler
    from gpuplatform.api.parsers import JSONParser
    from rest_framework.request import Request

    request = Request(APIRequestFactory().post("/x/", {"a": [{"b": BIG}]}, format="json"), parsers=[JSONParser()])
    assert request.data == {"a": [{"b": BIG}]}
    response = exception_handler(DataError("integer out of range"), {"request": request})
    assert response.status_code == 400 and response.data == {"a[0].b": ["a number is out of range for what is "
                                                                         "stored there"]}


@pytest.mark.parametrize("url,body,field", [
    ("cancel/", {"reason": 5}, "reason"),
    ("cancel/", {"reason": 1.5}, "reason"),
])
def test_strings_must_be_strings(api, jobs, url, body, field):
    r = api.post(f"/api/v1/jobs/{jobs['own'].pk}/{url}", body, format="json")
    assert r.status_code == 400 and "Not a valid string." in r.json()[field], r.content
    jobs["own"].refresh_from_db()
    assert jobs["own"].state == "pending"


@pytest.mark.parametrize("value", [1, 1.5, True, None, {"x": "y"}])
def test_env_values_must_be_strings(api, jobs, value):
    r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "echo", "roles": ROLE,
                                   "env": {"A": value}}, format="json")
    assert r.status_code == 400 and r.json()["env.A"] == ["a value must be a string"], r.content


@pytest.mark.parametrize("path", ["/api/v1/nope/", "/api/v1/scheduler-cycles/abc/", "/api/v1/jobs/{id}/priority/",
                                  "/api/v1/jobs/{id}/events/", "/api/nope", "/api/v1/jobs/{id}/logs/x/"])
def test_every_404_under_api_is_json(api, jobs, path):
    r = api.get(path.format(id=jobs["own"].pk))
    assert r.status_code == 404 and r["Content-Type"] == "application/json", (r.status_code, r.content[:200])
    assert "detail" in r.json()


def test_a_404_outside_api_stays_a_page(client, users):
    client.force_login(users["staff"])
    r = client.get("/no-such-page/")
    assert r.status_code == 404 and r["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("path,unknown", [
    ("/api/v1/jobs/?foo=bar", "foo"),
    ("/api/v1/jobs/?state=pending&stat=running", "stat"),  # a typo'd filter next to a real one
    ("/api/v1/nodes/?bogus=1", "bogus"),
    ("/api/v1/quotas/?queue=alpha&team=alpha", "team"),
    ("/api/v1/events/?since=2026-12-01T00:00:00Z&_=123", "_"),  # a cache-buster
])
def test_an_unknown_query_parameter_on_a_list_is_a_400_naming_it(api, jobs, path, unknown):
    r = api.get(path)
    assert r.status_code == 400 and list(r.json()) == [unknown], r.content
    assert "unknown query parameter" in r.json()[unknown][0]


@pytest.mark.parametrize("path", [
    "/api/v1/jobs/?state=pending&queue=alpha&team=alpha&limit=10&ordering=-id&format=json",
    "/api/v1/nodes/?flavor=H100&limit=2&offset=1&ordering=name",
    "/api/v1/quotas/?queue=alpha&flavor=H100",
    "/api/v1/events/?kind=submitted&since=2026-12-01T00:00:00Z",
])
def test_the_list_parameters_clients_send_are_accepted(api, jobs, path):
    """What gpuctl (list --state/--queue/--team/--limit, set-quota's lookup) and the pages send."""
    r = api.get(path)
    assert r.status_code == 200, r.content


def test_detail_endpoints_keep_their_own_parameters(api, jobs):
    r = api.get(f"/api/v1/jobs/{jobs['own'].pk}/logs/?offset=0&limit=10")
    assert r.status_code in (200, 400) and "unknown query parameter" not in r.content.decode()


@pytest.mark.parametrize("tasks", [-1, 0])
def test_a_bad_tasks_count_is_reported_once_not_also_on_the_min_available_never_sent(api, jobs, tasks):
    r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "echo",
                                   "roles": [{"tasks": tasks, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["roles[0].tasks"], r.content


def test_a_min_available_that_is_sent_is_still_checked(api, jobs):
    r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "echo",
                                   "roles": [{"tasks": 2, "gpus_per_task": 1, "min_available": 0}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["roles[0].min_available"], r.content


def _job(**extra) -> dict:
    return {"name": "typed", "queue": "alpha", "command": "echo", "roles": [{"name": "w", "tasks": 1,
                                                                             "gpus_per_task": 1}], **extra}


@pytest.mark.parametrize("body,field", [
    (_job(preemptible="yes"), "preemptible"),
    (_job(preemptible=0), "preemptible"),
    (_job(preemptible=1), "preemptible"),
    (_job(priority=" 5 "), "priority"),
    (_job(priority="5"), "priority"),
    (_job(priority=2.5), "priority"),
    (_job(priority=True), "priority"),
    (_job(roles=[{"name": "w", "tasks": "2", "gpus_per_task": 1}]), "roles[0].tasks"),
])
def test_json_numbers_and_booleans_must_have_their_json_type(api, jobs, body, field):
    """New-user report item 12: "yes" / 0 became booleans and "2" / " 5 " integers. In a JSON body a
    boolean field takes only true / false and an integer field only a number with no fraction."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    r = api.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400 and field in r.json(), (r.status_code, r.content[:300])
    assert "must be a JSON" in r.json()[field][0] or "whole number" in r.json()[field][0], r.json()
    assert Job.objects.count() == before
    ok = api.post("/api/v1/jobs/", _job(priority=5, preemptible=False,
                                        roles=[{"name": "w", "tasks": 2, "gpus_per_task": 1.0}]), format="json")
    assert ok.status_code == 201 and (ok.json()["priority"], ok.json()["preemptible"]) == (5, False), ok.content


def test_quota_patch_refuses_a_string_number_and_form_posts_keep_text(api, cluster):
    from gpuplatform.models import Quota

    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='alpha').pk}/"
    etag = api.get(url)["ETag"]
    r = api.patch(url, {"quota": "8"}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400 and "must be a whole number, not a string" in r.json()["quota"][0], r.content
    # a form-encoded body is all text: "8" is how it writes a number
    r = api.generic("PATCH", url, "quota=8", content_type="application/x-www-form-urlencoded", HTTP_IF_MATCH=etag)
    assert r.status_code == 200 and r.json()["quota"] == 8, r.content


def test_a_key_given_twice_in_a_json_body_is_a_400_naming_it(api, jobs):
    from gpuplatform.models import Job

    before = Job.objects.count()
    text = '{"name": "a", "queue": "alpha", "command": "echo", "roles": [{"name": "w", "tasks": 1, ' \
           '"gpus_per_task": 1, "tasks": 2}], "name": "b"}'
    r = api.generic("POST", "/api/v1/jobs/", text, content_type="application/json")
    assert r.status_code == 400 and "given twice" in r.json()["roles[0].tasks"][0], r.content
    assert list(r.json()) == ["roles[0].tasks"], r.content  # the first one given twice, with its path
    assert Job.objects.count() == before


@pytest.mark.parametrize("url, text, path", [
    ("/api/v1/jobs/", '{"name": "a", "name": "b"}', "name"),
    ("/api/v1/jobs/", '{"queue": "alpha", "roles": [{"name": "w"}, {"name": "v", "tasks": 1, "tasks": 3}]}',
     "roles[1].tasks"),
    ("/api/v1/jobs/", '{"labels": {"team": {"a": 1, "a": 2}}}', "labels.team.a"),
    ("/api/v1/forecast/", '{"changes": [{"kind": "submit", "tasks": 1, "tasks": 3}]}', "changes[0].tasks"),
])
def test_a_key_given_twice_in_a_nested_object_is_named_with_its_path(api, jobs, url, text, path):
    """newuser2 item 8: the error names where the key is (roles[1].tasks), not only the key."""
    r = api.generic("POST", url, text, content_type="application/json")
    assert r.status_code == 400 and list(r.json()) == [path], r.content
    assert "given twice" in r.json()[path][0]


@pytest.mark.parametrize("path,repeated", [
    ("/api/v1/jobs/?limit=1&limit=2", "limit"),
    ("/api/v1/jobs/?queue=alpha&queue=beta", "queue"),
    ("/api/v1/nodes/?flavor=H100&flavor=H200", "flavor"),
    ("/api/v1/events/?kind=submitted&kind=cancelled", "kind"),
    ("/api/v1/utilization/?step=3600&step=60", "step"),
])
def test_a_repeated_single_valued_parameter_is_a_400_naming_it(api, jobs, path, repeated):
    """One of two values silently kept (the last) is what new-user trial 7 (F3) saw; a 400 instead."""
    r = api.get(path)
    assert r.status_code == 400 and list(r.json()) == [repeated], r.content
    assert "more than once" in r.json()[repeated][0]


def test_a_documented_multi_valued_parameter_may_repeat(api, jobs):
    """`state` is documented "repeat for several states": both states are listed."""
    from gpuplatform.models import Job

    Job.objects.filter(pk=jobs["other"].pk).update(state="running")
    r = api.get("/api/v1/jobs/?state=pending&state=running")
    assert r.status_code == 200, r.content
    assert {j["id"] for j in r.json()["results"]} == {jobs["own"].pk, jobs["other"].pk}


@pytest.mark.parametrize("url, body, field, words", [
    ("/api/v1/jobs/", "name=j&queue=alpha&command=%5B%22sleep%22%2C%2260%22%5D&roles=%5B%7B%22tasks%22%3A1%7D%5D",
     "roles", "send the request as JSON"),
    ("/api/v1/jobs/", "name=j&queue=alpha&command=%5B%22sleep%22%5D&roles%5B0%5Dtasks=1", "roles",
     "send the request as JSON"),
    ("/api/v1/jobs/", "name=j&queue=alpha&command=%5B%22sleep%22%5D", "roles", "a list of objects"),
    ("/api/v1/jobs/", "name=j&queue=alpha&command=sleep+60&roles=x", "command", "is JSON text"),
    ("/api/v1/shape-check/", "queue=alpha&roles=%5B%5D", "roles", "send the request as JSON"),
    ("/api/v1/forecast/", "changes=%5B%5D", "changes", "send the request as JSON"),
])
def test_a_form_encoded_body_is_told_that_lists_of_objects_need_json(api, url, body, field, words):
    """New-user trial 10, F23: a form-encoded job submission with roles was answered "roles: This field is
    required." (and "command: Value must be valid JSON." for `command=sleep 60`); it names the field and says
    to send JSON. Nothing is created."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    for content_type in ("application/x-www-form-urlencoded",):
        r = api.generic("POST", url, body, content_type=content_type)
        assert r.status_code == 400, (r.status_code, r.content[:300])
        assert words in " ".join(r.json()[field]), r.content[:400]
    assert Job.objects.count() == before


def test_a_multipart_job_submission_with_roles_is_told_to_send_json(api):
    """F23, multipart (`curl -F`): the same message."""
    r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": '["sleep", "1"]',
                                   "roles": '[{"tasks": 1, "gpus_per_task": 1}]'})
    assert r.status_code == 400 and "Content-Type: application/json" in r.json()["roles"][0], r.content[:300]
    assert "command" not in r.json()  # JSON text is how a form writes the command


@pytest.mark.parametrize("url", ["/api/v1/queues/tree/", "/api/v1/domains/tree/", "/api/v1/cluster-metrics/current/",
                                 "/api/v1/fragmentation-advice/", "/api/v1/me/"])
def test_endpoints_that_read_no_parameter_refuse_an_unknown_one(api, url):
    """New-user trial 10, F21: the trees, the current metrics, the fragmentation advice and /me answered
    `?team=alpha` (a filter they do not have) with everything, as if it had applied; a 400 naming it now, as the
    lists answer (docs/api.md). `format` stays accepted."""
    r = api.get(url + "?team=alpha")
    assert r.status_code == 400, (r.status_code, r.content[:200])
    assert "unknown query parameter" in r.json()["team"][0]
    assert api.get(url).status_code == 200 and api.get(url + "?format=json").status_code == 200


@pytest.mark.parametrize("sign", ["", "-"])
def test_an_integer_too_long_to_convert_is_a_400_on_its_path_without_python_internals(api, jobs, sign):
    """New-user trial 12, F2: a 5001-digit integer got a parse error naming no field and telling the user to call
    sys.set_int_max_str_digits(); it is a 400 on its own path saying how long it is, and nothing is stored."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    body = ('{"name": "j", "queue": "alpha", "command": "echo", "roles": [{"tasks": ' + sign + "1" + "0" * 5000
            + ', "gpus_per_task": 1}]}')
    r = api.generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert r.json() == {"roles[0].tasks": ["a number of 5001 digits: more than the 4300 digits a number may have"]}
    assert Job.objects.count() == before


@pytest.mark.parametrize("field", ["gpus_per_task", "cpu_milli", "gpu_fraction"])
def test_an_infinite_number_is_refused_on_its_own_path(api, jobs, field):
    """F5: `roles[0].gpus_per_task: 1e999` was reported on `roles`; top-level fields named themselves already."""
    body = ('{"name": "j", "queue": "alpha", "command": "echo", "roles": [{"tasks": 1, "gpus_per_task": 1, "'
            + field + '": -1e999}]}').replace('"gpus_per_task": 1, "gpus_per_task"', '"gpus_per_task"')
    r = api.generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert r.status_code == 400 and r.json() == {f"roles[0].{field}": ["must be a finite number"]}, r.content


@pytest.mark.parametrize("spelling", ["Infinity", "-Infinity", "NaN"])
def test_infinity_and_nan_literals_are_refused_on_their_path(api, jobs, spelling):
    """New-user trial 23: `"tasks": Infinity` (not JSON) was `non_field_errors: JSON parse error - Out of range float
    values are not JSON compliant: 'Infinity'`, naming no field; it is refused on its path as 1e999 is."""
    from gpuplatform.models import Job

    before = Job.objects.count()
    body = '{"name": "j", "queue": "alpha", "command": "echo", "roles": [{"tasks": ' + spelling + ', "gpus_per_task": 1}]}'
    r = api.generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert r.status_code == 400 and r.json() == {"roles[0].tasks": ["must be a finite number"]}, r.content
    r = api.generic("POST", "/api/v1/jobs/", '{"priority": ' + spelling + "}", content_type="application/json")
    assert r.status_code == 400 and r.json() == {"priority": ["must be a finite number"]}, r.content
    assert Job.objects.count() == before


def test_an_integral_float_is_a_whole_number_and_the_words_say_so(api, jobs):
    """New-user trial 12, F8: `"tasks": 1.0`, `1e0` and `"priority": -1e2` are taken (on purpose: a number with no
    fraction), while the refusal of 1.5 said "a JSON integer"; the words are "a whole number" now."""
    for tasks, priority in ((1.0, -1e2), (1e0, 0)):
        ok = api.post("/api/v1/jobs/", _job(priority=priority, roles=[{"name": "w", "tasks": tasks, "gpus_per_task": 1}]),
                      format="json")
        assert ok.status_code == 201 and ok.json()["priority"] == int(priority), ok.content
    r = api.post("/api/v1/jobs/", _job(roles=[{"name": "w", "tasks": 1.5, "gpus_per_task": 1}]), format="json")
    assert r.status_code == 400 and r.json()["roles[0].tasks"] == ["must be a whole number (a number with no fraction)"]
    r = api.post("/api/v1/jobs/", _job(priority="5"), format="json")
    assert r.status_code == 400 and r.json()["priority"] == ["must be a whole number, not a string ('5')"]
