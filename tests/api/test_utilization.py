"""GET /api/v1/utilization/ (the live GPU-hour ledger) and GPU telemetry in /metrics (dcgm-exporter names and
labels): buckets sum to capacity, failures and idle land in their buckets, teams see only their own jobs,
bad parameters are 400s naming the field."""
from __future__ import annotations

import math
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from gpuplatform.models import Event, Gpu, GpuSample, GpuXid, IdleAllocation, Job
from gpuplatform.audit import record_event
from scheduler.core.gpu_hours import BUCKETS
from tests.api.test_telemetry_api import T0, _feed, at, bind  # noqa: F401  (fixture)

H = 3600.0


def get(client, **params):
    r = client.get("/api/v1/utilization/", params)
    assert r.status_code == 200, r.content
    return r.json()


@pytest.fixture
def history(jobs, at):  # noqa: F811
    """alpha's job holds 2 GPUs of n0 from T0 (useful, idle from T0+1h); beta's job holds 2 GPUs of n1
    from T0 and fails at T0+30min, released at T0+40min. The clock is T0+2h; 32 GPUs in all."""
    bind(jobs["own"], "n0", (0, 1), T0)
    bind(jobs["other"], "n1", (0, 1), T0)
    IdleAllocation.objects.create(job=jobs["own"], since=T0 + timedelta(hours=1), marked_at=T0 + timedelta(hours=1),
                                  gpus=2)
    other = Job.objects.get(pk=jobs["other"].pk)
    record_event("task_failed", "beta-job: worker[0] exit 1", job=other, time=T0 + timedelta(minutes=30))
    from gpuplatform.models import Allocation
    Allocation.objects.filter(job=other).update(released_at=T0 + timedelta(minutes=40))
    at(2 * H)
    return jobs


def test_cluster_buckets_sum_to_capacity_and_land_where_they_should(admin, history):
    out = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=2)).isoformat())
    (row,) = out["results"]
    assert row["cluster"] == "cluster" and row["capacity"] == pytest.approx(32 * 2)
    assert math.isclose(sum(row[b] for b in BUCKETS), row["capacity"], rel_tol=1e-9)
    assert row["useful"] == pytest.approx(2 * 1.0)  # alpha's first hour
    assert row["idle_allocated"] == pytest.approx(2 * 1.0)  # alpha's second hour
    assert row["lost_to_failure"] == pytest.approx(2 * 40 / 60)  # beta's whole attempt: its work was not kept
    assert row["effective_utilization"] == pytest.approx(row["useful"] / (row["capacity"] - row["down"]))
    assert out["telemetry"] is False  # no sample in the window
    assert [j["job"] for j in out["top_lost_to_failure"]] == [history["other"].pk]
    assert [j["job"] for j in out["top_idle_allocations"]] == [history["own"].pk]


def test_team_and_queue_scopes_and_filters_change_the_answer(admin, history):
    by_team = {r["team"]: r for r in get(admin, scope="team", since=T0.isoformat())["results"]}
    assert set(by_team) == {"alpha", "beta"}
    assert by_team["alpha"]["capacity"] == pytest.approx(4.0) and by_team["alpha"]["free"] == 0
    assert by_team["beta"]["lost_to_failure"] == pytest.approx(by_team["beta"]["capacity"])
    out = get(admin, scope="cluster", team="alpha", since=T0.isoformat(), step=1800)
    only = out["results"][0]
    assert only["capacity"] == pytest.approx(4.0) and only["lost_to_failure"] == 0
    # the filtered row is the team's jobs, labelled so, not "cluster" (trial 19, F18)
    assert only["cluster"] == "jobs of team alpha" and list(out["series"]) == ["jobs of team alpha"]
    assert out["filters"] == {"flavor": None, "queue": None, "team": "alpha"}
    assert out["capacity_basis"] == "the GPU-hours the filtered jobs held"
    unfiltered = get(admin, since=T0.isoformat())
    assert unfiltered["results"][0]["cluster"] == "cluster"
    assert unfiltered["capacity_basis"] == "every GPU of every node over the window"
    series = get(admin, since=T0.isoformat(), step=1800)["series"]["cluster"]
    assert len(series) == 4 and series[0]["useful"] == pytest.approx(1.0)
    assert series[3]["idle_allocated"] == pytest.approx(1.0)


