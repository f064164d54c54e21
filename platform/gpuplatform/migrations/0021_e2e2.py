# Issue 16 (the database side of the cycle's apply): fewer index entries per row the cycle writes.
#
# - Indexes that are a prefix of another index are dropped: job.team_id (the (team, state) index leads with
#   it), task.role_id (the unique (role, index) index), allocation.job_id (the (job, released_at) index), and
#   PostgreSQL's varchar_pattern_ops twin of event.kind (only for LIKE, which nothing runs on kinds); event.kind
#   keeps a plain index, now declared in Meta.indexes (`event_kind`).
# - Foreign-key columns null on nearly every written row get a partial index (IS NOT NULL) instead of a full
#   one: allocation.mig_instance (null unless a MIG instance), event.actor / queue / node (null on every
#   admission event). `= x`, `IN (...)` and the foreign keys' own checks use a partial index (a strict
#   operator implies IS NOT NULL). The unique "one live allocation per MIG instance" index gets the same
#   condition (nulls never conflict: the same rule, without an entry per non-MIG allocation).
# Every foreign key constraint stays.
#
# The model state changes (db_index=False, the new Meta indexes) go through SeparateDatabaseAndState so that
# the database side only drops the named indexes: Django's AlterField(db_index=...) would drop and re-add each
# foreign key constraint on PostgreSQL (re-validating it over the whole table) and rebuild the whole table on
# SQLite. The names are those Django gave the indexes in the earlier migrations (the same on both backends);
# IF EXISTS keeps a database without one of them migrating.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (index, table, column): the single-column indexes this migration drops (created again on reverse)
_DROPPED = [
    ("gpuplatform_job_team_id_aa115574", "gpuplatform_job", "team_id"),
    ("gpuplatform_task_role_id_edbc511b", "gpuplatform_task", "role_id"),
    ("gpuplatform_allocation_job_id_4ca6c166", "gpuplatform_allocation", "job_id"),
    ("gpuplatform_allocation_mig_instance_id_7d12585d", "gpuplatform_allocation", "mig_instance_id"),
    ("gpuplatform_event_actor_id_b728e953", "gpuplatform_event", "actor_id"),
    ("gpuplatform_event_queue_id_2520d37e", "gpuplatform_event", "queue_id"),
    ("gpuplatform_event_node_id_41fd425e", "gpuplatform_event", "node_id"),
]
_KIND, _KIND_LIKE, _KIND_NEW = ("gpuplatform_event_kind_4ab9056d", "gpuplatform_event_kind_4ab9056d_like",
                                "event_kind")


def _exists(schema_editor, name: str) -> bool:
    with schema_editor.connection.cursor() as cur:
        if schema_editor.connection.vendor == "postgresql":
            cur.execute("SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = %s", [name])
        elif schema_editor.connection.vendor == "sqlite":
            cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = %s", [name])
        else:
            return True
        return cur.fetchone() is not None


def forwards(apps, schema_editor):
    q = schema_editor.quote_name
    for name, _, _ in _DROPPED:
        schema_editor.execute(f"DROP INDEX IF EXISTS {q(name)}")
    schema_editor.execute(f"DROP INDEX IF EXISTS {q(_KIND_LIKE)}")
    # event.kind: the existing plain index under its new name (PostgreSQL renames it: no rebuild of the index
    # over a long audit log); SQLite has no ALTER INDEX ... RENAME, so it is built again
    if schema_editor.connection.vendor == "postgresql" and _exists(schema_editor, _KIND):
        schema_editor.execute(f"ALTER INDEX {q(_KIND)} RENAME TO {q(_KIND_NEW)}")
    else:
        schema_editor.execute(f"DROP INDEX IF EXISTS {q(_KIND)}")
        schema_editor.execute(f"CREATE INDEX {q(_KIND_NEW)} ON {q('gpuplatform_event')} ({q('kind')})")


def backwards(apps, schema_editor):
    q = schema_editor.quote_name
    for name, table, column in _DROPPED:
        schema_editor.execute(f"CREATE INDEX {q(name)} ON {q(table)} ({q(column)})")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX {q(_KIND_NEW)} RENAME TO {q(_KIND)}")
        schema_editor.execute(f"CREATE INDEX {q(_KIND_LIKE)} ON {q('gpuplatform_event')} ({q('kind')} varchar_pattern_ops)")
    else:
        schema_editor.execute(f"DROP INDEX IF EXISTS {q(_KIND_NEW)}")
        schema_editor.execute(f"CREATE INDEX {q(_KIND)} ON {q('gpuplatform_event')} ({q('kind')})")


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0020_spares'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.AlterField(
                    model_name='allocation',
                    name='job',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='allocations', to='gpuplatform.job'),
                ),
                migrations.AlterField(
                    model_name='allocation',
                    name='mig_instance',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='gpuplatform.miginstance'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='actor',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='kind',
                    field=models.CharField(max_length=40),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='node',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='gpuplatform.node'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='queue',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='gpuplatform.queue'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='team',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='gpuplatform.team'),
                ),
                migrations.AlterField(
                    model_name='task',
                    name='role',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='task_set', to='gpuplatform.jobrole'),
                ),
                migrations.AddIndex(
                    model_name='event',
                    index=models.Index(fields=['kind'], name='event_kind'),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name='allocation',
            index=models.Index(condition=models.Q(('mig_instance__isnull', False)), fields=['mig_instance'], name='allocation_mig_instance_set'),
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(condition=models.Q(('actor__isnull', False)), fields=['actor'], name='event_actor_set'),
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(condition=models.Q(('queue__isnull', False)), fields=['queue'], name='event_queue_set'),
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(condition=models.Q(('node__isnull', False)), fields=['node'], name='event_node_set'),
        ),
        migrations.RemoveConstraint(
            model_name='allocation',
            name='allocation_one_live_per_mig_instance',
        ),
        migrations.AddConstraint(
            model_name='allocation',
            constraint=models.UniqueConstraint(condition=models.Q(('mig_instance__isnull', False), ('released_at__isnull', True)), fields=('mig_instance',), name='allocation_one_live_per_mig_instance'),
        ),
    ]
