# Issue 16 (session 14, branch e2eschema): fewer index entries per row the cycle writes when it starts jobs.
#
# - job.submitter: a partial index (IS NOT NULL) instead of the full one. The cycle rewrites every started job's row
#   and that update is not HOT (state is indexed), so each job index gets a new entry; the submitter is null on every
#   job a trace replay or a benchmark submits. `submitter = x`, `IN (...)` (the job list's filter, the user's last
#   job, SET_NULL when a user is deleted) use a partial index (a strict operator implies IS NOT NULL).
# - event.kind: indexed for every kind but "admitted" (event_kind_not_admitted, in place of event_kind). The cycle
#   writes one admission per started job; nothing looks admissions up by kind alone (a job's events are read by job,
#   a listing by the time index). `kind = 'x'` / `kind IN (...)` of other kinds still uses the index (PostgreSQL
#   proves kind <> 'admitted' from the constants).
# - gpu.node: no index of its own; the unique (node, index) index leads with it (not written by the cycle: GPU rows
#   are written when a node registers, and updated by health changes).
#
# As in 0021_e2e2, the field changes (db_index=False) go through SeparateDatabaseAndState so that the database side
# only drops the named index (Django's AlterField(db_index=...) would drop and re-add the foreign key constraint on
# PostgreSQL and rebuild the table on SQLite). The names are those Django gave the indexes (the same on both
# backends); IF EXISTS keeps a database without one of them migrating.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (index, table, column): the single-column indexes this migration drops (created again on reverse)
_DROPPED = [
    ("gpuplatform_job_submitter_id_50ab0661", "gpuplatform_job", "submitter_id"),
    ("gpuplatform_gpu_node_id_117319b6", "gpuplatform_gpu", "node_id"),
]


def forwards(apps, schema_editor):
    q = schema_editor.quote_name
    for name, _, _ in _DROPPED:
        schema_editor.execute(f"DROP INDEX IF EXISTS {q(name)}")


def backwards(apps, schema_editor):
    q = schema_editor.quote_name
    for name, table, column in _DROPPED:
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {q(name)} ON {q(table)} ({q(column)})")


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0024_e2e10'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='submitter',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='gpu',
                    name='node',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='gpus', to='gpuplatform.node'),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('submitter__isnull', False)), fields=['submitter'], name='job_submitter_set'),
        ),
        migrations.RemoveIndex(
            model_name='event',
            name='event_kind',
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(condition=models.Q(('kind', 'admitted'), _negated=True), fields=['kind'], name='event_kind_not_admitted'),
        ),
    ]
