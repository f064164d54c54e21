"""New-user trial 9 (notes/trial9.md), the API's findings: F7 (filters naming nothing), F10 (a queue's grace
period over REST; closed asked, closing given), F11 (an empty quota PATCH writes nothing), F12 (page JSON
without a session), F17 (a team name taken in other letter case)."""
from __future__ import annotations


def test_filters_naming_nothing_are_a_400_naming_the_parameter(admin, client_for, jobs):
    """F7: ?submitter=nope, ?flavor=nope answered an empty 200. They go through the one
    mechanism the jobs' team / queue filters use (api.filters.NamedFilter): a 400 naming the parameter and
    the rule; a name that exists still filters."""
    for url, param, message in (
            ("/api/v1/jobs/?submitter=nope", "submitter", "unknown user 'nope'"),
            ("/api/v1/nodes/?flavor=nope", "flavor", "unknown flavor 'nope': no node has it"),
            ("/api/v1/nodes/?domain=nope", "domain", "unknown domain 'nope'"),
            ("/api/v1/events/?actor=nope", "actor", "unknown user 'nope'"),
            ("/api/v1/events/?queue=nope", "queue", "unknown queue 'nope'"),
            ("/api/v1/events/?node=nope", "node", "unknown node 'nope'"),
            ("/api/v1/queues/?team=nope", "team", "unknown team 'nope'"),
            ("/api/v1/queues/?parent=nope", "parent", "unknown queue 'nope'"),
            ("/api/v1/quotas/?queue=nope", "queue", "unknown queue 'nope'"),
            ("/api/v1/memberships/?user=nope", "user", "unknown user 'nope'")):
        r = admin.get(url)
        assert r.status_code == 400 and r.json() == {param: [message]}, (url, r.content)
    assert admin.get("/api/v1/events/?kind=submitted").json()["count"] == 2
    # a kind is free text, not a row's name: one that has not happened yet lists nothing (no 400 for a poller)
    assert admin.get("/api/v1/events/?kind=evicted").json()["count"] == 0
    assert client_for("member").get("/api/v1/jobs/?submitter=mike").json()["count"] == 1
    assert client_for("member").get("/api/v1/jobs/?submitter=bob").json()["count"] == 0  # another team's
    # a non-admin is not told which user names exist: an unknown one filters to nothing, as a known one may
    for url in ("/api/v1/jobs/?submitter=nope", "/api/v1/memberships/?user=nope"):
        r = client_for("member").get(url)
        assert r.status_code == 200 and r.json()["count"] == 0, (url, r.content)
    assert admin.get("/api/v1/nodes/?flavor=H100").json()["count"] > 0


def test_an_empty_quota_patch_writes_nothing_and_keeps_the_etag(admin):
    """F11: PATCH /api/v1/quotas/<id>/ {} with a valid If-Match answered 200 with a new updated_at and ETag,
    so another admin's pending edit got a 412 for a no-op. A change to the same values writes nothing."""
    from gpuplatform.models import Event, Quota

    row = Quota.objects.get(queue__name="alpha", flavor="H100")
    url = f"/api/v1/quotas/{row.pk}/"
    before = admin.get(url)
    events = Event.objects.filter(kind="quota_changed").count()
    for body in ({}, {"quota": row.quota}, {"guarantee": row.guarantee, "quota": row.quota, "limit": row.limit}):
        r = admin.patch(url, body, format="json", HTTP_IF_MATCH=before["ETag"])
        assert r.status_code == 200 and r["ETag"] == before["ETag"], (body, r.content)
        assert r.json()["updated_at"] == before.json()["updated_at"]
    assert Event.objects.filter(kind="quota_changed").count() == events
    r = admin.patch(url, {"quota": row.quota - 1}, format="json", HTTP_IF_MATCH=before["ETag"])
    assert r.status_code == 200 and r["ETag"] != before["ETag"]


def test_a_queues_grace_period_is_set_over_rest_and_closed_asked_says_closing(admin, jobs):
    """F10: preemption_grace_seconds was returned but refused on POST and PATCH ("unknown field"), though the
    README says scripts can do what the pages do; PATCH {"state": "closed"} answered "closing" with no word
    why. Both go through services (create_queue / update_queue), with the range rule on the field."""
    r = admin.post("/api/v1/queues/", {"name": "t9q", "parent": "root", "preemption_grace_seconds": 120},
                   format="json")
    assert r.status_code == 201 and r.json()["preemption_grace_seconds"] == 120, r.content
    etag = r["ETag"]
    r = admin.patch("/api/v1/queues/t9q/", {"preemption_grace_seconds": 0}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 200 and r.json()["preemption_grace_seconds"] == 0, r.content
    for bad in (-1, 86401, "30", 1.5, None):
        r = admin.patch("/api/v1/queues/t9q/", {"preemption_grace_seconds": bad}, format="json",
                        HTTP_IF_MATCH=admin.get("/api/v1/queues/t9q/")["ETag"])
        assert r.status_code == 400 and list(r.json()) == ["preemption_grace_seconds"], (bad, r.content)
    r = admin.post("/api/v1/queues/", {"name": "t9r", "parent": "root", "preemption_grace_seconds": 10**6},
                   format="json")
    assert r.status_code == 400 and list(r.json()) == ["preemption_grace_seconds"], r.content
    assert admin.get("/api/v1/queues/t9q/").json()["preemption_grace_seconds"] == 0  # nothing lost

    r = admin.patch("/api/v1/queues/alpha/", {"state": "closed"}, format="json",
                    HTTP_IF_MATCH=admin.get("/api/v1/queues/alpha/")["ETag"])  # alpha has a pending job
    assert r.status_code == 200 and r.json()["state"] == "closing", r.content
    assert "becomes closed when its last job ends" in r.json()["state_note"]
    r = admin.patch("/api/v1/queues/t9q/", {"state": "closed"}, format="json",
                    HTTP_IF_MATCH=admin.get("/api/v1/queues/t9q/")["ETag"])  # no jobs: closed at once
    assert r.json()["state"] == "closed" and "state_note" not in r.json()


def test_a_team_name_clashing_in_letter_case_is_refused_on_the_name(admin):
    """F17: POST /api/v1/teams/ {"name": "ALPHA"} after alpha answered {"slug": ["slug 'alpha' is empty or
    taken"]}, though the client sent no slug. The rule is the name's, and says which team has the slug."""
    r = admin.post("/api/v1/teams/", {"name": "ALPHA"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["name"], r.content
    assert r.json()["name"][0].startswith("a team named 'alpha' (slug 'alpha') already exists")  # (trial 18f)
    r = admin.post("/api/v1/teams/", {"name": "gamma", "slug": "alpha"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["slug"], r.content
    assert r.json()["slug"][0].startswith("slug 'alpha' is taken by team 'alpha': ")  # (and the rule: trial 20, F6)
    # a slug of its own does not make a name differing only in letter case another team's (trial 18f)
    r = admin.post("/api/v1/teams/", {"name": "ALPHA", "slug": "alpha-2"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["name"], r.content
