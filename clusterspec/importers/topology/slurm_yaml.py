"""Slurm `topology.yaml` (Slurm 25.05+, several named topologies in one file) in.

Format: https://slurm.schedmd.com/topology.yaml.html. A YAML list; each item has `topology: NAME`,
optional `cluster_default: bool`, and exactly one of
- `tree: {switches: [{switch: NAME, children: HOSTLIST, nodes: HOSTLIST}]}` (as topology.conf's tree:
  leaf switches tier 2, parents 1 + highest child tier),
- `block: {block_sizes: [base, aggregated...], blocks: [{block: NAME, nodes: HOSTLIST}]}` (as
  topology.conf's block: blocks tier 1, aggregates above),
- `flat: true` (no domains).
The topology read is `topology=` when given, else the one with `cluster_default: true`, else the first.

Raises ImportFormatError (file, line, reason): not a list, unknown topology name, a topology with no or
several of tree/block/flat, missing switch/block names, bad hostlists, and every tree rule of
slurm_conf (duplicates, unknown switches, a node in two domains, cycles, unknown nodes).
"""
from __future__ import annotations

from . import slurm_conf
from ._yaml import line_of, load_all
from .hostlist import expand_hostlist
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_slurm_yaml"]


def _hosts(b: TreeBuilder, value, line: int | None, key: str) -> list[str]:
    if value is None:
        return []
    try:
        if isinstance(value, list):
            return [n for v in value for n in expand_hostlist(str(v))]
        return expand_hostlist(str(value))
    except ValueError as exc:
        raise b.error(line, str(exc), column=key) from None


def parse_slurm_yaml(text: str, *, file: str = "topology.yaml", inventory=None, topology: str | None = None,
                     leaf_tier: int = 2) -> TopologySpec:
    """Parse one topology of a topology.yaml. `inventory`: known node names (or name -> labels)."""
    b = TreeBuilder(file, inventory)
    docs = load_all(text, b)
    if len(docs) != 1 or not isinstance(docs[0], list) or not docs[0]:
        raise b.error(1, "expected one YAML document holding a non-empty list of topologies")
    items = docs[0]
    for item in items:
        if not isinstance(item, dict) or "topology" not in item:
            raise b.error(line_of(item), "each list item needs a 'topology: NAME' key")
    if topology is not None:
        chosen = [i for i in items if str(i["topology"]) == topology]
        if not chosen:
            names = ", ".join(str(i["topology"]) for i in items)
            raise b.error(None, f"no topology named {topology!r} (have: {names})")
        item = chosen[0]
    else:
        item = next((i for i in items if i.get("cluster_default") is True), items[0])
    kinds = [k for k in ("tree", "block", "flat") if k in item]
    line = line_of(item)
    if len(kinds) != 1:
        raise b.error(line, f"topology {item['topology']!r}: expected exactly one of tree, block, flat; got {kinds}")
    kind = kinds[0]
    b.notes.append(f"topology {item['topology']!r} ({kind}) of {len(items)} in the file")
    if kind == "tree":
        switches = []
        for sw in (item["tree"] or {}).get("switches") or []:
            sl = line_of(sw, line)
            if not isinstance(sw, dict) or not sw.get("switch"):
                raise b.error(sl, "each tree switch needs 'switch: NAME'")
            switches.append((str(sw["switch"]), _hosts(b, sw.get("children"), sl, "children"),
                             _hosts(b, sw.get("nodes"), sl, "nodes"), sl))
        slurm_conf._tree(b, switches, leaf_tier)
    elif kind == "block":
        spec = item["block"] or {}
        blocks = []
        for bl in spec.get("blocks") or []:
            bline = line_of(bl, line)
            if not isinstance(bl, dict) or not bl.get("block"):
                raise b.error(bline, "each block needs 'block: NAME'")
            blocks.append((str(bl["block"]), _hosts(b, bl.get("nodes"), bline, "nodes"), bline))
        sizes = spec.get("block_sizes")
        if sizes is not None:
            try:
                sizes = ([int(s) for s in sizes], line_of(spec, line))
            except (TypeError, ValueError):
                raise b.error(line_of(spec, line), "block_sizes must be a list of integers") from None
        slurm_conf._blocks(b, blocks, sizes)
    elif item["flat"] is not True:
        raise b.error(line, "flat must be true")
    return b.finish(source=f"slurm topology.yaml ({kind})")
