"""What every service module shares: raising the collected errors, resolving a queue argument, and
asking for a scheduling cycle once the transaction commits. Imports only the bottom layer (errors,
models); every other module of the package imports it."""
from __future__ import annotations

from django.db import connection, transaction

from ..errors import ValidationError
from ..models import Queue

__all__ = ["raise_if", "resolve_queue", "request_cycle_on_commit", "lock_queue_tree"]

QUEUE_TREE_LOCK_KEY = 0x6770_7571_7472  # "gpuqtr": the advisory lock id of the queue tree


def raise_if(errors: dict[str, str]) -> None:
    if errors:
        raise ValidationError(errors)


def resolve_queue(value, field: str) -> Queue | None:
    """A Queue, a queue name or a queue id -> the Queue (None stays None). Raises ValidationError(field)."""
    if value is None or isinstance(value, Queue):
        return value
    found = Queue.objects.filter(name=value).first() if isinstance(value, str) else Queue.objects.filter(pk=value).first()
    if found is None:
        raise ValidationError({field: f"unknown queue {value!r}"})
    return found


def request_cycle_on_commit() -> None:
    """Ask for a scheduling cycle once the current transaction commits (never blocks or fails it)."""
    def _go() -> None:
        from ..scheduling.tasks import request_cycle

        request_cycle()

    transaction.on_commit(_go)


def lock_queue_tree(*, shared: bool = False) -> None:
    """Serialize the writes that check a rule across several queues, until the current transaction ends.

    Exclusive (`shared` False): a change to the queue tree or its quotas (create_queue, update_queue,
    set_quota, delete_queue), whose rules read the siblings, the parent and the subtree (children's quotas
    within the parent's, no cycle, no job in a queue that has children, closing only once the subtree is
    idle). Shared: a job submission, which reads its queue's and its ancestors' state: submissions do not wait
    for each other, and a close or move waits for those under way (and they for it). Without it, two admins'
    changes each passed its check against the other's old rows (new-user trial 16: two siblings' quotas raised
    at once summed to 13 under a parent quota of 8; a queue closed while a job was being submitted to it read
    `closed` with that job inside; two opposite moves deadlocked and were answered as a database outage).

    PostgreSQL: a transaction-level advisory lock (`pg_advisory_xact_lock[_shared]`), released at commit or
    rollback. SQLite: nothing to take: its write transactions begin IMMEDIATE (settings), so one runs at a time.
    Call it first in the transaction, before any row lock (a caller holding a row that a lock holder writes
    would deadlock). Raises RuntimeError outside a transaction (the lock would end at once)."""
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        raise RuntimeError("lock_queue_tree needs a transaction (transaction.atomic)")
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s)" if shared else "SELECT pg_advisory_xact_lock(%s)",
                    [QUEUE_TREE_LOCK_KEY])
