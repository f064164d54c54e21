"""Export the database's domain tree.

    python manage.py export_topology --format hypernode > hypernodes.yaml
    python manage.py export_topology --format slurm-conf --output topology.conf

hypernode: one Volcano HyperNode (topology.volcano.sh/v1alpha1) per domain with its tier; slurm-conf:
topology.conf tree form (SwitchName / Switches / Nodes). Read only.
"""
from __future__ import annotations

from django.core.management.base import CommandError

from ..base import DatabaseCommand


class Command(DatabaseCommand):
    help = "Export the domain tree as Volcano HyperNode YAML or a Slurm topology.conf."

    def add_arguments(self, parser):
        parser.add_argument("--format", required=True, choices=["hypernode", "slurm-conf"])
        parser.add_argument("--output", default=None, help="write to this file instead of stdout")

    def handle(self, *args, **opts):
        from gpuplatform import services
        from clusterspec.importers.topology import EXPORTERS

        spec = services.topology_from_db()
        try:
            text = EXPORTERS[opts["format"]](spec)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if opts["output"]:
            with open(opts["output"], "w", encoding="utf-8") as fh:
                fh.write(text)
            self.stdout.write(f"wrote {len(spec.domains)} domains to {opts['output']}")
        else:
            self.stdout.write(text, ending="")
