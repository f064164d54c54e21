"""Gang placement inside one domain: all or nothing per role's minimum (Volcano's gang plugin,
PodGroup minMember; Kueue pod sets).

Every role's `effective_min` tasks are placed first, biggest tasks first, each on the first node of
the domain's node order that can hold it (per-node GPUs, CPU and memory checked, never only the
aggregate). If any role falls short, the statement is discarded and nothing is held. Tasks above the
minimum are then added while they fit and the queue's headroom allows.

NUMA (`numa`): "off" ignores the nodes' NUMA layout; "prefer" puts a task on the first node of the order
where one NUMA node holds it, else on the first node that holds it at all; "strict" only where one NUMA
node holds it (ClusterState.numa_room). Sub-groups (RoleInfo.group_size / group_highest_tier): when
`units` gives a grouped role's units (the node lists of the domains of tier <= its group tier below the
chosen domain), its tasks are placed a group at a time, every task of a group inside one unit, the
best-fit unit first (least free GPUs that still hold the group); a group that no unit holds fails the
role like a task that no node holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from ..snapshot import JobInfo, RoleInfo, TaskPlacement
from ..state import ClusterState
from ..statement import Statement

NumaMode = Literal["off", "prefer", "strict"]


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


def _numa_fit(state: ClusterState, order: list[int], start: int, role: RoleInfo) -> int:
    """Index in `order` of the first node from `start` that holds one task of `role` inside one NUMA node."""
    gpus, cpu, mem = role.gpus_per_task, role.cpu_milli, role.memory_mib
    for i in range(start, len(order)):
        k = order[i]
        if state.fits(k, gpus, cpu, mem) and state.numa_room(k) >= gpus:
            return i
    return -1


def _pick(state: ClusterState, nodes: list[int], cursor: int, role: RoleInfo, numa: NumaMode,
          numa_cap: int = 0) -> tuple[int, int]:
    """(index in `nodes` of the node for the next task or -1, the new first-fit cursor). numa_cap: the
    largest NUMA node of the flavor: a task larger than it is placed with the NUMA rule off."""
    cursor = _first_fit(state, nodes, cursor, role)
    if cursor < 0 or numa == "off" or not 1 < role.gpus_per_task <= numa_cap \
            or state.numa_room(nodes[cursor]) >= role.gpus_per_task:
        return cursor, cursor
    aligned = _numa_fit(state, nodes, cursor + 1, role)
    if aligned >= 0:
        return aligned, cursor
    return (-1, cursor) if numa == "strict" else (cursor, cursor)


def _place_group(stmt: Statement, state: ClusterState, role: RoleInfo, first: int, count: int,
                 units: list[list[int]], numa: NumaMode, numa_cap: int) -> bool:
    """Place tasks first..first+count-1 of `role` inside one unit (best fit first); False if no unit holds them."""
    need = count * role.gpus_per_task
    free = state.free
    ranked = sorted((sum(len(free[k]) for k in unit), i) for i, unit in enumerate(units))
    for room, i in ranked:
        if room < need:
            continue
        mark = len(stmt.ops)
        cursor, ok = 0, True
        for index in range(first, first + count):
            pick, cursor = _pick(state, units[i], cursor, role, numa, numa_cap)
            if pick < 0:
                ok = False
                break
            stmt.allocate(units[i][pick], role=role.name, index=index, gpus=role.gpus_per_task,
                          cpu=role.cpu_milli, mem=role.memory_mib)
        if ok:
            return True
        stmt.rollback(mark)
    return False


def pack_gang(state: ClusterState, job: JobInfo, order: list[int], cpu_only_nodes: list[int],
              *, extra_budget: float, numa: NumaMode = "off",
              units: Mapping[str, list[list[int]]] | None = None,
              orders: Mapping[str, list[int]] | None = None, numa_cap: int = 0
              ) -> tuple[TaskPlacement, ...] | PackFailure:
    """Place `job` on the nodes of `order` (GPU roles) / `cpu_only_nodes` (roles with no GPUs).

    extra_budget: GPUs the job may take above its minimum (queue headroom). numa: the NUMA rule (module
    docstring). units: role name -> the units its groups must each fit in (roles absent: no grouping).
    orders: role name -> that role's own node order (a heterogeneous job's roles on different flavors);
    roles absent use `order`. numa_cap: the largest NUMA node's GPUs (Capacity.max_zone): larger tasks
    are placed with the NUMA rule off. Returns the committed placements or a PackFailure naming the role that
    could not reach its minimum.
    """
    stmt = Statement(state)
    roles = sorted(job.roles, key=lambda r: (-r.gpus_per_task, -r.cpu_milli, r.name))
    if not units and not orders and numa == "off":
        return _pack_plain(stmt, state, roles, order, cpu_only_nodes, extra_budget)
    units = units or {}

    def nodes_of(role: RoleInfo) -> list[int]:
        if not role.gpus_per_task:
            return cpu_only_nodes
        return orders.get(role.name, order) if orders else order

    for role in roles:
        nodes = nodes_of(role)
        grouped = units.get(role.name)
        if grouped is not None:
            size = role.group_size
            for first in range(0, role.effective_min, size):
                if not _place_group(stmt, state, role, first, min(size, role.effective_min - first), grouped, numa,
                                    numa_cap):
                    stmt.discard()
                    return PackFailure(role=role, placed=first)
            continue
        cursor = 0
        for index in range(role.effective_min):
            pick, cursor = _pick(state, nodes, cursor, role, numa, numa_cap)
            if pick < 0:
                stmt.discard()
                return PackFailure(role=role, placed=index)
            stmt.allocate(nodes[pick], role=role.name, index=index, gpus=role.gpus_per_task,
                          cpu=role.cpu_milli, mem=role.memory_mib)
    for role in roles:
        nodes = nodes_of(role)
        grouped = units.get(role.name)
        if grouped is not None:
            # whole groups above the minimum (the first may complete the minimum's last, partial group)
            size, index = role.group_size, role.effective_min
            while index < role.tasks:
                count = min(size - index % size, role.tasks - index)
                if count * role.gpus_per_task > extra_budget \
                        or not _place_group(stmt, state, role, index, count, grouped, numa, numa_cap):
                    break
                extra_budget -= count * role.gpus_per_task
                index += count
            continue
        cursor = 0
        for index in range(role.effective_min, role.tasks):
            if role.gpus_per_task > extra_budget:
                break
            pick, cursor = _pick(state, nodes, cursor, role, numa, numa_cap)
            if pick < 0:
                break
            stmt.allocate(nodes[pick], role=role.name, index=index, gpus=role.gpus_per_task,
                          cpu=role.cpu_milli, mem=role.memory_mib)
            extra_budget -= role.gpus_per_task
    return stmt.commit()


def _pack_plain(stmt: Statement, state: ClusterState, roles: list[RoleInfo], order: list[int],
                cpu_only_nodes: list[int], extra_budget: float) -> tuple[TaskPlacement, ...] | PackFailure:
    """pack_gang for the common job (one node order, no NUMA rule, no sub-group): first fit per task."""
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
