"""Kubernetes node labels -> a domain tree (GPU Feature Discovery clique, network-topology labels).

Input: a node list as `kubectl get nodes -o yaml|json` prints it (`kind: NodeList` or `List` with
`items`, or one `kind: Node` per document): `metadata.name` and `metadata.labels`. Label keys and
meaning: data/topology/k8s-node-labels/gpu_topology_node_labels.csv (from the NVIDIA k8s-device-plugin
GPU Feature Discovery docs, NVIDIA topograph docs/reference/node-labels.md, Volcano and Kueue docs).

Tiers of the known keys (`KNOWN_TIERS`): tier 1 (NVLink / scale-up): `nvidia.com/gpu.clique`
(ClusterUUID.CliqueID), `accelerator.topograph.run/domain`, `topology.k8s.aws/capacity-block-id`,
`volcano.sh/hypernode`; tier 2 (leaf / ToR / rack): `fabric.topograph.run/tier-0`,
`topology.k8s.aws/network-node-layer-3`, `cloud.google.com/gce-topology-subblock`,
`oci.oraclecloud.com/host.rack_id`, `volcano.sh/tor`; tier 3 (spine / block): `fabric.topograph.run/tier-1`,
`topology.k8s.aws/network-node-layer-2`, `cloud.google.com/gce-topology-block`,
`oci.oraclecloud.com/host.network_block_id`, `volcano.sh/hypercluster`; tier 4: `fabric.topograph.run/tier-2`,
`topology.k8s.aws/network-node-layer-1`. Region, zone and hostname are not network tiers and are not used.
For each tier the first key of its list that any node carries is used. `levels=` (label keys, top first)
replaces the rule; unknown keys then get tiers counted up from `lowest_tier` below the known ones.

A domain is named by its label value (values name one domain across the cluster, as Volcano's label
discovery and GFD cliques do); a node without a level's label skips that level. A domain seen under two
different parents is inconsistent input.

Raises ImportFormatError (file, line, reason): not a node list, a node without a name, two nodes of one
name, a domain under two parents, tiers not increasing upwards, an unknown node (inventory given).
"""
from __future__ import annotations

from ._yaml import line_of, load_all
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_k8s_labels", "read_node_list", "build_label_tree", "levels_from_volcano_config", "KNOWN_TIERS"]

KNOWN_TIERS: dict[int, tuple[str, ...]] = {
    1: ("nvidia.com/gpu.clique", "accelerator.topograph.run/domain", "topology.k8s.aws/capacity-block-id",
        "volcano.sh/hypernode"),
    2: ("fabric.topograph.run/tier-0", "topology.k8s.aws/network-node-layer-3",
        "cloud.google.com/gce-topology-subblock", "oci.oraclecloud.com/host.rack_id", "volcano.sh/tor"),
    3: ("fabric.topograph.run/tier-1", "topology.k8s.aws/network-node-layer-2",
        "cloud.google.com/gce-topology-block", "oci.oraclecloud.com/host.network_block_id", "volcano.sh/hypercluster"),
    4: ("fabric.topograph.run/tier-2", "topology.k8s.aws/network-node-layer-1"),
}
_KEY_TIER = {k: t for t, keys in KNOWN_TIERS.items() for k in keys}
HOSTNAME = "kubernetes.io/hostname"


def read_node_list(text: str, *, file: str = "nodes.yaml") -> tuple[dict[str, dict], dict[str, int]]:
    """Nodes of a kubectl node list -> ({name: labels}, {name: line}). Raises ImportFormatError."""
    b = TreeBuilder(file)
    items: list = []
    for doc in load_all(text, b):
        if isinstance(doc, dict) and doc.get("kind") in ("NodeList", "List"):
            items.extend(doc.get("items") or [])
        elif isinstance(doc, dict) and doc.get("kind") == "Node":
            items.append(doc)
        else:
            raise b.error(line_of(doc), "expected kind NodeList, List or Node")
    labels: dict[str, dict] = {}
    lines: dict[str, int] = {}
    for item in items:
        meta = (item or {}).get("metadata") or {}
        name = meta.get("name")
        line = line_of(meta, line_of(item))
        if not name:
            raise b.error(line, "node without metadata.name")
        if name in labels:
            raise b.error(line, f"node {name!r} listed twice (first on line {lines[name]})")
        labels[str(name)] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        lines[str(name)] = line
    return labels, lines


