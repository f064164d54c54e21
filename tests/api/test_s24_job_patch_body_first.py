"""PATCH /api/v1/jobs/<id>/ by a member (new-user trial 24, F7): {"name": "renamed"} was a 403 "changing a job's
priority needs a team admin ..." for a member and a 400 "unknown field ... accepted fields: priority" for an admin.
The body is read first: a body that is no priority change is the same 400 for everyone who sees the job; the 403
is for a valid priority change the member may not make."""
from __future__ import annotations

import pytest

RULE = ("changing a job's priority needs a team admin of alpha (or a platform admin); members may submit and "
        "cancel its jobs")


@pytest.mark.parametrize("body, field", [({"name": "renamed"}, "name"), ({"priority": 1, "queue": "beta"}, "queue"),
                                         ({}, "priority"), ({"priority": "x"}, "priority"),
                                         ({"priority": 2**40}, "priority")])
def test_a_body_that_is_no_priority_change_is_the_same_400_for_a_member_and_an_admin(client_for, jobs, body, field):
    url = f"/api/v1/jobs/{jobs['own'].pk}/"
    answers = [client_for(role).patch(url, body, format="json") for role in ("member", "viewer", "staff")]
    for r in answers:
        assert r.status_code == 400, r.content
        assert list(r.json()) == [field], r.content
    assert answers[0].json() == answers[1].json() == answers[2].json()
    jobs["own"].refresh_from_db()
    assert jobs["own"].priority == 0 and jobs["own"].name != "renamed"


def test_a_valid_priority_change_is_the_members_403_and_a_hidden_job_a_404(client_for, jobs):
    url = f"/api/v1/jobs/{jobs['own'].pk}/"
    r = client_for("member").patch(url, {"priority": 10}, format="json")
    assert r.status_code == 403 and r.json() == {"detail": RULE}, r.content
    # another team's job: not found whatever the body, before it is read
    r = client_for("other").patch(url, {"name": "renamed"}, format="json")
    assert r.status_code == 404, r.content
    assert client_for("team_admin").patch(url, {"priority": 10}, format="json").status_code == 200
