"""Session 20's break-it trial, low / medium findings on inputs (docs/api.md, "Query parameters"):

- F2 / F3: a query parameter sent empty (or only white space) is a 400 naming it on every endpoint of the API and
  every page JSON endpoint: `?offset=` / `?limit=` of the task logs, `?never_fits=`, `?enabled=`, `?state=`,
  `?ordering=` of the lists were read as their default. The HTML pages keep reading an empty form field as "no
  filter", and the utilization page no longer passes its form's empty fields on to its data.json.
- F4: numbers in query parameters are ASCII digits only (one parser, inputs.whole_number): `1.0`, `1_0`, ` 1`,
  `+1` and Arabic-Indic digits were read as numbers.
- F5: an `ordering` naming a field twice (`id,-id`) is a 400 naming the field.
- F7: a team description's control characters (`\\v`, `\\f`, U+0085) and line / paragraph separators (U+2028 / 9)
  are refused wherever they are; a description of only such characters was trimmed to "" and stored.
"""
from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone

from gpuplatform.inputs import EMPTY_MESSAGE, whole_number

ARABIC_ONE = "\u0661"  # ARABIC-INDIC DIGIT ONE: int() reads it as 1
SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() is True, int() refuses it


@pytest.fixture
def page(users):
    client = Client()
    client.force_login(users["staff"])
    return client


@pytest.fixture
def logged(client_for):
    """A job of `member` with one task and a stored log line: (client, logs URL)."""
    from gpuplatform.models import Task, TaskLog
    from tests.api.helpers_api import job_body

    member = client_for("member")
    job = member.post("/api/v1/jobs/", job_body("logged"), format="json").json()
    task = Task.objects.get(job_id=job["id"])
    TaskLog.objects.create(task=task, attempt=0, offset=0, size=6, data="hello\n", created_at=timezone.now())
    return member, f"/api/v1/jobs/{job['id']}/logs/", task


# --- F2 / F3: a parameter sent empty is a 400 naming it, everywhere ------------------------------------------------

EMPTY_ON_THE_API = [
    # the lists' filters, those that meant "any" when empty included
    ("/api/v1/jobs/", "state"), ("/api/v1/jobs/", "never_fits"), ("/api/v1/jobs/", "external_id"),
    ("/api/v1/jobs/", "team"), ("/api/v1/queues/", "state"), ("/api/v1/queues/", "root"),
    ("/api/v1/diagnosis-rules/", "enabled"), ("/api/v1/health-rules/", "enabled"),
    ("/api/v1/scheduler-cycles/", "failed"), ("/api/v1/events/", "since"), ("/api/v1/events/", "job"),
    ("/api/v1/events/", "cycle"), ("/api/v1/domains/", "tier"), ("/api/v1/nodes/", "state"),
    # paging and order, which meant their default when empty
    ("/api/v1/teams/", "ordering"), ("/api/v1/jobs/", "ordering"), ("/api/v1/teams/", "limit"),
    ("/api/v1/teams/", "offset"), ("/api/v1/jobs/", "limit"), ("/api/v1/jobs/", "cursor"),
    ("/api/v1/events/", "cursor"),
    # DRF's format override, on a list and on an endpoint that reads no other parameter
    ("/api/v1/teams/", "format"), ("/api/v1/queues/tree/", "format"),
    # the utilization ledger's times and step
    ("/api/v1/utilization/", "since"), ("/api/v1/utilization/", "until"), ("/api/v1/utilization/", "step"),
    ("/api/v1/utilization/", "scope"),
    # an unknown parameter sent empty is named too
    ("/api/v1/teams/", "nope"),
]


@pytest.mark.parametrize("value", ["", "%20", "%0B", "%C2%85"], ids=["empty", "space", "vt", "nel"])
@pytest.mark.parametrize("url,param", EMPTY_ON_THE_API)
def test_an_api_parameter_sent_empty_is_a_400_naming_it(admin, jobs, url, param, value):
    r = admin.get(f"{url}?{param}={value}")
    assert r.status_code == 400, (url, param, r.status_code, r.content[:300])
    assert r.json() == {param: [EMPTY_MESSAGE]}, r.json()


