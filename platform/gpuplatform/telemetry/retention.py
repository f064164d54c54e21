"""Retention and downsampling of GPU telemetry (docs/telemetry.md), run by `downsample()` (Celery beat,
every minute; `manage.py telemetry_maintain` by hand):

1. raw samples older than TELEMETRY_RAW_HOURS (cut at a whole minute) are folded into their tasks'
   TaskUtilization histograms, then into 1-minute rows (level 1), then deleted;
2. 1-minute rows older than TELEMETRY_MINUTE_DAYS (cut at a whole quarter hour) become 15-minute rows
   (level 2), then are deleted;
3. 15-minute rows and XID events older than TELEMETRY_QUARTER_DAYS are deleted.

Means are weighted by the raw samples each row holds and ignore fields the driver did not report (None);
throttle reasons are OR-ed, ECC and NVLink-down counts take the maximum. A row stays per (GPU, period,
job, task), so a job's series survives downsampling. The rollups are PostgreSQL SQL (the platform's
store); on SQLite (the local demo, which has no telemetry) rows only expire.

`task_summary(tasks)`: per task, mean and p95 SM utilization and framebuffer used, from its histogram plus
the raw samples not yet folded: complete at any time, and kept with the job after its end.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.db.models.functions import Floor, Round

from .. import clock
from ..models import GpuSample, GpuXid, Task, TaskUtilization

GIB = 1024.0  # MiB per GiB (fb histogram bins)


def _floor(t: datetime, seconds: int) -> datetime:
    epoch = int(t.timestamp()) // seconds * seconds
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _fold_into_summaries(rows) -> int:
    """Add raw rows (a GpuSample queryset) to their tasks' histograms. Returns the tasks touched."""
    sm = rows.filter(task__isnull=False, sm__isnull=False).annotate(b=Round("sm")).values("task_id", "job_id", "b") \
        .annotate(n=Count("id")).order_by()
    fb = rows.filter(task__isnull=False, fb_used__isnull=False).annotate(b=Floor(F("fb_used") / GIB)) \
        .values("task_id", "job_id", "b").annotate(n=Count("id")).order_by()
    hists: dict[int, dict] = {}
    for name, counts in (("sm", sm), ("fb", fb)):
        for r in counts:
            h = hists.setdefault(r["task_id"], {"job": r["job_id"], "sm": {}, "fb": {}})
            key = str(int(r["b"]))
            h[name][key] = h[name].get(key, 0) + r["n"]
    live = set(Task.objects.filter(pk__in=hists).values_list("pk", flat=True))
    existing = {u.task_id: u for u in TaskUtilization.objects.select_for_update().filter(task_id__in=live)}
    for task_id in live:
        h = hists[task_id]
        u = existing.get(task_id) or TaskUtilization(task_id=task_id, job_id=h["job"], sm_hist={}, fb_hist={})
        for field, src in (("sm_hist", h["sm"]), ("fb_hist", h["fb"])):
            merged = dict(getattr(u, field))
            for k, n in src.items():
                merged[k] = merged.get(k, 0) + n
            setattr(u, field, merged)
        u.samples = sum(u.sm_hist.values())
        u.save()
    return len(live)


ROLLUP_SQL = """
INSERT INTO {table} (gpu_id, level, time, period, samples, sm, fb_used, fb_free, power, temp, throttle, ecc_dbe,
                     nvlink_down, job_id, task_id)
SELECT gpu_id, %(level)s, to_timestamp(floor(extract(epoch FROM time) / %(width)s) * %(width)s), %(width)s,
       sum(samples),
       sum(sm * samples) / nullif(sum(CASE WHEN sm IS NULL THEN 0 ELSE samples END), 0),
       sum(fb_used * samples) / nullif(sum(CASE WHEN fb_used IS NULL THEN 0 ELSE samples END), 0),
       sum(fb_free * samples) / nullif(sum(CASE WHEN fb_free IS NULL THEN 0 ELSE samples END), 0),
       sum(power * samples) / nullif(sum(CASE WHEN power IS NULL THEN 0 ELSE samples END), 0),
       sum(temp * samples) / nullif(sum(CASE WHEN temp IS NULL THEN 0 ELSE samples END), 0),
       bit_or(throttle), max(ecc_dbe), max(nvlink_down), job_id, task_id
FROM {table}
WHERE level = %(from_level)s AND time < %(cutoff)s
GROUP BY gpu_id, floor(extract(epoch FROM time) / %(width)s), job_id, task_id
"""


