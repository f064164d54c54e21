"""The one writer of Allocation rows: every allocation (the scheduling cycle's starts, an elastic job's growth,
the Slurm backend's re-placement) is inserted by `write_allocations`, which checks its task and job in bulk.
Nothing else creates Allocation rows (tests/platform/test_layers.py checks the source). Call inside the
caller's transaction.

Migration 0023_e2e9 dropped the database's foreign-key constraints of allocation.task_id and allocation.job_id
(issue 16: PostgreSQL checked them row by row, two checks per allocated GPU, ~0.1 s of server CPU per 10,000
starts); `write_allocations` checks the same references with one statement (bulk.lock_keys), with the same lock
(FOR KEY SHARE on the task rows until the transaction ends): the task exists AND is a task of the allocation's job,
so job_id is implied by the task's own foreign key to its job (task.job_id, kept). A missing task, or a task of
another job, raises django.db.IntegrityError, as the constraint did: the caller's transaction fails. Tasks are
deleted only with their job (Django's CASCADE, which deletes their allocations too). Unlike the constraint, this
checks the insert side only: the database no longer re-checks on a job's delete, so the one deleter of jobs (the
demo's workload reset) locks the job and task tables EXCLUSIVE first, waiting for every writer holding those locks.

Migration 0024_e2e10 dropped allocation.gpu_id's constraint too (13,035 row-by-row checks per headline cycle):
`write_allocations` checks the GPU ids in one statement with the same lock (FOR KEY SHARE on the GPU rows), and a
deferred constraint trigger on the GPU table refuses, at the deleter's commit, the delete (or re-keying) of a GPU an
allocation names: a delete waits for the writer's lock, then sees its allocation (the migration's docstring). The same
migration dropped task.node_id's: every writer of a task's node calls `check_nodes` (the cycle's starts and growth, the
Slurm backend's re-placement), and the node table has the same trigger.

Migration 0033_deferred_fk dropped the last one, allocation.mig_instance_id's: PostgreSQL queues a deferred foreign
key's check for every row inserted, null or not, and runs the queue at the commit (13,035 null checks per headline
cycle); `check_mig_instances` checks the instances named (none, for whole GPUs and fractions) with the same lock, and
the MIG instance table has the same trigger.
"""
from __future__ import annotations

from django.db import IntegrityError

from . import bulk
from .models import Allocation, Gpu, MigInstance, Node, Task

__all__ = ["ALLOCATION_FIELDS", "check_gpus", "check_mig_instances", "check_nodes", "check_references",
           "check_updated_tasks", "write_allocation_batches", "write_allocations"]

# The columns of write_allocations' rows, in order.
ALLOCATION_FIELDS = ("task_id", "gpu_id", "job_id", "created_at", "gpu_milli", "gpu_memory_mib", "mig_instance_id")


