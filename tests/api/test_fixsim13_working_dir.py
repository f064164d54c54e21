"""New-user trial 13, F14: a relative working_dir (`../../etc`) was taken and resolved against the node agent's
own work directory. It is a 400 naming the field now (the job's and a role's); blank and absolute paths stay."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

ROLE = [{"tasks": 1, "gpus_per_task": 1}]


@pytest.fixture
def api(client_for):
    client = client_for("staff")
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize("where,value", [("job", "../../etc"), ("job", "data/run"), ("job", "./x"), ("job", "~/run"),
                                         ("role", "../../etc"), ("role", " rel ")])
def test_a_relative_working_dir_is_a_400_naming_the_field(api, where, value):
    body = {"name": "j", "queue": "alpha", "command": "true", "roles": [dict(ROLE[0])]}
    if where == "job":
        body["working_dir"] = value
    else:
        body["roles"][0]["working_dir"] = value
    r = api.post("/api/v1/jobs/", body, format="json")
    field = "working_dir" if where == "job" else "roles[0].working_dir"
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert field in r.json(), r.json()
    assert "must be an absolute path (starting with /) or blank" in str(r.json()[field]), r.json()


def test_blank_and_absolute_working_dirs_are_taken(api):
    for value in ("", "/srv/run", " /srv/run "):
        r = api.post("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "true", "working_dir": value,
                                       "roles": ROLE}, format="json")
        assert r.status_code == 201, (value, r.content[:300])
