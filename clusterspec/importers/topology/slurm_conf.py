"""Slurm `topology.conf` (tree and block plugins) in, tree form out.

Format: https://slurm.schedmd.com/topology.conf.html. One statement a line, `Key=Value` pairs separated
by blanks, keys case-insensitive, `#` starts a comment.

- tree (topology/tree): `SwitchName=s0 Nodes=dev[0-5]` and `SwitchName=s3 Switches=s[0-2]`
  (optional `LinkSpeed=` ignored). A switch with `Nodes` and no `Switches` is a leaf switch, tier 2
  (`leaf_tier`); a switch above gets 1 + the highest tier of its children.
- block (topology/block): `BlockName=b1 Nodes=node[1-32]` is a tier-1 domain (scale-up / NVLink block);
  `BlockSizes=30,120` lists the base block size then aggregated sizes: each aggregated size S groups
  S / base consecutive blocks (in file order) into one domain of the next tier, named `first..last`.
  Blocks left over at the end (fewer than a full group) stay roots, as Slurm does not aggregate them.
- topology/ring (`RingName=`) is not a tree and is refused.

Extension: a comment `# gpuplatform: leaf_tier=N` sets the tier of leaf switches (written by
`to_slurm_conf` when the tree's lowest domains are not tier 2, so export -> import keeps the tiers).

Raises ImportFormatError (file, line, reason): unknown key, missing value, bad hostlist, a switch or
block declared twice, an undeclared switch in `Switches=`, a switch listed under two parents, a node in
two switches or blocks, a cycle, an unknown node (inventory given), tree and block mixed, ring.
"""
from __future__ import annotations

import re

from .hostlist import compress_hostlist, expand_hostlist
from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_slurm_conf", "to_slurm_conf", "expand_hostlist"]

_TREE_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes"}
_HINT = re.compile(r"#\s*gpuplatform:\s*leaf_tier\s*=\s*(\d+)")


