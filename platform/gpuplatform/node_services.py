"""Writes for the cluster's shape and its nodes' reports: topology trees, node registration, heartbeats.

Same style as services.py (plain functions, one transaction each, `ValidationError` raised before any
write, an `Event` row per change). Units: GPUs, millicores, MiB, seconds.

- `plan_topology(spec)` (read only) -> `TopologyPlan`: what `apply_topology` would change.
- `apply_topology(spec, ...)`: create / re-tier / move domains, re-attach existing nodes, optionally
  delete domains the tree no longer has; all or nothing.
- `register_node(...)`: create or update a node and its GPUs from an agent's inventory.
- `record_heartbeat(...)`: the node's last heartbeat and each GPU's health. Heartbeats arrive every few
  seconds, so an Event is written only when something changed (a GPU's health, a not_ready node back).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from . import clock
from .audit import record_event
from .errors import ValidationError
from .models import Domain, Gpu, Node

__all__ = ["TopologyPlan", "plan_topology", "apply_topology", "register_node", "record_heartbeat", "topology_from_db"]


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


def _check_gpus(gpus: list[dict]) -> dict[str, str]:
    errors = {}
    seen = set()
    for i, g in enumerate(gpus):
        idx = g.get("index")
        if not isinstance(idx, int) or idx < 0 or idx in seen:
            errors[f"gpus[{i}].index"] = "index must be a distinct integer >= 0"
        seen.add(idx)
        if g.get("health", "healthy") not in Gpu.Health.values:
            errors[f"gpus[{i}].health"] = f"health must be one of {Gpu.Health.values}"
    return errors


@transaction.atomic
def register_node(name: str, *, flavor: str, gpus: list[dict], cpu_milli: int = 0, memory_mib: int = 0,
                  labels: dict | None = None, actor=None, executor: str | None = None, address: str | None = None,
                  runtime: str | None = None) -> Node:
    """Create or update node `name` and its GPUs. `gpus`: [{index, uuid, numa_node, health, health_reason}].
    GPUs the node no longer reports are removed. The domain and state of an existing node are kept.
    `executor` ("agent" when a node agent registers; None keeps the node's), `address` (where other
    nodes reach it: MASTER_ADDR), `runtime` (its agent's container runtime: docker, podman or "").
    Raises ValidationError: empty name or flavor, negative cpu/memory, bad GPU index or health, unknown
    executor or runtime."""
    errors = {}
    if not name or not name.strip():
        errors["name"] = "name must not be empty"
    if not flavor:
        errors["flavor"] = "flavor (GPU model) must not be empty"
    if not isinstance(cpu_milli, int) or cpu_milli < 0:
        errors["cpu_milli"] = "cpu_milli must be an integer >= 0"
    if not isinstance(memory_mib, int) or memory_mib < 0:
        errors["memory_mib"] = "memory_mib must be an integer >= 0"
    errors.update(_check_gpus(gpus))
    if executor is not None and executor not in Node.Executor.values:
        errors["executor"] = f"executor must be one of {Node.Executor.values}"
    if runtime not in (None, "", "docker", "podman"):
        errors["runtime"] = "runtime must be docker, podman or empty"
    if address is not None and (not isinstance(address, str) or len(address) > 200):
        errors["address"] = "address must be a host name or IP address of at most 200 characters"
    if errors:
        raise ValidationError(errors)
    now = clock.now()
    node, created = Node.objects.get_or_create(name=name, defaults={"flavor": flavor, "gpu_count": len(gpus)})
    merged = {**(node.labels or {}), **(labels or {})}
    extra = {k: v for k, v in (("executor", executor), ("address", address), ("container_runtime", runtime))
             if v is not None}
    Node.objects.filter(pk=node.pk).update(flavor=flavor, gpu_count=len(gpus), cpu_milli=cpu_milli,
                                           memory_mib=memory_mib, labels=merged, last_heartbeat=now, **extra)
    Gpu.objects.filter(node=node).exclude(index__in=[g["index"] for g in gpus]).delete()
    for g in gpus:
        Gpu.objects.update_or_create(node=node, index=g["index"], defaults={
            "uuid": g.get("uuid") or "", "numa_node": g.get("numa_node"),
            "health": g.get("health", "healthy"), "health_reason": (g.get("health_reason") or "")[:200]})
    node.refresh_from_db()
    record_event("node_registered", f"{name} {'registered' if created else 're-registered'}: {len(gpus)} x {flavor}",
                 actor=actor, node=node, data={"gpus": len(gpus), "flavor": flavor, "created": created})
    return node


@transaction.atomic
def record_heartbeat(name: str, *, gpus: list[dict], at: datetime | None = None, node_time: datetime | None = None,
                     actor=None) -> Node:
    """Store a heartbeat: last_heartbeat = `at`, the time the SERVER received it (default: the cluster
    clock; never the node's own clock, which drifts) and each reported GPU's health ({index, health,
    health_reason}). `node_time`, the time the node put in it, is kept only as the node's clock offset
    (Node.clock_offset_seconds). A not_ready node becomes ready again. Raises ValidationError: unknown
    node ("name": register first), bad GPU entries, a GPU index the node does not have."""
    node = Node.objects.select_for_update().filter(name=name).first()
    if node is None:
        raise ValidationError({"name": f"unknown node {name!r}: register it first"})
    errors = _check_gpus(gpus)
    have = {g.index: g for g in Gpu.objects.filter(node=node)}
    for i, g in enumerate(gpus):
        if isinstance(g.get("index"), int) and g["index"] not in have:
            errors[f"gpus[{i}].index"] = f"node {name} has no GPU {g['index']}"
    if errors:
        raise ValidationError(errors)
    changes = []
    for g in gpus:
        row = have[g["index"]]
        health, reason = g.get("health", "healthy"), (g.get("health_reason") or "")[:200]
        if (row.health, row.health_reason) != (health, reason):
            changes.append({"index": row.index, "from": row.health, "to": health, "reason": reason})
            Gpu.objects.filter(pk=row.pk).update(health=health, health_reason=reason)
    at = at or clock.now()
    update = {"last_heartbeat": at,
              "clock_offset_seconds": round((node_time - at).total_seconds(), 3) if node_time is not None else None}
    back = node.state == Node.State.NOT_READY
    if back:  # the state it had before it went silent (scheduling/failures.py keeps it): a cordoned node stays cordoned
        update["state"] = node.resume_state or Node.State.READY
        update["resume_state"] = ""
    Node.objects.filter(pk=node.pk).update(**update)
    if changes:
        record_event("gpu_health", f"{name}: " + "; ".join(f"gpu{c['index']} {c['from']} -> {c['to']}"
                                                         + (f" ({c['reason']})" if c["reason"] else "") for c in changes),
                     actor=actor, node=node, data={"changes": changes}, time=at)
    if back:
        record_event("node_ready", f"{name}: not_ready -> {update['state']} (heartbeat)", actor=actor, node=node,
                     data={"from": "not_ready", "to": update["state"]}, time=at)
    node.refresh_from_db()
    return node


def topology_from_db():
    """The database's domain tree as a TopologySpec (read only), for the exporters."""
    from clusterspec.importers.topology import TopologySpec
    from clusterspec.spec import DomainSpec

    doms = sorted(((d.name, d.tier, d.parent.name if d.parent_id else None)
                   for d in Domain.objects.select_related("parent")), key=lambda t: (-t[1], t[0]))
    nodes = dict(Node.objects.filter(domain__isnull=False).values_list("name", "domain__name"))
    return TopologySpec(tuple(DomainSpec(*t) for t in doms), dict(sorted(nodes.items())), (), "database")
