"""The database side of a scheduling cycle: ORM -> Snapshot in one read, CycleResult -> ORM in one write.

- `build_snapshot(now)` reads the cluster with a handful of flat `values_list` queries (no ORM objects,
  no per-row queries). Times are float epoch seconds of the cluster clock.
- `apply_result(result, clock=, cycle_number=)` writes every decision in ONE transaction. Each job start is
  a compare-and-set on the job's state (still pending) inside its own savepoint; a stale decision (job no
  longer pending, a node no longer ready, a GPU unhealthy or already bound by a racing cycle, which the
  database's unique index refuses) is dropped and counted, never forced.
- `run_cycle_once(clock=, config=)` = single-flight lock -> release step (release.py: grace periods
  and gang-start timeouts that expired) -> snapshot -> engine -> apply. See its docstring for a crash.
- Evictions, holds, backfill estimates and audit decisions are written by evict.py.
"""
from __future__ import annotations

import gc
import logging
import threading
import time as _time
import traceback
from collections import Counter, defaultdict
from contextlib import contextmanager
from operator import itemgetter
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone as dt_timezone

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone

from gpuplatform.allocations import (
    check_gpus, check_mig_instances, check_nodes, check_updated_tasks, write_allocation_batches, write_allocations,
)
from gpuplatform.audit import event_rows, record_events
from gpuplatform.bulk import Many, MissingReference, json_value, rows_many, together, update_rows
from gpuplatform.execution.stops import FINAL_TARGETS
from gpuplatform.lifecycle import close_idle_queues
from gpuplatform.queries import one_snapshot
from gpuplatform.models import (
    Allocation, Domain, Gpu, Job, JobRole, MigInstance, Node, Queue, Quota, SchedulerCycle, Task,
)
from gpuplatform.scheduling import evict, release, samples, usage_decay
from gpuplatform.scheduling.evict import decode_reserved, encode_reserved, releasing_id, releasing_job  # noqa: F401 (re-exported)
from scheduler.core.cache import EngineCache
from scheduler.core.plugins.quota import in_queue_places, queue_order_key
from scheduler.core.snapshot import (
    CycleResult, DomainInfo, JobInfo, MigInstance as MigInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement,
)
from gpuplatform.scheduling.locks import single_flight
from gpuplatform.wording import count

log = logging.getLogger("gpuplatform.scheduling.store")
# What this process's production engine reuses between cycles while the cluster's shape is unchanged
# (scheduler.core.cache); replays and what-if runs keep their own, so they never evict it.
ENGINE_CACHE = EngineCache()


def bind_fields(clock: datetime) -> dict:
    """What a bind sets on a job besides its state, started_at and placement (one definition for the fast
    and the slow path): when it was bound, and every field only a pending job carries cleared."""
    return {"bound_at": clock, "pending_reason": "", "pending_reason_code": "", "pending_position": None,
            "queue_position": None,
            "never_fits": False, "reserved": None, "estimated_start": None, "not_before": None,
            "estimated_start_p90": None, "estimate_note": "", "reservation_start": None,
            "updated_at": timezone.now()}


@dataclass
class SnapshotIndex:
    """Database ids behind the snapshot's names: node name -> id, job id -> queue name."""

    node_ids: dict[str, int] = field(default_factory=dict)
    job_queue: dict[int, str] = field(default_factory=dict)


@dataclass
class ApplyStats:
    cycle_number: int = 0  # the number the cycle was recorded under (see reserve_cycle)
    binds: int = 0
    evictions: int = 0
    stale_skipped: int = 0
    pending_updated: int = 0
    stale: list[tuple[object, str]] = field(default_factory=list)  # (job id, why)


# GPU sharing: the FGD score's expected workload (Snapshot.workload) = the task shapes submitted in this window,
# among the WORKLOAD_JOBS most recent jobs (a bound read through the primary key: job.submitted_at has no index,
# and a cycle must not scan the whole job history)
WORKLOAD_WINDOW = 7 * 24 * 3600.0  # seconds
WORKLOAD_JOBS = 10_000


def sharing_workload(now: float) -> tuple:
    """Snapshot.workload (scheduler/core/sharing.py, FGD's "target workload"): the GPU task shapes of the jobs
    submitted in the last WORKLOAD_WINDOW (at most the WORKLOAD_JOBS most recent), whatever became of them
    (finished, cancelled, still pending): (GPU thousandths (1000 = whole GPUs), GPUs per task, CPU millicores,
    tasks), most frequent first. Two queries, both bounded by the primary key."""
    since = datetime.fromtimestamp(now - WORKLOAD_WINDOW, tz=dt_timezone.utc)
    first = Job.objects.order_by("-id").values_list("id", flat=True)[WORKLOAD_JOBS - 1:WORKLOAD_JOBS].first()
    recent = JobRole.objects.filter(job_id__gte=first) if first is not None else JobRole.objects.all()
    shape_rows = (recent.filter(job__submitted_at__gte=since, mig_profile="", gpu_memory_mib=0)
                  .filter(Q(gpu_milli__gt=0) | Q(gpus_per_task__gt=0))
                  .values_list("gpu_milli", "gpus_per_task", "cpu_milli").annotate(n=Sum("tasks")))
    shapes = [(milli or 1000, 1 if milli else gpus, cpu, float(n)) for milli, gpus, cpu, n in shape_rows]
    return tuple(sorted(shapes, key=lambda t: (-t[3], t[:3])))


@dataclass
class SnapshotMemo:
    """What build_snapshot may reuse from its previous read (one per reader: run_cycle_once keeps SNAPSHOT_MEMO):
    each JobInfo with the exact inputs it was built from, {job id: ((job row, role arguments, placements), JobInfo)}.
    A JobInfo is a pure function of those inputs, all read again every cycle, so one whose inputs compare equal
    is the same object again: no write can be missed (no timestamp or version column is trusted), and a job gone
    from the read is dropped. Building 15,000 frozen JobInfo and their RoleInfo took ~0.08 s of CPU per cycle on
    the headline world; a running job's or a waiting job's inputs rarely change between cycles.

    `nodes`: the same for each NodeInfo, {node id: (NodeInfo's arguments, NodeInfo)}. Building one costs about what
    comparing its arguments does, but the engine's cache (scheduler.core.cache, jobindex.changed_positions) works
    only on the nodes whose object changed since its last snapshot: an unchanged node must be the same object."""

    jobs: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)


