"""The audit writer: every `Event` row of the platform is written here, one at a time (`record_event`) or
many at once (`record_events`, the scheduling cycle's decisions: COPY on PostgreSQL). Nothing else creates
Events (tests/platform/test_layers.py checks the source). Call inside the caller's transaction.

event.job_id has no foreign-key constraint in the database (migration 0023_e2e9), nor event.actor_id, queue_id and
node_id (0033_deferred_fk): both writers check the ids they write (bulk.lock_keys: one statement per column that names
any, FOR KEY SHARE, IntegrityError when a row is missing; all in one round trip, bulk.together); null ids need none.
"""
from __future__ import annotations

from datetime import datetime
from typing import Iterable

from django.contrib.auth import get_user_model
from django.db import connection

from . import bulk, clock
from .models import Event, Job, Node, Queue

__all__ = ["record_event", "record_events", "event_rows", "EVENT_FIELDS"]

# The columns of record_events' rows, in the order they are written.
EVENT_FIELDS = ("time", "kind", "message", "data", "cycle", "job_id", "queue_id", "node_id", "actor_id")


def record_event(kind: str, message: str, *, actor=None, job=None, queue=None, node=None, data=None,
                 time: datetime | None = None, cycle: int | None = None, job_id=None, queue_id=None,
                 node_id=None) -> Event:
    """Append one audit row (time defaults to the cluster clock). Objects (`job`, `queue`, `node`) or
    their ids (`job_id`, ...) name what it is about."""
    jid = job.pk if job is not None else job_id
    qid = queue.pk if queue is not None else queue_id
    nid = node.pk if node is not None else node_id
    # the foreign keys' checks (models.events.Event), as record_events' rows are checked: one statement per id given
    ids = {"job_id": jid, "queue_id": qid, "node_id": nid, "actor_id": actor.pk if actor is not None else None}
    check_jobs([tuple(ids.get(f) for f in EVENT_FIELDS)])
    return Event.objects.create(kind=kind, message=message, actor=actor, job=job, queue=queue, node=node,
                                job_id=jid, queue_id=qid, node_id=nid,
                                data=data or {}, time=time or clock.now(), cycle=cycle)


def event_rows(events: Iterable[dict], vendor: str = "postgresql") -> bulk.CopyRows:
    """`events` (dicts as record_events takes them) as rows ready for the database (bulk.copy_rows: COPY's text on
    PostgreSQL), for a later record_events. Pure: touches no connection, so it may run in another thread (the
    scheduling cycle formats its admission events while the server runs its updates)."""
    rows = [(e["time"], e["kind"], e["message"], e.get("data") or {}, e.get("cycle"), e.get("job_id"),
             e.get("queue_id"), e.get("node_id"), e.get("actor_id")) for e in events]
    return bulk.copy_rows(Event, EVENT_FIELDS, rows, vendor)


def record_events(events, *, locked_jobs=frozenset()) -> int:
    """Append many audit rows in one statement. Each event is a dict with `kind`, `message` and `time`,
    and optionally `data`, `cycle`, `job_id`, `queue_id`, `node_id`, `actor_id` (ids only: the cycle
    writes thousands); or `events` is what event_rows made of such dicts. Returns how many were written.
    `locked_jobs`: job ids whose rows the caller has read FOR NO KEY UPDATE (or updated) in this transaction
    (the scheduling cycle's bind lock): they exist and are locked more strongly than the job check's FOR KEY SHARE
    until the transaction ends, so the check reads only the other job ids named."""
    rows = events if isinstance(events, bulk.CopyRows) else event_rows(events, connection.vendor)
    bulk.insert_rows(Event, EVENT_FIELDS, rows)
    check_jobs(rows, locked_jobs)
    return len(rows)


_JOB_AT = EVENT_FIELDS.index("job_id")
# the other writer-checked columns (0033_deferred_fk): (position in a row, referenced model or None for the user
# model, what)
_OTHER_KEYS = ((EVENT_FIELDS.index("actor_id"), None, "event.actor_id"),
               (EVENT_FIELDS.index("queue_id"), Queue, "event.queue_id"),
               (EVENT_FIELDS.index("node_id"), Node, "event.node_id"))


def check_jobs(rows, locked_jobs=frozenset()) -> None:
    """The foreign-key checks for the rows record_events wrote (migrations 0023_e2e9, 0033_deferred_fk): every job
    id named is a Job row, locked FOR KEY SHARE until the transaction ends (one statement; none when every job id named
    is in `locked_jobs`, rows the caller holds locked already: record_events); likewise every actor, queue and node id
    named (one statement per column that names any; the cycle's admissions name none). The statements go in one round
    trip (bulk.together: a pipeline inside a transaction on PostgreSQL; one by one elsewhere); their answers are read
    in that order, so the error is the one the statements run one by one raised. Raises IntegrityError
    (bulk.MissingReference naming the column)."""
    raw = rows.rows if isinstance(rows, bulk.CopyRows) else rows
    with bulk.together() as batch:
        checks = [batch.lock_keys(Job, [r[_JOB_AT] for r in raw if r[_JOB_AT] is not None
                                        and r[_JOB_AT] not in locked_jobs], what="event.job_id")]
        checks += [batch.lock_keys(model or get_user_model(), {r[at] for r in raw if r[at] is not None}, what=what)
                   for at, model, what in _OTHER_KEYS]
    for check in checks:
        check.check()
