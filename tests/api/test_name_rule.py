"""Issue 13: one name rule (gpuplatform/names.py) for jobs, roles, queues and teams, through the API and the
services alike: the error names the field and states the rule, and nothing is written."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Job, Queue, Team
from gpuplatform.names import NAME_HELP, name_error

pytestmark = pytest.mark.django_db

BAD = [("<script>alert(1)</script>", "uses"), ("jöb", "uses"), (".hidden", "uses"), ("my queue", "uses"),
       ("a\u0000b", "uses"), (" ", "must not be empty"), ("", "must not be empty")]
GOOD = ["alpha-2", "vision.research", "a_b", "7f3e21"]


@pytest.mark.parametrize("kind", ["job", "role", "queue", "team"])
def test_the_rule_itself(kind):
    for name in GOOD:
        assert name_error(kind, name) is None
    for name, rule in BAD:
        message = name_error(kind, name)
        assert message.startswith(f"a {kind} name ") and rule in message, (name, message)
    assert "at most" in name_error(kind, "x" * 201)
    assert NAME_HELP in name_error(kind, "jöb")


def _api_create(client, kind, name):
    if kind == "job":
        return client.post("/api/v1/jobs/", {"queue": "alpha", "name": name, "command": "sleep 1",
                                             "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}]}, format="json")
    if kind == "queue":
        return client.post("/api/v1/queues/", {"name": name, "parent": "root"}, format="json")
    return client.post("/api/v1/teams/", {"name": name}, format="json")


@pytest.mark.parametrize("kind", ["job", "queue", "team"])
@pytest.mark.parametrize("name,rule", [b for b in BAD if b[0].strip() and "\u0000" not in b[0]])
def test_the_api_refuses_a_bad_name_naming_field_and_rule(client_for, kind, name, rule):
    before = (Job.objects.count(), Queue.objects.count(), Team.objects.count())
    r = _api_create(client_for("staff"), kind, name)
    assert r.status_code == 400, r.content
    assert r.json()["name"] == [name_error(kind, name)]  # the one validator's message, under the field
    assert (Job.objects.count(), Queue.objects.count(), Team.objects.count()) == before


@pytest.mark.parametrize("kind", ["queue", "team"])
def test_the_api_accepts_a_good_name(client_for, kind):
    r = _api_create(client_for("staff"), kind, "vision.research-2")
    assert r.status_code == 201, r.content


@pytest.mark.parametrize("create", [lambda n: services.create_team(n), lambda n: services.create_queue(n)],
                         ids=["team", "queue"])
def test_the_services_refuse_the_same_names(cluster, create):
    for name, rule in BAD:
        with pytest.raises(services.ValidationError) as err:
            create(name)
        assert rule in err.value.errors["name"]
