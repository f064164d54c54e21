"""A running demo's hold on its database (`manage.py demo`): a second demo on the same database refuses before it
clears or mixes the first one's workload (DatabaseHold)."""
from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

__all__ = ["DEMO_LOCK_KEY", "DatabaseHold", "demo_database"]

DEMO_LOCK_KEY = 0x67707564  # the PostgreSQL advisory lock a demo holds on its database while it runs ("gpud")


def demo_database() -> dict:
    """The database a demo holds while it runs: DatabaseHold's vendor and name (Django's default database)."""
    return {"vendor": connection.vendor, "name": str(settings.DATABASES["default"].get("NAME") or "")}


def database_variable() -> str:
    """The variable that picks the demo's database: DATABASE_URL for `manage.py demo`; under make, the
    Makefile's (DEMO_DB, DEMO_LOCAL_DB, ...), which it names in DEMO_DB_VARIABLE, since each make target sets
    DATABASE_URL itself whatever the shell has (new-user trial 14, F9)."""
    name = os.environ.get("DEMO_DB_VARIABLE", "")
    return name if name.isidentifier() else "DATABASE_URL"


class DatabaseHold:
    """This process's claim on the demo's database while a demo runs on it, so that a second demo on the same
    database (another port, the same DATABASE_URL or db.sqlite3) refuses before it clears or mixes the first
    one's workload (both would run a scheduling loop on it). SQLite: an exclusive flock on `<database file>.demo-lock`
    (its text says who holds it); PostgreSQL: a session-level advisory lock (DEMO_LOCK_KEY, per database) on a
    connection of its own, named after the holder (application_name). Both end with the process. An in-memory SQLite
    database (the tests') and other backends are not held. `release()` gives it back."""

    def __init__(self, port: int | None, *, vendor: str | None = None, name: str | None = None):
        """port: the demo's (None: --no-server); vendor / name: the database's (default: Django's default one)."""
        self.port, self._file, self._conn = port, None, None
        self.vendor = vendor or connection.vendor
        self.name = str(settings.DATABASES["default"].get("NAME") or "") if name is None else name
        self.who = f"pid {os.getpid()}, " + (f"port {port}" if port is not None else "no web server")

    def acquire(self) -> "DatabaseHold":
        """Hold the database, or raise CommandError naming the demo that holds it (nothing changed)."""
        vendor, name = self.vendor, self.name
        if vendor == "sqlite" and name and name != ":memory:" and "mode=memory" not in name:
            import fcntl

            path = name + ".demo-lock"
            fh = open(path, "a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                fh.close()
                self._refuse(holder, name)
            fh.seek(0)
            fh.truncate()
            fh.write(self.who)
            fh.flush()
            self._file = fh
        elif vendor == "postgresql":
            conn = connection.get_new_connection(connection.get_connection_params())
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('application_name', %s, false)", [f"gpuplatform demo ({self.who})"])
                cur.execute("SELECT pg_try_advisory_lock(%s)", [DEMO_LOCK_KEY])
                if not cur.fetchone()[0]:
                    cur.execute("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                                "WHERE l.locktype = 'advisory' AND l.granted AND l.objid = %s AND l.database = "
                                "(SELECT oid FROM pg_database WHERE datname = current_database())",
                                [DEMO_LOCK_KEY & 0xFFFFFFFF])
                    row = cur.fetchone()
                    conn.close()
                    self._refuse(row[0] if row and row[0] else "another process", name)
            self._conn = conn
        return self

    def _refuse(self, holder: str, name: str) -> None:
        other = (f"{database_variable()}=sqlite:///db-second.sqlite3" if self.vendor == "sqlite"
                 else f"{database_variable()}=postgres://.../another_database")
        raise CommandError(
            f"another demo runs on this database ({name}; held by {holder}): a second one would clear or mix its "
            f"workload. Nothing was changed (its jobs are untouched): stop it first, or give this one its own "
            f"database ({other})")

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None
        if self._conn is not None:
            try:
                self._conn.close()  # the session ends: its advisory lock with it
            except Exception:  # noqa: BLE001 - a connection already gone holds nothing
                pass
            self._conn = None