SNAPSHOT_MEMO = SnapshotMemo()

_ROLE_INDEX = itemgetter(0, 1)  # a placement tuple's (role, index): a JobInfo's placements are in that order
_NO_NODES: frozenset = frozenset()


def _check_field_order() -> None:
    """build_snapshot builds NodeInfo, RoleInfo, JobInfo and TaskPlacement with positional arguments (a keyword call
    of JobInfo's 26 fields took twice as long: ~15,000 of them in a cold read of the headline world); a field added,
    removed or moved in scheduler/core/snapshot.py must be matched there, so the order it was written for is checked
    at import."""
    expected = {
        NodeInfo: "name flavor gpus domain gpu_numa cpu_milli memory_mib state unhealthy used cpu_used memory_used "
                  "gpu_modes gpu_memory_mib mig spare",
        RoleInfo: "name tasks gpus_per_task min_available cpu_milli memory_mib flavors group_size group_highest_tier "
                  "group_mode gpu_milli gpu_memory_mib mig_profile",
        TaskPlacement: "role index node gpus gpu_milli gpu_memory_mib mig",
        JobInfo: "id queue roles priority submit_time preemptible topology_mode highest_tier preferred_tier time_limit "
                 "state placement start_time name reserved not_before attempts avoid_nodes evicted_for part_of numa "
                 "migratable min_run_before_move checkpoint_grace interruptible stop_deadline stop_ends",
    }
    for cls, names in expected.items():
        got = [f.name for f in fields(cls)]
        if got != names.split():
            raise ImportError(f"{cls.__name__}'s fields changed: {got} (update build_snapshot's positional calls)")


_check_field_order()


