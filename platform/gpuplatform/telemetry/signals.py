"""The latest XID and volatile ECC per GPU, for health rules and diagnosis (DESIGN section 14) to read."""
from __future__ import annotations

from ..models import GpuSample, GpuXid


def latest_gpu_signals(gpu_ids=None) -> dict[int, dict]:
    """gpu id -> {"xid": last XID code or None, "xid_time": its time or None, "ecc_dbe_volatile": the latest
    reported volatile double-bit ECC count or None, "ecc_time"}. Only GPUs with some telemetry appear.
    `gpu_ids`: restrict to these (None = all). Two queries (DISTINCT ON per GPU, PostgreSQL)."""
    out: dict[int, dict] = {}
    xq = GpuXid.objects.all()
    sq = GpuSample.objects.filter(ecc_dbe__isnull=False)
    if gpu_ids is not None:
        ids = list(gpu_ids)
        xq, sq = xq.filter(gpu_id__in=ids), sq.filter(gpu_id__in=ids)
    blank = {"xid": None, "xid_time": None, "ecc_dbe_volatile": None, "ecc_time": None}
    for gpu_id, xid, t in xq.order_by("gpu_id", "-time", "-id").distinct("gpu_id").values_list("gpu_id", "xid", "time"):
        out.setdefault(gpu_id, dict(blank)).update(xid=xid, xid_time=t)
    for gpu_id, ecc, t in sq.order_by("gpu_id", "-time").distinct("gpu_id").values_list("gpu_id", "ecc_dbe", "time"):
        out.setdefault(gpu_id, dict(blank)).update(ecc_dbe_volatile=ecc, ecc_time=t)
    return out
