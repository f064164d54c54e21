"""New-user trial 13 findings on the API (notes/fix13.md): one quota rule for the quota API and the forecast's
set_quota (the quota API took up to 2147483647 GPUs, the forecast 10,000,000, with different words)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Quota

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