def build_snapshot(now: float | None = None, *, cycle: int = 0, memo: SnapshotMemo | None = None
                   ) -> tuple[Snapshot, SnapshotIndex]:
    """Read the cluster into a Snapshot (12 queries, one consistent view, the first 11 sent together in one pipeline
    on PostgreSQL; 13th and 14th, `sharing_workload`, when some GPU is shared or auto). `now`: epoch seconds (default: wall clock); `cycle`: the cycle's number (rescheduling
    runs every config.reschedule_every cycles); `memo`: a SnapshotMemo whose JobInfos built from equal inputs are
    reused (and which is updated to this read). Pending jobs' RoleInfo.tasks counts the role's tasks still
    pending; running ones carry placements."""
    now = _time.time() if now is None else now
    live = ("pending", *Job.LIVE_STATES)
    # bulk.rows: plain tuples from the raw cursor on PostgreSQL (no per-row converters), times as float
    # epoch seconds computed by the server, JSON columns as text decoded only where used (json_value)
    with one_snapshot():  # one consistent view across the queries below
        # the eleven reads in one psycopg pipeline on PostgreSQL (bulk.rows_many: one round trip, the server reading
        # the next while this process converts the rows before)
        nodes, gpus, migs, held, allocs, domain_rows, queues, quotas, jobs, roles, pending_rows = rows_many(
            # a hot spare (NodeInfo.spare) takes only interruptible jobs (scheduler/core/spares.py)
            (Node.objects.all(), ("id", "name", "flavor", "gpu_count", "cpu_milli", "memory_mib", "domain__name",
                                  "state", "spare")),
            # a GPU an admin fenced counts unhealthy here: no new work (services.nodes.set_gpu_fence)
            (Gpu.objects.all(), ("node_id", "index", "numa_node", "health", "sharing", "memory_mib", "fenced")),
            (MigInstance.objects.all(), ("gpu__node_id", "gpu__index", "uuid", "profile", "memory_mib", "slices")),
            (Task.objects.filter(job__state__in=Job.LIVE_STATES, state__in=Task.ON_NODE_STATES, node__isnull=False),
             ("id", "job_id", "role__name", "index", "node__name", "node_id", "role__cpu_milli", "role__memory_mib",
              "state", "release_for", "release_deadline"), ("release_deadline",)),
            (Allocation.objects.filter(released_at__isnull=True),
             ("task_id", "gpu__node_id", "gpu__index", "gpu_milli", "gpu_memory_mib", "mig_instance__uuid")),
            (Domain.objects.all(), ("name", "tier", "parent__name")),
            (Queue.objects.all(), ("id", "name", "parent__name", "weight", "state", "recent_usage")),
            (Quota.objects.all(), ("queue_id", "flavor", "guarantee", "quota", "limit")),
            (Job.objects.filter(state__in=live), (
                "id", "queue__name", "priority", "submitted_at", "preemptible", "topology_mode", "highest_tier",
                "preferred_tier", "time_limit_seconds", "state", "started_at", "name", "reserved", "not_before",
                "attempts", "bound_at", "excluded_nodes", "evicted_for", "stop_target", "numa",
                "migratable", "min_run_before_move_seconds", "checkpoint_grace_seconds", "interruptible",
                "preempt_deadline"),
             ("submitted_at", "started_at", "not_before", "bound_at", "preempt_deadline")),
            (JobRole.objects.filter(job__state__in=live), (
                "id", "job_id", "name", "tasks", "gpus_per_task", "min_available", "cpu_milli", "memory_mib",
                "flavor", "group_size", "group_highest_tier", "group_mode", "gpu_milli", "gpu_memory_mib",
                "mig_profile")),
            # pending tasks per role (counted here: a GROUP BY got a poor plan on a freshly loaded database, seconds)
            (Task.objects.filter(job__state__in=live, state="pending"), ("role_id",)),
        )
        domains = [DomainInfo(n, t, p) for n, t, p in domain_rows]
        pending_count = Counter(r for r, in pending_rows)
        moves = evict.recent_moves(now)

    numa: dict[int, dict[int, int]] = defaultdict(dict)
    unhealthy: dict[int, set[int]] = defaultdict(set)
    modes: dict[int, dict[int, str]] = defaultdict(dict)  # GPU sharing (scheduler/core/sharing.py)
    gpu_mem: dict[int, int] = {}
    for node_id, idx, numa_node, health, sharing, memory, fenced in gpus:
        numa[node_id][idx] = numa_node if numa_node is not None else 0
        if health != "healthy" or fenced:
            unhealthy[node_id].add(idx)
        if sharing != "exclusive":
            modes[node_id][idx] = sharing
        if memory and sharing in ("shared", "auto"):
            gpu_mem[node_id] = min(memory, gpu_mem.get(node_id, memory))
    mig_of: dict[int, list[MigInfo]] = defaultdict(list)
    for node_id, idx, uuid, profile, memory, slices in migs:
        mig_of[node_id].append(MigInfo(idx, uuid, profile, memory, slices))
    used: dict[int, set[int]] = defaultdict(set)
    task_gpus: dict[int, list[int]] = defaultdict(list)
    task_share: dict[int, tuple[int, int, tuple[str, ...]]] = {}  # task -> (milli, memory, MIG UUIDs)
    for task_id, node_id, idx, milli, gmem, mig_uuid in allocs:
        if milli or mig_uuid:
            m, mm, uu = task_share.get(task_id, (0, 0, ()))
            task_share[task_id] = (m + milli, mm + gmem, uu + ((mig_uuid,) if mig_uuid else ()))
            if idx not in task_gpus[task_id]:
                task_gpus[task_id].append(idx)
            continue
        used[node_id].add(idx)
        task_gpus[task_id].append(idx)
    cpu_used: dict[int, int] = defaultdict(int)
    mem_used: dict[int, int] = defaultdict(int)
    # a placed task as TaskPlacement's arguments (role, index, node, GPUs, milli, memory, MIG UUIDs): built into a
    # TaskPlacement only for a JobInfo not reused (SnapshotMemo), and compared as plain tuples by the memo
    placements: dict[int, list[tuple]] = defaultdict(list)
    releasing: dict[int, list[TaskPlacement]] = defaultdict(list)  # surplus tasks evicted, still holding GPUs
    placed_per_role: dict[tuple[int, str], int] = defaultdict(int)  # placed or being released
    release_for: dict[int, int] = {}  # job id -> the beneficiary its releasing tasks are evicted for
    release_by: dict[int, float] = {}  # job id -> the latest release_deadline of its releasing tasks (epoch s)
    no_share = (0, 0, ())
    for task_id, job_id, role, idx, node_name, node_id, cpu, mem, task_state, beneficiary, release_at in held:
        cpu_used[node_id] += cpu
        mem_used[node_id] += mem
        milli, gmem, mig_uuids = task_share.get(task_id, no_share)
        gpu_list = task_gpus.get(task_id)
        if gpu_list is None:
            gpu_tuple = ()
        else:
            gpu_list.sort()
            gpu_tuple = tuple(gpu_list)
        placed_per_role[(job_id, role)] += 1
        if task_state == "releasing":
            releasing[job_id].append(TaskPlacement(role, idx, node_name, gpu_tuple, milli, gmem, mig_uuids))
            if beneficiary is not None:
                release_for.setdefault(job_id, beneficiary)
            if release_at is not None:
                release_by[job_id] = max(release_at, release_by.get(job_id, release_at))
        else:
            placements[job_id].append((role, idx, node_name, gpu_tuple, milli, gmem, mig_uuids))

    node_infos = []
    empty = frozenset()
    reused_nodes = memo.nodes if memo is not None else {}
    kept_nodes: dict = {}
    indices: dict[int, tuple[int, ...]] = {}  # GPU count -> (0, 1, ..., count - 1)
    for nid, name, flavor, count, cpu, mem, domain, state, spare in nodes:
        rows = numa[nid].keys() if nid in numa else empty  # the indices of its Gpu rows (every row sets numa)
        if len(rows) != count or (rows and max(rows) != count - 1):
            # the engine numbers a node's GPUs 0..gpus-1: an index with no Gpu row (a registration that skipped one,
            # a lost GPU moved to another node) is unhealthy there, never bound, and a row above gpu_count is seen
            # (trial 18b: the engine bound a GPU that was gone and never saw the highest one)
            span = max(count, max(rows) + 1) if rows else count
            unhealthy[nid].update(set(range(span)) - set(rows))
            count = span
        gpu_numa = numa.get(nid)
        if gpu_numa:
            # GPU i's NUMA node, 0 where none was read; the dict's values as they are when it holds 0..count-1 in order
            in_order = indices.get(count)
            if in_order is None:
                in_order = indices[count] = tuple(range(count))
            gpu_numa = (tuple(gpu_numa.values()) if tuple(gpu_numa) == in_order
                        else tuple(gpu_numa.get(i, 0) for i in range(count)))
        else:
            gpu_numa = ()
        bad, busy = unhealthy.get(nid), used.get(nid)
        # NodeInfo's arguments, positional (its field order, checked by _check_field_order below)
        args = (name, flavor, count, domain, gpu_numa, cpu, mem, state, frozenset(bad) if bad else empty,
                frozenset(busy) if busy else empty, cpu_used.get(nid, 0), mem_used.get(nid, 0),
                tuple(modes[nid].get(i, "exclusive") for i in range(count)) if nid in modes else (),
                gpu_mem.get(nid, 0), tuple(mig_of[nid]) if nid in mig_of else (), spare)
        prior = reused_nodes.get(nid)
        if prior is not None and prior[0] == args:
            info = prior[1]  # equal arguments: the same NodeInfo again (SnapshotMemo.nodes)
        else:
            info = NodeInfo(*args)
        kept_nodes[nid] = (args, info)
        node_infos.append(info)
    node_infos = tuple(node_infos)
    if memo is not None:
        memo.nodes = kept_nodes

    quota_map: dict[int, dict[str, QuotaInfo]] = defaultdict(dict)
    for qid, flavor, g, q, lim in quotas:
        quota_map[qid][flavor] = QuotaInfo(g, q, lim)
    queue_infos = tuple(QueueInfo(name, parent, weight, quota_map.get(qid, {}), state, json_value(recent) or {})
                        for qid, name, parent, weight, state, recent in queues)

    # each role the engine sees, as RoleInfo's arguments (built into RoleInfo objects only for a JobInfo not reused)
    job_roles: dict[int, list[tuple]] = defaultdict(list)
    role_specs: dict[tuple[int, str], tuple] = {}
    job_state = {j[0]: j[9] for j in jobs}
    flavors_of: dict[str, tuple[str, ...]] = {}  # the flavor column ("a|b") -> its flavors, split once per value
    for rid, job_id, name, tasks, gpt, min_av, cpu, mem, flavor, group, group_tier, group_mode, gmilli, gmem, mig in roles:
        flavors = flavors_of.get(flavor)
        if flavors is None:
            flavors = flavors_of[flavor] = tuple(f for f in flavor.split("|") if f)
        if job_id in releasing:  # what evict.releasing_job needs of the roles of a job releasing surplus tasks
            role_specs[(job_id, name)] = (gpt, cpu, mem, flavors)
        # a running job's role: its tasks placed, being released, and waiting to be placed again (elastic
        # tasks above min_available that were reclaimed or did not fit: the engine grows the job into them)
        wanted = pending_count.get(rid, 0)
        if job_state.get(job_id) != "pending":
            wanted += placed_per_role.get((job_id, name), 0)
        if wanted > 0:
            job_roles[job_id].append((name, wanted, gpt, min_av, cpu, mem, flavors, group or 0,
                                      group_tier, group_mode or "hard", gmilli, gmem, mig))

    index = SnapshotIndex(node_ids={n[1]: n[0] for n in nodes})
    job_infos = []
    reused = memo.jobs if memo is not None else {}
    kept: dict = {}  # this read's JobInfos by job id, with the inputs they were built from (the memo's next state)
    role_tuples: dict[tuple, tuple[RoleInfo, ...]] = {}
    for row in jobs:
        (jid, queue, prio, submitted, preemptible, mode, hi, pref, tlimit, state, started, name, reserved,
         not_before, attempts, bound_at, excluded, evicted_for, stop_target, numa_policy,
         migratable, min_run, ckpt_grace, interruptible, stop_deadline) = row
        if jid in releasing:
            job_infos.append(releasing_job(jid, queue, name, releasing[jid], role_specs, release_for.get(jid),
                                           release_by.get(jid)))
        job_role_args = job_roles.get(jid)
        if not job_role_args:
            continue
        index.job_queue[jid] = queue
        # a JobInfo is a function of its job row, its roles' arguments and its placements only: the one built from
        # equal inputs by an earlier read is reused (SnapshotMemo)
        key = (row, job_role_args, placements.get(jid))
        prior = reused.get(jid)
        if prior is not None and prior[0] == key:
            kept[jid] = prior
            job_infos.append(prior[1])
            continue
        # the roles: one tuple of RoleInfo per distinct list of role arguments in this read, shared by the jobs of one
        # shape (equal objects either way: frozen, compared and hashed by value)
        role_key = tuple(job_role_args)
        role_infos = role_tuples.get(role_key)
        if role_infos is None:
            role_infos = role_tuples[role_key] = tuple(RoleInfo(*args) for args in job_role_args)
        placed = placements.get(jid)
        # positional: JobInfo's field order (checked by _check_field_order below)
        info = JobInfo(
            jid, queue, role_infos, prio, submitted, preemptible, mode, hi, pref,
            float(tlimit) if tlimit is not None else None,  # time_limit
            "running" if state == "admitted" else state,
            tuple(TaskPlacement(*p) for p in sorted(placed, key=_ROLE_INDEX)) if placed else (),  # by (role, index)
            started if started is not None else bound_at,  # start_time
            name,
            # reserved: a preempting job's = its new place, when rescheduling moves it (evict.apply_holds)
            decode_reserved(json_value(reserved)) if reserved is not None and state in ("pending", "preempting")
            else (),
            not_before if state == "pending" else None, attempts,
            # avoid_nodes
            frozenset(json_value(excluded) or ()) if state == "pending" and excluded not in (None, "[]") else _NO_NODES,
            evicted_for if state == "preempting" and stop_target in evict.REQUEUE_STOPS else None,
            None,  # part_of
            numa_policy or "prefer", migratable, float(min_run),
            float(ckpt_grace) if ckpt_grace is not None else None,  # checkpoint_grace
            interruptible,
            stop_deadline if state == "preempting" else None,  # when its GPUs come free (the forecast reads it)
            state == "preempting" and stop_target in FINAL_TARGETS)  # stop_ends: it will not wait again
        kept[jid] = (key, info)
        job_infos.append(info)
    if memo is not None:
        memo.jobs = kept
    snap = Snapshot(nodes=node_infos, domains=tuple(domains), queues=queue_infos, jobs=tuple(job_infos), now=now,
                    cycle=cycle, recent_moves=moves,
                    workload=sharing_workload(now) if any(m in ("shared", "auto") for g in modes.values()
                                                          for m in g.values()) else ())
    return snap, index


