"""What every service module shares: raising the collected errors, resolving a queue argument, and
asking for a scheduling cycle once the transaction commits. Imports only the bottom layer (errors,
models); every other module of the package imports it."""
from __future__ import annotations

from django.db import transaction

from ..errors import ValidationError
from ..models import Queue
from ..scheduling.locks import lock_queue_tree  # noqa: F401 (the services' and views' name for it)

__all__ = ["raise_if", "resolve_queue", "request_cycle_on_commit", "lock_queue_tree"]


def raise_if(errors: dict[str, str]) -> None:
    if errors:
        raise ValidationError(errors)


def resolve_queue(value, field: str) -> Queue | None:
    """A Queue, a queue name or a queue id -> the Queue (None stays None). Raises ValidationError(field): unknown
    queue, naming the queue it may have meant by the queue name rule (services.queues.queue_named: `ALPHA`)."""
    if value is None or isinstance(value, Queue):
        return value
    found = Queue.objects.filter(name=value).first() if isinstance(value, str) else Queue.objects.filter(pk=value).first()
    if found is None:
        raise ValidationError({field: unknown_queue(value)})
    return found


def unknown_queue(value) -> str:
    """The one wording of a queue name (or id) that names no queue, naming the queue it may have meant by the queue
    name rule (services.queues.queue_named: `ALPHA` for `alpha`; names are looked up exactly)."""
    from .queues import queue_named  # (queues.py imports this module)

    near = queue_named(value) if isinstance(value, str) else None
    return f"unknown queue {value!r}" + (f" (did you mean {near!r}?)" if near else "")


def request_cycle_on_commit() -> None:
    """Ask for a scheduling cycle once the current transaction commits (never blocks or fails it)."""
    def _go() -> None:
        from ..scheduling.tasks import request_cycle

        request_cycle()

    transaction.on_commit(_go)
