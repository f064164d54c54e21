"""The eviction half of `store.apply_result`: the engine's evictions, holds (nominations), backfill
estimates and audit decisions -> ORM, inside apply_result's transaction.

- Evictions are applied per beneficiary (one decision) in a savepoint: a whole gang goes running ->
  preempting with `preempt_deadline` = clock + its queue's `preemption_grace_seconds`; surplus tasks go
  bound|running -> releasing with `release_deadline` (the job keeps running). Each is a compare-and-set;
  if any victim of a decision is stale (finished, requeued, already preempting), the whole decision is
  skipped, logged and counted, and its beneficiary gets no hold: never forced.
- Holds: `Job.reserved` is set for every nominated pending job (the engine reads it back next cycle) and
  cleared for pending jobs no longer held.
- `Job.estimated_start` is set from the backfill reservation and cleared for every other pending job.
- One Event per decision (kind "reclaim" | "preempt", on the beneficiary: victims, GPUs, usage before and
  after) and one "preempted" | "reclaimed" Event per victim (rule, beneficiary, tasks, deadline), written
  together by the audit writer's bulk form (audit.record_events).
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_tz

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gpuplatform.audit import record_events
from gpuplatform.lifecycle import evict_job
from gpuplatform.models import Event, Job, Task
from scheduler.core.snapshot import CycleResult, JobInfo, Move, RoleInfo, TaskPlacement

log = logging.getLogger("gpuplatform.scheduling.store")
VICTIM_KINDS = {"preempt": "preempted", "reclaim": "reclaimed", "reschedule": "moved"}  # the victims' Event kinds
MOVE_MEMORY_SECONDS = 24 * 3600.0  # how far back recent_moves reads "moved" Events (>= any reschedule_window)


def releasing_id(job_id) -> str:
    """The snapshot id of a running job's surplus tasks that are being released (a "preempting" pseudo-job,
    as ScenarioRunner models them): their GPUs stay used, and a beneficiary may wait for them."""
    return f"{job_id}:releasing"


def releasing_job(jid, queue, name, tasks, role_specs) -> JobInfo:
    counts: dict[str, int] = defaultdict(int)
    for t in tasks:
        counts[t.role] += 1
    roles = tuple(RoleInfo(r, n, role_specs[(jid, r)][0], n, *role_specs[(jid, r)][1:]) for r, n in sorted(counts.items()))
    return JobInfo(id=releasing_id(jid), queue=queue, roles=roles, state="preempting", name=f"{name} (releasing)",
                   placement=tuple(sorted(tasks, key=lambda p: (p.role, p.index))))


def encode_reserved(tasks) -> list:
    return [[t.role, t.index, t.node, list(t.gpus)] for t in tasks]


def decode_reserved(value) -> tuple[TaskPlacement, ...]:
    return tuple(TaskPlacement(str(r), int(i), str(n), tuple(int(g) for g in gpus)) for r, i, n, gpus in (value or ()))


class StaleDecision(Exception):
    pass


def apply_evictions(result: CycleResult, *, clock: datetime, cycle_number: int, stats) -> set:
    """Write the evictions and their decision Events. Returns the beneficiaries whose decision was stale."""
    if not result.evictions:
        return set()
    by_beneficiary: dict = defaultdict(list)
    for ev in result.evictions:
        by_beneficiary[ev.beneficiary].append(ev)
    ids = {ev.job_id for ev in result.evictions} | set(by_beneficiary)
    info = {jid: (name, qid, grace) for jid, name, qid, grace in Job.objects.filter(pk__in=ids).values_list(
        "id", "name", "queue_id", "queue__preemption_grace_seconds")}
    decisions = {d["beneficiary"]: d for d in result.decisions}
    stale: set = set()
    events: list[dict] = []
    for beneficiary, evs in by_beneficiary.items():
        try:
            with transaction.atomic():
                victim_events = [_evict(ev, info, clock, cycle_number) for ev in evs]
        except StaleDecision as exc:
            stale.add(beneficiary)
            stats.stale_skipped += 1
            stats.stale.append((beneficiary, f"eviction: {exc}"))
            log.info("cycle %s: stale eviction decision for job %s skipped: %s", cycle_number, beneficiary, exc)
            continue
        stats.evictions += len(evs)
        events.extend(victim_events)
        events.append(_decision_event(beneficiary, evs, decisions.get(beneficiary), info, victim_events, clock,
                                      cycle_number))
    record_events(events)
    return stale


def _evict(ev, info: dict, clock: datetime, cycle_number: int) -> dict:
    if ev.job_id not in info:
        raise StaleDecision(f"victim {ev.job_id} no longer exists")
    name, queue_id, grace = info[ev.job_id]
    if getattr(ev, "grace", None) is not None:  # a move: the job's own checkpoint grace
        grace = ev.grace
    if not ev.tasks:
        deadline = evict_job(ev.job_id, at=clock, grace_seconds=grace, kind=ev.rule, reason=ev.message,
                             cycle=cycle_number, event=False)
        if deadline is None:
            raise StaleDecision(f"victim {name} is no longer running")
    else:
        deadline = clock + timedelta(seconds=grace)
        if not Job.objects.filter(pk=ev.job_id, state__in=Job.ACTIVE_STATES).exists():
            raise StaleDecision(f"victim {name} is no longer running")
        which = Q()
        for role, index in ev.tasks:
            which |= Q(role__name=role, index=index)
        moved = Task.objects.filter(which, job_id=ev.job_id, state__in=Task.HELD_STATES).update(
            state=Task.State.RELEASING, release_deadline=deadline)
        if moved != len(ev.tasks):
            raise StaleDecision(f"{len(ev.tasks) - moved} task(s) of {name} no longer running")
    what = "whole gang" if not ev.tasks else f"{len(ev.tasks)} surplus task(s)"
    return {"time": clock, "kind": VICTIM_KINDS.get(ev.rule, "evicted"), "job_id": ev.job_id, "queue_id": queue_id,
            "cycle": cycle_number,
            "message": f"{ev.rule}: {what} of {name} releases {ev.gpus} GPUs at {deadline:%H:%M:%S} "
                       f"for {info.get(ev.beneficiary, (ev.beneficiary,))[0]}",
            "data": {"rule": ev.rule, "beneficiary": ev.beneficiary, "tasks": [list(t) for t in ev.tasks],
                     "gpus": ev.gpus, "deadline": deadline.isoformat(), "grace_seconds": grace, "reason": ev.message}}


def _decision_event(beneficiary, evs, decision, info, victim_events, clock, cycle_number) -> dict:
    rule = evs[0].rule
    name, queue_id, _ = info.get(beneficiary, (str(beneficiary), None, 0))
    decision = dict(decision or {"rule": rule, "beneficiary": beneficiary,
                                 "victims": [{"job": e.job_id, "tasks": list(e.tasks), "gpus": e.gpus} for e in evs]})
    for v in decision.get("victims", ()):
        v["name"] = info.get(v["job"], ("?",))[0]
        v["tasks"] = [list(t) for t in v.get("tasks", ())]
    decision["deadlines"] = {str(e.job_id): ve["data"]["deadline"] for e, ve in zip(evs, victim_events)}
    gpus = sum(e.gpus for e in evs)
    victims = ", ".join(info[e.job_id][0] for e in evs)
    return {"time": clock, "kind": rule, "job_id": beneficiary, "queue_id": queue_id, "cycle": cycle_number,
            "message": f"{rule} for {name}: {len(evs)} victim(s) ({victims}) release {gpus} GPUs after their "
                       f"grace period; they are held for {name}",
            "data": decision}


def recent_moves(now: float) -> tuple[Move, ...]:
    """Moves made by rescheduling in the last MOVE_MEMORY_SECONDS (the "moved" Events), oldest first, for
    Snapshot.recent_moves (the engine bounds moves per hour and never moves a job twice in its window)."""
    since = datetime.fromtimestamp(now - MOVE_MEMORY_SECONDS, tz=dt_tz.utc)
    rows = Event.objects.filter(kind="moved", time__gte=since, job_id__isnull=False).order_by("time", "id")
    return tuple(Move(job_id=job_id, time=t.timestamp(), beneficiary=(data or {}).get("beneficiary"),
                      gpus=int((data or {}).get("gpus") or 0))
                 for job_id, t, data in rows.values_list("job_id", "time", "data"))


HOLDER_STATES = ("pending", "preempting")  # a preempting job holds its new place while rescheduling moves it


def apply_holds(result: CycleResult, *, clock: datetime, cycle_number: int, stale: set) -> None:
    """Set Job.reserved for the holders (pending jobs, and preempting jobs being moved), clear it for those
    no longer held; backfill estimates."""
    held = {n.job_id: encode_reserved(n.tasks) for n in result.nominations if n.job_id not in stale}
    current = dict(Job.objects.filter(state__in=HOLDER_STATES, reserved__isnull=False).values_list("id", "reserved"))
    for job_id, tasks in held.items():
        if current.get(job_id) != tasks:
            Job.objects.filter(pk=job_id, state__in=HOLDER_STATES).update(reserved=tasks, updated_at=timezone.now())
    dropped = [j for j in current if j not in held]
    if dropped:
        Job.objects.filter(pk__in=dropped, state__in=HOLDER_STATES).update(reserved=None)
        record_events({"time": clock, "kind": "hold_dropped", "job_id": j, "cycle": cycle_number,
                       "message": "GPUs held for this job were given up (a node or GPU they were on is gone, or taken)",
                       "data": {"reserved": current[j]}} for j in dropped)
    starts = {j: datetime.fromtimestamp(t, tz=dt_tz.utc) for j, t in result.estimated_start.items()
              if t is not None and math.isfinite(t)}
    Job.objects.filter(state="pending", estimated_start__isnull=False).exclude(pk__in=list(starts)).update(
        estimated_start=None)
    for job_id, when in starts.items():
        Job.objects.filter(pk=job_id, state="pending").update(estimated_start=when)