@pytest.mark.parametrize("param", ["task", "attempt", "offset", "limit"])
def test_a_log_parameter_sent_empty_is_a_400_naming_it(logged, param):
    """F2: `?offset=` and `?limit=` read the log from its start / 64 KiB while `?task=` and `?attempt=` were a 400:
    one rule for the four."""
    member, url, _ = logged
    r = member.get(f"{url}?{param}=")
    assert r.status_code == 400 and r.json() == {param: [EMPTY_MESSAGE]}, (r.status_code, r.content)
    assert member.get(url).json()["data"] == "hello\n"  # left out: the defaults
    assert member.get(f"{url}?offset=0&limit=65536&attempt=0").json()["data"] == "hello\n"


def test_the_log_reader_refuses_an_empty_parameter_without_the_middleware(logged):
    """The view's own check (read_job_log, also what a federation worker serves its manager) holds the same rule."""
    from django.http import QueryDict

    from gpuplatform import services
    from gpuplatform.api.views.jobs import read_job_log

    _, _, task = logged
    for query in ("offset=", "limit=%20", "task="):
        with pytest.raises(services.ValidationError) as refused:
            read_job_log(task.job, QueryDict(query))
        assert refused.value.errors == {query.split("=")[0]: EMPTY_MESSAGE}


def test_every_empty_parameter_is_named(admin):
    r = admin.get("/api/v1/jobs/?state=&ordering=&limit=10&never_fits=%20")
    assert r.status_code == 400
    assert r.json() == {"never_fits": [EMPTY_MESSAGE], "ordering": [EMPTY_MESSAGE], "state": [EMPTY_MESSAGE]}


def test_an_empty_item_of_a_repeatable_filter_is_refused(admin, jobs):
    """`?state=pending&state=` dropped the empty item; it is the same 400 (a script's unset second variable)."""
    r = admin.get("/api/v1/jobs/?state=pending&state=")
    assert r.status_code == 400 and r.json() == {"state": [EMPTY_MESSAGE]}, r.content
    assert admin.get("/api/v1/jobs/?state=pending&state=running").json()["count"] == 2


def test_the_list_filter_backend_refuses_an_empty_value_without_the_middleware(users, jobs):
    """KnownQueryParams keeps the rule for a view called without the middleware (a request factory)."""
    from rest_framework.test import APIRequestFactory, force_authenticate

    from gpuplatform.api.views import JobViewSet

    request = APIRequestFactory().get("/api/v1/jobs/?never_fits=")
    force_authenticate(request, user=users["staff"])
    response = JobViewSet.as_view({"get": "list"})(request)
    assert response.status_code == 400 and response.data == {"never_fits": [EMPTY_MESSAGE]}, response.data


@pytest.mark.parametrize("url,param", [
    ("/utilization/data.json", "team"), ("/utilization/data.json", "window"), ("/topology.json", "zoom"),
    ("/topology.json", "job"), ("/cluster/metrics.json", "since"), ("/queues/data.json", "format"),
    ("/queueing/data.json", "table"), ("/failures/data.json", "since"), ("/fragmentation/data.json", "format"),
])
def test_a_page_json_parameter_sent_empty_is_a_400_naming_it(page, url, param):
    r = page.get(f"{url}?{param}=")
    assert r.status_code == 400 and r.json() == {param: [EMPTY_MESSAGE]}, (url, r.status_code, r.content[:200])


@pytest.mark.parametrize("url", ["/utilization/?window=6h&flavor=&queue=&team=", "/topology/?zoom=&team=&flavor=",
                                 "/jobs/?q=&team=&state=&queue=&submitter=", "/nodes/?health="])
