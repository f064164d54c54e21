"""New-user trial 19, F6: the what-if's per-queue summary counts every job of the queue, also those that do
not start within the horizon in one case (a drain of every node read `"jobs": 0, "mean_wait_before_s": null`
while every job of the queue stopped starting) and the hypothetical submissions (a `submit` to a queue listed
it with 0 jobs although the new job waits)."""
from __future__ import annotations

from datetime import datetime

from gpuplatform.models import Node
from tests.api.test_forecast_api import CLOCK, URL, busy, by_name  # noqa: F401 (busy: a fixture)


def _wait(side):
    start = side["estimated_start"]
    return None if start is None else (datetime.fromisoformat(start) - CLOCK).total_seconds()


def test_draining_every_node_counts_the_jobs_that_no_longer_start(busy, admin):
    # a change that changes nothing: the forecast as it is (a what-if without a change is a 400, trial 25)
    noop = admin.post(URL, {"changes": [{"kind": "set_priority", "job": busy["own"].pk,
                                        "priority": busy["own"].priority}]}, format="json").json()
    before = {q["queue"]: q for q in noop["queues"]}
    assert before["alpha"]["jobs"] == 1 and before["alpha"].get("no_start_after", 0) == 0
    r = admin.post(URL, {"changes": [{"kind": "drain_nodes", "nodes": list(Node.objects.values_list("name", flat=True))}]},
                   format="json")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert all(j["after"]["estimated_start"] is None for j in answer["jobs"])
    queues = {q["queue"]: q for q in answer["queues"]}
    # alpha: alpha-wait and the four drained run<i>, pending again and never started; beta: beta-wait
    assert queues["alpha"]["jobs"] == 5 and queues["alpha"]["no_start_after"] == 5
    assert queues["alpha"]["mean_wait_before_s"] == before["alpha"]["mean_wait_before_s"] == 55 * 60
    assert queues["alpha"]["mean_wait_after_s"] is None and queues["alpha"]["change_s"] is None
    assert queues["beta"]["jobs"] == 1 and queues["beta"]["no_start_after"] == 1
    assert queues["beta"]["mean_wait_before_s"] == before["beta"]["mean_wait_before_s"] is not None


def test_a_hypothetical_submission_counts_in_its_queue(busy, admin):
    r = admin.post(URL, {"changes": [{"kind": "submit", "id": "probe", "queue": "beta", "tasks": 1,
                                      "gpus_per_task": 8, "time_limit": 900}]}, format="json")
    assert r.status_code == 200, r.content
    answer = r.json()
    jobs = by_name(answer)
    beta = {q["queue"]: q for q in answer["queues"]}["beta"]
    assert beta["jobs"] == 2 and beta["hypothetical"] == 1 and beta["no_start_after"] == 0
    waits = [_wait(jobs["probe"]["after"]), _wait(jobs["beta-wait"]["after"])]
    assert None not in waits and beta["mean_wait_after_s"] == sum(waits) / 2
    # the change of the jobs already there: only beta-wait has a start in both cases
    assert beta["change_s"] == jobs["beta-wait"]["start_change_s"]


# F7: a quota for a flavor that differs from the cluster's only in letter case ------------------------------

def test_a_quota_whose_flavor_differs_only_in_case_is_a_400_naming_flavor(users, admin):
    from gpuplatform.models import Quota

    rows = Quota.objects.count()
    r = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "h100", "quota": 0}, format="json")
    assert r.status_code == 400, r.content
    assert "'H100'" in " ".join(r.json()["flavor"]) and "letter case" in " ".join(r.json()["flavor"])
    r = admin.post("/api/v1/queues/", {"name": "gamma", "parent": "root",
                                       "quotas": [{"flavor": "h100", "guarantee": 0, "quota": 0, "limit": None}]},
                   format="json")
    assert r.status_code == 400 and "letter case" in str(r.json()), r.content
    assert Quota.objects.count() == rows
    # the cluster's spelling and a new flavor (set up ahead of its nodes) are still accepted
    assert admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "B200", "quota": 0},
                      format="json").status_code == 201


def test_a_quota_is_removed_by_setting_it_to_zero_delete_is_405(users, admin):
    """Decided (docs/quotas.md, docs/api.md): quota rows are never deleted, over REST or in the admin (their
    history is in the queue's events); a quota of 0 with no limit is the way to take a flavor away."""
    from gpuplatform.models import Quota

    row = Quota.objects.get(queue__name="beta", flavor="H100")
    assert admin.delete(f"/api/v1/quotas/{row.pk}/").status_code == 405
