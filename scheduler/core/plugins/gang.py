"""Gang placement inside one domain: all or nothing per role's minimum (Volcano's gang plugin,
PodGroup minMember; Kueue pod sets).

Every role's `effective_min` tasks are placed first, biggest tasks first, each on the first node of
the domain's node order that can hold it (per-node GPUs, CPU and memory checked, never only the
aggregate). If any role falls short, the statement is discarded and nothing is held. Tasks above the
minimum are then added while they fit and the queue's headroom allows.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..snapshot import JobInfo, RoleInfo, TaskPlacement
from ..state import ClusterState
from ..statement import Statement


@dataclass(frozen=True, slots=True)
class PackFailure:
    role: RoleInfo
    placed: int  # tasks of the role placed before it ran out of nodes


def _first_fit(state: ClusterState, order: list[int], start: int, role: RoleInfo) -> int:
    """Index in `order` of the first node from `start` that holds one task of `role`, or -1."""
    gpus, cpu, mem = role.gpus_per_task, role.cpu_milli, role.memory_mib
    for i in range(start, len(order)):
        if state.fits(order[i], gpus, cpu, mem):
            return i
    return -1


def pack_gang(state: ClusterState, job: JobInfo, order: list[int], cpu_only_nodes: list[int],
              *, extra_budget: float) -> tuple[TaskPlacement, ...] | PackFailure:
    """Place `job` on the nodes of `order` (GPU roles) / `cpu_only_nodes` (roles with no GPUs).

    extra_budget: GPUs the job may take above its minimum (queue headroom). Returns the committed
    placements or a PackFailure naming the role that could not reach its minimum.
    """
    stmt = Statement(state)
    roles = sorted(job.roles, key=lambda r: (-r.gpus_per_task, -r.cpu_milli, r.name))
    for role in roles:
        nodes = order if role.gpus_per_task else cpu_only_nodes
        cursor = 0
        for index in range(role.effective_min):
            cursor = _first_fit(state, nodes, cursor, role)
            if cursor < 0:
                stmt.discard()
                return PackFailure(role=role, placed=index)
            stmt.allocate(nodes[cursor], role=role.name, index=index, gpus=role.gpus_per_task,
                          cpu=role.cpu_milli, mem=role.memory_mib)
    for role in roles:
        nodes = order if role.gpus_per_task else cpu_only_nodes
        cursor = 0
        for index in range(role.effective_min, role.tasks):
            if role.gpus_per_task > extra_budget:
                break
            cursor = _first_fit(state, nodes, cursor, role)
            if cursor < 0:
                break
            stmt.allocate(nodes[cursor], role=role.name, index=index, gpus=role.gpus_per_task,
                          cpu=role.cpu_milli, mem=role.memory_mib)
            extra_budget -= role.gpus_per_task
    return stmt.commit()