def test_the_html_pages_still_read_an_empty_form_field_as_no_filter(page, url):
    r = page.get(url)
    assert r.status_code == 200, (url, r.status_code, r.content[:200])


def test_the_utilization_page_sends_its_data_json_no_empty_parameter(page):
    """The page passed its own query (its form's `flavor=&queue=&team=`) to data.json: its poller and its JSON and
    CSV links now carry only the fields given, and each answers 200."""
    import html
    import re

    r = page.get("/utilization/?window=6h&flavor=&queue=&team=alpha")
    assert r.status_code == 200
    text = r.content.decode()
    urls = {html.unescape(u) for u in re.findall(r'(?:href|data-url)="(/utilization/data\.json[^"]*)"', text)}
    assert urls == {"/utilization/data.json?window=6h&team=alpha",
                    "/utilization/data.json?window=6h&team=alpha&format=csv"}, urls
    for url in urls:
        assert page.get(url).status_code == 200, url
    assert page.get("/utilization/data.json?window=6h&team=alpha&since=2026-12-01T00:00:00%2B00:00").status_code == 200
    # nothing chosen at all: no query, and the poller's `since` goes after a bare '?'
    bare = page.get("/utilization/?window=24h&flavor=&queue=&team=").content.decode()
    links = {html.unescape(u) for u in re.findall(r'(?:href|data-url)="(/utilization/data\.json[^"]*)"', bare)}
    assert links == {"/utilization/data.json?window=24h", "/utilization/data.json?window=24h&format=csv"}, links
    plain = page.get("/utilization/")
    links = {html.unescape(u) for u in re.findall(r'(?:href|data-url)="(/utilization/data\.json[^"]*)"',
                                                  plain.content.decode())}
    assert links == {"/utilization/data.json", "/utilization/data.json?format=csv", "/utilization/data.json?"}, links
    assert page.get("/utilization/data.json?&since=2026-12-01T00:00:00%2B00:00").status_code == 200


# --- F4: numbers are ASCII digits ---------------------------------------------------------------------------------

