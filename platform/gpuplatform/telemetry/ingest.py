"""Ingestion of one telemetry batch from a node agent (wire format: agent/telemetry.py).

    ingest_telemetry(node, body, actor=None) -> {"accepted": rows stored, "dropped": rows refused as too old /
                                                 in the future / of an unknown GPU, "xids": XID events stored}

Rows are stored as level-0 GpuSample rows with the server's time (t - the node's clock offset), attributed to
the job and task holding the GPU now. XIDs become GpuXid rows and one `gpu_xid` Event per batch (the audit
trail health rules read). Raw samples themselves are measurements, not state changes: no Event per batch.
Raises ValidationError naming the field and rule for a malformed body (the API answers 400).
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import transaction

from .. import bulk, clock
from ..audit import record_event
from ..errors import ValidationError
from ..models import Allocation, Gpu, GpuSample, GpuXid, Node

WIRE_FIELDS = ("t", "gpu", "sm", "fb_used", "fb_free", "power", "temp", "throttle", "ecc_dbe", "nvlink_down")
COLUMNS = ("gpu_id", "level", "time", "period", "samples", "sm", "fb_used", "fb_free", "power", "temp", "throttle",
           "ecc_dbe", "nvlink_down", "job_id", "task_id")
FUTURE_SLACK = timedelta(minutes=5)
BIG_INT = 2**62


def _number(value, where: str, *, integer: bool = False, lo: float | None = None, hi: float | None = None):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError({where: "must be a finite number or null"})
    if integer and value != int(value):
        raise ValidationError({where: "must be an integer"})
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValidationError({where: f"must be between {lo} and {hi}"})
    return int(value) if integer else float(value)


BATCH_KEYS = ("interval", "fields", "rows", "xids")


def _validate(body) -> tuple[float, list, list]:
    """Check a batch's shape (module docstring); unknown keys are refused (docs/api.md), a row's values may be
    null (a field the driver does not support), never a wrong type."""
    if not isinstance(body, dict):
        raise ValidationError({"non_field_errors": "must be a JSON object"})
    unknown = sorted(set(body) - set(BATCH_KEYS))
    if unknown:
        raise ValidationError({key: f"unknown field (a batch has {', '.join(BATCH_KEYS)})" for key in unknown})
    interval = _number(body.get("interval", settings.TELEMETRY_SECONDS), "interval", lo=0.1, hi=3600)
    fields = body.get("fields", list(WIRE_FIELDS))
    if not isinstance(fields, list) or fields != list(WIRE_FIELDS):
        raise ValidationError({"fields": f"must be {list(WIRE_FIELDS)} (this server's wire format)"})
    rows, xids = body.get("rows", []), body.get("xids", [])
    if not isinstance(rows, list) or len(rows) > settings.TELEMETRY_MAX_ROWS_PER_CALL:
        raise ValidationError({"rows": f"must be a list of at most {settings.TELEMETRY_MAX_ROWS_PER_CALL} rows"})
    if not isinstance(xids, list) or len(xids) > 1000:
        raise ValidationError({"xids": "must be a list of at most 1000 [t, gpu, xid] entries"})
    out = []
    limits = {"sm": (0, 100), "fb_used": (0, 1e9), "fb_free": (0, 1e9), "power": (0, 1e6), "temp": (-100, 300),
              "throttle": (0, BIG_INT), "ecc_dbe": (0, BIG_INT), "nvlink_down": (0, 1000)}
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(WIRE_FIELDS):
            raise ValidationError({f"rows[{i}]": f"must be a list of {len(WIRE_FIELDS)} values {list(WIRE_FIELDS)}"})
        t = _number(row[0], f"rows[{i}].t", lo=0, hi=1e11)
        if t is None:
            raise ValidationError({f"rows[{i}].t": "is required (Unix seconds)"})
        gpu = _number(row[1], f"rows[{i}].gpu", integer=True, lo=0, hi=4096)
        if gpu is None:
            raise ValidationError({f"rows[{i}].gpu": "is required (the GPU index)"})
        vals = [_number(v, f"rows[{i}].{name}", integer=name in ("throttle", "ecc_dbe", "nvlink_down"),
                        lo=limits[name][0], hi=limits[name][1]) for name, v in zip(WIRE_FIELDS[2:], row[2:])]
        out.append((t, gpu, vals))
    xs = []
    for i, x in enumerate(xids):
        if not isinstance(x, list) or len(x) != 3:
            raise ValidationError({f"xids[{i}]": "must be [t, gpu, xid]"})
        t = _number(x[0], f"xids[{i}].t", lo=0, hi=1e11)
        gpu = _number(x[1], f"xids[{i}].gpu", integer=True, lo=0, hi=4096)
        xid = _number(x[2], f"xids[{i}].xid", integer=True, lo=0, hi=100000)
        if None in (t, gpu, xid):
            raise ValidationError({f"xids[{i}]": "t, gpu and xid are required"})
        xs.append((t, gpu, xid))
    return interval, out, xs


def ingest_telemetry(node: Node, body, *, actor=None) -> dict:
    """Store one batch of `node`'s telemetry (module docstring). Atomic."""
    interval, rows, xids = _validate(body)
    now = clock.now()
    offset = node.clock_offset_seconds or 0.0
    oldest = now - timedelta(hours=settings.TELEMETRY_RAW_HOURS)

    def server_time(t: float) -> datetime:
        return datetime.fromtimestamp(t - offset, tz=timezone.utc)

    with transaction.atomic():
        gpus = dict(Gpu.objects.filter(node=node).values_list("index", "id"))
        holders = {g: (j, t) for g, j, t in Allocation.objects.filter(gpu__node=node, released_at__isnull=True)
                   .values_list("gpu_id", "job_id", "task_id")}
        out, dropped = [], 0
        for t, index, vals in rows:
            gpu_id = gpus.get(index)
            at = server_time(t)
            if gpu_id is None or at < oldest or at > now + FUTURE_SLACK:
                dropped += 1
                continue
            job_id, task_id = holders.get(gpu_id, (None, None))
            out.append((gpu_id, GpuSample.RAW, at, interval, 1, *vals, job_id, task_id))
        bulk.insert_rows(GpuSample, COLUMNS, out)
        known = [(t, g, x) for t, g, x in xids if g in gpus]  # XIDs of GPUs this node has
        stored = [GpuXid(gpu_id=gpus[g], time=server_time(t), xid=x) for t, g, x in known]
        if stored:
            GpuXid.objects.bulk_create(stored)
            record_event("gpu_xid", f"{node.name}: " + ", ".join(f"gpu{g} XID {x}" for _, g, x in known),
                         actor=actor, node=node, data={"xids": [[g, x] for _, g, x in known]})
    return {"accepted": len(out), "dropped": dropped, "xids": len(stored)}
