"""Load a `clusterspec.spec.ClusterSpec` (from an importer) into the database in one transaction.

Domains, nodes and GPUs are bulk-inserted; teams, queues and quotas go through the queue services so the
quota rules hold. Re-exported as `services.load_cluster_spec`.
"""
from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from .models import Domain, Gpu, Node, Queue, Team
from .names import name_error


@transaction.atomic
def load_cluster_spec(spec, *, actor=None) -> dict:
    """Create the spec's domains (existing names are reused), nodes with their GPUs (NUMA from
    `gpu_numa`), teams named by queues, and queues with quotas (parents first).

    Returns counts {"domains", "nodes", "gpus", "teams", "queues"}. Raises services.ValidationError:
    a node name already exists ("nodes"), a node name that breaks the name rule ("nodes[i].name", names.py), a node's or domain's unknown domain ("nodes[i].domain",
    "domains[i].parent"), bad gpu_numa length, or any create_queue rule ("queues[<name>].<field>").
    Nothing is stored when it raises.
    """
    from . import services
    from .audit import record_event
    from .services.tenancy import team_named
    from .errors import ValidationError

    names = [n.name for n in spec.nodes]
    taken = list(Node.objects.filter(name__in=names).values_list("name", flat=True)[:5])
    errors: dict[str, str] = {}
    if taken:
        errors["nodes"] = f"node(s) already exist: {', '.join(taken)}; the cluster is loaded already"
    if len(set(names)) != len(names):
        errors["nodes"] = "duplicate node names in the spec"
    known = set(Domain.objects.values_list("name", flat=True)) | {d.name for d in spec.domains}
    for i, d in enumerate(spec.domains):
        if d.parent is not None and d.parent not in known:
            errors[f"domains[{i}].parent"] = f"unknown domain {d.parent!r}"
    for i, n in enumerate(spec.nodes):
        if message := name_error("node", n.name):  # the one name rule (names.py): every per-node URL can name it
            errors[f"nodes[{i}].name"] = message
        if n.domain is not None and n.domain not in known:
            errors[f"nodes[{i}].domain"] = f"unknown domain {n.domain!r}"
        if n.gpu_numa and len(n.gpu_numa) != n.gpus:
            errors[f"nodes[{i}].gpu_numa"] = f"{len(n.gpu_numa)} NUMA entries for {n.gpus} GPUs"
    if errors:
        raise ValidationError(errors)

    # Domains: parents have higher tiers, so insert tier by tier from the top.
    ids = dict(Domain.objects.values_list("name", "id"))
    new_domains = [d for d in spec.domains if d.name not in ids]
    for tier in sorted({d.tier for d in new_domains}, reverse=True):
        layer = [d for d in new_domains if d.tier == tier]
        Domain.objects.bulk_create([Domain(name=d.name, tier=d.tier, parent_id=ids.get(d.parent)) for d in layer])
        ids.update(Domain.objects.filter(name__in=[d.name for d in layer]).values_list("name", "id"))

    Node.objects.bulk_create([
        Node(name=n.name, flavor=n.flavor, gpu_count=n.gpus, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib,
             domain_id=ids.get(n.domain), labels=dict(n.labels)) for n in spec.nodes], batch_size=1000)
    node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
    Gpu.objects.bulk_create([
        Gpu(node_id=node_ids[n.name], index=i, numa_node=(n.gpu_numa[i] if n.gpu_numa else None),
            sharing=n.gpu_sharing)
        for n in spec.nodes for i in range(n.gpus)], batch_size=2000)

    # a queue's team is the team its name means by the team name rule (services.tenancy.team_named: `ML-Team` in
    # the file and a team `ml_team` are one team), created when there is none
    teams: dict[str, int] = {}
    new_teams = 0
    for q in spec.queues:
        if q.team and q.team not in teams:
            found = team_named(q.team)
            if found is None:
                found = services.create_team(q.team, slug=_free_slug(q.team), actor=actor)
                new_teams += 1
            teams[q.team] = found.pk
    queues = 0
    for q in _parents_first(spec.queues):
        if Queue.objects.filter(name=q.name).exists():
            continue
        try:
            services.create_queue(q.name, parent=q.parent, team=Team.objects.get(pk=teams[q.team]) if q.team else None,
                                  weight=q.weight, quotas=dict(q.quotas), actor=actor)
        except ValidationError as exc:
            raise ValidationError({f"queues[{q.name}].{k}": v for k, v in exc.errors.items()}) from None
        queues += 1
    counts = {"domains": len(new_domains), "nodes": len(spec.nodes), "gpus": sum(n.gpus for n in spec.nodes),
              "teams": new_teams, "queues": queues}
    record_event("cluster_loaded", f"cluster {spec.name} loaded: {counts['nodes']} nodes, {counts['gpus']} GPUs",
                 actor=actor, data={"cluster": spec.name, **counts, "notes": list(spec.notes)})
    return counts


def _free_slug(name: str) -> str:
    base = slugify(name) or "team"
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def _parents_first(queues) -> list:
    by_name = {q.name: q for q in queues}
    done: set[str] = set()
    out: list = []

    def visit(q, path=()):
        if q.name in done or q.name in path:
            return
        if q.parent in by_name:
            visit(by_name[q.parent], path + (q.name,))
        done.add(q.name)
        out.append(q)

    for q in queues:
        visit(q)
    return out
