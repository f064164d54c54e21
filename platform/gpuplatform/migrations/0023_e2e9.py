"""Issue 16 (session 9, branch e2e9): the foreign-key constraints of allocation.task_id, allocation.job_id and
event.job_id are dropped from the database; the columns, their indexes and Django's on_delete (CASCADE /
SET_NULL, done by Django's collector) stay. Every other foreign key keeps its constraint.

Why: PostgreSQL checks a foreign key row by row (one query through SPI per row, ~5 us of server CPU each): a
cycle starting 10,000 jobs on 13,035 GPUs ran ~36,000 such checks for these three columns. The one writer of each
table now checks the same references with one statement, taking the same lock (FOR KEY SHARE until the
transaction ends; gpuplatform.bulk.lock_keys), and raises IntegrityError as the constraint did:

- allocation (gpuplatform.allocations.write_allocations, the one writer of Allocation rows): the task exists AND
  is a task of the allocation's job, in one statement; allocation.job_id is thereby implied by task.job_id's own
  foreign key (kept).
- event (gpuplatform.audit, the one writer of Events): the job ids exist.
Tasks are deleted only with their job, and jobs only by `manage.py demo`'s reset (the admin's job and task pages
are read-only). allocation.gpu_id keeps its constraint: GPUs are deleted by the admin and by node registration,
where only the database's own check sees an allocation written meanwhile.
tests/platform/test_layers.py checks on the source that nothing else writes these rows;
tests/platform/test_references.py that a missing row fails the write, on PostgreSQL and SQLite.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0022_fixdash'),
    ]

    operations = [
        migrations.AlterField(
            model_name='allocation',
            name='job',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='allocations', to='gpuplatform.job'),
        ),
        migrations.AlterField(
            model_name='allocation',
            name='task',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='allocations', to='gpuplatform.task'),
        ),
        migrations.AlterField(
            model_name='event',
            name='job',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='gpuplatform.job'),
        ),
    ]
