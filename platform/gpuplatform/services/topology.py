"""The domain tree (models/cluster.py Domain) from a topology file: plan what would change, apply it all or
nothing, read it back for the exporters.

- `plan_topology(spec)` (read only) -> `TopologyPlan`: what `apply_topology` would change.
- `apply_topology(spec, ...)`: create / re-tier / move domains, re-attach existing nodes, optionally
  delete domains the tree no longer has; all or nothing.
- `topology_from_db()`: the database's tree as a TopologySpec.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from ..audit import record_event
from ..errors import ValidationError
from ..models import Domain, Node

__all__ = ["TopologyPlan", "plan_topology", "apply_topology", "topology_from_db"]


@dataclass
class TopologyPlan:
    """Differences between a TopologySpec and the database. Names only; nothing is locked."""

    create: list[tuple[str, int, str | None]] = field(default_factory=list)  # name, tier, parent
    retier: list[tuple[str, int, int]] = field(default_factory=list)  # name, old tier, new tier
    move: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # name, old, new parent
    delete: list[str] = field(default_factory=list)  # DB domains the tree does not have
    reattach: list[tuple[str, str | None, str]] = field(default_factory=list)  # node, old, new domain
    unknown_nodes: list[str] = field(default_factory=list)  # in the tree, not in the database
    unplaced_nodes: list[str] = field(default_factory=list)  # in the database, not in the tree

    @property
    def empty(self) -> bool:
        return not (self.create or self.retier or self.move or self.delete or self.reattach)

    def lines(self) -> list[str]:
        out = [f"create domain {n} (tier {t}, parent {p or '-'})" for n, t, p in self.create]
        out += [f"re-tier domain {n}: {a} -> {b}" for n, a, b in self.retier]
        out += [f"move domain {n}: parent {a or '-'} -> {b or '-'}" for n, a, b in self.move]
        out += [f"delete domain {n} (not in the tree)" for n in self.delete]
        out += [f"re-attach node {n}: {a or '-'} -> {b}" for n, a, b in self.reattach]
        out += [f"unknown node {n} (not in the database)" for n in self.unknown_nodes]
        if self.unplaced_nodes:
            out.append(f"{len(self.unplaced_nodes)} node(s) in the database but not in the tree: "
                       + ", ".join(self.unplaced_nodes[:10]) + (" ..." if len(self.unplaced_nodes) > 10 else ""))
        return out


def plan_topology(spec) -> TopologyPlan:
    """Compare `spec` (a TopologySpec) with the database."""
    plan = TopologyPlan()
    db = {d.name: (d.tier, d.parent.name if d.parent_id else None) for d in Domain.objects.select_related("parent")}
    for d in spec.domains:
        if d.name not in db:
            plan.create.append((d.name, d.tier, d.parent))
            continue
        tier, parent = db[d.name]
        if tier != d.tier:
            plan.retier.append((d.name, tier, d.tier))
        if parent != d.parent:
            plan.move.append((d.name, parent, d.parent))
    wanted = {d.name for d in spec.domains}
    plan.delete = sorted(n for n in db if n not in wanted)
    nodes = dict(Node.objects.values_list("name", "domain__name"))
    for node, dom in sorted(spec.node_domain.items()):
        if node not in nodes:
            plan.unknown_nodes.append(node)
        elif nodes[node] != dom:
            plan.reattach.append((node, nodes[node], dom))
    plan.unplaced_nodes = sorted(n for n in nodes if n not in spec.node_domain)
    return plan


@transaction.atomic
def apply_topology(spec, *, actor=None, delete_missing: bool = False, skip_unknown_nodes: bool = False) -> TopologyPlan:
    """Make the database's domain tree match `spec`; returns the plan that was applied.

    Nodes the spec does not mention keep their domain unless it is deleted (then they have none).
    Raises ValidationError: unknown nodes ("nodes", unless skip_unknown_nodes), domains to delete that
    hold nodes the spec does not move ("domains"). Nothing is stored when it raises.
    """
    plan = plan_topology(spec)
    if plan.unknown_nodes and not skip_unknown_nodes:
        raise ValidationError({"nodes": f"{len(plan.unknown_nodes)} node(s) not in the database: "
                                        + ", ".join(plan.unknown_nodes[:10])})
    by_name = {d.name: d for d in spec.domains}
    Domain.objects.bulk_create([Domain(name=n, tier=t) for n, t, _ in plan.create])
    ids = dict(Domain.objects.values_list("name", "id"))
    for d in spec.domains:  # set tier and parent of every domain of the tree (cheap, keeps it exact)
        Domain.objects.filter(pk=ids[d.name]).update(tier=d.tier, parent_id=ids.get(d.parent) if d.parent else None)
    for node, old, new in plan.reattach:
        Node.objects.filter(name=node).update(domain_id=ids[new])
    if delete_missing and plan.delete:
        doomed = Domain.objects.filter(name__in=plan.delete)
        Node.objects.filter(domain__in=doomed).update(domain=None)
        Domain.objects.filter(parent__in=doomed).exclude(name__in=plan.delete).update(parent=None)
        doomed.update(parent=None)
        doomed.delete()
    elif plan.delete:
        plan.delete = []  # kept: report nothing deleted
    counts = {"created": len(plan.create), "retiered": len(plan.retier), "moved": len(plan.move),
              "deleted": len(plan.delete), "reattached": len(plan.reattach), "unknown_nodes": len(plan.unknown_nodes)}
    record_event("topology_applied", f"topology from {spec.source or 'import'}: " +
                 ", ".join(f"{v} {k}" for k, v in counts.items()), actor=actor,
                 data={**counts, "domains": len(by_name), "nodes": len(spec.node_domain)})
    return plan


def topology_from_db():
    """The database's domain tree as a TopologySpec (read only), for the exporters."""
    from clusterspec.importers.topology import TopologySpec
    from clusterspec.spec import DomainSpec

    doms = sorted(((d.name, d.tier, d.parent.name if d.parent_id else None)
                   for d in Domain.objects.select_related("parent")), key=lambda t: (-t[1], t[0]))
    nodes = dict(Node.objects.filter(domain__isnull=False).values_list("name", "domain__name"))
    return TopologySpec(tuple(DomainSpec(*t) for t in doms), dict(sorted(nodes.items())), (), "database")
