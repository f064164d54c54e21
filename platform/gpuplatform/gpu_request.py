"""What a job asks for in GPUs, the one computation the API, the pages and the `submitted` Event share.

    gpu_equivalents(roles, bound_milli=0) -> int | float   GPU-equivalents (3 x 0.5 = 1.5)
    job_gpus(job) -> int | float                            the same for a saved job (memory shares: bound, or while
                                                            pending their share of the largest shared GPU)
    gpu_request(roles) -> str                               '1+2x0.25': per role, joined with '+' ('64 roles of 8' for a run)
    role_per_task(role) -> str                              one task's request: '2', '0.25', '40000MiB', '1x1g.18gb'
    as_gpus(value) -> int | float                           a GPU count for display: 105, 103.5 (never 103.49999)
    from_milli(milli) -> int | float                        thousandths of a GPU-equivalent (SQL sums) as GPUs

The SQL side (sums over many jobs in one query) is queries.role_gpu_milli / queries.allocation_gpu_milli: the same
rules in thousandths, turned back into GPUs with from_milli.

`roles` are JobRole rows or anything with their fields (tasks, gpus_per_task, gpu_milli, gpu_memory_mib,
mig_profile). Pure reads: no writes, no errors.
"""
from __future__ import annotations


def gpu_equivalents(roles, bound_milli: int = 0) -> int | float:
    """Sum over roles of tasks x gpus_per_task for whole GPUs (and MIG instances: one each), tasks x the
    fraction for shares (gpu_milli / 1000); a gpu_memory_mib role counts only `bound_milli` (thousandths of a
    GPU its bound tasks hold: its share depends on the GPU, so 0 while pending). An int when whole, else
    rounded to 3 decimals."""
    total = bound_milli / 1000
    for r in roles:
        if getattr(r, "gpu_milli", 0):
            total += r.tasks * r.gpu_milli / 1000
        elif not getattr(r, "gpu_memory_mib", 0):
            total += r.tasks * r.gpus_per_task
    return as_gpus(total)


def as_gpus(value) -> int | float:
    """A GPU count as shown everywhere: an int when whole (105, not 105.0), else rounded to 3 decimals (103.5,
    not 103.49999). None stays None."""
    if value is None:
        return None
    value = round(float(value), 3)
    return int(value) if value.is_integer() else value


def from_milli(milli) -> int | float:
    """Thousandths of a GPU-equivalent (an integer sum, e.g. from queries.allocation_gpu_milli) as GPUs."""
    return as_gpus((milli or 0) / 1000)


def shared_gpu_memory() -> int:
    """MiB of the largest GPU that takes shares (sharing mode shared or auto), 0 when none does: the GPU on which
    a GPU-memory request is the smallest share, the share a pending one is counted at (one query)."""
    from django.db.models import Max

    from .models import Gpu

    return Gpu.objects.filter(sharing__in=(Gpu.Sharing.SHARED, Gpu.Sharing.AUTO)).aggregate(
        m=Max("memory_mib"))["m"] or 0


def job_gpus(job, gpu_memory=None) -> int | float:
    """gpu_equivalents of a saved job's roles, with its memory-share roles' live allocations (one query,
    only when it has such a role). A pending job's memory-share roles count, per task, their share of the
    largest GPU that takes shares, rounded up as the engine charges it (scheduler.core.sharing.task_milli; new-user
    trial 16, F12: such a job read 0 while pending, 0.14 in its reason, 0.487 once running). `gpu_memory`: that
    GPU's MiB, or a function giving it (called only for such a job: a list passes one that reads it once per
    request), default shared_gpu_memory(). The SQL twin over many jobs is queries.job_gpus_milli."""
    from scheduler.core.sharing import task_milli

    from .models import Allocation, Job

    roles = list(job.roles.all())
    memory_roles = [r for r in roles if getattr(r, "gpu_memory_mib", 0) and not r.gpu_milli]
    bound = 0
    if memory_roles:
        if job.state == Job.State.PENDING:
            gpu_memory = shared_gpu_memory() if gpu_memory is None else gpu_memory() if callable(gpu_memory) \
                else gpu_memory
            bound = sum(r.tasks * task_milli(r, gpu_memory) for r in memory_roles)
        else:
            bound = sum(Allocation.objects.filter(task__role_id__in=[r.pk for r in memory_roles],
                                                  released_at__isnull=True).values_list("gpu_milli", flat=True))
    return gpu_equivalents(roles, bound)


def role_per_task(r) -> str:
    """What one task of the role asks for: '2' (whole GPUs), '0.25' (a fraction of one GPU), '40000MiB' (GPU
    memory on one shared GPU), '1x1g.18gb' (MIG instances)."""
    if getattr(r, "gpu_milli", 0):
        return f"{r.gpu_milli / 1000:g}"
    if getattr(r, "gpu_memory_mib", 0):
        return f"{r.gpu_memory_mib}MiB"
    if getattr(r, "mig_profile", ""):
        return f"{r.gpus_per_task}x{r.mig_profile}"
    return str(r.gpus_per_task)


def gpu_request(roles) -> str:
    """What the job asks for per role, joined with '+': '4' (whole GPUs), '3x0.5' (fractions of one GPU),
    '2x20000MiB' (GPU memory on one shared GPU), '2x1g.18gb' (MIG instances). A run of three or more
    consecutive roles asking the same is written once with its count: 64 roles of one 8-GPU task each read
    '64 roles of 8', not 64 terms."""
    parts = []
    for r in roles:
        if getattr(r, "gpu_milli", 0) or getattr(r, "gpu_memory_mib", 0):  # a share of one GPU per task
            parts.append(f"{r.tasks}x{role_per_task(r)}")
        elif getattr(r, "mig_profile", ""):  # instances in all, not per task
            parts.append(f"{r.tasks * r.gpus_per_task}x{r.mig_profile}")
        else:
            parts.append(str(r.tasks * r.gpus_per_task))
    runs: list[list] = []
    for part in parts:
        if runs and runs[-1][0] == part:
            runs[-1][1] += 1
        else:
            runs.append([part, 1])
    return "+".join(f"{n} roles of {part}" if n >= 3 else "+".join([part] * n) for part, n in runs)