def write_allocations(rows, *, check: bool = True) -> int:
    """Insert allocations: `rows` = [(task id, GPU id, job id, created_at, gpu_milli, gpu_memory_mib, MIG instance id
    or None)] (ALLOCATION_FIELDS). Returns how many were written. Raises django.db.IntegrityError when a GPU or MIG
    instance already has a live allocation (the partial unique indexes: the caller's savepoint rolls back) or, when
    `check` (the default), when a task is missing or is not a task of the job named, or a GPU or MIG instance is
    missing (above).
    `check=False`: the caller runs the checks itself later in the same transaction, check_gpus, check_mig_instances
    and check_references (or check_updated_tasks: the cycle, with its task update)."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return 0
    bulk.insert_rows(Allocation, ALLOCATION_FIELDS, rows)
    if check:
        check_references(rows)
        check_gpus(rows)
        check_mig_instances(rows)
    return len(rows)


def write_allocation_batches(batches) -> int:
    """Insert allocations that come in batches (an iterable of lists of rows as write_allocations takes them), in one
    statement (bulk.insert_batches: on PostgreSQL one COPY that sends each batch as it comes, so the server inserts one
    while the caller builds the next). Returns how many were written. The unique indexes as write_allocations'; the
    references are NOT checked here: the caller runs check_gpus, check_mig_instances and check_references (or
    check_updated_tasks) later in
    the same transaction (the scheduling cycle's fast path, with its task update), as write_allocations(check=False)."""
    return bulk.insert_batches(Allocation, ALLOCATION_FIELDS, batches)


_GPU_AT = ALLOCATION_FIELDS.index("gpu_id")
_MIG_AT = ALLOCATION_FIELDS.index("mig_instance_id")


def check_gpus(rows, together: bulk.Together | None = None) -> bulk.Pending | None:
    """allocation.gpu_id's check (migration 0024_e2e10): every GPU the rows name exists, locked FOR KEY SHARE until the
    transaction ends (one statement, bulk.lock_keys), so no GPU they name can be deleted before the commit (and a
    delete after it fails at the GPU table's trigger). Raises django.db.IntegrityError. `together` (bulk.together):
    the statement queued there; the Pending returned raises from its check()."""
    ids = [r[_GPU_AT] for r in rows]
    if together is not None:
        return together.lock_keys(Gpu, ids, what="allocation.gpu_id")
    bulk.lock_keys(Gpu, ids, what="allocation.gpu_id")
    return None


def check_mig_instances(rows, together: bulk.Together | None = None) -> bulk.Pending | None:
    """allocation.mig_instance_id's check (migration 0033_deferred_fk): every MIG instance the rows name exists, locked
    FOR KEY SHARE until the transaction ends (one statement; none when no row names one), so none can be deleted
    before the commit (and a delete after it fails at the instance table's trigger). Raises django.db.IntegrityError.
    `together`: as check_gpus'."""
    ids = [r[_MIG_AT] for r in rows if r[_MIG_AT] is not None]
    if together is not None:
        return together.lock_keys(MigInstance, ids, what="allocation.mig_instance_id")
    bulk.lock_keys(MigInstance, ids, what="allocation.mig_instance_id")
    return None


def check_nodes(node_ids, together: bulk.Together | None = None) -> bulk.Pending | None:
    """task.node_id's check (migration 0024_e2e10), for every writer that places tasks on nodes, after its update in
    the same transaction: every node id exists, locked FOR KEY SHARE until the transaction ends (one statement), so
    none can be deleted before the commit (and a delete after it fails at the node table's trigger). None is not
    checked (a task off its node). Raises django.db.IntegrityError. `together`: as check_gpus'."""
    ids = [n for n in node_ids if n is not None]
    if together is not None:
        return together.lock_keys(Node, ids, what="task.node_id")
    bulk.lock_keys(Node, ids, what="task.node_id")
    return None


def check_references(rows) -> None:
    """The dropped foreign keys' checks for allocation rows as write_allocations takes them (module docstring):
    one statement whatever the number of rows. Raises django.db.IntegrityError."""
    if not rows:
        return
    tasks = {r[0]: r[2] for r in rows}  # task id -> job id (the last row's)
    if any(tasks[r[0]] != r[2] for r in rows):
        raise IntegrityError("allocation.job_id: one task's allocations name different jobs")
    bulk.lock_keys(Task, list(tasks), also=("job_id", list(tasks.values())), what="allocation.task_id / job_id")


def check_updated_tasks(rows, task_jobs: dict) -> None:
    """The same check for allocation rows whose tasks the caller has itself updated in this transaction with a
    per-row compare-and-set on the task's job (the scheduling cycle's task update: `UPDATE task ... WHERE id = v.id
    AND job_id = v.job`, every row counted): `task_jobs` = {task id: job id} of exactly the task rows that update
    changed. Those rows exist, are tasks of those jobs and are locked (FOR UPDATE, stronger than the FOR KEY SHARE
    of check_references) until the transaction ends, so what is left to check needs no statement: each allocation
    names one of them, with its job. Raises django.db.IntegrityError as check_references does."""
    wrong = [(r[0], r[2]) for r in rows if task_jobs.get(r[0], _NONE) != r[2]]
    if wrong:
        raise IntegrityError(f"allocation.task_id / job_id: {len(wrong)} allocation(s) naming no task of their job "
                             f"updated here (first {wrong[:5]})")


_NONE = object()
