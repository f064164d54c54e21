"""The scheduling engine: pure Python, no Django, Celery or I/O.

Entry point: `run_cycle(snapshot, config, cache=None) -> CycleResult` (cycle.py); `cache` is the caller's
EngineCache (cache.py), one per engine, or None to reuse nothing between cycles. Inputs are the frozen
dataclasses of snapshot.py; test worlds are built with testing.py.
"""
from .cache import EngineCache
from .snapshot import (
    Binding, CycleConfig, CycleResult, DomainInfo, Eviction, JobInfo, Nomination, NodeInfo, PendingReason,
    QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement,
)

__all__ = [
    "Binding", "CycleConfig", "CycleResult", "DomainInfo", "EngineCache", "Eviction", "JobInfo", "Nomination", "NodeInfo",
    "PendingReason", "QueueInfo", "QuotaInfo", "RoleInfo", "Snapshot", "TaskPlacement", "run_cycle",
]


def run_cycle(snapshot, config=None, *, cache=None):  # noqa: D103 - re-exported, documented in cycle.py
    from .cycle import run_cycle as _run

    return _run(snapshot, config, cache=cache)
