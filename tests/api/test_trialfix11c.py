"""New-user trial 11 findings fixed on branch trialfix11c (notes/trialfix11c.md): F5 (the what-if forecast took
hypothetical jobs that submission refuses), F7 (closing a parent queue; submissions under a closed one), F11 (an
unbounded what-if), F17 (If-Match and PUT on queues). F2 (re-parenting past the quota rules) is in
tests/platform/test_queue_reparent.py and tests/api/test_invalid_queue_tree.py."""
from __future__ import annotations

import pytest

from gpuplatform.models import Job, Queue

URL = "/api/v1/forecast/"
SLEEP = ["sleep", "3600"]


def _submit_change(**fields):
    return {"changes": [{"kind": "submit", "queue": "alpha", "tasks": 1, **fields}]}


# --- F5: the what-if's submit change by submission's own rules ----------------------------------------------

@pytest.mark.parametrize("fields, field, words", [
    ({"topology_mode": "hard", "highest_tier": 5}, "highest_tier", "no such tier in this cluster: 5 (tiers: [1, 2])"),
    ({"topology_mode": "hard", "highest_tier": 99}, "highest_tier", "no such tier in this cluster: 99"),
    ({"highest_tier": 0}, "highest_tier", "highest_tier must be a tier number from 1"),
    ({"topology_mode": "hard"}, "highest_tier", "a hard topology constraint needs highest_tier"),
    ({"time_limit": 10**12}, "time_limit", "time_limit must be a whole number of seconds from 1 to 31622400"),
    ({"time_limit": 0}, "time_limit", "from 1 to 31622400"),
])
def test_what_if_submit_refused_as_submission_refuses(admin, fields, field, words):
    r = admin.post(URL, _submit_change(**fields), format="json")
    assert r.status_code == 400, r.content
    assert words in r.json()[f"changes[0].{field}"][0], r.json()


def test_what_if_submit_tier_refused_on_the_same_rule_as_submission(admin):
    """The what-if's message is the one POST /api/v1/jobs/ gives for the same tier."""
    job = admin.post("/api/v1/jobs/", {"queue": "alpha", "name": "t", "command": SLEEP, "topology_mode": "hard",
                                       "highest_tier": 5, "roles": [{"tasks": 1}]}, format="json")
    what_if = admin.post(URL, _submit_change(topology_mode="hard", highest_tier=5), format="json")
    assert job.status_code == what_if.status_code == 400
    assert job.json()["highest_tier"] == what_if.json()["changes[0].highest_tier"]


def test_what_if_submit_takes_tier_names_as_submission_does(admin):
    """Submission takes "leaf" / "tier-2" for a tier; the what-if refused them (an integer field of its own)."""
    for tier in ("leaf", "tier-2", 2):
        r = admin.post(URL, _submit_change(topology_mode="hard", highest_tier=tier), format="json")
        assert r.status_code == 200, (tier, r.content)
    r = admin.post(URL, _submit_change(topology_mode="hard", highest_tier="nope"), format="json")
    assert r.status_code == 400 and "unknown tier name 'nope'" in r.json()["changes[0].highest_tier"][0]


def test_what_if_submit_id_clashing_with_a_real_job_is_refused(admin, jobs):
    real = Job.objects.order_by("pk").first()
    r = admin.post(URL, _submit_change(id=str(real.pk)), format="json")
    assert r.status_code == 400, r.content
    assert f"'{real.pk}' is already a real job's id" in r.json()["changes[0].id"][0]
    ok = admin.post(URL, _submit_change(id="probe", time_limit=3600, topology_mode="hard", highest_tier=2),
                    format="json")
    assert ok.status_code == 200, ok.content
    assert any(j["id"] == "probe" and j["hypothetical"] for j in ok.json()["jobs"])


# --- F7: a queue under a closed (closing) parent takes no new jobs, by the API and in the what-if -----------

