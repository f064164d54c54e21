"""Shape steering (issue #17): whether a gang's shape strands GPUs of the nodes it lands on, and the
nearest shape that packs.

    steer(tasks, gpus_per_task, node_gpus) -> ShapeAdvice | None

A role of `tasks` x `gpus_per_task` GPUs on nodes of `node_gpus` GPUs places node_gpus // gpus_per_task
tasks per node, so each node it fills strands node_gpus mod gpus_per_task GPUs that no task of the job can
use (6 GPUs per task on 8-GPU nodes strand 2 per node; 64 GPUs asked as 9 x 7 strand 1 on each of 9
nodes). The nearest packing shape keeps the job's total GPUs, rounded up to what packs, by the fewest extra GPUs among:
  - whole nodes, ceil(total / node_gpus) x node_gpus, for a job of at least one node's worth (9 x 7 -> 8 x 8);
  - one task of the smallest divisor of node_gpus holding the total, for a smaller one (1 x 6 -> 1 x 8);
  - tasks of the largest divisor of node_gpus not above gpus_per_task (2 x 3 -> 3 x 2; 3 x 3 -> 5 x 2, 10 GPUs,
    where whole nodes would ask 16: new-user trial 25).
On a tie the larger tasks win (whole nodes first), so 9 x 7 -> 8 x 8 and not 16 x 4.
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
    divisors = _divisors(node_gpus)
    below = max(d for d in divisors if d <= gpus_per_task)
    # the candidates, larger tasks first: min() keeps the first of equal extra GPUs
    candidates = [(math.ceil(total / node_gpus), node_gpus) if total >= node_gpus
                  else (1, min(d for d in divisors if d >= total)), (math.ceil(total / below), below)]
    suggested = min(candidates, key=lambda c: c[0] * c[1] - total)
    more = suggested[0] * suggested[1] - total
    message = (f"{tasks} x {gpus_per_task} GPUs on {node_gpus}-GPU nodes fits {per_node} task(s) per node and "
               f"strands {left} GPU(s) on each node it fills ({stranded} on {nodes} node(s)); "
               f"{suggested[0]} x {suggested[1]} packs the nodes "
               f"({suggested[0] * suggested[1]} GPUs, {f'{more} more than the {total} asked' if more else 'as asked'})")
    return ShapeAdvice(tasks, gpus_per_task, node_gpus, left, nodes, stranded, suggested, message)
