"""InfiniBand fabric dump (`ibnetdiscover` output) in: leaf and spine switches from the links.

Format: the text printed by `ibnetdiscover` (infiniband-diags, man page ibnetdiscover(8)): blank-line
separated blocks, each `vendid=`/`devid=`/`...guid=` lines then a node line
`Switch <ports> "S-<guid>"  # "<description>" ...` or `Ca <ports> "H-<guid>"  # "<description>"`, then
one line per connected port: `[<port>] "<remote id>"[<remote port>](<guid>)  # "<remote description>" ...`
(a Ca block writes `[<port>](<guid>) "<remote id>"[<remote port>] ...`). Example:
topograph `tests/output/ibnetdiscover/example.out` (data/topology/topograph/ib/).

Rules (ours):
- Host of an HCA: a Ca description of exactly two words `<host> <hca>` (e.g. "dgx-04-c01 mlx5_5");
  other HCAs (SHARP aggregation nodes, unnamed "MT4129 ConnectX7 ..." ports) are counted and skipped.
- Compute hosts: the host names of the most common shape (digits replaced by '#', so
  and letters by 'a', so `a08-p1-dgx-04-c01` -> `a#-a#-aaa-#-a#`); other hosts (the UFM server, `localhost`, `ubuntu`) are
  skipped with a note. `host_pattern=` (a regex, full match) overrides the rule.
- Switch name: the part between ';' and ':' of "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1", else the whole
  description when it has no blanks, else the id.
- A switch linked to a named host HCA is a leaf; tier 2 domains are the groups of leaves that share
  hosts (a rail-optimised fabric wires each host to several leaves of one scalable unit), named after
  the group's first leaf, plus `+N` when it holds N more leaves. A host belongs to its group.
- Switches not yet placed and linked to no host HCA that link to a group of the level below form the next level (tier 3 = spine,
  ...), again grouped by shared children. A level whose groups do not all share one parent group keeps
  several roots.

Raises ImportFormatError (file, line, reason): a port line outside a node block, a node line that does not
parse, no switch at all, an unknown host (inventory given).
"""
from __future__ import annotations

import re
from collections import Counter

from .spec import TopologySpec, TreeBuilder

__all__ = ["parse_ibnetdiscover"]

_NODE = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([^"]+)"(?:.*?#\s*"([^"]*)")?')
_SW_PORT = re.compile(r'^\[\d+\]\s+"([^"]+)"\[\d+\]')
_CA_PORT = re.compile(r'^\[\d+\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[\d+\]')
_SW_NAME = re.compile(r"^[^;:]*;([^;:]+):")


def _switch_name(desc: str, ident: str) -> str:
    m = _SW_NAME.match(desc or "")
    if m:
        return m.group(1)
    return desc if desc and not re.search(r"\s", desc) else ident


class _Union:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _groups(members: dict[str, set[str]], names: dict[str, str]) -> dict[str, list[str]]:
    """Group ids that share any linked item; -> {group name: sorted member ids}."""
    u = _Union()
    owner: dict[str, str] = {}
    for ident, linked in members.items():
        u.find(ident)
        for item in linked:
            if item in owner:
                u.union(owner[item], ident)
            else:
                owner[item] = ident
    by_root: dict[str, list[str]] = {}
    for ident in members:
        by_root.setdefault(u.find(ident), []).append(ident)
    out = {}
    for ids in by_root.values():
        ids.sort(key=lambda i: names[i])
        out[names[ids[0]] + (f"+{len(ids) - 1}" if len(ids) > 1 else "")] = ids
    return out


def _shape(host: str) -> str:
    return re.sub(r"[a-z]", "a", re.sub(r"\d+", "#", host.lower()))


def _compute_hosts(hosts: dict[str, str], host_pattern: str | None) -> tuple[dict[str, str], list[str]]:
    if host_pattern is not None:
        keep = {h for h in set(hosts.values()) if re.fullmatch(host_pattern, h)}
    else:
        shapes = Counter(_shape(h) for h in set(hosts.values()))
        best = shapes.most_common(1)[0][0] if shapes else ""
        keep = {h for h in set(hosts.values()) if _shape(h) == best}
    return {i: h for i, h in hosts.items() if h in keep}, sorted(set(hosts.values()) - keep)


def parse_ibnetdiscover(text: str, *, file: str = "ibnetdiscover.out", inventory=None,
                        host_pattern: str | None = None) -> TopologySpec:
    """Parse an ibnetdiscover dump. `inventory`: known node names; `host_pattern`: compute host regex."""
    b = TreeBuilder(file, inventory)
    kinds: dict[str, str] = {}
    descs: dict[str, str] = {}
    links: dict[str, set[str]] = {}
    first_line: dict[str, int] = {}
    cur = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            if not line:
                cur = None
            continue
        if line.startswith(("Switch", "Ca", "Rt")):
            m = _NODE.match(line)
            if not m:
                raise b.error(lineno, f"cannot read the node line {line[:60]!r}")
            cur = m.group(2)
            kinds[cur], descs[cur] = m.group(1), m.group(3) or ""
            links.setdefault(cur, set())
            first_line.setdefault(cur, lineno)
        elif line.startswith("["):
            if cur is None:
                raise b.error(lineno, "port line outside a Switch or Ca block")
            m = (_SW_PORT if kinds[cur] == "Switch" else _CA_PORT).match(line)
            if m:
                links[cur].add(m.group(1))
                links.setdefault(m.group(1), set()).add(cur)
    switches = {i for i, k in kinds.items() if k == "Switch"}
    if not switches:
        raise b.error(None, "no Switch block found: not an ibnetdiscover dump?")
    hosts: dict[str, str] = {}
    unnamed = 0
    for ident, kind in kinds.items():
        if kind != "Ca":
            continue
        words = descs[ident].split()
        if len(words) == 2:
            hosts[ident] = words[0]
        else:
            unnamed += 1
    any_host = set(hosts)
    hosts, others = _compute_hosts(hosts, host_pattern)
    if others:
        b.notes.append(f"{len(others)} host(s) not of the compute-node shape skipped: {', '.join(others)}")
    names = {i: _switch_name(descs.get(i, ""), i) for i in switches}
    leaf_hosts = {s: {hosts[p] for p in links[s] if p in hosts} for s in switches}
    level = {s: h for s, h in leaf_hosts.items() if h}
    placed = set(level) | {s for s in switches if links[s] & any_host}
    tier, below = 2, None
    node_line: dict[str, int] = {}
    while level:
        groups = _groups(level, names)
        for gname, ids in sorted(groups.items()):
            b.add_domain(gname, tier, None, first_line[ids[0]])
            if below is None:
                for host in sorted(set().union(*(level[i] for i in ids))):
                    node_line.setdefault(host, first_line[ids[0]])
                    b.attach(host, gname, first_line[ids[0]])
            else:
                for child in sorted({below[c] for i in ids for c in level[i]}):
                    b.set_parent(child, gname, first_line[ids[0]])
        b.notes.append(f"tier {tier}: {len(level)} switch(es) in {len(groups)} group(s)")
        below = {i: g for g, ids in groups.items() for i in ids}
        nxt = {s: {c for c in links[s] if c in below} for s in switches - placed}
        level = {s: c for s, c in nxt.items() if c}
        placed |= set(level)
        tier += 1
    if switches - placed:
        b.notes.append(f"{len(switches - placed)} switch(es) linked to no host or placed switch, skipped")
    b.notes.append(f"{len(hosts)} HCA(s) on {len(set(hosts.values()))} compute host(s); {unnamed} unnamed "
                   "HCA(s) skipped")
    return b.finish(source="ibnetdiscover")
