"""New-user trial 15 findings on the API and pages (notes/trial15.md): an admin's cordon / drain reason shown where
a health rule's is (F3), the logs API's offset past the end (F6), role flavors under the flavor rule (F2)."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform.models import Node


# --- F3: the cordon / drain reason ------------------------------------------------------------------------------

def test_an_admins_cordon_and_drain_reason_and_time_are_shown_and_cleared_on_uncordon(admin, users):
    """The nodes page and the node API showed `cordoned — —` (no reason, no since) after a cordon with a reason: it
    was only in the Event. A reason-less cordon says who did it; an uncordon clears both."""
    r = admin.post("/api/v1/nodes/n0/cordon/", {"reason": "bad fan"}, format="json")
    assert r.status_code == 200 and r.json()["health_reason"] == "bad fan" and r.json()["health_since"], r.content
    page = Client()
    page.force_login(users["staff"])
    html = page.get("/nodes/").content.decode()
    row = html[html.index('data-node="n0"'):].split("</tr>")[0]
    assert '<td class="reason">bad fan</td>' in row and "cordoned" in row, row
    r = admin.post("/api/v1/nodes/n0/drain/", {"reason": "swap PSU"}, format="json")
    assert (r.json()["state"], r.json()["health_reason"]) == ("draining", "swap PSU"), r.content
    r = admin.post("/api/v1/nodes/n0/uncordon/", {}, format="json")
    assert (r.json()["state"], r.json()["health_reason"], r.json()["health_since"]) == ("ready", "", None), r.content
    r = admin.post("/api/v1/nodes/n1/cordon/", {}, format="json")
    assert r.json()["health_reason"] == "cordoned by admin", r.content
    assert Node.objects.get(name="n1").health_since is not None