def _pairs(b: TreeBuilder, text: str, line: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in text.split():
        key, eq, value = tok.partition("=")
        if not eq or not value:
            raise b.error(line, f"expected Key=Value, got {tok!r}")
        if key.lower() in out:
            raise b.error(line, f"{key} given twice")
        out[key.lower()] = value
    return out


def _hostlist(b: TreeBuilder, expr: str, line: int, key: str) -> list[str]:
    try:
        return expand_hostlist(expr)
    except ValueError as exc:
        raise b.error(line, str(exc), column=key) from None


def parse_slurm_conf(text: str, *, file: str = "topology.conf", inventory=None,
                     leaf_tier: int | None = None) -> TopologySpec:
    """Parse a tree- or block-form topology.conf. `inventory`: known node names (or name -> labels)."""
    b = TreeBuilder(file, inventory)
    switches: list[tuple[str, list[str], list[str], int]] = []  # name, child switches, nodes, line
    blocks: list[tuple[str, list[str], int]] = []
    sizes: tuple[list[int], int] | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        hint = _HINT.search(raw)
        if hint and leaf_tier is None:
            leaf_tier = int(hint.group(1))
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        kv = _pairs(b, body, lineno)
        if "ringname" in kv:
            raise b.error(lineno, "RingName: the topology/ring plugin describes rings, not a tree; not supported")
        if "switchname" in kv:
            bad = set(kv) - _TREE_KEYS
            if bad:
                raise b.error(lineno, f"unknown key(s) for SwitchName: {', '.join(sorted(bad))}")
            kids = _hostlist(b, kv["switches"], lineno, "Switches") if "switches" in kv else []
            nodes = _hostlist(b, kv["nodes"], lineno, "Nodes") if "nodes" in kv else []
            switches.append((kv["switchname"], kids, nodes, lineno))
        elif "blockname" in kv:
            bad = set(kv) - _BLOCK_KEYS
            if bad:
                raise b.error(lineno, f"unknown key(s) for BlockName: {', '.join(sorted(bad))}")
            blocks.append((kv["blockname"], _hostlist(b, kv.get("nodes", ""), lineno, "Nodes")
                           if "nodes" in kv else [], lineno))
        elif "blocksizes" in kv and len(kv) == 1:
            try:
                sizes = ([int(x) for x in kv["blocksizes"].split(",")], lineno)
            except ValueError:
                raise b.error(lineno, "BlockSizes must be a comma-separated list of integers") from None
        else:
            raise b.error(lineno, f"unknown statement: expected SwitchName=, BlockName= or BlockSizes=, got {body.split()[0]!r}")
        if switches and blocks:
            raise b.error(lineno, "the file mixes SwitchName (tree) and BlockName (block) statements")
    if switches:
        _tree(b, switches, leaf_tier or 2)
    else:
        _blocks(b, blocks, sizes)
    return b.finish(source=f"slurm topology.conf ({'tree' if switches else 'block'})")


def _tree(b: TreeBuilder, switches, leaf_tier: int) -> None:
    kids = {}
    for name, children, nodes, line in switches:
        b.add_domain(name, leaf_tier, None, line)
        kids[name] = (children, line)
        for node in nodes:
            b.attach(node, name, line)
    for name, (children, line) in kids.items():
        for child in children:
            if not b.has_domain(child):
                raise b.error(line, f"switch {name!r}: unknown switch {child!r} in Switches", column="Switches")
            if child == name:
                raise b.error(line, f"cycle in the domain tree: {name} -> {name}")
            b.set_parent(child, name, line)
    tiers: dict[str, int] = {}

    def tier(name: str, path: tuple) -> int:
        if name in path:
            raise b.error(kids[name][1], "cycle in the domain tree: " + " -> ".join(path[path.index(name):] + (name,)))
        if name not in tiers:
            children = kids[name][0]
            tiers[name] = leaf_tier if not children else 1 + max(tier(c, path + (name,)) for c in children)
        return tiers[name]

    for name in kids:
        b.set_tier(name, tier(name, ()))


def _blocks(b: TreeBuilder, blocks, sizes) -> None:
    for name, nodes, line in blocks:
        b.add_domain(name, 1, None, line)
        for node in nodes:
            b.attach(node, name, line)
    if not sizes or len(sizes[0]) < 2:
        return
    values, line = sizes
    base = values[0]
    if base <= 0 or any(s % base or s <= base for s in values[1:]):
        raise b.error(line, f"BlockSizes {values}: each aggregated size must be a multiple of the base size {base}")
    prev = [name for name, _, _ in blocks]
    for tier, size in enumerate(values[1:], start=2):
        per = size // values[tier - 2]
        groups = [prev[i:i + per] for i in range(0, len(prev) - per + 1, per)]
        for group in groups:
            agg = _agg_name(group)
            b.add_domain(agg, tier, None, line)
            for member in group:
                b.set_parent(member, agg, line)
        b.notes.append(f"BlockSizes {size}: {len(groups)} aggregated block(s) of {per} at tier {tier}")
        prev = [_agg_name(g) for g in groups]


def _agg_name(group: list[str]) -> str:
    """Name of an aggregate of consecutive blocks: first..last block (b1, b2..b3 -> b1..b3)."""
    return f"{group[0].split('..')[0]}..{group[-1].split('..')[-1]}"


def to_slurm_conf(spec: TopologySpec) -> str:
    """Tree-form topology.conf: one `SwitchName=` line per domain, children first. Raises ValueError when
    a domain or node name cannot be written in a hostlist."""
    lowest = min((d.tier for d in spec.domains if not spec.children(d.name)), default=2)
    lines = ["# Network topology for the Slurm topology/tree plugin, exported by gpuplatform."]
    if lowest != 2:
        lines.append(f"# gpuplatform: leaf_tier={lowest}")
    for d in sorted(spec.domains, key=lambda d: (d.tier, d.name)):
        parts = [f"SwitchName={d.name}"]
        kids = [c.name for c in spec.children(d.name)]
        if kids:
            parts.append(f"Switches={compress_hostlist(kids)}")
        nodes = spec.direct_nodes(d.name)
        if nodes:
            parts.append(f"Nodes={compress_hostlist(nodes)}")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"
