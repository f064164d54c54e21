"""The scheduling engine: pure Python, no Django, Celery or I/O.

Entry point: `run_cycle(snapshot, config, cache=None) -> CycleResult` (cycle.py); `cache` is the caller's
EngineCache (cache.py), one per engine, or None to reuse nothing between cycles. Inputs are the frozen
dataclasses of snapshot.py; test worlds are built with testing.py. `never_fits(nodes, domains, roles,
topology_mode=, highest_tier=) -> PendingReason | None` asks the engine's static feasibility rule for a
job before it is submitted (plugins/feasibility.py). Both raise TopologyError on an inconsistent domain tree.
"""
from .cache import EngineCache
from .domain_tree import TopologyError
from .snapshot import (
    Binding, CycleConfig, CycleResult, DomainInfo, Eviction, JobInfo, MigInstance, Nomination, NodeInfo, PendingReason,
    QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement, Withdrawal,
)

__all__ = [
    "Binding", "CycleConfig", "CycleResult", "DomainInfo", "EngineCache", "Eviction", "JobInfo", "MigInstance", "Nomination", "NodeInfo",
    "PendingReason", "QueueInfo", "QuotaInfo", "RoleInfo", "Snapshot", "TaskPlacement", "TopologyError", "Withdrawal", "never_fits",
    "run_cycle",
]


def run_cycle(snapshot, config=None, *, cache=None):  # noqa: D103 - re-exported, documented in cycle.py
    from .cycle import run_cycle as _run

    return _run(snapshot, config, cache=cache)


def never_fits(nodes, domains, roles, *, topology_mode="none", highest_tier=None, numa="prefer"):  # noqa: D103 - documented in plugins/feasibility.py
    from .plugins.feasibility import never_fits as _never_fits

    return _never_fits(nodes, domains, roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa)
