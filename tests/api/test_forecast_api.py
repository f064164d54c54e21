"""POST /api/v1/forecast/ (issue #15): the what-if answers before/after per job and per queue, with the
evictions it would cause; permissions (members: own jobs and hypothetical submissions; admins: quotas and
nodes); bad input is a 400 naming the field; NOTHING is written (every table's rows are compared)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from django.apps import apps

from gpuplatform import clock, services
from gpuplatform.models import Job, Queue
from gpuplatform.scheduling import store

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
URL = "/api/v1/forecast/"
SLEEP = ["sleep", "3600"]


@pytest.fixture
def busy(users):
    """Four 8-GPU alpha jobs (1 h limits) fill the 32 GPUs; alpha and beta each have one 8-GPU job waiting."""
    clock.use(lambda: CLOCK)
    alpha, beta = Queue.objects.get(name="alpha"), Queue.objects.get(name="beta")
    for i in range(4):
        services.submit_job(command=SLEEP, team=alpha.team, queue=alpha, name=f"run{i}", time_limit_seconds=3600,
                            roles=[{"tasks": 1, "gpus_per_task": 8}], submitter=users["member"],
                            submitted_at=CLOCK - timedelta(minutes=10))
    store.run_cycle_once(clock=CLOCK - timedelta(minutes=5))
    own = services.submit_job(command=SLEEP, team=alpha.team, queue=alpha, name="alpha-wait", time_limit_seconds=600,
                              roles=[{"tasks": 1, "gpus_per_task": 8}], submitter=users["member"],
                              submitted_at=CLOCK - timedelta(minutes=2))
    other = services.submit_job(command=SLEEP, team=beta.team, queue=beta, name="beta-wait", time_limit_seconds=600,
                                roles=[{"tasks": 1, "gpus_per_task": 8}], submitter=users["other"],
                                submitted_at=CLOCK - timedelta(minutes=1))
    yield {"own": own, "other": other}
    clock.use(None)


def table_rows():
    return {m._meta.label: sorted(m.objects.values_list(*[f.attname for f in m._meta.concrete_fields]))
            for m in apps.get_app_config("gpuplatform").get_models()}


def by_name(answer):
    return {j["name"]: j for j in answer["jobs"]}


def test_admin_what_if_cancel_and_quota_change_writes_nothing(busy, admin):
    before = table_rows()
    run0 = Job.objects.get(name="run0")
    r = admin.post(URL, {"changes": [{"kind": "cancel", "job": run0.pk},
                                     {"kind": "set_quota", "queue": "beta", "flavor": "H100", "limit": 32},
                                     {"kind": "submit", "id": "probe", "queue": "beta", "tasks": 1,
                                      "gpus_per_task": 8, "time_limit": 900}]}, format="json")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert answer["written"] is False
    jobs = by_name(answer)
    # today: every running job ends at CLOCK - 5 min + 1 h; the freed run0 lets the first waiting job go now
    t_end = (CLOCK + timedelta(minutes=55)).isoformat()
    assert jobs["alpha-wait"]["before"]["estimated_start"] == t_end
    # beta is below its quota: its job takes run0's GPUs at once, and the probe reclaims one of alpha's
    # borrowed 8-GPU jobs (evicted now, 30 s grace, next cycle a minute later)
    assert jobs["beta-wait"]["after"]["estimated_start"] == CLOCK.isoformat()
    assert jobs["probe"]["hypothetical"] and jobs["probe"]["before"]["no_estimate"] == "not pending in this case"
    assert jobs["probe"]["after"]["estimated_start"] == (CLOCK + timedelta(minutes=1)).isoformat()
    assert jobs["probe"]["queue"] == "beta"
    run1 = Job.objects.get(name="run1").pk
    assert [(e["job"], e["rule"], e["beneficiary"]) for e in answer["evictions"]] == [(run1, "reclaim", "probe")]
    # alpha-wait: behind the requeued run1 (older), then on the probe's GPUs when it ends (12:01 + 15 min)
    assert jobs["alpha-wait"]["after"]["estimated_start"] == (CLOCK + timedelta(minutes=16)).isoformat()
    assert jobs["alpha-wait"]["start_change_s"] == -39 * 60
    queues = {q["queue"]: q for q in answer["queues"]}
    assert queues["alpha"]["change_s"] == -39 * 60 and queues["beta"]["change_s"] == -60
    assert table_rows() == before  # nothing written, not even an event


def test_drain_reports_the_evictions(busy, admin):
    node = Job.objects.get(name="run0").tasks.get().node.name
    r = admin.post(URL, {"changes": [{"kind": "drain_nodes", "nodes": [node]}]}, format="json")
    assert r.status_code == 200, r.content
    ev = r.json()["evictions"]
    assert (ev[0]["job"], ev[0]["rule"]) == (Job.objects.get(name="run0").pk, "drain")
    # the requeued run0 (older than both waiting jobs) changes who reclaims what later: listed too
    assert all(e["rule"] in ("reclaim", "preempt") for e in ev[1:])


def test_member_may_ask_about_own_jobs_and_hypothetical_submissions_only(busy, client_for):
    member = client_for("member")
    ok = member.post(URL, {"changes": [{"kind": "set_priority", "job": busy["own"].pk, "priority": 3},
                                       {"kind": "submit", "queue": "alpha", "tasks": 1, "gpus_per_task": 8}]},
                     format="json")
    assert ok.status_code == 200, ok.content
    names = set(by_name(ok.json()))
    assert "alpha-wait" in names and "hypothetical-2" in names and "beta-wait" not in names  # only own teams
    for change, why in (
            ({"kind": "set_quota", "queue": "alpha", "flavor": "H100", "quota": 32}, "platform admins"),
            ({"kind": "add_nodes", "count": 1, "gpus": 8}, "platform admins"),
            ({"kind": "drain_nodes", "nodes": ["n0"]}, "platform admins"),
            ({"kind": "submit", "queue": "beta", "tasks": 1, "gpus_per_task": 1}, "own teams' queues")):
        r = member.post(URL, {"changes": [change]}, format="json")
        assert r.status_code == 403 and why in r.json()["detail"] and r.json()["detail"].startswith("changes[0]")
    # another team's job reads as none (unknown and invisible alike, as the jobs API's 404: new-user trial 24, F5)
    r = member.post(URL, {"changes": [{"kind": "cancel", "job": busy["other"].pk}]}, format="json")
    assert r.status_code == 400 and r.json() == {"changes[0].job": [f"no pending or running job {busy['other'].pk}"]}
    assert client_for("anonymous").post(URL, {"changes": []}, format="json").status_code in (401, 403)


@pytest.mark.parametrize("body, field", [
    ({"changes": [{"kind": "explode"}]}, "changes"),
    ({"changes": [{"kind": "submit", "queue": "alpha", "tasks": 0, "gpus_per_task": 8}]}, "changes"),
    ({"changes": [{"kind": "submit", "queue": "alpha"}]}, "changes"),
    ({"changes": [{"kind": "cancel", "job": 1, "bogus": 2}]}, "changes"),
    ({"changes": [], "extra": 1}, "extra"),
    ({"changes": [{"kind": "set_quota", "queue": "alpha", "flavor": "B200", "quota": 3}]}, "changes[0].flavor"),
    ({"changes": [{"kind": "drain_nodes", "nodes": ["ghost"]}]}, "changes[0].nodes"),
])
def test_bad_changes_are_400_naming_the_field(busy, admin, body, field):
    r = admin.post(URL, body, format="json")
    # Error keys are field paths (docs/api.md): "changes" is named by "changes" or "changes[0].<field>".
    assert r.status_code == 400 and any(k == field or k.startswith(field + "[") or k.startswith(field + ".")
                                        for k in r.json()), r.content


@pytest.mark.parametrize("change", [
    {"kind": "submit", "queue": "alpha", "tasks": 1, "gpus_per_task": 16},
    {"kind": "submit", "queue": "alpha", "tasks": 1, "gpus_per_task": 16, "flavors": ["H100"]},
])
def test_a_submit_change_submission_would_refuse_is_a_400_naming_the_field(busy, client_for, change):
    """16 GPUs per task on 8-GPU nodes: POST /api/v1/jobs/ refuses it ("roles[0].gpus_per_task": can never fit this cluster);
    the what-if answers the same through the same check, not a 200 "can never start" (new-user trial 7, F5),
    filed under the change's own field (new-user trial 14, F13: it said "roles", a field a change lacks)."""
    member = client_for("member")
    r = member.post(URL, {"changes": [{"kind": "submit", "queue": "alpha", "tasks": 1, "gpus_per_task": 8}, change]},
                    format="json")
    assert r.status_code == 400, r.content
    key = "changes[1].gpus_per_task"
    assert list(r.json()) == [key] and r.json()[key][0].startswith("can never fit")
    job = member.post("/api/v1/jobs/", {"queue": "alpha", "name": "big", "command": SLEEP,
                                        "roles": [{"name": "w", "tasks": 1, "gpus_per_task": 16}]}, format="json")
    assert job.status_code == 400
    for message in (job.json()["roles[0].gpus_per_task"][0], r.json()[key][0]):
        assert message.startswith("can never fit this cluster") and "16 GPUs per task" in message, message


