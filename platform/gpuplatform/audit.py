"""The audit writer: every `Event` row of the platform is written here, one at a time (`record_event`) or
many at once (`record_events`, the scheduling cycle's decisions: COPY on PostgreSQL). Nothing else creates
Events (tests/platform/test_layers.py checks the source). Call inside the caller's transaction.
"""
from __future__ import annotations

from datetime import datetime
from typing import Iterable

from django.db import connection

from . import bulk, clock
from .models import Event

__all__ = ["record_event", "record_events", "event_rows", "EVENT_FIELDS"]

# The columns of record_events' rows, in the order they are written.
EVENT_FIELDS = ("time", "kind", "message", "data", "cycle", "job_id", "queue_id", "node_id", "actor_id")


def record_event(kind: str, message: str, *, actor=None, job=None, queue=None, node=None, data=None,
                 time: datetime | None = None, cycle: int | None = None, job_id=None, queue_id=None,
                 node_id=None) -> Event:
    """Append one audit row (time defaults to the cluster clock). Objects (`job`, `queue`, `node`) or
    their ids (`job_id`, ...) name what it is about."""
    return Event.objects.create(kind=kind, message=message, actor=actor, job=job, queue=queue, node=node,
                                job_id=job.pk if job is not None else job_id,
                                queue_id=queue.pk if queue is not None else queue_id,
                                node_id=node.pk if node is not None else node_id,
                                data=data or {}, time=time or clock.now(), cycle=cycle)


def event_rows(events: Iterable[dict], vendor: str = "postgresql") -> bulk.CopyRows:
    """`events` (dicts as record_events takes them) as rows ready for the database (bulk.copy_rows: COPY's text on
    PostgreSQL), for a later record_events. Pure: touches no connection, so it may run in another thread (the
    scheduling cycle formats its admission events while the server runs its updates)."""
    rows = [(e["time"], e["kind"], e["message"], e.get("data") or {}, e.get("cycle"), e.get("job_id"),
             e.get("queue_id"), e.get("node_id"), e.get("actor_id")) for e in events]
    return bulk.copy_rows(Event, EVENT_FIELDS, rows, vendor)


def record_events(events) -> int:
    """Append many audit rows in one statement. Each event is a dict with `kind`, `message` and `time`,
    and optionally `data`, `cycle`, `job_id`, `queue_id`, `node_id`, `actor_id` (ids only: the cycle
    writes thousands); or `events` is what event_rows made of such dicts. Returns how many were written."""
    rows = events if isinstance(events, bulk.CopyRows) else event_rows(events, connection.vendor)
    bulk.insert_rows(Event, EVENT_FIELDS, rows)
    return len(rows)
