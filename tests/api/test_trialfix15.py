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


# --- F2: a role's flavor -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("flavor, needle", [
    ("H100|<script>alert(1)</script>", "'<script>alert(1)</script>' is not one"),
    ("H100|ab\ncd", "must be one line of text"),  # a flavor is one line (the one-line rule, trial 26, F5)
    ("|", "has an empty GPU model name"),
    ("H100|", "has an empty GPU model name"),
    ("H100 x", "'H100 x' is not one"),
])
def test_a_role_flavor_follows_the_flavor_rule(client_for, flavor, needle):
    """Trial 15 F2: each '|' alternative of a role's flavor is a GPU model name (the quota's rule), none empty; such
    a flavor was stored as sent (and '|' ran as 'any model')."""
    from tests.api.helpers_api import job_body, table_counts

    member = client_for("member")  # (its token's Event before the count)
    before = table_counts()
    body = job_body("f")
    body["roles"][0]["flavor"] = flavor
    r = member.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400 and needle in r.json()["roles[0].flavor"][0], r.content
    assert table_counts() == before


def test_a_good_either_flavor_is_taken(client_for):
    from tests.api.helpers_api import job_body

    body = job_body("either")
    body["roles"][0]["flavor"] = "H100|A100"
    r = client_for("member").post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 201 and r.json()["roles"][0]["flavor"] == "H100|A100", r.content


# --- F6: a log offset past the end ------------------------------------------------------------------------------

def test_a_log_offset_past_the_end_starts_at_the_end(client_for):
    """`?offset=1000000` on a 239-byte log answered next_offset 1000000: a follower would skip what came next."""
    from django.utils import timezone

    from gpuplatform.models import Task, TaskLog
    from tests.api.helpers_api import job_body

    member = client_for("member")
    job = member.post("/api/v1/jobs/", job_body("logged"), format="json").json()
    task = Task.objects.get(job_id=job["id"])
    TaskLog.objects.create(task=task, attempt=0, offset=0, size=6, data="hello\n", created_at=timezone.now())
    url = f"/api/v1/jobs/{job['id']}/logs/?task=worker-0&attempt=0"
    past = member.get(f"{url}&offset=1000000").json()
    assert (past["offset"], past["next_offset"], past["size"], past["data"]) == (6, 6, 6, ""), past
    TaskLog.objects.create(task=task, attempt=0, offset=6, size=4, data="more", created_at=timezone.now())
    assert member.get(f"{url}&offset={past['next_offset']}").json()["data"] == "more"


# --- F7: a NUL in a page's parameter ----------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["/jobs/?q=%00", "/topology/?domain=%00", "/nodes/?health=%00"])
def test_a_nul_in_a_pages_parameter_is_a_400_in_text(users, url):
    """Pages answered a NUL with the API's JSON body; they name a bad parameter in text, as for any other."""
    page = Client()
    page.force_login(users["staff"])
    r = page.get(url)
    assert r.status_code == 400 and r["Content-Type"].startswith("text/plain"), (r.status_code, r["Content-Type"])
    assert r.content.decode() == f"{url.split('?')[1].split('=')[0]}: NUL characters are not accepted"


def test_the_api_and_page_json_keep_the_json_400(admin, users):
    r = admin.get("/api/v1/jobs/?name=%00")
    assert r.status_code == 400 and r.json() == {"name": ["NUL characters are not accepted"]}
    page = Client()
    page.force_login(users["staff"])
    r = page.get("/queues/data.json?x=%00")
    assert r.status_code == 400 and r["Content-Type"].startswith("application/json")


# --- F5: a large whole float in a whole-number field ----------------------------------------------------------

@pytest.mark.parametrize("field", ["tasks", "min_run_before_move_seconds", "priority"])
def test_a_large_whole_float_gets_the_fields_bound_not_not_an_integer(client_for, field):
    """`1e300` (a whole number written with an exponent) answered "A valid integer is required." while the integer
    literal gets the field's bound: docs/api.md says 2, 2.0 and 2e0 are 2."""
    from tests.api.helpers_api import job_body

    body = job_body("big")
    if field == "tasks":
        body["roles"][0]["tasks"] = 1e300
        path = "roles[0].tasks"
    else:
        body[field] = 1e300
        path = field
    r = client_for("member").post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    message = " ".join(r.json()[path])
    assert "valid integer" not in message and ("less than or equal" in message or "at most" in message
                                               or "from" in message), message
    body = job_body("small", gpus=1)
    body["roles"][0]["tasks"] = 2e0
    r = client_for("member").post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 201 and r.json()["roles"][0]["tasks"] == 2, r.content
