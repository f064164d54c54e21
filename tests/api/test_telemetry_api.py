"""Telemetry on the platform (docs/telemetry.md): batches made by the real agent sampler (fake NVML) posted
to POST /api/v1/nodes/{name}/telemetry/, attribution to the job holding the GPU, bad bodies answered 400,
retention and downsampling with the per-task summary kept, idle detection at the threshold, the latest
XID / ECC per GPU."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from gpuplatform import clock
from gpuplatform.agent.telemetry import NvmlSampler, TelemetryBuffer
from gpuplatform.models import Event, Gpu, GpuSample, GpuXid, IdleAllocation, Job, Node, SchedulerCycle, TaskUtilization
from gpuplatform.scheduling import store
from gpuplatform.telemetry import detect_idle, downsample, latest_gpu_signals, task_summary
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement
from tests.agent.test_agent_telemetry import eight_gpu_nvml

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def at(monkeypatch):
    """at(seconds) sets the cluster clock to T0 + seconds and returns it."""
    state = {"now": T0}
    monkeypatch.setattr(clock, "now", lambda: state["now"])

    def set_(seconds: float) -> datetime:
        state["now"] = T0 + timedelta(seconds=seconds)
        return state["now"]
    set_(0)
    return set_


def bind(job, node="n0", gpus=(0, 1), t=T0):
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, node, tuple(gpus)),),
                                                              "", 0)]), clock=t,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1


def post_samples(client, nvml, sampler, t: float, node="n0"):
    """Take one real sample at T0 + t (node clock = server clock) and post it as the agent would."""
    sampler.clock = lambda: T0.timestamp() + t
    buf = TelemetryBuffer(10.0)
    buf.add(*sampler.sample())
    r = client.post(f"/api/v1/nodes/{node}/telemetry/", buf.batch(), format="json")
    assert r.status_code == 200, r.content
    return r.json()


def test_agent_batches_are_stored_and_attributed_to_the_job_holding_the_gpu(client_for, jobs, at):
    agent = client_for("agent")
    bind(jobs["own"])
    nvml = eight_gpu_nvml()
    nvml.set(0, sm=91, memory_used_bytes=30 * 2**30)
    nvml.set(1, sm=89)
    sampler = NvmlSampler(nvml)
    at(10)
    assert post_samples(agent, nvml, sampler, 5) == {"accepted": 8, "dropped": 0, "xids": 0}
    rows = {s.gpu.index: s for s in GpuSample.objects.select_related("gpu").filter(gpu__node__name="n0")}
    assert len(rows) == 8
    assert rows[0].sm == 91 and rows[0].fb_used == 30 * 1024 and rows[0].job_id == jobs["own"].pk
    assert rows[0].task_id is not None and rows[2].job_id is None and rows[2].sm == 0
    assert rows[0].time == T0 + timedelta(seconds=5)
    # a driver that cannot report power: stored as None, never 0
    nvml.unsupported.add("nvmlDeviceGetPowerUsage")
    post_samples(agent, nvml, sampler, 8)
    assert GpuSample.objects.filter(time=T0 + timedelta(seconds=8), power__isnull=True).count() == 8
    # the driver disappears: the agent sends nothing, nothing is stored (no zeros)
    nvml.lose_driver()
    before = GpuSample.objects.count()
    rows_, xids = sampler.sample()
    assert rows_ == [] and xids == [] and GpuSample.objects.count() == before


def test_xids_are_stored_and_the_latest_xid_and_ecc_per_gpu_can_be_read(client_for, cluster, at):
    agent = client_for("agent")
    nvml = eight_gpu_nvml()
    sampler = NvmlSampler(nvml)
    sampler.sample()  # initialise: registers the event set
    nvml.xid(4, 48)
    nvml.set(4, ecc_volatile_uncorrected=3)
    at(30)
    assert post_samples(agent, nvml, sampler, 20)["xids"] == 1
    gpu4 = Gpu.objects.get(node__name="n0", index=4)
    assert GpuXid.objects.get(gpu=gpu4).xid == 48
    assert Event.objects.filter(kind="gpu_xid", node__name="n0").count() == 1
    nvml.xid(4, 79)
    post_samples(agent, nvml, sampler, 25)
    sig = latest_gpu_signals([gpu4.pk])[gpu4.pk]
    assert sig["xid"] == 79 and sig["ecc_dbe_volatile"] == 3 and sig["xid_time"] == T0 + timedelta(seconds=25)


@pytest.mark.parametrize("body,field", [
    ({"rows": [[1.0, 0, 101, None, None, None, None, None, None, None]]}, "rows[0].sm"),
    ({"rows": [[1.0, 0, "x", None, None, None, None, None, None, None]]}, "rows[0].sm"),
    ({"rows": [[1.0, 0]]}, "rows[0]"),
    ({"rows": [[None, 0, 1, None, None, None, None, None, None, None]]}, "rows[0].t"),
    ({"fields": ["t", "gpu"]}, "fields"),
    ({"xids": [[1.0, 0]]}, "xids[0]"),
    ({"rows": "nope"}, "rows"),
    ({"samples": 5}, "samples"),  # unknown keys are refused, never read as an empty batch
    ({"bogus": 1, "x": [1, 2]}, "bogus"),
    ({"bogus": 1, "x": [1, 2]}, "x"),
    ({"samples": [{"gpu": "x", "t": "y", "sm": -5}]}, "samples"),
    ({"rows": [], "fields": 5}, "fields"),
    ({"rows": [{"t": 1.0, "gpu": 0}]}, "rows[0]"),
])
def test_a_malformed_batch_is_a_400_naming_the_field(client_for, cluster, body, field):
    r = client_for("agent").post("/api/v1/nodes/n0/telemetry/", body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content


def test_an_admin_posting_garbage_gets_400_and_driver_unsupported_nulls_stay_valid(client_for, cluster, at):
    """The user's report: as admin, {"samples": 5} was answered 200 {"accepted": 0, ...}."""
    admin = client_for("staff")
    r = admin.post("/api/v1/nodes/n0/telemetry/", {"samples": 5}, format="json")
    assert r.status_code == 400 and "samples" in r.json(), r.content
    row = [T0.timestamp(), 0, 42] + [None] * 7  # fb, power, temp, throttle, ECC, NVLink unsupported: null
    r = admin.post("/api/v1/nodes/n0/telemetry/", {"rows": [row]}, format="json")
    assert r.status_code == 200 and r.json() == {"accepted": 1, "dropped": 0, "xids": 0}, r.content


