"""Rescheduling on an admin's request: ask the owners' running jobs to checkpoint and move so that a job
blocked by fragmentation can start (the advisor's button; scheduling/advice.py lists the moves).

    request_moves(beneficiary=, jobs=, actor=, at=None) -> dict

The engine's planner (scheduler/core/actions/reschedule.py) is asked again, now, with exactly `jobs`
treated as migratable and only `beneficiary` (and the jobs already holding GPUs) pending; if its plan
still frees a domain for the beneficiary with jobs among `jobs`, each moved job is evicted gracefully
(preempting until its checkpoint grace, or its queue's grace period, is over; a "moved" Event with the
actor), its new place is held for it (Job.reserved, kept through its requeue) and the beneficiary's GPUs
are held for it; one "reschedule" Event records the request. Atomic. Raises ValidationError naming the
field: unknown or not pending beneficiary ("beneficiary"), jobs not running ("jobs"), or no plan with
these jobs any more ("jobs")."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .. import clock
from ..audit import record_event
from ..errors import ValidationError
from ..lifecycle import evict_job
from ..models import Job

__all__ = ["request_moves"]


@transaction.atomic
def request_moves(*, beneficiary: int, jobs: list[int], actor=None, at: datetime | None = None) -> dict:
    """See the module docstring. Returns {beneficiary, domain, moves: [{job, gpus, to, deadline}]}."""
    from scheduler.core import run_cycle

    from ..scheduling import store  # the scheduling package imports services: imported when called
    from ..scheduling.advice import advice_config
    from ..scheduling.evict import encode_reserved

    at = at or clock.now()
    ben = Job.objects.filter(pk=beneficiary).values_list("state", "name").first()
    if ben is None or ben[0] != Job.State.PENDING:
        raise ValidationError({"beneficiary": f"job {beneficiary} is not a pending job"})
    wanted = set(jobs)
    if not wanted:
        raise ValidationError({"jobs": "name the running jobs to move"})
    running = set(Job.objects.filter(pk__in=wanted, state__in=Job.ACTIVE_STATES).values_list("id", flat=True))
    if running != wanted:
        raise ValidationError({"jobs": f"jobs {sorted(wanted - running)} are not running"})
    snapshot, _ = store.build_snapshot(at.timestamp())
    kept = tuple(
        replace(j, migratable=True, min_run_before_move=0.0) if j.id in wanted else j
        for j in snapshot.jobs if j.state != "pending" or j.id == beneficiary or j.reserved)
    config = replace(advice_config(), reschedule=True, reschedule_advice=False,
                     reschedule_moves_per_hour=len(wanted), reschedule_max_victims=len(wanted))
    result = run_cycle(replace(snapshot, jobs=kept, cycle=0, recent_moves=()), config)
    decision = next((d for d in result.decisions if d["rule"] == "reschedule" and d["beneficiary"] == beneficiary),
                    None)
    if decision is None:
        raise ValidationError({"jobs": f"moving jobs {sorted(wanted)} no longer frees a domain for job {ben[1]}"})
    holds = {n.job_id: n.tasks for n in result.nominations}
    grace = dict(Job.objects.filter(pk__in=wanted).values_list("id", "queue__preemption_grace_seconds"))
    moves = []
    for ev in result.evictions:
        if ev.rule != "reschedule" or ev.beneficiary != beneficiary:
            continue
        seconds = ev.grace if ev.grace is not None else grace[ev.job_id]
        move = next(m for m in result.moves if m.job_id == ev.job_id)
        deadline = evict_job(ev.job_id, at=at, grace_seconds=seconds, kind="moved", reason=ev.message, actor=actor,
                             data={"rule": "reschedule", "beneficiary": beneficiary, "gpus": ev.gpus,
                                   "to": [list(t) for t in encode_reserved(move.tasks)], "requested": True})
        if deadline is None:
            raise ValidationError({"jobs": f"job {ev.job_id} is no longer running"})
        Job.objects.filter(pk=ev.job_id).update(reserved=encode_reserved(move.tasks), updated_at=timezone.now())
        moves.append({"job": ev.job_id, "gpus": ev.gpus, "to": next(v["to"] for v in decision["victims"]
                                                                      if v["job"] == ev.job_id),
                      "deadline": deadline.isoformat()})
    Job.objects.filter(pk=beneficiary, state=Job.State.PENDING).update(
        reserved=encode_reserved(holds[beneficiary]), updated_at=timezone.now())
    out = {"beneficiary": beneficiary, "domain": decision["domain"], "moves": moves}
    record_event("reschedule", f"{ben[1]}: {len(moves)} job(s) asked to checkpoint and move to free "
                               f"{decision['domain']} for it", actor=actor, job_id=beneficiary, time=at, data=out)
    return out
