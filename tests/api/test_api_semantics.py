"""API semantics: Idempotency-Key on creating POSTs (case ../shared/cases/api-idempotent-submit.yaml), keyset
cursor pages that are stable under inserts (case ../shared/cases/api-pagination-stable.yaml), unknown fields
refused at every level, and one flat error shape for serializer and service errors (one table, both paths:
the API and the job form)."""
from __future__ import annotations

import base64
import inspect
import json
from pathlib import Path

import pytest
import yaml

from tests.api.helpers_api import table_counts

pytestmark = pytest.mark.django_db

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases"


def _case(name: str) -> dict:
    if not CASES.is_dir():  # the shared cases sit beside the checkout (CI's layout), not inside it
        pytest.skip(f"{CASES} is not beside this checkout")
    return yaml.safe_load((CASES / name).read_text())


def _body(name="train", **extra) -> dict:
    """The case's body: {queue: q, name: train, roles: [{name: worker, tasks: 1, gpus_per_task: 1}]} on
    this world's queue `alpha` (plus a command: a job here runs one)."""
    return {"queue": "alpha", "name": name, "command": "sleep 3600",
            "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}], **extra}


# --- api-idempotent-submit.yaml ------------------------------------------------------------------------

def test_api_idempotent_submit(client_for):
    """api-idempotent-submit.yaml: the same body twice with one Idempotency-Key answers the first job (same
    id, header Idempotent-Replayed) and stores one job; the key with a different body is a 409 naming the
    key and stores nothing; an unknown field (external_id used to be dropped) is now stored, and a field
    the API does not know is a 400 naming it."""
    from gpuplatform.models import IdempotencyKey, Job

    case = _case("api-idempotent-submit.yaml")
    assert "Idempotency-Key: req-123" in case["requests"][0]
    member = client_for("member")
    first = member.post("/api/v1/jobs/", _body(external_id="ci-run-7"), format="json", HTTP_IDEMPOTENCY_KEY="req-123")
    assert first.status_code == 201, first.content
    assert first.json()["external_id"] == "ci-run-7" and "Idempotent-Replayed" not in first
    again = member.post("/api/v1/jobs/", _body(external_id="ci-run-7"), format="json", HTTP_IDEMPOTENCY_KEY="req-123")
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1
    before = table_counts()
    other = member.post("/api/v1/jobs/", _body(name="train-2"), format="json", HTTP_IDEMPOTENCY_KEY="req-123")
    assert other.status_code == 409 and "req-123" in other.json()["Idempotency-Key"][0]
    assert table_counts() == before
    assert IdempotencyKey.objects.get(key="req-123").fingerprint  # remembered, for the stated TTL
    # Per user: another member of the same team may use the same key for their own job.
    second_user = client_for("team_admin")
    theirs = second_user.post("/api/v1/jobs/", _body(), format="json", HTTP_IDEMPOTENCY_KEY="req-123")
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    assert Job.objects.filter(external_id="ci-run-7").count() == 1
    # A field the API does not know is refused, not dropped.
    unknown = member.post("/api/v1/jobs/", _body(gpu_type="H100"), format="json")
    assert unknown.status_code == 400 and list(unknown.json()) == ["gpu_type"]
    assert Job.objects.count() == 2


def test_idempotency_variants_other_endpoints_failures_and_expiry(admin, client_for, settings):
    """A variant: queue creation and node registration are idempotent too; a failed request is not
    remembered (fixing the body and retrying with the same key works); an expired key is forgotten; a bad
    key is a 400 naming the header."""
    from gpuplatform.models import IdempotencyKey, Job, Queue

    body = {"name": "gamma", "parent": "root", "weight": 1}
    one = admin.post("/api/v1/queues/", body, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    two = admin.post("/api/v1/queues/", body, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert one.status_code == two.status_code == 201 and two["Idempotent-Replayed"] == "true"
    assert one.json()["id"] == two.json()["id"] and one["ETag"] == two["ETag"]
    assert Queue.objects.filter(name="gamma").count() == 1
    # The same key on another endpoint is another request: 409.
    clash = admin.post("/api/v1/teams/", {"name": "Gamma"}, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert clash.status_code == 409 and "Idempotency-Key" in clash.json()

    member = client_for("member")
    bad = member.post("/api/v1/jobs/", _body(roles=[{"name": "worker", "tasks": 2, "min_available": 3}]),
                      format="json", HTTP_IDEMPOTENCY_KEY="fix-me")
    assert bad.status_code == 400 and "roles[0].min_available" in bad.json()
    fixed = member.post("/api/v1/jobs/", _body(), format="json", HTTP_IDEMPOTENCY_KEY="fix-me")
    assert fixed.status_code == 201

    settings.IDEMPOTENCY_KEY_TTL_SECONDS = 0  # every remembered key has expired
    later = member.post("/api/v1/jobs/", _body(), format="json", HTTP_IDEMPOTENCY_KEY="fix-me")
    assert later.status_code == 201 and later.json()["id"] != fixed.json()["id"]
    assert Job.objects.count() == 2 and IdempotencyKey.objects.filter(key="fix-me").count() == 1

    for key in ("has space", "x" * 201, "é"):
        r = member.post("/api/v1/jobs/", _body(), format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert r.status_code == 400 and "Idempotency-Key" in r.json(), key
    assert Job.objects.count() == 2
    # new-user trial 12, F10: the header sent twice reaches Django joined by a comma (wsgiref, gunicorn) and acted
    # as one combined key
    r = member.post("/api/v1/jobs/", _body(), format="json", HTTP_IDEMPOTENCY_KEY="t12-a,t12-b")
    assert r.status_code == 400 and "given more than once" in r.json()["Idempotency-Key"][0], r.content
    assert Job.objects.count() == 2

    settings.IDEMPOTENCY_KEY_TTL_SECONDS = 86400
    agent = client_for("agent")
    node = {"name": "n-new", "flavor": "H100", "gpus": [{"index": 0, "uuid": "GPU-x", "model": "NVIDIA H100",
                                                         "memory_mib": 81559}]}
    a = agent.post("/api/v1/nodes/register/", node, format="json", HTTP_IDEMPOTENCY_KEY="reg-1")
    b = agent.post("/api/v1/nodes/register/", node, format="json", HTTP_IDEMPOTENCY_KEY="reg-1")
    assert a.status_code == 201 and b["Idempotent-Replayed"] == "true" and a.json()["id"] == b.json()["id"]


# --- api-pagination-stable.yaml ------------------------------------------------------------------------

def _submit(client, names):
    ids = []
    for name in names:
        r = client.post("/api/v1/jobs/", _body(name=name), format="json")
        assert r.status_code == 201, r.content
        ids.append(r.json()["id"])
    return ids


def test_api_pagination_stable(client_for):
    """api-pagination-stable.yaml: 6 jobs j0..j5 of one team; first page of 3 (newest first), a new job is
    submitted, then the page the first response links: the two pages hold j0..j5 each exactly once and the
    next link is a cursor, not an offset."""
    case = _case("api-pagination-stable.yaml")
    assert "limit=3" in case["requests"][0]
    member = client_for("member")
    _submit(member, [f"j{i}" for i in range(6)])
    first = member.get("/api/v1/jobs/?limit=3").json()
    assert [j["name"] for j in first["results"]] == ["j5", "j4", "j3"]
    _submit(member, ["j6"])
    nxt = first["next"]
    assert "cursor=" in nxt and "offset" not in nxt
    second = member.get(nxt).json()
    names = [j["name"] for j in first["results"] + second["results"]]
    assert sorted(names) == [f"j{i}" for i in range(6)] and len(names) == 6
    assert second["next"] is None  # j6 sorts before the cursor: it appears on neither page
    back = member.get(second["previous"]).json()
    assert [j["name"] for j in back["results"]] == ["j5", "j4", "j3"]


def test_pagination_stable_variants_same_timestamp_other_order_and_events(client_for, users):
    """Variants: jobs sharing one submission time (the tie is broken by id, never skipped or repeated),
    ordering by name ascending with inserts in between, the events list, and a forged cursor (400)."""
    from datetime import datetime, timezone

    from gpuplatform import services
    from gpuplatform.models import Queue

    member = client_for("member")
    team = Queue.objects.get(name="alpha").team
    same = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for i in range(7):
        services.submit_job(team=team, queue="alpha", name=f"t{i}", roles=[{"tasks": 1}], command=["true"],
                            submitter=users["member"], submitted_at=same)
    seen, url = [], "/api/v1/jobs/?limit=2&ordering=name"
    while url:
        page = member.get(url).json()
        seen += [j["name"] for j in page["results"]]
        _submit(member, [f"a-new-{len(seen)}"])  # sorts before every t*: never on a later page
        url = page["next"]
    assert seen == [f"t{i}" for i in range(7)]
    seen, url = [], "/api/v1/jobs/?limit=3&submitted_before=2026-01-02T00:00:00Z"
    while url:
        page = member.get(url).json()
        seen += [j["name"] for j in page["results"]]
        url = page["next"]
    assert sorted(seen) == [f"t{i}" for i in range(7)] and len(seen) == 7

    admin = client_for("staff")
    events, url = [], "/api/v1/events/?limit=4"
    total = admin.get(url).json()["count"]
    while url:
        page = admin.get(url).json()
        events += [e["id"] for e in page["results"]]
        _submit(member, [f"more-{len(events)}"])  # appends submitted events meanwhile
        url = page["next"]
    assert len(events) == len(set(events)) == total

    for bad in ("garbage", "eyJ2IjpbMV0sImQiOiJuIiwibyI6WyItaWQiXX0"):  # a cursor of another ordering
        r = member.get(f"/api/v1/jobs/?cursor={bad}")
        assert r.status_code == 400 and "cursor" in r.json()

    def forged(values, order):  # a cursor as the API writes one (base64 JSON, unsigned: anyone can write one)
        raw = json.dumps({"v": values, "d": "n", "o": order}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    # nulls in a forged cursor (new-user report 8 F1: 500 "Cannot use None as a query value"): 400 naming it
    for url, order, values in (("/api/v1/jobs/", ["-submitted_at", "-id"], [None, None]),
                               ("/api/v1/jobs/", ["-submitted_at", "-id"], ["2017-09-28T00:00:00+00:00", None]),
                               ("/api/v1/jobs/?ordering=name", ["name", "id"], [None, 3]),
                               ("/api/v1/events/", ["-time", "-id"], [None, None])):
        sep = "&" if "?" in url else "?"
        r = (admin if "events" in url else member).get(f"{url}{sep}cursor={forged(values, order)}")
        assert r.status_code == 400 and "cursor" in r.json(), (url, values, r.status_code)
    assert member.get("/api/v1/jobs/?ordering=estimated_start").status_code == 400
    assert member.get("/api/v1/jobs/?limit=0").status_code == 400


# --- unknown fields at every level ---------------------------------------------------------------------

@pytest.mark.parametrize("path,body,field", [
    ("/api/v1/jobs/", _body(colour="red"), "colour"),
    ("/api/v1/jobs/", _body(roles=[{"name": "worker", "tasks": 1, "gpu": 2}]), "roles[0].gpu"),
    ("/api/v1/jobs/", _body(roles=[{"name": "a"}, {"name": "b", "numa_nodes": 1}]), "roles[1].numa_nodes"),
    ("/api/v1/jobs/", _body(id=5), "id"),  # read-only fields are not accepted either
    ("/api/v1/queues/", {"name": "q", "parent": "root", "quotas": [{"flavor": "H100", "gurantee": 1}]},
     "quotas[0].gurantee"),
    ("/api/v1/teams/", {"name": "Team X", "owner": "bob"}, "owner"),
    ("/api/v1/quotas/", {"queue": "alpha", "flavor": "A100", "quota": 1, "max": 2}, "max"),
])
def test_unknown_fields_refused_at_every_level(admin, path, body, field):
    before = table_counts()
    r = admin.post(path, body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json() and "unknown field" in r.json()[field][0]
    assert table_counts() == before


def test_node_reports_refuse_unknown_nested_fields(client_for):
    """The node agent's bodies: a GPU's known inventory keys are accepted (not stored), others refused."""
    agent = client_for("agent")
    ok = {"name": "n-x", "flavor": "H100", "gpus": [{"index": 0, "model": "NVIDIA H100", "pci_bus_id": "0:1",
                                                     "xids": [], "nvlink_peers": []}]}
    assert agent.post("/api/v1/nodes/register/", ok, format="json").status_code == 201
    bad = {**ok, "gpus": [{**ok["gpus"][0], "temperature": 40}]}
    r = agent.post("/api/v1/nodes/register/", bad, format="json")
    assert r.status_code == 400 and "gpus[0].temperature" in r.json()
    r = agent.post("/api/v1/nodes/n-x/reports/", {"tasks": [{"task": 1, "attempt": 0, "event": "started",
                                                             "extra": 1}]}, format="json")
    assert r.status_code == 400 and "tasks[0].extra" in r.json()


def test_every_api_serializer_refuses_unknown_fields():
    """The rule lives in one base class; every serializer of the API derives from it (a new one cannot
    silently drop fields)."""
    from rest_framework import serializers

    from gpuplatform.api.serializers import base, cluster, jobs, metrics, queues, tenancy

    found = []
    for module in (cluster, jobs, metrics, queues, tenancy):
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, serializers.BaseSerializer) and cls.__module__ == module.__name__:
                found.append(cls)
                assert issubclass(cls, base.StrictFieldsMixin), f"{module.__name__}.{name} drops unknown fields"
    assert len(found) >= 20


# --- one error shape, one name rule: the same table through the API and the form ------------------------

# (what is wrong, the body change, the field path named). Rows come from the serializer (types, lengths,
# unknown keys) and from the services (gang shape, name rule, queue): the shape must not tell them apart.
ERROR_TABLE = [
    ("script in the name", {"name": "<script>alert(1)</script>"}, "name"),
    ("non-ASCII name", {"name": "jöb"}, "name"),
    ("name starting with a dot", {"name": ".hidden"}, "name"),
    ("role name with a space", {"roles": [{"name": "my worker", "tasks": 1}]}, "roles[0].name"),
    ("min_available above tasks", {"roles": [{"name": "w", "tasks": 2, "min_available": 3}]},
     "roles[0].min_available"),
    ("tasks not a number", {"roles": [{"name": "w", "tasks": "many"}]}, "roles[0].tasks"),
    ("second role's tasks below 1", {"roles": [{"name": "a"}, {"name": "b", "tasks": 0}]}, "roles[1].tasks"),
    ("unknown queue", {"queue": "nope"}, "queue"),
    ("priority not a number", {"priority": "high"}, "priority"),
]


@pytest.mark.parametrize("why,change,field", ERROR_TABLE, ids=[r[0] for r in ERROR_TABLE])
def test_error_table_api(client_for, why, change, field):
    """One shape: {"<field path>": ["<rule>"]}, flat paths, whichever layer found the fault."""
    member = client_for("member")  # its token is issued (an Event) before the count
    before = table_counts()
    r = member.post("/api/v1/jobs/", {**_body(), **change}, format="json")
    assert r.status_code == 400, (why, r.content)
    data = r.json()
    assert field in data, (why, data)
    assert all(isinstance(k, str) and isinstance(v, list) and v and all(isinstance(m, str) for m in v)
               for k, v in data.items()), data
    assert table_counts() == before


FORM_ROWS = [r for r in ERROR_TABLE if r[2] in ("name", "roles[0].name", "roles[0].min_available", "roles[0].tasks",
                                                 "priority")]


@pytest.mark.parametrize("why,change,field", FORM_ROWS, ids=[r[0] for r in FORM_ROWS])
def test_error_table_form(users, why, change, field):
    """The same rows through the job form: refused too, on the same field."""
    from django.test import Client

    from gpuplatform.models import Job

    client = Client()
    client.force_login(users["member"])
    role = {"name": "worker", "tasks": 1, "min_available": "", **(change.get("roles") or [{}])[0]}
    post = {"name": change.get("name", "train"), "team": "alpha", "queue": "alpha",
            "priority": change.get("priority", 0), "preemptible": "on", "command": "sleep 3600",
            "topology_mode": "none", "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0",
            "roles-MIN_NUM_FORMS": "1", "roles-MAX_NUM_FORMS": "16",
            **{f"roles-0-{k}": v for k, v in {"gpus_per_task": 1, **role}.items()}}
    r = client.post("/jobs/new/", post)
    assert r.status_code == 200 and Job.objects.count() == 0, why  # the form again, with errors; nothing stored
    form, roles = r.context["form"], r.context["roles"]
    if field.startswith("roles[0]."):
        assert roles.forms[0].errors.get(field.split(".", 1)[1]), (why, roles.errors)
    else:
        assert form.errors.get(field), (why, form.errors)
    if field.endswith("name"):  # one validator (gpuplatform/names.py): the form says what the API says
        from gpuplatform.names import name_error

        kind, value = ("role", role["name"]) if field.startswith("roles") else ("job", post["name"])
        shown = roles.forms[0].errors[field.split(".", 1)[1]] if field.startswith("roles") else form.errors[field]
        assert shown == [name_error(kind, value)], (why, shown)


def test_schema_documents_error_shape_and_idempotency(admin):
    schema = admin.get("/api/schema/?format=json")
    assert schema.status_code == 200
    doc = schema.json()
    assert doc["components"]["schemas"]["FieldErrors"]["additionalProperties"]["type"] == "array"
    post = doc["paths"]["/api/v1/jobs/"]["post"]
    assert post["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/FieldErrors")
    assert any(p["name"] == "Idempotency-Key" for p in post["parameters"])
    assert "409" in post["responses"]
    for path in ("/api/v1/queues/", "/api/v1/quotas/", "/api/v1/teams/", "/api/v1/memberships/",
                 "/api/v1/nodes/register/"):
        assert any(p["name"] == "Idempotency-Key" for p in doc["paths"][path]["post"]["parameters"]), path
    listing = doc["paths"]["/api/v1/jobs/"]["get"]
    assert any(p["name"] == "cursor" for p in listing["parameters"])
    assert not any(p["name"] == "offset" for p in listing["parameters"])


def test_idempotency_key_with_a_database_error_is_a_400_not_a_500(client_for):
    """A NUL in a looked-up name reaches PostgreSQL as a DataError (answered 400); with an Idempotency-Key
    the request runs inside the key's transaction: still a 400, nothing remembered, the key reusable."""
    r = client_for("member").post("/api/v1/jobs/", _body(queue="al\x00pha"), format="json",
                                  HTTP_IDEMPOTENCY_KEY="nul-1")
    assert r.status_code == 400
    assert client_for("member").post("/api/v1/jobs/", _body(), format="json",
                                     HTTP_IDEMPOTENCY_KEY="nul-1").status_code == 201
