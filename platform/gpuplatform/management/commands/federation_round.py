"""python manage.py federation_round [--loop]: the federation manager's round (sync every member, move a lost
member's jobs, withdraw, dispatch; gpuplatform/federation/dispatch.py) once, or every FEDERATION_SYNC_SECONDS
with --loop -- what Celery beat runs on a manager, for a manager run without Celery (docs/federation.md)."""
from __future__ import annotations

import json
import time

from django.conf import settings

from gpuplatform.management.base import DatabaseCommand


class Command(DatabaseCommand):
    help = "Run the federation manager's round once (or --loop every FEDERATION_SYNC_SECONDS)."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="repeat every FEDERATION_SYNC_SECONDS until Ctrl-C")

    def handle(self, *args, **opts):
        from gpuplatform.federation.dispatch import run_round

        while True:
            self.stdout.write(json.dumps(run_round()))
            if not opts["loop"]:
                return
            time.sleep(float(getattr(settings, "FEDERATION_SYNC_SECONDS", 30)))