def test_a_team_never_sees_another_teams_jobs(client_for, history):
    member = client_for("member")  # alpha
    for scope in ("cluster", "team", "queue", "job"):
        out = get(member, scope=scope, since=T0.isoformat())
        keys = {r[scope] for r in out["results"]}
        assert str(history["other"].pk) not in keys and "beta" not in keys
        assert all(j["team"] == "alpha" for j in out["top_idle_allocations"] + out["top_lost_to_failure"])
    # the cluster aggregate names no job: the same for everyone (as the cluster page shows it)
    assert get(member, since=T0.isoformat())["results"] == get(client_for("staff"), since=T0.isoformat())["results"]
    # filtering by another team's name shows nothing of it
    assert get(member, team="beta", since=T0.isoformat())["results"] == []


@pytest.mark.parametrize("params,field", [
    ({"scope": "planet"}, "scope"), ({"since": "yesterday"}, "since"), ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
    ({"step": "x"}, "step"), ({"step": "1"}, "step"), ({"since": "2020-01-01T00:00:00Z"}, "since"),
    ({"team": "a\x00b"}, "team"),
    ({"start": "notadate"}, "start"),  # new-user item 15: an unknown parameter is not ignored
    ({"since": "2026-12-01T00:00:00Z", "untill": "x"}, "untill"),
])
def test_bad_parameters_are_400s_naming_the_field(admin, history, params, field):
    r = admin.get("/api/v1/utilization/", params)
    assert r.status_code == 400 and field in r.json(), r.content


