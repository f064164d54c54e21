"""gpuplatform/trees.py: the one builder of the domain and queue trees (pure, no database)."""
from __future__ import annotations

from operator import itemgetter

from gpuplatform.trees import Tree

ROWS = [(1, "spine", None), (2, "leaf-b", 1), (3, "leaf-a", 1), (4, "nvl0", 3), (5, "orphan", 99),
        (6, "loop-a", 7), (7, "loop-b", 6)]


def tree() -> Tree:
    return Tree(ROWS, key=itemgetter(0), parent=itemgetter(2))


def test_roots_children_and_walk_keep_the_row_order():
    t = tree()
    assert t.roots() == [1, 5]  # a parent missing from the rows makes a root; a loop has none
    assert t.children(1) == [2, 3] and t.parent(4) == 3 and t.parent(5) is None
    assert list(t.walk()) == [(1, 0), (2, 1), (3, 1), (4, 2), (5, 0)]


def test_subtree_ancestors_and_rollup():
    t = tree()
    assert t.subtree(3) == {3, 4} and t.subtree(42) == set()
    assert t.ancestors(4) == [4, 3, 1]
    assert t.ancestors(6) == [6, 7]  # a loop ends where it closes
    totals = t.rollup({4: (2, 1), 2: (1, 0)}, 2)
    assert totals[1] == [3, 1] and totals[3] == [2, 1] and totals[5] == [0, 0]


def test_nest_builds_each_row_once():
    nested = tree().nest(lambda r: {"name": r[1]}, start=[1])
    assert nested == [{"name": "spine", "children": [{"name": "leaf-b", "children": []},
                                                     {"name": "leaf-a", "children": [{"name": "nvl0", "children": []}]}]}]
    assert tree().nest(lambda r: {"name": r[1]}, start=[6]) == [
        {"name": "loop-a", "children": [{"name": "loop-b", "children": []}]}]
