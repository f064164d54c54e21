"""New-user trial 21: the what-if's per-queue summary showed a team member every team's queue (pending jobs,
mean waits). A member now sees the queues the queues API shows it (access.visible_queues: its teams' and the
platform's inner queues); the others are counted in `hidden_queues`, as hidden evictions are. Admins see all."""
from __future__ import annotations

from tests.api.test_forecast_api import URL, busy  # noqa: F401 (busy: a fixture)

SUBMIT = {"changes": [{"kind": "submit", "queue": "alpha", "tasks": 1, "gpus_per_task": 8, "time_limit": 900}]}


def test_a_member_sees_only_the_queues_the_queues_api_shows_it(busy, client_for):
    member = client_for("member")  # team alpha; beta (another team's queue) has a job waiting
    listed = {q["name"] for q in member.get("/api/v1/queues/").json()["results"]}
    assert "beta" not in listed and "alpha" in listed
    # a change that changes nothing: the forecast as it is (a what-if without a change is a 400, trial 25)
    noop = {"changes": [{"kind": "set_priority", "job": busy["own"].pk,
                         "priority": busy["own"].priority}]}
    for body in (SUBMIT, noop):
        r = member.post(URL, body, format="json")
        assert r.status_code == 200, r.content
        answer = r.json()
        shown = {q["queue"] for q in answer["queues"]}
        assert shown and shown <= listed, shown
        assert "beta" not in str(answer["queues"])
        assert answer["hidden_queues"] == 1  # beta
        assert {j["queue"] for j in answer["jobs"]} <= listed


def test_an_admin_still_sees_every_queue(busy, admin):
    answer = admin.post(URL, SUBMIT, format="json").json()
    queues = {q["queue"]: q for q in answer["queues"]}
    assert {"alpha", "beta"} <= set(queues) and answer["hidden_queues"] == 0
    assert queues["beta"]["jobs"] == 1


def test_an_eviction_in_favour_of_another_teams_job_does_not_name_it(busy, client_for, admin, monkeypatch):
    """The eviction of a job the member sees is listed; the job it would make room for, when of another team
    (hidden as its row is), reads null. An admin sees it named."""
    import scheduler.forecast.whatif as whatif

    real = whatif.what_if

    def with_eviction(snapshot, changes, estimate, **kw):
        out = real(snapshot, changes, estimate, **kw)
        out.evictions.append((out.now, busy["own"].pk, "reclaim", busy["other"].pk))
        return out

    monkeypatch.setattr(whatif, "what_if", with_eviction)
    noop = {"changes": [{"kind": "set_priority", "job": busy["own"].pk,
                         "priority": busy["own"].priority}]}  # changes nothing
    [ev] = client_for("member").post(URL, noop, format="json").json()["evictions"]
    assert ev["job"] == busy["own"].pk and ev["rule"] == "reclaim" and ev["beneficiary"] is None
    [ev] = admin.post(URL, noop, format="json").json()["evictions"]
    assert ev["beneficiary"] == busy["other"].pk
