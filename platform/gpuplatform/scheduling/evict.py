"""The eviction half of `store.apply_result`: the engine's evictions, holds (nominations), backfill
estimates and audit decisions -> ORM, inside apply_result's transaction.

- Evictions are applied per beneficiary (one decision) in a savepoint: a whole gang goes running ->
  preempting with `preempt_deadline` = clock + its queue's `preemption_grace_seconds`; surplus tasks go
  bound|running -> releasing with `release_deadline` (the job keeps running). Each is a compare-and-set;
  if any victim of a decision is stale (finished, requeued, already preempting), the whole decision is
  skipped, logged and counted, and its beneficiary gets no hold: never forced.
- Holds: `Job.reserved` is set for every nominated pending job (the engine reads it back next cycle) and
  cleared for pending jobs no longer held; a "hold_set" Event when a hold is set or changes and a
  "hold_dropped" one when it is given up (the GPU-hour ledger's `held` reads them).
- `Job.reservation_start` is set from the backfill reservation and cleared for every other pending job
  (`estimated_start` is the forecast's: gpuplatform/scheduling/forecast.py).
- One Event per decision (kind "reclaim" | "preempt", on the beneficiary: victims, GPUs, usage before and
  after) and one "preempted" | "reclaimed" Event per victim (rule, beneficiary, tasks, deadline), written
  together by the audit writer's bulk form (audit.record_events).
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_tz

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gpuplatform.audit import record_events
from gpuplatform.event_visibility import render
from gpuplatform.lifecycle import evict_job
from gpuplatform.models import Event, Job, Task
from ..wording import count
from scheduler.core.snapshot import CycleResult, JobInfo, Move, RoleInfo, TaskPlacement

log = logging.getLogger("gpuplatform.scheduling.store")
VICTIM_KINDS = {"preempt": "preempted", "reclaim": "reclaimed", "reschedule": "moved"}  # the victims' Event kinds
# a preempting job's stop_target while its stop ends in a requeue (an eviction; not a stop toward an end or a
# restart): only such an eviction is a beneficiary's plan that may still be withdrawn
REQUEUE_STOPS = ("", "requeue")
MOVE_MEMORY_SECONDS = 24 * 3600.0  # how far back recent_moves reads "moved" Events (>= any reschedule_window)


def releasing_id(job_id) -> str:
    """The snapshot id of a running job's surplus tasks that are being released (a "preempting" pseudo-job,
    as ScenarioRunner models them): their GPUs stay used, and a beneficiary may wait for them."""
    return f"{job_id}:releasing"


def releasing_job(jid, queue, name, tasks, role_specs, beneficiary=None, deadline: float | None = None) -> JobInfo:
    """The "preempting" pseudo-job (releasing_id) of a running job's surplus tasks being released: `tasks` their
    TaskPlacements, `deadline` the latest of their release_deadline (epoch seconds; JobInfo.stop_deadline)."""
    counts: dict[str, int] = defaultdict(int)
    for t in tasks:
        counts[t.role] += 1
    roles = tuple(RoleInfo(r, n, role_specs[(jid, r)][0], n, *role_specs[(jid, r)][1:]) for r, n in sorted(counts.items()))
    return JobInfo(id=releasing_id(jid), queue=queue, roles=roles, state="preempting", name=f"{name} (releasing)",
                   placement=tuple(sorted(tasks, key=lambda p: (p.role, p.index))), evicted_for=beneficiary,
                   part_of=jid, stop_deadline=deadline)


def signal_at(deadline: datetime) -> datetime:
    """When node agents are told to stop a job (or tasks) being evicted for a beneficiary: AGENT_STOP_GRACE_SECONDS
    before its deadline (at once when the grace period is shorter). Until then the eviction is a plan: it may
    be withdrawn and the processes never notice."""
    return deadline - timedelta(seconds=float(getattr(settings, "AGENT_STOP_GRACE_SECONDS", 30.0)))


def apply_withdrawals(result: CycleResult, *, clock: datetime, cycle_number: int) -> int:
    """Take back the evictions the engine withdrew (their beneficiary left): a whole gang goes preempting ->
    running (admitted if it had not started), its deadline and owner cleared; released surplus tasks go back
    to running (bound if not started). Each is a compare-and-set on the eviction still being the same plan
    (same beneficiary, still a requeue) and not yet signalled to a node agent (`signal_at`); one
    "eviction_withdrawn" Event per victim. Returns the victims restored."""
    events = []
    for w in result.withdrawals:
        if isinstance(w.job_id, str) and w.job_id.endswith(":releasing"):
            jid = int(w.job_id.split(":")[0])
            tasks = Task.objects.filter(job_id=jid, state=Task.State.RELEASING, release_for=w.beneficiary,
                                        job__state__in=Job.ACTIVE_STATES)
            deadlines = [d for d in tasks.values_list("release_deadline", flat=True) if d is not None]
            if not deadlines or (min(signal_at(d) for d in deadlines) <= clock and _on_agents(jid)):
                continue
            moved = tasks.filter(started_at__isnull=False).update(state=Task.State.RUNNING, release_deadline=None,
                                                                   release_for=None)
            moved += tasks.update(state=Task.State.BOUND, release_deadline=None, release_for=None)
            what, job_id = f"{moved} surplus task(s)", jid
        else:
            row = Job.objects.filter(pk=w.job_id, state=Job.State.PREEMPTING, evicted_for=w.beneficiary,
                                     stop_target__in=REQUEUE_STOPS).values_list("preempt_deadline", "started_at").first()
            if row is None or (row[0] is not None and signal_at(row[0]) <= clock and _on_agents(w.job_id)):
                continue
            if not Job.objects.filter(pk=w.job_id, state=Job.State.PREEMPTING, evicted_for=w.beneficiary).update(
                    state=Job.State.RUNNING if row[1] is not None else Job.State.ADMITTED, preempt_deadline=None,
                    evicted_for=None, stop_reason="", updated_at=timezone.now()):
                continue
            what, job_id = "whole gang", w.job_id
        queue_id = Job.objects.filter(pk=job_id).values_list("queue_id", flat=True).first()
        events.append({"time": clock, "kind": "eviction_withdrawn", "job_id": job_id, "queue_id": queue_id,
                       "cycle": cycle_number, "message": w.message,
                       "data": {"beneficiary": w.beneficiary, "what": what, "tasks": [list(t) for t in w.tasks]}})
    record_events(events)
    return len(events)


def _on_agents(job_id) -> bool:
    from gpuplatform.execution.stops import live_agent_tasks

    return live_agent_tasks(job_id).exists()


def encode_reserved(tasks) -> list:
    """[[role, index, node, gpus]] per held task; a held GPU share adds [gpu_milli, gpu_memory_mib, MIG UUIDs]."""
    return [[t.role, t.index, t.node, list(t.gpus)]
            + ([t.gpu_milli, t.gpu_memory_mib, list(t.mig)] if t.gpu_milli or t.mig else []) for t in tasks]


def decode_reserved(value) -> tuple[TaskPlacement, ...]:
    """The TaskPlacements `encode_reserved` wrote (entries of 4 items, or 7 for a GPU share)."""
    out = []
    for entry in value or ():
        r, i, n, gpus = entry[:4]
        milli, mem, mig = entry[4:7] if len(entry) >= 7 else (0, 0, ())
        out.append(TaskPlacement(str(r), int(i), str(n), tuple(int(g) for g in gpus), gpu_milli=int(milli),
                                 gpu_memory_mib=int(mem), mig=tuple(str(u) for u in mig)))
    return tuple(out)


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
    info = {row[0]: row[1:] for row in Job.objects.filter(pk__in=ids).values_list(
        "id", "name", "queue_id", "queue__preemption_grace_seconds", "team_id", "team__name")}
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
    name, queue_id, grace = info[ev.job_id][:3]
    if getattr(ev, "grace", None) is not None:  # a move: the job's own checkpoint grace
        grace = ev.grace
    if not ev.tasks:
        deadline = evict_job(ev.job_id, at=clock, grace_seconds=grace, kind=ev.rule, reason=ev.message,
                             cycle=cycle_number, event=False, evicted_for=ev.beneficiary)  # the plan's owner
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
            state=Task.State.RELEASING, release_deadline=deadline, release_for=ev.beneficiary)
        if moved != len(ev.tasks):
            raise StaleDecision(f"{len(ev.tasks) - moved} task(s) of {name} no longer running")
    what = "whole gang" if not ev.tasks else f"{len(ev.tasks)} surplus task(s)"
    template = (f"{ev.rule}: {what} of {{job:{ev.job_id}}} releases {count(ev.gpus, 'GPU')} at {deadline:%H:%M:%S} "
                f"for {{job:{ev.beneficiary}}}")
    mentions = _mentions(info, ev.job_id, ev.beneficiary)
    return {"time": clock, "kind": VICTIM_KINDS.get(ev.rule, "evicted"), "job_id": ev.job_id, "queue_id": queue_id,
            "cycle": cycle_number, "message": render(template, mentions, None),
            "data": {"rule": ev.rule, "beneficiary": ev.beneficiary, "tasks": [list(t) for t in ev.tasks],
                     "gpus": ev.gpus, "deadline": deadline.isoformat(), "grace_seconds": grace, "reason": ev.message,
                     "mentions": mentions, "message_template": template}}


def _mentions(info: dict, *job_ids) -> dict:
    """The jobs an event names, for event_visibility: {"<id>": {"name", "team_id", "team"}}."""
    return {str(j): {"name": info[j][0], "team_id": info[j][3], "team": info[j][4]} for j in job_ids if j in info}


def _decision_event(beneficiary, evs, decision, info, victim_events, clock, cycle_number) -> dict:
    rule = evs[0].rule
    queue_id = info.get(beneficiary, (str(beneficiary), None))[1]
    decision = dict(decision or {"rule": rule, "beneficiary": beneficiary,
                                 "victims": [{"job": e.job_id, "tasks": list(e.tasks), "gpus": e.gpus} for e in evs]})
    for v in decision.get("victims", ()):
        v["name"] = info.get(v["job"], ("?",))[0]
        v["tasks"] = [list(t) for t in v.get("tasks", ())]
    decision["deadlines"] = {str(e.job_id): ve["data"]["deadline"] for e, ve in zip(evs, victim_events)}
    gpus = sum(e.gpus for e in evs)
    victims = ", ".join(f"{{job:{e.job_id}}}" for e in evs)
    template = (f"{rule} for {{job:{beneficiary}}}: {count(len(evs), 'victim')} ({victims}) release {count(gpus, 'GPU')} after "
                f"their grace period; they are held for {{job:{beneficiary}}}")
    decision["mentions"] = _mentions(info, beneficiary, *(e.job_id for e in evs))
    decision["message_template"] = template
    return {"time": clock, "kind": rule, "job_id": beneficiary, "queue_id": queue_id, "cycle": cycle_number,
            "message": render(template, decision["mentions"], None), "data": decision}


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
    changed = []
    for job_id, tasks in held.items():
        if current.get(job_id) != tasks:
            if Job.objects.filter(pk=job_id, state__in=HOLDER_STATES).update(reserved=tasks, updated_at=timezone.now()):
                changed.append(job_id)
    if changed:  # the hold's history, for the GPU-hour ledger's `held` (gpuplatform.utilization)
        record_events({"time": clock, "kind": "hold_set", "job_id": j, "cycle": cycle_number,
                       "message": f"{count(sum(len(t[3]) for t in held[j]), 'GPU')} held for this job until it can start",
                       "data": {"reserved": held[j]}} for j in changed)
    dropped = [j for j in current if j not in held]
    if dropped:
        Job.objects.filter(pk__in=dropped, state__in=HOLDER_STATES).update(reserved=None)
        record_events({"time": clock, "kind": "hold_dropped", "job_id": j, "cycle": cycle_number,
                       "message": "GPUs held for this job were given up (a node or GPU they were on is gone, or taken)",
                       "data": {"reserved": current[j]}} for j in dropped)
    starts = {j: datetime.fromtimestamp(t, tz=dt_tz.utc) for j, t in result.estimated_start.items()
              if t is not None and math.isfinite(t)}
    Job.objects.filter(state="pending", reservation_start__isnull=False).exclude(pk__in=list(starts)).update(
        reservation_start=None)
    for job_id, when in starts.items():
        Job.objects.filter(pk=job_id, state="pending").update(reservation_start=when)
