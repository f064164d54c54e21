"""New-user trial 13 findings on the API (notes/fix13.md): one quota rule for the quota API and the forecast's
set_quota (the quota API took up to 2147483647 GPUs, the forecast 10,000,000, with different words), and a NUL
inside a nested value reported on its own path (`roles[0].name`), not on the top-level field (`roles`)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Job, Quota

RULE = "{} must be a whole number of GPUs from 0 to 2147483647"


def _patch(admin, field, value):
    url = f"/api/v1/quotas/{Quota.objects.get(queue__name='root').pk}/"
    return admin.patch(url, {field: value}, format="json", HTTP_IF_MATCH=admin.get(url)["ETag"])


def _what_if(admin, field, value):
    return admin.post("/api/v1/forecast/", {"changes": [{"kind": "set_quota", "queue": "root", "flavor": "H100",
                                                         field: value}]}, format="json")


# --- one quota rule -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("limit", 2**31), ("limit", -1), ("quota", 10**30), ("guarantee", -5)])
def test_the_quota_api_and_the_forecast_refuse_a_quota_with_the_same_rule(admin, field, value):
    r = _patch(admin, field, value)
    assert r.status_code == 400 and r.json() == {field: [RULE.format(field)]}, r.content
    r = _what_if(admin, field, value)
    assert r.status_code == 400 and r.json() == {f"changes[0].{field}": [RULE.format(field)]}, r.content


@pytest.mark.parametrize("value", [10**7 + 1, 2**31 - 1])
def test_a_limit_the_quota_api_stores_can_be_forecast(admin, value):
    """The forecast refused a limit above 10,000,000 that the quota API saves ("Ensure this value is less than or
    equal to 10000000."): what the quota admin could save is what a what-if may try."""
    r = _what_if(admin, "limit", value)
    assert r.status_code == 200, r.content
    r = _patch(admin, "limit", value)
    assert r.status_code == 200 and r.json()["limit"] == value, r.content


def test_a_new_queues_quotas_hold_the_same_rule(admin):
    r = admin.post("/api/v1/queues/", {"name": "big", "quotas": [{"flavor": "H100", "quota": 0, "limit": 2**31}]},
                   format="json")
    assert r.status_code == 400 and r.json() == {"quotas[0].limit": [RULE.format("limit")]}, r.content


# --- NUL on its own path --------------------------------------------------------------------------------------

def _job(**extra):
    return {"name": "j", "queue": "alpha", "command": ["sleep", "1"], "roles": [{"name": "w", "tasks": 1}], **extra}


@pytest.mark.parametrize("body, path", [
    (_job(roles=[{"name": "w", "tasks": 1}, {"name": "p\x00s", "tasks": 1}]), "roles[1].name"),
    (_job(roles=[{"name": "w", "tasks": 1, "flavors": ["H100", "H\x00"]}]), "roles[0].flavors[1]"),
    (_job(command=["sleep", "1\x00"]), "command[1]"),
    (_job(env={"A": "1\x00"}), "env.A"),
    (_job(env={"A\x00B": "1"}), "env.AB"),  # a NUL in a key: the key without it
    (_job(name="j\x00"), "name"),
])
def test_a_nul_in_a_nested_value_is_reported_on_its_own_path(admin, body, path):
    r = admin.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400 and r.json() == {path: ["NUL characters are not accepted"]}, r.content
    assert not Job.objects.exists()


def test_a_nul_in_a_what_if_change_names_the_change_and_field(admin):
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "set_weight", "queue": "alpha", "weight": 2},
                                                     {"kind": "drain_nodes", "nodes": ["n0", "n\x001"]}]},
                   format="json")
    assert r.status_code == 400 and r.json() == {"changes[1].nodes[1]": ["NUL characters are not accepted"]}, \
        r.content
