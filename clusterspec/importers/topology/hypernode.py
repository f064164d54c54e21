"""Volcano HyperNode custom resources (`topology.volcano.sh/v1alpha1`, kind HyperNode) in and out.

Format: https://volcano.sh/en/docs/network_topology_aware_scheduling/ and the CRD in
volcano-sh/apis `pkg/apis/topology/v1alpha1/hypernode_types.go`. One YAML document per HyperNode:
`metadata.name`, `spec.tier` (integer, 1 = lowest; kept as our tier), `spec.members`: a list of
`{type: Node | HyperNode, selector: {exactMatch: {name}} | {regexMatch: {pattern}} |
{labelMatch: {matchLabels: {k: v}}}}`. HyperNode members name child HyperNodes (exactMatch only); Node
members name nodes. regexMatch (Go-style unanchored search) and labelMatch resolve against the node
inventory given as `inventory={name: labels}` (or a list of names for regex only). Documents of other
kinds are skipped with a note.

Raises ImportFormatError (file, line, reason): a HyperNode without name or integer tier, a member
without a known type or selector, regex/label selectors without an inventory, a bad regex, a child
HyperNode that is not declared, a HyperNode or node with two parents, a cycle, a child whose tier is not
below its parent's, an unknown node (inventory given), a duplicate HyperNode name.
"""
from __future__ import annotations

import re

import yaml

from ._yaml import line_of, load_all
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_hypernode", "to_hypernode_yaml"]

API_VERSION = "topology.volcano.sh/v1alpha1"


def _node_members(b: TreeBuilder, sel: dict, line: int | None) -> list[str]:
    if "exactMatch" in sel:
        name = (sel["exactMatch"] or {}).get("name")
        if not name:
            raise b.error(line, "exactMatch needs a name")
        return [str(name)]
    if b.inventory is None:
        raise b.error(line, f"{'/'.join(sel)} selects nodes by pattern or label: a node inventory is needed "
                            "(e.g. --nodes-from-db)")
    if "regexMatch" in sel:
        pattern = (sel["regexMatch"] or {}).get("pattern")
        try:
            rx = re.compile(str(pattern))
        except re.error as exc:
            raise b.error(line, f"bad regexMatch pattern {pattern!r}: {exc}") from None
        return sorted(n for n in b.inventory if rx.search(n))
    if "labelMatch" in sel:
        want = (sel["labelMatch"] or {}).get("matchLabels") or {}
        if not want:
            raise b.error(line, "labelMatch needs matchLabels")
        return sorted(n for n, labels in b.inventory.items()
                      if all(str(labels.get(k)) == str(v) for k, v in want.items()))
    raise b.error(line, f"unknown selector {sorted(sel)}: expected exactMatch, regexMatch or labelMatch")


def parse_hypernode(text: str, *, file: str = "hypernodes.yaml", inventory=None) -> TopologySpec:
    """Parse a multi-document YAML of HyperNodes into a tree."""
    b = TreeBuilder(file, inventory)
    children: list[tuple[str, str, int | None]] = []  # parent, child, line
    skipped = 0
    for doc in load_all(text, b):
        if not isinstance(doc, dict) or doc.get("kind") != "HyperNode":
            skipped += 1
            continue
        line = line_of(doc)
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        name = meta.get("name")
        if not name:
            raise b.error(line, "HyperNode without metadata.name")
        tier = spec.get("tier")
        if isinstance(tier, str) and tier.isdigit():
            tier = int(tier)
        if not isinstance(tier, int) or isinstance(tier, bool):
            raise b.error(line_of(spec, line), f"HyperNode {name!r}: spec.tier must be an integer, got {tier!r}")
        b.add_domain(str(name), tier, None, line_of(meta, line))
        for m in spec.get("members") or []:
            ml = line_of(m, line)
            sel = (m or {}).get("selector") or {}
            kind = (m or {}).get("type")
            if kind == "HyperNode":
                if "exactMatch" not in sel:
                    raise b.error(ml, "a HyperNode member must use exactMatch")
                children.append((str(name), _node_members(b, sel, ml)[0], ml))
            elif kind == "Node":
                for node in _node_members(b, sel, ml):
                    b.attach(node, str(name), ml)
            else:
                raise b.error(ml, f"member type must be Node or HyperNode, got {kind!r}")
    for parent, child, ml in children:
        if not b.has_domain(child):
            raise b.error(ml, f"HyperNode {parent!r}: member HyperNode {child!r} is not declared")
        if child == parent:
            raise b.error(ml, f"cycle in the domain tree: {parent} -> {parent}")
        b.set_parent(child, parent, ml)
    if skipped:
        b.notes.append(f"{skipped} document(s) of other kinds skipped")
    return b.finish(source="volcano HyperNode")


def to_hypernode_yaml(spec: TopologySpec) -> str:
    """One HyperNode document per domain (tier ascending): child HyperNodes then nodes, by exactMatch."""
    docs = []
    for d in sorted(spec.domains, key=lambda d: (d.tier, d.name)):
        members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": c.name}}} for c in spec.children(d.name)]
        members += [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in spec.direct_nodes(d.name)]
        docs.append({"apiVersion": API_VERSION, "kind": "HyperNode", "metadata": {"name": d.name},
                     "spec": {"tier": d.tier, "members": members}})
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
