"""Slurm hostlist expressions: `node[01-18,20],gpu[1-2]` <-> a list of names.

Syntax (Slurm `scontrol show hostnames`, https://slurm.schedmd.com/topology.conf.html "hostlist
expressions"): top-level commas separate terms; a term may hold one or more bracket groups `[a-b,c]`
whose ranges keep the zero padding of their first number (`[01-03]` -> 01, 02, 03). Several bracket
groups in one term expand as a product (`r[1-2]n[1-2]` -> r1n1, r1n2, r2n1, r2n2).

Raises ValueError (the importers wrap it into ImportFormatError with the line): unbalanced or nested
brackets, an empty term, a range whose end is below its start or that is not numeric.
"""
from __future__ import annotations

import re

__all__ = ["expand_hostlist", "compress_hostlist"]

_MAX_NAMES = 1_000_000


def _split_top(expr: str) -> list[str]:
    terms, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    terms.append("".join(cur))
    return [t.strip() for t in terms]


def _expand_group(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad range {part!r} in hostlist {expr!r}: expected N or N-M")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"range {part!r} in hostlist {expr!r} ends below its start")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        if int(hi) - int(lo) > _MAX_NAMES:
            raise ValueError(f"range {part!r} in hostlist {expr!r} is too large")
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression to names, in the order written. Raises ValueError."""
    names: list[str] = []
    for term in _split_top(expr.strip()):
        if not term:
            raise ValueError(f"empty name in hostlist {expr!r}")
        pieces = re.split(r"(\[[^\]]*\])", term)
        combos = [""]
        for piece in pieces:
            if piece.startswith("["):
                values = _expand_group(piece[1:-1], expr)
                combos = [c + v for c in combos for v in values]
            else:
                combos = [c + piece for c in combos]
        names.extend(combos)
    return names


def compress_hostlist(names) -> str:
    """The shortest simple form: names grouped by (prefix, digit width, suffix) with consecutive numbers
    as ranges, e.g. [node01, node02, node03, gpu7] -> 'gpu7,node[01-03]'. Sorted, duplicates dropped.
    Raises ValueError for a name holding ',', '[' or ']' (not expressible)."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        if any(c in name for c in ",[]"):
            raise ValueError(f"name {name!r} cannot be written in a hostlist")
        m = re.fullmatch(r"(.*?)(\d+)(\D*)", name)
        if not m:
            plain.append(name)
            continue
        digits = m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((m.group(1), width, m.group(3)), []).append(int(digits))
    terms = list(plain)
    for (prefix, width, suffix), nums in groups.items():
        nums.sort()
        if len(nums) == 1:
            terms.append(f"{prefix}{str(nums[0]).zfill(width)}{suffix}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        terms.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(sorted(terms))
