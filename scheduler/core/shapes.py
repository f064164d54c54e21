"""Shape steering (issue #17): whether a gang's shape strands GPUs of the nodes it lands on, and the
nearest shape that packs.

    steer(tasks, gpus_per_task, node_gpus) -> ShapeAdvice | None

A role of `tasks` x `gpus_per_task` GPUs on nodes of `node_gpus` GPUs places node_gpus // gpus_per_task
tasks per node, so each node it fills strands node_gpus mod gpus_per_task GPUs that no task of the job can
use (6 GPUs per task on 8-GPU nodes strand 2 per node; 64 GPUs asked as 9 x 7 strand 1 on each of 9
nodes). The nearest packing shape keeps the job's total GPUs (rounded up to what packs):
  - a job of at least one node's worth: whole nodes, ceil(total / node_gpus) x node_gpus (9 x 7 -> 8 x 8);
  - a smaller one: one task of the smallest divisor of node_gpus holding the total (1 x 6 -> 1 x 8), or
    tasks of the largest divisor not above gpus_per_task when that asks fewer extra GPUs (2 x 3 -> 3 x 2).
A shape that fills no node (1 x 3 on 8-GPU nodes leaves 5 GPUs others can use) strands nothing.
Pure: no I/O. Units: GPUs, tasks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShapeAdvice:
    """The shape asked (tasks x gpus_per_task) strands `stranded_per_node` GPUs on each of `nodes` nodes
    (`stranded` in all); `suggested` = (tasks, gpus_per_task) that packs node_gpus-GPU nodes; message for
    people."""

    tasks: int
    gpus_per_task: int
    node_gpus: int
    stranded_per_node: int
    nodes: int
    stranded: int
    suggested: tuple[int, int]
    message: str


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def steer(tasks: int, gpus_per_task: int, node_gpus: int) -> ShapeAdvice | None:
    """ShapeAdvice when the shape strands GPUs on `node_gpus`-GPU nodes, else None (it packs, asks no
    GPU, fills no node, or a task is larger than a node: no node can hold it, the submit check refuses it)."""
    if tasks < 1 or gpus_per_task < 1 or node_gpus < 1 or gpus_per_task > node_gpus:
        return None
    per_node = node_gpus // gpus_per_task
    left = node_gpus - per_node * gpus_per_task
    if left == 0:
        return None
    full_nodes = tasks // per_node  # a last, partly filled node keeps room for other jobs
    if full_nodes == 0:
        return None
    nodes = math.ceil(tasks / per_node)
    total = tasks * gpus_per_task
    stranded = full_nodes * left
    if total >= node_gpus:
        suggested = (math.ceil(total / node_gpus), node_gpus)
    else:
        below = max(d for d in _divisors(node_gpus) if d <= gpus_per_task)
        split = (math.ceil(total / below), below)
        above = min(d for d in _divisors(node_gpus) if d >= total)
        suggested = split if split[0] * split[1] - total < above - total else (1, above)
    message = (f"{tasks} x {gpus_per_task} GPUs on {node_gpus}-GPU nodes fits {per_node} task(s) per node and "
               f"strands {left} GPU(s) on each node it fills ({stranded} on {nodes} node(s)); "
               f"{suggested[0]} x {suggested[1]} packs the nodes")
    return ShapeAdvice(tasks, gpus_per_task, node_gpus, left, nodes, stranded, suggested, message)