class _Stale(Exception):
    pass


def _bind(binding, clock: datetime, tasks_by_role, simulated, gpu_ids, cycle_number: int) -> tuple:
    """Start one job inside the caller's savepoint (the slow path, after a race). Raises _Stale (the
    savepoint rolls back) or IntegrityError."""
    rows, tasks = _rows_for(binding, clock, tasks_by_role, simulated, gpu_ids)
    immediate = all(state == "running" for _, _, state in tasks)
    started = Job.objects.filter(pk=binding.job_id, state="pending").update(
        state="running" if immediate else "admitted", started_at=clock if immediate else None,
        placement_domain=binding.domain or "", placement_tier=binding.tier, **bind_fields(clock))
    if not started:
        raise _Stale("job is no longer pending")
    write_allocations(rows)  # IntegrityError: a GPU already has a live allocation
    by_node = defaultdict(list)
    for task_id, node_id, state in tasks:
        by_node[(node_id, state)].append(task_id)
    for (node_id, state), ids in by_node.items():
        if Task.objects.filter(pk__in=ids, state="pending").update(state=state, node_id=node_id) != len(ids):
            raise _Stale("a task is no longer pending")
    check_nodes({node_id for node_id, _ in by_node})  # task.node_id (0024_e2e10)
    return _admitted_event(binding, clock, cycle_number, len({n for n, _ in by_node}), len(rows))


