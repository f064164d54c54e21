"""Issue 16 (session 23): the last foreign-key constraints on the rows a scheduling cycle inserts, event.actor_id,
event.queue_id, event.node_id and allocation.mig_instance_id, are replaced by their two halves, as 0024_e2e10 did for
allocation.gpu_id and task.node_id.

Why: PostgreSQL queues a deferred foreign key's check for EVERY row inserted, null or not (only an update that keeps
the key skips the queue), and runs the queue at the commit. A headline cycle (10,000 starts on 13,035 GPUs) queued
43,000 such checks, all on null columns: 30,000 for its admission Events (three constraints each), 13,035 for its
allocations. Measured with psql on 10,000 admission Events: the INSERT 65 ms and its COMMIT 26 ms with the
constraints, 60 ms and 3 ms without.

- the referencing side: the one writer of each table checks the ids it writes in one statement per column, with the
  lock PostgreSQL's own check takes (FOR KEY SHARE until the transaction ends; bulk.lock_keys), and raises
  IntegrityError as the constraint did: gpuplatform.audit (record_event, record_events) the actor, queue and node ids;
  gpuplatform.allocations (write_allocations, and the cycle's fast path) the MIG instance ids (check_mig_instances).
  Null ids need no statement: an admission Event or a whole-GPU allocation costs nothing.
- the referenced side: deferred constraint triggers on auth_user, gpuplatform_queue, gpuplatform_node and
  gpuplatform_miginstance (0024_e2e10's function gpuplatform_still_referenced) refuse, at the deleter's commit, deleting
  or re-keying a row an Event or allocation still names. Django's SET_NULL still runs first, so an ORM delete passes.

PostgreSQL only for the triggers; elsewhere (SQLite) Django's on_delete, as for the other writer-checked columns.
tests/platform/test_references.py.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (trigger name stem, referenced model, referencing table, referencing column)
_REFERENCES = (
    ("event_actor_id", settings.AUTH_USER_MODEL, "gpuplatform_event", "actor_id"),
    ("event_queue_id", "gpuplatform.Queue", "gpuplatform_event", "queue_id"),
    ("event_node_id", "gpuplatform.Node", "gpuplatform_event", "node_id"),
    ("allocation_mig_instance_id", "gpuplatform.MigInstance", "gpuplatform_allocation", "mig_instance_id"),
)


def _table(apps, label: str) -> str:
    return apps.get_model(label)._meta.db_table


def _triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for stem, label, table, column in _REFERENCES:
        referenced = quote(_table(apps, label))
        schema_editor.execute(
            f"CREATE CONSTRAINT TRIGGER {stem}_delete AFTER DELETE ON {referenced} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            f"EXECUTE FUNCTION gpuplatform_still_referenced('{table}', '{column}')", None)
        schema_editor.execute(
            f"CREATE CONSTRAINT TRIGGER {stem}_rekey AFTER UPDATE OF id ON {referenced} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) "
            f"EXECUTE FUNCTION gpuplatform_still_referenced('{table}', '{column}')", None)


def _no_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for stem, label, _, _ in _REFERENCES:
        referenced = quote(_table(apps, label))
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {stem}_rekey ON {referenced}", None)
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {stem}_delete ON {referenced}", None)


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0032_job_pending_reason_code'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='allocation',
            name='mig_instance',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='allocations', to='gpuplatform.miginstance'),
        ),
        migrations.AlterField(
            model_name='event',
            name='actor',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='event',
            name='node',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='gpuplatform.node'),
        ),
        migrations.AlterField(
            model_name='event',
            name='queue',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='gpuplatform.queue'),
        ),
        migrations.RunPython(_triggers, _no_triggers),
    ]
