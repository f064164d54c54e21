"""New-user trial 25 (h, 4): the children's-sum refusal says what to do ("lower another queue's quota first, or raise
<parent>'s"): with the teams' quotas summing to the parent's whole quota (the demo), every increase was refused with
no way out named. One message (quota_rules), so the quota API, the queue API, the services and the what-if say it."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Queue, Quota

pytestmark = pytest.mark.django_db

HINT = ": lower another queue's quota first, or raise root's"


def test_the_services_refusal_names_what_to_do(cluster):
    alpha = Queue.objects.get(name="alpha")  # alpha 16 + beta 16 = root's 32
    with pytest.raises(services.ValidationError) as exc:
        services.set_quota(alpha, "H100", 0, 17, None)
    assert exc.value.errors["quota"] == ("children's quotas would sum to 33, above the parent queue's quota (32) for "
                                         "H100" + HINT)


def test_the_quota_api_and_the_what_if_say_it(admin):
    row = Quota.objects.get(queue__name="alpha")
    etag = admin.get(f"/api/v1/quotas/{row.pk}/")["ETag"]
    r = admin.patch(f"/api/v1/quotas/{row.pk}/", {"quota": 17}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400 and r.json()["quota"][0].endswith(HINT), r.content
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "set_quota", "queue": "alpha", "flavor": "H100",
                                                      "quota": 17}]}, format="json")
    assert r.status_code == 400 and r.json()["changes[0].quota"][0].endswith(HINT), r.content


def test_through_a_grouping_node_the_hint_names_the_ancestor_with_a_quota(cluster):
    services.create_queue("group", parent="root")  # no quota row: claims its children's quotas in root's sum
    with pytest.raises(services.ValidationError) as exc:
        services.create_queue("inner", parent="group", quotas={"H100": (0, 1, None)})
    message = next(iter(exc.value.errors.values()))
    assert "under queue root, the nearest ancestor with a quota" in message and message.endswith(HINT), message
