"""Kueue Topology (topology-aware scheduling) + node labels -> a domain tree.

Format: https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/ ; example
kubernetes-sigs/kueue `site/static/examples/tas/sample-gpu-queues.yaml` (data/topology/kueue/). A
`kind: Topology` document (`kueue.x-k8s.io/v1beta1` or v1alpha1) lists `spec.levels[].nodeLabel` from the
broadest level down; `kubernetes.io/hostname` as the last level is the node itself. Other documents
(ResourceFlavor, ClusterQueue, ...) are skipped. The Topology only names the levels: the tree comes from
the nodes' labels, given as `inventory={name: labels}` (e.g. `--nodes FILE` or `--nodes-from-db`).

Tiers: known label keys keep theirs (k8s_labels.KNOWN_TIERS); other levels are numbered up from
`lowest_tier` (default 2: a rack / ToR level; pass 1 when the lowest level is an NVLink domain). As in
Kueue, a domain is identified by its values from the top level down (rack r1 of block b1 differs from
rack r1 of block b2; such names are written `b1/r1`), and nodes lacking any level's label are not in the
topology (left out, with a note).

Raises ImportFormatError (file, line, reason): no Topology document, a Topology without levels or with a
level lacking nodeLabel, several Topologies and no `name=`, no inventory with labels.
"""
from __future__ import annotations

from ._yaml import line_of, load_all
from .k8s_labels import assign_tiers, build_label_tree
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_kueue"]


def parse_kueue(text: str, *, file: str = "topology.yaml", inventory=None, name: str | None = None,
                lowest_tier: int = 2) -> TopologySpec:
    b = TreeBuilder(file, inventory)
    tops = [d for d in load_all(text, b) if isinstance(d, dict) and d.get("kind") == "Topology"]
    if name is not None:
        tops = [d for d in tops if (d.get("metadata") or {}).get("name") == name]
    if not tops:
        raise b.error(None, "no Kueue Topology document" + (f" named {name!r}" if name else ""))
    if len(tops) > 1:
        raise b.error(line_of(tops[1]), "several Topology documents: choose one by name")
    top = tops[0]
    levels = (top.get("spec") or {}).get("levels") or []
    if not levels:
        raise b.error(line_of(top), "Topology without spec.levels")
    keys = []
    for lvl in levels:
        if not isinstance(lvl, dict) or not lvl.get("nodeLabel"):
            raise b.error(line_of(lvl, line_of(top)), "each level needs a nodeLabel")
        keys.append(str(lvl["nodeLabel"]))
    if b.inventory is None:
        raise b.error(line_of(top), "a Kueue Topology names label levels only: a node inventory with labels is "
                                    "needed (--nodes FILE or --nodes-from-db)")
    chosen = assign_tiers(b, keys, lowest_tier)
    b.notes.append(f"Topology {(top.get('metadata') or {}).get('name')!r}: "
                   + ", ".join(f"{k} -> tier {t}" for k, t in chosen))
    build_label_tree(b, b.inventory, {}, chosen, by_path=True)
    return b.finish(source="kueue Topology")