def test_only_node_agents_send_telemetry(client_for, cluster):
    r = client_for("member").post("/api/v1/nodes/n0/telemetry/", {"rows": []}, format="json")
    assert r.status_code == 403


def test_rows_from_an_unknown_gpu_or_far_outside_the_window_are_dropped(client_for, cluster, at):
    at(7200)
    t = T0.timestamp()
    body = {"rows": [[t + 7190, 99, 5, None, None, None, None, None, None, None],
                     [t - 86400, 0, 5, None, None, None, None, None, None, None],
                     [t + 7190, 0, 5, None, None, None, None, None, None, None]]}
    assert client_for("agent").post("/api/v1/nodes/n0/telemetry/", body, format="json").json() == \
        {"accepted": 1, "dropped": 2, "xids": 0}


def _raw(gpu, t: datetime, sm, job=None, task=None, fb=None):
    return GpuSample(gpu=gpu, level=GpuSample.RAW, time=t, period=10, sm=sm, fb_used=fb, job=job, task=task)


def test_retention_downsamples_and_keeps_the_task_summary(jobs, at, settings):
    """Raw rows older than TELEMETRY_RAW_HOURS fold into 1-minute means, minute rows older than
    TELEMETRY_MINUTE_DAYS into 15-minute means, 15-minute rows older than TELEMETRY_QUARTER_DAYS go; the
    task's mean / p95 survive the raw rows."""
    settings.TELEMETRY_RAW_HOURS, settings.TELEMETRY_MINUTE_DAYS, settings.TELEMETRY_QUARTER_DAYS = 1, 1, 2
    bind(jobs["own"])
    job = Job.objects.get(pk=jobs["own"].pk)
    task = job.tasks.get()
    g0, g1 = Gpu.objects.get(node__name="n0", index=0), Gpu.objects.get(node__name="n0", index=1)
    rows = []
    for i in range(12):  # 2 minutes of 10 s samples on 2 GPUs; SM 0..110 step 10 clipped at 100; sm None once
        t = T0 + timedelta(seconds=10 * i)
        rows.append(_raw(g0, t, min(100, 10 * i), job, task, fb=2048.0 * i))
        rows.append(_raw(g1, t, None if i == 0 else 50, job, task))
    GpuSample.objects.bulk_create(rows)
    before = task_summary([task.pk])[task.pk]
    out = downsample(T0 + timedelta(hours=1, minutes=2, seconds=30))
    if connection.vendor != "postgresql":
        # SQLite (the local demo, no telemetry): the rollups are PostgreSQL SQL, so raw rows expire without
        # minute rows; the task's summary still survives them.
        assert (out["raw_deleted"], out["minute_rows"], out["summarized_tasks"]) == (24, 0, 1)
        assert not GpuSample.objects.exists()
        assert task_summary([task.pk])[task.pk] == before and before["samples"] == 23
        return
    assert out["raw_deleted"] == 24 and out["minute_rows"] == 4 and out["summarized_tasks"] == 1
    minutes = {(m.gpu_id, m.time): m for m in GpuSample.objects.filter(level=GpuSample.MINUTE)}
    m = minutes[(g0.pk, T0)]
    assert (m.samples, m.sm, m.period) == (6, pytest.approx(25.0), 60)  # mean of 0,10,..,50
    assert minutes[(g1.pk, T0)].sm == pytest.approx(50.0)  # the None sample does not pull the mean down
    assert minutes[(g1.pk, T0)].samples == 6
    after = task_summary([task.pk])[task.pk]
    assert after == before  # the summary survives its raw rows
    assert after["samples"] == 23 and after["sm_p95"] == 100 and after["sm_mean"] == pytest.approx(
        (sum(min(100, 10 * i) for i in range(12)) + 50 * 11) / 23)
    assert TaskUtilization.objects.get(task=task).samples == 23
    # a day later: minute rows become one quarter-hour row per (GPU, job, task)
    out = downsample(T0 + timedelta(days=1, minutes=20))
    assert out["minute_deleted"] == 4 and out["quarter_rows"] == 2
    q = GpuSample.objects.get(level=GpuSample.QUARTER, gpu=g0)
    assert q.samples == 12 and q.sm == pytest.approx(sum(min(100, 10 * i) for i in range(12)) / 12) and q.period == 900
    # past the quarter retention: gone
    out = downsample(T0 + timedelta(days=3))
    assert out["quarter_deleted"] == 2 and not GpuSample.objects.exists()
    assert task_summary([task.pk])[task.pk] == after


