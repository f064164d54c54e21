"""Break-it trial 20, F8 and F13: flavors that differ only in letter case, in the what-if and in stored quotas.

F8: the what-if's `add_nodes` took `h100` next to the cluster's `H100` (a flavor no job asking `H100` can use), where
the quota API refuses that case variant (trial 19, F7): now the same rule (quota_rules.flavor_case_error), a 400 on
`changes[i].flavor` naming the existing spelling, for add_nodes and the what-if's set_quota alike. And a flavor that
no queue has a quota for: the forecast runs the real cycle's engine (scheduler.core.run_cycle), so it applies the
same quota rules; pinned here against a real cycle: with no quota row and no limit, a preemptible job borrows the new
GPUs at once, a non-preemptible one does not start (it runs only within quota), and a limit of 0 keeps them all off.
F13: a quota row stored before the case rule (`h100` next to the nodes' `H100`) was shown nowhere: the quotas and
queues admin now warn, naming the row and how to fix it."""
from __future__ import annotations

from datetime import datetime

from gpuplatform import quota_rules, services
from gpuplatform.models import Job, Queue, Quota
from gpuplatform.scheduling import store
from tests.api.test_forecast_api import CLOCK, URL, busy, by_name, table_rows  # noqa: F401 (busy: a fixture)


def _refused(r) -> tuple[str, str]:
    assert r.status_code == 400, r.content
    (key, [message]), = r.json().items()
    return key, message


# --- F8: a case variant of a flavor -------------------------------------------------------------------------------

def test_add_nodes_of_a_case_variant_of_the_clusters_flavor_is_a_400_naming_it(busy, admin):
    before = table_rows()
    key, message = _refused(admin.post(URL, {"changes": [{"kind": "add_nodes", "count": 1, "gpus": 8,
                                                          "flavor": "h100"}]}, format="json"))
    assert key == "changes[0].flavor" and "'H100'" in message and "only in letter case" in message, message
    # the quota API's words, for the same flavor
    r = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": "h100", "quota": 0}, format="json")
    assert r.json()["flavor"] == [message]
    # a case variant of a flavor an earlier add_nodes change brings, too; the right spelling is forecast
    key, message = _refused(admin.post(URL, {"changes": [
        {"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "B200"},
        {"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "b200"}]}, format="json"))
    assert key == "changes[1].flavor" and "'B200'" in message, message
    assert admin.post(URL, {"changes": [{"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "H100"}]},
                      format="json").status_code == 200
    assert table_rows() == before


def test_a_what_if_quota_for_a_case_variant_is_refused_as_the_quota_api_refuses_it(busy, admin):
    key, message = _refused(admin.post(URL, {"changes": [{"kind": "set_quota", "queue": "beta", "flavor": "h100",
                                                          "quota": 0}]}, format="json"))
    assert key == "changes[0].flavor" and "only in letter case" in message and "'H100'" in message, message


# --- F8: a flavor no queue has a quota for: the forecast's rules are the cycle's -----------------------------------

def _start(side) -> datetime | None:
    return None if side["estimated_start"] is None else datetime.fromisoformat(side["estimated_start"])


def test_an_added_flavor_without_quota_is_forecast_as_the_real_cycle_runs_it(busy, admin, users):
    """No queue has a B200 row: no limit caps it, and no queue is entitled to any (docs/quotas.md). A preemptible
    job borrows it at once, a non-preemptible one never starts on it: in the what-if and in a real cycle."""
    r = admin.post(URL, {"changes": [
        {"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "B200"},
        {"kind": "submit", "id": "firm", "queue": "beta", "tasks": 1, "gpus_per_task": 4, "time_limit": 900,
         "flavors": ["B200"], "preemptible": False}]}, format="json")
    assert r.status_code == 200, r.content
    jobs = by_name(r.json())
    assert _start(jobs["alpha-wait"]["after"]) == CLOCK  # any flavor: it borrows the new B200 node now
    assert _start(jobs["firm"]["after"]) is None
    assert "non-preemptible jobs run only within quota" in jobs["firm"]["after"]["no_estimate"]
    # the same world for real: the node joins, the same job is submitted, one cycle runs
    services.register_node("b0", flavor="B200", gpus=[{"index": i, "uuid": f"GPU-b0-{i}"} for i in range(8)])
    beta = Queue.objects.get(name="beta")
    firm = services.submit_job(command=["sleep", "1"], team=beta.team, queue=beta, name="firm",
                               time_limit_seconds=900, roles=[{"tasks": 1, "gpus_per_task": 4, "flavor": "B200"}],
                               submitter=users["other"], submitted_at=CLOCK, preemptible=False)
    store.run_cycle_once(clock=CLOCK)
    wait = Job.objects.get(name="alpha-wait")
    assert wait.state in ("admitted", "running") and {t.node.name for t in wait.tasks.all()} == {"b0"}
    firm.refresh_from_db()
    assert firm.state == "pending" and "non-preemptible jobs run only within quota" in firm.pending_reason


def test_a_limit_of_zero_on_the_added_flavor_keeps_jobs_off_it_in_the_forecast(busy, admin):
    r = admin.post(URL, {"changes": [
        {"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": "B200"},
        {"kind": "set_quota", "queue": "root", "flavor": "B200", "guarantee": 0, "quota": 0, "limit": 0}]},
        format="json")
    assert r.status_code == 200, r.content
    jobs = by_name(r.json())
    assert _start(jobs["alpha-wait"]["after"]) == _start(jobs["alpha-wait"]["before"]) != CLOCK


# --- F13: a quota row stored before the case rule ------------------------------------------------------------------

def test_a_stored_case_variant_quota_is_a_warning_in_the_admin(cluster, admin_client):
    beta = Queue.objects.get(name="beta")
    assert quota_rules.case_variant_quotas() == []
    typo = Quota.objects.create(queue=beta, flavor="h100", guarantee=0, quota=4, limit=8)  # stored before the rule
    Quota.objects.create(queue=Queue.objects.get(name="alpha"), flavor="h100", guarantee=0, quota=0, limit=0)
    [warning] = quota_rules.case_variant_quotas()  # alpha's row is inert (guarantee and quota 0): not flagged
    assert warning.startswith("quota 'h100' of queue beta differs from the nodes' flavor 'H100' only in letter case")
    assert "set 'H100' on queue beta (guarantee 0, quota 4, limit 8) and this row to guarantee 0, quota 0, limit 0" \
        in warning
    shown = warning.replace("'", "&#x27;")[1:]  # (the admin's messages start with a capital)
    for url in ("/admin/gpuplatform/quota/", "/admin/gpuplatform/queue/", f"/admin/gpuplatform/quota/{typo.pk}/change/"):
        page = admin_client.get(url)
        assert page.status_code == 200 and shown in page.content.decode(), url
    other = Quota.objects.get(queue=beta, flavor="H100")
    assert shown not in admin_client.get(f"/admin/gpuplatform/quota/{other.pk}/change/").content.decode()
    # fixed as the warning says: the warning goes
    services.set_quota(beta, "h100", 0, 0, 0)
    assert quota_rules.case_variant_quotas() == []


def test_case_variants_of_quotas_no_node_has_name_each_other(cluster):
    beta = Queue.objects.get(name="beta")
    Quota.objects.create(queue=beta, flavor="B200", guarantee=0, quota=0, limit=None)
    Quota.objects.create(queue=Queue.objects.get(name="alpha"), flavor="b200", guarantee=0, quota=2, limit=None)
    [warning] = quota_rules.case_variant_quotas()
    assert warning.startswith("quota 'b200' of queue alpha differs from 'B200' of other quotas only in letter case")
