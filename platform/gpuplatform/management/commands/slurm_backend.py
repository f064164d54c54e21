"""`manage.py slurm_backend`: run the Slurm backend (docs/slurm.md): every SLURM_POLL_SECONDS, one round of
gpuplatform.slurm.backend.SlurmBackend.sync (nodes, submissions, starts, exits, logs, stops) against the
Slurm cluster SLURM_CONF names (or the default /etc/slurm/slurm.conf). --once: one round, then exit."""
import time

from django.conf import settings

from gpuplatform.management import options
from gpuplatform.management.base import DatabaseCommand


class Command(DatabaseCommand):
    help = "Drive a Slurm cluster: gangs bound to Slurm nodes become Slurm jobs (docs/slurm.md)"

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one round, then exit")
        parser.add_argument("--poll", type=options.number(above=0), default=None, help="seconds between rounds (SLURM_POLL_SECONDS)")
        parser.add_argument("--mode", choices=["placement", "admission"], default=None, help="SLURM_MODE")

    def handle(self, *args, **opts):
        from gpuplatform.slurm.backend import SlurmBackend
        from gpuplatform.slurm.cli import SlurmCLI, SubprocessRunner

        backend = SlurmBackend(SlurmCLI(SubprocessRunner(settings.SLURM_CONF or None),
                                        partition=settings.SLURM_PARTITION), mode=opts["mode"])
        poll = opts["poll"] or settings.SLURM_POLL_SECONDS
        self.stdout.write(f"slurm backend: partition {settings.SLURM_PARTITION}, {backend.mode} mode, "
                          f"output in {backend.output_dir}")
        while True:
            stats = backend.sync()
            if stats.submitted or stats.errors:
                self.stdout.write(f"submitted {stats.submitted} errors {stats.errors[:3]}")
            if opts["once"]:
                return
            time.sleep(poll)
