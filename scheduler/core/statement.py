"""A tentative transaction over ClusterState (Volcano's Statement): placements are applied at once so
later tasks of the same gang see them, and are undone in reverse order on discard. A gang is committed
only when every role reached its minimum, so no cycle ever ends holding part of a gang."""
from __future__ import annotations

from .snapshot import TaskPlacement
from .state import ClusterState


class Statement:
    __slots__ = ("state", "ops", "placements")

    def __init__(self, state: ClusterState):
        self.state = state
        self.ops: list[tuple[int, tuple[int, ...], int, int]] = []
        self.placements: list[TaskPlacement] = []

    def allocate(self, k: int, *, role: str, index: int, gpus: int, cpu: int, mem: int) -> TaskPlacement:
        picked = self.state.pick_gpus(k, gpus)
        self.state.take(k, picked, cpu, mem)
        self.ops.append((k, picked, cpu, mem))
        placement = TaskPlacement(role=role, index=index, node=self.state.nodes[k].name, gpus=picked)
        self.placements.append(placement)
        return placement

    def rollback(self, mark: int) -> None:
        """Undo the placements made after the first `mark` ones (len(ops) when the mark was taken)."""
        while len(self.ops) > mark:
            k, gpus, cpu, mem = self.ops.pop()
            self.state.give(k, gpus, cpu, mem)
            self.placements.pop()

    def discard(self) -> None:
        for k, gpus, cpu, mem in reversed(self.ops):
            self.state.give(k, gpus, cpu, mem)
        self.ops.clear()
        self.placements.clear()

    def commit(self) -> tuple[TaskPlacement, ...]:
        placed = tuple(self.placements)
        self.ops.clear()
        self.placements.clear()
        return placed