def assign_tiers(b: TreeBuilder, levels: list[str], lowest_tier: int) -> list[tuple[str, int]]:
    """Label keys (top first) -> [(key, tier)] bottom first; known keys keep their tier."""
    out: list[tuple[str, int]] = []
    prev = None
    for key in reversed([k for k in levels if k != HOSTNAME]):
        tier = _KEY_TIER.get(key) or (prev + 1 if prev else lowest_tier)
        if prev is not None and tier <= prev:
            raise b.error(None, f"level {key!r} (tier {tier}) is not above the level below it (tier {prev})")
        out.append((key, tier))
        prev = tier
    return out


def build_label_tree(b: TreeBuilder, nodes: dict[str, dict], lines: dict[str, int],
                     levels: list[tuple[str, int]], *, by_path: bool = False) -> None:
    """Add domains and attachments for `levels` [(label key, tier)] bottom first. by_path: a domain is
    the tuple of values from the top down to its level (Kueue), else its value alone (Volcano, GFD)."""
    chains: dict[str, list[tuple[tuple, int]]] = {}
    for node, labels in nodes.items():
        present = [(k, t) for k, t in levels if labels.get(k)]
        if by_path and len(present) != len(levels):
            continue
        top_down = list(reversed(present))
        chain = [(tuple((k, labels[k]) for k, _ in top_down[:i + 1]) if by_path else ((k, labels[k]),), t)
                 for i, (k, t) in enumerate(top_down)]
        chains[node] = list(reversed(chain))
    names: dict[tuple, str] = {}
    counts: dict[str, set] = {}
    for chain in chains.values():
        for ident, _ in chain:
            counts.setdefault(ident[-1][1], set()).add(ident)
    for chain in chains.values():
        for ident, _ in chain:
            value = ident[-1][1]
            names[ident] = value if len(counts[value]) == 1 else "/".join(v for _, v in ident)
    skipped = [n for n in nodes if n not in chains or not chains[n]]
    for node in sorted(chains):
        chain, line = chains[node], lines.get(node)
        for i, (ident, tier) in enumerate(chain):
            if not b.has_domain(names[ident]):
                b.add_domain(names[ident], tier, None, line)
            if i + 1 < len(chain):
                b.set_parent(names[ident], names[chain[i + 1][0]], line)
        if chain:
            b.attach(node, names[chain[0][0]], line)
    if skipped:
        b.notes.append(f"{len(skipped)} node(s) without the topology labels left out: {', '.join(sorted(skipped)[:10])}")


def parse_k8s_labels(text: str, *, file: str = "nodes.yaml", inventory=None, levels: list[str] | None = None,
                     lowest_tier: int = 2) -> TopologySpec:
    """Parse a kubectl node list into a tree using the topology labels (see the module doc)."""
    b = TreeBuilder(file, inventory)
    nodes, lines = read_node_list(text, file=file)
    if levels is None:
        carried = {k for labels in nodes.values() for k in labels}
        chosen = [(next(k for k in keys if k in carried), t) for t, keys in sorted(KNOWN_TIERS.items())
                  if any(k in carried for k in keys)]
    else:
        chosen = assign_tiers(b, levels, lowest_tier)
    b.notes.append("levels: " + ", ".join(f"{k} -> tier {t}" for k, t in chosen))
    build_label_tree(b, nodes, lines, chosen)
    return b.finish(source="kubernetes node labels")


def levels_from_volcano_config(text: str, topology_type: str | None = None, *, file: str = "configmap.yaml") -> list[str]:
    """Label keys (top first) of a Volcano HyperNode label-discovery config: the `volcano-controller.conf`
    of the controller ConfigMap, `networkTopologyDiscovery[source=label].config.networkTopologyTypes`.
    `topology_type` picks one (default: the first). Raises ImportFormatError when there is none."""
    b = TreeBuilder(file)
    for doc in load_all(text, b):
        conf = ((doc or {}).get("data") or {}).get("volcano-controller.conf") if isinstance(doc, dict) else None
        if conf is None:
            continue
        for source in (load_all(conf, b) or [{}])[0].get("networkTopologyDiscovery") or []:
            types = ((source or {}).get("config") or {}).get("networkTopologyTypes") if source.get("source") == "label" else None
            if types:
                key = topology_type or next(iter(types))
                if key not in types:
                    raise b.error(line_of(types), f"no networkTopologyType {key!r} (have: {', '.join(types)})")
                return [lvl["nodeLabel"] for lvl in types[key]]
    raise b.error(None, "no label-discovery networkTopologyTypes found")
