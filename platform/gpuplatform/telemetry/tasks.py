"""Celery beat tasks of telemetry: retention / downsampling and idle detection, every minute."""
from __future__ import annotations

from celery import shared_task

TELEMETRY_MAINTENANCE = "telemetry.tasks.maintain"


@shared_task(name=TELEMETRY_MAINTENANCE, ignore_result=False)
def maintain() -> dict:
    """downsample() then detect_idle() at the cluster clock; returns both results."""
    from . import detect_idle, downsample

    kept = downsample()
    idle = detect_idle()
    return {"retention": kept, "idle": idle}
