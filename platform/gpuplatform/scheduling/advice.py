"""The rescheduling advisor on the live cluster (read only): which moves of running jobs that are not
migratable would free a domain for a job blocked by fragmentation alone. The planner is the engine's
(scheduler/core/actions/reschedule.py, `reschedule_advice`); nothing here is written.

    fragmentation_advice(now=None) -> list[dict]

Each entry: {beneficiary (job id), name, gpus, waiting_seconds, domain, tier, moves: [{job, name, gpus,
to}], message} with database job ids, e.g. message "moving jobs 812, 907 would free rack r12 for job 1033
(64 GPUs, waiting 3 h)". Acting on one is services.reschedule.request_moves (an admin's button).
"""
from __future__ import annotations

import time as _time
from dataclasses import replace

from gpuplatform.scheduling import store, usage_decay
from scheduler.core import run_cycle


def advice_config():
    """The live cycle's configuration planning advice only (no move is made, every blocked job is
    considered at once)."""
    return replace(usage_decay.default_config(), reschedule=False, reschedule_advice=True, reschedule_every=1,
                   reschedule_min_wait=0.0)


def fragmentation_advice(now: float | None = None) -> list[dict]:
    """Advice for the cluster now (`now`: epoch seconds, default the wall clock), at most one entry per
    blocked job, in the engine's order."""
    snapshot, _ = store.build_snapshot(_time.time() if now is None else now)
    result = run_cycle(replace(snapshot, cycle=0), advice_config())
    return result.advice


def shape_check(*, roles: list[dict], queue: str, topology_mode: str = "none", highest_tier: int | None = None,
                now: float | None = None) -> list[dict]:
    """Shape steering for a job about to be submitted (scheduler.core.shapes.steer): for each GPU role whose
    tasks strand GPUs on the nodes it may use (of the flavors it accepts, with room for one of its tasks: the node size
    holding most of their GPUs),
    {role, stranded_per_node, stranded, suggested: {tasks, gpus_per_task}, message, estimated_start:
    {asked, suggested}, no_estimate: {asked, suggested}} (no_estimate: why a start is None, else None). The estimated starts are the engine's what-if on the cluster now: "now" when the
    job would start in this cycle, else the backfill reservation's estimate (epoch seconds) when it is the
    first job waiting for room, else None (unknown: the engine reserves for one job at a time).
    roles: [{name, tasks, gpus_per_task, min_available?, flavor?, gpu_milli?, gpu_memory_mib?, mig_profile?}] as
    job_rules.check_roles normalises them; a role of GPU shares (a fraction, GPU memory, MIG instances) strands no
    whole GPU and gets no advice, and takes its share in the estimated starts; queue: its name."""
    from collections import Counter

    from scheduler.core.shapes import steer
    from scheduler.core.snapshot import JobInfo, RoleInfo

    snapshot, _ = store.build_snapshot(_time.time() if now is None else now)
    out = []
    for i, r in enumerate(roles):
        if r.get("gpu_milli") or r.get("gpu_memory_mib") or r.get("mig_profile"):
            continue
        gpt, tasks = int(r.get("gpus_per_task") or 0), int(r.get("tasks") or 0)
        wanted = {f for f in str(r.get("flavor") or "").split("|") if f}
        # The nodes a task of the role can land on: of a flavor it accepts and at least gpus_per_task GPUs. Judged
        # by the size holding most of their GPUs: on a cluster of mixed sizes (Philly: 80 2-GPU and 58 8-GPU nodes)
        # the commonest size of all nodes (2) holds no 6-GPU task, and 1 x 6 got no advice (new-user trial 10, F4).
        sizes = Counter()
        for n in snapshot.nodes:
            if n.gpus and n.gpus >= gpt and (not wanted or n.flavor in wanted):
                sizes[n.gpus] += n.gpus
        if not gpt or not sizes:
            continue
        advice = steer(tasks, gpt, max(sizes, key=lambda g: (sizes[g], g)))
        if advice is None:
            continue
        starts, whys = {}, {}
        for key, (t, g) in (("asked", (tasks, gpt)), ("suggested", advice.suggested)):
            shaped = [dict(x) for x in roles]
            shaped[i] = {**roles[i], "tasks": t, "gpus_per_task": g, "min_available": t}
            starts[key], whys[key] = _estimated_start(snapshot, shaped, queue, topology_mode, highest_tier, JobInfo,
                                                      RoleInfo)
        out.append({"role": r.get("name") or f"role{i}", "stranded_per_node": advice.stranded_per_node,
                    "stranded": advice.stranded, "node_gpus": advice.node_gpus,
                    "suggested": {"tasks": advice.suggested[0], "gpus_per_task": advice.suggested[1]},
                    "message": advice.message, "estimated_start": starts, "no_estimate": whys})
    return out


NO_ESTIMATE = "no start estimate: the cycle estimates only the job it reserves room for"


def _estimated_start(snapshot, roles, queue, topology_mode, highest_tier, JobInfo, RoleInfo):
    """The what-if start of one hypothetical job (see shape_check) and why there is none: ("now", None), (epoch
    seconds, None), or (None, "<why it does not start now>; no start estimate: ...") (new-user trial 25: a null
    estimate came with no reason)."""
    start, reason = _probe(snapshot, roles, queue, topology_mode, highest_tier, JobInfo, RoleInfo)
    if start is not None:
        return start, None
    return None, f"{reason.message}; {NO_ESTIMATE}" if reason is not None else NO_ESTIMATE


def _probe(snapshot, roles, queue, topology_mode, highest_tier, JobInfo, RoleInfo):
    """One engine cycle with the hypothetical job added: ("now", None) when it starts, else (the backfill estimate
    in epoch seconds or None, its PendingReason or None)."""
    role_infos = tuple(RoleInfo(str(r.get("name") or f"role{k}"), int(r["tasks"]), int(r["gpus_per_task"]),
                                int(r.get("min_available") or r["tasks"]), int(r.get("cpu_milli") or 0),
                                int(r.get("memory_mib") or 0),
                                tuple(f for f in str(r.get("flavor") or "").split("|") if f),
                                gpu_milli=int(r.get("gpu_milli") or 0), gpu_memory_mib=int(r.get("gpu_memory_mib") or 0),
                                mig_profile=str(r.get("mig_profile") or ""))
                       for k, r in enumerate(roles))
    probe = JobInfo(id="shape-check", queue=queue, roles=role_infos, submit_time=snapshot.now,
                    topology_mode=topology_mode, highest_tier=highest_tier, name="shape-check")
    result = run_cycle(replace(snapshot, jobs=(*snapshot.jobs, probe), cycle=1),
                       replace(usage_decay.default_config(), reschedule=False, preemption=False, reclaim=False))
    if any(b.job_id == "shape-check" for b in result.bindings):
        return "now", None
    return result.estimated_start.get("shape-check"), result.pending.get("shape-check")