def test_submission_and_what_if_under_a_closing_root_are_refused(admin, jobs):
    etag = admin.get("/api/v1/queues/root/")["ETag"]
    r = admin.patch("/api/v1/queues/root/", {"state": "closed"}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 200 and r.json()["state"] == "closing", r.content  # alpha / beta have live jobs
    r = admin.post("/api/v1/jobs/", {"queue": "alpha", "name": "t", "command": SLEEP, "roles": [{"tasks": 1}]},
                   format="json")
    assert r.status_code == 400, r.content
    assert r.json()["queue"] == ["queue alpha is under queue root, which is closing: it accepts no new jobs"]
    r = admin.post(URL, _submit_change(), format="json")
    assert r.status_code == 400 and "under queue root, which is closing" in r.json()["changes[0].queue"][0]
    assert Queue.objects.get(name="root").state == "closing"


# --- F11: one what-if's work is bounded -----------------------------------------------------------------------

def test_what_if_bounds_its_changes_and_added_nodes(admin, cluster):
    MAX_CHANGES = 20  # docs/forecast.md; 512 added nodes in all
    weight = {"kind": "set_weight", "queue": "alpha", "weight": 2}
    assert admin.post(URL, {"changes": [weight] * MAX_CHANGES}, format="json").status_code == 200
    r = admin.post(URL, {"changes": [weight] * (MAX_CHANGES + 1)}, format="json")
    assert r.status_code == 400 and r.json()["changes"] == ["at most 20 changes per what-if (ask several what-ifs)"]
    r = admin.post(URL, {"changes": [{"kind": "add_nodes", "count": 513, "gpus": 8}]}, format="json")
    assert r.status_code == 400 and r.json() == {"changes[0].count": ["Ensure this value is less than or equal to 512."]}, r.json()
    many = [{"kind": "add_nodes", "count": 200, "gpus": 8}] * 3
    r = admin.post(URL, {"changes": many}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"changes[2].count": ["the what-if's add_nodes changes would add 600 nodes; at most 512 in all"]}
    assert admin.post(URL, {"changes": many[:2]}, format="json").status_code == 200
    from gpuplatform.api.views import forecast

    assert (forecast.MAX_CHANGES, forecast.MAX_ADDED_NODES) == (20, 512)


# --- F17: If-Match compares strongly, `*` is allowed; PUT on a queue replaces the whole queue -------------------

def test_if_match_weak_tag_fails_star_and_lists_match(admin, cluster):
    from gpuplatform.models import Quota

    row = Quota.objects.get(queue__name="alpha", flavor="H100")
    url = f"/api/v1/quotas/{row.pk}/"
    etag = admin.get(url)["ETag"]
    r = admin.patch(url, {"quota": 15}, format="json", HTTP_IF_MATCH=f"W/{etag}")
    assert r.status_code == 412, r.content  # RFC 9110: If-Match uses the strong comparison
    assert Quota.objects.get(pk=row.pk).quota == 16
    r = admin.patch(url, {"quota": 15}, format="json", HTTP_IF_MATCH=f'"nope", {etag}')
    assert r.status_code == 200, r.content  # one tag of the list matches
    r = admin.patch(url, {"quota": 14}, format="json", HTTP_IF_MATCH="*")
    assert r.status_code == 200, r.content  # "*": any current representation, documented in docs/api.md
    assert Quota.objects.get(pk=row.pk).quota == 14


def test_put_on_a_queue_needs_the_whole_queue(admin, cluster):
    etag = admin.get("/api/v1/queues/beta/")["ETag"]
    r = admin.put("/api/v1/queues/beta/", {"weight": 3}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400, r.content
    assert set(r.json()) == {"parent", "state", "preemption_grace_seconds"}
    assert Queue.objects.get(name="beta").weight == 2
    whole = {"parent": "root", "weight": 3, "state": "open", "preemption_grace_seconds": 60}
    r = admin.put("/api/v1/queues/beta/", whole, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 200, r.content
    beta = Queue.objects.get(name="beta")
    assert (beta.weight, beta.preemption_grace_seconds) == (3, 60)
    r = admin.patch("/api/v1/queues/beta/", {"weight": 4}, format="json", HTTP_IF_MATCH=r["ETag"])
    assert r.status_code == 200 and Queue.objects.get(name="beta").weight == 4  # PATCH: some fields
