"""NVIDIA topograph cluster model (test model YAML) -> a domain tree.

Format: NVIDIA/topograph `tests/models/*.yaml` (Apache-2.0; copies in data/topology/topograph/models/):
`switches: {NAME: {switches: [child switch names], labels: {...}}}` and
`blocks: [{switch: LEAF, nodes: [hostlist, ...], annotations: {<prefix>/domain: NVL, <prefix>/sub-domain: ...}}]`.

Tiers: a block's switch is a leaf (tier 2) holding the block's nodes; a switch above gets 1 + its highest
child's tier. The block's accelerator `.../domain` annotation becomes a tier-1 NVLink domain under the leaf
when every such domain lies within a single leaf; models whose NVLink domains span several leaves (the
`dual-xclr` cross-rack models) cannot nest them in the switch tree, so their tier-1 level is left out with
a note (the leaves are then the lowest domains).

Raises ImportFormatError (file, line, reason): no `switches`/`blocks`, a block without a switch, a bad
hostlist, a switch under two parents, a node in two blocks, a cycle.
"""
from __future__ import annotations

from ._yaml import line_of, load_all
from .hostlist import expand_hostlist
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_topograph_model"]


def parse_topograph_model(text: str, *, file: str = "model.yaml", inventory=None) -> TopologySpec:
    b = TreeBuilder(file, inventory)
    docs = load_all(text, b)
    model = docs[0] if docs else None
    if not isinstance(model, dict) or "blocks" not in model:
        raise b.error(1, "expected a mapping with 'switches' and 'blocks'")
    switches = model.get("switches") or {}
    blocks = model.get("blocks") or []
    leaf_nodes: dict[str, list[tuple[str, int | None]]] = {}
    nvl: dict[str, set[str]] = {}
    block_nvl: list[tuple[str, str | None, list[str], int | None]] = []
    for blk in blocks:
        line = line_of(blk)
        leaf = (blk or {}).get("switch")
        if not leaf:
            raise b.error(line, "block without 'switch'")
        names = []
        for expr in blk.get("nodes") or []:
            try:
                names.extend(expand_hostlist(str(expr)))
            except ValueError as exc:
                raise b.error(line, str(exc), column="nodes") from None
        domain = next((v for k, v in (blk.get("annotations") or {}).items() if k.endswith("/domain")), None)
        block_nvl.append((str(leaf), domain and str(domain), names, line))
        if domain:
            nvl.setdefault(str(domain), set()).add(str(leaf))
    kids = {str(k): [str(c) for c in (v or {}).get("switches") or []] for k, v in switches.items()}
    leaves = {leaf for leaf, _, _, _ in block_nvl}
    nvl_ok = bool(nvl) and all(len(v) == 1 for v in nvl.values()) and not (set(nvl) & (set(kids) | leaves))
    if nvl and not nvl_ok:
        b.notes.append("NVLink domains span several leaves (or clash with switch names): tier 1 left out")
    tiers: dict[str, int] = {}

    def tier(name: str, path: tuple) -> int:
        if name in path:
            raise b.error(line_of(switches), "cycle in the domain tree: " + " -> ".join(path + (name,)))
        if name not in tiers:
            children = kids.get(name, [])
            tiers[name] = 2 if not children else 1 + max(tier(c, path + (name,)) for c in children)
        return tiers[name]

    listed = {c for cs in kids.values() for c in cs}  # child switches without a block are empty leaves
    for name in sorted(set(kids) | leaves | listed):
        if not b.has_domain(name):
            b.add_domain(name, tier(name, ()), None, line_of(switches.get(name), line_of(switches)))
    for name, children in kids.items():
        for child in children:
            b.set_parent(child, name, line_of(switches.get(name)))
    for leaf, domain, names, line in block_nvl:
        target = leaf
        if nvl_ok and domain:
            if not b.has_domain(domain):
                b.add_domain(domain, 1, leaf, line)
            target = domain
        for node in names:
            b.attach(node, target, line)
    return b.finish(source="topograph model")
