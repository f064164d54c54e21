"""The latest XID and volatile ECC per GPU, for health rules and diagnosis (DESIGN section 14) to read."""
from __future__ import annotations

from django.db.models import OuterRef, Subquery

from ..models import Gpu, GpuSample, GpuXid


def latest_xids(gpu_ids=None) -> dict[int, tuple[int, object]]:
    """gpu id -> (last XID code, its time), for GPUs that reported one (kept TELEMETRY_QUARTER_DAYS)."""
    xq = GpuXid.objects.all() if gpu_ids is None else GpuXid.objects.filter(gpu_id__in=list(gpu_ids))
    out = {}
    for gpu_id, xid, t in xq.order_by("gpu_id", "time", "id").values_list("gpu_id", "xid", "time"):
        out[gpu_id] = (xid, t)  # XIDs are rare: the last one wins
    return out


def latest_gpu_signals(gpu_ids=None) -> dict[int, dict]:
    """gpu id -> {"xid": last XID code or None, "xid_time": its time or None, "ecc_dbe_volatile": the latest
    reported volatile double-bit ECC count (raw samples, the last TELEMETRY_RAW_HOURS) or None, "ecc_time"}. Only GPUs with an XID or an ECC count
    appear. `gpu_ids`: restrict to these (None = all). Two queries, portable (no DISTINCT ON)."""
    blank = {"xid": None, "xid_time": None, "ecc_dbe_volatile": None, "ecc_time": None}
    out: dict[int, dict] = {}
    gq = Gpu.objects.all()
    if gpu_ids is not None:
        gpu_ids = list(gpu_ids)
        gq = gq.filter(pk__in=gpu_ids)
    for gpu_id, (xid, t) in latest_xids(gpu_ids).items():
        out.setdefault(gpu_id, dict(blank)).update(xid=xid, xid_time=t)
    # raw samples only (TELEMETRY_RAW_HOURS): the (gpu, level, time) index finds the newest at once
    last = GpuSample.objects.filter(gpu_id=OuterRef("pk"), level=GpuSample.RAW, ecc_dbe__isnull=False).order_by("-time")
    for gpu_id, ecc, t in gq.annotate(ecc=Subquery(last.values("ecc_dbe")[:1]), ecc_t=Subquery(last.values("time")[:1])) \
            .filter(ecc__isnull=False).values_list("pk", "ecc", "ecc_t"):
        out.setdefault(gpu_id, dict(blank)).update(ecc_dbe_volatile=ecc, ecc_time=t)
    return out
