"""Django's SQLite backend, with `BEGIN IMMEDIATE` retried while another connection holds the write lock.

The embedded default (settings.py) opens every transaction with BEGIN IMMEDIATE and a busy timeout, so two
writers (a web thread and the in-process loop, or two concurrent retries of one idempotent submission)
queue for the lock instead of failing. SQLite honours the busy timeout for "database is locked"
(SQLITE_BUSY) but not for "database table is locked" (SQLITE_LOCKED), which a shared-cache database (the
in-memory database of the test runner, `file:...?cache=shared`) answers at once: the request then got a 503
"database unavailable" instead of waiting its turn. BEGIN has done nothing yet, so retrying it until the
connection's timeout is always safe; any other error, or a lock held past the timeout, is raised as before.
"""
from __future__ import annotations

import random
import time

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper
from django.db.utils import OperationalError

LOCKED = ("database is locked", "database table is locked", "database schema is locked")


def is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and any(m in str(exc) for m in LOCKED)


class DatabaseWrapper(SQLiteDatabaseWrapper):
    def _start_transaction_under_autocommit(self):
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                return super()._start_transaction_under_autocommit()
            except OperationalError as exc:
                if not is_lock_error(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.1)
