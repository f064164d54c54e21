"""The neutral topology tree every topology importer returns, and the checks every one of them runs.

A `TopologySpec` is a forest of `DomainSpec`s (clusterspec/spec.py: name, tier, parent) plus the map
node name -> the node's lowest domain. Tier convention (DESIGN.md section 4): 1 = NVLink / scale-up
domain, 2 = leaf switch, 3 = spine, higher above. Parsers collect domains and node attachments with the
source line they came from in a `TreeBuilder`; `TreeBuilder.finish()` validates the whole tree and either
returns the spec or raises `ImportFormatError` naming the file, the line and the reason:

- a domain declared twice (duplicate name), a parent that is not declared (unknown parent),
- a cycle in the parent chain, a parent whose tier is not above its child's,
- a node attached to two different domains (e.g. listed under two leaves),
- a node missing from the inventory, when an inventory of known nodes was given.

Nothing is returned on error, so a caller never sees a half-built tree.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from clusterspec.spec import DomainSpec

from ..errors import ImportFormatError

__all__ = ["TopologySpec", "TreeBuilder", "normalize_inventory"]


@dataclass(frozen=True)
class TopologySpec:
    """A domain forest. `domains` parents-first (tier descending, then name); `node_domain` maps each
    node to its lowest domain; `notes` say how the source was read (rules applied, things skipped)."""

    domains: tuple[DomainSpec, ...]
    node_domain: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    source: str = ""

    def domain(self, name: str) -> DomainSpec:
        return self._by_name()[name]

    def _by_name(self) -> dict[str, DomainSpec]:
        return {d.name: d for d in self.domains}

    def children(self, name: str | None) -> list[DomainSpec]:
        """Child domains of `name` (None = the roots), sorted by name."""
        return sorted((d for d in self.domains if d.parent == name), key=lambda d: d.name)

    def direct_nodes(self, name: str) -> list[str]:
        return sorted(n for n, d in self.node_domain.items() if d == name)

    def node_counts(self) -> dict[str, int]:
        """Domain name -> number of nodes anywhere under it."""
        counts: Counter = Counter()
        parents = {d.name: d.parent for d in self.domains}
        for dom in self.node_domain.values():
            while dom is not None:
                counts[dom] += 1
                dom = parents.get(dom)
        return {d.name: counts.get(d.name, 0) for d in self.domains}

    def tiers(self) -> dict[int, int]:
        """Tier -> number of domains of that tier."""
        return dict(sorted(Counter(d.tier for d in self.domains).items()))

    def canonical(self) -> tuple:
        """A comparable form: sorted (name, tier, parent) triples and sorted (node, domain) pairs."""
        return (tuple(sorted((d.name, d.tier, d.parent or "") for d in self.domains)),
                tuple(sorted(self.node_domain.items())))

    def render(self) -> str:
        """The tree, indented two spaces a level: `name (tier T, N nodes)`; unattached domains last."""
        counts = self.node_counts()
        out: list[str] = []

        def walk(d: DomainSpec, depth: int) -> None:
            out.append(f"{'  ' * depth}{d.name} (tier {d.tier}, {counts[d.name]} nodes)")
            for c in self.children(d.name):
                walk(c, depth + 1)

        for root in sorted(self.children(None), key=lambda d: (-d.tier, d.name)):
            walk(root, 0)
        return "\n".join(out)


def normalize_inventory(inventory) -> dict[str, dict] | None:
    """None, an iterable of node names, or a mapping name -> labels  ->  None or {name: labels}."""
    if inventory is None:
        return None
    if isinstance(inventory, Mapping):
        return {str(k): dict(v or {}) for k, v in inventory.items()}
    return {str(n): {} for n in inventory}


class TreeBuilder:
    """Collects domains and node attachments with their source lines; `finish` validates everything."""

    def __init__(self, file: str, inventory=None):
        self.file = file
        self.inventory = normalize_inventory(inventory)
        self._domains: dict[str, tuple[int, str | None, int | None]] = {}  # name -> tier, parent, line
        self._nodes: dict[str, tuple[str, int | None]] = {}  # node -> domain, line
        self.notes: list[str] = []

    def error(self, line: int | None, rule: str, column: str | None = None) -> ImportFormatError:
        return ImportFormatError(self.file, line, column, rule)

    def has_domain(self, name: str) -> bool:
        return name in self._domains

    def add_domain(self, name: str, tier: int, parent: str | None = None, line: int | None = None) -> None:
        """Declare a domain. Raises on an empty name, a tier < 1 or a name declared before."""
        if not name:
            raise self.error(line, "empty domain name")
        if not isinstance(tier, int) or isinstance(tier, bool) or not 1 <= tier <= 32767:
            raise self.error(line, f"domain {name!r}: tier must be an integer from 1 to 32767, got {tier!r}")
        if name in self._domains:
            first = self._domains[name][2]
            raise self.error(line, f"duplicate domain {name!r}" + (f" (first declared on line {first})" if first else ""))
        self._domains[name] = (tier, parent, line)

    def set_parent(self, name: str, parent: str, line: int | None = None) -> None:
        """Give an already declared domain its parent. Raises when it already has a different one."""
        tier, old, own_line = self._domains[name]
        if old is not None and old != parent:
            raise self.error(line, f"domain {name!r} is listed under both {old!r} and {parent!r}")
        self._domains[name] = (tier, parent, own_line)

    def set_tier(self, name: str, tier: int) -> None:
        _, parent, line = self._domains[name]
        self._domains[name] = (tier, parent, line)

    def attach(self, node: str, domain: str, line: int | None = None) -> None:
        """Attach a node to its lowest domain. Raises when the node is already in another domain."""
        if not node:
            raise self.error(line, "empty node name")
        if node in self._nodes and self._nodes[node][0] != domain:
            other, other_line = self._nodes[node]
            where = f" (line {other_line})" if other_line else ""
            raise self.error(line, f"node {node!r} is in two domains: {other!r}{where} and {domain!r}")
        if self.inventory is not None and node not in self.inventory:
            raise self.error(line, f"unknown node {node!r}: not in the node inventory")
        self._nodes[node] = (domain, line)

    def domain_names(self) -> list[str]:
        return list(self._domains)

    def finish(self, source: str = "") -> TopologySpec:
        """Validate (unknown parents and domains, cycles, tier order) and return the spec."""
        doms = self._domains
        for name, (tier, parent, line) in doms.items():
            if parent is None:
                continue
            if parent not in doms:
                raise self.error(line, f"domain {name!r}: unknown parent {parent!r}")
        for name in doms:  # cycles: walk up at most len(doms) steps
            seen = [name]
            cur = doms[name][1]
            while cur is not None:
                if cur in seen:
                    cycle = " -> ".join(seen[seen.index(cur):] + [cur])
                    raise self.error(doms[name][2], f"cycle in the domain tree: {cycle}")
                seen.append(cur)
                cur = doms[cur][1]
        for name, (tier, parent, line) in doms.items():
            if parent is not None and doms[parent][0] <= tier:
                raise self.error(line, f"domain {name!r} (tier {tier}) sits under {parent!r} whose tier "
                                       f"{doms[parent][0]} is not higher")
        for node, (dom, line) in self._nodes.items():
            if dom not in doms:
                raise self.error(line, f"node {node!r}: unknown domain {dom!r}")
        ordered = sorted(doms.items(), key=lambda kv: (-kv[1][0], kv[0]))
        domains = tuple(DomainSpec(name, tier, parent) for name, (tier, parent, _) in ordered)
        node_domain = {n: d for n, (d, _) in sorted(self._nodes.items())}
        return TopologySpec(domains, node_domain, tuple(self.notes), source)


def check_unique(names: Iterable[str]) -> list[str]:
    """Names that occur more than once."""
    return [n for n, c in Counter(names).items() if c > 1]
