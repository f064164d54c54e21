"""What-if changes to ClusterState that are always undone (Kueue's SimulateWorkloadRemoval).

A Trial frees running tasks (victims, or jobs that will have ended by a reservation's time) and can
place a job tentatively; `undo` restores the state exactly, in reverse order."""
from __future__ import annotations

from .snapshot import Binding, JobInfo, TaskPlacement
from .state import ClusterState


class Trial:
    __slots__ = ("state", "ops")

    def __init__(self, state: ClusterState):
        self.state = state
        self.ops: list[tuple[str, int, tuple[int, ...], int, int]] = []

    def _usable(self, t: TaskPlacement) -> tuple[int, tuple[int, ...]] | None:
        k = self.state.node_index.get(t.node)
        if k is None or not self.state.nodes[k].schedulable:
            return None
        bad = self.state.nodes[k].unhealthy
        return k, tuple(g for g in t.gpus if g not in bad)

    def free_tasks(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> int:
        """Make the tasks' GPUs (on ready nodes, healthy) free; returns the GPUs freed."""
        return self._move(job, tasks, "give")

    def free_many(self, moves) -> int:
        """free_tasks for each (job, tasks) of `moves`, in order, with one state change per node: the state
        ends the same as after freeing them one by one (each node's freed GPUs appended to its free list in
        the same order, the same CPU and memory sums; ClusterState's aggregates depend on a node's count
        alone, not on the steps that led to it), for one _shift per node instead of one per task. Undone by
        `undo` like the rest. Returns the GPUs freed."""
        state, usable_of = self.state, self._usable
        per_node: dict[int, list] = {}  # node index -> [GPUs in freeing order, CPU, memory]
        for job, tasks in moves:
            roles = None
            for t in tasks:
                usable = usable_of(t)
                if usable is None:
                    continue
                k, gpus = usable
                if roles is None:
                    roles = {r.name: r for r in job.roles}
                role = roles.get(t.role)
                cpu, mem = (role.cpu_milli, role.memory_mib) if role else (0, 0)
                acc = per_node.get(k)
                if acc is None:
                    per_node[k] = [list(gpus), cpu, mem]
                else:
                    acc[0].extend(gpus)
                    acc[1] += cpu
                    acc[2] += mem
        moved = 0
        ops = self.ops
        for k, (gpus, cpu, mem) in per_node.items():
            gpus = tuple(gpus)
            state.give(k, gpus, cpu, mem)
            ops.append(("give", k, gpus, cpu, mem))
            moved += len(gpus)
        return moved

    def unfree_tasks(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> int:
        """Take back GPUs that free_tasks freed (a victim that turned out not to be needed)."""
        return self._move(job, tasks, "take")

    def _move(self, job: JobInfo, tasks: tuple[TaskPlacement, ...], op: str) -> int:
        roles = {r.name: r for r in job.roles}
        moved = 0
        for t in tasks:
            usable = self._usable(t)
            if usable is None:
                continue
            k, gpus = usable
            role = roles.get(t.role)
            cpu, mem = (role.cpu_milli, role.memory_mib) if role else (0, 0)
            (self.state.give if op == "give" else self.state.take)(k, gpus, cpu, mem)
            self.ops.append((op, k, gpus, cpu, mem))
            moved += len(gpus)
        return moved

    def place(self, job: JobInfo, binding: Binding) -> None:
        """Record a tentative placement (already applied to the state by the search) so undo frees it."""
        roles = {r.name: r for r in job.roles}
        for t in binding.tasks:
            k = self.state.node_index[t.node]
            role = roles[t.role]
            self.ops.append(("take", k, t.gpus, role.cpu_milli, role.memory_mib))

    def mark(self) -> int:
        return len(self.ops)

    def undo(self, to: int = 0) -> None:
        while len(self.ops) > to:
            op, k, gpus, cpu, mem = self.ops.pop()
            if op == "give":
                self.state.take(k, gpus, cpu, mem)
            else:
                self.state.give(k, gpus, cpu, mem)


def release_binding(state: ClusterState, job: JobInfo, binding: Binding) -> None:
    """Undo a committed placement made by the search (used when a placement was only a what-if)."""
    roles = {r.name: r for r in job.roles}
    for t in binding.tasks:
        role = roles[t.role]
        state.give(state.node_index[t.node], t.gpus, role.cpu_milli, role.memory_mib)
