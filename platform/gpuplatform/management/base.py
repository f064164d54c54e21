"""The base of the platform's management commands that read or write its tables.

On a database that was never migrated (or is behind this code's migrations) such a command stops with
one line, "... run `python manage.py migrate` first", instead of a `no such table` traceback; on a
database it cannot reach, with the reason. Commands that touch no database (replay, gpu_agent) and the
demo (which migrates itself) do not use it.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

MIGRATE_FIRST = "run `python manage.py migrate` first"


def unapplied_migrations(alias: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Names ("app.0001_initial") of the migrations not applied to the database yet, in order."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{m.app_label}.{m.name}" for m, _backwards in plan]


def require_migrated(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Raise CommandError naming the first missing migration, or the connection problem."""
    try:
        missing = unapplied_migrations(alias)
    except DatabaseError as exc:
        raise CommandError(f"cannot read the database ({str(exc).strip().splitlines()[0]}); is DATABASE_URL right? "
                           f"On a new database, {MIGRATE_FIRST}.") from None
    if missing:
        name = connections[alias].settings_dict.get("NAME")
        raise CommandError(f"the database {name} is not migrated ({len(missing)} migration(s) not applied, the "
                           f"first {missing[0]}): {MIGRATE_FIRST}.")


class DatabaseCommand(BaseCommand):
    """A command that needs the platform's tables: checks the migrations before handle()."""

    def execute(self, *args, **options):
        require_migrated(options.get("database") or DEFAULT_DB_ALIAS)
        return super().execute(*args, **options)
