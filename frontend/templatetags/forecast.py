"""{% estimate job %}: a pending job's forecast in words, the one wording of every page.

"in about 2 h 10 m (90 %: 5 h)" from Job.estimated_start / estimated_start_p90 (a model or a values()
dict) relative to the cluster clock; "starts at the next cycle" when due; "overdue: was due 7 h ago (estimate
out of date, ...)" when the cluster clock has passed it; "no estimate: <reason>" when
the forecast has none (Job.estimate_note); "estimate pending: the next forecast, within 60 s, gives one" for a job
the forecast has not seen yet (submitted or requeued since: scheduling.forecast.pending_note, the API's words).
{% never job %}: a job refused for good, naming the rule (its queue's limit or quota, or the cluster).
"""
from __future__ import annotations

from datetime import datetime

from django import template

from gpuplatform import clock
from gpuplatform.wording import LEAD_WORDS, reason_words, start_words

register = template.Library()


def estimate_words(start: datetime | None, p90: datetime | None, note: str, estimated_at: datetime | None,
                   now: datetime, basis: bool = True) -> str:
    """The words of the estimate tag; `basis` False leaves out "run time assumed: no history" (wording.basis_words)
    where the page shows the note whole next to it (the job page)."""
    if start is None:
        if not note:  # not forecast since it was submitted or requeued (a bind clears the note, a requeue the start)
            from gpuplatform.scheduling.forecast import pending_note

            return pending_note()
        return f"no estimate: {note}"
    return start_words(start, p90, now, estimated_at, basis=note if basis else "")


def _get(job, name):
    return job.get(name) if isinstance(job, dict) else getattr(job, name, None)


def never_words(code: str | None) -> str:
    """The estimate of a job refused for good (Job.never_fits), naming the rule from the code of its terminal
    reason (Job.pending_reason_code, written by the cycle with the words; scheduler.core.snapshot.PENDING_CODES):
    a limit or, for a non-preemptible job, the quota of a queue of its chain (the reason next to it, the engine's
    words, names the queue and the bound in the job's own unit: GPUs, GPU-equivalents, MIG instances), else the
    cluster's own rule (another never_fits_* code: no node, domain or the whole cluster holds it); just "never" for
    another terminal code (unknown_queue, invalid: the reason says it) or while no cycle gave a code (a row from
    before migration 0032, until the next cycle)."""
    if code == "never_fits_queue_limit":
        return "never (above a queue's limit)"
    if code == "never_fits_queue_quota":
        return "never (non-preemptible, above a queue's quota: it may not borrow)"
    if code and code.startswith("never_fits_"):
        return "never (does not fit this cluster)"
    return "never"


@register.simple_tag
def never(job) -> str:
    """{% never job %}: never_words of a pending-list row or a Job (its `pending_reason_code`)."""
    return never_words(_get(job, "pending_reason_code"))


@register.filter
def relative_times(reason: str | None) -> str:
    """{{ job.pending_reason|relative_times }}: the reason's times counted from the cluster's clock, as gpuctl shows
    it ("attempt 1 retries in about 40 s", not "... retries at 2026-12-04T17:04:23Z": wording.reason_words)."""
    return reason_words(reason, clock.now())


@register.simple_tag
def estimate(job, lead: str = "", basis: bool = True) -> str:
    """{% estimate job %}: estimate_words of a job's shown estimate (scheduling.forecast.shown_estimate: the last
    cycle's reservation start when it holds GPUs for the job, else the forecast's); `lead` ("estimated ", the jobs list) goes before a time only,
    never before "no estimate: ...", "estimate pending: ..." or "overdue: ..." (new-user trial 23: the list read
    "estimated no estimate: can never start: ...")."""
    from gpuplatform.scheduling.forecast import shown_estimate

    shown = shown_estimate(job)  # the last cycle's reservation over the forecast's (new-user trial 26, F6)
    words = estimate_words(shown["estimated_start"], shown["estimated_start_p90"], shown["estimate_note"],
                           shown["estimated_at"], clock.now(), basis)
    return lead + words if words.startswith(LEAD_WORDS) else words
