"""Plain descriptions of a cluster and a workload trace, as read by the importers.

The simulator replays them directly; the platform loads them into the database through services.
Units: GPUs, millicores, MiB, seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DomainSpec:
    name: str
    tier: int
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    flavor: str
    gpus: int
    domain: str | None = None  # lowest-tier domain holding the node
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_numa: tuple[int, ...] = ()
    labels: dict = field(default_factory=dict)
    # GPU sharing mode of every GPU of the node (scheduler/core/sharing.py): exclusive | shared | mig | auto
    gpu_sharing: str = "exclusive"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue; quotas maps flavor -> (guarantee, quota, limit or None). team: the owning team's name."""

    name: str
    parent: str | None = None
    team: str | None = None
    weight: float = 1.0
    quotas: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    nodes: tuple[NodeSpec, ...]
    domains: tuple[DomainSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    notes: tuple[str, ...] = ()  # how the cluster was derived (scale, topology rule, ...)

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. submit and duration in seconds from the trace start; one role of `tasks`
    tasks x `gpus_per_task` GPUs, all required at once (min_available = tasks) unless stated."""

    id: str
    queue: str
    submit: float
    duration: float
    tasks: int
    gpus_per_task: int
    min_available: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    flavors: tuple[str, ...] = ()
    priority: int = 0
    gpu_milli: int = 1000  # share of one GPU in thousandths (openb GPU sharing); < 1000 with 1 GPU = a fraction


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    jobs: tuple[TraceJob, ...]
    notes: tuple[str, ...] = ()
    stats: dict = field(default_factory=dict)  # e.g. {"fractional": 3078}


def vc_partitioned_cluster(vcs: dict[str, int], *, borrow: bool, gpus_per_node: int = 8,
                           name: str = "helios-philly") -> "ClusterSpec":
    """The Helios simulator's cluster (S-Lab-System-Group/HeliosArtifact, one virtual cluster per Philly VC) as a
    ClusterSpec: `vcs` {VC: nodes} in one row of nodes of `gpus_per_node` GPUs ("gpu" flavor), leaf switches
    of 16 nodes under one spine, each node its own tier-1 domain; a root queue over the whole cluster and one
    queue per VC guaranteed its nodes' GPUs, limited to them unless `borrow`. Used by
    benchmarks/peers/helios_vs_ours.py and the replay digests (tests/sim/test_replay_digest.py)."""
    nodes_n = sum(vcs.values())
    domains = [DomainSpec("spine", 3)]
    nodes = []
    for k in range(nodes_n):
        if k % 16 == 0:
            domains.append(DomainSpec(f"leaf{k // 16}", 2, "spine"))
        domains.append(DomainSpec(f"m{k}", 1, f"leaf{k // 16}"))
        nodes.append(NodeSpec(f"n{k:04d}", "gpu", gpus_per_node, domain=f"m{k}"))
    total = nodes_n * gpus_per_node
    queues = [QueueSpec("root", None, None, 1.0, {"gpu": (0, total, total)})]
    for vc, n in vcs.items():
        share = gpus_per_node * n
        queues.append(QueueSpec(vc, "root", vc, 1.0, {"gpu": (share, share, None if borrow else share)}))
    return ClusterSpec(name, tuple(nodes), tuple(domains), tuple(queues))