NOT_NUMBERS = ["1.0", "1_0", "%201", "1%20", "%2B1", quote(ARABIC_ONE), quote(SUPERSCRIPT_TWO), "1e0", "0x1"]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("url,param,rule", [
    ("/api/v1/teams/", "limit", "a whole number from 1 to 500"),
    ("/api/v1/jobs/", "limit", "a whole number from 1 to 500"),
    ("/api/v1/teams/", "offset", "a whole number from 0 to 4611686018427387904"),
    ("/api/v1/domains/", "tier", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/events/", "cycle", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/cluster-metrics/", "cycle", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/events/", "job", "a job id is a whole number"),
    ("/api/v1/utilization/", "step", "must be a whole number of seconds"),
])
def test_a_number_parameter_takes_ascii_digits_only(admin, url, param, rule, value):
    r = admin.get(f"{url}?{param}={value}")
    assert r.status_code == 400 and r.json() == {param: [rule]}, (url, value, r.status_code, r.content[:300])


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("param", ["offset", "limit", "attempt"])
def test_a_log_number_takes_ascii_digits_only(logged, param, value):
    member, url, _ = logged
    r = member.get(f"{url}?{param}={value}")
    assert r.status_code == 400 and list(r.json()) == [param], (value, r.status_code, r.content)
    assert r.json()[param] == ["A valid integer is required."], r.json()


@pytest.mark.parametrize("task", [quote(SUPERSCRIPT_TWO), quote(ARABIC_ONE), f"worker-{quote(ARABIC_ONE)}",
                                  f"worker[{quote(ARABIC_ONE)}]", f"worker-{quote(SUPERSCRIPT_TWO)}",
                                  "99999999999999999999"])
def test_a_log_task_number_takes_ascii_digits_only(logged, task):
    """`?task=²` was a 500 (isdigit() then int()), `?task=worker-١` the log of worker-1."""
    member, url, _ = logged
    r = member.get(f"{url}?task={task}")
    assert r.status_code == 400 and list(r.json()) == ["task"], (task, r.status_code, r.content)
    assert "has no task" in r.json()["task"][0]


def test_ascii_numbers_still_read(admin, logged, cluster):
    member, url, task = logged
    assert member.get(f"{url}?task={task.pk}&offset=1&limit=2").json()["data"] == "el"
    assert member.get(f"{url}?task=worker-0").json()["data"] == "hello\n"
    assert member.get(f"{url}?task=worker[0]").json()["data"] == "hello\n"
    assert admin.get("/api/v1/teams/?limit=1&offset=1").json()["results"]
    assert {d["tier"] for d in admin.get("/api/v1/domains/?tier=1").json()["results"]} == {1}
    assert admin.get("/api/v1/events/?cycle=0").status_code == 200


@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_negative_or_zero_number_is_its_range_rule(admin, value):
    r = admin.get(f"/api/v1/events/?job={value}")
    assert r.status_code == 400 and r.json() == {"job": ["a job id is 1 or more"]}, r.content


@pytest.mark.parametrize("value", [quote(SUPERSCRIPT_TWO), quote(ARABIC_ONE), "1.0", "%201"])
def test_the_pages_number_parameters_take_ascii_digits_only(page, value):
    """`/topology.json?job=²` and `/nodes/?page=²` were 500s (isdigit() then int())."""
    r = page.get(f"/topology.json?job={value}")
    assert r.status_code == 400 and list(r.json()) == ["job"], (value, r.status_code, r.content[:200])
    r = page.get(f"/nodes/?page={value}")
    assert r.status_code == 400 and "page: a page number is a whole number from 1" in r.content.decode()
    assert page.get(f"/jobs/?q={value}").status_code == 200  # a search, not a number: no 500


def test_whole_number():
    assert [whole_number(v) for v in ("0", "17", "007")] == [0, 17, 7]
    assert whole_number("-3", negative=True) == -3
    for bad in ("", " 1", "1 ", "1.0", "1_0", "+1", "-1", ARABIC_ONE, SUPERSCRIPT_TWO, "1e3", "--1", "-", None, 1):
        assert whole_number(bad) is None, bad
    assert whole_number("--1", negative=True) is None and whole_number("-", negative=True) is None


# --- F5: an ordering names each field once ------------------------------------------------------------------------

@pytest.mark.parametrize("url,ordering,field", [
    ("/api/v1/teams/", "name,-name", "name"), ("/api/v1/teams/", "name,name", "name"),
    ("/api/v1/jobs/", "id,-id", "id"), ("/api/v1/jobs/", "-priority,name,priority", "priority"),
    ("/api/v1/events/", "time,-time", "time"), ("/api/v1/nodes/", "name,%20name", "name"),
])
def test_an_ordering_naming_a_field_twice_is_a_400_naming_it(admin, url, ordering, field):
    r = admin.get(f"{url}?ordering={ordering}")
    assert r.status_code == 400 and list(r.json()) == ["ordering"], (url, ordering, r.status_code, r.content)
    assert r.json()["ordering"][0].startswith(f"'{field}' is given more than once"), r.json()


def test_the_keyset_ordering_refuses_a_repeated_field_itself(users):
    """The jobs' and events' pagination reads `ordering` with the same function as the filter backend."""
    from rest_framework.exceptions import ValidationError

    from gpuplatform.api.filters import ordering_specs

    assert ordering_specs("-priority, name", ["priority", "name", "id"]) == ["-priority", "name"]
    with pytest.raises(ValidationError) as refused:
        ordering_specs("id,name,-id,name", ["name", "id"])
    assert refused.value.detail["ordering"][0].startswith("'id', 'name' are given more than once")


def test_distinct_fields_still_order(admin, jobs):
    names = [j["name"] for j in admin.get("/api/v1/jobs/?ordering=-name,id").json()["results"]]
    assert names == sorted(names, reverse=True)
    assert admin.get("/api/v1/teams/?ordering=-created_at,name").status_code == 200


# --- F7: a team description's control characters, wherever they are -----------------------------------------------

RULE = "a team's description has no control characters other than newline and tab (a carriage return only before a " \
       "newline): "


@pytest.mark.parametrize("description,bad,at", [
    ("\v", "\v", 1), ("\f", "\f", 1), ("\x85", "\x85", 1), ("\u2028", "\u2028", 1), ("\u2029", "\u2029", 1),
    ("  \v  ", "\v", 3), ("lead\f", "\f", 5), ("\x85trail", "\x85", 1), ("in\u2028side", "\u2028", 3),
    ("in\u2029side", "\u2029", 3), ("a\vb", "\v", 2), ("\x1c", "\x1c", 1),
])
def test_a_description_holding_a_control_character_or_separator_is_a_400_wherever_it_is(admin, description, bad, at):
    """F7: a description of only '\\v' (or '\\f', U+0085, U+2028) was trimmed to "" and stored (200) while the same
    character inside the text was refused (U+2028 was stored everywhere)."""
    from gpuplatform import services
    from gpuplatform.models import Team

    message = f"{RULE}{bad!r} at character {at}"
    r = admin.post("/api/v1/teams/", {"name": "ctl", "description": description}, format="json")
    assert r.status_code == 400 and r.json() == {"description": [message]}, r.content
    assert not Team.objects.filter(name="ctl").exists()
    r = admin.patch("/api/v1/teams/alpha/", {"description": description}, format="json")
    assert r.status_code == 400 and r.json() == {"description": [message]}, r.content
    assert Team.objects.get(slug="alpha").description == ""
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("ctl", description=description)
    assert refused.value.errors == {"description": message}


@pytest.mark.parametrize("description,stored", [
    ("   ", ""), ("\t\n \r\n", ""), ("\u00a0\u3000", ""), ("  text\n", "text"),
    ("line one\n\tindented\r\nthree", "line one\n\tindented\r\nthree"),
])
def test_a_description_of_only_white_space_is_stored_empty_as_before(admin, description, stored):
    """Spaces, tabs, newlines (and other white space that is no control character) are trimmed, as an all-spaces
    description always was: stored as ""."""
    from gpuplatform.models import Team

    r = admin.post("/api/v1/teams/", {"name": "ws", "description": description}, format="json")
    assert r.status_code == 201 and Team.objects.get(name="ws").description == stored, r.content
    r = admin.patch("/api/v1/teams/alpha/", {"description": description}, format="json")
    assert r.status_code == 200 and Team.objects.get(slug="alpha").description == stored, r.content


@pytest.mark.parametrize("description,bad,at", [("\v", "\v", 1), ("x\u2028", "\u2028", 2), ("  \x85", "\x85", 3)])
def test_the_admin_team_form_refuses_them_too(users, description, bad, at):
    from gpuplatform.admin import TeamForm

    form = TeamForm(data={"name": "ctl-admin", "slug": "ctl-admin", "description": description})
    assert not form.is_valid()
    assert form.errors["description"] == [f"{RULE}{bad!r} at character {at}"], form.errors
    form = TeamForm(data={"name": "ws-admin", "slug": "ws-admin", "description": "  \n"})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["description"] == ""


def test_the_nodes_page_refuses_a_page_past_its_last(page):
    """Trial 23: `/nodes/?page=99` answered 200 with page 1's nodes (Paginator.get_page's fallback) while `?page=0`
    was a 400: a page past the last is the same 400, naming the range."""
    r = page.get("/nodes/?page=99")
    assert r.status_code == 400 and "page: a page number is a whole number from 1 to 1" in r.content.decode()
    assert page.get("/nodes/?page=1").status_code == 200