def test_anonymous_is_refused(history):
    assert APIClient().get("/api/v1/utilization/").status_code in (401, 403)


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_export_dcgm_names_and_labels_only_for_gpus_with_telemetry(history, at):  # noqa: F811
    own = Job.objects.get(pk=history["own"].pk)
    g0 = Gpu.objects.get(node__name="n0", index=0)
    g5 = Gpu.objects.get(node__name="n0", index=5)
    Gpu.objects.filter(pk=g0.pk).update(uuid="GPU-aaa")
    t = T0 + timedelta(hours=2) - timedelta(seconds=10)
    GpuSample.objects.create(gpu=g0, time=t, period=10, sm=93, fb_used=1000, fb_free=80000, power=500.5, temp=60,
                             ecc_dbe=0, job=own, task=own.tasks.first())
    GpuSample.objects.create(gpu=g5, time=t, period=10, sm=0, fb_used=None, power=None, temp=31)
    GpuXid.objects.create(gpu=g5, time=t, xid=79)
    fams = _families(APIClient().get("/metrics").content.decode())
    util = {s.labels["gpu"] + s.labels["Hostname"]: s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert set(util) == {"0n0", "5n0"}  # GPUs without telemetry are absent, not 0
    s0 = util["0n0"]
    assert s0.value == 93 and s0.labels == {"gpu": "0", "UUID": "GPU-aaa", "device": "nvidia0", "modelName": "NVIDIA H100",
                                            "Hostname": "n0", "job": str(own.pk), "team": "alpha", "queue": "alpha"}
    assert util["5n0"].labels["job"] == "" and util["5n0"].value == 0  # a real 0 from a free GPU
    assert {s.labels["gpu"] for s in fams["DCGM_FI_DEV_POWER_USAGE"].samples} == {"0"}  # power unknown on gpu 5
    assert {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples} == {"0": 0, "5": 79}
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
        assert fams[name].samples, name
    idle = fams["gpuplatform_idle_allocated_gpus"].samples
    assert [(s.labels["queue"], s.value) for s in idle] == [("alpha", 2)]
    # a stale sample (older than the staleness window) is not exported
    at(2 * H + 3600)
    fams = _families(APIClient().get("/metrics").content.decode())
    assert not fams.get("DCGM_FI_DEV_GPU_UTIL") or not fams["DCGM_FI_DEV_GPU_UTIL"].samples


def _gpu_health(node, index, to, t):
    from gpuplatform.models import Node
    record_event("gpu_health", f"{node}: gpu{index} -> {to}", node=Node.objects.get(name=node), time=t,
                 data={"changes": [{"index": index, "from": "x", "to": to, "reason": ""}]})


def test_held_and_down_come_from_their_history_and_the_buckets_sum_to_capacity(admin, client_for, jobs, at):
    """Over [T0, T0+2h], 32 GPUs (4 nodes of 8): beta's pending gang is nominated n0 GPUs 2 and 3 from T0 (the cycle's
    hold Event); alpha's job runs on n0 GPUs 2 and 4 from T0+1h (so GPU 2 is alpha's from then, not held);
    n1 is not_ready T0+1h..T0+1.5h; n0 GPU 5 unhealthy T0+30min..T0+1h, GPU 6 from T0+1.5h on (still now)."""
    from gpuplatform.models import Node
    from gpuplatform.scheduling import evict
    from scheduler.core.snapshot import CycleResult, Nomination, TaskPlacement

    h = timedelta(hours=1)
    other = jobs["other"]
    evict.apply_holds(CycleResult(nominations=[Nomination(other.pk, (TaskPlacement("worker", 0, "n0", (2, 3)),),
                                                          "reclaim")]), clock=T0, cycle_number=1, stale=set())
    assert Job.objects.get(pk=other.pk).reserved == [["worker", 0, "n0", [2, 3]]]
    assert Event.objects.get(kind="hold_set", job_id=other.pk).data["reserved"] == [["worker", 0, "n0", [2, 3]]]
    from gpuplatform.models import SchedulerCycle
    from gpuplatform.scheduling import store
    from scheduler.core.snapshot import Binding

    nomination = Nomination(other.pk, (TaskPlacement("worker", 0, "n0", (2, 3)),), "reclaim")
    store.apply_result(CycleResult(bindings=[Binding(jobs["own"].pk, (TaskPlacement("worker", 0, "n0", (2, 4)),), "", 0)],
                                   nominations=[nomination]), clock=T0 + h, cycle_number=SchedulerCycle.objects.count() + 1)
    assert Event.objects.filter(kind="hold_set").count() == 1  # the same hold: no new Event
    n1 = Node.objects.get(name="n1")
    record_event("node_not_ready", "n1 silent", node=n1, time=T0 + h)
    record_event("node_ready", "n1 back", node=n1, time=T0 + 1.5 * h)
    _gpu_health("n0", 5, "unhealthy", T0 + 0.5 * h)
    _gpu_health("n0", 5, "healthy", T0 + h)
    _gpu_health("n0", 6, "unhealthy", T0 + 1.5 * h)
    Gpu.objects.filter(node__name="n0", index=6).update(health="unhealthy")
    at(2 * H)
    (row,) = get(admin, since=T0.isoformat(), until=(T0 + 2 * h).isoformat())["results"]
    assert row["capacity"] == pytest.approx(64.0)
    assert row["held"] == pytest.approx(1.0 + 2.0)  # GPU 2 until alpha took it, GPU 3 throughout
    assert row["down"] == pytest.approx(8 * 0.5 + 0.5 + 0.5)
    assert row["useful"] == pytest.approx(2.0)
    assert row["free"] == pytest.approx(64.0 - 3.0 - 5.0 - 2.0)
    assert sum(row[b] for b in BUCKETS) == pytest.approx(row["capacity"], abs=1e-9)
    assert row["effective_utilization"] == pytest.approx(2.0 / (64.0 - 5.0))
    # the hold is beta's: in beta's scope, never in what alpha's member sees
    teams = {r["team"]: r for r in get(admin, scope="team", since=T0.isoformat())["results"]}
    assert teams["beta"]["held"] == pytest.approx(3.0) and teams["alpha"]["held"] == 0
    assert all(r["held"] == 0 for r in get(client_for("member"), scope="team", since=T0.isoformat())["results"])
    # the hold ends when the gang binds (the cycle drops it): nothing held after beta's job starts at T0+1.5h
    bind(Job.objects.get(pk=other.pk), "n0", (3, 7), T0 + 1.5 * h)
    (row,) = get(admin, since=T0.isoformat(), until=(T0 + 2 * h).isoformat())["results"]
    assert row["held"] == pytest.approx(1.0 + 1.5)
    assert sum(row[b] for b in BUCKETS) == pytest.approx(row["capacity"], abs=1e-9)


def test_a_spares_gpus_running_an_interruptible_job_are_used_not_held(admin, jobs, at):
    """n1 runs alpha's interruptible job on 2 GPUs from T0 and becomes a spare at T0+0.5h (a node running
    only interruptible work may): its 6 idle GPUs are held from then, the 2 busy ones are the job's."""
    from gpuplatform import services

    Job.objects.filter(pk=jobs["own"].pk).update(interruptible=True)
    bind(jobs["own"], "n1", (0, 1), T0)
    at(0.5 * H)
    services.set_spare("n1", True)
    at(2 * H)
    (row,) = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=2)).isoformat())["results"]
    assert row["held"] == pytest.approx(6 * 1.5)
    assert sum(row[b] for b in BUCKETS if b not in ("held", "free", "free_fragmented", "down")) == pytest.approx(2 * 2)
    assert sum(row[b] for b in BUCKETS) == pytest.approx(row["capacity"], abs=1e-9)


