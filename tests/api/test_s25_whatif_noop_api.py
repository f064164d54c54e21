"""New-user trial 25: on the Philly demo a what-if that changes nothing answered `"evictions": []`, no job moved, and
7 to 12 `avoided_evictions` (a member: `hidden_avoided_evictions` 1 to 4): every eviction the forecast makes in both
runs read as avoided (scheduler.forecast.whatif compared the before-run's evictions with the after-run's new ones only).
A change that changes nothing now reports nothing caused, nothing avoided, no job moved; and `{"changes": []}`, a
what-if without a change, is a 400 on `changes` (docs/forecast.md)."""
from __future__ import annotations

from gpuplatform.models import Queue
from gpuplatform.scheduling import store
from gpuplatform.scheduling.forecast import run_snapshot_forecast
from tests.api.test_forecast_api import CLOCK, URL, busy  # noqa: F401 (busy: a fixture)


def _nothing_differs(answer: dict) -> None:
    assert answer["evictions"] == [] and answer["hidden_evictions"] == 0, answer["evictions"]
    assert answer["avoided_evictions"] == [] and answer["hidden_avoided_evictions"] == 0, answer["avoided_evictions"]
    for job in answer["jobs"]:
        assert job["before"] == job["after"] and job["start_change_s"] == 0 and job["why"] is None, job
    assert all(q["change_s"] in (0, None) for q in answer["queues"]), answer["queues"]


def test_a_change_that_changes_nothing_reports_no_eviction_caused_or_avoided(busy, admin, client_for):
    # the forecast itself evicts (beta-wait, within beta's quota, reclaims one of alpha's borrowed jobs): both runs of
    # the what-if make those evictions, which are therefore neither caused nor avoided by the change
    snapshot, _ = store.build_snapshot(CLOCK.timestamp())
    _, info, _ = run_snapshot_forecast(snapshot)
    assert info["evictions"], "the world must evict in the forecast for this test to mean anything"
    beta = Queue.objects.get(name="beta")
    for _ in range(3):
        r = admin.post(URL, {"changes": [{"kind": "set_weight", "queue": "beta", "weight": beta.weight}]},
                       format="json")
        assert r.status_code == 200, r.content
        _nothing_differs(r.json())
    # a member: its own job's priority set to the one it has
    own = busy["own"]
    r = client_for("member").post(URL, {"changes": [{"kind": "set_priority", "job": own.pk,
                                                     "priority": own.priority}]}, format="json")
    assert r.status_code == 200, r.content
    _nothing_differs(r.json())


def test_a_what_if_without_a_change_is_a_400_on_changes(busy, admin, client_for):
    for client in (admin, client_for("member")):
        r = client.post(URL, {"changes": []}, format="json")
        assert r.status_code == 400, r.content
        assert r.json() == {"changes": ["give at least one change (without one the what-if is the forecast as it "
                                        "is: each pending job's estimated_start on the jobs API)"]}
