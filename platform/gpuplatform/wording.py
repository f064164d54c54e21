"""Counts in sentences: "1 GPU", "2 GPUs", "1 node", "3 nodes" (new-user trial 14, F22: events and job pages said
"1 GPUs" and "1 node(s)")."""
from __future__ import annotations

import re
from datetime import datetime, timezone


def count(n, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, plural unless n is exactly 1 (a fraction such as 0.5 or 1.5 is plural: "0.5 GPUs")."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def one_of(values) -> str:
    """The allowed values of a field, as a message lists them: "open, closing, closed, draining" (new-user trial
    23: messages read Python's list repr, "one of ['open', 'closing', 'closed', 'draining']")."""
    return ", ".join(str(v) for v in values)


def quota_words(guarantee, quota, limit) -> str:
    """A quota's three numbers, named: "guarantee 0, quota 3, no limit" (trial 23: an Event read "0/3/None")."""
    return f"guarantee {guarantee}, quota {quota}, " + ("no limit" if limit is None else f"limit {limit}")


def duration_words(seconds: float) -> str:
    """2 h 10 m, 45 m, 3 d 4 h: two units at most, rounded to the minute (the pages' and gpuctl's one wording)."""
    minutes = max(0, int(round(seconds / 60.0)))
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {mins} m" if mins else f"{hours} h"
    return f"{mins} m"


# a start this close (seconds) is "at the next cycle": cycles run every SCHEDULER_CYCLE_SECONDS (5 by default) or sooner
NEXT_CYCLE_S = 5


def lead_words(seconds: float) -> str:
    """When something due in `seconds` (from the cluster's clock) happens: "at the next cycle" within NEXT_CYCLE_S,
    "in about 35 s" under a minute, else "in about 2 h 10 m" (duration_words); start_words reads it (new-user trial
    24, F4: a job held by its requeue backoff for 35 s more read "at the next cycle" while cycles ran every second,
    next to "retries at" that time)."""
    if seconds < NEXT_CYCLE_S:
        return "at the next cycle"
    if round(seconds) < 60:  # 59.6 s is "1 m", not "60 s"
        return f"in about {int(round(seconds))} s"
    return f"in about {duration_words(seconds)}"


# the words start_words begins a time with (a page puts "estimated " before them, gpuctl "starts ")
LEAD_WORDS = ("at the next cycle", "in about ")


def start_words(start, p90, now, estimated_at=None, basis: str = "") -> str:
    """An estimated start (aware datetimes: `start`, its 90 % bound `p90` or None past the horizon) in words, counted
    from the cluster's clock `now`: "in about 2 h 10 m (90 %: 5 h)", "at the next cycle (90 %: beyond the horizon)"
    (lead_words), or "overdue: was due 7 h ago (estimate out of date, forecast 8 h ago)" once the clock has passed it
    by a minute (new-user trial 7, F7: the demo's clock runs 600x between two forecasts). The pages' estimate tag and
    gpuctl read it (new-user re-check 24, R1: gpuctl counted from the forecast's time and the page from now).
    `basis`: the estimate's note (Job.estimate_note); a run time assumed for want of history is said in the
    parenthesis, "in about 1 h (run time assumed: no history)" (basis_words; new-user trial 25, F2)."""
    lead = (start - now).total_seconds()
    if lead <= -60:
        age = f", forecast {duration_words((now - estimated_at).total_seconds())} ago" if estimated_at else ""
        return f"overdue: was due {duration_words(-lead)} ago (estimate out of date{age})"
    text = lead_words(lead)
    if p90 is not None and (p90 - start).total_seconds() >= 60:
        text += f" (90 %: {duration_words((p90 - now).total_seconds())})"
    elif p90 is None:
        text += " (90 %: beyond the horizon)"
    brief = basis_words(basis)
    if brief:
        text = text[:-1] + f"; {brief})" if text.endswith(")") else text + f" ({brief})"
    return text


# the forecast's estimate_note for a job whose run time has no history to come from (scheduling.forecast.SOURCES)
NO_HISTORY = "no history yet"


def basis_words(note: str | None) -> str:
    """What an estimate rests on, briefly, when a person should know it: "run time assumed: no history" for a
    start estimated with the estimator's default run time (the note "run time from no history yet (1 h assumed)");
    "" for one estimated from history (the note says whose; the job page and --json show it whole). New-user trial
    25, F2: gpuctl's "starts in about 1 h" hid that the hour was assumed."""
    return "run time assumed: no history" if note and NO_HISTORY in note else ""


_LAST_REASON = " (last reason: "


def no_estimate_words(note: str, reason: str | None) -> str:
    """A no-estimate note (Job.estimate_note) shown next to the job's pending reason, without the note's
    "(last reason: ...)" when that reason is the one shown (new-user trial 25, F1: gpuctl's cell read "no estimate:
    not started within the 168 h horizon (last reason: needs 4 H200 GPUs at once; ...); needs 4 H200 GPUs at once;
    ..."). A last reason that differs from the current one stays (the forecast saw another)."""
    at = note.find(_LAST_REASON)
    if at < 0 or not reason:
        return note
    last = note[at + len(_LAST_REASON):]
    last = last[:-1] if last.endswith(")") else last  # the note is cut at 300 characters: maybe no ")"
    return note[:at] if last and last in reason else note


# an engine reason's time (scheduler.core.snapshot.utc_iso): "retries at 2026-12-04T17:04:23Z", "starts at
# 2026-12-04T17:04:23Z at the earliest" (scheduler.core.actions.allocate.backoff_reason)
_AT_ISO = re.compile(r"\bat (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


def reason_words(reason: str | None, now) -> str:
    """A pending reason for display, its times counted from the cluster's clock `now` (an aware datetime) as every
    other time of the column is: "attempt 1 retries at 2026-12-04T17:04:23Z" reads "attempt 1 retries in about
    40 s" (lead_words; "at the next cycle" once due). The engine's words and the API's pending_reason are unchanged
    (replay digests pin them); gpuctl and the pages show this (new-user trial 25, F3). `now` None: as given."""
    if not reason or now is None:
        return reason or ""

    def relative(m) -> str:
        when = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        return lead_words((when - now).total_seconds())

    return _AT_ISO.sub(relative, reason)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 102nd."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