def test_a_spare_nodes_idle_gpus_are_held(admin, jobs, at):
    from gpuplatform import services
    from gpuplatform.models import Node

    at(0.5 * H)
    services.set_spare("n1", True)
    at(2 * H)
    (row,) = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=2)).isoformat())["results"]
    assert row["held"] == pytest.approx(8 * 1.5)
    assert Node.objects.get(name="n1").spare is True
    assert sum(row[b] for b in BUCKETS) == pytest.approx(row["capacity"], abs=1e-9)


def test_a_node_registered_inside_the_window_counts_capacity_from_its_registration(admin, history, at):  # noqa: F811
    """New-user report 7, F23: 4 GPUs that registered minutes ago did not exist for the window's other hours;
    a node of the loaded spec (no registration Event) still counts over the whole window."""
    from gpuplatform import services
    from gpuplatform.models import Node

    at(90 * 60)  # registered at T0 + 90 min
    services.register_node("late", flavor="H100", gpus=[{"index": i} for i in range(4)])
    at(2 * H)
    row = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=2)).isoformat())["results"][0]
    assert row["capacity"] == pytest.approx(32 * 2 + 4 * 0.5)  # not 4 x 2 h
    assert math.isclose(sum(row[b] for b in BUCKETS), row["capacity"], rel_tol=1e-9)
    series = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=2)).isoformat(), step=1800)
    caps = [b["capacity"] for b in series["series"]["cluster"]]
    assert caps == pytest.approx([16.0, 16.0, 16.0, 18.0])
    # a window that ends before the registration: no capacity of it at all
    before = get(admin, since=T0.isoformat(), until=(T0 + timedelta(hours=1)).isoformat())["results"][0]
    assert before["capacity"] == pytest.approx(32.0)
    assert Node.objects.filter(name="late").exists()


