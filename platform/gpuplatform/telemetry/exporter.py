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
queries (the newest recent raw sample per GPU, one index probe each through a LATERAL join; the XID
events; live allocations) plus one for idle.
"""
from __future__ import annotations

import json

from datetime import timedelta

from django.conf import settings
from django.db import connection

from .. import clock
from ..models import Allocation, Gpu, GpuSample, IdleAllocation, Node
from .signals import latest_xids

FIELDS = (("DCGM_FI_DEV_GPU_UTIL", "sm", "GPU utilization (in %)."),
          ("DCGM_FI_DEV_FB_USED", "fb_used", "Framebuffer memory used (in MiB)."),
          ("DCGM_FI_DEV_FB_FREE", "fb_free", "Framebuffer memory free (in MiB)."),
          ("DCGM_FI_DEV_POWER_USAGE", "power", "Power draw (in W)."),
          ("DCGM_FI_DEV_GPU_TEMP", "temp", "GPU temperature (in C)."),
          ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe", "Total number of double-bit volatile ECC errors."))
LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "job", "team", "queue"]


LATEST_SQL = """
SELECT g.id, g.index, g.uuid, n.name, n.flavor, n.labels, s.sm, s.fb_used, s.fb_free, s.power, s.temp, s.ecc_dbe
FROM {gpu} g JOIN {node} n ON n.id = g.node_id
CROSS JOIN LATERAL (SELECT sm, fb_used, fb_free, power, temp, ecc_dbe FROM {sample} x
                    WHERE x.gpu_id = g.id AND x.level = 0 AND x.time >= %(since)s
                    ORDER BY x.time DESC LIMIT 1) s
ORDER BY n.name, g.index
"""


def stale_seconds() -> float:
    return max(300.0, 3 * settings.TELEMETRY_SECONDS)


def _model_name(labels: dict, flavor: str) -> str:
    product = (labels or {}).get("nvidia.com/gpu.product") or f"NVIDIA {flavor}"
    return product.replace("-", " ")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)


def _latest_rows(now) -> list:
    """(gpu id, index, uuid, node name, flavor, node labels, sm, fb_used, fb_free, power, temp, ecc_dbe) of
    each GPU's newest raw sample within stale_seconds()."""
    since = now - timedelta(seconds=stale_seconds())
    if connection.vendor == "postgresql":  # one index probe per GPU (LATERAL)
        with connection.cursor() as cur:
            cur.execute(LATEST_SQL.format(sample=GpuSample._meta.db_table, gpu=Gpu._meta.db_table,
                                          node=Node._meta.db_table), {"since": since})
            return [(*r[:5], json.loads(r[5]) if isinstance(r[5], str) else r[5], *r[6:]) for r in cur.fetchall()]
    newest: dict = {}  # SQLite (the local demo): the newest per GPU in Python
    for r in GpuSample.objects.filter(level=GpuSample.RAW, time__gte=since).order_by("gpu_id", "time").values_list(
            "gpu_id", "gpu__index", "gpu__uuid", "gpu__node__name", "gpu__node__flavor", "gpu__node__labels",
            "sm", "fb_used", "fb_free", "power", "temp", "ecc_dbe"):
        newest[r[0]] = r
    return list(newest.values())


def exposition() -> str:
    """The families above in Prometheus' text format (0.0.4), appended to /metrics after the platform's
    registry. Written directly rather than through prometheus_client's families: each GPU's label set is
    escaped once and shared by its seven series (prometheus_client re-validates and re-escapes every label of
    every sample, ~10x slower at 8,000 GPUs)."""
    now = clock.now()
    rows = _latest_rows(now)
    holders = {g: (str(j), t, q) for g, j, t, q in Allocation.objects.filter(released_at__isnull=True)
               .values_list("gpu_id", "job_id", "job__team__name", "job__queue__name")} if rows else {}
    xids = latest_xids() if rows else {}
    lines: dict[str, list[str]] = {name: [] for name, _, _ in FIELDS}
    lines["DCGM_FI_DEV_XID_ERRORS"] = []
    for gpu_id, index, uuid, host, flavor, node_labels, *values in rows:
        job, team, queue = holders.get(gpu_id, ("", "", ""))
        lv = (str(index), uuid or "", f"nvidia{index}", _model_name(node_labels, flavor), host, job, team or "",
              queue or "")
        labels = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(LABELS, lv)) + "}"
        for (name, _, _), v in zip(FIELDS, values):
            if v is not None:
                lines[name].append(f"{name}{labels} {_num(v)}")
        lines["DCGM_FI_DEV_XID_ERRORS"].append(f"DCGM_FI_DEV_XID_ERRORS{labels} {xids.get(gpu_id, (0, None))[0]}")
    docs = {name: doc for name, _, doc in FIELDS}
    docs["DCGM_FI_DEV_XID_ERRORS"] = "Value of the last XID error encountered."
    out = []
    for name, samples in lines.items():
        out += [f"# HELP {name} {docs[name]}", f"# TYPE {name} gauge", *samples]
    per: dict[tuple, int] = {}
    for gpus, q, t in IdleAllocation.objects.filter(ended_at__isnull=True).values_list("gpus", "job__queue__name",
                                                                                      "job__team__name"):
        per[(q, t)] = per.get((q, t), 0) + gpus
    out += ["# HELP gpuplatform_idle_allocated_gpus GPUs held by running jobs marked idle "
            "(under IDLE_SM_PERCENT for IDLE_MINUTES).", "# TYPE gpuplatform_idle_allocated_gpus gauge"]
    out += [f'gpuplatform_idle_allocated_gpus{{queue="{_escape(q)}",team="{_escape(t)}"}} {n}'
            for (q, t), n in sorted(per.items())]
    return "\n".join(out) + "\n"
