"""GPU sharing: fractional GPUs and MIG instances, placed so that whole GPUs stay whole (DESIGN section 12).

    run_cycle_sharing(snapshot, config, whole_engine, cache=None) -> CycleResult

Kinds of request (RoleInfo): whole GPUs (`gpus_per_task`, as before), one fraction of one GPU per task
(`gpu_milli` 1..999 thousandths of its compute and memory, or `gpu_memory_mib` of its memory and the same share
of its compute), or `gpus_per_task` MIG instances of one `mig_profile` per task, on one node.

GPU modes (NodeInfo.gpu_modes): "exclusive" takes whole-GPU tasks only, "shared" fractions only, "mig" its MIG
instances only, "auto" whole-GPU tasks while it holds no fraction and fractions while no whole-GPU task holds
it (the behaviour of KAI's GPU fractions and of the FGD simulator). Rules kept here and checked by the tests:
a whole-GPU task never lands on a GPU in mode shared or mig nor on one holding a fraction; the fractions on a
GPU sum to at most 1000 thousandths and their memory to at most the GPU's memory; a MIG instance holds at most
one task; a job's fractions (as GPU-equivalents, milli / 1000) and MIG instances (as resources of their own,
"<flavor>/mig-<profile>", like Kueue's nvidia.com/mig-1g.10gb) never take a queue over its limits; gangs are
all or nothing (min_available tasks of every role, or none).

One cycle: the whole-GPU engine (`whole_engine`, cycle.run_cycle) runs on a view of the snapshot where GPUs it
must not use are out of reach (mode shared / mig: unhealthy; auto GPUs holding a fraction: used), a mixed job
(whole-GPU and sharing roles) stands for its whole-GPU part (`whole_part`), and the running sharing jobs'
GPU-equivalents and MIG instances are charged to their queues (Snapshot.share_usage). Its allocate walk takes
whole-GPU and sharing jobs in ONE fair-share order (`_Walk`, Session.sharing): a pending sharing job is placed by
the placer below when the walk reaches it, its fractions counted as GPU-equivalents against the flavor's quota
and in its queue's share (as KAI does), and a fraction on a wholly free auto GPU takes that GPU out of the
whole-GPU pool; a mixed job's shares are placed right after its whole-GPU roles (`_Walk.complete`: both or
neither). After the engine: the shares held for eviction beneficiaries (`_Evictor.serve_hold`), the mixed jobs
the engine bound on held GPUs, the one-task whole jobs routed to the FGD score (fgd_whole_jobs), and the
evictions for the sharing jobs that could not start (`_Evictor`).

Fractions are placed by FGD's score (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC '23, section 4): for a node n and a task type m of the
expected workload M (with popularity p_m), the fragment F_n(m) is
  - all of n's unallocated GPU resource, if m cannot run on n at all (not enough CPU or GPU);
  - else the unallocated resource of the GPUs whose free share is below m's demand: free_g < d_m for a
    fractional m, free_g < 1 (a partly used GPU) for a whole-GPU m;
and F_n(M) = sum_m p_m F_n(m). A task goes to the (node, GPU) whose use gives the smallest increase
F_n(M | after) - F_n(M | before) (fragmentation gradient descent). M is the caller's expected workload
(Snapshot.workload: the task types of the workload's history, `workload_of`), as FGD takes its "target workload"
from the trace, or without one the mix of the tasks the snapshot holds (running and pending); by kind, GPUs and
CPU (exact, as FGD's typical pods: rounding it up to 2-core steps lost 0.25 point of allocation on the openb
122-node sample, benchmarks/RESULTS.md); the 32 most frequent types. Before the score, a tie-break-free rule keeps fractions off whole GPUs that a
pending whole-GPU task needs: a fully free auto GPU on a node whose free whole GPUs equal some pending
whole-GPU task's size is used only when nothing else fits. MIG tasks take existing instances (no
reconfiguration), best fit: the node with the fewest free instances of the profile that still fits.
Units: GPU shares in thousandths (milli), memory in MiB, CPU in millicores.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from functools import lru_cache
from typing import Callable

from .actions.victim_search import eviction_records
from .trial import release_binding
from .plugins.quota import QueueTree, borrow_refusal, never_within_quota
from .plugins.victims import Unit, victim_units
from .snapshot import (
    Binding, CycleConfig, CycleResult, JobInfo, Nomination, NodeInfo, PendingReason, RoleInfo, Snapshot,
    TaskPlacement, Withdrawal,
)

FULL = 1000  # thousandths of a GPU
MODES = ("exclusive", "shared", "mig", "auto")
MIX_TYPES = 32  # task types kept in the expected workload
MAX_VICTIM_UNITS = 64  # victim units tried per sharing preemptor (bounds the search's cost)
CPU_STEP = 1  # millicores: task CPU is rounded up to this step in the expected workload (1 = exact, as FGD)


def mig_resource(flavor: str, profile: str) -> str:
    """The quota resource name of a MIG profile on a flavor: "H200/mig-1g.18gb"."""
    return f"{flavor}/mig-{profile}"


def gpu_mode(node: NodeInfo, g: int) -> str:
    modes = node.gpu_modes
    return modes[g] if g < len(modes) else "exclusive"


@lru_cache(maxsize=4096)
def _layout(gpus: int, modes: tuple[str, ...], unhealthy: frozenset) -> tuple:
    """Per node shape, computed once: (GPUs fractions may use, GPUs whole tasks may use (exclusive first), GPUs
    out of the whole-GPU engine's reach (shared / mig), auto GPUs), healthy GPUs only in the first two."""
    mode = [modes[g] if g < len(modes) else "exclusive" for g in range(gpus)]
    frac = tuple(g for g in range(gpus) if mode[g] in ("shared", "auto") and g not in unhealthy)
    whole = tuple(sorted((g for g in range(gpus) if mode[g] in ("exclusive", "auto") and g not in unhealthy),
                         key=lambda g: (mode[g] == "auto", g)))
    off = frozenset(g for g in range(gpus) if mode[g] in ("shared", "mig"))
    auto = frozenset(g for g in range(gpus) if mode[g] == "auto")
    return frac, whole, off, auto


def layout(node: NodeInfo) -> tuple:
    return _layout(node.gpus, node.gpu_modes, node.unhealthy)


def job_shares(job: JobInfo) -> bool:
    """Whether any role of the job asks for a fraction or MIG instances."""
    return any(r.shares for r in job.roles)


def whole_part(job: JobInfo) -> JobInfo | None:
    """The part of a mixed job (some roles share, some take whole GPUs or CPU only) the whole-GPU engine sees:
    the same job with its non-sharing roles only (and their placed / held tasks); None when every role shares.
    A job without a sharing role is returned as it is."""
    if not job_shares(job):
        return job
    roles = tuple(r for r in job.roles if not r.shares)
    if not roles:
        return None
    names = {r.name for r in roles}
    return replace(job, roles=roles, placement=tuple(t for t in job.placement if t.role in names),
                   reserved=tuple(t for t in job.reserved if t.role in names))


def task_milli(role: RoleInfo, gpu_memory_mib: int) -> int:
    """The compute share (thousandths) a fractional task of `role` takes of a GPU with that much memory;
    0 when it cannot be computed (a memory request on a GPU of unknown memory)."""
    if role.gpu_milli:
        return role.gpu_milli
    if gpu_memory_mib <= 0:
        return 0
    return max(1, -(-role.gpu_memory_mib * FULL // gpu_memory_mib))


def task_memory(role: RoleInfo, gpu_memory_mib: int) -> int:
    """The GPU memory (MiB) a fractional task of `role` takes of a GPU with that much memory."""
    return role.gpu_memory_mib or role.gpu_milli * gpu_memory_mib // FULL


def has_sharing(snapshot: Snapshot, cache=None) -> bool:
    """Whether the snapshot holds a non-exclusive GPU or a sharing job (else the whole-GPU engine alone runs).
    cache: the engine's EngineCache: the answer is kept up to date there from the jobs and nodes that changed
    since its last snapshot (EngineCache.scan, the same test) instead of a scan of every one."""
    if cache is not None:
        return cache.scan(snapshot).sharing
    for n in snapshot.nodes:
        if n.mig or any(m != "exclusive" for m in n.gpu_modes):
            return True
    return any(job_shares(j) for j in snapshot.jobs)


class Usage:
    """Per node, per GPU: thousandths and memory taken by fractions; MIG instance UUIDs taken; from the running
    and preempting jobs of a snapshot, then from this cycle's placements (`add`)."""

    def __init__(self, snapshot: Snapshot):
        self.milli: dict[str, dict[int, int]] = defaultdict(dict)
        self.memory: dict[str, dict[int, int]] = defaultdict(dict)
        self.mig: set[str] = set()
        self.cpu: dict[str, int] = defaultdict(int)  # CPU / memory taken this cycle (not yet in NodeInfo)
        self.mem: dict[str, int] = defaultdict(int)
        for job in snapshot.jobs:
            for t in (*job.placement, *job.reserved):
                self.add(t, count_cpu=None)

    def add(self, t: TaskPlacement, count_cpu: RoleInfo | None) -> None:
        if t.gpu_milli:
            g = t.gpus[0]
            per = self.milli[t.node]
            per[g] = per.get(g, 0) + t.gpu_milli
            mem = self.memory[t.node]
            mem[g] = mem.get(g, 0) + t.gpu_memory_mib
        self.mig.update(t.mig)
        if count_cpu is not None:
            self.cpu[t.node] += count_cpu.cpu_milli
            self.mem[t.node] += count_cpu.memory_mib


def fgd_whole_jobs(snapshot: Snapshot, config: CycleConfig | None) -> set:
    """Ids of the pending whole-GPU jobs this cycle places by the FGD score (CycleConfig.fgd_whole): one role of
    one task, no topology or sub-group constraint, nothing held for it; only when some GPU is in mode auto."""
    if config is None or not config.fgd_whole or not any("auto" in n.gpu_modes for n in snapshot.nodes):
        return set()
    return {j.id for j in snapshot.jobs if j.state == "pending" and len(j.roles) == 1 and j.roles[0].tasks == 1
            and not j.roles[0].shares and not j.roles[0].grouped and j.roles[0].gpus_per_task > 0
            and j.topology_mode != "hard" and not j.reserved and not j.placement}


def whole_view(snapshot: Snapshot, usage: Usage, routed: set = frozenset(), walked: set = frozenset()) -> Snapshot:
    """The snapshot the whole-GPU engine sees: GPUs in mode shared / mig unhealthy, auto GPUs holding a
    fraction used, sharing jobs (and the `routed` ones, fgd_whole_jobs) left out (their CPU and memory stay
    counted in the nodes), a mixed job as its whole-GPU part (`whole_part`: the engine places those roles, the
    sharing pass the rest, all or nothing); the `walked` sharing jobs are kept whole (the allocate walk places them
    through Session.share_place, in one fair-share order with the whole-GPU jobs)."""
    nodes = []
    for n in snapshot.nodes:
        if not n.gpu_modes and not n.mig:
            nodes.append(n)
            continue
        _, _, off, auto = layout(n)
        shares = usage.milli.get(n.name)
        busy = {g for g, v in shares.items() if v > 0 and g in auto} if shares else frozenset()
        nodes.append(replace(n, unhealthy=n.unhealthy | off, used=n.used | busy) if off or busy else n)
    parts = (j if j.id in walked else whole_part(j) for j in snapshot.jobs if j.id not in routed)
    flavor_of = _flavor_of(snapshot)
    charged: dict[tuple[str, str], float] = defaultdict(float)
    for j in snapshot.jobs:
        if j.state == "running" and job_shares(j):
            shared = {r.name for r in j.roles if r.shares}
            for key, amount in _charges(j, [t for t in j.placement if t.role in shared], flavor_of).items():
                charged[(j.queue, key)] += amount
        elif j.state == "pending" and j.reserved and job_shares(j):  # shares held for an eviction's beneficiary
            for key, amount in _charges(j, [t for t in j.reserved if t.gpu_milli or t.mig], flavor_of).items():
                charged[(j.queue, key)] += amount
    return replace(snapshot, nodes=tuple(nodes), jobs=tuple(p for p in parts if p is not None),
                   share_usage=snapshot.share_usage + tuple((q, k, a) for (q, k), a in sorted(charged.items())))


# -- FGD score ----------------------------------------------------------------------------------------

def workload_of(jobs) -> tuple[tuple[int, int, int, float], ...]:
    """The task types of `jobs` (JobInfos) as Snapshot.workload: (GPU thousandths per GPU, GPUs per task, CPU
    millicores, tasks), one entry per type, most frequent first. Fractional tasks are (milli, 1); whole-GPU tasks
    (1000, gpus_per_task); MIG tasks and memory-sized fractions are left out (instances, or a share that depends
    on the GPU). CPU is rounded up to CPU_STEP."""
    counts: Counter = Counter()
    for job in jobs:
        for r in job.roles:
            if r.mig_profile:
                continue
            cpu = -(-r.cpu_milli // CPU_STEP) * CPU_STEP
            if r.gpu_milli:
                counts[(r.gpu_milli, 1, cpu)] += r.tasks
            elif r.gpu_memory_mib:
                continue  # its share depends on the GPU: not a type of its own
            elif r.gpus_per_task:
                counts[(FULL, r.gpus_per_task, cpu)] += r.tasks
    return tuple((d, k, cpu, float(c)) for (d, k, cpu), c in counts.most_common())


def workload_mix(jobs, expected=()) -> list[tuple[float, int, int, int]]:
    """The expected request mix M: [(p_m, demand milli per GPU, GPUs, CPU millicores)], p summing to 1, the
    MIX_TYPES most frequent types of `expected` (Snapshot.workload: the workload's history, as FGD takes its target
    workload from the trace) or, when that is empty, of `jobs` (workload_of)."""
    counts: Counter = Counter()
    for d, k, cpu, c in expected or workload_of(jobs):
        counts[(d, k, -(-cpu // CPU_STEP) * CPU_STEP)] += c
    top = counts.most_common(MIX_TYPES)
    total = sum(c for _, c in top) or 1
    return [(c / total, d, k, cpu) for (d, k, cpu), c in top]


def fragment(frees: tuple[int, ...], whole_free: int, cpu_free: int | None, mix) -> float:
    """F_n(M) of one node (formula in the module docstring). frees: free thousandths of each GPU fractions may
    use; whole_free: wholly free GPUs whole-GPU tasks may use (exclusive and auto); cpu_free None = unconstrained."""
    total = sum(frees)
    out = 0.0
    for p, d, k, cpu in mix:
        if cpu_free is not None and cpu > cpu_free:
            out += p * total
            continue
        if d < FULL:
            if not any(f >= d for f in frees):
                out += p * total
            else:
                out += p * sum(f for f in frees if f < d)
        else:
            if whole_free < k:
                out += p * total
            else:
                out += p * sum(f for f in frees if f < FULL)
    return out


class _NodeRoom:
    """What one node has left for sharing tasks in this cycle; `sig` is what the FGD search depends on."""

    __slots__ = ("node", "gpus", "free", "memfree", "whole_free", "cpu_free", "mem_free", "sig", "taken")

    def __init__(self, node: NodeInfo, usage: Usage, taken: set[int]):
        self.node = node
        self.taken = taken
        name = node.name
        frac, whole, _, _ = layout(node)
        shares = usage.milli.get(name) or {}
        self.gpus = [g for g in frac if g not in taken] if taken else list(frac)
        self.free = {g: FULL - shares.get(g, 0) for g in self.gpus}
        cap = node.gpu_memory_mib
        mem = usage.memory.get(name) or {}
        self.memfree = {g: cap - mem.get(g, 0) for g in self.gpus} if cap else {}
        self.whole_free = sum(1 for g in whole if g not in taken and not shares.get(g))
        self.cpu_free = node.cpu_milli - node.cpu_used - usage.cpu.get(name, 0) if node.cpu_milli else None
        self.mem_free = node.memory_mib - node.memory_used - usage.mem.get(name, 0) if node.memory_mib else None
        self._resig()

    def _resig(self) -> None:
        auto = layout(self.node)[3]
        memfree = self.memfree
        pairs = sorted((self.free[g], memfree.get(g, 0), g in auto) for g in self.gpus)
        self.sig = (self.node.flavor, tuple(pairs), self.whole_free, self.cpu_free, self.mem_free,
                    self.node.gpu_memory_mib)

    def take(self, g: int, milli: int, memory: int, role: RoleInfo) -> None:
        if self.free[g] == FULL and gpu_mode(self.node, g) == "auto":
            self.whole_free -= 1
        self.free[g] -= milli
        if self.memfree:
            self.memfree[g] -= memory
        if self.cpu_free is not None:
            self.cpu_free -= role.cpu_milli
        if self.mem_free is not None:
            self.mem_free -= role.memory_mib
        self._resig()


class Placer:
    """Free capacity for sharing tasks during one cycle, and the search (fractions by FGD, MIG best fit).
    The FGD search result of a node depends only on its `_NodeRoom.sig` and the request, so identical nodes
    (most of a cluster at the start) are scored once per request."""

    def __init__(self, snapshot: Snapshot, usage: Usage, taken_whole: dict[str, set[int]], mix, whole_needs: set[int],
                 all_nodes: bool = False):
        self.usage = usage
        self.mix = mix
        self.whole_needs = whole_needs  # GPUs per task of pending whole-GPU tasks (protect rule)
        self.nodes = [n for n in snapshot.nodes if n.schedulable]
        self.taken_whole = taken_whole  # node -> GPU indices held whole (snapshot + this cycle's bindings)
        self.rooms = {n.name: _NodeRoom(n, usage, taken_whole.get(n.name, set())) for n in self.nodes
                      if n.gpu_modes or all_nodes}
        self._frag_cache: dict = {}
        self._best_cache: dict = {}

    def _frag(self, frees: tuple[int, ...], whole_free: int, cpu_free) -> float:
        key = (frees, whole_free, cpu_free)
        value = self._frag_cache.get(key)
        if value is None:
            value = self._frag_cache[key] = fragment(frees, whole_free, cpu_free, self.mix)
        return value

    def _best_on(self, room: _NodeRoom, role: RoleInfo):
        """(protect, delta, free, memfree, auto) of the best GPU of the node for one task of `role`, or None."""
        n = room.node
        need = task_milli(role, n.gpu_memory_mib)
        if not need:
            return None
        memory = task_memory(role, n.gpu_memory_mib)
        pairs = room.sig[1]
        frees = tuple(f for f, _, _ in pairs)
        before = self._frag(frees, room.whole_free, room.cpu_free)
        after_cpu = None if room.cpu_free is None else room.cpu_free - role.cpu_milli
        best = None
        seen = set()
        for i, (free, memfree, auto) in enumerate(pairs):
            if free < need or (free, memfree, auto) in seen or (n.gpu_memory_mib and memfree < memory):
                continue
            seen.add((free, memfree, auto))
            after = tuple(sorted(frees[:i] + (free - need,) + frees[i + 1:]))
            breaks = free == FULL and auto  # a wholly free auto GPU stops being whole
            delta = self._frag(after, room.whole_free - breaks, after_cpu) - before
            protect = breaks and room.whole_free in self.whole_needs
            key = (protect, round(delta, 9), free, memfree, auto)
            if best is None or key < best:
                best = key
        return best

    def place_fraction(self, role: RoleInfo) -> TaskPlacement | None:
        """The best (node, GPU) for one fractional task of `role`, or None. Ties: node order, GPU index."""
        best, best_key = None, None
        req = (task_milli(role, 0), role.gpu_memory_mib, role.cpu_milli, role.memory_mib)
        for room in self.rooms.values():
            n = room.node
            if role.flavors and n.flavor not in role.flavors:
                continue
            if room.cpu_free is not None and room.cpu_free < role.cpu_milli:
                continue
            if room.mem_free is not None and room.mem_free < role.memory_mib:
                continue
            if not room.gpus:
                continue
            ck = (room.sig, req)
            found = self._best_cache.get(ck, False)
            if found is False:
                found = self._best_cache[ck] = self._best_on(room, role)
            if found is None:
                continue
            if best_key is None or found[:2] < best_key:
                best_key, best = found[:2], (room, found)
        if best is None:
            return None
        room, (_, _, free, memfree, auto) = best
        n = room.node
        g = next(g for g in room.gpus if room.free[g] == free and room.memfree.get(g, 0) == memfree
                 and (gpu_mode(n, g) == "auto") == auto)
        need = task_milli(role, n.gpu_memory_mib)
        memory = task_memory(role, n.gpu_memory_mib)
        return TaskPlacement(role.name, 0, n.name, (g,), gpu_milli=need, gpu_memory_mib=memory)

    def whole_gpus(self, room: _NodeRoom) -> list[int]:
        """Wholly free GPUs of the room's node a whole-GPU task may take: exclusive ones first, then auto ones."""
        n = room.node
        shares = self.usage.milli.get(n.name) or {}
        return [g for g in layout(n)[1] if g not in room.taken and not shares.get(g)]

    def place_whole(self, role: RoleInfo) -> TaskPlacement | None:
        """A one-task whole-GPU role placed by the FGD score (CycleConfig.fgd_whole): the node whose fragment
        F_n(M) grows least when `gpus_per_task` of its wholly free GPUs (exclusive first) are taken; ties: the node
        left with fewer wholly free GPUs (binpack), then node order."""
        k = role.gpus_per_task
        best, best_key = None, None
        for room in self.rooms.values():
            n = room.node
            if (role.flavors and n.flavor not in role.flavors) or room.whole_free < k:
                continue
            if room.cpu_free is not None and room.cpu_free < role.cpu_milli:
                continue
            if room.mem_free is not None and room.mem_free < role.memory_mib:
                continue
            ck = (room.sig, ("whole", k, role.cpu_milli))
            found = self._best_cache.get(ck, False)
            if found is False:
                gpus = self.whole_gpus(room)[:k]
                auto = sum(1 for g in gpus if gpu_mode(n, g) == "auto")
                frees = sorted(f for f, _, _ in room.sig[1])
                before = self._frag(tuple(frees), room.whole_free, room.cpu_free)
                after = list(frees)
                for _ in range(auto):
                    after.remove(FULL)
                after_cpu = None if room.cpu_free is None else room.cpu_free - role.cpu_milli
                found = self._best_cache[ck] = (round(self._frag(tuple(after), room.whole_free - k, after_cpu) - before, 9),
                                                room.whole_free - k)
            if best_key is None or found < best_key:
                best_key, best = found, room
        if best is None:
            return None
        return TaskPlacement(role.name, 0, best.node.name, tuple(sorted(self.whole_gpus(best)[:k])))

    def commit(self, t: TaskPlacement, role: RoleInfo, sign: int = 1) -> None:
        """Record a placed (sign 1) or withdrawn (sign -1) task in usage and the node's room."""
        if sign > 0:
            self.usage.add(t, count_cpu=role)
        else:
            _unadd(self.usage, t, role)
        room = self.rooms.get(t.node)
        if room is not None and t.gpu_milli:
            if sign > 0:
                room.take(t.gpus[0], t.gpu_milli, t.gpu_memory_mib, role)
            else:
                self.rooms[t.node] = _NodeRoom(room.node, self.usage, self.taken_whole.get(t.node, set()))
        elif room is not None and not t.mig:  # a whole-GPU task (fgd_whole)
            taken = self.taken_whole.setdefault(t.node, set())
            if sign > 0:
                taken.update(t.gpus)
            else:
                taken.difference_update(t.gpus)
            self.rooms[t.node] = _NodeRoom(room.node, self.usage, taken)

    def place_mig(self, role: RoleInfo) -> TaskPlacement | None:
        """`gpus_per_task` free instances of the role's profile on one node: the node with the fewest free
        instances of the profile that still has enough (best fit). None when no node has them."""
        best, best_free = None, None
        for n in self.nodes:
            if (role.flavors and n.flavor not in role.flavors) or not n.mig:
                continue
            if n.cpu_milli and n.cpu_milli - n.cpu_used - self.usage.cpu.get(n.name, 0) < role.cpu_milli:
                continue
            if n.memory_mib and n.memory_mib - n.memory_used - self.usage.mem.get(n.name, 0) < role.memory_mib:
                continue
            free = [m for m in n.mig if m.profile == role.mig_profile and m.uuid not in self.usage.mig
                    and m.gpu not in n.unhealthy and gpu_mode(n, m.gpu) == "mig"]
            if len(free) < role.gpus_per_task:
                continue
            if best_free is None or len(free) < best_free:
                best_free = len(free)
                chosen = free[: role.gpus_per_task]
                best = TaskPlacement(role.name, 0, n.name, tuple(sorted({m.gpu for m in chosen})),
                                     mig=tuple(m.uuid for m in chosen))
        return best

    def fragmentation(self) -> dict[str, float]:
        """Per flavor: the FGD measure, expected GPUs (in GPU units) unusable by the request mix, F(M) / 1000."""
        out: dict[str, float] = defaultdict(float)
        for room in self.rooms.values():
            if room.gpus:
                frees = tuple(f for f, _, _ in room.sig[1])
                out[room.node.flavor] += self._frag(frees, room.whole_free, room.cpu_free) / FULL
        return dict(out)


def _flavor_of(snapshot: Snapshot) -> dict[str, str]:
    return {n.name: n.flavor for n in snapshot.nodes}


def run_cycle_sharing(snapshot: Snapshot, config: CycleConfig | None, whole_engine: Callable, *, cache=None
                      ) -> CycleResult:
    """One cycle with GPU sharing (module docstring): the whole-GPU engine on `whole_view`, then the pending
    sharing jobs. Returns the engine's CycleResult with the sharing jobs' bindings and pending reasons added
    and metrics["sharing"] = {allocated_gpu_equivalents, shared_gpus, fgd_fragmentation {flavor: GPUs},
    mig_instances, mig_used}. A mixed job (whole-GPU and sharing roles) is one gang: the engine places its
    whole-GPU roles (`whole_part`), this pass its sharing roles right after the engine, before any other
    sharing job; when they do not fit (or its queue has no room for them) the engine's binding is withdrawn
    and the job waits whole. The snapshot is not mutated."""
    usage = Usage(snapshot)
    routed = fgd_whole_jobs(snapshot, config)
    limits = QueueTree(snapshot)  # static limits only: a sharing gang above a limit on its chain never starts
    never = {j.id: r for j in snapshot.jobs if j.state == "pending" and job_shares(j) and limits.known(j.queue)
             for r in (limit_never_fits(j, limits, snapshot.nodes),) if r is not None}
    flavor_of = _flavor_of(snapshot)
    taken_whole: dict[str, set[int]] = defaultdict(set)
    for n in snapshot.nodes:
        if n.used:
            taken_whole[n.name].update(n.used)
    jobs_by_id = {j.id: j for j in snapshot.jobs}
    whole_jobs = {j.id: j for j in snapshot.jobs if not job_shares(j)}
    for job in snapshot.jobs:  # held GPUs of whole-GPU tasks are not free for fractions either
        for t in job.reserved:
            if not t.gpu_milli and not t.mig:
                taken_whole[t.node].update(t.gpus)
    whole_needs = {r.gpus_per_task for j in snapshot.jobs if j.state == "pending" and j.id not in routed
                   for r in j.roles if r.gpus_per_task and not r.shares}
    placer = Placer(snapshot, usage, taken_whole, workload_mix(snapshot.jobs, snapshot.workload), whole_needs, all_nodes=bool(routed))
    walked = {j.id for j in snapshot.jobs if j.state == "pending" and j.id not in routed and j.id not in never
              and job_shares(j) and whole_part(j) is None and not _held_shares(j)}
    walk = _Walk(snapshot, placer, flavor_of)
    result = whole_engine(whole_view(snapshot, usage, routed | set(never), walked), config, cache=cache,
                          share_hook=walk.hook)
    result.pending.update(never)  # left out of the engine's view and of every pass below
    walk.sync()  # the engine's bindings, growths and holds on the placer's ledger

    # quotas: whole usage from the engine's view, plus this cycle's bindings and the running fractions
    queues = QueueTree(replace(snapshot, jobs=tuple(whole_jobs.values())))
    for b in result.bindings:
        job = jobs_by_id[b.job_id]
        for key, amount in _charges(job, b.tasks, flavor_of).items():
            queues.charge(job.queue, key, amount)
    for n in snapshot.nodes:
        for m in n.mig:
            queues.capacity[mig_resource(n.flavor, m.profile)] += 1
    for job in snapshot.jobs:
        if job.state == "running" and job_shares(job) and queues.known(job.queue):
            for key, amount in _charges(job, job.placement, flavor_of).items():
                queues.charge(job.queue, key, amount)

    engine_bound = {b.job_id: b for b in result.bindings}
    mixed_started = [jobs_by_id[i] for i in engine_bound if job_shares(jobs_by_id[i]) and i not in walked
                     and i not in walk.completed]  # bound on its held GPUs (allocate._bind_exactly): shares now
    by_priority = sorted((j for j in snapshot.jobs if j.state == "pending" and j.id not in never
                          and (j.id in routed or (job_shares(j) and whole_part(j) is None))),
                         key=lambda j: (-j.priority, j.submit_time, str(j.id)))
    evictor = _Evictor(snapshot, config, placer, queues, flavor_of, result)
    for job in [j for j in by_priority if _held_shares(j)]:  # holders: the shares held for them since a cycle
        evictor.serve_hold(job)
    # then: the mixed jobs' shares, the routed jobs, the holds dropped, and the sharing jobs the walk could not
    # start (tried again only when a mixed job gave its whole GPUs back, else straight to the eviction search)
    failed = {j.id for j in by_priority if j.id in walked and getattr(result.pending.get(j.id), "code", "")
              in ("no_share", "quota")}
    order = [j for j in by_priority if j.id not in evictor.served and (j.id not in walked or j.id in failed)]
    retry = False
    for job in mixed_started + order:
        if job.id in failed and not retry:
            evictor.evict_for(job)
            continue
        if not queues.known(job.queue):
            result.pending[job.id] = PendingReason("unknown_queue", f"queue {job.queue!r} does not exist", True)
            continue
        if job.not_before is not None and job.not_before > snapshot.now:
            result.pending[job.id] = PendingReason("backoff", "waiting before its next attempt")
            continue
        head = engine_bound.get(job.id)  # a mixed job: its whole-GPU roles, placed by the engine
        tasks, why = _place_job(placer, job, skip={r.name for r in job.roles if not r.shares} if head else ())
        if tasks is not None:
            why = _refuse_over_quota(placer, queues, job, tasks, flavor_of)
            tasks = tasks if why is None else None
        if tasks is None:
            if head is not None:
                _withdraw_whole(placer, queues, result, job, head, flavor_of)
                retry = True
            elif job_shares(job) and evictor.evict_for(job):
                continue  # victims chosen: its shares are held for it (a Nomination)
            result.pending[job.id] = why
            continue
        for key, amount in _charges(job, tasks, flavor_of).items():
            queues.charge(job.queue, key, amount)
        if head is not None:
            i = result.bindings.index(head)
            result.bindings[i] = replace(head, tasks=head.tasks + tuple(tasks))
        else:
            result.bindings.append(Binding(job_id=job.id, tasks=tuple(tasks), domain="", tier=0,
                                           rule="share" if job_shares(job) else "fgd"))
        result.pending.pop(job.id, None)
    evictor.withdraw_orphans()
    result.metrics = dict(result.metrics)
    result.metrics["sharing"] = sharing_metrics(snapshot, usage, placer)
    result.metrics["pending_jobs"] = len(result.pending)
    return result


class _Walk:
    """The sharing placer inside the allocate walk (Session.share_place): a sharing job is placed when the
    fair-share order reaches it, among the whole-GPU jobs, on the capacity the walk has left. The placer's ledger
    follows the cycle's ClusterState (`sync`: GPUs the engine took whole, CPU and memory); a placed fraction takes
    its auto GPU out of the whole-GPU pool (and its CPU and memory) in the state; the queue is charged its
    GPU-equivalents (and MIG instances) in the walk's own QueueTree, so its fair-share order counts them."""

    def __init__(self, snapshot: Snapshot, placer: Placer, flavor_of: dict[str, str]):
        self.snapshot, self.placer, self.flavor_of = snapshot, placer, flavor_of
        self.state = self.queues = None
        self.jobs = {j.id: j for j in snapshot.jobs if j.state == "pending" and job_shares(j)}
        self.mixed = {i for i, j in self.jobs.items() if whole_part(j) is not None}  # mixed pending jobs
        self.completed: set = set()  # mixed jobs whose shares the walk placed with their whole-GPU roles
        self.nodes = {n.name: n for n in snapshot.nodes if n.name in placer.rooms or n.mig}
        self.index: dict[int, NodeInfo] = {}  # the state's node index -> those nodes

    def hook(self, session):
        """share_hook of cycle.run_cycle: keep the session's state and queues; returns the placement function."""
        self.state, self.queues = session.state, session.queues
        self.index = {session.state.node_index[name]: n for name, n in self.nodes.items()
                      if name in session.state.node_index}
        session.state.touched = set(self.index)  # every node synced at the first placement, then those changed
        for n in self.snapshot.nodes:  # MIG resources' limits bind in the walk's QueueTree too
            for m in n.mig:
                session.queues.capacity[mig_resource(n.flavor, m.profile)] += 1
        return self

    def sync(self) -> None:
        """Bring the placer's ledger to the state: GPUs not free there are held whole (unless they hold a share),
        CPU and memory taken this cycle are the state's."""
        state = self.state
        if state is None or not state.touched:
            return
        placer, usage = self.placer, self.placer.usage
        touched, state.touched = state.touched, set()
        for k in touched:
            node = self.index.get(k)
            if node is None:
                continue
            name = node.name
            free = set(state.free[k])
            shares = usage.milli.get(name) or {}
            # a GPU a job holds whole at snapshot time stays held whole even when a share is held on it too (a
            # sharing beneficiary's hold on the GPU of a whole-GPU victim still in its grace period)
            placer.taken_whole[name] = {g for g in layout(node)[1] if g not in free and not shares.get(g)} | node.used
            if node.cpu_milli and state.cpu_free[k] is not None:
                usage.cpu[name] = node.cpu_milli - node.cpu_used - state.cpu_free[k]
            if node.memory_mib and state.mem_free[k] is not None:
                usage.mem[name] = node.memory_mib - node.memory_used - state.mem_free[k]
            room = placer.rooms.get(name)
            if room is not None:
                placer.rooms[name] = _NodeRoom(room.node, usage, placer.taken_whole[name])

    def place(self, job: JobInfo):
        """Binding (applied and charged) or PendingReason ("no_share", "quota") for a pending sharing job."""
        self.sync()
        tasks, why = _place_job(self.placer, job)
        if tasks is None:
            return why
        why = _refuse_over_quota(self.placer, self.queues, job, tasks, self.flavor_of)
        if why is not None:
            return why
        self._take(job, tasks)
        return Binding(job_id=job.id, tasks=tuple(tasks), domain="", tier=0, rule="share")

    def _take(self, job: JobInfo, tasks) -> None:
        """Apply placed shares to the walk: a fraction's auto GPU leaves the whole pool (if still in it), CPU
        and memory are taken, the queue is charged the GPU-equivalents (and MIG instances)."""
        state, roles = self.state, {r.name: r for r in job.roles}
        for t in tasks:
            k = state.node_index[t.node]
            g = t.gpus[0] if t.gpu_milli else None
            state.take(k, (g,) if g is not None and g in state.free[k] else (), roles[t.role].cpu_milli,
                       roles[t.role].memory_mib)
        for key, amount in _charges(job, tasks, self.flavor_of).items():
            self.queues.charge(job.queue, key, amount)

    def complete(self, part: JobInfo, head: Binding):
        """A mixed job whose whole-GPU roles (`part`, whole_part) the walk has just placed (`head`, applied and
        charged): its sharing roles now, the combined Binding; else `head` undone (GPUs, CPU, memory, charge)
        and why ("no_share", "quota")."""
        job = self.jobs[part.id]
        self.sync()
        tasks, why = _place_job(self.placer, job, skip={r.name for r in job.roles if not r.shares})
        if tasks is not None:
            why = _refuse_over_quota(self.placer, self.queues, job, tasks, self.flavor_of)
            tasks = tasks if why is None else None
        if tasks is None:
            release_binding(self.state, part, head)
            for t in head.tasks:
                self.queues.charge(job.queue, self.flavor_of.get(t.node, ""), -len(t.gpus))
            return why
        self._take(job, tasks)
        self.completed.add(job.id)
        return replace(head, tasks=head.tasks + tuple(tasks))


def _held_shares(job: JobInfo) -> tuple[TaskPlacement, ...]:
    """The shares (fractions, MIG instances) held for a pending job: the tasks of its Nomination."""
    return tuple(t for t in job.reserved if t.gpu_milli or t.mig)


def _over_quota(queues: QueueTree, job: JobInfo, tasks, flavor_of) -> tuple | None:
    """(resource, binding queue, room left, the message or None) of the first limit the tasks' charges would pass,
    or of the first resource a non-preemptible job would borrow (plugins.quota.borrow_refusal, the whole-GPU
    allocator's rule: such a job could never be reclaimed), with the refusal's message then; None when they fit."""
    for key, amount in _charges(job, tasks, flavor_of).items():
        room, who = queues.headroom(job.queue, key)
        if amount > room + 1e-9:
            return key, who, room, None
        if not job.preemptible:
            why = borrow_refusal(queues, job.queue, key, amount,
                                 unit="MIG instances" if "/mig-" in key else "GPU-equivalents")
            if why is not None:
                return key, who, room, why
    return None


def _refuse_over_quota(placer: Placer, queues: QueueTree, job: JobInfo, tasks, flavor_of) -> PendingReason | None:
    """The "quota" reason when the tentatively placed `tasks` would pass a limit of the job's queue chain, their
    placement undone on the placer's ledger; None when they fit."""
    over = _over_quota(queues, job, tasks, flavor_of)
    if over is None:
        return None
    roles = {r.name: r for r in job.roles}
    for t in tasks:
        placer.commit(t, roles[t.role], -1)
    key, who, room, why = over
    return PendingReason("quota", why or f"queue {who} limit of {key} reached ({max(room, 0):g} left)")


class _Evictor:
    """Preemption and reclaim for pending sharing jobs (DESIGN section 5, with GPU shares): victims are running
    jobs holding fractions or MIG instances (and whole-GPU jobs on auto GPUs, whose GPUs fractions may take once
    free), in least-work-lost order (plugins.victims.victim_units). What an eviction frees is counted on the
    placer's own ledger: a fraction frees its share of its GPU (the GPU is whole again only when no share is
    left on it), a MIG task its instances, a whole-GPU task its GPUs. preempt: same queue, strictly lower
    priority; reclaim: another queue, some level of its chain outside the beneficiary's is above its entitlement
    of the resource (GPU-equivalents per flavor, or the MIG resource) and none goes below its guarantee; the
    beneficiary stays within its own entitlement. The fewest victims in order, then fill-back (victims not
    needed given back). The beneficiary's shares are held for it (a Nomination: `serve_hold` binds it on them
    once its victims have released them)."""

    def __init__(self, snapshot: Snapshot, config: CycleConfig | None, placer: Placer, queues: QueueTree,
                 flavor_of: dict[str, str], result: CycleResult):
        self.config = config or CycleConfig()
        self.placer, self.queues, self.flavor_of, self.result = placer, queues, flavor_of, result
        self.snapshot = snapshot
        self.served: set = set()  # holders bound or kept holding this cycle
        self.evicted = {e.job_id for e in result.evictions}
        self.budget = self.config.max_preemptors - len(result.decisions)
        self._units: list[Unit] | None = None  # built at the first search (most cycles need none)
        self.lowest: dict[str, int] = {}  # queue -> lowest priority of a preemptible running job (preempt's screen)
        for j in snapshot.jobs:
            if j.state == "running" and j.preemptible:
                self.lowest[j.queue] = min(self.lowest.get(j.queue, j.priority), j.priority)
        self.waiting = {j.evicted_for for j in snapshot.jobs if j.state == "preempting" and j.evicted_for is not None}

    @property
    def units(self) -> list[Unit]:
        """Victim units (plugins.victims.victim_units) of the running jobs holding shares or an auto GPU."""
        if self._units is None:
            auto = {n.name: layout(n)[3] for n in self.snapshot.nodes if n.gpu_modes}
            running = [j for j in self.snapshot.jobs if j.state == "running" and j.id not in self.evicted
                       and (job_shares(j) or any(set(t.gpus) & auto.get(t.node, frozenset()) for t in j.placement))]
            self._units = victim_units(running)
        return self._units

    # -- the placer's ledger ----------------------------------------------------------------------
    def _free(self, job: JobInfo, tasks, sign: int) -> None:
        """Take a running job's tasks off the placer's ledger (sign -1: evicted) or put them back (+1), and its
        queue's charge with them."""
        placer, usage = self.placer, self.placer.usage
        roles = {r.name: r for r in job.roles}
        nodes = set()
        for t in tasks:
            if t.gpu_milli or t.mig:
                if sign > 0:
                    usage.add(t, count_cpu=None)
                else:
                    _unshare(usage, t)
            else:
                taken = placer.taken_whole.setdefault(t.node, set())
                if sign > 0:
                    taken.update(t.gpus)
                else:
                    taken.difference_update(t.gpus)
            role = roles.get(t.role)
            if role is not None:  # running tasks' CPU and memory are in the node's *_used: freed here
                usage.cpu[t.node] += sign * role.cpu_milli
                usage.mem[t.node] += sign * role.memory_mib
            nodes.add(t.node)
        for name in nodes:
            room = placer.rooms.get(name)
            if room is not None:
                placer.rooms[name] = _NodeRoom(room.node, usage, placer.taken_whole.get(name, set()))
        if self.queues.known(job.queue):
            for key, amount in _charges(job, tasks, self.flavor_of).items():
                self.queues.charge(job.queue, key, sign * amount)

    # -- rules ------------------------------------------------------------------------------------
    def _reclaimable(self, job: JobInfo, unit: Unit) -> bool:
        queues = self.queues
        shared = set(queues.chain(job.queue))
        levels = [q for q in queues.chain(unit.job.queue) if q not in shared]
        if not levels:
            return False
        for key, amount in _charges(unit.job, unit.tasks, self.flavor_of).items():
            borrowing = False
            for q in levels:
                info = queues.queues.get(q)
                quota = info.quotas.get(key) if info else None
                used = queues.usage[q][key]
                if used - amount < (quota.guarantee if quota else 0) - 1e-9:
                    return False
                if used > queues.entitlement(q, key) + 1e-9:
                    borrowing = True
            if not borrowing:
                return False
        return True

    def _anyone_borrowing(self, queue: str) -> bool:
        """Whether a queue other than `queue` (and its ancestors) uses more of some resource than it is entitled
        to (reclaim's screen)."""
        queues = self.queues
        mine = set(queues.chain(queue))
        for q, used in queues.usage.items():
            if q not in mine and q in queues.queues:
                if any(v > queues.entitlement(q, key) + 1e-9 for key, v in used.items() if v > 0):
                    return True
        return False

    def _entitled(self, job: JobInfo, tasks) -> bool:
        return all(self.queues.entitlement_room(job.queue, key)[0] >= amount - 1e-9
                   for key, amount in _charges(job, tasks, self.flavor_of).items())

    # -- the search -------------------------------------------------------------------------------
    def evict_for(self, job: JobInfo) -> bool:
        """Choose victims for a pending sharing job that did not fit (class docstring); on success the evictions,
        the Nomination and an audit decision are added to the result and True returned."""
        if self.budget <= 0 or not (self.config.preemption or self.config.reclaim) or not self.queues.known(job.queue):
            return False
        may_preempt = self.config.preemption and self.lowest.get(job.queue, job.priority) < job.priority
        may_reclaim = self.config.reclaim and not self.queues.open_world and self._anyone_borrowing(job.queue)
        if not (may_preempt or may_reclaim):
            return False  # the cheap screen (as actions/evict.py): no search
        self.budget -= 1  # at most max_preemptors searches per cycle, with the engine's
        rules = []
        if may_preempt:
            rules.append(("preempt", lambda u: u.job.queue == job.queue and u.job.priority < job.priority, None))
        if may_reclaim:
            rules.append(("reclaim", lambda u: u.job.queue != job.queue and self._reclaimable(job, u),
                          self._entitled))
        usage = {q: dict(u) for q, u in self.queues.usage.items()}  # before any victim is taken (the audit)
        for rule, allows, extra in rules:
            found = self._search(job, allows, extra)
            if found is not None:
                tasks, kept = found
                self._record(job, rule, tasks, kept, usage)
                return True
        return False

    def _try(self, job: JobInfo, extra):
        tasks, _ = _place_job(self.placer, job)
        if tasks is None:
            return None
        if _over_quota(self.queues, job, tasks, self.flavor_of) is None and (extra is None or extra(job, tasks)):
            return tasks
        self._unplace(job, tasks)
        return None

    def _unplace(self, job: JobInfo, tasks) -> None:
        roles = {r.name: r for r in job.roles}
        for t in tasks:
            self.placer.commit(t, roles[t.role], -1)

    def _search(self, job: JobInfo, allows, extra):
        chosen: list[Unit] = []
        taken: set = set()
        placed = None
        tried = 0
        for unit in self.units:
            if unit.job.id in self.evicted or unit.job.id == job.id:
                continue
            tasks = tuple(t for t in unit.tasks if (unit.job.id, t.role, t.index) not in taken)
            if not tasks or not allows(unit):
                continue
            tried += 1
            if tried > MAX_VICTIM_UNITS:
                break
            unit = Unit(unit.job, tasks, whole=unit.whole)
            self._free(unit.job, unit.tasks, -1)
            taken.update((unit.job.id, t.role, t.index) for t in unit.tasks)
            chosen.append(unit)
            placed = self._try(job, extra)
            if placed is not None:
                break
        if placed is None:
            for unit in reversed(chosen):
                self._free(unit.job, unit.tasks, 1)
            return None
        self._unplace(job, placed)
        kept = list(chosen)
        for unit in reversed(chosen):  # fill-back: give back the victims the placement does not need
            if not unit.whole and any(u.whole and u.job.id == unit.job.id for u in kept):
                continue  # the rest of that gang goes anyway
            self._free(unit.job, unit.tasks, 1)
            again = self._try(job, extra)
            if again is not None:
                self._unplace(job, again)
                kept.remove(unit)
                continue
            self._free(unit.job, unit.tasks, -1)
        final = self._try(job, extra)
        if final is None:  # cannot happen: the last state tried placed it; be safe
            for unit in kept:
                self._free(unit.job, unit.tasks, 1)
            return None
        return final, kept

    def _record(self, job: JobInfo, rule: str, tasks, kept: list[Unit], usage: dict) -> None:
        result, queues = self.result, self.queues
        evs = eviction_records(kept, rule, job)
        freed: dict = defaultdict(set)
        victims = {}
        for unit in kept:
            freed[unit.job.id].update((t.role, t.index) for t in unit.tasks)
            victims[unit.job.id] = unit.job
        for e in evs:  # a gang evicted whole (never left below its minimum): its other tasks leave too
            if not e.tasks:
                victim = victims[e.job_id]
                rest = tuple(t for t in victim.placement if (t.role, t.index) not in freed[e.job_id])
                if rest:
                    self._free(victim, rest, -1)
        # the victims' whole GPUs are free for the search alone: until the victims release them (grace period) no
        # share but the beneficiary's hold goes there (its hold is bound by serve_hold once they are released)
        placer = self.placer
        for unit in kept:
            victim = victims[unit.job.id]
            for t in victim.placement:
                if t.gpus and not t.gpu_milli and not t.mig:
                    placer.taken_whole.setdefault(t.node, set()).update(t.gpus)
                    room = placer.rooms.get(t.node)
                    if room is not None:
                        placer.rooms[t.node] = _NodeRoom(room.node, placer.usage, placer.taken_whole[t.node])
        before = {q: usage.get(q, {}) for q in sorted({job.queue} | {u.job.queue for u in kept})}
        for key, amount in _charges(job, tasks, self.flavor_of).items():
            queues.charge(job.queue, key, amount)
        self.evicted.update(e.job_id for e in evs)
        result.evictions.extend(evs)
        result.nominations.append(Nomination(job_id=job.id, tasks=tuple(tasks), rule="hold"))
        result.pending[job.id] = PendingReason(
            "nominated", f"{rule}: {len(evs)} victim(s) releasing GPU shares for it (grace period); it starts on "
                         "them next")
        result.decisions.append({"rule": rule, "beneficiary": job.id, "queue": job.queue,
                                 "victims": [{"job": e.job_id, "tasks": list(e.tasks), "gpus": e.gpus} for e in evs],
                                 "usage_before": before,
                                 "usage_after": {q: dict(queues.usage.get(q, {})) for q in before}})

    # -- holds ------------------------------------------------------------------------------------
    def serve_hold(self, job: JobInfo) -> None:
        """A pending sharing job holding shares (an earlier cycle's Nomination): bound on them when every one is
        free again (its victims have released them); else held one more cycle while a victim is still releasing
        for it; else (nobody releases for it, a node left) the hold is dropped and it is placed as any job."""
        placer, usage = self.placer, self.placer.usage
        held = _held_shares(job)
        roles = {r.name: r for r in job.roles}
        for t in held:
            _unshare(usage, t)
        self._refresh({t.node for t in held})
        nodes = {n.name: n for n in placer.nodes}
        fits = all(t.role in roles and t.node in nodes and self._fits(nodes[t.node], t, roles[t.role]) for t in held)
        known = self.queues.known(job.queue)
        if fits and known and _over_quota(self.queues, job, held, self.flavor_of) is None:
            for t in held:
                placer.commit(t, roles[t.role])
            for key, amount in _charges(job, held, self.flavor_of).items():
                self.queues.charge(job.queue, key, amount)
            self.result.bindings.append(Binding(job_id=job.id, tasks=held, domain="", tier=0, rule="share"))
            self.result.pending.pop(job.id, None)
            self.served.add(job.id)
        elif job.id in self.waiting and all(t.node in nodes for t in held) and known:
            for t in held:
                usage.add(t, count_cpu=None)
            self._refresh({t.node for t in held})
            for key, amount in _charges(job, held, self.flavor_of).items():
                self.queues.charge(job.queue, key, amount)
            self.result.nominations.append(Nomination(job_id=job.id, tasks=held, rule="hold"))
            self.result.pending[job.id] = PendingReason("nominated", "waiting for its victims to release the GPU "
                                                                     "shares held for it")
            self.served.add(job.id)

    def _refresh(self, names) -> None:
        placer = self.placer
        for name in names:
            room = placer.rooms.get(name)
            if room is not None:
                placer.rooms[name] = _NodeRoom(room.node, placer.usage, placer.taken_whole.get(name, set()))

    def _fits(self, node: NodeInfo, t: TaskPlacement, role: RoleInfo) -> bool:
        usage = self.placer.usage
        if node.cpu_milli and node.cpu_milli - node.cpu_used - usage.cpu.get(node.name, 0) < role.cpu_milli:
            return False
        if node.memory_mib and node.memory_mib - node.memory_used - usage.mem.get(node.name, 0) < role.memory_mib:
            return False
        if t.mig:
            have = {m.uuid for m in node.mig if m.gpu not in node.unhealthy and gpu_mode(node, m.gpu) == "mig"}
            return all(u in have and u not in usage.mig for u in t.mig)
        g = t.gpus[0]
        if g in node.unhealthy or g in self.placer.taken_whole.get(node.name, ()) or gpu_mode(node, g) not in (
                "shared", "auto"):
            return False
        if (usage.milli.get(node.name) or {}).get(g, 0) + t.gpu_milli > FULL:
            return False
        cap = node.gpu_memory_mib
        return not cap or (usage.memory.get(node.name) or {}).get(g, 0) + t.gpu_memory_mib <= cap

    def withdraw_orphans(self) -> None:
        """Evictions of sharing jobs still in their grace period whose beneficiary holds nothing after this cycle
        (it left, started elsewhere, or its hold was dropped): taken back, the victim runs on. The engine's own
        withdrawals of a mixed job held for a sharing beneficiary are dropped."""
        result = self.result
        holding = {n.job_id for n in result.nominations}
        jobs = {j.id: j for j in self.snapshot.jobs}
        result.withdrawals = [w for w in result.withdrawals if w.beneficiary not in holding]
        done = {w.job_id for w in result.withdrawals}
        for job in self.snapshot.jobs:
            if (job.state != "preempting" or job.evicted_for is None or job.id in done or not job_shares(job)
                    or job.evicted_for in holding):
                continue
            owner = jobs.get(job.evicted_for)
            name = (owner.name or owner.id) if owner is not None else job.evicted_for
            result.withdrawals.append(Withdrawal(
                job_id=job.id, tasks=tuple(sorted((t.role, t.index) for t in job.placement)),
                beneficiary=job.evicted_for,
                message=f"eviction of {job.name or job.id} withdrawn: its beneficiary {name} holds no GPU shares "
                        f"now; it keeps running"))


def _withdraw_whole(placer: Placer, queues: QueueTree, result: CycleResult, job: JobInfo, head: Binding,
                    flavor_of: dict[str, str]) -> None:
    """Take back the engine's binding of a mixed job's whole-GPU roles (its sharing roles did not fit): its GPUs,
    CPU and memory free again for the sharing pass, its queue uncharged, the job pending."""
    roles = {r.name: r for r in job.roles}
    result.bindings.remove(head)
    for t in head.tasks:
        placer.taken_whole.get(t.node, set()).difference_update(t.gpus)
        _unadd(placer.usage, replace(t, gpus=(), mig=()), roles[t.role])
        queues.charge(job.queue, flavor_of.get(t.node, ""), -len(t.gpus))
        room = placer.rooms.get(t.node)
        if room is not None:
            placer.rooms[t.node] = _NodeRoom(room.node, placer.usage, placer.taken_whole.get(t.node, set()))


def _charges(job: JobInfo, tasks, flavor_of) -> dict[str, float]:
    """Quota charges of a sharing job's tasks: GPU-equivalents per flavor, instances per MIG resource."""
    roles = {r.name: r for r in job.roles}
    out: dict[str, float] = defaultdict(float)
    for t in tasks:
        role = roles.get(t.role)
        flavor = flavor_of.get(t.node, "")
        if role is not None and role.mig_profile:
            out[mig_resource(flavor, role.mig_profile)] += len(t.mig)
        elif t.gpu_milli:
            out[flavor] += t.gpu_milli / FULL
        else:
            out[flavor] += len(t.gpus)
    return out


def _unshare(usage: Usage, t: TaskPlacement) -> None:
    """Take a task's fraction or MIG instances off `usage` (the inverse of Usage.add with count_cpu=None)."""
    if t.gpu_milli:
        g = t.gpus[0]
        usage.milli[t.node][g] = usage.milli[t.node].get(g, 0) - t.gpu_milli
        usage.memory[t.node][g] = usage.memory[t.node].get(g, 0) - t.gpu_memory_mib
    usage.mig.difference_update(t.mig)


def _unadd(usage: Usage, t: TaskPlacement, role: RoleInfo) -> None:
    if t.gpu_milli:
        g = t.gpus[0]
        usage.milli[t.node][g] -= t.gpu_milli
        usage.memory[t.node][g] -= t.gpu_memory_mib
    usage.mig.difference_update(t.mig)
    usage.cpu[t.node] -= role.cpu_milli
    usage.mem[t.node] -= role.memory_mib


def _place_job(placer: Placer, job: JobInfo, skip=()) -> tuple[list[TaskPlacement] | None, PendingReason | None]:
    """Place min_available tasks of every role (all or nothing), then the rest while they fit; the roles named in
    `skip` are left out (a mixed job's whole-GPU roles, placed by the engine)."""
    placed: list[TaskPlacement] = []
    roles = {r.name: r for r in job.roles}
    for role in job.roles:
        if role.name in skip:
            continue
        for index in range(role.tasks):
            if role.shares:
                t = placer.place_mig(role) if role.mig_profile else placer.place_fraction(role)
            elif len(job.roles) == 1 and role.tasks == 1:
                t = placer.place_whole(role)  # a job routed here by CycleConfig.fgd_whole
            else:
                t = None  # whole-GPU roles of a mixed job are the engine's (never reached: `skip`)
            if t is None:
                if index < role.effective_min:
                    for done in placed:
                        placer.commit(done, roles[done.role], -1)
                    what = (f"{role.gpus_per_task} free MIG instance(s) {role.mig_profile} on one node"
                            if role.mig_profile else f"a GPU share of {_ask(role)}" if role.shares
                            else f"{role.gpus_per_task} wholly free GPU(s)")
                    if index == 0:
                        text = f"role {role.name}: no node has {what}"
                    else:  # some fit, the gang needs more: say how many
                        kind = (f"tasks of {role.gpus_per_task} MIG instance(s) {role.mig_profile}" if role.mig_profile
                                else f"GPU shares of {_ask(role)}" if role.shares
                                else f"tasks of {role.gpus_per_task} wholly free GPU(s)")
                        text = (f"role {role.name}: needs {role.effective_min} {kind} at once, "
                                f"only {index} fit now")
                    return None, PendingReason("no_share", text)
                break
            t = replace(t, index=index)
            placer.commit(t, role)
            placed.append(t)
    return placed, None


def limit_never_fits(job: JobInfo, queues: QueueTree, nodes) -> PendingReason | None:
    """The terminal reason of a sharing job whose minimum gang (min_available tasks of every role) charges more
    than a queue limit on its chain can ever allow, whatever flavors its roles land on: fractions as
    GPU-equivalents (thousandths / 1000; a memory request at its smallest share, on the flavor's largest GPU),
    MIG instances per "<flavor>/mig-<profile>", whole GPUs as GPUs. Flavors considered per role: those of
    nodes that could hold it (a GPU in mode shared / auto for fractions, an instance of the profile for MIG).
    None when some placement stays within every limit, or when a role has no such flavor (another reason).
    A non-preemptible job may not borrow (plugins.quota.borrow_refusal): for it the smallest entitlement along the
    chain (QueueTree.static_entitlement) bounds each charge too, and a gang above it on every placement gets the
    terminal never_fits_queue_quota (plugins.quota.never_within_quota's words), as the whole-GPU allocator's."""
    memory: dict[str, int] = {}  # flavor -> its largest GPU memory among nodes with shared / auto GPUs
    profiles: dict[str, set[str]] = defaultdict(set)
    whole: set[str] = set()
    for n in nodes:
        if any(gpu_mode(n, g) in ("shared", "auto") for g in range(n.gpus)):
            memory[n.flavor] = max(memory.get(n.flavor, 0), n.gpu_memory_mib)
        profiles[n.flavor].update(m.profile for m in n.mig)
        whole.add(n.flavor)
    options: list[list[tuple[str, float]]] = []  # per role: (charge key, minimum charge)
    for r in job.roles:
        if not r.effective_min:
            continue
        if r.mig_profile:
            opts = [(mig_resource(f, r.mig_profile), float(r.effective_min * r.gpus_per_task))
                    for f in sorted(profiles) if r.mig_profile in profiles[f]]
        elif r.shares:
            opts = [(f, r.effective_min * task_milli(r, mem) / FULL) for f, mem in sorted(memory.items())
                    if task_milli(r, mem)]
        elif r.gpus_per_task:
            opts = [(f, float(r.effective_min * r.gpus_per_task)) for f in sorted(whole)]
        else:
            continue
        opts = [o for o in opts if not r.flavors or o[0].split("/mig-")[0] in r.flavors]
        if not opts:
            return None
        options.append(opts)
    plans = 1
    for opts in options:
        plans *= len(opts)
    if not options or plans > 256:
        return None
    worst = None

    def over(i: int, need: dict[str, float]):
        nonlocal worst
        if i == len(options):
            for key, amount in sorted(need.items()):
                limit, who = queues.static_limit(job.queue, key)
                if amount > limit + 1e-9:
                    worst = worst or (key, amount, limit, who, None)
                    return True
                if not job.preemptible:  # it may not borrow (plugins.quota.borrow_refusal): its entitlement binds
                    entitled, level = queues.static_entitlement(job.queue, key)
                    if amount > entitled + 1e-9:
                        worst = worst or (key, amount, entitled, level, never_within_quota(level, entitled))
                        return True
            return False
        for key, amount in options[i]:
            need[key] = need.get(key, 0.0) + amount
            fits = not over(i + 1, need)
            need[key] -= amount
            if fits:
                return False
        return True

    if not over(0, {}):
        return None
    key, amount, limit, who, why = worst
    unit = "MIG instances" if "/mig-" in key else "GPU-equivalents" if job_shares(job) else "GPUs"
    if why is not None:
        return PendingReason("never_fits_queue_quota", f"can never start: needs {amount:g} {key} {unit}; {why}",
                             terminal=True)
    return PendingReason("never_fits_queue_limit", f"needs {amount:g} {key} {unit}, above queue {who} limit of "
                         f"{limit:g}", terminal=True)


def _ask(role: RoleInfo) -> str:
    return f"{role.gpu_milli / FULL:g} GPU" if role.gpu_milli else f"{role.gpu_memory_mib} MiB"


def sharing_metrics(snapshot: Snapshot, usage: Usage, placer: Placer) -> dict:
    """allocated_gpu_equivalents: fractions' thousandths / 1000 summed; shared_gpus: GPUs holding a fraction;
    fgd_fragmentation: per flavor, GPUs unusable by the expected request mix (FGD's F(M), in GPUs);
    mig_instances / mig_used: instances on ready nodes and those bound."""
    instances = sum(len(n.mig) for n in snapshot.nodes if n.schedulable)
    return {
        "allocated_gpu_equivalents": sum(v for per in usage.milli.values() for v in per.values() if v > 0) / FULL,
        "shared_gpus": sum(1 for per in usage.milli.values() for v in per.values() if v > 0),
        "fgd_fragmentation": placer.fragmentation(),
        "mig_instances": instances,
        "mig_used": len(usage.mig),
    }