@pytest.mark.parametrize("params,field", [
    # new-user trial 11, F3: until in year 1 was a 500 (OverflowError computing the default since), with since too
    ({"until": "0001-01-01T23:59:59Z"}, "until"),
    ({"since": "0001-01-01T00:00:00Z", "until": "0001-01-01T12:00:00Z"}, "since"),
    ({"since": "1969-12-31T00:00:00Z", "until": "1970-01-02T00:00:00Z"}, "since"),
    ({"until": "9999-12-31T23:59:59Z"}, "until"),
    ({"since": "9999-12-31T00:00:00Z", "until": "9999-12-31T23:59:59Z"}, "since"),
    ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
    ({"until": "9999-12-31T23:59:59-05:00"}, "until"),
])
def test_out_of_range_times_are_400s_naming_the_parameter_and_the_range(admin, history, params, field):
    r = admin.get("/api/v1/utilization/", params)
    assert r.status_code == 400 and field in r.json(), r.content
    assert "1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z" in r.json()[field][0]


def test_a_window_after_the_cluster_clock_is_refused_not_changed(admin, history):
    """The ledger ends at the cluster clock (T0 + 2 h here): a window that starts after it was answered with a
    made-up one-second window (until = since + 1 s, new-user trial 11, F3); an until past it ends at the clock,
    which the answer's `until` says."""
    r = admin.get("/api/v1/utilization/", {"since": (T0 + timedelta(days=3)).isoformat(),
                                          "until": (T0 + timedelta(days=4)).isoformat()})
    assert r.status_code == 400 and "cluster clock" in r.json()["since"][0], r.content
    out = get(admin, since=T0.isoformat(), until=(T0 + timedelta(days=4)).isoformat())
    assert out["until"].startswith((T0 + timedelta(hours=2)).isoformat()[:19])


@pytest.mark.parametrize("url,field", [
    ("/api/v1/events/?since=0001-01-01T00:00:00Z", "since"),
    ("/api/v1/events/?until=9999-12-31T23:59:59Z", "until"),
    ("/api/v1/events/?since=0001-01-01T00:00:00%2B05:00", "since"),
    ("/api/v1/jobs/?submitted_after=0001-01-01T00:00:00Z", "submitted_after"),
    ("/api/v1/jobs/?submitted_before=9999-12-31T23:59:59-05:00", "submitted_before"),
    ("/api/v1/cluster-metrics/?until=0001-01-01T00:00:00Z", "until"),
    ("/api/v1/scheduler-cycles/?since=9999-06-01T00:00:00Z", "since"),
])
def test_the_lists_refuse_out_of_range_times_naming_the_parameter(admin, url, field):
    """The same kind as F3 on every endpoint taking a time: a 400 keyed by the parameter (it said `time` /
    `submitted_at`, the model's field, before) with the allowed range."""
    r = admin.get(url)
    assert r.status_code == 400 and field in r.json(), r.content
    assert "1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z" in r.json()[field][0]


def test_the_ledger_starts_at_the_demos_last_workload_reset(admin, history):
    """Trial 19, F18: after a demo restart (its previous workload deleted) the previous run's busy hours read as free.
    The demo's reset writes a `workload_reset` Event at the new run's clock and the ledger starts there: the answer's
    `since` says so, and the capacity and buckets cover only the time after it."""
    from gpuplatform.management.commands.demo import _reset_workload

    before = get(admin, since=T0.isoformat())["results"][0]
    assert before["capacity"] == pytest.approx(32 * 2)
    assert _reset_workload(T0 + timedelta(hours=1.5))["jobs"] == 2
    out = get(admin, since=T0.isoformat())
    assert out["since"].startswith((T0 + timedelta(hours=1.5)).isoformat()[:19]), out["since"]
    row = out["results"][0]
    assert row["capacity"] == pytest.approx(32 * 0.5) and row["free"] == pytest.approx(32 * 0.5)
    assert sum(row[b] for b in BUCKETS) == pytest.approx(row["capacity"])
    # a window wholly after the reset is untouched
    later = get(admin, since=(T0 + timedelta(hours=1.75)).isoformat())
    assert later["results"][0]["capacity"] == pytest.approx(32 * 0.25)