@pytest.mark.parametrize("submit, field, rule", [
    ({"tasks": 1, "gpus_per_task": 8, "flavors": ["ZZ"]}, "flavors", "no node of flavor ZZ"),
    ({"tasks": 5, "gpus_per_task": 8}, "tasks", "needs 40 H100 GPUs, this cluster has 32"),
    ({"tasks": 8, "gpus_per_task": 8, "min_available": 5}, "min_available", "needs 40 H100 GPUs"),
    ({"tasks": 1, "gpus_per_task": 16}, "gpus_per_task", "16 GPUs per task"),
    ({"tasks": 1, "gpus_per_task": 0.5}, "gpus_per_task", "no GPU in mode shared or auto takes fractions"),
    ({"tasks": 1, "gpu_fraction": 0.5}, "gpu_fraction", "no GPU in mode shared or auto takes fractions"),
])
def test_a_never_fitting_submit_change_names_its_own_field(busy, admin, submit, field, rule):
    """New-user trial 14, F13: every never-fit refusal of a what-if submit was filed under changes[0].roles."""
    r = admin.post(URL, {"changes": [{"kind": "submit", "queue": "alpha", **submit}]}, format="json")
    assert r.status_code == 400, r.content
    assert list(r.json()) == [f"changes[0].{field}"] and rule in r.json()[f"changes[0].{field}"][0], r.content