def _bind_all(bindings, clock: datetime, tasks_by_role, simulated, gpu_ids, cycle_number: int, pending: dict):
    """Start every job of the cycle with a handful of bulk statements (the fast path): `pending` = {job id: excluded
    nodes} of the jobs still pending, locked by the caller (apply_result's bind lock); check each decision against
    the rows, then one INSERT of all allocations, bulk task and job updates, and the Events (written here: the
    admissions and _excluded_node_events). Returns ("admitted" Events, [(job id, why stale)]), or None when the
    INSERT hits the one-live-allocation index (a racing cycle bound a GPU): the savepoint rolls back and the caller
    goes job by job.

    Statements: the allocations (one COPY fed BIND_BATCH bindings' rows at a time, bulk.insert_batches: the server
    inserts one batch while this thread builds the next), then one pipeline (bulk.together: the task update, the GPU
    and node checks and the job update back to back on the server, no round trip between them) while a worker thread
    builds and formats the Events (JSON, COPY text, ~0.07 s of client CPU for 10,000 starts, _overlapped), then the
    Events (COPY). The
    allocations' task and job references are checked by the task update itself (a compare-and-set on each task's
    job, every row counted: allocations.check_updated_tasks), the Events' jobs are the locked ones (audit.record_events'
    locked_jobs), so neither needs a statement of its own; the GPUs and the nodes in one statement each
    (allocations.check_gpus, check_nodes: migration 0024_e2e10), the MIG instances named in one more when there are any
    (check_mig_instances: 0033_deferred_fk). None of these rows has a foreign-key constraint left, so the commit runs
    no per-row check (PostgreSQL queued one per inserted row for each deferred constraint, null or not).

    A task on a node whose executor is a node agent (and whose job has a command) is `bound` until the
    agent reports its process started; any other task (simulated nodes, trace jobs) is `running` at once.
    A job with every task running is running (started_at = clock), else admitted."""
    stale, jobs, tasks, allocations, started = [], [], [], [], []

    def batches():  # the rows of BIND_BATCH bindings at a time: the COPY sends each while the next is built
        for i in range(0, len(bindings), BIND_BATCH):
            batch = []
            for b in bindings[i:i + BIND_BATCH]:
                if b.job_id not in pending:
                    stale.append((b.job_id, "job is no longer pending"))
                    continue
                try:
                    job_allocs, job_tasks = _rows_for(b, clock, tasks_by_role, simulated, gpu_ids)
                except _Stale as exc:
                    stale.append((b.job_id, str(exc)))
                    continue
                batch += job_allocs
                tasks.extend([(task_id, node_id, state, b.job_id) for task_id, node_id, state in job_tasks])
                immediate = all(state == "running" for _, _, state in job_tasks)
                jobs.append((b.job_id, b.domain or "", b.tier, "running" if immediate else "admitted",
                             clock if immediate else None))
                started.append((b, len({n for _, n, _ in job_tasks}), len(job_allocs)))
            allocations.extend(batch)
            yield batch

    try:
        with transaction.atomic():
            write_allocation_batches(batches())  # checked below, with the task update
    except IntegrityError:
        return None  # a racing cycle bound a GPU: the caller goes job by job
    excluded = {jid: json_value(nodes) for jid, nodes in pending.items() if nodes not in (None, "[]", [])}
    vendor = connection.vendor

    def events():  # pure (no database): may run in the worker thread
        admitted = [_admitted_event(b, clock, cycle_number, nodes, gpus) for b, nodes, gpus in started]
        out = admitted + _excluded_node_events(bindings, {b.job_id for b, _, _ in started}, clock, cycle_number,
                                               excluded)
        return admitted, out, event_rows(out, vendor)

    def written():
        # one pipeline (bulk.together): the task update, the GPU and node checks and the job update back to back on
        # the server, while the worker thread formats the Events
        with together() as batch:
            # each task still of the job the allocations name (the per-row compare-and-set), every one counted: the
            # allocations' task and job references checked by this statement (allocations.check_updated_tasks)
            placed = batch.update_rows(Task, tasks, ["node_id", "state"], {}, match=("job_id",))
            gpus = check_gpus(allocations, batch)  # allocation.gpu_id and task.node_id (0024_e2e10): FOR KEY SHARE
            migs = check_mig_instances(allocations, batch)  # allocation.mig_instance_id (0033_deferred_fk)
            nodes = check_nodes({t[1] for t in tasks}, batch)
            batch.update_rows(Job, jobs, ["placement_domain", "placement_tier", "state", "started_at"],
                              bind_fields(clock))
        if placed.value != len(tasks):
            raise IntegrityError("allocation.task_id / job_id: a task to place is gone or is not of its job")
        check_updated_tasks(allocations, {t[0]: t[3] for t in tasks})
        gpus.check()
        migs.check()
        nodes.check()

    admitted, out, formatted = _overlapped(events, written,
                                           vendor == "postgresql" and len(started) >= PARALLEL_FORMAT_MIN)
    record_events(formatted, locked_jobs=pending)  # every job named is one of the locked ones
    return admitted, stale


# bindings whose allocation rows _bind_all builds at a time, each batch sent (COPY) while the next is built
BIND_BATCH = 1000
# the fewest starts for which _bind_all formats its Events in a worker thread (below, a thread costs more than it saves)
PARALLEL_FORMAT_MIN = 1000


def _overlapped(work, db_work, parallel: bool):
    """work()'s answer, with db_work() run meanwhile. `parallel`: work() runs in a worker thread while this thread
    runs db_work(), which spends most of its time waiting on the server with the GIL released (psycopg's wait), so
    the client's CPU and the server's overlap (two cores: PostgreSQL on one, this process on the other). work()
    must not touch the database (Django connections are per thread). An exception in either is raised here, after
    both ended (db_work's first)."""
    if not parallel:
        db_work()
        return work()
    box: dict = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="apply-format", daemon=True)
    worker.start()
    try:
        db_work()
    finally:
        worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _rows_for(binding, clock: datetime, tasks_by_role, simulated, gpu_ids):
    """([(task id, gpu id, job id, created_at, gpu_milli, gpu_memory_mib, MIG instance id)],
    [(task id, node id, task state)]) for one binding (a fraction: one row with its share; MIG: one row per
    instance, on the instance's GPU); raises
    _Stale if a row no longer matches. The state is "bound" on a node agent's node for a job with a
    command (gpu_ids["<node>"]["agent"], job id not in `simulated`), else "running"."""
    allocations, tasks = [], []
    for p in binding.tasks:
        free = tasks_by_role.get((binding.job_id, p.role), [])
        if p.index >= len(free):
            raise _Stale(f"no pending task {p.role}[{p.index}]")
        node = gpu_ids.get(p.node)
        if node is None:
            raise _Stale(f"node {p.node} is not ready")
        if p.mig:
            for uuid in p.mig:
                inst = node.get("mig", {}).get(uuid)
                if inst is None or inst[0] not in node["gpus"]:
                    raise _Stale(f"MIG instance {uuid} on {p.node} is unhealthy or unknown")
                allocations.append((free[p.index], node["gpus"][inst[0]], binding.job_id, clock, 0, 0, inst[1]))
        for g in () if p.mig else p.gpus:
            gpu = node["gpus"].get(g)
            if gpu is None:
                raise _Stale(f"GPU {p.node}/{g} is unhealthy or unknown")
            allocations.append((free[p.index], gpu, binding.job_id, clock, p.gpu_milli, p.gpu_memory_mib, None))
        waits = node.get("agent") and binding.job_id not in simulated
        tasks.append((free[p.index], node["id"], "bound" if waits else "running"))
    return allocations, tasks


