"""The one tree builder behind the domain tree and the queue tree (pure: no database).

`Tree(rows, key=, parent=)` indexes rows by id and by parent. A row whose parent is not among the rows
(a root, or a queue whose parent the reader may not see) is a root. Every walk visits a row at most once,
so a parent loop (which the services never let into the database) cannot hang a page. Children and roots
keep the order of `rows`. Readers get one from `queries.domain_tree()` / `queries.queue_tree()`, or build
one over rows they already hold (the topology map's builder).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Hashable, Iterable, Iterator

__all__ = ["Tree"]


class Tree:
    def __init__(self, rows: Iterable, *, key: Callable[[Any], Hashable], parent: Callable[[Any], Hashable | None]):
        self.rows: dict = {}
        self._parent: dict = {}
        for row in rows:
            k = key(row)
            self.rows[k] = row
            self._parent[k] = parent(row)
        self._children: dict = defaultdict(list)
        for k in self.rows:
            p = self.parent(k)
            if p is not None:
                self._children[p].append(k)

    def __contains__(self, key) -> bool:
        return key in self.rows

    def parent(self, key):
        """The parent's id; None for a root (also when the parent is not among the rows)."""
        p = self._parent.get(key)
        return p if p in self.rows and p != key else None

    def children(self, key) -> list:
        """The children's ids."""
        return list(self._children.get(key, ()))

    def roots(self) -> list:
        """The ids of the rows without a parent among the rows."""
        return [k for k in self.rows if self.parent(k) is None]

    def walk(self, start: Iterable | None = None) -> Iterator[tuple]:
        """(id, depth) depth first from `start` (ids; default the roots), children in row order."""
        seen: set = set()
        stack = [(k, 0) for k in reversed(list(self.roots() if start is None else start)) if k in self.rows]
        while stack:
            k, depth = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            yield k, depth
            stack.extend((c, depth + 1) for c in reversed(self._children.get(k, ())) if c not in seen)

    def subtree(self, key) -> set:
        """`key` and the ids of everything below it (empty for an unknown id)."""
        return {k for k, _ in self.walk([key])}

    def ancestors(self, key) -> list:
        """The ids from `key` up to its root, `key` first."""
        out, seen = [], set()
        while key is not None and key in self.rows and key not in seen:
            seen.add(key)
            out.append(key)
            key = self.parent(key)
        return out

    def rollup(self, own: dict, width: int) -> dict:
        """Each id's numbers summed over its subtree: `own` {id: sequence of `width` numbers} is added to
        the id itself and every ancestor. Returns {id: [sums]} for every row."""
        totals = {k: [0] * width for k in self.rows}
        for k, values in own.items():
            for a in self.ancestors(k):
                acc = totals[a]
                for i, v in enumerate(values):
                    acc[i] += v or 0
        return totals

    def nest(self, node: Callable[[Any], dict], start: Iterable | None = None) -> list[dict]:
        """Nested dicts from `start` (ids; default the roots): node(row) plus "children"."""
        seen: set = set()

        def build(k):
            seen.add(k)
            return {**node(self.rows[k]), "children": [build(c) for c in self._children.get(k, ()) if c not in seen]}

        return [build(k) for k in (self.roots() if start is None else start) if k in self.rows and k not in seen]
