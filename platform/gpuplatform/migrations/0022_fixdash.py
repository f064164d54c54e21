# QueueSample.used / pending_demand in GPU-equivalents (new-user trial 3, item 3): a 0.25 GPU share counts 0.25,
# as the scheduler charges it against the queue's quota (an integer column counted it as a whole GPU).
# ClusterSample.held_at (item 4): which GPUs held_gpus counts, so the topology map shows them held, not free.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0021_e2e2'),
    ]

    operations = [
        migrations.AddField(
            model_name='clustersample',
            name='held_at',
            field=models.JSONField(blank=True, default=dict, help_text='which GPUs held_gpus counts: {node name: [GPU indices]} (CycleResult.held), for the topology map'),
        ),
        migrations.AlterField(
            model_name='queuesample',
            name='pending_demand',
            field=models.FloatField(help_text="GPU-equivalents the subtree's pending jobs ask for"),
        ),
        migrations.AlterField(
            model_name='queuesample',
            name='used',
            field=models.FloatField(help_text="GPU-equivalents allocated to the subtree's jobs"),
        ),
    ]