def _stale_why(exc: Exception) -> str:
    """Why a decision was skipped in its savepoint: a _Stale says it; a reference check (bulk.MissingReference: the
    GPU, node or task was deleted after the cycle read it) names the column and ids; any other IntegrityError is a
    unique index's: a racing cycle bound one of the GPUs first."""
    if isinstance(exc, _Stale):
        return str(exc)
    if isinstance(exc, MissingReference):
        return f"deleted meanwhile ({exc})"
    return "a GPU is already bound (racing cycle)"


def _apply_growths(growths, *, clock: datetime, cycle_number: int, stats: ApplyStats) -> None:
    """New tasks of running elastic jobs (the engine's growths): each task row (job, role, index), still
    pending, gets its GPUs and goes running (bound on a node agent's node, for a job with a command). One
    savepoint per job: a stale growth (job no longer running, task or GPU taken) is skipped and counted.
    One "grown" Event per job."""
    events = []
    for g in growths:
        try:
            with transaction.atomic():
                if not Job.objects.select_for_update(no_key=True).filter(pk=g.job_id, state__in=Job.ACTIVE_STATES).exists():
                    raise _Stale("job is no longer running")
                rows = []
                for p in g.tasks:
                    task = (Task.objects.filter(job_id=g.job_id, role__name=p.role, index=p.index, state="pending")
                            .values_list("id", "job__simulated").first())
                    node = Node.objects.filter(name=p.node, state="ready").values_list("id", "executor").first()
                    if task is None or node is None:
                        raise _Stale(f"task {p.role}[{p.index}] or node {p.node} no longer available")
                    gpus = dict(Gpu.objects.filter(Gpu.usable(), node_id=node[0], index__in=p.gpus)
                                .values_list("index", "id"))
                    if len(gpus) != len(p.gpus):
                        raise _Stale(f"a GPU of {p.node} is unhealthy or unknown")
                    state = "bound" if node[1] in Node.PROCESS_EXECUTORS and not task[1] else "running"
                    write_allocations([(task[0], gpus[i], g.job_id, clock, 0, 0, None) for i in p.gpus])
                    if not Task.objects.filter(pk=task[0], state="pending").update(state=state, node_id=node[0]):
                        raise _Stale(f"task {p.role}[{p.index}] is no longer pending")
                    check_nodes([node[0]])  # task.node_id (0024_e2e10)
                    rows.append([p.role, p.index, p.node, list(p.gpus)])
        except (_Stale, IntegrityError) as exc:
            why = _stale_why(exc)
            stats.stale.append((g.job_id, f"grow: {why}"))
            stats.stale_skipped += 1
            log.info("cycle %s: stale growth of job %s skipped: %s", cycle_number, g.job_id, why)
            continue
        events.append({"time": clock, "kind": "grown", "job_id": g.job_id, "cycle": cycle_number,
                       "message": f"{len(rows)} more task(s) placed (elastic job growing back, {g.domain or 'cluster'})",
                       "data": {"domain": g.domain, "tier": g.tier, "placement": rows}})
    record_events(events)


def _gpus_text(tasks, gpus: int) -> str:
    """What the bound tasks hold: "<n> GPUs" for whole GPUs; fractions as GPU-equivalents and their shares
    ("1.5 GPU-equivalents (3 shares of 0.5 GPU)"); MIG instances counted as such."""
    if not any(getattr(t, "gpu_milli", 0) or getattr(t, "mig", ()) for t in tasks):
        return count(gpus, "GPU")  # whole GPUs (the common case: one pass)
    milli = [t.gpu_milli for t in tasks if getattr(t, "gpu_milli", 0)]
    mig = sum(len(getattr(t, "mig", ()) or ()) for t in tasks)
    whole = sum(len(t.gpus) for t in tasks if not getattr(t, "gpu_milli", 0) and not getattr(t, "mig", ()))
    parts = [count(whole, "GPU")] if whole else []
    if milli:
        sizes = sorted({m / 1000 for m in milli})
        each = f"{sizes[0]:g} GPU" if len(sizes) == 1 else f"{sizes[0]:g}-{sizes[-1]:g} GPU"
        parts.append(f"{sum(milli) / 1000:g} GPU-equivalents ({len(milli)} shares of {each})")
    if mig:
        parts.append(count(mig, "MIG instance"))
    return ", ".join(parts)


def _admitted_event(binding, clock: datetime, cycle_number: int, nodes: int, gpus: int) -> dict:
    """The admission Event, for audit.record_events."""
    message = (f"admitted ({binding.rule}) into {binding.domain or 'the cluster'} (tier {binding.tier}) on "
               f"{count(nodes, 'node')}, {_gpus_text(binding.tasks, gpus)}")
    data = {"domain": binding.domain, "tier": binding.tier, "rule": binding.rule,
            "queue_share_before": round(binding.share_before, 4), "queue_share_after": round(binding.share_after, 4),
            "placement": [[p.role, p.index, p.node, list(p.gpus)] for p in binding.tasks]}
    return {"time": clock, "kind": "admitted", "job_id": binding.job_id, "cycle": cycle_number, "message": message,
            "data": data}


def _excluded_node_events(bindings, bound: set, clock: datetime, cycle_number: int,
                          excluded: dict | None = None) -> list[dict]:
    """An Event for each job bound onto a node its diagnosis excluded: the engine puts it there only when
    nothing else fits (JobInfo.avoid_nodes), and the job says so. `excluded`: {job id: excluded nodes} as
    _bind_all's lock read them (None: read here)."""
    if not bound:
        return []
    if excluded is None:
        excluded = dict(Job.objects.filter(pk__any=Many(bound)).exclude(excluded_nodes=[])
                        .values_list("id", "excluded_nodes"))
    excluded = {jid: set(nodes or ()) for jid, nodes in excluded.items() if nodes and jid in bound}
    out = []
    for b in bindings:
        used = sorted(excluded.get(b.job_id, set()) & {p.node for p in b.tasks})
        if used:
            out.append({"time": clock, "kind": "excluded_node_used", "job_id": b.job_id, "cycle": cycle_number,
                        "message": f"placed on excluded node(s) {', '.join(used)}: nothing else fits",
                        "data": {"nodes": used}})
    return out


