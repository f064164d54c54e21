"""The audit writer: every write of the platform leaves an `Event` row through `record_event`."""
from __future__ import annotations

from datetime import datetime

from . import clock
from .models import Event

__all__ = ["record_event"]


def record_event(kind: str, message: str, *, actor=None, job=None, queue=None, node=None, data=None,
                 time: datetime | None = None, cycle: int | None = None, job_id=None, queue_id=None,
                 node_id=None) -> Event:
    """Append one audit row (time defaults to the cluster clock). Call inside the caller's transaction.
    Objects (`job`, `queue`, `node`) or their ids (`job_id`, ...) name what it is about."""
    return Event.objects.create(kind=kind, message=message, actor=actor, job=job, queue=queue, node=node,
                                job_id=job.pk if job is not None else job_id,
                                queue_id=queue.pk if queue is not None else queue_id,
                                node_id=node.pk if node is not None else node_id,
                                data=data or {}, time=time or clock.now(), cycle=cycle)
