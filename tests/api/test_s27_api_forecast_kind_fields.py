"""POST /api/v1/forecast/: a field the change's kind does not take is refused as "not a field of kind <kind>",
naming what the kind takes, whatever its value's type (new-user trial 27: {"kind": "submit", "job": {...}} read
"must be a whole number, not an object", as if a job id were what it lacked)."""
from __future__ import annotations

import pytest

from gpuplatform.api.views.forecast import KIND_FIELDS

pytestmark = pytest.mark.django_db
URL = "/api/v1/forecast/"
SUBMIT = {"kind": "submit", "queue": "alpha", "tasks": 1}


@pytest.mark.parametrize("job", [{"queue": "alpha", "tasks": 1}, 5, "x", [1], None])
def test_a_field_of_another_kind_is_named_before_its_type(admin, job):
    r = admin.post(URL, {"changes": [{**SUBMIT, "job": job}]}, format="json")
    assert r.status_code == 400, r.content
    (message,) = r.json()["changes[0].job"]
    assert message.startswith("not a field of kind submit (a submit change takes queue, tasks, id, gpus_per_task,")
    assert "job" not in KIND_FIELDS["submit"]


def test_each_kind_names_what_it_takes_and_unknown_keys_keep_the_base_rule(admin):
    r = admin.post(URL, {"changes": [{"kind": "cancel", "job": 1, "queue": {}}]}, format="json")
    assert r.json() == {"changes[0].queue": ["not a field of kind cancel (a cancel change takes job)"]}
    assert KIND_FIELDS["set_quota"] == ("kind", "queue", "flavor", "guarantee", "quota", "limit")
    bogus = admin.post(URL, {"changes": [{**SUBMIT, "bogus": 1}]}, format="json").json()
    assert bogus["changes[0].bogus"][0].startswith("unknown field")
