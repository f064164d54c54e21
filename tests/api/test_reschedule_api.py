"""The rescheduling fields on submit, and the advisor API (GET advice, POST act/) on the small cluster:
nvl-a1 = n0, n1 and nvl-a2 = n2, n3 (8 H100 each)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from gpuplatform import clock, services
from gpuplatform.models import Event, Job, Queue, SchedulerCycle, Team
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement
from tests.api.helpers_api import job_body

SLEEP = ["sleep", "3600"]


def test_submit_migratable_fields_round_trip_and_400s(client_for):
    c = client_for("member")
    r = c.post("/api/v1/jobs/", job_body("m", migratable=True, min_run_before_move_seconds=600,
                                         checkpoint_grace_seconds=90), format="json")
    assert r.status_code == 201, r.content
    assert (r.data["migratable"], r.data["min_run_before_move_seconds"], r.data["checkpoint_grace_seconds"]) == (
        True, 600, 90)
    assert c.post("/api/v1/jobs/", job_body("d"), format="json").data["migratable"] is False  # default
    for field, value in (("checkpoint_grace_seconds", 0), ("min_run_before_move_seconds", -5),
                         ("migratable", "perhaps")):
        r = c.post("/api/v1/jobs/", job_body("bad", **{field: value}), format="json")
        assert r.status_code == 400 and field in r.data, (field, r.content)


def _fragmented():
    """fixed on n0 (nvl-a1) and other on n2 (nvl-a2), neither migratable; big (2 x 8, hard tier 1) waits."""
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    now = clock.now()
    jobs = {}
    for name, node in (("fixed", "n0"), ("other", "n2")):
        job = services.submit_job(command=SLEEP, team=team, queue=queue, name=name,
                                  roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}],
                                  submitted_at=now - timedelta(hours=4))
        store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, node, tuple(range(8))),),
                                                         "nvl", 1)]),
                           clock=now - timedelta(hours=4), cycle_number=SchedulerCycle.objects.count() + 1)
        jobs[name] = job
    Job.objects.filter(pk__in=[j.pk for j in jobs.values()]).update(state="running")
    jobs["big"] = services.submit_job(command=SLEEP, team=team, queue=queue, name="big", topology_mode="hard",
                                      highest_tier=1, roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 8}],
                                      submitted_at=now - timedelta(hours=3))
    return jobs


def test_advice_names_the_moves_and_the_admin_button_moves_them(client_for):
    jobs = _fragmented()
    r = client_for("viewer").get("/api/v1/fragmentation-advice/")
    assert r.status_code == 200
    [advice] = r.data
    assert advice["beneficiary"] == jobs["big"].pk and advice["gpus"] == 16
    assert len(advice["moves"]) == 1 and advice["moves"][0]["job"] in (jobs["fixed"].pk, jobs["other"].pk)
    moved = advice["moves"][0]["job"]
    name = Job.objects.get(pk=moved).name
    assert advice["message"].startswith(f"moving job {name} would free ") and "for job big (16 GPUs, waiting 3 h)" in \
        advice["message"]
    body = {"beneficiary": jobs["big"].pk, "jobs": [moved]}
    assert client_for("team_admin").post("/api/v1/fragmentation-advice/act/", body, format="json").status_code == 403
    r = client_for("staff").post("/api/v1/fragmentation-advice/act/", body, format="json")
    assert r.status_code == 200, r.content
    assert r.data["domain"] == advice["domain"] and [m["job"] for m in r.data["moves"]] == [moved]
    job = Job.objects.get(pk=moved)
    assert job.state == "preempting" and job.reserved
    assert Job.objects.get(pk=jobs["big"].pk).reserved
    ev = Event.objects.get(kind="moved", job_id=moved)
    assert ev.actor.username == "admin" and ev.data["beneficiary"] == jobs["big"].pk
    assert Event.objects.get(kind="reschedule").actor.username == "admin"
    # asked again: the job is no longer running -> 400 naming the field
    r = client_for("staff").post("/api/v1/fragmentation-advice/act/", body, format="json")
    assert r.status_code == 400 and "jobs" in r.data


def test_act_refuses_a_beneficiary_no_longer_pending(client_for):
    """Variant: the job the advice was for was cancelled meanwhile: 400 naming `beneficiary`, nothing moves."""
    jobs = _fragmented()
    Job.objects.filter(pk=jobs["big"].pk).update(state="cancelled")
    r = client_for("staff").post("/api/v1/fragmentation-advice/act/",
                                 {"beneficiary": jobs["big"].pk, "jobs": [jobs["fixed"].pk]}, format="json")
    assert r.status_code == 400 and "beneficiary" in r.data
    assert Job.objects.get(pk=jobs["fixed"].pk).state == "running" and not Event.objects.filter(kind="moved").exists()


def test_shape_check_suggests_the_packing_shape_with_both_estimated_starts(client_for):
    c = client_for("member")
    r = c.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 2, "gpus_per_task": 6}]}, format="json")
    assert r.status_code == 200, r.content
    [a] = r.data
    # 12 GPUs: 3 x 4 packs the 8-GPU nodes as asked (whole nodes, 2 x 8, would ask 4 more)
    assert a["suggested"] == {"tasks": 3, "gpus_per_task": 4} and a["stranded_per_node"] == 2 and a["node_gpus"] == 8
    assert "3 x 4 packs the nodes (12 GPUs, as asked)" in a["message"]
    assert a["estimated_start"] == {"asked": "now", "suggested": "now"}  # an empty cluster: both start at once
    assert a["no_estimate"] == {"asked": None, "suggested": None}
    r = c.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 2, "gpus_per_task": 8}]}, format="json")
    assert r.status_code == 200 and r.data == []
    r = c.post("/api/v1/shape-check/", {"queue": "nope", "roles": [{"tasks": 1, "gpus_per_task": 6}]}, format="json")
    assert r.status_code == 400 and "queue" in r.data


def test_shape_check_suggests_the_fewest_extra_gpus_and_says_why_a_start_is_unknown(client_for):
    """New-user trial 25, F5: 3 x 3 (9 GPUs) was told 2 x 8 (16 GPUs) without the total, though 5 x 2 (10) packs
    the 8-GPU nodes too; and a null estimated start came with no reason. On a full cluster (every GPU bound) the
    shape cannot start now and the cycle gives it no estimate (no job holds a time limit): `no_estimate` says why."""
    team, queue = Team.objects.get(name="alpha"), Queue.objects.get(name="alpha")
    now = clock.now()
    for node in ("n0", "n1", "n2", "n3"):
        job = services.submit_job(command=SLEEP, team=team, queue=queue, name=f"fill-{node}",
                                  roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}],
                                  submitted_at=now - timedelta(hours=1))
        store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, node, tuple(range(8))),),
                                                         "nvl", 1)]),
                           clock=now - timedelta(hours=1), cycle_number=SchedulerCycle.objects.count() + 1)
    c = client_for("member")
    r = c.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 3, "gpus_per_task": 3}]}, format="json")
    assert r.status_code == 200, r.content
    [a] = r.data
    assert a["suggested"] == {"tasks": 5, "gpus_per_task": 2}
    assert "5 x 2 packs the nodes (10 GPUs, 1 more than the 9 asked)" in a["message"]
    assert a["estimated_start"] == {"asked": None, "suggested": None}
    for key in ("asked", "suggested"):
        why = a["no_estimate"][key]
        assert why and "free" in why and why.endswith("the cycle estimates only the job it reserves room for"), why


def test_shape_check_on_mixed_node_sizes_judges_the_nodes_that_hold_a_task(client_for):
    """New-user trial 10, F4: on a cluster of mixed node sizes (Philly: 80 2-GPU and 58 8-GPU nodes) the check
    judged by the commonest size of all nodes (2 here: six 2-GPU nodes beside the four 8-GPU ones), which holds no
    6-GPU task, and gave no advice. It judges by the nodes that can hold one task now."""
    from gpuplatform import services

    for i in range(6):
        services.register_node(f"small-{i}", flavor="H100", cpu_milli=1000, memory_mib=1000,
                               gpus=[{"index": g, "uuid": f"GPU-s{i}-{g}", "health": "healthy"} for g in range(2)])
    c = client_for("member")
    r = c.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 1, "gpus_per_task": 6}]}, format="json")
    assert r.status_code == 200, r.content
    [a] = r.data
    assert a["node_gpus"] == 8 and a["stranded_per_node"] == 2 and a["suggested"] == {"tasks": 1, "gpus_per_task": 8}
    # a shape that packs the 8-GPU nodes and fits the 2-GPU ones too: nothing to say
    r = c.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 4, "gpus_per_task": 2}]}, format="json")
    assert r.status_code == 200 and r.data == []


def test_shape_check_on_another_teams_queue_is_forbidden(client_for):
    """F4: a member of team alpha got the estimated starts of shapes on team beta's queue; 403 now, as job
    submission answers; a platform admin still may."""
    body = {"queue": "beta", "roles": [{"tasks": 2, "gpus_per_task": 6}]}
    r = client_for("member").post("/api/v1/shape-check/", body, format="json")
    assert r.status_code == 403 and "team" in r.data["detail"]
    assert client_for("staff").post("/api/v1/shape-check/", body, format="json").status_code == 200


@pytest.mark.parametrize("roles, field, words", [
    ([{"tasks": 3, "gpus_per_task": 6, "min_available": 9}], "roles[0].min_available", "must not exceed tasks"),
    ([{"name": "a", "tasks": 1, "gpus_per_task": 6}, {"name": "a", "tasks": 1, "gpus_per_task": 6}], "roles[1].name",
     "duplicate role name"),
    ([{"tasks": 1, "gpus_per_task": 16}], "roles[0].gpus_per_task", "can never fit this cluster"),
    ([{"tasks": 1, "gpus_per_task": 6, "flavor": "nosuch"}], "roles[0].flavor", "no node of flavor nosuch"),
])
def test_shape_check_refuses_a_shape_submission_would_refuse(client_for, roles, field, words):
    """New-user trial 10, F21: the shape check answered shapes job submission refuses (min_available above tasks,
    duplicate role names, a task larger than every node, an unknown flavor) with advice or an empty list; they
    are a 400 naming the field and the rule, by submission's own checks (job_rules.check_roles, fit_check)."""
    r = client_for("member").post("/api/v1/shape-check/", {"queue": "alpha", "roles": roles}, format="json")
    assert r.status_code == 400, r.content
    assert words in " ".join(r.data[field])