# 48 GPUs for alpha on 64: the root's and alpha's limits (32) raised too, checked against the 64-GPU cluster
MORE = [{"kind": "set_quota", "queue": "root", "flavor": "H100", "quota": 64, "limit": 64},
        {"kind": "set_quota", "queue": "alpha", "flavor": "H100", "limit": 64}]
# a B200 quota for alpha: a flavor only the added nodes have
B200 = [{"kind": "set_quota", "queue": "root", "flavor": "B200", "quota": 16},
        {"kind": "set_quota", "queue": "alpha", "flavor": "B200", "quota": 16}]


@pytest.mark.parametrize("nodes, submit, quotas", [
    ({"count": 2, "gpus": 16}, {"tasks": 1, "gpus_per_task": 16}, []),                    # bigger nodes
    ({"count": 4, "gpus": 8}, {"tasks": 6, "gpus_per_task": 8}, MORE),                    # more nodes: 48 of 64
    ({"count": 2, "gpus": 8, "flavor": "B200"}, {"tasks": 1, "gpus_per_task": 8, "flavors": ["B200"]}, B200),
])
@pytest.mark.parametrize("add_last", [False, True])
def test_a_what_if_is_checked_against_the_cluster_add_nodes_builds(busy, admin, nodes, submit, quotas, add_last):
    """New-user trial 14, F4: "would this job run if we added these nodes?" was refused as "can never fit" (the
    check read today's cluster), and so was a quota for the added GPUs. The submit and set_quota changes are
    checked against the cluster all the changes build, whatever their order; without the add_nodes change they
    are still refused; nothing is written."""
    before = table_rows()
    add = {"kind": "add_nodes", **nodes}
    job = {"kind": "submit", "id": "probe", "queue": "alpha", **submit}
    r = admin.post(URL, {"changes": [*quotas, job, add] if add_last else [add, *quotas, job]}, format="json")
    assert r.status_code == 200, r.content
    probe = by_name(r.json())["probe"]
    assert probe["hypothetical"] and probe["after"]["estimated_start"] is not None, probe["after"]
    alone = admin.post(URL, {"changes": [job]}, format="json")
    assert alone.status_code == 400 and next(iter(alone.json().values()))[0].startswith("can never fit"), alone.content
    if quotas:
        refused = admin.post(URL, {"changes": quotas}, format="json")
        assert refused.status_code == 400, refused.content
        (key, [message]), = refused.json().items()
        assert (key, message.split(":")[0]) in (("changes[0].quota", "root queues' quotas would sum to 64, above the "
                                                 "cluster's 32 H100 GPUs"), ("changes[0].flavor", "unknown flavor 'B200'"))
    assert table_rows() == before


