"""Issue 16 (session 10, branch e2e10): allocation.gpu_id's foreign-key constraint is replaced by its two halves, each
done in bulk or where it is rare:

- the referencing side (an allocation names an existing GPU, which stays until the transaction ends): the one
  writer of Allocation rows, gpuplatform.allocations.write_allocations, checks every GPU id it writes in one
  statement, locking the GPU rows FOR KEY SHARE as PostgreSQL's own check does (bulk.lock_keys), and raises
  IntegrityError as the constraint did. PostgreSQL checked the constraint row by row (one query through SPI per
  allocation, ~5 us of server CPU each: 13,035 per headline cycle of 10,000 starts).
- the referenced side (a GPU named by an allocation cannot be deleted, nor its key changed): a constraint trigger on
  gpuplatform_gpu, AFTER DELETE / UPDATE OF id, DEFERRABLE INITIALLY DEFERRED as the constraint was, that fails
  with foreign_key_violation (IntegrityError) when an allocation still names the GPU. As with the constraint, a
  delete waits for a writer holding the GPU row FOR KEY SHARE, and the check at its commit (READ COMMITTED, every
  writer of the platform: a fresh snapshot) sees what that writer committed. Deletes of GPUs are rare (the admin,
  node registration); Django's PROTECT still refuses them first.

Migration 0023_e2e9 kept this constraint because only the database sees an allocation written while a GPU is
deleted; the trigger keeps that. PostgreSQL only: elsewhere (SQLite) no constraint and no trigger, Django's PROTECT
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
"""
_DROP = """
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
        migrations.RunPython(_triggers, _no_triggers),
    ]
