"""Frozen inputs and outputs of one scheduling cycle.

Units everywhere: GPUs (whole devices), CPU in millicores, memory in MiB, time in seconds of the
cluster clock (simulated in replays). Identifiers are plain strings or ints chosen by the caller
(store.py uses database ids, the simulator trace ids).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Literal, Mapping

JobId = Hashable
TopologyMode = Literal["none", "soft", "hard"]
NumaPolicy = Literal["prefer", "single"]
NodeState = Literal["ready", "cordoned", "draining", "not_ready"]


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """A network performance domain (HyperNode). tier 1 = NVLink / scale-up, 2 = leaf, 3 = spine..."""

    name: str
    tier: int
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG GPU instance (DESIGN section 12): on GPU `gpu` of its node, `profile` as NVIDIA names it
    ("1g.18gb", "3g.71gb", "7g.141gb" on an H200), `memory_mib` of framebuffer, `slices` compute slices
    (of 7), `uuid` the instance's own UUID ("MIG-..."), what CUDA_VISIBLE_DEVICES takes."""

    gpu: int
    uuid: str
    profile: str
    memory_mib: int = 0
    slices: int = 0


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One GPU server as the engine sees it.

    gpu_numa[i] is GPU i's NUMA node (or NVLink group); `unhealthy` lists GPU indices that take no work;
    `used` lists GPU indices held by live allocations at snapshot time. cpu_milli / memory_mib of 0 mean
    "not constrained". Only nodes in state "ready" take new work.

    `spare`: a hot spare (scheduler/core/spares.py): the cycle places on it only pending jobs that may be
    stopped at once (JobInfo.interruptible), after everything else, and a gang that lost a node restarts on
    it at once (spares.plan_restart), stopping its occupants; it is not `schedulable` for anything else.
    """

    name: str
    flavor: str
    gpus: int
    domain: str | None = None
    gpu_numa: tuple[int, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    state: NodeState = "ready"
    unhealthy: frozenset[int] = frozenset()
    used: frozenset[int] = frozenset()
    cpu_used: int = 0
    memory_used: int = 0
    # GPU sharing (scheduler/core/sharing.py): per GPU index its mode, "exclusive" (whole-GPU tasks only),
    # "shared" (fractions only), "mig" (its MIG instances only) or "auto" (whole-GPU tasks while it holds no
    # fraction, fractions while no whole-GPU task holds it: KAI / FGD behaviour); empty = all "exclusive".
    # gpu_memory_mib: each GPU's memory (0 = unknown: gpu_memory_mib requests do not fit); mig: instances.
    gpu_modes: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    mig: tuple[MigInstance, ...] = ()
    spare: bool = False

    @property
    def schedulable(self) -> bool:
        """Whether the cycle may place work on it: ready and not a hot spare (spares.spare_pass places the
        interruptible jobs on spares on a view where the spares are ordinary nodes)."""
        return self.state == "ready" and not self.spare


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """Per flavor, in GPUs: guarantee <= quota <= limit (limit None = no cap of its own)."""

    guarantee: int = 0
    quota: int = 0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """recent_usage: the queue's decayed average usage per flavor in GPUs (plugins.fairshare.decay_usage),
    kept by the caller across cycles; used to order queues when CycleConfig.usage_half_life is set."""

    name: str
    parent: str | None = None
    weight: float = 1.0
    quotas: Mapping[str, QuotaInfo] = field(default_factory=dict)
    state: Literal["open", "closing", "closed", "draining"] = "open"
    recent_usage: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """A task group. `tasks` is how many tasks of the role still want to run (of a running job: those placed,
    being released and waiting to be placed again, indices 0..tasks-1); the gang needs min(min_available,
    tasks) of them placed at once. `flavors` empty = any GPU model; roles of one job
    may name different flavors (a heterogeneous job: an RL trainer on one model, rollout workers on
    another), and the gang rule holds across them.

    Sub-group constraint (DESIGN section 4): `group_size` > 0 places the role's tasks in consecutive
    groups of `group_size` (by task index; the last one may be smaller), each group inside one domain of
    tier <= `group_highest_tier` (a tensor-parallel group inside one NVLink domain while the job spans
    racks). `group_mode` "hard" fails rather than break a group; "soft" prefers whole groups and may
    spread them. group_size 0 = no sub-group constraint."""

    name: str
    tasks: int
    gpus_per_task: int
    min_available: int
    cpu_milli: int = 0
    memory_mib: int = 0
    flavors: tuple[str, ...] = ()
    group_size: int = 0
    group_highest_tier: int | None = None
    group_mode: Literal["hard", "soft"] = "hard"
    # GPU sharing (sharing.py): at most one of these is set (the kind of request). gpu_milli 1..999: each task
    # takes that share (thousandths) of one GPU's compute and memory; gpu_memory_mib: each task takes that much
    # memory of one GPU (and the same share of its compute); mig_profile: each task takes `gpus_per_task`
    # MIG instances of that profile on one node. All zero / empty: whole GPUs (gpus_per_task of them).
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    mig_profile: str = ""

    @property
    def shares(self) -> bool:
        """Whether the role asks for a fraction of a GPU or MIG instances rather than whole GPUs."""
        return bool(self.gpu_milli or self.gpu_memory_mib or self.mig_profile)

    @property
    def grouped(self) -> bool:
        """Whether the role has a sub-group constraint the search must honour."""
        return self.group_size > 0 and self.group_highest_tier is not None

    @property
    def effective_min(self) -> int:
        return min(self.min_available, self.tasks)


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """A task's place: node and GPU indices. A fractional task (RoleInfo.gpu_milli / gpu_memory_mib) has one
    GPU index and its share in `gpu_milli` (thousandths of the GPU's compute) and `gpu_memory_mib`; a MIG task
    has the GPUs its instances are on and the instances' UUIDs in `mig`. Whole-GPU tasks leave them 0 / ()."""

    role: str
    index: int
    node: str
    gpus: tuple[int, ...]
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    mig: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as the engine sees it. Pending jobs have no placement; running ones carry theirs.

    Topology: `topology_mode` "hard" keeps the gang inside one domain of tier <= `highest_tier` (or it
    waits); "soft" and "none" prefer the lowest tier that fits and may spread up to the whole cluster.
    `preferred_tier` (any mode; at most highest_tier under "hard") is where the domain search starts:
    the gang is placed best-fit among the domains of that tier, falling back upward when none fits
    (Session.tier_levels). Times are seconds of the cluster clock; time_limit None = none declared.

    NUMA (`numa`): "prefer" (default) puts each task's GPUs inside one NUMA node of a node that reports
    them (NodeInfo.gpu_numa) when some node in the chosen domain has one with room, else anywhere;
    "single" makes it a hard rule (kubelet's single-numa-node policy): a task that no NUMA node holds waits.
    A node that reports no NUMA layout counts as one NUMA node.

    `interruptible`: the job may be stopped at once, without a grace period (it is also preemptible): it
    may run on hot spares (NodeInfo.spare), and is stopped there, requeued whole, when a failed gang needs
    the spare (scheduler/core/spares.py)."""

    id: JobId
    queue: str
    roles: tuple[RoleInfo, ...]
    priority: int = 0
    submit_time: float = 0.0
    preemptible: bool = True
    topology_mode: TopologyMode = "none"
    highest_tier: int | None = None
    preferred_tier: int | None = None
    time_limit: float | None = None
    state: Literal["pending", "running", "preempting"] = "pending"
    placement: tuple[TaskPlacement, ...] = ()
    start_time: float | None = None
    name: str = ""
    reserved: tuple[TaskPlacement, ...] = ()  # GPUs held for this job (an eviction's beneficiary) until it starts
    not_before: float | None = None  # requeue backoff: not considered before this time
    attempts: int = 0
    # Nodes this job's earlier attempts failed on (an exclude_node diagnosis): placed elsewhere when
    # anything else fits, on them only when nothing else does (actions.allocate.Admission.place).
    avoid_nodes: frozenset[str] = frozenset()
    evicted_for: JobId | None = None  # state "preempting": the beneficiary its eviction is for (None: none)
    part_of: JobId | None = None  # a "preempting" entry of surplus tasks being released: the running job they are of
    numa: NumaPolicy = "prefer"
    # rescheduling (actions/reschedule.py): the job checkpoints on SIGTERM and resumes when restarted, so it
    # may be moved after running `min_run_before_move` seconds, given `checkpoint_grace` seconds to write its
    # checkpoint (None = its queue's grace period)
    migratable: bool = False
    min_run_before_move: float = 0.0
    checkpoint_grace: float | None = None
    interruptible: bool = False
    # state "preempting": when its GPUs come free at the latest (seconds of the cluster clock): the end of its stop's
    # grace period as the caller stored it (the platform's Job.preempt_deadline; a releasing entry's tasks' latest
    # release_deadline). None = not known (the forecast then assumes its default grace period from now)
    stop_deadline: float | None = None
    # state "preempting": the job ends when its stop does (a cancel, or a stop toward failed / succeeded) instead of
    # waiting in its queue again; the forecast then does not requeue it
    stop_ends: bool = False

    @property
    def gpus_requested(self) -> int:
        return sum(r.tasks * r.gpus_per_task for r in self.roles)

    @property
    def gpus_min(self) -> int:
        return sum(r.effective_min * r.gpus_per_task for r in self.roles)


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeInfo, ...]
    domains: tuple[DomainInfo, ...] = ()
    queues: tuple[QueueInfo, ...] = ()
    jobs: tuple[JobInfo, ...] = ()
    now: float = 0.0
    cycle: int = 0  # the caller's cycle number (rescheduling runs every CycleConfig.reschedule_every cycles)
    recent_moves: tuple[Move, ...] = ()  # moves made by rescheduling, as the caller recorded them (bounds)
    # (queue, resource, amount) charged to the queues besides the jobs' whole GPUs: the GPU-equivalents (flavor)
    # and MIG instances ("<flavor>/mig-<profile>") of running sharing jobs, which sharing.whole_view leaves out
    share_usage: tuple[tuple[str, str, float], ...] = ()
    # the expected request mix of the FGD score (sharing.py, FGD's "target workload"): (GPU thousandths per GPU
    # (1000 = whole GPUs), GPUs per task, CPU millicores per task, tasks), as the caller knows it from the workload's
    # history (sharing.workload_of); empty = the mix of this snapshot's own jobs (running and pending)
    workload: tuple[tuple[int, int, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Move:
    """A running job moved by rescheduling (actions/reschedule.py): evicted gracefully from `source` (its
    old tasks) and held at `tasks` (its new places) so it restarts there from its checkpoint; made at
    `time` (seconds) for `beneficiary`, the pending job that starts on the GPUs it leaves."""

    job_id: JobId
    time: float
    beneficiary: JobId = None
    tasks: tuple[TaskPlacement, ...] = ()
    gpus: int = 0


DEFAULT_USAGE_HALF_LIFE = 7 * 24 * 3600.0  # seconds (Slurm's PriorityDecayHalfLife default)


@dataclass(frozen=True, slots=True)
class CycleConfig:
    """Knobs of one cycle. `binpack` off spreads (least-allocated first, like kube-scheduler's default);
    `topology` off ignores the domain tree (every job may span the whole cluster)."""

    binpack: bool = True
    topology: bool = True
    fair_share: bool = True  # order queues by water-filled fair share; off = plain FIFO across queues
    backfill: bool = True  # reserve for the first job that cannot start; later jobs must not delay it
    preemption: bool = True  # priority preemption inside a queue
    reclaim: bool = True  # take borrowed GPUs back for queues below their quota
    max_preemptors: int = 8  # pending jobs that may evict per cycle (bounds the cycle's cost)
    # seconds; order queues by decayed usage (QueueInfo.recent_usage, where the caller keeps it: the platform
    # and the replay do); 7 days = Slurm's PriorityDecayHalfLife default; None = by live usage only
    usage_half_life: float | None = DEFAULT_USAGE_HALF_LIFE
    starvation_seconds: float = 1800.0  # a job waiting this long gets a drain reservation (when backfill is on)
    max_reservations: int = 8  # jobs holding reservations at once (eviction beneficiaries and drains)
    max_drains: int = 1  # of those, drain reservations (actions/backfill.py: each holds idle GPUs while it drains)
    # rescheduling (actions/reschedule.py; defaults from benchmarks/reschedule.py, RESULTS.md)
    reschedule: bool = False  # move migratable jobs to unblock a job waiting on fragmentation alone
    reschedule_advice: bool = False  # also plan over jobs that are not migratable, as advice (CycleResult.advice)
    reschedule_every: int = 5  # cycles between planning rounds (Snapshot.cycle % reschedule_every == 0)
    reschedule_moves_per_hour: int = 32  # K: moves per hour per cluster (Snapshot.recent_moves)
    reschedule_window: float = 6 * 3600.0  # seconds: a job is never moved twice within it
    reschedule_max_victims: int = 4  # the most jobs moved for one waiting job
    reschedule_min_wait: float = 600.0  # seconds a job waits before jobs are moved for it
    # GPU sharing (sharing.py): pending one-task whole-GPU jobs without a topology constraint are placed by the
    # FGD score too, with the fractions, when the cluster has GPUs in mode "auto" (as the FGD simulator places
    # every pod); off = the engine's binpack places them (fair-share order, backfill, preemption as usual)
    fgd_whole: bool = False


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job did not start. `code` is stable for programs; `message` is for people.
    `terminal` means waiting cannot help (it can never fit this cluster or its queue's limit). `role`: the name
    of the role whose own ask is at fault, when the reason is about one role (the static feasibility rule's
    "role w: 16 GPUs per task exceeds every node"); None when it is about the job as a whole. It lets a caller
    name the field to change (the platform's submission refusal, fit_check.refusal_errors); the cycle's
    decisions, messages and digests do not read it."""

    code: str
    message: str
    terminal: bool = False
    role: str | None = None


# Every PendingReason.code the engine gives (the cycle's, the GPU-sharing pass's and the baselines'), with what it means:
# the one vocabulary of Job.pending_reason_code, the jobs API's `pending_reason_code` and docs/api.md's table
# (tests/platform/test_s22r_reason_code.py checks that every code written in scheduler/ is here, and the doc's list).
# The never_fits_* codes, unknown_queue and invalid are terminal (waiting cannot help); the others may clear later.
PENDING_CODES: dict[str, str] = {
    "backoff": "requeued after a failed attempt: not considered again before its backoff ends (not_before)",
    "insufficient_gpus": "fewer GPUs of its flavor are free than its minimum needs now",
    "no_domain": "no domain of its topology tier has enough free GPUs now",
    "no_packing": "enough GPUs are free, but no arrangement of them on nodes holds its tasks now",
    "queue_limit": "its queue (or a parent) has no room now under a limit, or, non-preemptible, its quota",
    "quota": "GPU shares: its queue (or a parent) has no room now under a limit, or, non-preemptible, its quota",
    "no_share": "GPU shares: no GPU has the free share, memory or MIG instance a task needs now",
    "nominated": "GPUs are being freed for it (evictions or moves in their grace period); it starts on them next",
    "waiting_pods": "baseline schedulers only (scheduler.core.baselines): some tasks bound, the others wait",
    "unknown_queue": "its queue is not in the scheduler's view (deleted or moved meanwhile)",
    "invalid": "the job has no roles",
    "never_fits_flavor": "a role names GPU flavors no node of this cluster has",
    "never_fits_node": "a role's GPUs per task exceed every node of its flavor",
    "never_fits_cpu": "a role's CPU per task exceeds every node it may run on",
    "never_fits_memory": "a role's memory per task exceeds every node it may run on",
    "never_fits_cpu_gang": "the milli-CPU of a role's minimum tasks (or of all roles' together) can never be packed "
                           "on the nodes they may run on",
    "never_fits_memory_gang": "the memory of a role's minimum tasks (or of all roles' together) can never be packed "
                              "on the nodes they may run on",
    "never_fits_host_gang": "a role's minimum tasks can never be packed on the nodes it may run on by GPUs, CPU and "
                            "memory together",
    "never_fits_numa": "numa: single, and a role's GPUs per task exceed every NUMA node",
    "never_fits_group": "a role's task group exceeds every domain of its group tier",
    "never_fits_tier": "this cluster has no domain of the job's highest tier",
    "never_fits_domain": "its minimum exceeds every domain of its tier, or the whole cluster",
    "never_fits_queue_limit": "its minimum exceeds a limit of its queue's chain (the reason names the queue and limit)",
    "never_fits_queue_quota": "non-preemptible (it may not borrow), and its minimum exceeds the entitlement of a "
                              "queue of its chain (the reason names the queue and its entitlement)",
}


def utc_iso(t: float) -> str:
    """A cluster-clock time (seconds since the Unix epoch, UTC) as ISO 8601 for people:
    1796124829 -> '2026-12-01T11:33:49Z' (whole seconds). Pure: no clock is read."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(round(t), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Binding:
    """A decision to start a job: every placed task with its node and GPU indices, the domain (name,
    tier) the gang was placed in, and for the audit the rule that admitted it ("allocate", "backfill":
    on GPUs reserved for another job it will leave before, "reservation": on GPUs held for it) and its
    queue's dominant share before and after."""

    job_id: JobId
    tasks: tuple[TaskPlacement, ...]
    domain: str
    tier: int
    rule: str = "allocate"
    share_before: float = 0.0
    share_after: float = 0.0


@dataclass(frozen=True, slots=True)
class Eviction:
    """A running job (or some of its tasks) to evict gracefully for `beneficiary`.

    tasks: the (role, index) pairs to evict; empty = the whole gang. rule: "reclaim" (across queues,
    from a queue above its quota), "preempt" (inside a queue, lower priority) or "reschedule" (a move). gpus: GPUs freed."""

    job_id: JobId
    tasks: tuple[tuple[str, int], ...]
    gpus: int
    rule: str
    beneficiary: JobId
    message: str
    grace: float | None = None  # seconds to release (a moved job's checkpoint grace); None = its queue's


@dataclass(frozen=True, slots=True)
class Nomination:
    """GPUs held for a pending job until it starts on them (the beneficiary of evictions). Held GPUs
    are out of everyone else's pool; the holder starts there as soon as the victims release them."""

    job_id: JobId
    tasks: tuple[TaskPlacement, ...]
    rule: str


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """An eviction still in its grace period taken back: its beneficiary left (cancelled, started
    elsewhere, or no longer holds the victim's GPUs), so the victim keeps running, without a restart.
    job_id: the job being evicted (a whole gang), or with `tasks` the (role, index) pairs of its tasks
    being released; beneficiary: the job the eviction was for; message: why, for the audit."""

    job_id: JobId
    tasks: tuple[tuple[str, int], ...]
    beneficiary: JobId
    message: str


@dataclass(slots=True)
class CycleResult:
    """bindings: pending jobs started; growths: new tasks of running elastic jobs (rule "grow", only the
    new tasks); withdrawals: evictions taken back (Withdrawal)."""

    bindings: list[Binding] = field(default_factory=list)
    growths: list[Binding] = field(default_factory=list)
    withdrawals: list[Withdrawal] = field(default_factory=list)
    pending: dict[JobId, PendingReason] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)
    nominations: list[Nomination] = field(default_factory=list)  # every hold in force after this cycle
    estimated_start: dict[JobId, float] = field(default_factory=dict)  # from the backfill reservation
    decisions: list[dict] = field(default_factory=list)  # audit: rule, beneficiary, victims, shares before/after
    moves: list[Move] = field(default_factory=list)  # rescheduling's moves this cycle (their evictions too)
    advice: list[dict] = field(default_factory=list)  # moves that would unblock a job (reschedule_advice)
    fair_share: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> flavor -> GPUs
    metrics: dict = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # the GPUs counted in metrics["held_gpus"]: node name -> GPU indices held at the cycle's end (every hold:
    # nominations, the backfill / drain reservation), so a map can show which GPUs are held, not only how many
    held: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the ids of the jobs whose reason in `pending` is terminal, in the order they were given one; None when the
    # engine does not say (a reader then scans `pending`); run_cycle's whole-GPU path says, so its caller need not
    # read every waiting job's reason each cycle to find the few that never start (the replay's drop)
    terminal: list[JobId] | None = None
    # a fixed point: a cycle on the state this one leaves (its snapshot with its bindings applied and nothing else
    # changed: no job came, ended or changed, no node changed) at any time before this (seconds of cluster time)
    # starts, evicts, grows, withdraws and holds nothing new (core.cycle.settled_until: shown only on the whole-GPU
    # path, after a cycle that started a job and dropped none); None: not known
    settled_until: float | None = None
