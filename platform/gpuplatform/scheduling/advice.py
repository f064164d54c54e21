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
