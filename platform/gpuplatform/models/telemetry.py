"""GPU telemetry (DESIGN section 14, docs/telemetry.md): samples from the node agents, kept bounded and
downsampled, XID events, per-task utilization summaries and idle allocations. Kept apart from node health
(models/cluster.py Gpu.health): telemetry measures, health rules decide."""
from django.db import models


class GpuSample(models.Model):
    """One GPU over one period. level 0 = a raw agent sample (period = the agent's interval), 1 = a 1-minute
    mean, 2 = a 15-minute mean (`samples` raw samples folded in). None = the driver did not report it (never
    a zero). Units: sm percent 0-100, fb MiB, power W, temp degrees C; throttle = OR of the NVML
    clocks-throttle-reason bits; ecc_dbe = volatile double-bit (uncorrectable) ECC count, the period's max;
    nvlink_down = links down, the period's max. `job` / `task`: holding the GPU when sampled (None = free)."""

    RAW, MINUTE, QUARTER = 0, 1, 2
    LEVEL_SECONDS = {MINUTE: 60, QUARTER: 900}

    gpu = models.ForeignKey("gpuplatform.Gpu", on_delete=models.CASCADE, related_name="samples", db_index=False)
    level = models.PositiveSmallIntegerField(default=RAW)
    time = models.DateTimeField()
    period = models.FloatField(help_text="seconds the row covers")
    samples = models.PositiveIntegerField(default=1)
    sm = models.FloatField(null=True, blank=True)
    fb_used = models.FloatField(null=True, blank=True)
    fb_free = models.FloatField(null=True, blank=True)
    power = models.FloatField(null=True, blank=True)
    temp = models.FloatField(null=True, blank=True)
    throttle = models.BigIntegerField(null=True, blank=True)
    ecc_dbe = models.BigIntegerField(null=True, blank=True)
    nvlink_down = models.SmallIntegerField(null=True, blank=True)
    job = models.ForeignKey("gpuplatform.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                            db_constraint=False, db_index=False)
    task = models.ForeignKey("gpuplatform.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                             db_constraint=False, db_index=False)

    class Meta:
        indexes = [models.Index(fields=["gpu", "level", "time"]), models.Index(fields=["level", "time"]),
                   models.Index(fields=["job", "time"], condition=models.Q(job__isnull=False), name="gpusample_job_time")]


class GpuXid(models.Model):
    """An XID event the driver reported for a GPU (NVIDIA's XID catalog), at the server's time."""

    gpu = models.ForeignKey("gpuplatform.Gpu", on_delete=models.CASCADE, related_name="xid_events")
    time = models.DateTimeField()
    xid = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["gpu", "time"])]


class TaskUtilization(models.Model):
    """A task's GPU utilization, kept with the job after its end: histograms of SM percent (101 bins, 0..100)
    and framebuffer used (1 GiB bins), from which mean and p95 are exact to the bin. Raw samples are folded
    in when they are downsampled (retention), so the summary survives them."""

    task = models.OneToOneField("gpuplatform.Task", on_delete=models.CASCADE, related_name="utilization")
    job = models.ForeignKey("gpuplatform.Job", on_delete=models.CASCADE, related_name="task_utilization")
    sm_hist = models.JSONField(default=dict, help_text="percent -> samples")
    fb_hist = models.JSONField(default=dict, help_text="GiB -> samples")
    samples = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class IdleAllocation(models.Model):
    """A running job whose GPUs stayed under IDLE_SM_PERCENT for IDLE_MINUTES: idle from `since` until
    `ended_at` (the job used its GPUs again or ended; None = still idle). `gpus`: GPUs it held."""

    job = models.ForeignKey("gpuplatform.Job", on_delete=models.CASCADE, related_name="idle_periods")
    since = models.DateTimeField()
    marked_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    gpus = models.PositiveIntegerField()
    warned_at = models.DateTimeField(null=True, blank=True, help_text="owner told the idle timeout will stop it")

    class Meta:
        indexes = [models.Index(fields=["ended_at", "job"])]
