"""Trial 21, F6: an admin's cordon, drain or uncordon without a reason left the node's state reason empty, so the
nodes API and page showed no why; it is now who did it, as the health reason already said."""
from __future__ import annotations

import pytest

from gpuplatform.models import Event, Node


@pytest.mark.django_db
@pytest.mark.parametrize("action, state, words", [("cordon", "cordoned", "cordoned by"),
                                                  ("drain", "draining", "drained by")])
def test_a_move_without_a_reason_says_who_made_it(admin, cluster, action, state, words):
    r = admin.post(f"/api/v1/nodes/n1/{action}/", {}, format="json")
    assert r.status_code == 200, r.content
    body = admin.get("/api/v1/nodes/n1/").json()
    assert body["state"] == state and body["state_reason"].startswith(words), body
    assert body["state_since"]
    r = admin.post("/api/v1/nodes/n1/uncordon/", {}, format="json")
    assert r.status_code == 200, r.content
    body = admin.get("/api/v1/nodes/n1/").json()
    assert body["state"] == "ready" and body["state_reason"].startswith("returned to ready by"), body
    assert Node.objects.get(name="n1").health_reason == ""  # back in service: no health reason
    kinds = list(Event.objects.filter(node__name="n1").order_by("id").values_list("data__reason", flat=True))
    assert kinds[-2].startswith(words) and kinds[-1].startswith("returned to ready by"), kinds


@pytest.mark.django_db
def test_a_given_reason_is_kept_as_given(admin, cluster):
    r = admin.post("/api/v1/nodes/n1/cordon/", {"reason": "swap the PSU"}, format="json")
    assert r.status_code == 200, r.content
    assert admin.get("/api/v1/nodes/n1/").json()["state_reason"] == "swap the PSU"
