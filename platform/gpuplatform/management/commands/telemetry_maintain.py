"""python manage.py telemetry_maintain: one telemetry retention / downsampling pass and one idle-detection
pass at the cluster clock (what Celery beat runs every minute; docs/telemetry.md)."""
from __future__ import annotations

import json

from gpuplatform.management.base import DatabaseCommand


class Command(DatabaseCommand):
    help = "Downsample and expire GPU telemetry, then mark / end idle allocations (docs/telemetry.md)."

    def handle(self, *args, **opts):
        from gpuplatform.telemetry import detect_idle, downsample

        kept = downsample()
        idle = detect_idle()
        self.stdout.write(json.dumps({"retention": kept, "idle": idle}))
