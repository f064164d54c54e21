"""Single-flight for the scheduling cycle.

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
