"""The one writer of Allocation rows: every allocation (the scheduling cycle's starts, an elastic job's growth,
the Slurm backend's re-placement) is inserted by `write_allocations`, which checks its references in bulk.
Nothing else creates Allocation rows (tests/platform/test_layers.py checks the source). Call inside the
caller's transaction.

Migration 0023_e2e9 dropped the database's foreign-key constraints of allocation.task_id, allocation.gpu_id and
allocation.job_id (issue 16: PostgreSQL checked them row by row, three checks per allocated GPU, ~0.1 s of server
CPU per 10,000 starts); `write_allocations` checks the same references with one statement each
(bulk.lock_keys), with the same locks (FOR KEY SHARE on the GPU and task rows until the transaction ends):

- task_id: the task row exists, and its job_id is the allocation's job_id (one statement for both);
- job_id: therefore implied by the task's own foreign key to its job (task.job_id, kept);
- gpu_id: the GPU row exists. The one place that deletes GPU rows (services.nodes.register_node) locks them FOR
  UPDATE before Django looks for their allocations (on_delete PROTECT), so a GPU is never deleted under an
  allocation written meanwhile.
A missing row raises django.db.IntegrityError, as the constraint did: the caller's transaction fails. The
MIG instance's foreign key (null on nearly every row) is kept.
"""
from __future__ import annotations

from django.db import IntegrityError

from . import bulk
from .models import Allocation, Gpu, Task

__all__ = ["ALLOCATION_FIELDS", "write_allocations"]

# The columns of write_allocations' rows, in order.
ALLOCATION_FIELDS = ("task_id", "gpu_id", "job_id", "created_at", "gpu_milli", "gpu_memory_mib", "mig_instance_id")


def write_allocations(rows, *, check: bool = True) -> int:
    """Insert allocations: `rows` = [(task id, GPU id, job id, created_at, gpu_milli, gpu_memory_mib, MIG instance id
    or None)] (ALLOCATION_FIELDS). Returns how many were written. Raises django.db.IntegrityError when a GPU or MIG
    instance already has a live allocation (the partial unique indexes: the caller's savepoint rolls back) or, when
    `check` (the default), when a task, its job or a GPU is missing (above). `check=False`: the caller runs
    check_references itself later in the same transaction (the cycle does, before its task update)."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return 0
    bulk.insert_rows(Allocation, ALLOCATION_FIELDS, rows)
    if check:
        check_references(rows)
    return len(rows)


def check_references(rows) -> None:
    """The dropped foreign keys' checks for allocation rows as write_allocations takes them (module docstring):
    two statements whatever the number of rows. Raises django.db.IntegrityError."""
    if not rows:
        return
    bulk.lock_keys(Gpu, {r[1] for r in rows}, what="allocation.gpu_id")
    tasks = {r[0]: r[2] for r in rows}
    if len(tasks) != len({(r[0], r[2]) for r in rows}):
        raise IntegrityError("allocation.job_id: one task's allocations name different jobs")
    bulk.lock_keys(Task, list(tasks), also=("job_id", list(tasks.values())), what="allocation.task_id / job_id")
