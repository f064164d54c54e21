"""Import a network topology file into the domain tree.

    python manage.py import_topology data/topology/volcano/hypernodes_tree_s0-s6.yaml --format hypernode --dry-run
    python manage.py import_topology fabric.out --format ibnetdiscover --nodes-from-db

Formats: clusterspec.importers.topology.FORMATS (slurm-conf, slurm-yaml, hypernode, kueue, k8s-labels,
ibnetdiscover, topograph). --dry-run prints the tree (indented, tier and node count per domain) and what
would change in the database (domains to create / re-tier / move / delete, nodes to re-attach, unknown
nodes) and writes nothing. Without it the tree is applied through services.apply_topology in one
transaction. A malformed or inconsistent file is refused with its line and reason; nothing is written.
"""
from __future__ import annotations

from django.core.management.base import CommandError

from ... import job_rules
from .. import options
from ..base import DatabaseCommand


class Command(DatabaseCommand):
    help = "Import a topology file (Slurm, Volcano HyperNode, Kueue, k8s labels, ibnetdiscover) into the domain tree."

    def add_arguments(self, parser):
        from clusterspec.importers.topology import FORMATS

        parser.add_argument("file")
        parser.add_argument("--format", required=True, choices=sorted(FORMATS))
        parser.add_argument("--dry-run", action="store_true", help="show the tree and the changes; write nothing")
        parser.add_argument("--nodes-from-db", action="store_true",
                            help="check node names against the database and use their labels (regex/label selectors, kueue)")
        parser.add_argument("--nodes", default=None, help="a kubectl node list (YAML/JSON) giving node names and labels")
        parser.add_argument("--topology", default=None, help="slurm-yaml: topology name; kueue: Topology name")
        parser.add_argument("--lowest-tier", type=options.integer(1, job_rules.MAX_TIER), default=None, help="kueue / k8s-labels: tier of the lowest unknown level")
        parser.add_argument("--delete-missing", action="store_true", help="delete domains the file does not have")
        parser.add_argument("--skip-unknown-nodes", action="store_true",
                            help="apply even if the file names nodes the database does not have (they are ignored)")

    def handle(self, *args, **opts):
        from gpuplatform import services
        from clusterspec.importers.errors import ImportFormatError
        from clusterspec.importers.topology import parse_topology_file, read_node_list
        from gpuplatform.models import Node
        from gpuplatform.services import ValidationError

        inventory = None
        if opts["nodes"]:
            try:
                with open(opts["nodes"], encoding="utf-8") as fh:
                    inventory, _ = read_node_list(fh.read(), file=opts["nodes"])
            except (OSError, ImportFormatError) as exc:
                raise CommandError(str(exc)) from exc
        if opts["nodes_from_db"]:
            db = dict(Node.objects.values_list("name", "labels"))
            inventory = {**db, **{k: v for k, v in (inventory or {}).items() if k in db}} if inventory else db
        fmt, extra = opts["format"], {}
        if opts["topology"]:
            extra["topology" if fmt == "slurm-yaml" else "name"] = opts["topology"]
        if opts["lowest_tier"] is not None:
            extra["lowest_tier"] = opts["lowest_tier"]
        try:
            spec = parse_topology_file(opts["file"], fmt, inventory=inventory, **extra)
        except ImportFormatError as exc:
            raise CommandError(f"refused: {exc}") from exc
        except (OSError, TypeError) as exc:
            raise CommandError(str(exc)) from exc

        tiers = ", ".join(f"tier {t}: {n}" for t, n in spec.tiers().items())
        self.stdout.write(f"{spec.source}: {len(spec.domains)} domains ({tiers}), {len(spec.node_domain)} nodes")
        for note in spec.notes:
            self.stdout.write(f"  note: {note}")
        if opts["dry_run"]:
            self.stdout.write(spec.render())
            plan = services.plan_topology(spec)
            self.stdout.write("changes (dry run, nothing written):")
            for line in plan.lines() or ["no change"]:
                self.stdout.write(f"  {line}")
            return
        try:
            plan = services.apply_topology(spec, delete_missing=opts["delete_missing"],
                                                skip_unknown_nodes=opts["skip_unknown_nodes"])
        except ValidationError as exc:
            raise CommandError(f"refused: {exc}") from exc
        self.stdout.write(f"applied: {len(plan.create)} created, {len(plan.retier)} re-tiered, {len(plan.move)} moved, "
                          f"{len(plan.delete)} deleted, {len(plan.reattach)} nodes re-attached")
