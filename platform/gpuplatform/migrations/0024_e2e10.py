"""Issue 16 (session 10, branch e2e10): the foreign-key constraints of allocation.gpu_id and task.node_id are replaced
by their two halves, each done in bulk or where it is rare:

- the referencing side (the row names an existing GPU / node, which stays until the transaction ends): the writers
  check every id they write in one statement, locking the referenced rows FOR KEY SHARE as PostgreSQL's own check
  does (bulk.lock_keys), and raise IntegrityError as the constraint did: allocations.write_allocations (the one
  writer of Allocation rows) the GPUs, allocations.check_nodes called by each writer of a task's node (the cycle's
  starts, slow path and growth in scheduling/store.py, the Slurm backend's re-placement). PostgreSQL checked the
  constraints row by row (one query through SPI per row, ~5 us of server CPU each: 13,035 GPU and 10,000 node
  checks per headline cycle of 10,000 starts).
- the referenced side (a GPU named by an allocation, a node named by a task, cannot be deleted nor its key
  changed): constraint triggers on gpuplatform_gpu and gpuplatform_node, AFTER DELETE / UPDATE OF id, DEFERRABLE
  INITIALLY DEFERRED as the constraints were, that fail with foreign_key_violation (IntegrityError) when a row still
  names the deleted one. As with the constraint, a delete waits for a writer holding the row FOR KEY SHARE, and the
  check at its commit (READ COMMITTED, every writer of the platform: a fresh snapshot) sees what that writer
  committed. Deletes of GPUs and nodes are rare (the admin, node registration); Django's PROTECT (GPU) and
  SET_NULL (a node's tasks) still run first.

Migration 0023_e2e9 kept these constraints because only the database sees an allocation or a task written while a
GPU or node is deleted; the triggers keep that. PostgreSQL only: elsewhere (SQLite) no constraint and no trigger, Django's PROTECT
as for the other writer-checked columns. tests/platform/test_references.py.
"""

import django.db.models.deletion
from django.db import migrations, models

_FUNCTION = """
CREATE OR REPLACE FUNCTION gpuplatform_still_referenced() RETURNS trigger LANGUAGE plpgsql AS $$
-- TG_ARGV: the referencing table and column; fails when a row there still names OLD.id (the deleted or re-keyed row)
DECLARE
    named boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I = $1)', TG_ARGV[0], TG_ARGV[1]) INTO named USING OLD.id;
    IF named THEN
        RAISE EXCEPTION 'update or delete on table "%" violates the reference %.%', TG_TABLE_NAME, TG_ARGV[0], TG_ARGV[1]
            USING ERRCODE = 'foreign_key_violation', DETAIL = format('Key (id)=(%s) is still referenced from table "%s".',
                                                                     OLD.id, TG_ARGV[0]);
    END IF;
    RETURN NULL;
END $$;
"""
_TRIGGERS = """
CREATE CONSTRAINT TRIGGER allocation_gpu_id_delete AFTER DELETE ON gpuplatform_gpu
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION gpuplatform_still_referenced('gpuplatform_allocation', 'gpu_id');
CREATE CONSTRAINT TRIGGER allocation_gpu_id_rekey AFTER UPDATE OF id ON gpuplatform_gpu
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION gpuplatform_still_referenced('gpuplatform_allocation', 'gpu_id');
CREATE CONSTRAINT TRIGGER task_node_id_delete AFTER DELETE ON gpuplatform_node
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION gpuplatform_still_referenced('gpuplatform_task', 'node_id');
CREATE CONSTRAINT TRIGGER task_node_id_rekey AFTER UPDATE OF id ON gpuplatform_node
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION gpuplatform_still_referenced('gpuplatform_task', 'node_id');
"""
_DROP = """
DROP TRIGGER IF EXISTS task_node_id_rekey ON gpuplatform_node;
DROP TRIGGER IF EXISTS task_node_id_delete ON gpuplatform_node;
DROP TRIGGER IF EXISTS allocation_gpu_id_rekey ON gpuplatform_gpu;
DROP TRIGGER IF EXISTS allocation_gpu_id_delete ON gpuplatform_gpu;
DROP FUNCTION IF EXISTS gpuplatform_still_referenced();
"""


def _triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_FUNCTION, None)  # None: no placeholders (format() uses %I, %s)
        schema_editor.execute(_TRIGGERS, None)


def _no_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_DROP, None)


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0023_e2e9'),
    ]

    operations = [
        migrations.AlterField(
            model_name='allocation',
            name='gpu',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='gpuplatform.gpu'),
        ),
        migrations.AlterField(
            model_name='task',
            name='node',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='tasks', to='gpuplatform.node'),
        ),
        migrations.RunPython(_triggers, _no_triggers),
    ]