def _feed(job, gpus, start: datetime, minutes: float, sm, step=10):
    task = job.tasks.first()
    GpuSample.objects.bulk_create([_raw(g, start + timedelta(seconds=s), sm, job, task)
                                   for s in range(0, int(minutes * 60), step) for g in gpus])


@pytest.mark.parametrize("sm,idle", [(4.9, True), (5.0, False)])
def test_idle_detection_at_the_threshold(jobs, at, settings, sm, idle):
    """IDLE_SM_PERCENT (5) for IDLE_MINUTES (30): 4.9 % for 31 min is idle, 5.0 % is not."""
    bind(jobs["own"])
    job = Job.objects.get(pk=jobs["own"].pk)
    gpus = list(Gpu.objects.filter(node__name="n0", index__in=(0, 1)))
    _feed(job, gpus, T0, 31, sm)
    out = detect_idle(T0 + timedelta(minutes=31))
    assert (job.pk in out["marked"]) is idle
    assert IdleAllocation.objects.filter(job=job, ended_at__isnull=True).exists() is idle
    assert Event.objects.filter(kind="job_idle", job=job).exists() is idle


def test_idle_needs_telemetry_for_the_whole_window_and_ends_when_busy(jobs, at):
    bind(jobs["own"])
    job = Job.objects.get(pk=jobs["own"].pk)
    gpus = list(Gpu.objects.filter(node__name="n0", index__in=(0, 1)))
    _feed(job, gpus, T0 + timedelta(minutes=20), 11, 0)  # only the last 11 minutes: no verdict
    assert detect_idle(T0 + timedelta(minutes=31))["marked"] == []
    _feed(job, gpus, T0, 20, 0)  # now the whole window: idle since the first sample
    assert detect_idle(T0 + timedelta(minutes=31))["marked"] == [job.pk]
    assert IdleAllocation.objects.get(job=job).since == T0
    assert detect_idle(T0 + timedelta(minutes=32))["marked"] == []  # marked once
    _feed(job, gpus[:1], T0 + timedelta(minutes=33), 1, 60)
    assert detect_idle(T0 + timedelta(minutes=34))["ended"] == [job.pk]
    assert IdleAllocation.objects.get(job=job).ended_at == T0 + timedelta(minutes=33)
    assert Event.objects.filter(kind="job_active_again", job=job).exists()


def test_a_job_without_telemetry_is_never_idle(jobs, at):
    bind(jobs["own"])
    assert detect_idle(T0 + timedelta(hours=5))["marked"] == []


def test_queue_idle_timeout_warns_then_stops(jobs, at):
    from gpuplatform.models import Queue

    Queue.objects.filter(name="alpha").update(idle_timeout_minutes=60)
    bind(jobs["own"])
    job = Job.objects.get(pk=jobs["own"].pk)
    gpus = list(Gpu.objects.filter(node__name="n0", index__in=(0, 1)))
    _feed(job, gpus, T0, 31, 0)
    detect_idle(T0 + timedelta(minutes=31))
    assert Event.objects.filter(kind="idle_timeout_warning", job=job).exists()
    assert detect_idle(T0 + timedelta(minutes=40))["stopped"] == []
    _feed(job, gpus, T0 + timedelta(minutes=31), 30, 0)
    assert detect_idle(T0 + timedelta(minutes=61))["stopped"] == [job.pk]
    assert Job.objects.get(pk=job.pk).state in ("cancelled", "preempting")


def test_the_maintenance_command_runs_both_passes(jobs, at):
    import io
    import json

    from django.core.management import call_command

    bind(jobs["own"])
    job = Job.objects.get(pk=jobs["own"].pk)
    _feed(job, list(Gpu.objects.filter(node__name="n0", index__in=(0, 1))), T0, 31, 0)
    at(31 * 60)
    out = io.StringIO()
    call_command("telemetry_maintain", stdout=out)
    result = json.loads(out.getvalue())
    assert result["idle"]["marked"] == [job.pk] and result["retention"]["raw_deleted"] == 0
