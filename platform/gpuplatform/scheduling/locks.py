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


@contextmanager
def single_flight(key: int = CYCLE_LOCK_KEY) -> Iterator[bool]:
    """Yield True when this caller holds the cycle lock, False when another cycle holds it."""
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
    acquired = _local_lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            _local_lock.release()