def reserve_cycle(number: int, **fields) -> SchedulerCycle:
    """Insert the SchedulerCycle row under `number`, or the next free number if a concurrent cycle took
    it (only possible when two cycles bypass the single-flight lock). Savepoint per attempt."""
    for _ in range(20):
        try:
            with transaction.atomic():
                return SchedulerCycle.objects.create(number=number, **fields)
        except IntegrityError:
            number = max(number, SchedulerCycle.objects.aggregate(n=Max("number"))["n"] or 0) + 1
    raise RuntimeError("could not reserve a scheduling cycle number")


def apply_result(result: CycleResult, *, clock: datetime, cycle_number: int, started_at: datetime | None = None,
                 duration_ms: float = 0.0, fair_share: bool = True) -> ApplyStats:
    """Write one cycle's decisions, its SchedulerCycle row and its samples, in one transaction.
    Stale bindings are skipped (ApplyStats.stale_skipped, logged at INFO) and the rest commits.
    `clock`: cluster time of the cycle; `started_at`: wall time it began; `duration_ms`: wall time so far;
    `fair_share`: the cycle's CycleConfig.fair_share (the queues' order of the pending positions: _update_pending)."""
    stats = ApplyStats()
    job_ids = [b.job_id for b in result.bindings]
    node_names = sorted({p.node for b in result.bindings for p in b.tasks})
    with transaction.atomic():
        row = reserve_cycle(cycle_number, started_at=started_at or timezone.now(), clock=clock)
        cycle_number = stats.cycle_number = row.number
        tasks_by_role: dict[tuple, list[int]] = defaultdict(list)
        simulated: set[int] = set()  # jobs without a command: their tasks run at once wherever they land
        gpu_ids: dict[str, dict] = {}
        pending: dict = {}
        if job_ids:
            # the bind lock, then what the decisions name, in one round trip (bulk.rows_many: one psycopg pipeline on
            # PostgreSQL): the jobs still pending locked FOR NO KEY UPDATE in id order, as lifecycle.lock_jobs does
            # (with each one's excluded nodes, for _excluded_node_events), then their pending tasks (read after the
            # lock: a locked pending job's tasks stay as read), the ready nodes' healthy GPUs, the nodes, their MIG
            # instances
            locked, task_rows, gpu_rows, node_rows, mig_rows = rows_many(
                (Job.objects.select_for_update(no_key=True).filter(pk__any=Many(sorted(job_ids)), state="pending")
                 .order_by("pk"), ("id", "excluded_nodes")),
                (Task.objects.filter(job_id__any=Many(job_ids), state="pending").order_by("role_id", "index"),
                 ("id", "job_id", "role__name", "job__simulated")),
                (Gpu.objects.filter(Gpu.usable(), node__name__any=Many(node_names), node__state="ready"),
                 ("id", "index", "node_id", "node__name")),
                (Node.objects.filter(name__any=Many(node_names), state="ready"), ("id", "name", "executor")),
                (MigInstance.objects.filter(gpu__node__name__any=Many(node_names)),
                 ("id", "uuid", "gpu__index", "gpu__node__name")))
            pending = dict(locked)
            for tid, jid, role, sim in task_rows:
                tasks_by_role[(jid, role)].append(tid)
                if sim:
                    simulated.add(jid)
            for gid, idx, nid, nname in gpu_rows:
                gpu_ids.setdefault(nname, {"id": nid, "gpus": {}})["gpus"][idx] = gid
            for nid, nname, executor in node_rows:
                gpu_ids.setdefault(nname, {"id": nid, "gpus": {}})["agent"] = executor in Node.PROCESS_EXECUTORS  # CPU-only too
            for iid, uuid, idx, nname in mig_rows:
                if nname in gpu_ids:
                    gpu_ids[nname].setdefault("mig", {})[uuid] = (idx, iid)
        events = _bind_all(result.bindings, clock, tasks_by_role, simulated, gpu_ids, cycle_number, pending)
        if events is None:  # a racing cycle bound one of these GPUs: job by job, each in its own savepoint
            events = []
            for binding in result.bindings:
                try:
                    with transaction.atomic():
                        events.append(_bind(binding, clock, tasks_by_role, simulated, gpu_ids, cycle_number))
                except (_Stale, IntegrityError) as exc:
                    why = _stale_why(exc)
                    stats.stale.append((binding.job_id, why))
                    log.info("cycle %s: stale decision for job %s skipped: %s", cycle_number, binding.job_id, why)
            stats.binds = len(events)
            events += _excluded_node_events(result.bindings, {e["job_id"] for e in events}, clock, cycle_number)
            record_events(events, locked_jobs=pending)  # their jobs locked above
        else:
            admitted, stale = events  # the Events are written
            stats.binds = len(admitted)
            for job_id, why in stale:
                stats.stale.append((job_id, why))
                log.info("cycle %s: stale decision for job %s skipped: %s", cycle_number, job_id, why)
        stats.stale_skipped = len(stats.stale)
        stale = evict.apply_evictions(result, clock=clock, cycle_number=cycle_number, stats=stats)
        evict.apply_holds(result, clock=clock, cycle_number=cycle_number, stale=stale)
        evict.apply_withdrawals(result, clock=clock, cycle_number=cycle_number)
        _apply_growths(result.growths, clock=clock, cycle_number=cycle_number, stats=stats)
        stats.pending_updated = _update_pending(result, fair_share=fair_share)
        SchedulerCycle.objects.filter(pk=row.pk).update(
            duration_ms=duration_ms, timings=dict(result.timings), binds=stats.binds, evictions=stats.evictions,
            pending=len(result.pending), stale_skipped=stats.stale_skipped)
        samples.write_samples(result.metrics, clock=clock, cycle_number=cycle_number, pending=len(result.pending),
                              fair_share=result.fair_share, held=getattr(result, "held", None))
        close_idle_queues(at=clock)  # closing queues whose last job ended outside end_job (trace replays)
    return stats


