"""GPU telemetry in /metrics under NVIDIA dcgm-exporter's names and labels, so existing Grafana boards work.

| metric                          | unit / meaning (dcgm-exporter's)                  | from                      |
| ------------------------------- | ------------------------------------------------- | ------------------------- |
| DCGM_FI_DEV_GPU_UTIL            | GPU utilization, %                                | GpuSample.sm              |
| DCGM_FI_DEV_FB_USED             | framebuffer used, MiB                             | GpuSample.fb_used         |
| DCGM_FI_DEV_FB_FREE             | framebuffer free, MiB                             | GpuSample.fb_free         |
| DCGM_FI_DEV_POWER_USAGE         | power draw, W                                     | GpuSample.power           |
| DCGM_FI_DEV_GPU_TEMP            | GPU temperature, C                                | GpuSample.temp            |
| DCGM_FI_DEV_XID_ERRORS          | value of the last XID error seen                  | GpuXid (latest)           |
| DCGM_FI_DEV_ECC_DBE_VOL_TOTAL   | volatile double-bit ECC errors                    | GpuSample.ecc_dbe         |
| gpuplatform_idle_allocated_gpus | GPUs of jobs marked idle, per queue and team      | IdleAllocation (open)     |

Labels as dcgm-exporter writes them: `gpu` (index), `UUID`, `device` ("nvidia<index>"), `modelName`,
`Hostname` (the node's name), plus `job`, `team`, `queue` for an allocated GPU ("" when free, as
dcgm-exporter leaves its pod labels). Only GPUs whose latest raw sample is recent (STALE_SECONDS) appear, and
only the fields the driver reported: a GPU without telemetry is absent, never a zero. One scrape costs three
queries (latest sample per GPU with DISTINCT ON, the XID events, live allocations) plus one for idle.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection
from prometheus_client.core import GaugeMetricFamily

from .. import clock
from ..models import Allocation, GpuSample, IdleAllocation
from .signals import latest_xids

FIELDS = (("DCGM_FI_DEV_GPU_UTIL", "sm", "GPU utilization (in %)."),
          ("DCGM_FI_DEV_FB_USED", "fb_used", "Framebuffer memory used (in MiB)."),
          ("DCGM_FI_DEV_FB_FREE", "fb_free", "Framebuffer memory free (in MiB)."),
          ("DCGM_FI_DEV_POWER_USAGE", "power", "Power draw (in W)."),
          ("DCGM_FI_DEV_GPU_TEMP", "temp", "GPU temperature (in C)."),
          ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe", "Total number of double-bit volatile ECC errors."))
LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "job", "team", "queue"]


def stale_seconds() -> float:
    return max(300.0, 3 * settings.TELEMETRY_SECONDS)


def _model_name(labels: dict, flavor: str) -> str:
    product = (labels or {}).get("nvidia.com/gpu.product") or f"NVIDIA {flavor}"
    return product.replace("-", " ")


def collect_dcgm():
    """The metric families above (a generator, for PlatformCollector.collect)."""
    now = clock.now()
    recent = GpuSample.objects.filter(level=GpuSample.RAW, time__gte=now - timedelta(seconds=stale_seconds()))
    columns = ("gpu_id", "gpu__index", "gpu__uuid", "gpu__node__name", "gpu__node__flavor", "gpu__node__labels",
               "sm", "fb_used", "fb_free", "power", "temp", "ecc_dbe")
    if connection.vendor == "postgresql":  # one row per GPU, the newest (DISTINCT ON)
        latest = recent.order_by("gpu_id", "-time").distinct("gpu_id").values_list(*columns)
    else:  # SQLite (the local demo): the newest per GPU in Python
        newest: dict = {}
        for r in recent.order_by("gpu_id", "time").values_list(*columns):
            newest[r[0]] = r
        latest = list(newest.values())
    holders = {g: (str(j), t, q) for g, j, t, q in Allocation.objects.filter(released_at__isnull=True)
               .values_list("gpu_id", "job_id", "job__team__name", "job__queue__name")}
    fams = {name: GaugeMetricFamily(name, doc, labels=LABELS) for name, _, doc in FIELDS}
    xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=LABELS)
    rows = list(latest)
    xids = latest_xids() if rows else {}
    for gpu_id, index, uuid, host, flavor, node_labels, *values in rows:
        job, team, queue = holders.get(gpu_id, ("", "", ""))
        lv = [str(index), uuid or "", f"nvidia{index}", _model_name(node_labels, flavor), host, job, team or "", queue or ""]
        for (name, _, _), v in zip(FIELDS, values):
            if v is not None:
                fams[name].add_metric(lv, float(v))
        xid.add_metric(lv, float(xids.get(gpu_id, (0, None))[0]))
    yield from fams.values()
    yield xid
    idle = GaugeMetricFamily("gpuplatform_idle_allocated_gpus",
                             "GPUs held by running jobs marked idle (under IDLE_SM_PERCENT for IDLE_MINUTES).",
                             labels=["queue", "team"])
    per: dict[tuple, int] = {}
    for gpus, q, t in IdleAllocation.objects.filter(ended_at__isnull=True).values_list("gpus", "job__queue__name",
                                                                                      "job__team__name"):
        per[(q, t)] = per.get((q, t), 0) + gpus
    for (q, t), n in sorted(per.items()):
        idle.add_metric([q, t], n)
    yield idle