@pytest.mark.parametrize("flavor, rule", [
    ("x y", "a flavor is a GPU model that uses only ASCII letters (A-Z, a-z), digits"),
    ("H100|B200", "a quota is for one GPU flavor"),
    ("H100/mig-1g.10gb", "is a MIG resource, not a GPU model"),
])
def test_an_add_nodes_flavor_follows_the_quota_flavor_rule(busy, admin, flavor, rule):
    """New-user trial 14, F13: add_nodes took a flavor "x y" that the quota API refuses."""
    r = admin.post(URL, {"changes": [{"kind": "add_nodes", "count": 1, "gpus": 8, "flavor": flavor}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["changes[0].flavor"], r.content
    assert rule in r.json()["changes[0].flavor"][0], r.content
    quota = admin.post(URL, {"changes": [{"kind": "set_quota", "queue": "alpha", "flavor": flavor, "quota": 0}]},
                       format="json")
    assert quota.status_code == 400 and list(quota.json()) == ["changes[0].flavor"], quota.content


@pytest.mark.parametrize("change, field, rule", [
    # alpha + beta = 16 + 16 = root's 32: 17 makes the children sum above the parent's quota
    ({"kind": "set_quota", "queue": "alpha", "flavor": "H100", "quota": 17}, "changes[0].quota",
     "children's quotas would sum to 33, above the parent queue's quota (32)"),
    ({"kind": "set_quota", "queue": "beta", "flavor": "H100", "quota": 100000}, "changes[0].quota",
     "children's quotas would sum to 100016"),
    ({"kind": "set_quota", "queue": "root", "flavor": "H100", "quota": 100000, "limit": None}, "changes[0].quota",
     "root queues' quotas would sum to 100000, above the cluster's 32 H100 GPUs"),
    ({"kind": "set_quota", "queue": "alpha", "flavor": "H100", "guarantee": 20}, "changes[0].guarantee",
     "guarantee (20) must not exceed quota (16)"),
    ({"kind": "set_quota", "queue": "alpha", "flavor": "H100", "limit": 40}, "changes[0].limit",
     "above the parent queue's limit (32)"),
])
def test_a_quota_change_the_quota_service_refuses_is_a_400_naming_field_and_rule(busy, admin, change, field, rule):
    """New-user trial 8, F2: the what-if forecast quotas that PATCH /api/v1/quotas/ refuses (children summing
    above the parent's quota, huge values). The same rules (quota_rules.check_quota) now refuse them."""
    before = table_rows()
    r = admin.post(URL, {"changes": [change]}, format="json")
    assert r.status_code == 400, r.content
    assert list(r.json()) == [field] and rule in r.json()[field][0], r.content
    assert table_rows() == before


def test_quota_changes_are_checked_in_order_against_the_tree_the_earlier_ones_leave(busy, admin):
    """Raising the parent first makes room for a child's raise in the same what-if; nothing is written."""
    before = table_rows()
    both = [{"kind": "set_quota", "queue": "beta", "flavor": "H100", "quota": 8},
            {"kind": "set_quota", "queue": "alpha", "flavor": "H100", "quota": 24, "limit": 32}]
    assert admin.post(URL, {"changes": both}, format="json").status_code == 200
    r = admin.post(URL, {"changes": both[1:]}, format="json")
    assert r.status_code == 400 and "changes[0].quota" in r.json(), r.content
    assert table_rows() == before