def pending_order(result: CycleResult, jobs: dict | None = None, *, fair_share: bool = True) -> list:
    """The pending jobs in the order they stand. CycleResult.pending lists every job that did not start in the order
    the engine considered them (holders of GPUs freed for them first, then the fair-share walk over the queues),
    after the jobs still in their requeue backoff, which the cycle did not consider: each of those stands where its
    queue's order puts it (scheduler.core.plugins.quota.in_queue_places: before the first considered job of its queue
    that comes after it), as it is considered again once its backoff ends. `jobs`: {job id: (queue id, priority,
    submitted_at)} of the jobs still there (a job missing is left out); None: the backoff jobs last."""
    considered = [j for j, r in result.pending.items() if r.code != "backoff"]
    waiting = [j for j, r in result.pending.items() if r.code == "backoff"]
    if jobs is None or not waiting:
        return considered + waiting
    considered = [j for j in considered if j in jobs]
    waiting = [j for j in waiting if j in jobs]
    key_of = {j: queue_order_key(_OrderKey(jobs[j][1], jobs[j][2].timestamp(), j), fair_share)
              for j in considered + waiting}
    return in_queue_places(considered, waiting, key_of, {j: jobs[j][0] for j in key_of})


@dataclass(frozen=True, slots=True)
class _OrderKey:
    """What queue_order_key reads of a job (JobInfo's fields of the same names)."""
    priority: int
    submit_time: float
    id: int


def _update_pending(result: CycleResult, *, fair_share: bool = True) -> int:
    """Write, for every job still pending, why it waits (pending_reason: the words, pending_reason_code: the engine's
    code, never_fits) and where it stands:
    pending_position among all pending jobs and queue_position among its queue's, in the engine's order
    (pending_order: a job in its requeue backoff in its queue's place). The API and the pages read these; nothing
    recomputes the order. A compare-and-set on the state: a job that left pending meanwhile is not touched. Returns
    the jobs updated. `fair_share`: the cycle's CycleConfig.fair_share (the queue's order: queue_order_key)."""
    jobs = {jid: rest for jid, *rest in Job.objects.filter(pk__any=Many(list(result.pending))).values_list(
        "id", "queue_id", "priority", "submitted_at")}
    order = pending_order(result, jobs, fair_share=fair_share)
    per_queue: dict = defaultdict(int)
    rows = []
    for job_id in order:
        if job_id not in jobs:
            continue  # gone meanwhile
        queue = jobs[job_id][0]
        per_queue[queue] += 1
        reason = result.pending[job_id]
        rows.append((job_id, reason.message[:500], reason.code[:40], bool(reason.terminal), len(rows) + 1,
                     per_queue[queue]))
    return update_rows(Job, rows, ["pending_reason", "pending_reason_code", "never_fits", "pending_position",
                                   "queue_position"], {}, where={"state": "pending"})


@contextmanager
def cyclic_gc_paused():
    """Python's cyclic garbage collector paused for one cycle, back as it was afterwards (also on error).

    A cycle allocates hundreds of thousands of small acyclic objects (snapshot rows and dataclasses, the
    engine's placements, the apply's rows), and every few thousand allocations the collector runs; its older
    generations walk the whole heap (the engine cache, the world), so on the 20,160-GPU headline world it
    took ~15 % of the cycle (0.26 + 0.17 + 0.20 s of 4.4 s in the snapshot read, engine and apply, measured
    with gc.callbacks, issue 16 third round). Reference counting still frees everything at once; the few
    reference cycles a cycle leaves (Django query objects, tracebacks) wait for the next collection after
    the cycle. Process-wide: other threads run without cyclic collection for that second too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_cycle_once(*, clock: datetime | None = None, config=None, detect: bool = False) -> SchedulerCycle | None:
    """One single-flight scheduling cycle at cluster time `clock` (default now). Returns the
    SchedulerCycle row, or None when another cycle holds the lock (logged).

    `detect=True` (the Celery cycle, the in-process loop) first runs node-failure detection
    (failures.detect_failures at `clock`) under the same lock: when cycles run back to back under load and
    the periodic detection task finds the lock taken, the cycle holding it has detected at its start, so a
    dead node is acted on within timeout + grace + one check period whatever the load. A detection error
    is logged and the cycle goes on.

    A crash (engine or apply) leaves jobs, tasks and allocations as they were (the apply transaction
    rolls back), records a SchedulerCycle with `error` in its own transaction, then RE-RAISES the
    exception (Celery marks the task failed; `gpuplatform.scheduling.tasks.run_loop` logs and continues)."""
    from scheduler.core import run_cycle

    clock = clock or timezone.now()
    config = config or usage_decay.default_config()
    with single_flight() as acquired:
        if not acquired:
            log.info("scheduling cycle skipped: another cycle is running")
            return None
        if detect:
            from .failures import detect_failures

            try:
                detect_failures(clock)
            except Exception:  # noqa: BLE001 - detection has its own transaction; the cycle still runs
                log.exception("failure detection before cycle failed")
        number = (SchedulerCycle.objects.aggregate(n=Max("number"))["n"] or 0) + 1
        wall, t0 = timezone.now(), _time.perf_counter()
        try:
            with cyclic_gc_paused():
                release.release_expired(clock, cycle_number=number)
                snapshot, _ = build_snapshot(clock.timestamp(), cycle=number, memo=SNAPSHOT_MEMO)
                t1 = _time.perf_counter()
                result = run_cycle(snapshot, config, cache=ENGINE_CACHE)
                result.timings.setdefault("snapshot_ms", (t1 - t0) * 1000)
                stats = apply_result(result, clock=clock, cycle_number=number, started_at=wall,
                                     duration_ms=(_time.perf_counter() - t0) * 1000, fair_share=config.fair_share)
                usage_decay.record(result.metrics.get("queue_usage", {}), clock, config)
        except Exception:
            log.exception("scheduling cycle %s failed", number)
            with transaction.atomic():
                reserve_cycle(number, started_at=wall, clock=clock, duration_ms=(_time.perf_counter() - t0) * 1000,
                              error=traceback.format_exc()[-4000:])
            raise
        cycle = SchedulerCycle.objects.get(number=stats.cycle_number)
        log.info("cycle %s: %s binds, %s pending, %s stale, %.1f ms", number, cycle.binds, cycle.pending,
                 cycle.stale_skipped, cycle.duration_ms)
        return cycle
