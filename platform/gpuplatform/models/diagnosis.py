from django.db import models
from django.db.models import Q

__all__ = ["Attempt", "DiagnosisRule", "HealthRule"]


class Attempt(models.Model):
    """One attempt of a job (docs/diagnosis.md): from its binding to its end (requeue, restart or end).
    `number` is the job's attempt counter while it ran (the `attempt` the agents report, 0-based).
    `failed` = ended by a fault (a task failed, a node or GPU failed, the time limit, the gang did not
    start): not by preemption, cancel or success. `fault_at` = when the first fault was seen;
    `recovered_at` = when every task of the next attempt ran again; `recovery_seconds` = the difference.
    `diagnosis` = {category, summary, evidence: [{task, source, line, text}], action, rule, node, task}.
    `gpu_seconds` = GPUs held x (ended_at - started_at): the GPU time a failed attempt lost."""

    job = models.ForeignKey("gpuplatform.Job", on_delete=models.CASCADE, related_name="attempt_records")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, help_text="restarted | requeued | succeeded | failed | cancelled")
    failed = models.BooleanField(default=False)
    nodes = models.JSONField(default=list, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    gpu_seconds = models.FloatField(default=0)
    failed_task = models.CharField(max_length=100, blank=True)
    exit_code = models.SmallIntegerField(null=True, blank=True)
    signal = models.SmallIntegerField(null=True, blank=True)
    category = models.CharField(max_length=20, blank=True, db_index=True)
    diagnosis = models.JSONField(null=True, blank=True)
    fault_at = models.DateTimeField(null=True, blank=True)
    recovered_at = models.DateTimeField(null=True, blank=True)
    recovery_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="attempt_unique_job_number")]
        indexes = [models.Index(fields=["failed", "ended_at"])]


class DiagnosisRule(models.Model):
    """An admin's diagnosis rule, added after the shipped table (gpuplatform/diagnosis/rules.yaml). Same
    fields as a table entry: exactly one of `pattern` (a regular expression) and `when`
    ({"exit_code": [..]} / {"signal": n})."""

    name = models.CharField(max_length=100, unique=True)
    category = models.CharField(max_length=20)
    action = models.CharField(max_length=20, default="retry")
    pattern = models.TextField(blank=True)
    ignore_case = models.BooleanField(default=False)
    xids = models.JSONField(null=True, blank=True)
    when = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=500, help_text="where the message comes from")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def as_entry(self) -> dict:
        entry = {"id": f"admin:{self.name}", "category": self.category, "action": self.action,
                 "source": self.source, "ignore_case": self.ignore_case}
        if self.pattern:
            entry["pattern"] = self.pattern
        if self.when:
            entry["when"] = self.when
        if self.xids is not None:
            entry["xids"] = self.xids
        return entry


class HealthRule(models.Model):
    """An admin's node health rule, added after gpuplatform/diagnosis/health_rules.yaml."""

    name = models.CharField(max_length=100, unique=True)
    signal = models.CharField(max_length=40)
    op = models.CharField(max_length=8)
    value = models.JSONField(null=True, blank=True)
    action = models.CharField(max_length=16)
    category = models.CharField(max_length=20, default="gpu_hardware")
    source = models.CharField(max_length=500)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.CheckConstraint(condition=~Q(source=""), name="healthrule_has_source")]

    def as_entry(self) -> dict:
        return {"id": f"admin:{self.name}", "signal": self.signal, "op": self.op, "value": self.value,
                "action": self.action, "category": self.category, "source": self.source}
