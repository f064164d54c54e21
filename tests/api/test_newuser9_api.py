"""New-user trial 9 (notes/trial9.md), the API's findings: F7 (filters naming nothing), F10 (a queue's grace
period over REST; closed asked, closing given), F11 (an empty quota PATCH writes nothing), F12 (page JSON
without a session), F17 (a team name taken in other letter case)."""
from __future__ import annotations


def test_filters_naming_nothing_are_a_400_naming_the_parameter(admin, client_for, jobs):
    """F7: ?kind=bogus, ?submitter=nope, ?flavor=nope answered an empty 200. They go through the one
    mechanism the jobs' team / queue filters use (api.filters.NamedFilter): a 400 naming the parameter and
    the rule; a name that exists still filters."""
    for url, param, message in (
            ("/api/v1/events/?kind=bogus", "kind", "unknown event kind 'bogus': no event of that kind has been recorded"),
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
    assert client_for("member").get("/api/v1/jobs/?submitter=mike").json()["count"] == 1
    assert client_for("member").get("/api/v1/jobs/?submitter=bob").json()["count"] == 0  # another team's
    assert admin.get("/api/v1/nodes/?flavor=H100").json()["count"] > 0
