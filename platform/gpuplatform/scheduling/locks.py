"""Single-flight for the scheduling cycle, and the queue tree's lock (lock_queue_tree).

PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`), shared by every process using the
database, released in `finally` (and by PostgreSQL itself if the process dies with its connection).
SQLite (the embedded default, one process): a process-level `threading.Lock`. Neither blocks: a caller
that does not get the lock is told so and skips its cycle.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from django.db import connection

CYCLE_LOCK_KEY = 0x6770_7573_6368  # "gpusch": the advisory lock id of the scheduling cycle
QUEUE_TREE_LOCK_KEY = 0x6770_7571_7472  # "gpuqtr": the advisory lock id of the queue tree (lock_queue_tree)
_local_lock = threading.Lock()
_local_locks: dict[int, threading.Lock] = {CYCLE_LOCK_KEY: _local_lock}  # one per key (the forecast has its own)


@contextmanager
def single_flight(key: int = CYCLE_LOCK_KEY) -> Iterator[bool]:
    """Yield True when this caller holds the lock `key` (default: the cycle's), False when another holds it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
            acquired = bool(cur.fetchone()[0])
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    lock = _local_locks.setdefault(key, threading.Lock())
    acquired = lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            lock.release()


def lock_queue_tree(*, shared: bool = False) -> None:
    """Serialize the writes that check a rule across several queues, until the current transaction ends.

    Exclusive (`shared` False): a change to the queue tree or its quotas (create_queue, update_queue,
    set_quota, delete_queue) and a closing queue's close (lifecycle.close_idle_queues), whose rules read the
    siblings, the parent and the subtree (children's quotas within the parent's, no cycle, no job in a queue that
    has children, closed only once the subtree is idle). Shared: a job submission, which reads its queue's and its ancestors' state: submissions do not wait
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


def lock_name(namespace: str, value) -> None:
    """Serialize, until the current transaction ends, the writes that check one name of `namespace` before they
    write it: a team's name or slug (services.tenancy: create_team, update_team, delete_team), a member cluster's
    name (federation.manager), a diagnosis or health rule's name (services.rules), an idempotency key
    (api.idempotency), a GPU or MIG instance UUID a node registers (services.nodes: "gpu uuid"); and one team's
    membership writes (services.tenancy.lock_team_members: "team members" and the
    team's id). The second waits for the first to commit and then reads its row, so it answers the rule's 400 or the
    replay, not the unique index's error (new-user trial 16b, F1-F3: two creations of one team name answered a 500;
    concurrent retries with one Idempotency-Key a 400 "already exists"; one membership added three times read
    "created" thrice).
    PostgreSQL: a transaction-level advisory lock on the two-key space (hashtext(namespace), hashtext(value)), apart
    from the one-key locks above; a hash shared by two values only makes them wait for each other. SQLite: nothing
    (its write transactions run one at a time). Raises RuntimeError outside a transaction."""
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        raise RuntimeError("lock_name needs a transaction (transaction.atomic)")
    with connection.cursor() as cur:
        # (a NUL, which PostgreSQL text refuses, is left out: the value is refused by its own rule afterwards)
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
                    [namespace, str(value).replace("\x00", "")])
