"""Job.pending_reason_code: the code of the scheduling cycle's reason (scheduler.core's PendingReason.code, the
vocabulary in scheduler.core.snapshot.PENDING_CODES) next to its words (Job.pending_reason), written by the cycle in
the same statement (scheduling/store._update_pending) and cleared wherever the words are. The queueing page names the
rule that refuses a never-fits job from it, and the jobs API shows it, instead of re-running the quota rules on
rebuilt queues (which skipped jobs of GPU shares and of roles on different flavors).

Existing rows get "" (no code): a pending job's code is written by the next cycle, seconds later; nothing is guessed
from the words. Reversed: the column is dropped.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("gpuplatform", "0031_node_state_since"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="pending_reason_code",
            field=models.CharField(blank=True, help_text="the code of the scheduling cycle's reason for pending_reason (its PendingReason.code, scheduler.core.snapshot.PENDING_CODES); blank before a cycle saw the job and whenever pending_reason is not a cycle's", max_length=40),
        ),
    ]