def _rollup(from_level: int, to_level: int, cutoff: datetime) -> tuple[int, int]:
    width = GpuSample.LEVEL_SECONDS[to_level]
    if connection.vendor != "postgresql":  # SQLite (the local demo, no GPUs): expire without rolling up
        gone, _ = GpuSample.objects.filter(level=from_level, time__lt=cutoff).delete()
        return 0, gone
    with connection.cursor() as cur:
        cur.execute(ROLLUP_SQL.format(table=GpuSample._meta.db_table),
                    {"level": to_level, "width": width, "from_level": from_level, "cutoff": cutoff})
        made = cur.rowcount
    gone, _ = GpuSample.objects.filter(level=from_level, time__lt=cutoff).delete()
    return made, gone


def downsample(now: datetime | None = None) -> dict:
    """Apply the retention steps (module docstring) at `now` (default: the cluster clock). Atomic.
    Returns {"summarized_tasks", "minute_rows", "raw_deleted", "quarter_rows", "minute_deleted",
    "quarter_deleted", "xids_deleted"}."""
    now = now or clock.now()
    raw_cut = _floor(now - timedelta(hours=settings.TELEMETRY_RAW_HOURS), 60)
    minute_cut = _floor(now - timedelta(days=settings.TELEMETRY_MINUTE_DAYS), 900)
    quarter_cut = now - timedelta(days=settings.TELEMETRY_QUARTER_DAYS)
    with transaction.atomic():
        tasks = _fold_into_summaries(GpuSample.objects.filter(level=GpuSample.RAW, time__lt=raw_cut))
        minute_rows, raw_deleted = _rollup(GpuSample.RAW, GpuSample.MINUTE, raw_cut)
        quarter_rows, minute_deleted = _rollup(GpuSample.MINUTE, GpuSample.QUARTER, minute_cut)
        quarter_deleted, _ = GpuSample.objects.filter(level=GpuSample.QUARTER, time__lt=quarter_cut).delete()
        xids_deleted, _ = GpuXid.objects.filter(time__lt=quarter_cut).delete()
    return {"summarized_tasks": tasks, "minute_rows": minute_rows, "raw_deleted": raw_deleted,
            "quarter_rows": quarter_rows, "minute_deleted": minute_deleted, "quarter_deleted": quarter_deleted,
            "xids_deleted": xids_deleted}


def _mean_p95(hist: dict) -> tuple[float | None, float | None]:
    total = sum(hist.values())
    if not total:
        return None, None
    items = sorted((float(k), n) for k, n in hist.items())
    mean = sum(k * n for k, n in items) / total
    need, seen = 0.95 * total, 0
    for k, n in items:
        seen += n
        if seen >= need:
            return mean, k
    return mean, items[-1][0]


def task_summary(task_ids) -> dict[int, dict]:
    """task id -> {"sm_mean", "sm_p95" (percent), "fb_used_mean_gib", "fb_used_p95_gib", "samples"}; a task
    without telemetry is absent (the page says "no telemetry"). Bins: 1 % and 1 GiB (the values are the
    bins' lower edges)."""
    task_ids = list(task_ids)
    hists: dict[int, dict] = {u.task_id: {"sm": dict(u.sm_hist), "fb": dict(u.fb_hist)}
                              for u in TaskUtilization.objects.filter(task_id__in=task_ids)}
    raw = GpuSample.objects.filter(level=GpuSample.RAW, task_id__in=task_ids)
    for task_id, sm, fb in raw.values_list("task_id", "sm", "fb_used"):
        h = hists.setdefault(task_id, {"sm": {}, "fb": {}})
        if sm is not None:
            k = str(int(round(sm)))
            h["sm"][k] = h["sm"].get(k, 0) + 1
        if fb is not None:
            k = str(int(fb // GIB))
            h["fb"][k] = h["fb"].get(k, 0) + 1
    out = {}
    for task_id, h in hists.items():
        if not h["sm"] and not h["fb"]:
            continue
        sm_mean, sm_p95 = _mean_p95(h["sm"])
        fb_mean, fb_p95 = _mean_p95(h["fb"])
        out[task_id] = {"sm_mean": sm_mean, "sm_p95": sm_p95, "fb_used_mean_gib": fb_mean, "fb_used_p95_gib": fb_p95,
                        "samples": max(sum(h["sm"].values()), sum(h["fb"].values()))}
    return out
