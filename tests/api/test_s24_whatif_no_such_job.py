"""POST /api/v1/forecast/ naming a job that does not exist (new-user trial 24, F5): a member was answered 403 "you
may ask about your own teams' jobs only" (an admin: 400 "no pending or running job ..."), and a 20-digit id went
through as any other. Both now get the same 400 on changes[i].job; an id past 64 bits is the API's "no job has an
id that large" (the events filter's words); another team's job reads the same as none (unknown and invisible
alike), and only a job the user sees but may not change (a viewer's) is the 403."""
from __future__ import annotations

import pytest

from tests.api.test_forecast_api import URL, busy  # noqa: F401  (fixture)


@pytest.mark.parametrize("kind", ["cancel", "set_priority"])
def test_a_job_that_does_not_exist_is_the_same_400_for_a_member_and_an_admin(busy, admin, client_for, kind):
    member = client_for("member")
    for job, message in ((123456, "no pending or running job 123456"),
                         (9223372036854775807, "no pending or running job 9223372036854775807"),
                         (99999999999999999999, "no job has an id that large")):
        change = {"kind": kind, "job": job, **({"priority": 1} if kind == "set_priority" else {})}
        for client in (member, admin):
            r = client.post(URL, {"changes": [change]}, format="json")
            assert r.status_code == 400, r.content
            assert r.json() == {"changes[0].job": [message]}


def test_another_teams_job_reads_as_no_such_job_and_a_viewers_own_teams_job_is_a_403(busy, client_for):
    """Unknown and invisible read the same (the jobs API's 404): another team's job is "no pending or running job",
    not a 403 that says it exists; a job of the viewer's own team, which the viewer may see but not change, is the
    403."""
    other = busy["other"].pk
    r = client_for("member").post(URL, {"changes": [{"kind": "cancel", "job": other}]}, format="json")
    assert r.status_code == 400 and r.json() == {"changes[0].job": [f"no pending or running job {other}"]}, r.content
    r = client_for("viewer").post(URL, {"changes": [{"kind": "cancel", "job": busy["own"].pk}]}, format="json")
    assert r.status_code == 403, r.content
    assert r.json() == {"detail": "changes[0]: you may ask about your own teams' jobs only"}
    r = client_for("member").post(URL, {"changes": [{"kind": "cancel", "job": 0}]}, format="json")
    assert r.status_code == 400 and r.json() == {"changes[0].job": ["a job id is 1 or more"]}, r.content


def test_two_submit_changes_with_one_id_name_the_change_that_has_it(busy, client_for):
    """F5b: the second read "'a' is already a job's id"; no job has it, changes[0] does."""
    submit = {"kind": "submit", "id": "a", "queue": "alpha", "tasks": 1}
    r = client_for("member").post(URL, {"changes": [submit, submit]}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"changes[1].id": ["'a' is already the id of changes[0]"]}
