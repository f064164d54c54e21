"""Shape steering (scheduler/core/shapes.py): shapes that strand GPUs on their nodes get the nearest
packing shape."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from scheduler.core.shapes import steer


@pytest.mark.parametrize("shape,node,suggested,stranded", [
    ((9, 7), 8, (8, 8), 9),   # 64 GPUs asked as 9 x 7: 1 stranded on each of 9 nodes -> 8 x 8
    ((1, 6), 8, (1, 8), 2),   # 6 GPUs per task on 8-GPU nodes strand 2 per node
    ((4, 6), 8, (3, 8), 8),
    ((2, 3), 8, (3, 2), 2),   # small job: split into tasks that divide the node
    ((5, 3), 4, (4, 4), 5),   # 4-GPU nodes (GB200-style)
    ((3, 3), 8, (5, 2), 2),   # new-user trial 25: 10 GPUs as 5 x 2, not 16 as 2 x 8
    ((3, 6), 8, (5, 4), 6),   # 20 GPUs as 5 x 4, not 24 as 3 x 8
    ((2, 6), 8, (3, 4), 4),   # 12 GPUs as asked
])
def test_stranding_shapes_get_the_nearest_packing_shape(shape, node, suggested, stranded):
    advice = steer(*shape, node)
    assert advice is not None and advice.suggested == suggested and advice.stranded == stranded
    assert f"{suggested[0]} x {suggested[1]}" in advice.message


@pytest.mark.parametrize("shape,node", [((8, 8), 8), ((3, 4), 8), ((1, 3), 8), ((16, 1), 8), ((1, 9), 8), ((0, 8), 8)])
def test_packing_or_impossible_shapes_get_no_advice(shape, node):
    assert steer(*shape, node) is None


@given(st.integers(1, 64), st.integers(1, 8), st.sampled_from([4, 8]))
def test_suggestion_packs_and_keeps_at_least_the_gpus(tasks, gpt, node):
    advice = steer(tasks, gpt, node)
    if advice is None:
        return
    t, g = advice.suggested
    assert node % g == 0 and t * g >= tasks * gpt  # it packs, and asks no fewer GPUs
    assert t * g - tasks * gpt < node  # the nearest: less than one node's worth more
    total = tasks * gpt
    below = max(d for d in range(1, gpt + 1) if node % d == 0)
    # no fewer-GPU packing among the candidates: tasks of the largest divisor below the task, whole nodes
    assert t * g <= -(-total // below) * below
    if total >= node:
        assert t * g <= -(-total // node) * node
    assert f"({t * g} GPUs, " in advice.message
